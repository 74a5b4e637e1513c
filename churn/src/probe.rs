//! What the sampler reads besides the fleet: the authority's worker records
//! (`Authority::status`), PostgreSQL's own counters (`pg_stat_database`,
//! `pg_stat_activity`), and the CPU time of this process and of watched
//! processes (the server, PostgreSQL) from /proc.

use grantid::Layout;
use grantid_authority::Authority;

use crate::ledger::{FIRST_GRANT_LEAD_MS, Ledger};

/// Worker slots as the authority's records show them at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Slots {
    /// Leased to a process the ledger shows alive.
    pub in_use: usize,
    /// Leased, but to no live process (killed, lease running out).
    pub waiting_expiry: usize,
    /// Not leased, high-water still more than 100 ms ahead (released).
    pub cooling: usize,
    /// Usable by a first grant now.
    pub free: usize,
    /// Leased to a killed incarnation for longer than its last grant's end
    /// (the authority's high-water of the worker) plus the grace: a
    /// stranded worker (must stay 0).
    pub stranded: usize,
}

/// Reads the authority's records of one namespace.
pub struct StatusProbe {
    authority: Box<dyn Authority>,
    namespace: String,
    layout: Layout,
    grace_ms: u64,
}

impl std::fmt::Debug for StatusProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusProbe")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// Slack, in ms, before a killed worker still leased counts as stranded.
pub const STRANDED_SLACK_MS: u64 = 1_000;

impl StatusProbe {
    /// Opens `url` for status reads; `grace_ms` is its lease grace.
    pub fn new(
        url: &str,
        namespace: &str,
        layout: Layout,
        grace_ms: u64,
    ) -> Result<StatusProbe, grantid::Error> {
        Ok(StatusProbe {
            authority: grantid_authority::open(url)?,
            namespace: namespace.to_owned(),
            layout,
            grace_ms,
        })
    }

    /// The slots at `now_ms`, split with the ledger's help.
    pub fn sample(&self, ledger: &Ledger, now_ms: u64) -> Result<Slots, grantid::Error> {
        let rows = self.authority.status(Some(&self.namespace))?;
        let now = self.layout.tick_at(now_ms);
        let lead = FIRST_GRANT_LEAD_MS.div_ceil(self.layout.tick_ms());
        let grace = self.grace_ms.div_ceil(self.layout.tick_ms());
        let killed: std::collections::HashMap<u32, u64> = ledger
            .killed_pending()
            .into_iter()
            .map(|(w, inc, _)| (w, inc))
            .collect();
        let mut s = Slots::default();
        for r in &rows {
            if r.is_live(now) {
                if r.holder.is_some() && ledger.holder_of(r.worker) == r.holder {
                    s.in_use += 1;
                } else {
                    s.waiting_expiry += 1;
                    if killed.get(&r.worker).copied() == r.holder
                        && r.lease_expiry > r.high_water + grace
                    {
                        s.stranded += 1;
                    }
                }
            } else if r.high_water > now + lead {
                s.cooling += 1;
            }
        }
        let count = self.layout.worker_count() as usize;
        s.free = count.saturating_sub(s.in_use + s.waiting_expiry + s.cooling);
        Ok(s)
    }

    /// Workers the authority shows leased at `now_ms`, with holder and
    /// expiry (for the final check).
    pub fn leased(&self, now_ms: u64) -> Result<Vec<(u32, u64, u64)>, grantid::Error> {
        let now = self.layout.tick_at(now_ms);
        Ok(self
            .authority
            .status(Some(&self.namespace))?
            .into_iter()
            .filter(|r| r.is_live(now))
            .map(|r| {
                (
                    r.worker,
                    r.holder.unwrap_or(0),
                    self.layout.unix_ms_of(r.lease_expiry),
                )
            })
            .collect())
    }
}

/// PostgreSQL's counters for the database of one URL.
pub struct PgStats {
    client: postgres::Client,
}

