//! grantid against its peers, in one run, on one machine.
//!
//! ```text
//! cargo bench -p grantid-benches --bench ids
//! cargo run -p grantid-benches --bin bench-summary
//! ```
//!
//! Every estimate is in nanoseconds per ID (batch and two-thread benches
//! divide their time accordingly), so the summary's ratios compare like with
//! like. Groups:
//!
//! * `single`: one thread, capacity not binding. grantid on 41/0/22 bits
//!   (4.2 M IDs per ms) with a 1 s drift allowance; the atomic `fetch_add`
//!   and compare-and-swap floors; `uuid` `now_v7`; `ulid`; `rs-snowflake`
//!   `real_time_generate` in bursts of 4,000 per millisecond (below its
//!   4,096 per ms cap; the wait for the next millisecond is not timed).
//! * `two_threads`: wall time divided by the IDs both threads made.
//!   grantid on one shared generator; `rs-snowflake` in a `Mutex` (its cap
//!   binds there: two threads make more than 4,096 IDs per ms).
//! * `batch`: `Generator::fill` of 1,000, per ID.
//! * `saturated`: the default 41/10/12 layout with `max_drift_ms = 0`, and
//!   `rs-snowflake` in a tight loop: both capped at 4,096 IDs per ms.
//!
//! After criterion, a fixed-duration run (`GRANTID_BENCH_SATURATED_SECS`,
//! default 2 s) counts the IDs the two saturated generators make per wall
//! second and writes them to `<criterion dir>/saturated-fixed.json` for the
//! summary printer.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use criterion::{BenchmarkGroup, Criterion, measurement::WallTime};
use grantid::{Generator, Layout, MemoryAuthority};
use snowflake::SnowflakeIdGenerator;

/// IDs per millisecond of the default layout and of rs-snowflake (12
/// sequence bits).
const CAP_PER_MS: u64 = 4_096;
/// rs-snowflake burst below its cap: fewer than 4,096 IDs per millisecond.
const BURST: u64 = 4_000;

/// A generator whose capacity does not bind: 22 sequence bits (4,194,304
/// IDs per ms) and a 1 s drift allowance.
fn unbound_generator() -> Generator {
    Generator::builder(
        Layout::new(41, 0, 22).expect("layout 41/0/22"),
        "bench-unbound",
        MemoryAuthority::new(),
    )
    .max_drift_ms(1_000)
    .start()
    .expect("generator on the memory authority")
}

/// The default layout (4,096 IDs per ms) that never runs ahead of the clock.
fn saturated_generator() -> Generator {
    Generator::builder(Layout::default(), "bench-saturated", MemoryAuthority::new())
        .max_drift_ms(0)
        .max_wait(Duration::from_secs(1))
        .start()
        .expect("generator on the memory authority")
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

fn single(c: &mut Criterion) {
    let mut g = c.benchmark_group("single");
    let generator = unbound_generator();
    g.bench_function("grantid_next_id", |b| {
        b.iter(|| generator.next_id().expect("next_id"))
    });
    let counter = AtomicU64::new(0);
    g.bench_function("atomic_fetch_add", |b| {
        b.iter(|| counter.fetch_add(1, Ordering::AcqRel))
    });
    g.bench_function("atomic_cas", |b| {
        b.iter(|| {
            let v = counter.load(Ordering::Acquire);
            counter.compare_exchange(v, v + 1, Ordering::AcqRel, Ordering::Relaxed)
        })
    });
    g.bench_function("uuid_now_v7", |b| b.iter(uuid::Uuid::now_v7));
    g.bench_function("ulid_new", |b| b.iter(ulid::Ulid::new));
    snowflake_below_cap(&mut g);
    g.finish();
}

/// `real_time_generate` in bursts of [`BURST`] inside one millisecond: the
/// sequence never runs out, so this is its cost per call below the cap.
fn snowflake_below_cap(g: &mut BenchmarkGroup<'_, WallTime>) {
    let mut sf = SnowflakeIdGenerator::new(1, 1);
    g.bench_function("snowflake_real_time_below_cap", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                // Start each burst at a fresh millisecond (untimed wait).
                let ms = now_ms();
                while now_ms() == ms {
                    std::hint::spin_loop();
                }
                let n = left.min(BURST);
                let t = Instant::now();
                for _ in 0..n {
                    black_box(sf.real_time_generate());
                }
                timed += t.elapsed();
                left -= n;
            }
            timed
        })
    });
}

