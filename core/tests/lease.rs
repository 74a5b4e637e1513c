//! The lease manager (docs/DESIGN.md section 3) with a scripted authority.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{Mode, Scripted, at, check_ids, check_increasing, counter};
use grantid::{ErrorKind, Generator, Layout, ManualClock, MemoryAuthority};

fn layout() -> Layout {
    Layout::new(41, 4, 8).unwrap()
}

/// A generator on the system clock with short grants, so renewals happen
/// within a test.
fn fast(source: Scripted, grant_ms: u64, horizon_ms: u64) -> Generator {
    Generator::builder(layout(), "lease", source)
        .grant_duration_ms(grant_ms)
        .horizon_ms(horizon_ms)
        .max_drift_ms(5)
        .backoff(Duration::from_millis(2), Duration::from_millis(10))
        .start()
        .unwrap()
}

/// A generator on `clock` with 100 ms grants, renewed half a grant ahead.
fn on_manual_clock(source: &Scripted, clock: &Arc<ManualClock>) -> grantid::GeneratorBuilder {
    Generator::builder(layout(), "lease", source.clone())
        .clock(clock.clone())
        .grant_duration_ms(100)
        .horizon_ms(100)
}

/// Checks IDs of one generator: no duplicate, each inside a grant of its
/// incarnation.
fn check_mine(ids: &[u64], source: &Scripted, incarnation: u64) {
    check_ids(&layout(), ids, &source.grants(), Some(incarnation));
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// Issues from `threads` threads until `stop`, returning every ID and every
/// error seen.
fn load(
    g: &Arc<Generator>,
    threads: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<thread::JoinHandle<(Vec<u64>, Vec<ErrorKind>)>> {
    (0..threads)
        .map(|_| {
            let g = Arc::clone(g);
            let stop = Arc::clone(stop);
            thread::spawn(move || {
                let (mut ids, mut errors) = (Vec::new(), Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    match g.next_id() {
                        Ok(id) => ids.push(id),
                        Err(e) => errors.push(e.kind()),
                    }
                }
                check_increasing(&ids);
                (ids, errors)
            })
        })
        .collect()
}

fn collect(
    handles: Vec<thread::JoinHandle<(Vec<u64>, Vec<ErrorKind>)>>,
) -> (Vec<u64>, Vec<ErrorKind>) {
    let (mut ids, mut errors) = (Vec::new(), Vec::new());
    for h in handles {
        let (i, e) = h.join().unwrap();
        ids.extend(i);
        errors.extend(e);
    }
    (ids, errors)
}

#[test]
fn start_is_gated_on_the_first_grant() {
    // Unavailable: start fails after the timeout, with the authority's reason.
    let source = Scripted::new();
    source.set(Mode::Unavailable);
    let t0 = Instant::now();
    let err = Generator::builder(layout(), "lease", source.clone())
        .startup_timeout(Duration::from_millis(150))
        .backoff(Duration::from_millis(5), Duration::from_millis(20))
        .start()
        .unwrap_err();
    assert!(t0.elapsed() >= Duration::from_millis(150));
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(err.message().contains("scripted outage"), "{err}");
    // Lost: LeaseLost with the reason.
    source.set(Mode::Lost);
    // Long enough for the renewal thread to get one answer on a loaded
    // machine (the kind is the last answer's).
    let err = Generator::builder(layout(), "lease", source.clone())
        .startup_timeout(Duration::from_millis(1_000))
        .backoff(Duration::from_millis(5), Duration::from_millis(20))
        .start()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost);
    assert!(err.message().contains("scripted refusal"), "{err}");
    // Uncertain a few times, then a grant: start returns once it is proven.
    source.set(Mode::Unavailable);
    let before = source.calls();
    let flipper = {
        let source = source.clone();
        thread::spawn(move || {
            wait_until("three refused calls", || source.calls() >= before + 3);
            source.set(Mode::Normal);
        })
    };
    let g = Generator::builder(layout(), "lease", source.clone())
        .backoff(Duration::from_millis(5), Duration::from_millis(20))
        .start()
        .unwrap();
    flipper.join().unwrap();
    assert!(g.stats().uncertain_retries >= 1);
    let id = g.next_id().unwrap();
    check_ids(
        &layout(),
        &[id],
        &source.grants(),
        Some(g.stats().incarnation),
    );
}

#[test]
fn renewal_keeps_issuance_going_without_a_gap() {
    let source = Scripted::new();
    let g = Arc::new(fast(source.clone(), 20, 60));
    let stop = Arc::new(AtomicBool::new(false));
    let handles = load(&g, 2, &stop);
    thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let (ids, errors) = collect(handles);
    let s = g.stats();
    assert!(s.renewals >= 10, "{s:?}");
    assert!(
        errors.iter().all(|k| *k == ErrorKind::CapacityExhausted),
        "{errors:?}"
    );
    assert_eq!(s.worker, Some(source.grants()[0].worker), "kept its worker");
    check_mine(&ids, &source, s.incarnation);
}

#[test]
fn an_outage_shorter_than_the_horizon_goes_unnoticed() {
    let source = Scripted::new();
    let g = Arc::new(fast(source.clone(), 20, 300));
    let stop = Arc::new(AtomicBool::new(false));
    let handles = load(&g, 1, &stop);
    thread::sleep(Duration::from_millis(50));
    source.set(Mode::Unavailable);
    wait_until("an uncertain retry", || g.stats().uncertain_retries >= 2);
    thread::sleep(Duration::from_millis(100));
    source.set(Mode::Normal);
    let renewals = g.stats().renewals;
    wait_until("renewal after the outage", || g.stats().renewals > renewals);
    stop.store(true, Ordering::Relaxed);
    let (ids, errors) = collect(handles);
    assert!(
        errors.iter().all(|k| *k == ErrorKind::CapacityExhausted),
        "{errors:?}"
    );
    check_mine(&ids, &source, g.stats().incarnation);
}

#[test]
fn an_outage_past_the_grant_end_is_unavailable_then_recovers() {
    let clock = ManualClock::new(at(10_000));
    let source = Scripted::new();
    let g = on_manual_clock(&source, &clock)
        .max_drift_ms(0)
        .backoff(Duration::from_millis(2), Duration::from_millis(5))
        .start()
        .unwrap();
    let mut ids = vec![g.next_id().unwrap()];
    source.set(Mode::Unavailable);
    let end = g.stats().grant_end.unwrap();
    clock.set(at(end - 1));
    ids.push(g.next_id().unwrap());
    wait_until("an uncertain retry", || g.stats().uncertain_retries >= 1);
    clock.set(at(end));
    let err = g.next_id().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.message().contains("scripted outage"), "{err}");
    source.set(Mode::Normal);
    wait_until("recovery", || g.next_id().is_ok());
    ids.push(g.next_id().unwrap());
    check_increasing(&ids);
    check_mine(&ids, &source, g.stats().incarnation);
    assert_eq!(g.stats().lease_losses, 0);
}

