//! The harness: a throwaway PostgreSQL (or Redis, in state-loss mode), the
//! worker fleet, the fault schedule, the end-of-run proof and its summary.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::args::Args;
use crate::faults::{self, Fault, FaultLog, FaultTiming, LossFault, LossLog};
use crate::fleet::{Fleet, Launch, WorkerSpec};
use crate::pgserver::PgServer;
use crate::redisserver::RedisServer;
use crate::status::Status;
use crate::verify::{self, Findings};

/// The worker value the fault-injection fake grant uses.
pub const FAKE_GRANT_WORKER: u32 = 15;

/// The authority the workers are granted from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorityKind {
    /// A throwaway PostgreSQL: the proof includes its grant log.
    Postgres,
    /// A throwaway Redis without persistence (state-loss mode): its state
    /// is lost by the `redis-*` faults, so the proof is from the IDs alone.
    Redis,
}

/// The harness's options.
#[derive(Debug, Clone)]
pub struct HarnessConfig {
    /// Where grants come from.
    pub authority: AuthorityKind,
    /// Worker processes running at once.
    pub processes: usize,
    /// Threads per process.
    pub threads: usize,
    /// IDs per second per thread (0 = as fast as possible).
    pub rate: u64,
    /// Length of the faulty phase.
    pub duration: Duration,
    /// Mean pause between two harness faults.
    pub fault_interval: Duration,
    /// Fault kinds to inject.
    pub faults: Vec<Fault>,
    /// Clock steps inside half of the workers.
    pub clock_faults: bool,
    /// Grant length (ms).
    pub grant_ms: u64,
    /// Horizon (ms).
    pub horizon_ms: u64,
    /// Authority lease grace (ms).
    pub lease_grace_ms: u64,
    /// `max_drift_ms` of the workers.
    pub max_drift_ms: u64,
    /// PostgreSQL downtime per restart fault (ms).
    pub pg_down_ms: u64,
    /// Redis authority: `max_lead_ms` (a grant ends at most this after the
    /// server's clock).
    pub max_lead_ms: u64,
    /// Redis authority: `clock_skew_ms` (added to every quarantine).
    pub clock_skew_ms: u64,
    /// Redis downtime per state-loss fault (ms).
    pub redis_down_ms: u64,
    /// Age of the snapshot a `redis-stale` restart loads (ms).
    pub stale_ms: u64,
    /// FAULT INJECTION: after every Redis restart, the store record is
    /// rewritten to hide the loss (the run must then find duplicates).
    pub fault_defeat_quarantine: bool,
    /// Fail unless at least this many IDs were recorded.
    pub min_ids: u64,
    /// Load the IDs into PostgreSQL at the end.
    pub pg_check: bool,
    /// The PostgreSQL authority over TLS (`sslmode=verify-full`).
    pub tls: bool,
    /// Use this server instead of a throwaway one (no PostgreSQL faults).
    pub reuse_url: Option<String>,
    /// Where the files go (a new temporary directory if `None`).
    pub work_dir: Option<PathBuf>,
    /// Keep the record files.
    pub keep: bool,
    /// FAULT INJECTION: the first two slots share one fake grant (the
    /// checks must then fail).
    pub fault_shared_fake_grant: bool,
    /// Random seed (faults, clock schedule choices are per process).
    pub seed: u64,
    /// A Python interpreter with the `grantid` package: runs one forking
    /// Python worker (torture/python/fork_worker.py) beside the Rust ones.
    pub python: Option<PathBuf>,
}

/// The forking Python worker.
pub const PYTHON_WORKER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/python/fork_worker.py");

