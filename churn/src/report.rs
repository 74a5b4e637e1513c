//! The time series (one row per sample), the run's summary, and the checks
//! that fail the run.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use grantid::Layout;
use hdrhistogram::Histogram;
use serde_json::json;

use crate::fleet::Fleet;
use crate::ledger::SlotCounts;
use crate::probe::{PgReading, Slots, cpu_seconds, threads};

/// One sample.
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// Seconds since the start.
    pub t_s: f64,
    /// Processes alive.
    pub live: usize,
    /// Processes in start-up (waiting for their first grant).
    pub starting: usize,
    /// Starts per second over the interval.
    pub starts_per_s: f64,
    /// Failed starts in the interval.
    pub failed: u64,
    /// Time to first grant of the interval's starts, ms.
    pub ttfg_p50_ms: f64,
    /// See `ttfg_p50_ms`.
    pub ttfg_p99_ms: f64,
    /// See `ttfg_p50_ms`.
    pub ttfg_max_ms: f64,
    /// The authority's slots (None when the status read failed).
    pub slots: Option<Slots>,
    /// Grants answered per second (first grants + renewals) by the ledger.
    pub grants_per_s: f64,
    /// First-grant refusals per second.
    pub refusals_per_s: f64,
    /// PostgreSQL commits per second over the interval.
    pub pg_xact_per_s: Option<f64>,
    /// PostgreSQL WAL flushes per second over the interval.
    pub pg_wal_sync_per_s: Option<f64>,
    /// PostgreSQL reading.
    pub pg: Option<PgReading>,
    /// CPU cores used by this process over the interval.
    pub cpu_cores: f64,
    /// CPU cores used by the watched processes over the interval.
    pub watch_cores: f64,
    /// Threads of this process.
    pub threads: u64,
    /// The ledger's view of the slots.
    pub ledger: SlotCounts,
}

/// Turns cumulative counters into per-interval rows.
#[derive(Debug)]
pub struct Sampler {
    last_t: Duration,
    last_started: u64,
    last_grants: u64,
    last_refusals: u64,
    last_xact: Option<i64>,
    last_wal_sync: Option<i64>,
    last_cpu: f64,
    last_watch: f64,
}

fn ledger_counts(f: &Fleet) -> (u64, u64) {
    f.ledger.with_tally(|t| {
        (
            t.first_grants + t.renewals,
            t.refused_none_free + t.refused_wait,
        )
    })
}

fn ms(us: u64) -> f64 {
    us as f64 / 1_000.0
}

impl Sampler {
    /// A sampler starting from the given CPU readings.
    pub fn new(f: &Fleet, cpu0: f64, watch0: Vec<f64>) -> Sampler {
        let (g, r) = ledger_counts(f);
        Sampler {
            last_t: Duration::ZERO,
            last_started: 0,
            last_grants: g,
            last_refusals: r,
            last_xact: None,
            last_wal_sync: None,
            last_cpu: cpu0,
            last_watch: watch0.iter().sum(),
        }
    }

    /// One row at `t` since the start.
    pub fn row(
        &mut self,
        f: &Fleet,
        t: Duration,
        slots: Option<Slots>,
        pg: Option<PgReading>,
        watch: &[u32],
    ) -> Row {
        let dt = (t - self.last_t).as_secs_f64().max(1e-3);
        let started = f.started.load(Ordering::Relaxed);
        let (grants, refusals) = ledger_counts(f);
        let (p50, p99, max, failed) = {
            let mut s = f.starts.lock().unwrap_or_else(|p| p.into_inner());
            let h = &s.interval;
            let v = if h.is_empty() {
                (0.0, 0.0, 0.0)
            } else {
                (
                    ms(h.value_at_quantile(0.5)),
                    ms(h.value_at_quantile(0.99)),
                    ms(h.max()),
                )
            };
            s.interval.reset();
            let failed = std::mem::take(&mut s.interval_failed);
            (v.0, v.1, v.2, failed)
        };
        let cpu = cpu_seconds(0, false);
        let watch_cpu: f64 = watch.iter().map(|&p| cpu_seconds(p, true)).sum();
        let xact = pg.map(|r| r.xact_commit);
        let pg_xact_per_s = match (xact, self.last_xact) {
            (Some(now), Some(before)) => Some((now - before) as f64 / dt),
            _ => None,
        };
        let wal = pg.map(|r| r.wal_sync);
        let pg_wal_sync_per_s = match (wal, self.last_wal_sync) {
            (Some(now), Some(before)) => Some((now - before) as f64 / dt),
            _ => None,
        };
        let row = Row {
            t_s: t.as_secs_f64(),
            live: f.live_count(),
            starting: f.starting.load(Ordering::Relaxed),
            starts_per_s: (started - self.last_started) as f64 / dt,
            failed,
            ttfg_p50_ms: p50,
            ttfg_p99_ms: p99,
            ttfg_max_ms: max,
            slots,
            grants_per_s: (grants - self.last_grants) as f64 / dt,
            refusals_per_s: (refusals - self.last_refusals) as f64 / dt,
            pg_xact_per_s,
            pg_wal_sync_per_s,
            pg,
            cpu_cores: (cpu - self.last_cpu) / dt,
            watch_cores: (watch_cpu - self.last_watch) / dt,
            threads: threads(),
            ledger: f
                .ledger
                .counts(grantid::SystemClock::now_ns() as u64 / 1_000_000),
        };
        self.last_t = t;
        self.last_started = started;
        self.last_grants = grants;
        self.last_refusals = refusals;
        if xact.is_some() {
            self.last_xact = xact;
            self.last_wal_sync = wal;
        }
        self.last_cpu = cpu;
        self.last_watch = watch_cpu;
        row
    }
}

