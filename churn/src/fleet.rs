//! The simulated processes: each a real `grantid::Generator` with its own
//! incarnation and its own `Switched` source, started by a pool of starter
//! threads, issuing IDs, and stopped by a pool of stopper threads at the end
//! of a random lifetime (a hard kill or a graceful close), then replaced by a
//! new process, as a deployment restarts a pod.

use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use grantid::{Clock, Error, Generator, GrantSource, Layout, SystemClock};
use hdrhistogram::Histogram;

use crate::ledger::Ledger;
use crate::source::Switched;

/// What the fleet is asked to do.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// The ID layout (its worker field is the fleet's slot count).
    pub layout: Layout,
    /// The namespace of the run.
    pub namespace: String,
    /// Authority URLs; processes take them round-robin.
    pub urls: Vec<String>,
    /// Grant sources shared by the processes (each `from_url` once): 0 for
    /// one source, so one connection, per process.
    pub shared_sources: usize,
    /// Processes kept alive.
    pub live: usize,
    /// Mean lifetime of a process (uniform from half to one and a half).
    pub lifetime: Duration,
    /// Share of stops that are hard kills.
    pub kill_fraction: f64,
    /// The generators' grant length and horizon (ms).
    pub grant_ms: u64,
    /// See `grant_ms`.
    pub horizon_ms: u64,
    /// The generators' start-up timeout.
    pub startup_timeout: Duration,
    /// Threads that start processes.
    pub starters: usize,
    /// Threads that stop processes.
    pub stoppers: usize,
    /// IDs per `next_ids` call (at start, every interval, before the stop).
    pub ids_per_call: usize,
    /// How often each live process issues.
    pub issue_interval: Duration,
    /// First-fleet starts per second (0: all at once), as a deployment
    /// rolls out.
    pub ramp_per_s: f64,
}

/// One live simulated process.
struct Proc {
    generator: Generator,
    switch: Arc<Switched>,
    worker: u32,
    incarnation: u64,
    kill: bool,
}

/// Start outcomes and latencies, for the sampler (per interval) and the
/// report (whole run).
#[derive(Debug)]
pub struct StartLog {
    /// Time to first grant (µs) of starts that finished since the last take.
    pub interval: Histogram<u64>,
    /// Failed starts since the last take.
    pub interval_failed: u64,
    /// Time to first grant (µs) of every start after the warm-up.
    pub steady: Histogram<u64>,
    /// Time to first grant (µs) of every start.
    pub all: Histogram<u64>,
    /// Failed starts by error kind.
    pub failures: HashMap<String, u64>,
    /// A few failure messages.
    pub failure_examples: Vec<String>,
}

fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("static bounds")
}

/// The running fleet.
pub struct Fleet {
    cfg: FleetConfig,
    /// The ledger every source reports to.
    pub ledger: Arc<Ledger>,
    shared: Vec<Arc<dyn GrantSource>>,
    live: Mutex<HashMap<u64, Arc<Proc>>>,
    deaths: Mutex<BinaryHeap<std::cmp::Reverse<(Instant, u64)>>>,
    next_id: AtomicU64,
    /// Every ID issued.
    pub ids: Mutex<Vec<u64>>,
    /// Start outcomes.
    pub starts: Mutex<StartLog>,
    /// Processes started, killed, closed.
    pub started: AtomicU64,
    /// See `started`.
    pub kills: AtomicU64,
    /// See `started`.
    pub closes: AtomicU64,
    /// Starts waiting in start-up (blocked in `start()`).
    pub starting: AtomicUsize,
    /// Issue calls that failed (other than on a closed generator).
    pub issue_errors: AtomicU64,
    /// One failed issue call's message.
    pub issue_error_example: Mutex<Option<String>>,
    /// No replacement starts once set.
    pub ending: AtomicBool,
    /// Steady state (counted in `starts.steady`) once set.
    pub steady: AtomicBool,
    start_tx: Mutex<Option<Sender<()>>>,
    stop_tx: Mutex<Option<Sender<Arc<Proc>>>>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("live", &self.live_count())
            .finish_non_exhaustive()
    }
}

fn pool<T: Send + 'static>(
    n: usize,
    name: &str,
    rx: Receiver<T>,
    work: impl Fn(T) + Send + Sync + 'static,
) -> Vec<JoinHandle<()>> {
    let rx = Arc::new(Mutex::new(rx));
    let work = Arc::new(work);
    (0..n)
        .map(|i| {
            let rx = Arc::clone(&rx);
            let work = Arc::clone(&work);
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    loop {
                        let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                        match job {
                            Ok(job) => work(job),
                            Err(_) => return,
                        }
                    }
                })
                .expect("spawn a pool thread")
        })
        .collect()
}