/// Options the harness accepts (`--help` prints them).
pub const HELP: &str = "\
torture-harness: many grantid worker processes against a throwaway PostgreSQL
authority, with kill -9, SIGSTOP past the grant (+ takeover), PostgreSQL
stop/start and clock steps; then proves 0 duplicates and 0 IDs outside the
authority's grant log. With --authority redis (state-loss mode): a throwaway
Redis without persistence, restarted empty or from a stale snapshot, and a
proof from the IDs alone (0 duplicates).

  --authority KIND       postgres or redis (postgres)
  --processes N          worker processes at once (4)
  --threads N            threads per process (2)
  --rate N               IDs/s per thread, 0 = unlimited (25000)
  --duration-s N         length of the faulty phase (60)
  --fault-interval-ms N  mean pause between harness faults (3000)
  --faults LIST          kill,stop,postgres,clock (postgres) or
                         kill,stop,redis-empty,redis-stale,clock (redis),
                         or none (all of the authority's)
  --grant-ms N           grant length (200)
  --horizon-ms N         committed time kept ahead (400)
  --lease-grace-ms N     authority lease grace (200)
  --max-drift-ms N       generator max_drift_ms (100)
  --pg-down-ms N         PostgreSQL downtime per restart (2500)
  --max-lead-ms N        redis: max_lead_ms (horizon + grant + 200)
  --clock-skew-ms N      redis: clock_skew_ms (200)
  --redis-down-ms N      redis: downtime per state-loss fault (250)
  --stale-ms N           redis-stale: snapshot age at the kill (3000)
  --min-ids N            fail below this many recorded IDs (0)
  --no-pg-check          skip loading the IDs into a BIGINT PRIMARY KEY table
                         (with redis: no PostgreSQL at all)
  --reuse-postgres URL   use this server (no postgres faults); with redis,
                         for the primary-key table only
  --tls                  postgres: the authority over TLS (a throwaway CA,
                         sslmode=verify-full)
  --work-dir DIR         record files here (default: a new temp dir)
  --keep                 keep the record files
  --seed N               random seed
  --python PATH          also run a forking Python worker with this
                         interpreter (needs the grantid package)
  --fault-shared-fake-grant
                         FAULT INJECTION: two workers bypass the authority
                         with one shared fake grant; the run must FAIL
  --fault-defeat-quarantine
                         FAULT INJECTION (redis): after each Redis restart
                         the store record is rewritten to hide the loss;
                         the run is expected to FAIL with duplicates
";

const FLAGS: &[&str] = &[
    "no-pg-check",
    "tls",
    "keep",
    "fault-shared-fake-grant",
    "fault-defeat-quarantine",
    "help",
];
const OPTIONS: &[&str] = &[
    "authority",
    "max-lead-ms",
    "clock-skew-ms",
    "redis-down-ms",
    "stale-ms",
    "fault-defeat-quarantine",
    "processes",
    "threads",
    "rate",
    "duration-s",
    "fault-interval-ms",
    "faults",
    "grant-ms",
    "horizon-ms",
    "lease-grace-ms",
    "max-drift-ms",
    "pg-down-ms",
    "min-ids",
    "no-pg-check",
    "tls",
    "reuse-postgres",
    "work-dir",
    "keep",
    "seed",
    "fault-shared-fake-grant",
    "python",
    "help",
];

impl HarnessConfig {
    /// Parses the command line; `Ok(None)` for `--help`.
    pub fn from_argv(argv: impl IntoIterator<Item = String>) -> Result<Option<Self>, String> {
        let a = Args::parse(argv, FLAGS)?;
        a.only(OPTIONS)?;
        if a.flag("help") {
            return Ok(None);
        }
        let authority = match a.str("authority").unwrap_or("postgres") {
            "postgres" => AuthorityKind::Postgres,
            "redis" => AuthorityKind::Redis,
            other => return Err(format!("--authority: {other:?} is not postgres or redis")),
        };
        let all = match authority {
            AuthorityKind::Postgres => "kill,stop,postgres,clock",
            AuthorityKind::Redis => "kill,stop,redis-empty,redis-stale,clock",
        };
        let mut faults = Vec::new();
        let mut clock_faults = false;
        for k in a.str("faults").unwrap_or(all).split(',') {
            match k.trim() {
                "clock" => clock_faults = true,
                "none" | "" => {}
                k => match [
                    Fault::Kill,
                    Fault::Stop,
                    Fault::Postgres,
                    Fault::RedisEmpty,
                    Fault::RedisStale,
                ]
                .into_iter()
                .find(|f| f.name() == k)
                {
                    Some(f)
                        if f.loses_state() != (authority == AuthorityKind::Redis)
                            && f != Fault::Kill
                            && f != Fault::Stop =>
                    {
                        return Err(format!(
                            "--faults: {k} needs --authority {}",
                            if f.loses_state() { "redis" } else { "postgres" }
                        ));
                    }
                    Some(f) => faults.push(f),
                    None => return Err(format!("--faults: unknown kind {k:?}")),
                },
            }
        }
        let grant_ms = a.get("grant-ms", 200)?;
        let horizon_ms = a.get("horizon-ms", 400)?;
        let c = HarnessConfig {
            authority,
            processes: a.get("processes", 4)?,
            threads: a.get("threads", 2)?,
            rate: a.get("rate", 25_000)?,
            duration: Duration::from_secs(a.get("duration-s", 60)?),
            fault_interval: Duration::from_millis(a.get("fault-interval-ms", 3_000)?),
            faults,
            clock_faults,
            grant_ms,
            horizon_ms,
            lease_grace_ms: a.get("lease-grace-ms", 200)?,
            max_drift_ms: a.get("max-drift-ms", 100)?,
            pg_down_ms: a.get("pg-down-ms", 2_500)?,
            max_lead_ms: a.get("max-lead-ms", horizon_ms + grant_ms + 200)?,
            clock_skew_ms: a.get("clock-skew-ms", 200)?,
            redis_down_ms: a.get("redis-down-ms", 250)?,
            stale_ms: a.get("stale-ms", 3_000)?,
            fault_defeat_quarantine: a.flag("fault-defeat-quarantine"),
            min_ids: a.get("min-ids", 0)?,
            pg_check: !a.flag("no-pg-check"),
            tls: a.flag("tls"),
            reuse_url: a.str("reuse-postgres").map(str::to_owned),
            work_dir: a.str("work-dir").map(PathBuf::from),
            keep: a.flag("keep"),
            fault_shared_fake_grant: a.flag("fault-shared-fake-grant"),
            seed: a.get("seed", fastrand::u64(..))?,
            python: a.str("python").map(PathBuf::from),
        };
        if c.processes == 0 || c.processes > 12 {
            return Err("--processes must be 1..=12 (the layout has 16 workers)".into());
        }
        if c.faults.contains(&Fault::Stop) && c.processes < 2 {
            return Err("the stop fault needs --processes 2 or more".into());
        }
        if c.fault_shared_fake_grant && c.processes < 2 {
            return Err("--fault-shared-fake-grant needs --processes 2 or more".into());
        }
        if c.reuse_url.is_some() && c.faults.contains(&Fault::Postgres) {
            return Err("--reuse-postgres cannot be combined with postgres faults".into());
        }
        if c.authority == AuthorityKind::Redis && c.max_lead_ms < c.horizon_ms + c.grant_ms {
            return Err(format!(
                "--max-lead-ms {} is below --horizon-ms {} + --grant-ms {}: the generators \
                 would refuse to start",
                c.max_lead_ms, c.horizon_ms, c.grant_ms
            ));
        }
        if c.python.is_some() && c.authority == AuthorityKind::Redis {
            return Err("--python is not run with --authority redis".into());
        }
        if c.tls && (c.authority != AuthorityKind::Postgres || c.reuse_url.is_some()) {
            return Err(
                "--tls needs --authority postgres and a throwaway server (no --reuse-postgres)"
                    .into(),
            );
        }
        if c.fault_defeat_quarantine && c.authority != AuthorityKind::Redis {
            return Err("--fault-defeat-quarantine needs --authority redis".into());
        }
        Ok(Some(c))
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn catch_interrupts() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installs an async-signal-safe handler (one atomic store).
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

/// Everything the summary shows.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Process starts.
    pub processes: usize,
    /// Faults.
    pub faults: FaultLog,
    /// Sums over the final status of every process.
    pub totals: Status,
    /// Checks.
    pub findings: Findings,
    /// Problems: each one fails the run.
    pub problems: Vec<String>,
    /// Wall time.
    pub wall: Duration,
}

/// Runs the torture; returns the outcome (`problems` empty = pass).
pub fn run(c: &HarnessConfig) -> Result<Outcome, String> {
    let started = Instant::now();
    fastrand::seed(c.seed);
    catch_interrupts();
    let dir = match &c.work_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(crate::scratch_name("grantid-torture")),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let result = run_in(c, &dir, started);
    if !c.keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

fn run_in(c: &HarnessConfig, dir: &std::path::Path, started: Instant) -> Result<Outcome, String> {
    let layout = crate::torture_layout().map_err(|e| e.to_string())?;
    let redis_mode = c.authority == AuthorityKind::Redis;
    // PostgreSQL: the authority, or (state-loss mode) the proof's table only.
    let mut pg = match &c.reuse_url {
        None if c.tls => Some(PgServer::start_tls()?),
        None if !redis_mode || c.pg_check => Some(PgServer::start()?),
        _ => None,
    };
    let pg_url = c
        .reuse_url
        .clone()
        .or_else(|| pg.as_ref().map(PgServer::url));
    // What the authority is given: over TLS with --tls (the proof's table
    // is loaded over pg_url).
    let authority_url = pg
        .as_ref()
        .map_or_else(|| pg_url.clone(), |p| Some(p.authority_url()));
    let mut redis = if redis_mode {
        Some(RedisServer::start()?)
    } else {
        None
    };
    let url = match (&redis, &authority_url) {
        (Some(r), _) => format!(
            "{}?lease_grace_ms={}&timeout_ms=1000&max_lead_ms={}&clock_skew_ms={}",
            r.url(),
            c.lease_grace_ms,
            c.max_lead_ms,
            c.clock_skew_ms
        ),
        (None, Some(base)) => {
            let sep = if base.contains('?') { '&' } else { '?' };
            format!(
                "{base}{sep}lease_grace_ms={}&timeout_ms=1000",
                c.lease_grace_ms
            )
        }
        (None, None) => unreachable!("a PostgreSQL authority was started above"),
    };
    let authority = grantid_authority::open(&url).map_err(|e| format!("authority: {e}"))?;
    // The throwaway Redis never issued an ID: declared new, so its first use
    // waits for no quarantine (docs/AUTHORITIES.md, "State loss").
    if redis_mode {
        authority.init_new_deployment()
    } else {
        authority.init()
    }
    .map_err(|e| format!("authority init: {e}"))?;
    let namespace = format!("torture-{:016x}", fastrand::u64(..));
    let exe = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .with_file_name("torture-worker");
    let spec = WorkerSpec {
        exe,
        url: url.clone(),
        namespace: namespace.clone(),
        threads: c.threads,
        rate: c.rate,
        grant_ms: c.grant_ms,
        horizon_ms: c.horizon_ms,
        max_drift_ms: c.max_drift_ms,
    };
    let timing = FaultTiming {
        horizon_ms: c.horizon_ms,
        lease_grace_ms: c.lease_grace_ms,
        pg_down_ms: c.pg_down_ms,
        epoch_ms: layout.epoch_ms(),
        redis_down_ms: c.redis_down_ms,
        stale_ms: c.stale_ms,
    };
    let mut fleet = Fleet::new(spec, dir);
    let mut out = Outcome::default();
    for slot in 0..c.processes {
        let launch = Launch {
            clock_faults: c.clock_faults && slot % 2 == 0,
            prefer_worker: None,
            fake_grant: (c.fault_shared_fake_grant && slot < 2).then_some(FAKE_GRANT_WORKER),
        };
        fleet.spawn(slot, launch)?;
    }
    for slot in 0..c.processes {
        if fleet
            .wait_status(slot, Duration::from_secs(30), |s| s.has("worker"))
            .is_none()
        {
            out.problems
                .push(format!("slot {slot} got no first grant within 30 s"));
        }
    }
    let mut python = match &c.python {
        Some(py) => Some(spawn_python(py, &fleet, dir, c)?),
        None => None,
    };
    eprintln!(
        "torture: {} processes x {} threads, namespace {namespace}, files in {}, authority {}",
        c.processes,
        c.threads,
        dir.display(),
        match (redis_mode, c.tls) {
            (true, _) => "redis",
            (false, true) => "postgres over TLS (sslmode=verify-full)",
            (false, false) => "postgres",
        }
    );

    // The faulty phase: every enabled kind once, in order, then at random.
    let end = Instant::now() + c.duration;
    let mut n = 0usize;
    let mut next = Instant::now() + c.fault_interval / 2;
    while Instant::now() < end && !INTERRUPTED.load(Ordering::SeqCst) {
        fleet.reap_crashes()?;
        if Instant::now() < next || c.faults.is_empty() {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        let kind = if n < c.faults.len() {
            c.faults[n]
        } else {
            c.faults[fastrand::usize(..c.faults.len())]
        };
        n += 1;
        eprintln!(
            "torture: {:>6.1}s fault {}",
            started.elapsed().as_secs_f64(),
            kind.name()
        );
        match kind {
            Fault::Kill => faults::kill(&mut fleet, &mut out.faults)?,
            Fault::Stop => faults::stop(&mut fleet, timing, &mut out.faults)?,
            Fault::Postgres => match pg.as_mut() {
                Some(server) => faults::postgres(&mut fleet, server, timing, &mut out.faults)?,
                None => unreachable!("refused by the options"),
            },
            Fault::RedisEmpty | Fault::RedisStale => match redis.as_mut() {
                Some(server) => {
                    let f = LossFault {
                        server,
                        url: &url,
                        stale: kind == Fault::RedisStale,
                        defeat: c.fault_defeat_quarantine,
                    };
                    faults::redis_loss(&mut fleet, f, timing, &mut out.faults)?
                }
                None => unreachable!("refused by the options"),
            },
        }
        let jitter = 0.5 + fastrand::f64();
        next = Instant::now() + c.fault_interval.mul_f64(jitter);
    }
    if INTERRUPTED.load(Ordering::SeqCst) {
        out.problems.push("interrupted".into());
    }
    fleet.reap_crashes()?;
    out.problems.extend(fleet.stop_all(Duration::from_secs(30)));
    if let Some(child) = python.take() {
        python_end(child, dir, &mut out);
    }
    out.problems.extend(fleet.unexpected_exits.iter().cloned());
    out.processes = fleet.all.len();
    for p in &fleet.all {
        if let Some(s) = p.read_status() {
            for (k, v) in &s.0 {
                if !matches!(
                    k.as_str(),
                    "pid"
                        | "incarnation"
                        | "worker"
                        | "first_worker"
                        | "grant_end"
                        | "done"
                        | "uptime_ms"
                ) {
                    out.totals.set(k, out.totals.get(k) + v);
                }
            }
        }
    }

    // The proof. In state-loss mode the authority's grant log was rolled
    // back with its state (by design), so it proves nothing: IDs only.
    eprintln!(
        "torture: {:>6.1}s checking (record files; PostgreSQL primary key)",
        started.elapsed().as_secs_f64()
    );
    drop(redis);
    let mut client = match &pg_url {
        Some(u) if !redis_mode || c.pg_check => Some(verify::connect(u)?),
        _ => None,
    };
    let grants = match (&mut client, redis_mode) {
        (Some(cl), false) => Some(verify::load_grants(cl, &namespace)?),
        _ => None,
    };
    let mut files: Vec<PathBuf> = fleet
        .all
        .iter()
        .map(|p| p.ids.clone())
        .filter(|p| p.exists()) // a process killed before its first grant has none
        .collect();
    files.extend(python_files(dir));
    // The file checks and the PostgreSQL load run side by side.
    let (files, pg_found) = std::thread::scope(|scope| {
        let pg_side = client.as_mut().filter(|_| c.pg_check).map(|client| {
            let all = &files;
            scope.spawn(move || {
                let mut found = Findings::default();
                verify::pg_check(client, all, &mut found).map(|()| found)
            })
        });
        let files = verify::check_files(&files, &layout, grants.as_ref(), &dir.join("scratch"));
        let pg_found = pg_side.map(|h| {
            h.join()
                .unwrap_or_else(|_| Err("the PostgreSQL check panicked".into()))
        });
        (files, pg_found)
    });
    out.findings = files?;
    if let Some(found) = pg_found {
        let found = found?;
        out.findings.pg_rows = found.pg_rows;
        out.findings.pg_dups = found.pg_dups;
        out.findings.pg_refusal = found.pg_refusal;
    }
    judge(c, &mut out);
    out.wall = started.elapsed();
    drop(fleet);
    drop(pg);
    Ok(out)
}

/// Adds a problem for every failed check.
fn judge(c: &HarnessConfig, out: &mut Outcome) {
    let f = &out.findings;
    let mut p = Vec::new();
    if f.dups.duplicates > 0 {
        p.push(format!(
            "{} duplicate IDs (e.g. {:?})",
            f.dups.duplicates, f.dups.samples
        ));
    }
    if f.outside > 0 {
        p.push(format!(
            "{} IDs outside every logged grant of their worker",
            f.outside
        ));
    }
    if f.foreign > 0 {
        p.push(format!(
            "{} IDs inside another incarnation's grant",
            f.foreign
        ));
    }
    if f.overlaps > 0 {
        p.push(format!(
            "the grant log has {} overlapping grants",
            f.overlaps
        ));
    }
    if let Some(rows) = f.pg_rows
        && (f.pg_dups > 0 || rows != f.ids)
    {
        p.push(format!(
            "PostgreSQL check: {rows} keyed rows for {} IDs, {} duplicates",
            f.ids, f.pg_dups
        ));
    }
    if f.ids < c.min_ids {
        p.push(format!(
            "only {} IDs recorded, fewer than {}",
            f.ids, c.min_ids
        ));
    }
    let fl = &out.faults;
    for kind in &c.faults {
        let missing = match kind {
            Fault::Kill => fl.kills == 0,
            Fault::Stop => fl.stops == 0 || fl.takeovers < fl.stops || fl.losses_seen < fl.stops,
            Fault::Postgres => fl.pg_restarts == 0,
            Fault::RedisEmpty => fl.redis_empty.restarts == 0,
            Fault::RedisStale => fl.redis_stale.restarts == 0,
        };
        if missing {
            p.push(format!(
                "fault {} was not injected (and verified)",
                kind.name()
            ));
        }
    }
    if c.python.is_some()
        && (fl.py_forks == 0 || fl.py_children_ok == 0 || fl.py_children_failed > 0)
    {
        p.push(format!(
            "Python fork fault: {} forks, {} children recorded and exited cleanly, {} failed",
            fl.py_forks, fl.py_children_ok, fl.py_children_failed
        ));
    }
    if c.clock_faults && (out.totals.get("skew_back") == 0 || out.totals.get("skew_forward") == 0) {
        p.push("clock faults were not injected".into());
    }
    p.extend(fl.failures.iter().cloned());
    out.problems.extend(p);
}

/// A summary line of one state-loss fault kind.
fn loss_line(l: &LossLog, how: &str, note: &str) -> String {
    let spread = match l.spread() {
        Some((min, med, max)) => format!(
            "unavailable {min:.2} / {med:.2} / {max:.2} s min / median / max over {}",
            l.unavailable.len()
        ),
        None => "unavailability not measured".into(),
    };
    format!(
        "{} ({how}; workers saw loss or uncertainty {}/{}, granted and issued again {}/{}; {spread}{note})",
        l.restarts, l.seen, l.expected, l.recovered, l.expected
    )
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// The summary printed at the end of a run.
pub fn summary(c: &HarnessConfig, o: &Outcome) -> String {
    let f = &o.findings;
    let t = &o.totals;
    let fl = &o.faults;
    let mut s = String::new();
    let mut line = |k: &str, v: String| s.push_str(&format!("  {k:<22} {v}\n"));
    line(
        "authority",
        match c.authority {
            AuthorityKind::Postgres => "PostgreSQL (throwaway)".into(),
            AuthorityKind::Redis => format!(
                "Redis (throwaway, no persistence; state-loss mode), PostgreSQL for the proof: {}",
                if c.pg_check { "yes" } else { "no" }
            ),
        },
    );
    line(
        "processes",
        format!(
            "{} started ({} at a time, {} threads each, {} IDs/s per thread{})",
            o.processes,
            c.processes,
            c.threads,
            if c.rate == 0 {
                "unlimited".to_string()
            } else {
                thousands(c.rate)
            },
            if c.fault_shared_fake_grant {
                "; FAULT INJECTION: 2 share a fake grant"
            } else {
                ""
            }
        ),
    );
    line(
        "IDs recorded",
        format!(
            "{} in {} files (Rust workers' last status: {} issued; Python parent: {}; torn tail bytes {})",
            thousands(f.ids),
            f.files,
            thousands(t.get("ids_issued")),
            thousands(t.get("py_ids")),
            f.torn_bytes
        ),
    );
    line(
        "fault kill -9",
        format!("{} (each restarted with a fresh incarnation)", fl.kills),
    );
    line(
        "fault SIGSTOP",
        format!(
            "{} (worker taken over by another process: {}, loss seen after SIGCONT: {})",
            fl.stops, fl.takeovers, fl.losses_seen
        ),
    );
    if c.authority == AuthorityKind::Postgres {
        line(
            "fault postgres",
            format!(
                "{} stop/start (workers saw uncertainty {}/{}, issued again {}/{})",
                fl.pg_restarts,
                fl.pg_uncertain_seen,
                fl.pg_expected,
                fl.pg_recovered,
                fl.pg_expected
            ),
        );
    } else {
        let what = if c.fault_defeat_quarantine {
            "; FAULT INJECTION: loss hidden from the authority"
        } else {
            ""
        };
        line(
            "fault redis-empty",
            loss_line(&fl.redis_empty, "kill -9, restart empty, init", what),
        );
        line(
            "fault redis-stale",
            loss_line(
                &fl.redis_stale,
                &format!("SAVE, {} ms on, kill -9, restart from it", c.stale_ms),
                what,
            ),
        );
        line(
            "quarantine",
            format!(
                "max_lead_ms {} + clock_skew_ms {} = {:.1} s after a detected loss",
                c.max_lead_ms,
                c.clock_skew_ms,
                (c.max_lead_ms + c.clock_skew_ms) as f64 / 1000.0
            ),
        );
    }
    line(
        "fault fork (python)",
        match &c.python {
            None => "not run (no --python)".into(),
            Some(_) => format!(
                "{} forks of a Python worker; {} children recorded IDs and exited cleanly, {} failed",
                fl.py_forks, fl.py_children_ok, fl.py_children_failed
            ),
        },
    );
    line(
        "fault clock",
        format!(
            "{} steps back, {} forward (ClockRollback errors {}, rollbacks seen {})",
            t.get("skew_back"),
            t.get("skew_forward"),
            t.get("err_clock_rollback"),
            t.get("clock_rollbacks")
        ),
    );
    let errs: Vec<String> =
        t.0.iter()
            .filter(|(k, _)| k.starts_with("err_"))
            .map(|(k, v)| format!("{}={v}", &k[4..]))
            .collect();
    line(
        "errors seen",
        if errs.is_empty() {
            "none".into()
        } else {
            errs.join(" ")
        },
    );
    line(
        "lease",
        format!(
            "{} grants acquired, {} renewals, {} uncertain retries, {} losses",
            t.get("grants_acquired"),
            t.get("renewals"),
            t.get("uncertain_retries"),
            t.get("lease_losses")
        ),
    );
    if c.authority == AuthorityKind::Postgres {
        line(
            "grant log",
            format!(
                "{} grants over {} workers, {} overlaps",
                f.grants, f.workers, f.overlaps
            ),
        );
    } else {
        line(
            "grant log",
            "not checked: the state-loss faults roll the Redis authority's state, its grant \
             log included, back by design; the proof is from the IDs alone"
                .into(),
        );
    }
    line("duplicates", thousands(f.dups.duplicates));
    if c.authority == AuthorityKind::Postgres {
        line(
            "outside grants",
            format!(
                "{} (in another incarnation's grant: {})",
                thousands(f.outside),
                thousands(f.foreign)
            ),
        );
    } else {
        line(
            "outside grants",
            "not checked (no grant log survives a state loss)".into(),
        );
    }
    line(
        "postgres check",
        match (f.pg_rows, &f.pg_refusal) {
            (None, _) => "skipped".into(),
            (Some(r), None) => format!(
                "{} rows in a BIGINT PRIMARY KEY table, 0 refused",
                thousands(r)
            ),
            (Some(r), Some(why)) => format!(
                "primary key refused ({why}); {} distinct, {} duplicates",
                thousands(r),
                f.pg_dups
            ),
        },
    );
    line("wall time", format!("{:.1} s", o.wall.as_secs_f64()));
    for sample in &f.samples {
        s.push_str(&format!("  ! {sample}\n"));
    }
    for problem in &o.problems {
        s.push_str(&format!("  FAIL: {problem}\n"));
    }
    s.push_str(if o.problems.is_empty() {
        "RESULT: PASS\n"
    } else {
        "RESULT: FAIL\n"
    });
    format!("torture summary (seed {})\n{s}", c.seed)
}

fn spawn_python(
    py: &std::path::Path,
    fleet: &Fleet,
    dir: &std::path::Path,
    c: &HarnessConfig,
) -> Result<std::process::Child, String> {
    let log = std::fs::File::create(dir.join("py.log")).map_err(|e| e.to_string())?;
    std::process::Command::new(py)
        .arg(PYTHON_WORKER)
        .args([
            "--url",
            &fleet.spec().url,
            "--namespace",
            &fleet.spec().namespace,
        ])
        .arg("--dir")
        .arg(dir)
        .arg("--stop-file")
        .arg(fleet.stop_file())
        .arg("--status")
        .arg(dir.join("py.status"))
        .args(["--rate", &c.rate.clamp(1, 20_000).to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start {} {PYTHON_WORKER}: {e}", py.display()))
}

/// Waits for the Python worker (the stop file is already there) and takes
/// its fork counts.
fn python_end(mut child: std::process::Child, dir: &std::path::Path, out: &mut Outcome) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let code = loop {
        match child.try_wait() {
            Ok(Some(code)) => break Some(code),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let log = std::fs::read_to_string(dir.join("py.log")).unwrap_or_default();
    if !code.is_some_and(|c| c.success()) {
        out.problems.push(format!(
            "the Python worker ended with {code:?}: {}",
            log.trim()
        ));
    }
    if let Ok(Some(s)) = Status::read(&dir.join("py.status")) {
        out.faults.py_forks = s.get("forks");
        out.faults.py_children_ok = s.get("children_ok");
        out.faults.py_children_failed = s.get("children_failed");
        out.totals.set("py_ids", s.get("ids"));
    }
}

/// The Python worker's record files (`py-*.ids`).
fn python_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "ids")
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("py-"))
        })
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &str) -> Result<HarnessConfig, String> {
        HarnessConfig::from_argv(args.split_whitespace().map(String::from))
            .map(|c| c.expect("not --help"))
    }

    #[test]
    fn fault_kinds_follow_the_authority() {
        let pg = parse("").unwrap();
        assert_eq!(pg.authority, AuthorityKind::Postgres);
        assert_eq!(
            pg.faults,
            [Fault::Kill, Fault::Stop, Fault::Postgres],
            "the default"
        );
        let redis = parse("--authority redis").unwrap();
        assert_eq!(
            redis.faults,
            [
                Fault::Kill,
                Fault::Stop,
                Fault::RedisEmpty,
                Fault::RedisStale
            ]
        );
        assert!(redis.clock_faults);
        assert_eq!(redis.max_lead_ms, 400 + 200 + 200);
        assert!(
            parse("--faults redis-empty")
                .unwrap_err()
                .contains("--authority redis")
        );
        assert!(
            parse("--authority redis --faults postgres")
                .unwrap_err()
                .contains("--authority postgres")
        );
        assert!(parse("--authority redis --faults kill,stop,redis-stale").is_ok());
        assert!(parse("--authority etcd").is_err());
        assert!(parse("--tls").unwrap().tls);
        assert!(parse("--authority redis --tls").is_err());
        assert!(parse("--tls --reuse-postgres postgres://h/db --faults kill").is_err());
        assert!(parse("--fault-defeat-quarantine").is_err());
        assert!(
            parse("--authority redis --max-lead-ms 500")
                .unwrap_err()
                .contains("refuse to start")
        );
    }
}
