//! The `next_id` rules (docs/DESIGN.md section 3) through the public API.

mod common;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{Breakage, Mode, Scripted, at, check_ids, check_increasing};
use grantid::{ErrorKind, Generator, Layout, ManualClock, MemoryAuthority};

fn small() -> Layout {
    Layout::new(20, 3, 4).unwrap()
}

/// A generator on a manual clock at tick `t`, with 1,000-tick grants.
fn manual(layout: Layout, t: u64, drift: u64, source: Scripted) -> (Generator, Arc<ManualClock>) {
    let clock = ManualClock::new(at(t));
    let g = Generator::builder(layout, "test", source)
        .clock(clock.clone())
        .max_drift_ms(drift)
        .max_wait(Duration::from_millis(30))
        .grant_duration_ms(1_000)
        .horizon_ms(1_000)
        .shards(2)
        .start()
        .unwrap();
    (g, clock)
}

fn all_ok(g: &Generator, n: usize) -> Vec<u64> {
    (0..n).map(|_| g.next_id().unwrap()).collect()
}

#[test]
fn the_worked_vectors_come_out_of_a_generator() {
    let layout = Layout::new(12, 3, 4).unwrap();
    let source = Scripted::new();
    // A first generator takes worker 0, so the second gets worker 1, as in
    // the worked example.
    let (_first, _) = manual(layout, 160, 0, source.clone());
    let (g, clock) = manual(layout, 160, 0, source.clone());
    assert_eq!(g.next_id().unwrap(), 20496);
    assert_eq!(g.next_id().unwrap(), 20497);
    assert_eq!(g.next_id().unwrap(), 20498);
    clock.set(at(161));
    assert_eq!(g.next_id().unwrap(), 20624);
}

#[test]
fn two_threads_at_a_tick_boundary() {
    let source = Scripted::new();
    let (g, clock) = manual(small(), 1_000, 0, source.clone());
    let g = Arc::new(g);
    let mut all = Vec::new();
    for round in 0..50u64 {
        clock.set(at(1_000 + round));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let g = Arc::clone(&g);
                thread::spawn(move || {
                    let mut mine = Vec::new();
                    // 16 per tick in all: together the threads exhaust the tick.
                    for _ in 0..10 {
                        match g.next_id() {
                            Ok(id) => mine.push(id),
                            Err(e) => assert_eq!(e.kind(), ErrorKind::CapacityExhausted),
                        }
                    }
                    mine
                })
            })
            .collect();
        for h in handles {
            let mine = h.join().unwrap();
            check_increasing(&mine);
            all.extend(mine);
        }
    }
    assert_eq!(
        all.len(),
        50 * 16,
        "every sequence number of every tick used"
    );
    check_ids(
        &small(),
        &all,
        &source.grants(),
        Some(g.stats().incarnation),
    );
}

#[test]
fn sequence_exhaustion_waits_then_fails() {
    let source = Scripted::new();
    let (g, clock) = manual(small(), 500, 0, source.clone());
    let mut ids = all_ok(&g, 16);
    let t0 = Instant::now();
    let err = g.next_id().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CapacityExhausted, "{err}");
    assert!(
        t0.elapsed() >= Duration::from_millis(30),
        "waited up to max_wait"
    );
    assert!(g.stats().waits >= 1);
    // A waiting call succeeds as soon as the clock moves.
    let mover = {
        let clock = clock.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(5));
            clock.advance(1);
        })
    };
    ids.push(g.next_id().unwrap());
    mover.join().unwrap();
    assert_eq!(small().decode(*ids.last().unwrap()).unwrap().timestamp, 501);
    check_increasing(&ids);
    check_ids(&small(), &ids, &source.grants(), None);
}

#[test]
fn drift_lets_a_burst_run_ahead_of_the_clock() {
    let source = Scripted::new();
    let (g, _clock) = manual(small(), 500, 3, source.clone());
    let ids = all_ok(&g, 64);
    let last = small().decode(ids[63]).unwrap();
    assert_eq!(last.timestamp, 503, "4 ticks of 16");
    assert_eq!(
        g.next_id().unwrap_err().kind(),
        ErrorKind::CapacityExhausted
    );
    check_increasing(&ids);
    check_ids(&small(), &ids, &source.grants(), None);
}

