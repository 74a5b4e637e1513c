//! `grantid-churn`: a fleet of simulated processes, each a real
//! `grantid::Generator` with its own incarnation and grant source, started,
//! issuing and stopped (a share of them hard-killed) against one real
//! authority, for a bounded time. It samples the worker slots, the
//! authority's transactions and connections and its own CPU, then proves: no
//! duplicate ID, no stranded worker, no start refused while a worker was
//! free (docs/FLEET.md).

#![recursion_limit = "256"]

mod fleet;
mod ledger;
mod probe;
mod report;
mod source;

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::Parser;
use grantid::{Clock, Layout, SystemClock};
use grantid_authority::Target;

use crate::fleet::{Fleet, FleetConfig};
use crate::probe::{PgStats, StatusProbe, cpu_seconds};
use crate::report::{Row, Summary};

/// Churn simulation of a fleet of grantid generators (docs/FLEET.md).
#[derive(Debug, Parser)]
#[command(name = "grantid-churn", version, args_override_self = true)]
struct Args {
    /// Authority URL the processes get their grants from (`postgres://...`,
    /// `grpc://HOST:PORT`, ...). Repeat it to spread the processes
    /// round-robin over several (several grantid servers).
    #[arg(long = "authority", required = true)]
    authorities: Vec<String>,
    /// Authority whose worker records are sampled (`Authority::status`);
    /// default: the first `--authority` (give the server's own URL for
    /// grpc://). Its `lease_grace_ms` is the grace the checks use.
    #[arg(long)]
    status_url: Option<String>,
    /// PostgreSQL database whose pg_stat_database / pg_stat_activity are
    /// sampled; default: the status URL when it is postgres://.
    #[arg(long)]
    pg_stats_url: Option<String>,
    /// Processes kept alive at once.
    #[arg(long, default_value_t = 1_000)]
    live: usize,
    /// Worker bits of the layout (timestamp 41 bits, 1 ms ticks; sequence
    /// gets the rest of the 63). 10 is the default layout: 1,024 slots.
    #[arg(long, default_value_t = 10)]
    worker_bits: u8,
    /// Tick of the layout, ms (1 is the default layout). Each generator's
    /// ticker thread wakes once per tick: 1,000 generators in one process at
    /// 1 ms wake 10^6 times a second (docs/FLEET.md, "What the simulation
    /// costs").
    #[arg(long, default_value_t = 1)]
    tick_ms: u64,
    /// Namespace of the run (default: a fresh `churn-...` name).
    #[arg(long)]
    namespace: Option<String>,
    /// Mean lifetime of a process in ms (uniform from half to one and a half).
    #[arg(long, default_value_t = 15_000)]
    lifetime_ms: u64,
    /// Share of stops that are hard kills (no release).
    #[arg(long, default_value_t = 1.0 / 3.0)]
    kill_fraction: f64,
    /// Generators' grant length, ms (the core's default is 1,000).
    #[arg(long, default_value_t = grantid::DEFAULT_GRANT_DURATION_MS)]
    grant_ms: u64,
    /// Generators' horizon, ms (the core's default is 5,000).
    #[arg(long, default_value_t = grantid::DEFAULT_HORIZON_MS)]
    horizon_ms: u64,
    /// Generators' start-up timeout, ms.
    #[arg(long, default_value_t = grantid::DEFAULT_STARTUP_TIMEOUT.as_millis() as u64)]
    startup_timeout_ms: u64,
    /// Grant sources shared by all processes (each opened once; for
    /// PostgreSQL one connection each). 0: one per process.
    #[arg(long, default_value_t = 0)]
    shared_sources: usize,
    /// Threads that start processes (a start blocks until its first grant).
    #[arg(long, default_value_t = 64)]
    starters: usize,
    /// Threads that stop processes.
    #[arg(long, default_value_t = 16)]
    stoppers: usize,
    /// IDs per issue call (at start, every interval, before the stop).
    #[arg(long, default_value_t = 16)]
    ids_per_call: usize,
    /// How often every live process issues, ms.
    #[arg(long, default_value_t = 1_000)]
    issue_interval_ms: u64,
    /// Starts per second of the first fleet (0: all at once).
    #[arg(long, default_value_t = 0.0)]
    ramp_per_s: f64,
    /// Run length, s (the run also ends at `--max-starts`).
    #[arg(long, default_value_t = 60)]
    duration_s: u64,
    /// End once this many processes started (0: no limit).
    #[arg(long, default_value_t = 0)]
    max_starts: u64,
    /// Seconds before the steady-state window opens (default: 1.5 mean
    /// lifetimes, at most a third of the run).
    #[arg(long)]
    warmup_s: Option<f64>,
    /// Sampling interval, ms.
    #[arg(long, default_value_t = 1_000)]
    sample_ms: u64,
    /// Also sample the CPU time of this pid and its children (repeatable:
    /// the grantid server, the postmaster).
    #[arg(long = "watch-pid")]
    watch_pids: Vec<u32>,
    /// Directory for series.csv and summary.json.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Label of the run in the summary.
    #[arg(long, default_value = "churn")]
    label: String,
    /// Fail unless the number of live processes reached this at some sample.
    #[arg(long, default_value_t = 0)]
    require_live: usize,
    /// Fail unless at least this many starts happened.
    #[arg(long, default_value_t = 0)]
    require_starts: u64,
    /// Fail unless killed workers were granted again at least this many times.
    #[arg(long, default_value_t = 0)]
    require_reuses: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("grantid-churn: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> Result<bool, String> {
    let layout = Layout::new(41, args.worker_bits, 22u8.saturating_sub(args.worker_bits))
        .and_then(|l| l.with_tick_ms(args.tick_ms))
        .map_err(|e| e.to_string())?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| format!("churn-{:016x}", fastrand::u64(..)));
    let status_url = args
        .status_url
        .clone()
        .unwrap_or_else(|| args.authorities[0].clone());
    let parsed = grantid_authority::parse_url(&status_url).map_err(|e| e.to_string())?;
    let grace_ms = parsed.options.lease_grace_ms;
    let pg_url = args.pg_stats_url.clone().or(match &parsed.target {
        Target::Postgres(u) => Some(u.clone()),
        _ => None,
    });
    let status =
        StatusProbe::new(&status_url, &namespace, layout, grace_ms).map_err(|e| e.to_string())?;
    let mut pg = match &pg_url {
        Some(u) => Some(PgStats::connect(u).map_err(|e| format!("pg stats: {e}"))?),
        None => None,
    };
    let lifetime = Duration::from_millis(args.lifetime_ms);
    let duration = Duration::from_secs(args.duration_s);
    let warmup = Duration::from_secs_f64(
        args.warmup_s
            .unwrap_or_else(|| (lifetime.as_secs_f64() * 1.5).min(duration.as_secs_f64() / 3.0)),
    );
    let cfg = FleetConfig {
        layout,
        namespace: namespace.clone(),
        urls: args.authorities.clone(),
        shared_sources: args.shared_sources,
        live: args.live,
        lifetime,
        kill_fraction: args.kill_fraction,
        grant_ms: args.grant_ms,
        horizon_ms: args.horizon_ms,
        startup_timeout: Duration::from_millis(args.startup_timeout_ms),
        starters: args.starters,
        stoppers: args.stoppers,
        ids_per_call: args.ids_per_call,
        issue_interval: Duration::from_millis(args.issue_interval_ms),
        ramp_per_s: args.ramp_per_s,
    };
    let fleet = Fleet::new(cfg, grace_ms).map_err(|e| e.to_string())?;
    eprintln!(
        "churn: {} processes live on {} worker slots, namespace {namespace}, authority {}, \
         tick {} ms, lifetime {} ms, grant {} ms, horizon {} ms, grace {grace_ms} ms, for {} s",
        args.live,
        layout.worker_count(),
        args.authorities.join(" + "),
        args.tick_ms,
        args.lifetime_ms,
        args.grant_ms,
        args.horizon_ms,
        args.duration_s
    );

