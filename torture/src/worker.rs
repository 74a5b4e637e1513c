//! The worker process: several threads issuing IDs from one generator and
//! recording each one; a status file for the harness; a clean stop when the
//! stop file appears.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use grantid::{ErrorKind, Generator, GrantSource};

use crate::args::Args;
use crate::idfile::{RecordFile, Recorder};
use crate::skewclock::SkewClock;
use crate::sources::{PreferWorker, SharedFakeGrant};
use crate::status::Status;

/// The worker's options (see `torture-worker --help`).
#[derive(Debug)]
pub struct WorkerConfig {
    /// Authority URL (with `lease_grace_ms`, `timeout_ms`).
    pub url: String,
    /// Namespace of the run.
    pub namespace: String,
    /// Record file (created; must not exist).
    pub out: PathBuf,
    /// Status file.
    pub status: PathBuf,
    /// The process stops cleanly once this file exists.
    pub stop_file: PathBuf,
    /// Issuing threads.
    pub threads: usize,
    /// IDs per second per thread; 0 = as fast as possible.
    pub rate: u64,
    /// Grant length.
    pub grant_ms: u64,
    /// Committed time kept ahead.
    pub horizon_ms: u64,
    /// `max_drift_ms`.
    pub max_drift_ms: u64,
    /// Run the stepping clock.
    pub clock_faults: bool,
    /// Ask for this worker value first (takeover of a stopped process).
    pub prefer_worker: Option<u32>,
    /// FAULT INJECTION: bypass the authority with a fixed fake grant of this
    /// worker value (see [`SharedFakeGrant`]).
    pub fault_shared_fake_grant: Option<u32>,
}

/// Options the worker accepts.
pub const WORKER_OPTIONS: &[&str] = &[
    "url",
    "namespace",
    "out",
    "status",
    "stop-file",
    "threads",
    "rate",
    "grant-ms",
    "horizon-ms",
    "max-drift-ms",
    "clock-faults",
    "prefer-worker",
    "fault-shared-fake-grant",
];

impl WorkerConfig {
    /// From parsed arguments.
    pub fn from_args(a: &Args) -> Result<WorkerConfig, String> {
        a.only(WORKER_OPTIONS)?;
        let opt_u32 = |k: &str| -> Result<Option<u32>, String> {
            a.str(k)
                .map(|v| {
                    v.parse()
                        .map_err(|_| format!("--{k} {v:?} is not a worker number"))
                })
                .transpose()
        };
        let c = WorkerConfig {
            url: a.need("url")?.to_owned(),
            namespace: a.need("namespace")?.to_owned(),
            out: a.need("out")?.into(),
            status: a.need("status")?.into(),
            stop_file: a.need("stop-file")?.into(),
            threads: a.get("threads", 2)?,
            rate: a.get("rate", 0)?,
            grant_ms: a.get("grant-ms", 200)?,
            horizon_ms: a.get("horizon-ms", 400)?,
            max_drift_ms: a.get("max-drift-ms", 100)?,
            clock_faults: a.flag("clock-faults"),
            prefer_worker: opt_u32("prefer-worker")?,
            fault_shared_fake_grant: opt_u32("fault-shared-fake-grant")?,
        };
        if c.threads == 0 || c.threads > 64 {
            return Err("--threads must be 1..=64".into());
        }
        Ok(c)
    }
}

/// Counters shared by the issuing threads.
#[derive(Debug, Default)]
struct Counts {
    ids: AtomicU64,
    errors: [AtomicU64; ErrorKind::ALL.len()],
    io_errors: AtomicU64,
}

fn kind_index(kind: ErrorKind) -> usize {
    ErrorKind::ALL.iter().position(|k| *k == kind).unwrap_or(0)
}

/// Runs the worker until the stop file appears. Returns the process's exit
/// code.
pub fn run(c: WorkerConfig) -> Result<(), String> {
    let layout = crate::torture_layout().map_err(|e| e.to_string())?;
    let source: Box<dyn GrantSource> = match c.fault_shared_fake_grant {
        Some(worker) => Box::new(SharedFakeGrant { worker }),
        None => grantid_authority::from_url(&c.url).map_err(|e| e.to_string())?,
    };
    let source: Box<dyn GrantSource> = match c.prefer_worker {
        Some(w) => Box::new(PreferWorker::new(
            source,
            w,
            Instant::now() + Duration::from_secs(5),
        )),
        None => source,
    };
    let skew = c.clock_faults.then(SkewClock::new);
    let mut builder = Generator::builder(layout, c.namespace.clone(), source)
        .grant_duration_ms(c.grant_ms)
        .horizon_ms(c.horizon_ms)
        .max_drift_ms(c.max_drift_ms)
        .startup_timeout(Duration::from_secs(60))
        .backoff(Duration::from_millis(20), Duration::from_millis(500));
    if let Some(s) = &skew {
        builder = builder.clock(Arc::clone(s) as Arc<dyn grantid::Clock>);
    }
    let generator = builder
        .start()
        .map_err(|e| format!("generator did not start: {e}"))?;
    let first = generator.stats();
    let file = RecordFile::create(&c.out, first.incarnation)
        .map_err(|e| format!("{}: {e}", c.out.display()))?;
    let counts = Counts::default();
    let stop = AtomicBool::new(false);
    let started = Instant::now();

    std::thread::scope(|scope| {
        for t in 0..c.threads {
            let (generator, file, counts, stop) = (&generator, &file, &counts, &stop);
            let rate = c.rate;
            scope.spawn(move || issue(generator, file, counts, stop, t, rate));
        }
        if let Some(s) = &skew {
            let stop = &stop;
            scope.spawn(move || s.run_schedule(stop));
        }
        loop {
            let done = c.stop_file.exists();
            if done {
                stop.store(true, Ordering::SeqCst);
            }
            // The final snapshot is written after the threads are joined.
            if !done {
                let _ = snapshot(
                    &generator,
                    &counts,
                    skew.as_deref(),
                    first.worker,
                    started,
                    false,
                )
                .write(&c.status);
                std::thread::sleep(Duration::from_millis(100));
            } else {
                break;
            }
        }
    });
    let s = snapshot(
        &generator,
        &counts,
        skew.as_deref(),
        first.worker,
        started,
        true,
    );
    generator.close();
    s.write(&c.status)
        .map_err(|e| format!("{}: {e}", c.status.display()))?;
    if counts.io_errors.load(Ordering::Relaxed) > 0 {
        return Err("recording IDs failed".into());
    }
    Ok(())
}