#[test]
fn clock_step_back_within_drift_continues_from_the_cursor() {
    let source = Scripted::new();
    let (g, clock) = manual(small(), 500, 10, source.clone());
    let mut ids = all_ok(&g, 5);
    clock.set(at(495));
    ids.extend(all_ok(&g, 5));
    clock.set(at(500));
    ids.extend(all_ok(&g, 5));
    check_increasing(&ids);
    check_ids(&small(), &ids, &source.grants(), None);
    assert_eq!(g.stats().clock_rollbacks, 0);
}

#[test]
fn clock_step_back_beyond_drift_waits_then_fails_then_recovers() {
    let source = Scripted::new();
    let (g, clock) = manual(small(), 500, 10, source.clone());
    let mut ids = all_ok(&g, 5);
    clock.set(at(400));
    let err = g.next_id().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ClockRollback, "{err}");
    assert!(err.message().contains("behind the cursor"), "{err}");
    assert!(g.stats().clock_rollbacks >= 1);
    // Back within drift of the cursor: issuing resumes, above every earlier ID.
    clock.set(at(491));
    ids.extend(all_ok(&g, 5));
    check_increasing(&ids);
    check_ids(&small(), &ids, &source.grants(), None);
}

#[test]
fn clock_jump_forward_moves_the_cursor() {
    let source = Scripted::new();
    let (g, clock) = manual(small(), 500, 0, source.clone());
    let mut ids = all_ok(&g, 3);
    clock.set(at(900));
    ids.extend(all_ok(&g, 3));
    assert_eq!(small().decode(ids[3]).unwrap().timestamp, 900);
    check_increasing(&ids);
    check_ids(&small(), &ids, &source.grants(), None);
}

#[test]
fn grant_end_of_the_timestamp_field_is_grant_exhausted() {
    let layout = Layout::new(12, 3, 4).unwrap();
    let source = Scripted::new();
    let (g, clock) = manual(layout, 4_090, 0, source.clone());
    let mut ids = all_ok(&g, 3);
    clock.set(at(4_095));
    ids.extend(all_ok(&g, 16));
    clock.set(at(4_096));
    let err = g.next_id().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::GrantExhausted, "{err}");
    check_ids(&layout, &ids, &source.grants(), None);
}

#[test]
fn a_clock_far_past_the_committed_end_is_refused_until_renewed() {
    let source = Scripted::new();
    let (g, clock) = manual(small(), 500, 0, source.clone());
    let mut ids = all_ok(&g, 3);
    let end = g.stats().grant_end.unwrap();
    source.set(Mode::Unavailable);
    clock.set(at(end + 10));
    // Never an ID past the committed end.
    let err = g.next_id().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    source.set(Mode::Normal);
    let deadline = Instant::now() + Duration::from_secs(10);
    let id = loop {
        match g.next_id() {
            Ok(id) => break id,
            Err(e) => {
                assert!(Instant::now() < deadline, "no recovery: {e}");
                thread::sleep(Duration::from_millis(2));
            }
        }
    };
    ids.push(id);
    assert!(small().decode(id).unwrap().timestamp >= end + 10);
    check_ids(&small(), &ids, &source.grants(), None);
}

#[test]
fn a_grant_in_the_future_is_not_yet_valid() {
    // The authority's clock runs 200 ms ahead of the generator's.
    let clock = ManualClock::new(at(1_000));
    let authority_clock = ManualClock::new(at(1_200));
    let source = Scripted::over(MemoryAuthority::new().with_clock(authority_clock));
    let g = Generator::builder(small(), "test", source.clone())
        .clock(clock.clone())
        .max_drift_ms(10)
        .max_wait(Duration::from_millis(20))
        .start()
        .unwrap();
    let err = g.next_id().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotYetValid, "{err}");
    clock.set(at(1_190));
    let id = g.next_id().unwrap();
    assert_eq!(
        small().decode(id).unwrap().timestamp,
        1_200,
        "within drift of the start"
    );
    check_ids(&small(), &[id], &source.grants(), None);
}

