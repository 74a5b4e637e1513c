//! loom models of the cursor: every interleaving of 2-3 threads (bounded by
//! LOOM_MAX_PREEMPTIONS) keeps IDs unique, per-thread increasing, and inside
//! the grant of the worker they carry.
#![cfg(grantid_loom)]

use grantid::Layout;
use grantid::cursor::{Cursor, Shape, Status, Take};
use loom::sync::Arc;
use loom::thread;

/// (worker, start, end) of each grant a model installs.
type Grants<'a> = &'a [(u64, u64, u64)];

fn layout(seq_bits: u8) -> Layout {
    Layout::new(12, 2, seq_bits).unwrap()
}

fn cursor(seq_bits: u8, shards: usize, drift: u64) -> Cursor {
    Cursor::new(Shape::new(&layout(seq_bits), shards, drift).unwrap())
}

/// One ID through the fast path, else the slow path; `None` if refused.
/// A switch in progress is waited out, as the generator does.
fn next(c: &Cursor, shard: usize, t: u64) -> Option<u64> {
    if let Some(id) = c.try_next(shard, t) {
        return Some(id);
    }
    loop {
        match c.take(shard, 1, t) {
            Take::Span(s) => {
                assert_eq!(s.count, 1);
                return Some(c.shape().compose(s.tick, s.worker, s.seq));
            }
            Take::Sealed(Status::Switching | Status::Active) => thread::yield_now(),
            _ => return None,
        }
    }
}

/// One ID, or `None` if refused for any reason, a switch in progress
/// included (no waiting: with several threads waiting on one switch, loom's
/// search would spend its branches on their spinning).
fn next_or_refused(c: &Cursor, shard: usize, t: u64) -> Option<u64> {
    match c.take(shard, 1, t) {
        Take::Span(s) => Some(c.shape().compose(s.tick, s.worker, s.seq)),
        _ => None,
    }
}

fn issue_once(c: &Arc<Cursor>, shard: usize, t: u64) -> thread::JoinHandle<Vec<u64>> {
    let c = Arc::clone(c);
    thread::spawn(move || next_or_refused(&c, shard, t).into_iter().collect())
}

fn issue(c: &Arc<Cursor>, shard: usize, ticks: &'static [u64]) -> thread::JoinHandle<Vec<u64>> {
    let c = Arc::clone(c);
    thread::spawn(move || ticks.iter().filter_map(|&t| next(&c, shard, t)).collect())
}

fn check(per_thread: &[Vec<u64>], grants: Grants<'_>, seq_bits: u8) {
    let layout = layout(seq_bits);
    let mut all = Vec::new();
    for ids in per_thread {
        for w in ids.windows(2) {
            assert!(w[0] < w[1], "per-thread order broken: {ids:?}");
        }
        all.extend(ids.iter().copied());
    }
    for &id in &all {
        let d = layout.decode(id).unwrap();
        assert!(
            grants
                .iter()
                .any(|&(w, s, e)| d.worker == w && s <= d.timestamp && d.timestamp < e),
            "ID {id} {d:?} outside every grant {grants:?}"
        );
    }
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "duplicate IDs");
}

#[test]
fn concurrent_next_id() {
    loom::model(|| {
        let c = Arc::new(cursor(2, 2, 0));
        c.install(1, 1, 10, 20);
        let a = issue(&c, 0, &[10, 10]);
        let b = issue(&c, 1, &[10, 10]);
        let ids = vec![a.join().unwrap(), b.join().unwrap()];
        // Four sequence numbers at tick 10 and four requests: all served.
        assert_eq!(ids.iter().map(Vec::len).sum::<usize>(), 4);
        check(&ids, &[(1, 10, 20)], 2);
    });
}

#[test]
fn two_threads_on_one_shard() {
    loom::model(|| {
        let c = Arc::new(cursor(2, 1, 0));
        c.install(1, 0, 10, 20);
        let a = issue(&c, 0, &[10, 10]);
        let b = issue(&c, 0, &[10, 10]);
        let ids = vec![a.join().unwrap(), b.join().unwrap()];
        assert_eq!(ids.iter().map(Vec::len).sum::<usize>(), 4);
        check(&ids, &[(0, 10, 20)], 2);
    });
}

#[test]
fn exhaustion_at_a_tick_boundary() {
    loom::model(|| {
        // Two sequence numbers per tick, one tick of drift: four IDs fit in
        // ticks 10 and 11, a fifth does not.
        let c = Arc::new(cursor(1, 2, 1));
        c.install(1, 2, 10, 20);
        let a = issue(&c, 0, &[10, 10]);
        let b = issue(&c, 1, &[10, 10]);
        let ids = vec![a.join().unwrap(), b.join().unwrap()];
        assert_eq!(ids.iter().map(Vec::len).sum::<usize>(), 4);
        check(&ids, &[(2, 10, 12)], 1);
        assert_eq!(next(&c, 0, 10), None, "ticks 10 and 11 are full");
    });
}