    let t0 = Instant::now();
    let cpu0 = cpu_seconds(0, false);
    let watch0: Vec<f64> = args
        .watch_pids
        .iter()
        .map(|&p| cpu_seconds(p, true))
        .collect();
    let mut rows: Vec<Row> = Vec::new();
    let mut sampler = report::Sampler::new(&fleet, cpu0, watch0.clone());
    let mut next_sample = t0 + Duration::from_millis(args.sample_ms);
    let mut steady_at: Option<(Instant, u64, Option<i64>, f64)> = None;
    let mut status_errors = 0u64;
    let max_starts = args.max_starts;
    let watch = args.watch_pids.clone();
    fleet.run(|f| {
        let now = Instant::now();
        if steady_at.is_none() && now >= t0 + warmup {
            f.steady.store(true, Ordering::SeqCst);
            let xact = pg
                .as_mut()
                .and_then(|p| p.read().ok())
                .map(|r| r.xact_commit);
            steady_at = Some((
                now,
                f.started.load(Ordering::Relaxed),
                xact,
                cpu_seconds(0, false),
            ));
        }
        if now >= next_sample {
            next_sample += Duration::from_millis(args.sample_ms);
            let slots = status.sample(&f.ledger, SystemClock.now_ms());
            if slots.is_err() {
                status_errors += 1;
            }
            let reading = pg.as_mut().and_then(|p| p.read().ok());
            rows.push(sampler.row(f, now - t0, slots.ok(), reading, &watch));
        }
        now >= t0 + duration || (max_starts > 0 && f.started.load(Ordering::Relaxed) >= max_starts)
    });
    let ended = Instant::now();
    let cpu_end = cpu_seconds(0, false);
    let watch_end: Vec<f64> = args
        .watch_pids
        .iter()
        .map(|&p| cpu_seconds(p, true))
        .collect();
    let end_reading = pg.as_mut().and_then(|p| p.read().ok());

