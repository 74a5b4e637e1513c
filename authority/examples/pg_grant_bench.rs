//! Grants per second and grant latency of authorities with N concurrent
//! clients, each with its own connection (as N processes would have).
//!
//! ```text
//! scripts/with-services.sh sh -c 'cargo run --release -p grantid-authority \
//!     --example pg_grant_bench -- "$GRANTID_TEST_POSTGRES_URL" 1 8 64'
//! scripts/with-services.sh sh -c 'cargo run --release -p grantid-authority \
//!     --features etcd --example pg_grant_bench -- "$GRANTID_TEST_POSTGRES_URL" \
//!     "$GRANTID_TEST_MYSQL_URL" "$GRANTID_TEST_ETCD_URL" 1 8 64'
//! ```
//!
//! Arguments: one or more authority URLs (any backend; measured one after
//! the other in the same run), then client counts (default 1 8 64). A row
//! is named by the URL's scheme and its TLS mode (`sslmode`, `ssl-mode`),
//! so one server without and with TLS compare side by side:
//! `postgres://h/db?sslmode=disable postgres://h/db?sslmode=verify-full&sslrootcert=ca.pem`. Each
//! client takes a worker, then renews it back to back for
//! `GRANTID_BENCH_SECS` seconds (default 5): one grant per call, as the
//! generator's renewal thread would, only without pause. An uncertain
//! answer is retried with the same request id and counted (`uncertain`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use grantid::{GrantError, GrantRequest, Layout};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn incarnation() -> u64 {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).expect("random bytes");
    u64::from_le_bytes(b)
}

fn main() {
    let (urls, counts): (Vec<String>, Vec<String>) =
        std::env::args().skip(1).partition(|a| a.contains(':'));
    assert!(
        !urls.is_empty(),
        "usage: pg_grant_bench URL [URL...] [CLIENTS...]"
    );
    let mut counts: Vec<usize> = counts
        .iter()
        .map(|a| a.parse().expect("client count"))
        .collect();
    if counts.is_empty() {
        counts = vec![1, 8, 64];
    }
    let secs: u64 = std::env::var("GRANTID_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    println!("engine                clients  grants/s  p50_ms  p99_ms  max_ms  grants  uncertain");
    for url in &urls {
        let engine = label(url);
        for &clients in &counts {
            run(&engine, url, clients, secs);
        }
    }
}

/// The URL's scheme, and its TLS mode if it names one
/// (`postgres/verify-full`).
fn label(url: &str) -> String {
    let scheme = url.split(':').next().unwrap_or_default();
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let mode = query
        .split('&')
        .find_map(|pair| match pair.split_once('=') {
            Some(("sslmode" | "ssl-mode", mode)) => Some(mode),
            _ => None,
        });
    match mode {
        Some(mode) => format!("{scheme}/{mode}"),
        None => scheme.to_owned(),
    }
}

/// One measurement: `clients` threads renewing back to back for `secs`.
fn run(engine: &str, url: &str, clients: usize, secs: u64) {
    let namespace = format!("bench-{:x}", incarnation());
    let deadline = Instant::now() + Duration::from_secs(secs);
    let uncertain = AtomicU64::new(0);
    let uncertain = &uncertain;
    let mut latencies: Vec<Duration> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|_| {
                let url = url.to_owned();
                let namespace = namespace.clone();
                s.spawn(move || {
                    let source = grantid_authority::from_url(&url).expect("authority URL");
                    let inc = incarnation();
                    let mut lat = Vec::new();
                    let mut held: Option<(u32, u64)> = None;
                    let mut request_id = 0;
                    while Instant::now() < deadline {
                        request_id += 1;
                        let r = GrantRequest {
                            namespace: namespace.clone(),
                            incarnation: inc,
                            request_id,
                            worker: held.map(|h| h.0),
                            not_before: held.map_or(0, |h| h.1),
                            now: 0,
                            // One tick per grant: a client renewing back
                            // to back stays near the clock, inside the
                            // store's bounded lead (the URL's max_lead_ms),
                            // and the transaction is what is measured.
                            duration: 1,
                            layout: Layout::default(),
                        };
                        let t0 = Instant::now();
                        let g = match source.acquire(&r) {
                            Ok(g) => g,
                            // Uncertain (a lost race on the namespace's
                            // first registration, a lock timeout): retried
                            // with the same request id, as the generator does.
                            Err(GrantError::Unavailable(_)) => {
                                request_id -= 1;
                                uncertain.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            Err(e) => panic!("{engine}: {e}"),
                        };
                        lat.push(t0.elapsed());
                        held = Some((g.worker, g.end));
                    }
                    lat
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("client thread"))
            .collect()
    });
    latencies.sort();
    let n = latencies.len();
    if n == 0 {
        println!(
            "{engine:<20}  {clients:>7}  no grant in {secs} s ({} uncertain answers: a quarantine?)",
            uncertain.load(Ordering::Relaxed)
        );
        return;
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{engine:<20}  {clients:>7}  {:>8.0}  {:>6.2}  {:>6.2}  {:>6.2}  {n}  {}",
        n as f64 / secs as f64,
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        ms(latencies[n - 1]),
        uncertain.load(Ordering::Relaxed),
    );
}
