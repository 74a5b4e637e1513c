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

/// A switch with neither the seal nor a new generation tag (what a cursor
/// without the tag would do): loom must find the interleaving in which a
/// stale reservation completes with the new grant's worker and collides with
/// the new grant's first ID. This shows the models can fail.
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