#[test]
fn invalid_grants_of_each_kind_are_refused() {
    for b in [
        Breakage::Namespace,
        Breakage::Incarnation,
        Breakage::WorkerRange,
        Breakage::Empty,
        Breakage::PastTimestampField,
    ] {
        let source = Scripted::new();
        source.set(Mode::Invalid(b));
        let err = Generator::builder(small(), "test", source.clone())
            .clock(ManualClock::new(at(100)))
            // Long enough for a loaded machine to record the first answers.
            .startup_timeout(Duration::from_millis(1_000))
            .backoff(Duration::from_millis(5), Duration::from_millis(10))
            .start()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{b:?}: {err}");
        assert!(err.message().contains("invalid grant"), "{b:?}: {err}");
        assert!(source.calls() >= 2, "{b:?}: retried");
    }
}

#[test]
fn invalid_renewals_are_refused_and_never_used() {
    for b in [Breakage::BeforeNotBefore, Breakage::OtherWorker] {
        let source = Scripted::new();
        let (g, clock) = manual(small(), 100, 0, source.clone());
        let mut ids = all_ok(&g, 3);
        source.set(Mode::Invalid(b));
        let end = g.stats().grant_end.unwrap();
        // Near the end of the committed grant: renewals are refused.
        clock.set(at(end - 1));
        let deadline = Instant::now() + Duration::from_secs(5);
        while g.stats().invalid_grants == 0 {
            assert!(Instant::now() < deadline, "{b:?}: no renewal attempted");
            thread::sleep(Duration::from_millis(2));
        }
        ids.extend(all_ok(&g, 2));
        clock.set(at(end));
        assert_eq!(
            g.next_id().unwrap_err().kind(),
            ErrorKind::Unavailable,
            "{b:?}"
        );
        check_ids(
            &small(),
            &ids,
            &source.grants(),
            Some(g.stats().incarnation),
        );
    }
}

#[test]
fn id_zero_is_never_issued_at_the_epoch() {
    let layout = Layout::new(20, 0, 4).unwrap();
    let source = Scripted::new();
    let (g, _clock) = manual(layout, 0, 0, source.clone());
    let ids = all_ok(&g, 15);
    assert_eq!(ids, (1..16).collect::<Vec<u64>>());
    assert_eq!(
        g.next_id().unwrap_err().kind(),
        ErrorKind::CapacityExhausted
    );
}

#[test]
fn batches_cross_ticks_and_are_all_or_nothing() {
    let source = Scripted::new();
    let (g, clock) = manual(small(), 700, 3, source.clone());
    let batch = g.next_ids(40).unwrap();
    assert_eq!(batch.len(), 40);
    check_increasing(&batch);
    let ticks: Vec<u64> = batch
        .iter()
        .map(|&id| small().decode(id).unwrap().timestamp)
        .collect();
    assert_eq!((ticks[0], ticks[39]), (700, 702));
    // 24 numbers are left up to the drift: a batch of 25 fails and writes nothing.
    let mut buf = [7u64; 25];
    let err = g.fill(&mut buf).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CapacityExhausted);
    assert_eq!(buf, [7u64; 25]);
    // What the failed batch reserved is burned, never handed out; once the
    // clock moves, the next batch comes after it.
    assert_eq!(
        g.next_id().unwrap_err().kind(),
        ErrorKind::CapacityExhausted
    );
    clock.advance(1);
    let rest = g.next_ids(16).unwrap();
    assert_eq!(small().decode(rest[0]).unwrap().timestamp, 704);
    let mut all = batch;
    all.extend(rest);
    check_ids(&small(), &all, &source.grants(), None);
    assert_eq!(g.next_ids(0).unwrap(), Vec::<u64>::new());
}

#[test]
fn a_batch_larger_than_max_batch_is_invalid() {
    let g = Generator::builder(Layout::default(), "test", MemoryAuthority::new())
        .max_batch(10)
        .start()
        .unwrap();
    let err = g.next_ids(11).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    // Checked before anything is allocated.
    assert_eq!(
        g.next_ids(usize::MAX).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert!(err.message().contains("max_batch"));
    assert_eq!(g.next_ids(10).unwrap().len(), 10);
}

#[test]
fn a_layout_whose_time_has_ended_is_refused_at_start() {
    // 2^30 ms after 2026-01-01 is in mid-January 2026.
    let err = Generator::builder(Layout::new(30, 4, 8).unwrap(), "t", MemoryAuthority::new())
        .start()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::GrantExhausted);
    assert!(err.message().contains("timestamp field ended"), "{err}");
}