impl Fleet {
    /// Opens the shared sources (if any) and the ledger.
    pub fn new(cfg: FleetConfig, grace_ms: u64) -> Result<Arc<Fleet>, Error> {
        let mut shared = Vec::new();
        for i in 0..cfg.shared_sources {
            let url = &cfg.urls[i % cfg.urls.len()];
            shared.push(Arc::from(grantid_authority::from_url(url)?));
        }
        let ledger = Arc::new(Ledger::new(cfg.layout, grace_ms));
        Ok(Arc::new(Fleet {
            cfg,
            ledger,
            shared,
            live: Mutex::new(HashMap::new()),
            deaths: Mutex::new(BinaryHeap::new()),
            next_id: AtomicU64::new(0),
            ids: Mutex::new(Vec::new()),
            starts: Mutex::new(StartLog {
                interval: latency_histogram(),
                interval_failed: 0,
                steady: latency_histogram(),
                all: latency_histogram(),
                failures: HashMap::new(),
                failure_examples: Vec::new(),
            }),
            started: AtomicU64::new(0),
            kills: AtomicU64::new(0),
            closes: AtomicU64::new(0),
            starting: AtomicUsize::new(0),
            issue_errors: AtomicU64::new(0),
            issue_error_example: Mutex::new(None),
            ending: AtomicBool::new(false),
            steady: AtomicBool::new(false),
            start_tx: Mutex::new(None),
            stop_tx: Mutex::new(None),
        }))
    }

