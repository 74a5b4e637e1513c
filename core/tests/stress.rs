//! Both cores, default layout, 10 M IDs: no duplicate, per-thread order.

mod common;

use std::sync::Arc;
use std::thread;

use common::{Scripted, check_increasing};
use grantid::{Generator, Layout};

#[test]
fn ten_million_ids_on_two_threads() {
    const PER_THREAD: usize = 5_000_000;
    let source = Scripted::new();
    let g = Arc::new(
        Generator::builder(Layout::default(), "stress", source.clone())
            // Far enough ahead that no call waits at 4,096 IDs per ms.
            .max_drift_ms(60_000)
            .horizon_ms(120_000)
            .grant_duration_ms(60_000)
            .start()
            .unwrap(),
    );
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let g = Arc::clone(&g);
            thread::spawn(move || {
                let mut ids = Vec::with_capacity(PER_THREAD);
                for _ in 0..PER_THREAD / 2 {
                    ids.push(g.next_id().unwrap());
                }
                let mut batch = [0u64; 1000];
                while ids.len() < PER_THREAD {
                    g.fill(&mut batch).unwrap();
                    ids.extend_from_slice(&batch);
                }
                check_increasing(&ids);
                ids
            })
        })
        .collect();
    let mut all: Vec<u64> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert_eq!(all.len(), 2 * PER_THREAD);
    let grants = source.grants();
    let layout = Layout::default();
    let incarnation = g.stats().incarnation;
    all.sort_unstable();
    for w in all.windows(2) {
        assert_ne!(w[0], w[1], "duplicate ID");
    }
    // Inside a grant: check each distinct (worker, tick) once.
    let mut last = None;
    for &id in &all {
        let d = layout.decode(id).unwrap();
        if last == Some((d.worker, d.timestamp)) {
            continue;
        }
        last = Some((d.worker, d.timestamp));
        assert!(
            grants.iter().any(|g| g.incarnation == incarnation
                && u64::from(g.worker) == d.worker
                && g.start <= d.timestamp
                && d.timestamp < g.end),
            "{d:?} outside every grant"
        );
    }
    assert_eq!(g.stats().ids_issued, 2 * PER_THREAD as u64);
}