#[test]
fn a_confirmed_loss_stops_the_worker_at_once_and_moves_to_another() {
    let source = Scripted::new();
    let lost_calls = counter();
    let lost_flag = Arc::new(AtomicBool::new(false));
    let g = {
        let (lost_calls, lost_flag) = (Arc::clone(&lost_calls), Arc::clone(&lost_flag));
        Arc::new(
            Generator::builder(layout(), "lease", source.clone())
                .grant_duration_ms(20)
                .horizon_ms(40)
                .backoff(Duration::from_millis(2), Duration::from_millis(10))
                .on_lease_lost(move |event| {
                    assert!(event.reason.contains("held by"), "{event:?}");
                    lost_calls.fetch_add(1, Ordering::SeqCst);
                    lost_flag.store(true, Ordering::SeqCst);
                })
                .start()
                .unwrap(),
        )
    };
    let old = g.stats().worker.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let checker = {
        let (g, stop, lost_flag) = (Arc::clone(&g), Arc::clone(&stop), Arc::clone(&lost_flag));
        thread::spawn(move || {
            let mut ids = Vec::new();
            let mut after_loss = 0;
            while !stop.load(Ordering::Relaxed) {
                let loss_seen = lost_flag.load(Ordering::SeqCst);
                if let Ok(id) = g.next_id() {
                    let worker = layout().decode(id).unwrap().worker as u32;
                    if loss_seen {
                        assert_ne!(
                            worker, old,
                            "an ID of the lost worker after the loss was observed"
                        );
                        after_loss += 1;
                    }
                    ids.push(id);
                }
            }
            (ids, after_loss)
        })
    };
    thread::sleep(Duration::from_millis(30));
    source.inner.steal("lease", old, 0xdead, u64::MAX);
    wait_until("on_lease_lost", || lost_flag.load(Ordering::SeqCst));
    wait_until("a new worker", || {
        g.stats().worker.is_some_and(|w| w != old)
    });
    thread::sleep(Duration::from_millis(30));
    stop.store(true, Ordering::Relaxed);
    let (ids, after_loss) = checker.join().unwrap();
    assert!(after_loss > 0, "issuance resumed on the new worker");
    assert_eq!(
        lost_calls.load(Ordering::SeqCst),
        1,
        "on_lease_lost called once"
    );
    let s = g.stats();
    assert_eq!(s.lease_losses, 1);
    check_increasing(&ids);
    check_mine(&ids, &source, s.incarnation);
}