#[test]
fn grant_switch_racing_next_id() {
    loom::model(|| {
        let c = Arc::new(cursor(2, 2, 0));
        c.install(1, 0, 10, 20);
        let issuer = issue(&c, 0, &[12, 12]);
        let switcher = {
            let c = Arc::clone(&c);
            thread::spawn(move || {
                c.seal(Status::Switching);
                c.install(2, 1, 12, 20);
                next(&c, 1, 12).into_iter().collect::<Vec<_>>()
            })
        };
        let a = issuer.join().unwrap();
        let b = switcher.join().unwrap();
        // Capacity is left at tick 12 in either grant: no call is refused
        // (a stale word read beside the new grant's base must not look like
        // a clock rollback).
        assert_eq!(a.len(), 2, "a call was refused across the switch");
        assert_eq!(b.len(), 1);
        // After the switch, only the new worker is issued.
        let after = next(&c, 0, 12).unwrap();
        assert_eq!(layout(2).decode(after).unwrap().worker, 1);
        check(&[a, b, vec![after]], &[(0, 10, 20), (1, 12, 20)], 2);
    });
}

#[test]
fn loss_seals_against_every_later_call() {
    loom::model(|| {
        let c = Arc::new(cursor(2, 2, 0));
        c.install(1, 3, 10, 20);
        let issuer = issue(&c, 0, &[10, 10]);
        c.seal(Status::LeaseLost);
        // Once the seal returned, nothing more is issued from the worker.
        assert_eq!(next(&c, 1, 10), None);
        assert_eq!(c.take(1, 1, 10), Take::Sealed(Status::LeaseLost));
        let a = issuer.join().unwrap();
        check(&[a], &[(3, 10, 20)], 2);
    });
}

#[test]
fn clock_step_back_within_drift() {
    loom::model(|| {
        let c = Arc::new(cursor(1, 2, 2));
        c.install(1, 1, 10, 20);
        let back = issue(&c, 0, &[12, 10, 11]);
        let steady = issue(&c, 1, &[12, 12]);
        let ids = vec![back.join().unwrap(), steady.join().unwrap()];
        check(&ids, &[(1, 10, 20)], 1);
    });
}

/// Two threads claim at one tick of worker 0 while a switch moves the
/// cursor to worker 1, with `switch` doing the switch. Returns every ID.
fn claims_racing_a_switch(switch: fn(&Cursor)) {
    loom::model(move || {
        // One shard, chunks of one: each claim goes through the global word.
        let c = Arc::new(cursor(2, 1, 0));
        c.install(1, 0, 10, 20);
        let a = issue_once(&c, 0, 15);
        let b = issue_once(&c, 0, 15);
        let switcher = {
            let c = Arc::clone(&c);
            thread::spawn(move || switch(&c))
        };
        switcher.join().unwrap();
        let ids = vec![a.join().unwrap(), b.join().unwrap()];
        check(&ids, &[(0, 10, 20), (1, 15, 20)], 2);
    });
}

/// The switch protocol: seal, then install under a new tag.
#[test]
fn claims_racing_a_sealed_switch() {
    claims_racing_a_switch(|c| {
        c.seal(Status::Switching);
        c.install(c.generation() + 1, 1, 15, 20);
    });
}

/// Negative control, the tag removed: the switch seals but installs the
/// same tag. A thread that read the global word before the switch finds the
/// same bits after it (the fresh word of the same tag) and claims, with the
/// old grant's parameters, a chunk another thread already took before the
/// seal: loom must find that duplicate.
#[test]
#[should_panic(expected = "duplicate IDs")]
fn a_switch_without_a_new_tag_is_caught() {
    claims_racing_a_switch(|c| {
        c.seal(Status::Switching);
        c.install(c.generation(), 1, 15, 20);
    });
}

/// The same worker re-based onto a later interval (a renewal after a gap)
/// while a thread claims: the new interval starts after the last tick the
/// switch found reached, by `switch`. Returns every ID.
fn claims_racing_a_rebase(switch: fn(&Cursor) -> u64) {
    loom::model(move || {
        let c = Arc::new(cursor(2, 1, 0));
        c.install(1, 0, 10, 20);
        assert!(next(&c, 0, 10).is_some());
        let issuer = issue_once(&c, 0, 11);
        let switcher = {
            let c = Arc::clone(&c);
            thread::spawn(move || {
                let floor = switch(&c);
                next_or_refused(&c, 0, floor)
                    .into_iter()
                    .collect::<Vec<_>>()
            })
        };
        let ids = vec![issuer.join().unwrap(), switcher.join().unwrap()];
        check(&ids, &[(0, 10, 20)], 2);
    });
}