#[test]
fn a_horizon_past_the_authority_lead_is_refused_at_start() {
    // Default horizon 5 s + grant 1 s against a lead of 4 s.
    let err = Generator::builder(
        Layout::default(),
        "t",
        MemoryAuthority::new().with_max_lead_ms(4_000),
    )
    .start()
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("max_lead_ms (4000)"), "{err}");
    // A horizon that fits starts and issues inside the bound.
    let g = Generator::builder(
        Layout::default(),
        "t",
        MemoryAuthority::new().with_max_lead_ms(4_000),
    )
    .grant_duration_ms(1_000)
    .horizon_ms(3_000)
    .start()
    .unwrap();
    assert!(g.next_id().unwrap() > 0);
    // Ticks longer than the lead: no grant could ever be made.
    let coarse = Layout::with_all(41, 10, 12, grantid::DEFAULT_EPOCH_MS, 10_000).unwrap();
    let err = Generator::builder(coarse, "t", MemoryAuthority::new().with_max_lead_ms(7_000))
        .start()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
}

#[test]
fn bad_options_are_invalid_arguments() {
    let cases = [
        Generator::builder(Layout::default(), "", MemoryAuthority::new()).start(),
        Generator::builder(Layout::default(), "t", MemoryAuthority::new())
            .shards(0)
            .start(),
        Generator::builder(Layout::default(), "t", MemoryAuthority::new())
            .max_batch(0)
            .start(),
        Generator::builder(Layout::default(), "t", MemoryAuthority::new())
            .grant_duration_ms(2_000)
            .horizon_ms(1_000)
            .start(),
        Generator::builder(Layout::default(), "t", MemoryAuthority::new())
            .backoff(Duration::ZERO, Duration::from_secs(1))
            .start(),
    ];
    for r in cases {
        assert_eq!(r.unwrap_err().kind(), ErrorKind::InvalidArgument);
    }
}

#[test]
fn try_next_id_never_waits() {
    let source = Scripted::new();
    let clock = ManualClock::new(at(300));
    let g = Generator::builder(small(), "test", source.clone())
        .clock(clock.clone())
        .max_drift_ms(0)
        .max_wait(Duration::from_secs(20))
        .start()
        .unwrap();
    let mut ids: Vec<u64> = (0..16).map(|_| g.try_next_id().unwrap()).collect();
    let t0 = Instant::now();
    assert_eq!(g.try_next_id(), None, "the tick is used up");
    // next_id would wait up to 20 s here.
    assert!(t0.elapsed() < Duration::from_secs(10), "try_next_id waited");
    clock.advance(1);
    ids.push(g.try_next_id().unwrap());
    check_increasing(&ids);
    check_ids(&small(), &ids, &source.grants(), None);
    g.close();
    assert_eq!(g.try_next_id(), None);
}

#[test]
fn decode_and_stats() {
    let source = Scripted::new();
    let (g, _clock) = manual(small(), 42, 0, source.clone());
    let id = g.next_id().unwrap();
    let d = g.decode(id).unwrap();
    assert_eq!(d.timestamp, 42);
    assert_eq!(d.unix_ms, at(42));
    assert_eq!(g.decode(0).unwrap_err().kind(), ErrorKind::InvalidArgument);
    let s = g.stats();
    assert_eq!(s.ids_issued, 1);
    assert_eq!(s.worker, Some(d.worker as u32));
    assert_eq!(s.grant_end, Some(1_042));
    assert_eq!(s.remaining_ticks, 1_000);
    assert_eq!(s.grants_acquired, 1);
}

#[test]
fn an_answer_that_is_not_a_grant_counts_as_invalid() {
    let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let memory = MemoryAuthority::new();
    let source = {
        let calls = Arc::clone(&calls);
        grantid::source_fn(move |r: &grantid::GrantRequest| {
            // The first answer is fine; every renewal is malformed.
            if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                grantid::GrantSource::acquire(&memory, r)
            } else {
                Err(grantid::GrantError::Invalid(
                    "field `worker` is missing".into(),
                ))
            }
        })
    };
    let g = Generator::builder(Layout::default(), "test", source)
        .grant_duration_ms(20)
        .horizon_ms(20)
        .backoff(Duration::from_millis(2), Duration::from_millis(5))
        .start()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while g.stats().invalid_grants < 2 {
        assert!(Instant::now() < deadline, "{:?}", g.stats());
        thread::sleep(Duration::from_millis(2));
    }
    let s = g.stats();
    assert!(s.uncertain_retries >= s.invalid_grants);
    // Past the end of the one good grant, the error names the bad field.
    thread::sleep(Duration::from_millis(40));
    let err = g.next_id().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(err.message().contains("field `worker` is missing"), "{err}");
}