#[test]
fn a_panicking_source_or_callback_does_not_kill_renewal() {
    let source = Scripted::new();
    let g = Generator::builder(layout(), "lease", source.clone())
        .grant_duration_ms(20)
        .horizon_ms(60)
        .backoff(Duration::from_millis(2), Duration::from_millis(5))
        .on_lease_lost(|_| panic!("callback panics"))
        .start()
        .unwrap();
    let worker = g.stats().worker;
    source.set(Mode::Panic);
    wait_until("caught panics", || g.stats().uncertain_retries >= 3);
    source.set(Mode::Normal);
    let renewals = g.stats().renewals;
    wait_until("renewal after panics", || g.stats().renewals > renewals);
    assert_eq!(g.stats().worker, worker, "kept its cached worker");
    // A panicking on_lease_lost is caught too; a new worker follows.
    source
        .inner
        .steal("lease", worker.unwrap(), 0xbeef, u64::MAX);
    wait_until("a new worker", || {
        g.stats().worker.is_some_and(|w| Some(w) != worker)
    });
    let ids = g.next_ids(100).unwrap();
    check_mine(&ids, &source, g.stats().incarnation);
}

#[test]
fn a_source_that_hangs_never_lets_an_id_past_the_grant_end() {
    let clock = ManualClock::new(at(5_000));
    let source = Scripted::new();
    let g = on_manual_clock(&source, &clock)
        .max_drift_ms(3)
        .start()
        .unwrap();
    source.set(Mode::Hang);
    let end = g.stats().grant_end.unwrap();
    clock.set(at(end - 2));
    wait_until("the renewal call", || source.in_call.load(Ordering::SeqCst));
    let mut ids = Vec::new();
    for _ in 0..10_000 {
        match g.next_id() {
            Ok(id) => ids.push(id),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
                break;
            }
        }
    }
    assert!(!ids.is_empty());
    assert!(
        ids.iter()
            .all(|&id| layout().decode(id).unwrap().timestamp < end)
    );
    clock.set(at(end + 50));
    assert_eq!(g.next_id().unwrap_err().kind(), ErrorKind::Unavailable);
    check_mine(&ids, &source, g.stats().incarnation);
    // close() does not wait for the hung call.
    let t0 = Instant::now();
    g.close();
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(g.next_id().unwrap_err().kind(), ErrorKind::Closed);
    source.set(Mode::Normal);
}

#[test]
fn a_paused_generator_and_its_replacement_never_collide() {
    // One worker value only: the replacement must reuse it.
    let layout = Layout::new(41, 0, 6).unwrap();
    let authority_clock = ManualClock::new(at(1_000));
    let memory = MemoryAuthority::new()
        .with_lease_grace(10)
        .with_clock(authority_clock.clone());
    let (source_a, source_b) = (
        Scripted::over(memory.clone()),
        Scripted::over(memory.clone()),
    );
    let clock_a = ManualClock::new(at(1_000));
    let a = Generator::builder(layout, "pause", source_a.clone())
        .clock(clock_a.clone())
        .grant_duration_ms(100)
        .horizon_ms(100)
        .max_drift_ms(0)
        .start()
        .unwrap();
    let mut ids_a = vec![a.next_id().unwrap()];
    // A "pauses": it cannot reach the authority while its lease runs out.
    source_a.set(Mode::Hang);
    clock_a.set(at(1_060));
    wait_until("A's renewal call", || {
        source_a.in_call.load(Ordering::SeqCst)
    });
    authority_clock.set(at(1_200));
    let clock_b = ManualClock::new(at(1_200));
    let b = Generator::builder(layout, "pause", source_b.clone())
        .clock(clock_b.clone())
        .grant_duration_ms(100)
        .horizon_ms(100)
        .max_drift_ms(0)
        .start()
        .unwrap();
    assert_eq!(
        b.stats().worker,
        Some(0),
        "the replacement took the same worker"
    );
    let mut ids_b = Vec::new();
    // A "resumes" inside its own grant while B issues inside its own.
    for t in 0..30 {
        clock_a.set(at(1_060 + t));
        clock_b.set(at(1_200 + t));
        ids_a.extend((0..64).filter_map(|_| a.next_id().ok()));
        ids_b.extend((0..64).filter_map(|_| b.next_id().ok()));
    }
    // A's renewal now answers: the worker is someone else's.
    source_a.set(Mode::Normal);
    wait_until("A's loss", || a.stats().lease_losses == 1);
    clock_a.set(at(1_099));
    assert!(
        a.next_id().is_err(),
        "A stopped issuing from the lost worker"
    );
    let grants = memory.grants();
    check_ids(&layout, &ids_a, &grants, Some(a.stats().incarnation));
    check_ids(&layout, &ids_b, &grants, Some(b.stats().incarnation));
    let mut all = ids_a.clone();
    all.extend(&ids_b);
    check_ids(&layout, &all, &grants, None);
    assert!(ids_a.len() > 1000 && ids_b.len() > 1000);
}

