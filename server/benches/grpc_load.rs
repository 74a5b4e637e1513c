//! Load benchmark of `grantid serve`: a tonic client and the server in one
//! process, on one machine (docs/BENCHMARKS.md, "ID service over gRPC").
//!
//! ```text
//! cargo bench -p grantid-server --bench grpc_load
//! GRANTID_BENCH_SECS=2 GRANTID_BENCH_PARTS=unary,batch,grants cargo bench -p grantid-server --bench grpc_load
//! ```
//!
//! `GRANTID_BENCH_SERVER_THREADS` and `GRANTID_BENCH_CLIENT_THREADS` set the
//! worker threads of the two runtimes (default: one per CPU, and 2).
//! `GRANTID_BENCH_SERVER=HOST:PORT` loads a `grantid serve` that runs
//! elsewhere (another process, for example pinned to other CPUs with
//! `taskset`) instead of one in this process; the grant rows, which compare
//! with the server's own state file, are then left out.
//!
//! The server runs on its own tokio runtime (one worker per CPU), the
//! clients on another (two workers), so client and server compete for the
//! same cores, as they would with a load generator on the server's host.
//! Each client is one task calling in a loop, on its own HTTP/2 connection
//! or sharing a few (as the clients of one process share a channel);
//! every call's latency goes into an HDR histogram (1 µs to 10 s, 3
//! significant digits), merged at the end. Parts:
//!
//! * `GenerateId` at 1, 16 and 64 concurrent clients (one connection each,
//!   and 16 on one, 64 on four): calls/s and latency percentiles;
//! * `GenerateIdBatch(1000)` at 1 and 4 clients: IDs/s;
//! * `grpc://` grants: `GrpcAuthority::acquire` renewals per second from 1
//!   and 8 threads, each renewing its own worker, through the server to its
//!   file authority (which `fsync`s every grant), beside the same renewals
//!   sent to the file authority directly.
//!
//! Nothing here asserts a timing: the targets are compared in
//! docs/BENCHMARKS.md. A run in which a call failed exits with status 1.
//! Without `--bench` (`cargo test --benches`, the test command) each row
//! runs 0.2 s.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use grantid::{GrantRequest, GrantSource, Layout};
use grantid_proto::v1::id_generator_service_client::IdGeneratorServiceClient;
use grantid_proto::v1::{GenerateIdBatchRequest, GenerateIdRequest};
use hdrhistogram::Histogram;
use tonic::transport::{Channel, Endpoint};

fn secs() -> Duration {
    let s: f64 = std::env::var("GRANTID_BENCH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5.0);
    Duration::from_secs_f64(s)
}

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 10_000_000, 3).expect("valid histogram bounds")
}

/// Starts a server on a free port; returns its address and the runtime
/// that runs it (dropping the runtime stops it).
fn start_server(dir: &std::path::Path) -> (SocketAddr, tokio::runtime::Runtime) {
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = env_usize("GRANTID_BENCH_SERVER_THREADS") {
        rt.worker_threads(n);
    }
    let rt = rt
        .enable_all()
        .thread_name("bench-server")
        .build()
        .expect("server runtime");
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let authority = format!("file:{}", dir.join("state.json").display());
    let config = grantid_server::Config::new(addr, &authority, "bench");
    rt.spawn(async move {
        if let Err(e) = grantid_server::run(config, listener, std::future::pending()).await {
            eprintln!("server: {e}");
        }
    });
    (addr, rt)
}

async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .tcp_nodelay(true)
        .connect()
        .await
        .expect("connect")
}