fn snapshot(
    g: &Generator,
    counts: &Counts,
    skew: Option<&SkewClock>,
    first_worker: Option<u32>,
    started: Instant,
    done: bool,
) -> Status {
    let st = g.stats();
    let mut s = Status::default();
    s.set("pid", u64::from(std::process::id()));
    s.set("incarnation", st.incarnation);
    if let Some(w) = st.worker {
        s.set("worker", u64::from(w));
    }
    if let Some(w) = first_worker {
        s.set("first_worker", u64::from(w));
    }
    if let Some(e) = st.grant_end {
        s.set("grant_end", e);
    }
    s.set("ids", counts.ids.load(Ordering::Relaxed));
    s.set("ids_issued", st.ids_issued);
    s.set("grants_acquired", st.grants_acquired);
    s.set("renewals", st.renewals);
    s.set("uncertain_retries", st.uncertain_retries);
    s.set("invalid_grants", st.invalid_grants);
    s.set("lease_losses", st.lease_losses);
    s.set("clock_rollbacks", st.clock_rollbacks);
    s.set("waits", st.waits);
    for (i, k) in ErrorKind::ALL.iter().enumerate() {
        let n = counts.errors[i].load(Ordering::Relaxed);
        if n > 0 {
            s.set(&format!("err_{}", k.code().to_ascii_lowercase()), n);
        }
    }
    if let Some(c) = skew {
        s.set("skew_back", c.steps_back.load(Ordering::Relaxed));
        s.set("skew_forward", c.steps_forward.load(Ordering::Relaxed));
    }
    s.set("uptime_ms", started.elapsed().as_millis() as u64);
    if done {
        s.set("done", 1);
    }
    s
}

/// One issuing thread: even threads call `next_id`, odd threads `fill` 64
/// at a time; every ID is recorded; the pace is held to `rate` per second.
fn issue(
    g: &Generator,
    file: &RecordFile,
    counts: &Counts,
    stop: &AtomicBool,
    t: usize,
    rate: u64,
) {
    const CHUNK: usize = 64;
    let mut rec = Recorder::new(file);
    let mut ids = [0u64; CHUNK];
    let batch = t % 2 == 1;
    let start = Instant::now();
    let mut made: u64 = 0;
    let record = |rec: &mut Recorder<'_>, id: u64| {
        if rec.push(id).is_err() {
            counts.io_errors.fetch_add(1, Ordering::Relaxed);
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let mut n = 0usize;
        let mut failed = false;
        if batch {
            match g.fill(&mut ids) {
                Ok(()) => n = CHUNK,
                Err(e) => {
                    counts.errors[kind_index(e.kind())].fetch_add(1, Ordering::Relaxed);
                    failed = true;
                }
            }
        } else {
            for slot in ids.iter_mut() {
                match g.next_id() {
                    Ok(id) => {
                        *slot = id;
                        n += 1;
                    }
                    Err(e) => {
                        counts.errors[kind_index(e.kind())].fetch_add(1, Ordering::Relaxed);
                        failed = true;
                        break;
                    }
                }
            }
        }
        for &id in &ids[..n] {
            record(&mut rec, id);
        }
        made += n as u64;
        counts.ids.fetch_add(n as u64, Ordering::Relaxed);
        if rec.flush_if_old().is_err() {
            counts.io_errors.fetch_add(1, Ordering::Relaxed);
        }
        if failed {
            std::thread::sleep(Duration::from_millis(1));
        }
        if rate > 0 {
            let due = Duration::from_secs_f64(made as f64 / rate as f64);
            let elapsed = start.elapsed();
            if due > elapsed {
                std::thread::sleep((due - elapsed).min(Duration::from_millis(50)));
            }
        }
    }
    if rec.flush().is_err() {
        counts.io_errors.fetch_add(1, Ordering::Relaxed);
    }
}