#[test]
fn close_stops_issuing_releases_the_worker_and_is_idempotent() {
    let source = Scripted::new();
    let g = fast(source.clone(), 20, 40);
    let id = g.next_id().unwrap();
    g.close();
    assert!(g.is_closed());
    assert_eq!(g.next_id().unwrap_err().kind(), ErrorKind::Closed);
    assert_eq!(g.next_ids(3).unwrap_err().kind(), ErrorKind::Closed);
    assert_eq!(source.releases.load(Ordering::SeqCst), 1);
    g.close();
    drop(g);
    assert_eq!(
        source.releases.load(Ordering::SeqCst),
        1,
        "close once, release once"
    );
    // The released worker is free again (its high-water mark stays).
    let worker = layout().decode(id).unwrap().worker as usize;
    let record = source.inner.snapshot().namespaces["lease"].workers[worker].clone();
    assert_eq!(record.holder, None);
    assert!(record.high_water > layout().decode(id).unwrap().timestamp);
    let g2 = fast(source.clone(), 20, 40);
    let id2 = g2.next_id().unwrap();
    assert!(id2 > id);
    drop(g2);
    assert_eq!(source.releases.load(Ordering::SeqCst), 2, "Drop closes");
}

#[test]
fn a_grant_that_arrives_after_close_is_released_too() {
    let source = Scripted::new();
    let g = fast(source.clone(), 20, 40);
    let worker = layout().decode(g.next_id().unwrap()).unwrap().worker as u32;
    let incarnation = g.stats().incarnation;
    source.set(Mode::Hang);
    wait_until("a renewal call", || source.in_call.load(Ordering::SeqCst));
    // close() waits only briefly (200 ms) for the call in flight, then
    // releases.
    g.close();
    assert_eq!(source.releases.load(Ordering::SeqCst), 1);
    assert!(
        source.in_call.load(Ordering::SeqCst),
        "the call still hangs"
    );
    // The hung call now commits a renewal, leasing the worker again: the
    // renewal thread gives it back.
    source.set(Mode::Normal);
    wait_until("the late grant's release", || {
        source.releases.load(Ordering::SeqCst) == 2
    });
    let record = source.inner.snapshot().namespaces["lease"].workers[worker as usize].clone();
    assert_ne!(
        record.holder,
        Some(incarnation),
        "the late grant kept the worker"
    );
}

#[test]
fn grant_switches_racing_next_id_never_duplicate() {
    let source = Scripted::new();
    let g = Arc::new(fast(source.clone(), 5, 15));
    let stop = Arc::new(AtomicBool::new(false));
    let handles = load(&g, 2, &stop);
    let thief = Arc::new(Mutex::new(0u64));
    let steals = AtomicU64::new(0);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(600) {
        if let Some(w) = g.stats().worker {
            let mut t = thief.lock().unwrap();
            *t += 1;
            source.inner.steal("lease", w, 0x1000 + *t, u64::MAX);
            steals.fetch_add(1, Ordering::Relaxed);
        }
        thread::sleep(Duration::from_millis(25));
    }
    stop.store(true, Ordering::Relaxed);
    let (ids, _errors) = collect(handles);
    let s = g.stats();
    assert!(s.lease_losses >= 5, "{s:?}");
    assert!(ids.len() > 10_000);
    check_mine(&ids, &source, s.incarnation);
}