impl std::fmt::Debug for PgStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PgStats")
    }
}

/// One reading of [`PgStats`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PgReading {
    /// `pg_stat_database.xact_commit` of the database.
    pub xact_commit: i64,
    /// Client connections to the database.
    pub connections: i64,
    /// Of which with application_name `grantid` (the authorities').
    pub grantid_connections: i64,
    /// Of which running a statement now.
    pub active: i64,
    /// `pg_stat_wal.wal_sync`: WAL flushes to disk (a commit waits for one;
    /// concurrent commits can share one).
    pub wal_sync: i64,
}

impl PgStats {
    /// Connects to the database of `url` (a `postgres://` URL without
    /// grantid's options). The counters are read over a plain connection:
    /// the URL's TLS options (`sslmode`, `sslrootcert`, ...) are for the
    /// fleet's grants, which the authority makes.
    pub fn connect(url: &str) -> Result<PgStats, postgres::Error> {
        let mut config: postgres::Config = without_tls_options(url).parse()?;
        config.application_name("grantid-churn-probe");
        Ok(PgStats {
            client: config.connect(postgres::NoTls)?,
        })
    }

    /// Reads the counters.
    pub fn read(&mut self) -> Result<PgReading, postgres::Error> {
        let row = self.client.query_one(
            "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()), \
                    count(*), \
                    count(*) FILTER (WHERE application_name = 'grantid'), \
                    count(*) FILTER (WHERE state = 'active' AND application_name = 'grantid'), \
                    (SELECT wal_sync FROM pg_stat_wal) \
             FROM pg_stat_activity \
             WHERE datname = current_database() AND backend_type = 'client backend'",
            &[],
        )?;
        Ok(PgReading {
            xact_commit: row.get(0),
            connections: row.get(1),
            grantid_connections: row.get(2),
            active: row.get(3),
            wal_sync: row.get(4),
        })
    }
}

/// CPU seconds (user + system) used so far by `pid` (0: this process) and,
/// with `children`, by its direct children alive now (PostgreSQL's
/// backends are children of the postmaster).
pub fn cpu_seconds(pid: u32, children: bool) -> f64 {
    let ticks = clock_ticks();
    let own = if pid == 0 {
        stat_ticks("/proc/self/stat").map(|(t, _)| t)
    } else {
        stat_ticks(&format!("/proc/{pid}/stat")).map(|(t, _)| t)
    }
    .unwrap_or(0);
    let mut total = own;
    if children
        && pid != 0
        && let Ok(dir) = std::fs::read_dir("/proc")
    {
        for e in dir.flatten() {
            let name = e.file_name();
            let Some(n) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some((t, ppid)) = stat_ticks(&format!("/proc/{n}/stat"))
                && ppid == pid
            {
                total += t;
            }
        }
    }
    total as f64 / ticks
}

/// utime + stime (clock ticks) and the parent pid from a /proc stat file.
fn stat_ticks(path: &str) -> Option<(u64, u32)> {
    let text = std::fs::read_to_string(path).ok()?;
    // The command name is in parentheses and may hold spaces.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) ... utime(11) stime(12).
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime, ppid))
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`).
fn clock_ticks() -> f64 {
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// Threads of this process now.
pub fn threads() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// `url` without its `ssl*` query options.
fn without_tls_options(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|kv| !kv.starts_with("ssl"))
        .collect();
    if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::without_tls_options;

    #[test]
    fn the_probe_drops_only_the_tls_options() {
        assert_eq!(
            without_tls_options("postgres://u@h:5/db?sslmode=verify-full&sslrootcert=/ca.crt"),
            "postgres://u@h:5/db"
        );
        assert_eq!(
            without_tls_options("postgres://u@h:5/db?sslmode=require&connect_timeout=3"),
            "postgres://u@h:5/db?connect_timeout=3"
        );
        assert_eq!(
            without_tls_options("postgres://u@h/db"),
            "postgres://u@h/db"
        );
    }
}