/// Writes the rows as CSV (the plots' input: scripts/fleet-plots.py).
pub fn write_series(path: &std::path::Path, rows: &[Row]) -> std::io::Result<()> {
    let mut out = String::from(
        "t_s,live,starting,starts_per_s,failed,ttfg_p50_ms,ttfg_p99_ms,ttfg_max_ms,\
         in_use,waiting_expiry,cooling,free,stranded,grants_per_s,refusals_per_s,\
         pg_xact_per_s,pg_wal_sync_per_s,pg_connections,pg_grantid_connections,pg_active,cpu_cores,watch_cores,threads,\
         ledger_held,ledger_killed_waiting,ledger_cooling,ledger_usable\n",
    );
    let opt = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_default();
    let opt_i = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
    let opt_u = |v: Option<usize>| v.map(|v| v.to_string()).unwrap_or_default();
    for r in rows {
        let s = r.slots;
        let _ = writeln!(
            out,
            "{:.2},{},{},{:.1},{},{:.2},{:.2},{:.2},{},{},{},{},{},{:.1},{:.1},{},{},{},{},{},{:.3},{:.3},{},{},{},{},{}",
            r.t_s,
            r.live,
            r.starting,
            r.starts_per_s,
            r.failed,
            r.ttfg_p50_ms,
            r.ttfg_p99_ms,
            r.ttfg_max_ms,
            opt_u(s.map(|s| s.in_use)),
            opt_u(s.map(|s| s.waiting_expiry)),
            opt_u(s.map(|s| s.cooling)),
            opt_u(s.map(|s| s.free)),
            opt_u(s.map(|s| s.stranded)),
            r.grants_per_s,
            r.refusals_per_s,
            opt(r.pg_xact_per_s),
            opt(r.pg_wal_sync_per_s),
            opt_i(r.pg.map(|p| p.connections)),
            opt_i(r.pg.map(|p| p.grantid_connections)),
            opt_i(r.pg.map(|p| p.active)),
            r.cpu_cores,
            r.watch_cores,
            r.threads,
            r.ledger.held,
            r.ledger.killed_waiting,
            r.ledger.released_cooling,
            r.ledger.usable
        );
    }
    std::fs::write(path, out)
}

/// What [`Summary::build`] reads.
#[derive(Debug)]
pub struct Inputs<'a> {
    pub label: &'a str,
    pub authorities: &'a [String],
    pub namespace: &'a str,
    pub layout: Layout,
    pub args_live: usize,
    pub lifetime_ms: u64,
    pub grant_ms: u64,
    pub horizon_ms: u64,
    pub grace_ms: u64,
    pub shared_sources: usize,
    pub fleet: &'a Fleet,
    pub rows: &'a [Row],
    pub t0: Instant,
    pub ended: Instant,
    /// When the steady window opened: instant, starts so far, PostgreSQL
    /// commits, CPU seconds.
    pub steady_at: Option<(Instant, u64, Option<i64>, f64)>,
    pub cpu: (f64, f64),
    pub watch: (Vec<f64>, Vec<f64>),
    pub watch_pids: &'a [u32],
    pub end_reading: Option<PgReading>,
    /// Workers still leased after every lease should have run out:
    /// (worker, holder, expiry ms).
    pub leased_after: Vec<(u32, u64, u64)>,
    /// Leases found when every process had stopped that were not a killed
    /// process's: a grant committed after its process gave up waiting, or
    /// a release that never arrived.
    pub unseen_leases: usize,
    pub status_errors: u64,
}