#[test]
fn a_grant_longer_than_one_generation_is_used_to_its_end() {
    // 26 sequence bits leave 20 bits of relative tick: one generation spans
    // 1,048,575 ticks, so a 3,000,000-tick grant needs two re-bases.
    let layout = Layout::new(36, 0, 26).unwrap();
    let source = Scripted::new();
    let clock = ManualClock::new(at(1_000));
    let g = Generator::builder(layout, "rebase", source.clone())
        .clock(clock.clone())
        .max_drift_ms(0)
        .grant_duration_ms(3_000_000)
        .horizon_ms(3_000_000)
        .start()
        .unwrap();
    let end = g.stats().grant_end.unwrap();
    assert_eq!(end, 3_001_000);
    let mut ids = Vec::new();
    for t in [
        1_000, 500_000, 1_049_573, 1_049_574, 1_049_575, 1_049_576, 2_000_000, 2_098_150,
        2_098_151, 3_000_999,
    ] {
        clock.set(at(t));
        // A re-base happens on the renewal thread just before the boundary.
        let deadline = Instant::now() + Duration::from_secs(10);
        let id = loop {
            match g.next_id() {
                Ok(id) => break id,
                Err(e) => {
                    assert!(Instant::now() < deadline, "tick {t}: {e}");
                    thread::sleep(Duration::from_millis(1));
                }
            }
        };
        assert_eq!(layout.decode(id).unwrap().timestamp, t, "tick {t}");
        ids.push(id);
    }
    check_increasing(&ids);
    check_ids(&layout, &ids, &source.grants(), Some(g.stats().incarnation));
    assert!(
        g.stats().renewals >= 1,
        "renewed past the first 3,000,000 ticks"
    );
}

/// Options at the edges of their types are typed errors or work; none
/// crashes a thread.
#[test]
fn extreme_options_never_crash() {
    let builder = || Generator::builder(Layout::default(), "edges", MemoryAuthority::new());
    for (name, r) in [
        ("max_drift_ms", builder().max_drift_ms(u64::MAX).start()),
        (
            "grant_duration_ms",
            builder()
                .grant_duration_ms(u64::MAX)
                .horizon_ms(u64::MAX)
                .start(),
        ),
        ("horizon_ms", builder().horizon_ms(u64::MAX).start()),
    ] {
        let err = r.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        assert!(err.message().contains(name), "{err}");
    }
    // More shards than the cursor keeps: capped, not an overflow.
    let g = builder().shards(usize::MAX).start().unwrap();
    assert!(g.next_id().is_ok());
    // A batch that cannot be allocated is refused, not an abort.
    let g = builder().max_batch(usize::MAX).start().unwrap();
    let err = g.next_ids(usize::MAX / 4).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    // Waits without end: a start-up timeout and a max_wait of Duration::MAX.
    let clock = ManualClock::new(at(500));
    let g = Generator::builder(small(), "edges", MemoryAuthority::new())
        .clock(clock.clone())
        .max_drift_ms(0)
        .max_wait(Duration::MAX)
        .startup_timeout(Duration::MAX)
        .backoff(Duration::from_millis(1), Duration::MAX)
        .start()
        .unwrap();
    all_ok(&g, 16);
    let mover = thread::spawn(move || {
        thread::sleep(Duration::from_millis(5));
        clock.advance(1);
    });
    assert_eq!(
        small().decode(g.next_id().unwrap()).unwrap().timestamp,
        501,
        "waited for the next tick"
    );
    mover.join().unwrap();
}

/// A clock that panics when the renewal thread reads it.
struct PanicsOnRenewalThread(Arc<ManualClock>);