    // Every killed worker's lease must run out by its last grant's end plus
    // the grace: wait for the last of them, then no worker of the namespace
    // may be leased any more (every process is gone).
    let last_usable = fleet
        .ledger
        .killed_pending()
        .iter()
        .map(|&(_, _, u)| u)
        .max()
        .unwrap_or(0);
    let settle_until = last_usable + probe::STRANDED_SLACK_MS;
    let now_ms = SystemClock.now_ms();
    if settle_until > now_ms {
        std::thread::sleep(Duration::from_millis(settle_until - now_ms));
    }
    // Leases the ledger never saw: grants the authority committed after the
    // process had given up waiting (its start-up timed out). They too must
    // end by their grant's end plus the grace: at most max_lead_ms after
    // they were granted, plus the grace.
    let leased = |ms| {
        status
            .leased(ms)
            .map_err(|e| format!("final status read: {e}"))
    };
    let first_look = leased(SystemClock.now_ms())?;
    let unseen = first_look
        .iter()
        .filter(|(w, holder, _)| {
            !fleet
                .ledger
                .killed_pending()
                .iter()
                .any(|(kw, inc, _)| kw == w && inc == holder)
        })
        .count();
    let bound = Instant::now()
        + Duration::from_millis(parsed.options.max_lead_ms + grace_ms + probe::STRANDED_SLACK_MS);
    let mut leased_after = first_look;
    while !leased_after.is_empty() && Instant::now() < bound {
        std::thread::sleep(Duration::from_millis(500));
        leased_after = leased(SystemClock.now_ms())?;
    }

    let summary = Summary::build(report::Inputs {
        label: &args.label,
        authorities: &args.authorities,
        namespace: &namespace,
        layout,
        args_live: args.live,
        lifetime_ms: args.lifetime_ms,
        grant_ms: args.grant_ms,
        horizon_ms: args.horizon_ms,
        grace_ms,
        shared_sources: args.shared_sources,
        fleet: &fleet,
        rows: &rows,
        t0,
        ended,
        steady_at,
        cpu: (cpu0, cpu_end),
        watch: (watch0, watch_end),
        watch_pids: &args.watch_pids,
        end_reading,
        leased_after,
        unseen_leases: unseen,
        status_errors,
    });
    summary.print();
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        report::write_series(&dir.join("series.csv"), &rows)
            .map_err(|e| format!("series.csv: {e}"))?;
        std::fs::write(dir.join("summary.json"), summary.json())
            .map_err(|e| format!("summary.json: {e}"))?;
    }
    Ok(summary.check(args.require_live, args.require_starts, args.require_reuses))
}