/// Waits until the server issues IDs (it holds a grant).
async fn wait_ready(addr: SocketAddr) {
    let mut client = IdGeneratorServiceClient::new(channel(addr).await);
    let deadline = Instant::now() + Duration::from_secs(20);
    while client
        .generate_id(GenerateIdRequest::default())
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the server never got a grant");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

struct Run {
    calls: u64,
    ids: u64,
    errors: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
}

/// `clients` tasks spread over `conns` HTTP/2 connections, calling `batch`
/// (0 for GenerateId) in a loop for `run` after a warm-up of `run / 5`.
async fn load(addr: SocketAddr, clients: usize, conns: usize, batch: i32, run: Duration) -> Run {
    let mut channels = Vec::new();
    for _ in 0..conns {
        channels.push(channel(addr).await);
    }
    let warmup = run / 5;
    let start = Instant::now() + warmup;
    let stop = start + run;
    let mut tasks = Vec::new();
    for i in 0..clients {
        let mut client = IdGeneratorServiceClient::new(channels[i % conns].clone());
        tasks.push(tokio::spawn(async move {
            let mut h = histogram();
            let (mut calls, mut ids, mut errors) = (0u64, 0u64, 0u64);
            loop {
                let t0 = Instant::now();
                if t0 >= stop {
                    break;
                }
                let got = if batch == 0 {
                    client
                        .generate_id(GenerateIdRequest {
                            caller_service: "bench".into(),
                            ..Default::default()
                        })
                        .await
                        .map(|_| 1)
                } else {
                    client
                        .generate_id_batch(GenerateIdBatchRequest {
                            count: batch,
                            caller_service: "bench".into(),
                            ..Default::default()
                        })
                        .await
                        .map(|r| r.into_inner().ids.len() as u64)
                };
                if t0 < start {
                    continue;
                }
                let micros = t0.elapsed().as_micros().max(1) as u64;
                h.saturating_record(micros);
                calls += 1;
                match got {
                    Ok(n) => ids += n,
                    Err(_) => errors += 1,
                }
            }
            (h, calls, ids, errors)
        }));
    }
    let mut total = Run {
        calls: 0,
        ids: 0,
        errors: 0,
        elapsed: run,
        latency: histogram(),
    };
    for t in tasks {
        let (h, calls, ids, errors) = t.await.expect("client task");
        total.latency.add(&h).expect("same bounds");
        total.calls += calls;
        total.ids += ids;
        total.errors += errors;
    }
    total
}

fn ms(micros: u64) -> String {
    format!("{:.3}", micros as f64 / 1000.0)
}

fn row(name: &str, r: &Run, failed: &mut u64) {
    *failed += r.errors;
    let s = r.elapsed.as_secs_f64();
    let h = &r.latency;
    println!(
        "| {name} | {:.0} | {:.0} | {} | {} | {} | {} | {} | {} |",
        r.calls as f64 / s,
        r.ids as f64 / s,
        ms(h.value_at_quantile(0.5)),
        ms(h.value_at_quantile(0.9)),
        ms(h.value_at_quantile(0.99)),
        ms(h.value_at_quantile(0.999)),
        ms(h.max()),
        r.errors,
    );
}

/// Renewals per second of `threads` generators-to-be, each renewing its
/// own worker through `source`.
fn renewals(source: Arc<dyn GrantSource>, threads: usize, run: Duration, ns: &str) -> (f64, u64) {
    let layout = Layout::default();
    let stop = Instant::now() + run;
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let source = Arc::clone(&source);
            let ns = ns.to_owned();
            std::thread::spawn(move || {
                let incarnation = 0x5eed_0000 + i as u64 + 1;
                let now_tick = |l: &Layout| {
                    let ms = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_millis() as u64);
                    l.tick_at(ms)
                };
                let mut request = GrantRequest {
                    namespace: ns,
                    incarnation,
                    request_id: 1,
                    worker: None,
                    not_before: 0,
                    now: now_tick(&layout),
                    duration: 10,
                    layout,
                };
                let (mut granted, mut failed) = (0u64, 0u64);
                while Instant::now() < stop {
                    match source.acquire(&request) {
                        Ok(g) => {
                            granted += 1;
                            request.worker = Some(g.worker);
                            request.not_before = g.end;
                        }
                        Err(_) => failed += 1,
                    }
                    request.request_id += 1;
                    request.now = now_tick(&layout);
                }
                (granted, failed)
            })
        })
        .collect();
    let (mut granted, mut failed) = (0, 0);
    for h in handles {
        let (g, f) = h.join().expect("renewal thread");
        granted += g;
        failed += f;
    }
    (granted as f64 / run.as_secs_f64(), failed)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: run
    // once, briefly, then.
    let run = if std::env::args().any(|a| a == "--bench") {
        secs()
    } else {
        Duration::from_millis(200)
    };
    let dir = std::env::temp_dir().join(format!("grantid-grpc-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_default();
    let loadavg = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "machine: {} CPUs, {cpu}",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("load average (start): {}", loadavg().trim());
    println!(
        "{:.1} s per row after a warm-up of a fifth of that\n",
        run.as_secs_f64()
    );

    let (addr, server_rt) = match std::env::var("GRANTID_BENCH_SERVER") {
        Ok(a) => {
            println!("server: grantid serve at {a} (another process)\n");
            (a.parse().expect("GRANTID_BENCH_SERVER: HOST:PORT"), None)
        }
        Err(_) => {
            let (addr, rt) = start_server(&dir);
            (addr, Some(rt))
        }
    };
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(env_usize("GRANTID_BENCH_CLIENT_THREADS").unwrap_or(2))
        .enable_all()
        .thread_name("bench-client")
        .build()
        .expect("client runtime");
    client_rt.block_on(wait_ready(addr));

    println!("| call | calls/s | IDs/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | errors |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let parts =
        std::env::var("GRANTID_BENCH_PARTS").unwrap_or_else(|_| "unary,batch,grants".into());
    let unary: &[(usize, usize)] = if parts.contains("unary") {
        &[(1, 1), (16, 16), (16, 1), (64, 64), (64, 4)]
    } else {
        &[]
    };
    let mut failed = 0;
    for &(clients, conns) in unary {
        let r = client_rt.block_on(load(addr, clients, conns, 0, run));
        row(
            &format!("GenerateId, {clients} clients, {conns} connections"),
            &r,
            &mut failed,
        );
    }
    let batch: &[usize] = if parts.contains("batch") {
        &[1, 4]
    } else {
        &[]
    };
    for &clients in batch {
        let r = client_rt.block_on(load(addr, clients, clients, 1000, run));
        row(
            &format!("GenerateIdBatch(1000), {clients} clients, {clients} connections"),
            &r,
            &mut failed,
        );
    }

    let grpc: Arc<dyn GrantSource> =
        Arc::from(grantid_authority::from_url(&format!("grpc://{addr}")).expect("grpc authority"));
    let file: Arc<dyn GrantSource> = Arc::from(
        grantid_authority::from_url(&format!("file:{}", dir.join("state.json").display()))
            .expect("file authority"),
    );
    let grants: &[usize] = if parts.contains("grants") && server_rt.is_some() {
        &[1, 8]
    } else {
        &[]
    };
    if !grants.is_empty() {
        println!("\n| grant renewals | threads | grants/s | failed |");
        println!("|---|---:|---:|---:|");
    }
    for &threads in grants {
        let (rate, failed) = renewals(Arc::clone(&grpc), threads, run, "bench-grpc");
        println!("| grpc:// (server -> file authority) | {threads} | {rate:.0} | {failed} |");
        let (rate, failed) = renewals(Arc::clone(&file), threads, run, "bench-file");
        println!("| file: directly (same state file) | {threads} | {rate:.0} | {failed} |");
    }
    println!("\nload average (end): {}", loadavg().trim());
    drop(client_rt);
    if let Some(rt) = server_rt {
        rt.shutdown_timeout(Duration::from_secs(1));
    }
    let _ = std::fs::remove_dir_all(&dir);
    // A run with failed calls measured something else than the service.
    if failed > 0 {
        eprintln!("{failed} calls failed");
        std::process::exit(1);
    }
}