    /// Processes alive now.
    pub fn live_count(&self) -> usize {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn source_for(&self, n: u64) -> Result<Arc<dyn GrantSource>, Error> {
        if self.shared.is_empty() {
            let url = &self.cfg.urls[n as usize % self.cfg.urls.len()];
            Ok(Arc::from(grantid_authority::from_url(url)?))
        } else {
            Ok(Arc::clone(&self.shared[n as usize % self.shared.len()]))
        }
    }

    fn issue(&self, p: &Proc) {
        match p.generator.next_ids(self.cfg.ids_per_call) {
            Ok(batch) => {
                self.ids
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(&batch);
            }
            Err(e) if e.kind() == grantid::ErrorKind::Closed => {}
            Err(e) => {
                self.issue_errors.fetch_add(1, Ordering::Relaxed);
                let mut ex = self
                    .issue_error_example
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                ex.get_or_insert_with(|| e.to_string());
            }
        }
    }

    /// Starts one process (blocks until its first grant or its start-up
    /// timeout); on success it joins the live set with a death time.
    fn start_one(self: &Arc<Self>) {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.starting.fetch_add(1, Ordering::SeqCst);
        let t0 = Instant::now();
        let result = self.source_for(n).and_then(|inner| {
            let switch = Arc::new(Switched::new(inner, Arc::clone(&self.ledger)));
            Generator::builder(self.cfg.layout, &self.cfg.namespace, Arc::clone(&switch))
                .grant_duration_ms(self.cfg.grant_ms)
                .horizon_ms(self.cfg.horizon_ms)
                .startup_timeout(self.cfg.startup_timeout)
                .start()
                .map(|g| (g, switch))
        });
        let took = t0.elapsed();
        self.starting.fetch_sub(1, Ordering::SeqCst);
        let us = (took.as_micros() as u64).max(1);
        match result {
            Ok((generator, switch)) => {
                let stats = generator.stats();
                let Some(worker) = stats.worker else {
                    return;
                };
                let proc = Arc::new(Proc {
                    generator,
                    switch,
                    worker,
                    incarnation: stats.incarnation,
                    kill: fastrand::f64() < self.cfg.kill_fraction,
                });
                {
                    let mut s = self.starts.lock().unwrap_or_else(|p| p.into_inner());
                    let _ = s.interval.record(us);
                    let _ = s.all.record(us);
                    if self.steady.load(Ordering::Relaxed) {
                        let _ = s.steady.record(us);
                    }
                }
                self.started.fetch_add(1, Ordering::Relaxed);
                self.issue(&proc);
                let mean = self.cfg.lifetime.as_secs_f64();
                let life = Duration::from_secs_f64(mean * (0.5 + fastrand::f64()));
                self.live
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(n, proc);
                self.deaths
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(std::cmp::Reverse((Instant::now() + life, n)));
            }
            Err(e) => {
                let mut s = self.starts.lock().unwrap_or_else(|p| p.into_inner());
                s.interval_failed += 1;
                *s.failures.entry(format!("{:?}", e.kind())).or_default() += 1;
                if s.failure_examples.len() < 5 {
                    s.failure_examples.push(e.to_string());
                }
                drop(s);
                // A process that cannot start is restarted, as by its
                // supervisor.
                self.request_start();
            }
        }
    }

    /// Stops one process: a last batch of IDs, then a hard kill (the switch
    /// first, so nothing more reaches the authority) or a graceful close
    /// (the release runs); then its replacement is started.
    fn stop_one(self: &Arc<Self>, p: Arc<Proc>) {
        self.issue(&p);
        // The worker now (a lost lease moves a process to another worker).
        let worker = p.generator.stats().worker.unwrap_or(p.worker);
        if p.kill {
            p.switch.kill();
            self.ledger
                .killed(worker, p.incarnation, SystemClock.now_ms());
            p.generator.close();
            self.kills.fetch_add(1, Ordering::Relaxed);
        } else {
            p.generator.close();
            self.ledger
                .released(worker, p.incarnation, SystemClock.now_ms());
            self.closes.fetch_add(1, Ordering::Relaxed);
        }
        drop(p);
        self.request_start();
    }

    fn request_start(&self) {
        if self.ending.load(Ordering::SeqCst) {
            return;
        }
        if let Some(tx) = &*self.start_tx.lock().unwrap_or_else(|p| p.into_inner()) {
            let _ = tx.send(());
        }
    }

    /// Runs the fleet until `until` returns true (checked every 5 ms), then
    /// stops every process and waits for the pools. `on_tick` runs on the
    /// scheduler loop.
    pub fn run(self: &Arc<Self>, mut until: impl FnMut(&Fleet) -> bool) {
        let (start_tx, start_rx) = channel::<()>();
        let (stop_tx, stop_rx) = channel::<Arc<Proc>>();
        *self.start_tx.lock().unwrap_or_else(|p| p.into_inner()) = Some(start_tx);
        *self.stop_tx.lock().unwrap_or_else(|p| p.into_inner()) = Some(stop_tx.clone());
        let me = Arc::clone(self);
        let starters = pool(self.cfg.starters, "churn-start", start_rx, move |()| {
            me.start_one()
        });
        let me = Arc::clone(self);
        let stoppers = pool(self.cfg.stoppers, "churn-stop", stop_rx, move |p| {
            me.stop_one(p)
        });
        let me = Arc::clone(self);
        let issuer = std::thread::Builder::new()
            .name("churn-issue".into())
            .spawn(move || {
                while !me.ending.load(Ordering::SeqCst) {
                    let t0 = Instant::now();
                    let procs: Vec<Arc<Proc>> = me
                        .live
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .values()
                        .cloned()
                        .collect();
                    for p in &procs {
                        me.issue(p);
                    }
                    drop(procs);
                    let left = me.cfg.issue_interval.saturating_sub(t0.elapsed());
                    std::thread::sleep(left.max(Duration::from_millis(10)));
                }
            })
            .expect("spawn the issuer");
        // The first fleet: every process starts now; its lifetimes are
        // spread so that deaths do not come in one wave.
        let ramp_from = Instant::now();
        let mut ramped = 0usize;
        while !until(self) {
            let now = Instant::now();
            let due = if self.cfg.ramp_per_s > 0.0 {
                ((now - ramp_from).as_secs_f64() * self.cfg.ramp_per_s) as usize + 1
            } else {
                self.cfg.live
            };
            while ramped < due.min(self.cfg.live) {
                self.request_start();
                ramped += 1;
            }
            loop {
                let due = {
                    let mut d = self.deaths.lock().unwrap_or_else(|p| p.into_inner());
                    match d.peek() {
                        Some(std::cmp::Reverse((at, _))) if *at <= now => d.pop(),
                        _ => None,
                    }
                };
                let Some(std::cmp::Reverse((_, n))) = due else {
                    break;
                };
                let p = self
                    .live
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&n);
                if let Some(p) = p {
                    let _ = stop_tx.send(p);
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // The end: no replacements; every live process stops (killed or
        // closed as drawn), and the pools drain.
        self.ending.store(true, Ordering::SeqCst);
        *self.start_tx.lock().unwrap_or_else(|p| p.into_inner()) = None;
        for t in starters {
            let _ = t.join();
        }
        let rest: Vec<Arc<Proc>> = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, p)| p)
            .collect();
        for p in rest {
            let _ = stop_tx.send(p);
        }
        drop(stop_tx);
        *self.stop_tx.lock().unwrap_or_else(|p| p.into_inner()) = None;
        for t in stoppers {
            let _ = t.join();
        }
        let _ = issuer.join();
    }
}