/// The run's figures and check results.
#[derive(Debug)]
pub struct Summary {
    value: serde_json::Value,
    failures: Vec<String>,
    text: String,
}

fn quantiles_ms(h: &Histogram<u64>, unit_us: bool) -> serde_json::Value {
    if h.is_empty() {
        return json!(null);
    }
    let f = |v: u64| if unit_us { ms(v) } else { v as f64 };
    json!({
        "count": h.len(),
        "p50": f(h.value_at_quantile(0.5)),
        "p90": f(h.value_at_quantile(0.9)),
        "p99": f(h.value_at_quantile(0.99)),
        "max": f(h.max()),
    })
}

fn q(v: &serde_json::Value, k: &str) -> String {
    v.get(k)
        .and_then(|x| x.as_f64())
        .map_or("-".into(), |x| format!("{x:.1}"))
}

impl Summary {
    /// Computes the figures and runs the checks.
    pub fn build(i: Inputs<'_>) -> Summary {
        let f = i.fleet;
        let mut ids = std::mem::take(&mut *f.ids.lock().unwrap_or_else(|p| p.into_inner()));
        ids.sort_unstable();
        let duplicates = ids.windows(2).filter(|w| w[0] == w[1]).count();
        let total = i.ended - i.t0;
        let started = f.started.load(Ordering::Relaxed);
        let (steady_s, steady_starts, steady_xact, steady_cpu) = match i.steady_at {
            Some((at, s, x, c)) => (
                (i.ended - at).as_secs_f64(),
                started - s,
                match (x, i.end_reading) {
                    (Some(a), Some(b)) => {
                        Some((b.xact_commit - a) as f64 / (i.ended - at).as_secs_f64())
                    }
                    _ => None,
                },
                (i.cpu.1 - c) / (i.ended - at).as_secs_f64(),
            ),
            None => (0.0, 0, None, 0.0),
        };
        let steady_rows: Vec<&Row> = match i.steady_at {
            Some((at, ..)) => {
                let from = (at - i.t0).as_secs_f64();
                i.rows.iter().filter(|r| r.t_s >= from).collect()
            }
            None => Vec::new(),
        };
        let mean = |xs: &mut dyn Iterator<Item = f64>| {
            let (s, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
            if n == 0 { None } else { Some(s / n as f64) }
        };
        let max_u =
            |g: &dyn Fn(&Row) -> Option<usize>| i.rows.iter().filter_map(g).max().unwrap_or(0);
        let peak_live = i.rows.iter().map(|r| r.live).max().unwrap_or(0);
        let mean_live = mean(&mut steady_rows.iter().map(|r| r.live as f64));
        let stranded_seen = max_u(&|r| r.slots.map(|s| s.stranded));
        let slots_mean = |g: &dyn Fn(&Slots) -> usize| {
            mean(
                &mut steady_rows
                    .iter()
                    .filter_map(|r| r.slots.map(|s| g(&s) as f64)),
            )
        };
        let pg_conns_max = i
            .rows
            .iter()
            .filter_map(|r| r.pg.map(|p| p.connections))
            .max();
        let pg_grantid_max = i
            .rows
            .iter()
            .filter_map(|r| r.pg.map(|p| p.grantid_connections))
            .max();
        let pg_active_mean = mean(
            &mut steady_rows
                .iter()
                .filter_map(|r| r.pg.map(|p| p.active as f64)),
        );
        let pg_active_max = i.rows.iter().filter_map(|r| r.pg.map(|p| p.active)).max();
        let threads_max = i.rows.iter().map(|r| r.threads).max().unwrap_or(0);
        let watch_cores = if i.watch_pids.is_empty() {
            None
        } else {
            Some(
                (i.watch.1.iter().sum::<f64>() - i.watch.0.iter().sum::<f64>())
                    / total.as_secs_f64(),
            )
        };
        let starts = f.starts.lock().unwrap_or_else(|p| p.into_inner());
        let tally = f.ledger.with_tally(|t| {
            json!({
                "first_grants": t.first_grants,
                "renewals": t.renewals,
                "refused_none_free": t.refused_none_free,
                "refused_wait": t.refused_wait,
                "refused_while_free": t.violations.len(),
                "refused_while_free_examples": t.violations.iter().take(5).map(|v| format!(
                    "sent {} answered {}: {} usable, {} in flight; {}; answer: {}",
                    v.sent_ms, v.answered_ms, v.usable, v.in_flight, v.example, v.answer)).collect::<Vec<_>>(),
                "lease_losses": t.lease_losses,
                "uncertain": t.uncertain,
                "shed": t.shed,
                "killed_reused": t.reuse_ms.len(),
                "reuse_after_kill_ms": quantiles_ms(&t.reuse_ms, false),
                "reuse_after_usable_ms": quantiles_ms(&t.reuse_late_ms, false),
                "reused_before_lease_end": t.reused_early,
                "released_reused": t.released_reuse_ms.len(),
                "reuse_after_release_ms": quantiles_ms(&t.released_reuse_ms, false),
                "renewals_committed_after_kill": t.late_grants_after_kill,
                "renewals_committed_after_close": t.late_grants_after_close,
            })
        });
        let grants_steady = mean(&mut steady_rows.iter().map(|r| r.grants_per_s));
        let wal_sync_steady = mean(&mut steady_rows.iter().filter_map(|r| r.pg_wal_sync_per_s));
        let value = json!({
            "label": i.label,
            "authorities": i.authorities,
            "namespace": i.namespace,
            "worker_slots": i.layout.worker_count(),
            "target_live": i.args_live,
            "lifetime_ms": i.lifetime_ms,
            "grant_ms": i.grant_ms,
            "horizon_ms": i.horizon_ms,
            "lease_grace_ms": i.grace_ms,
            "shared_sources": i.shared_sources,
            "run_s": total.as_secs_f64(),
            "steady_s": steady_s,
            "starts": started,
            "kills": f.kills.load(Ordering::Relaxed),
            "graceful": f.closes.load(Ordering::Relaxed),
            "failed_starts": starts.failures,
            "failed_start_examples": starts.failure_examples,
            "starts_per_s_sustained": if steady_s > 0.0 { steady_starts as f64 / steady_s } else { 0.0 },
            "live_peak": peak_live,
            "live_mean_steady": mean_live,
            "ttfg_all_ms": quantiles_ms(&starts.all, true),
            "ttfg_steady_ms": quantiles_ms(&starts.steady, true),
            "slots_mean_steady": {
                "in_use": slots_mean(&|s| s.in_use),
                "waiting_expiry": slots_mean(&|s| s.waiting_expiry),
                "cooling": slots_mean(&|s| s.cooling),
                "free": slots_mean(&|s| s.free),
            },
            "slots_free_min": i.rows.iter().filter_map(|r| r.slots.map(|s| s.free)).min(),
            "grants_per_s_steady": grants_steady,
            "pg_xact_per_s_steady": steady_xact,
            "pg_wal_sync_per_s_steady": wal_sync_steady,
            "pg_connections_max": pg_conns_max,
            "pg_grantid_connections_max": pg_grantid_max,
            "pg_active_mean_steady": pg_active_mean,
            "pg_active_max": pg_active_max,
            "ledger": tally,
            "ids": ids.len(),
            "duplicate_ids": duplicates,
            "issue_errors": f.issue_errors.load(Ordering::Relaxed),
            "issue_error_example": f.issue_error_example.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            "stranded_seen_in_samples": stranded_seen,
            "leased_after_all_leases_ended": i.leased_after.len(),
            "orphan_leases": i.unseen_leases,
            "status_read_errors": i.status_errors,
            "cpu_cores_mean": (i.cpu.1 - i.cpu.0) / total.as_secs_f64(),
            "cpu_cores_steady": steady_cpu,
            "watched_cores_mean": watch_cores,
            "threads_max": threads_max,
        });
        drop(starts);
        let mut failures = Vec::new();
        let ledger = &value["ledger"];
        if duplicates > 0 {
            failures.push(format!("{duplicates} duplicate IDs among {}", ids.len()));
        }
        let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
        if n(&ledger["refused_while_free"]) > 0 {
            failures.push(format!(
                "{} starts refused while a worker was free: {}",
                n(&ledger["refused_while_free"]),
                ledger["refused_while_free_examples"]
            ));
        }
        if n(&ledger["reused_before_lease_end"]) > 0 {
            failures.push(format!(
                "{} killed workers granted again before their lease ended",
                n(&ledger["reused_before_lease_end"])
            ));
        }
        if stranded_seen > 0 {
            failures.push(format!(
                "up to {stranded_seen} killed workers leased past their last grant's end plus the grace"
            ));
        }
        if !i.leased_after.is_empty() {
            failures.push(format!(
                "{} workers still leased after every process stopped and every lease ended: {:?}",
                i.leased_after.len(),
                &i.leased_after[..i.leased_after.len().min(5)]
            ));
        }
        let text = Summary::render(&value);
        Summary {
            value,
            failures,
            text,
        }
    }

    fn render(v: &serde_json::Value) -> String {
        let mut t = String::new();
        let l = &v["ledger"];
        let _ = writeln!(
            t,
            "== {} ({})",
            v["label"].as_str().unwrap_or(""),
            v["authorities"]
        );
        let _ = writeln!(
            t,
            "slots {} | live target {} peak {} mean {} | lifetime {} ms | grant {} ms horizon {} ms grace {} ms | shared sources {}",
            v["worker_slots"],
            v["target_live"],
            v["live_peak"],
            q(v, "live_mean_steady"),
            v["lifetime_ms"],
            v["grant_ms"],
            v["horizon_ms"],
            v["lease_grace_ms"],
            v["shared_sources"]
        );
        let _ = writeln!(
            t,
            "run {} s (steady {} s): starts {} ({} killed, {} graceful), sustained {} starts/s, failed {}",
            q(v, "run_s"),
            q(v, "steady_s"),
            v["starts"],
            v["kills"],
            v["graceful"],
            q(v, "starts_per_s_sustained"),
            v["failed_starts"]
        );
        let tt = &v["ttfg_steady_ms"];
        let _ = writeln!(
            t,
            "time to first grant (steady) ms: p50 {} p90 {} p99 {} max {} (n {})",
            q(tt, "p50"),
            q(tt, "p90"),
            q(tt, "p99"),
            q(tt, "max"),
            tt["count"]
        );
        let s = &v["slots_mean_steady"];
        let _ = writeln!(
            t,
            "slots (steady mean): in use {} waiting for expiry {} cooling {} free {} (min free {})",
            q(s, "in_use"),
            q(s, "waiting_expiry"),
            q(s, "cooling"),
            q(s, "free"),
            v["slots_free_min"]
        );
        let _ = writeln!(
            t,
            "grants/s (steady) {} | pg commits/s {} wal flushes/s {} | pg connections max {} (grantid {}) active mean {} max {}",
            q(v, "grants_per_s_steady"),
            q(v, "pg_xact_per_s_steady"),
            q(v, "pg_wal_sync_per_s_steady"),
            v["pg_connections_max"],
            v["pg_grantid_connections_max"],
            q(v, "pg_active_mean_steady"),
            v["pg_active_max"]
        );
        let r = &l["reuse_after_kill_ms"];
        let _ = writeln!(
            t,
            "killed workers reused {}: kill->grant ms p50 {} p99 {} max {}; after usable p99 {}; before lease end {}",
            l["killed_reused"],
            q(r, "p50"),
            q(r, "p99"),
            q(r, "max"),
            q(&l["reuse_after_usable_ms"], "p99"),
            l["reused_before_lease_end"]
        );
        let _ = writeln!(
            t,
            "refusals: none free {} wait {} | while free {} | lease losses {} uncertain {} shed {} | issue errors {} | renewals committed after kill {} after close {}",
            l["refused_none_free"],
            l["refused_wait"],
            l["refused_while_free"],
            l["lease_losses"],
            l["uncertain"],
            l["shed"],
            v["issue_errors"],
            l["renewals_committed_after_kill"],
            l["renewals_committed_after_close"]
        );
        let _ = writeln!(
            t,
            "IDs {} duplicates {} | stranded in samples {} leased after the end {} (orphan leases {}) | cpu cores mean {} steady {} watched {} | threads max {}",
            v["ids"],
            v["duplicate_ids"],
            v["stranded_seen_in_samples"],
            v["leased_after_all_leases_ended"],
            v["orphan_leases"],
            q(v, "cpu_cores_mean"),
            q(v, "cpu_cores_steady"),
            q(v, "watched_cores_mean"),
            v["threads_max"]
        );
        t
    }

    /// Prints the summary and the failed checks.
    pub fn print(&self) {
        print!("{}", self.text);
        for f in &self.failures {
            println!("FAILED: {f}");
        }
    }

    /// The summary as JSON.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(&self.value).unwrap_or_default()
    }

    /// True when every check passed (and the `require_*` floors hold).
    pub fn check(&self, live: usize, starts: u64, reuses: u64) -> bool {
        let v = &self.value;
        let mut ok = self.failures.is_empty();
        let peak = v["live_peak"].as_u64().unwrap_or(0) as usize;
        if peak < live {
            println!("FAILED: live processes peaked at {peak}, below the required {live}");
            ok = false;
        }
        let s = v["starts"].as_u64().unwrap_or(0);
        if s < starts {
            println!("FAILED: {s} starts, below the required {starts}");
            ok = false;
        }
        let r = v["ledger"]["killed_reused"].as_u64().unwrap_or(0);
        if r < reuses {
            println!("FAILED: killed workers granted again {r} times, below the required {reuses}");
            ok = false;
        }
        if ok {
            println!("all checks passed");
        }
        ok
    }
}