impl grantid::Clock for PanicsOnRenewalThread {
    fn now_ms(&self) -> u64 {
        if thread::current().name() == Some("grantid-lease") {
            panic!("clock failure on the renewal thread");
        }
        self.0.now_ms()
    }
}

/// A renewal thread that panics is recorded: start-up fails at once with
/// the panic's message instead of waiting out its timeout in silence.
#[test]
fn a_panicking_renewal_thread_is_reported() {
    let clock = Arc::new(PanicsOnRenewalThread(ManualClock::new(at(500))));
    let t0 = Instant::now();
    let err = Generator::builder(small(), "panics", MemoryAuthority::new())
        .clock(clock)
        .startup_timeout(Duration::from_secs(30))
        .start()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(
        err.message()
            .contains("renewal thread panicked (clock failure on the renewal thread)"),
        "{err}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "failed before its start-up timeout"
    );
}

/// A clock far behind the cursor cannot come back within `max_wait`: the
/// call fails at once instead of sleeping its whole deadline first.
#[test]
fn a_clock_far_behind_fails_at_once() {
    let source = Scripted::new();
    let clock = ManualClock::new(at(200_500));
    let g = Generator::builder(small(), "behind", source)
        .clock(clock.clone())
        .max_drift_ms(10)
        .max_wait(Duration::from_secs(2))
        .start()
        .unwrap();
    all_ok(&g, 3);
    clock.set(at(500));
    let t0 = Instant::now();
    let err = g.next_id().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ClockRollback, "{err}");
    assert_eq!(g.stats().waits, 0, "the call waited");
    assert!(t0.elapsed() < Duration::from_secs(2), "slept its max_wait");
    // A wait that can end in time still happens: 5 ticks behind the
    // cursor's lead.
    clock.set(at(200_500 - 15));
    let mover = thread::spawn(move || {
        thread::sleep(Duration::from_millis(5));
        clock.set(at(200_500));
    });
    g.next_id().unwrap();
    mover.join().unwrap();
    assert_eq!(g.stats().waits, 1);
}

/// After the clock jumps past the committed end, a call wakes the renewal
/// thread and waits for the new grant instead of failing at once.
#[test]
fn a_call_after_a_forward_jump_waits_for_the_renewal() {
    let source = Scripted::new();
    let clock = ManualClock::new(at(500));
    let g = Generator::builder(small(), "jump", source.clone())
        .clock(clock.clone())
        .max_wait(Duration::from_secs(5))
        .grant_duration_ms(1_000)
        .horizon_ms(1_000)
        .start()
        .unwrap();
    let mut ids = all_ok(&g, 3);
    let end = g.stats().grant_end.unwrap();
    clock.set(at(end + 10_000));
    ids.push(g.next_id().unwrap());
    assert!(small().decode(ids[3]).unwrap().timestamp >= end + 10_000);
    check_increasing(&ids);
    check_ids(&small(), &ids, &source.grants(), None);
}

thread_local! {
    static CLOCK_READS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A clock that counts the reads of each thread.
struct CountingClock(Arc<ManualClock>);

impl grantid::Clock for CountingClock {
    fn now_ms(&self) -> u64 {
        CLOCK_READS.with(|c| c.set(c.get() + 1));
        self.0.now_ms()
    }
}

/// A call at a new tick (what a caller below one ID per tick makes every
/// time) claims its chunk at the tick the fast path read: one clock read,
/// no slow path reading the clock again.
#[test]
fn a_call_at_a_new_tick_reads_the_clock_once() {
    let source = Scripted::new();
    let clock = ManualClock::new(at(500));
    let g = Generator::builder(small(), "sparse", source.clone())
        .clock(Arc::new(CountingClock(clock.clone())))
        .max_drift_ms(0)
        .start()
        .unwrap();
    let mut ids = vec![g.next_id().unwrap()];
    for t in 501..520 {
        clock.set(at(t));
        let before = CLOCK_READS.with(|c| c.get());
        ids.push(g.next_id().unwrap());
        assert_eq!(CLOCK_READS.with(|c| c.get()) - before, 1, "at tick {t}");
        assert_eq!(small().decode(*ids.last().unwrap()).unwrap().timestamp, t);
    }
    check_increasing(&ids);
    check_ids(&small(), &ids, &source.grants(), None);
}
