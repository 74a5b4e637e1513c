//! A quick throughput probe (the criterion suite in benches/ is the real
//! benchmark): ns per ID for one thread, two threads, and batches of 1,000,
//! on a layout whose capacity does not bind (41/0/22, 4.2 M IDs per ms).
//!
//!   cargo run --release -p grantid --example throughput [millions per thread]

use std::sync::Arc;
use std::time::Instant;

use grantid::{Generator, Layout, MemoryAuthority};

fn main() -> Result<(), grantid::Error> {
    let millions: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let n = millions * 1_000_000;
    let g = Arc::new(
        Generator::builder(
            Layout::new(41, 0, 22)?,
            "throughput",
            MemoryAuthority::new(),
        )
        .max_drift_ms(1_000)
        .start()?,
    );
    for _ in 0..1_000_000 {
        g.next_id()?;
    }
    let t = Instant::now();
    let mut x = 0u64;
    for _ in 0..n {
        x ^= g.next_id()?;
    }
    let one = t.elapsed().as_nanos() as f64 / n as f64;
    std::hint::black_box(x);

    let t = Instant::now();
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let g = Arc::clone(&g);
            std::thread::spawn(move || {
                let mut x = 0u64;
                for _ in 0..n {
                    x ^= g.next_id().unwrap();
                }
                x
            })
        })
        .collect();
    for h in handles {
        std::hint::black_box(h.join().unwrap());
    }
    let two = t.elapsed().as_nanos() as f64 / (2 * n) as f64;

    // The floor: an uncontended compare-and-swap loop on one atomic.
    let cell = std::sync::atomic::AtomicU64::new(0);
    let t = Instant::now();
    for _ in 0..n {
        let v = cell.load(std::sync::atomic::Ordering::Acquire);
        let _ = cell.compare_exchange(
            v,
            v + 1,
            std::sync::atomic::Ordering::AcqRel,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
    let cas = t.elapsed().as_nanos() as f64 / n as f64;
    std::hint::black_box(cell.into_inner());

    let mut buf = vec![0u64; 1_000];
    let t = Instant::now();
    for _ in 0..n / 1_000 {
        g.fill(&mut buf)?;
    }
    let batch = t.elapsed().as_nanos() as f64 / n as f64;
    println!("CAS floor  : {cas:.2} ns/op");
    println!(
        "one thread : {one:.2} ns/ID ({:.2}x the CAS floor)",
        one / cas
    );
    println!(
        "two threads: {two:.2} ns/ID aggregate ({:.2}x one thread)",
        one / two
    );
    println!("batch 1000 : {batch:.3} ns/ID");
    Ok(())
}
