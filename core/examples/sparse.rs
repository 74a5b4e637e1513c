//! `next_id` at sparse rates, measured beside `SystemTime::now()` and one
//! compare-and-swap in the same run, the same way.
//!
//! ```text
//! cargo run --release -p grantid --example sparse [-- SECONDS_PER_CASE]
//! ```
//!
//! Each thread runs every operation once per gap (1 ms, or 10 µs): one
//! timed call per slot of a quarter gap, sleeping or spinning in between,
//! rotating between the operations, so each sees the same caches, the same
//! scheduling and the same timer. A call is timed with two `Instant::now()` reads; their
//! own cost is the `empty` row. Medians and 90th/99th percentiles, in ns.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use grantid::{Generator, Layout, MemoryAuthority};

const OPS: [&str; 4] = ["empty", "SystemTime::now", "atomic CAS", "grantid next_id"];

fn run_thread(generator: &Generator, cas: &AtomicU64, gap: Duration, secs: f64) -> Vec<Vec<u64>> {
    let mut samples = vec![Vec::new(); OPS.len()];
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut next = Instant::now();
    let mut i = 0usize;
    let slot = gap / OPS.len() as u32;
    while Instant::now() < end {
        next += slot;
        let now = Instant::now();
        if next > now {
            if slot >= Duration::from_micros(200) {
                std::thread::sleep(next - now);
            } else {
                while Instant::now() < next {
                    std::hint::spin_loop();
                }
            }
        } else {
            next = now;
        }
        let op = i % OPS.len();
        i += 1;
        let t = Instant::now();
        match op {
            0 => {}
            1 => {
                black_box(SystemTime::now());
            }
            2 => {
                let v = cas.load(Ordering::Acquire);
                black_box(cas.compare_exchange(v, v + 1, Ordering::AcqRel, Ordering::Relaxed)).ok();
            }
            _ => {
                black_box(generator.next_id().expect("next_id"));
            }
        }
        samples[op].push(t.elapsed().as_nanos() as u64);
    }
    samples
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let generator = Generator::builder(Layout::default(), "sparse", MemoryAuthority::new())
        .start()
        .expect("generator on the memory authority");
    let cas = AtomicU64::new(0);
    println!(
        "| gap | threads | operation | calls | median ns | p90 ns | p99 ns | median / SystemTime::now |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|");
    for gap in [Duration::from_millis(1), Duration::from_micros(10)] {
        for threads in [1usize, 4] {
            let per_thread: Vec<Vec<Vec<u64>>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads)
                    .map(|_| s.spawn(|| run_thread(&generator, &cas, gap, secs)))
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let mut medians = [0u64; OPS.len()];
            let mut rows = Vec::new();
            for (op, name) in OPS.iter().enumerate() {
                let mut all: Vec<u64> = per_thread
                    .iter()
                    .flat_map(|t| t[op].iter().copied())
                    .collect();
                all.sort_unstable();
                medians[op] = percentile(&all, 0.5);
                rows.push((
                    name,
                    all.len(),
                    medians[op],
                    percentile(&all, 0.9),
                    percentile(&all, 0.99),
                ));
            }
            for (name, n, median, p90, p99) in rows {
                println!(
                    "| {gap:?} | {threads} | {name} | {n} | {median} | {p90} | {p99} | {:.2}x |",
                    median as f64 / medians[1].max(1) as f64
                );
            }
        }
    }
}