/// Runs `f` on two threads, `iters` times each; the result is the wall time
/// per ID of both threads together.
fn two_threads<F: Fn() + Sync>(iters: u64, f: F) -> Duration {
    let start = Barrier::new(3);
    let elapsed = std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                start.wait();
                for _ in 0..iters {
                    f();
                }
            });
        }
        start.wait();
        let t = Instant::now();
        // Leaving the scope joins both threads.
        t
    })
    .elapsed();
    elapsed / 2
}

fn threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("two_threads");
    let generator = Arc::new(unbound_generator());
    g.bench_function("grantid_next_id", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, || {
                black_box(generator.next_id().expect("next_id"));
            })
        })
    });
    let sf = Mutex::new(SnowflakeIdGenerator::new(1, 1));
    g.bench_function("snowflake_mutex", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, || {
                let mut s = sf.lock().unwrap_or_else(|p| p.into_inner());
                black_box(s.real_time_generate());
            })
        })
    });
    g.finish();
}

fn batch(c: &mut Criterion) {
    let mut g = c.benchmark_group("batch");
    let generator = unbound_generator();
    let mut buf = vec![0u64; 1_000];
    g.bench_function("grantid_fill_1000_per_id", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                generator.fill(&mut buf).expect("fill");
                black_box(&buf);
            }
            t.elapsed() / 1_000
        })
    });
    g.finish();
}

fn saturated(c: &mut Criterion) {
    let mut g = c.benchmark_group("saturated");
    let generator = saturated_generator();
    g.bench_function("grantid_default_layout", |b| {
        b.iter(|| generator.next_id().expect("next_id"))
    });
    let mut sf = SnowflakeIdGenerator::new(1, 1);
    g.bench_function("snowflake_real_time", |b| {
        b.iter(|| sf.real_time_generate())
    });
    g.finish();
}

/// IDs made in `secs` of wall time by a tight loop of `f`.
fn count_for(secs: f64, mut f: impl FnMut()) -> (u64, f64) {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let t = Instant::now();
    let mut n = 0u64;
    // Check the clock once per 256 IDs, so the check costs little.
    while Instant::now() < deadline {
        for _ in 0..256 {
            f();
        }
        n += 256;
    }
    (n, t.elapsed().as_secs_f64())
}

fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(target).join("criterion");
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/criterion")
}

/// The fixed-duration saturation run: IDs per wall second of the default
/// layout (and of rs-snowflake) as a fraction of the 4,096,000/s cap.
fn saturated_fixed() {
    let secs: f64 = std::env::var("GRANTID_BENCH_SATURATED_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    if secs <= 0.0 {
        return;
    }
    let generator = saturated_generator();
    // Settle the cursor on the current tick first.
    for _ in 0..CAP_PER_MS {
        black_box(generator.next_id().expect("next_id"));
    }
    let (g_ids, g_secs) = count_for(secs, || {
        black_box(generator.next_id().expect("next_id"));
    });
    let waits = generator.stats().waits;
    let mut sf = SnowflakeIdGenerator::new(1, 1);
    let (s_ids, s_secs) = count_for(secs, || {
        black_box(sf.real_time_generate());
    });
    let cap = (CAP_PER_MS * 1_000) as f64;
    let entry = |ids: u64, secs: f64| {
        serde_json::json!({
            "ids": ids,
            "seconds": secs,
            "ids_per_second": ids as f64 / secs,
            "cap_per_second": cap,
            "fraction_of_cap": ids as f64 / secs / cap,
        })
    };
    let report = serde_json::json!({
        "grantid_default_layout": entry(g_ids, g_secs),
        "snowflake_real_time": entry(s_ids, s_secs),
        "grantid_waits": waits,
    });
    println!(
        "saturated, fixed {secs} s: grantid default layout {:.0} IDs/s ({:.2} % of cap), rs-snowflake {:.0} IDs/s ({:.2} % of cap)",
        g_ids as f64 / g_secs,
        100.0 * g_ids as f64 / g_secs / cap,
        s_ids as f64 / s_secs,
        100.0 * s_ids as f64 / s_secs / cap,
    );
    let dir = criterion_dir();
    let path = dir.join("saturated-fixed.json");
    let written =
        std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, format!("{report:#}\n")));
    if let Err(e) = written {
        eprintln!("could not write {}: {e}", path.display());
    }
}

fn main() {
    // Shorter than criterion's defaults (3 s warm-up, 5 s measurement) so the
    // whole suite stays around two minutes; the command line overrides them.
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    single(&mut c);
    threads(&mut c);
    batch(&mut c);
    saturated(&mut c);
    c.final_summary();
    saturated_fixed();
}