/// The switch protocol: the seal reports the last tick reached; the new
/// interval starts after it.
#[test]
fn claims_racing_a_sealed_rebase() {
    claims_racing_a_rebase(|c| {
        let reached = c.seal(Status::Switching).reached.unwrap();
        c.install(c.generation() + 1, 0, reached + 1, 20);
        reached + 1
    });
}

/// Negative control, the seal removed: the switch reads the last tick
/// reached without sealing, so a claim can land after the read and before
/// the install, at a tick the new interval starts at: loom must find the
/// duplicate (same worker, same tick, same sequence).
#[test]
#[should_panic(expected = "duplicate IDs")]
fn a_rebase_without_the_seal_is_caught() {
    claims_racing_a_rebase(|c| {
        let reached = c.reached_unsealed_for_tests();
        c.install_unsealed_for_tests(c.generation() + 1, 0, reached + 1, 20);
        reached + 1
    });
}

/// A reader on a new generation's word reads that generation's parameters:
/// they are stored before the words that publish them (Release), and read
/// through the word (Acquire). Two switches back, the same slot held worker
/// 0's interval starting at tick 10; a reader that took the new word beside
/// those old parameters would issue (worker 0, tick 10, 0) again.
fn reader_after_two_switches(install: fn(&Cursor, u64)) {
    loom::model(move || {
        let c = Arc::new(cursor(2, 1, 0));
        c.install(2, 0, 10, 20);
        let first = next(&c, 0, 10).unwrap();
        c.seal(Status::Switching);
        c.install(3, 1, 10, 20);
        c.seal(Status::Switching);
        let switcher = {
            let c = Arc::clone(&c);
            thread::spawn(move || install(&c, 4))
        };
        let reader = issue_once(&c, 0, 10);
        switcher.join().unwrap();
        let ids = vec![vec![first], reader.join().unwrap()];
        check(&ids, &[(0, 10, 20), (2, 10, 20)], 2);
    });
}

#[test]
fn a_reader_sees_the_parameters_of_its_word() {
    reader_after_two_switches(|c, generation| {
        c.install(generation, 2, 10, 20);
    });
}

/// Negative control for the step above: the parameters stored after the
/// words. The reader's Acquire load of the new word then does not order the
/// parameter loads after their stores; loom must find the stale read.
#[test]
#[should_panic(expected = "duplicate IDs")]
fn parameters_stored_after_the_words_are_caught() {
    reader_after_two_switches(|c, generation| {
        c.install_params_last_for_tests(generation, 2, 10, 20);
    });
}

/// Negative control, both removed: a switch with neither the seal nor a new
/// generation tag (what a cursor without the tag would do): loom must find
/// the interleaving in which a stale reservation completes with the new
/// grant's worker and collides with the new grant's first ID.
#[test]
#[should_panic(expected = "duplicate IDs")]
fn a_switch_without_the_seal_is_caught() {
    loom::model(|| {
        let c = Arc::new(cursor(2, 1, 0));
        c.install(1, 0, 10, 20);
        let issuer = issue(&c, 0, &[15]);
        let switcher = {
            let c = Arc::clone(&c);
            thread::spawn(move || {
                c.install_unsealed_for_tests(1, 1, 15, 20);
                next(&c, 0, 15).into_iter().collect::<Vec<_>>()
            })
        };
        let ids = vec![issuer.join().unwrap(), switcher.join().unwrap()];
        check(&ids, &[(0, 10, 20), (1, 15, 20)], 2);
    });
}

/// A batch (spans of several chunks per CAS, then the shard moved past them)
/// racing single IDs on the same shard.
#[test]
fn batch_racing_single_ids_on_one_shard() {
    loom::model(|| {
        // 8 sequence numbers per tick in chunks of 2.
        let c = Arc::new(cursor(3, 1, 0));
        assert_eq!(c.shape().chunk(), 2);
        c.install(1, 1, 10, 20);
        let batcher = {
            let c = Arc::clone(&c);
            thread::spawn(move || {
                let mut ids = Vec::new();
                while ids.len() < 5 {
                    match c.take(0, 5 - ids.len() as u64, 10) {
                        Take::Span(s) => {
                            let first = c.shape().compose(s.tick, s.worker, s.seq);
                            ids.extend((0..s.count).map(|i| first + i));
                        }
                        _ => break,
                    }
                }
                ids.extend(next(&c, 0, 10));
                ids
            })
        };
        let single = issue(&c, 0, &[10, 10]);
        let ids = vec![batcher.join().unwrap(), single.join().unwrap()];
        check(&ids, &[(1, 10, 20)], 3);
    });
}
