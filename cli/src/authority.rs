//! `grantid authority init|fence|lift-quarantine|status`: set up, fence,
//! lift a quarantine and inspect an authority.

use std::io::Write;

use clap::{Subcommand, ValueEnum};
use grantid_authority::WorkerStatus;
use serde_json::json;

use crate::exit::Failure;
use crate::output;
use crate::time;

#[derive(Debug, Subcommand)]
pub enum AuthorityCommand {
    /// Creates what the authority needs (PostgreSQL schema and function,
    /// Redis script, the state file). Idempotent.
    Init {
        /// The authority URL.
        #[arg(long_help = crate::args::authority_help())]
        url: String,
        /// Declares the store new: no ID was ever issued from it, so its
        /// first use needs no state-loss quarantine (docs/AUTHORITIES.md,
        /// "State loss"). Never after a restore or a restart that lost data.
        #[arg(long)]
        new_deployment: bool,
    },
    /// Starts a state-loss quarantine from now: no grant until every
    /// interval granted so far has ended. Run it after a restore or a
    /// failover the authority cannot detect.
    Fence {
        /// The authority URL.
        #[arg(long_help = crate::args::authority_help())]
        url: String,
    },
    /// Ends the store's quarantine now: grants are made again at once.
    ///
    /// Check first that no process still issues IDs from a grant made
    /// before what started it: every generator of the store stopped or
    /// restarted since (their workers show no live lease in `authority
    /// status`), or the quarantine's cause known to be false (a claim from a
    /// broken client, a fence run by mistake). A live holder whose grants
    /// the store forgot would share IDs with the next grant of its worker
    /// (docs/AUTHORITIES.md, "Lifting a quarantine").
    LiftQuarantine {
        /// The authority URL.
        #[arg(long_help = crate::args::authority_help())]
        url: String,
    },
    /// Lists workers: holder, lease expiry, high-water, fencing token; and
    /// the store's quarantine, with its cause and end.
    Status {
        /// The authority URL.
        #[arg(long_help = crate::args::authority_help())]
        url: String,
        /// Only this namespace.
        #[arg(long)]
        namespace: Option<String>,
        /// Output format.
        #[arg(long, short = 'f', value_enum, default_value_t = StatusFormat::Table)]
        format: StatusFormat,
    },
}

/// How `authority status` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusFormat {
    /// Aligned columns for people.
    Table,
    /// One JSON array of worker objects (ticks and RFC 3339 times).
    Json,
}

pub fn run(command: AuthorityCommand) -> Result<(), Failure> {
    match command {
        AuthorityCommand::Init {
            url,
            new_deployment,
        } => init(&url, new_deployment),
        AuthorityCommand::Fence { url } => fence(&url),
        AuthorityCommand::LiftQuarantine { url } => {
            let said = grantid_authority::open(&url)?.lift_quarantine()?;
            say(&said)
        }
        AuthorityCommand::Status {
            url,
            namespace,
            format,
        } => status(&url, namespace.as_deref(), format),
    }
}

fn init(url: &str, new_deployment: bool) -> Result<(), Failure> {
    let authority = grantid_authority::open(url)?;
    let said = if new_deployment {
        authority.init_new_deployment()?
    } else {
        authority.init()?
    };
    say(&said)
}

fn fence(url: &str) -> Result<(), Failure> {
    let said = grantid_authority::open(url)?.fence()?;
    say(&said)
}

fn say(line: &str) -> Result<(), Failure> {
    let mut out = output::stdout();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// A worker's lease state at `now_ms`: "live", "expired" or "free".
fn lease(w: &WorkerStatus, now_ms: u64) -> &'static str {
    if w.is_live(w.layout.tick_at(now_ms)) {
        "live"
    } else if w.holder.is_some() {
        "expired"
    } else {
        "free"
    }
}

fn status(url: &str, namespace: Option<&str>, format: StatusFormat) -> Result<(), Failure> {
    let authority = grantid_authority::open(url)?;
    let workers = authority.status(namespace)?;
    // On stderr: the table or JSON on stdout stays as it is.
    for limit in authority.caveats()? {
        eprintln!("note: identity check: {limit}");
    }
    let datacenter = authority.datacenter();
    let now_ms = grantid::SystemClock::now_ns() / 1_000_000;
    let now_ms = u64::try_from(now_ms).unwrap_or(u64::MAX);
    let quarantine = authority
        .quarantine()?
        .and_then(|q| quarantine_line(&q, url, now_ms));
    let mut out = output::stdout();
    if let Some(line) = &quarantine {
        // The JSON on stdout stays one array of workers.
        match format {
            StatusFormat::Json => eprintln!("note: {line}"),
            StatusFormat::Table => writeln!(out, "{line}")?,
        }
    }
    match format {
        StatusFormat::Json => {
            let rows: Vec<_> = workers
                .iter()
                .map(|w| as_json(w, datacenter, now_ms))
                .collect();
            writeln!(out, "{}", serde_json::Value::Array(rows))?;
        }
        StatusFormat::Table => table(&mut out, &workers, namespace, datacenter, now_ms)?,
    }
    out.flush()?;
    Ok(())
}

/// The quarantine `q` of the store at `url`, if it runs at `now_ms` for a
/// namespace used with this URL's lead and skew.
fn quarantine_line(q: &grantid::rule::Quarantine, url: &str, now_ms: u64) -> Option<String> {
    let options = grantid_authority::parse_url(url).ok()?.options;
    let until = q.until_for(options.max_lead_ms, options.clock_skew_ms);
    (until > now_ms).then(|| {
        let since = match q.since_ms {
            0 => String::new(),
            ms => format!(", started {}", time::rfc3339(ms)),
        };
        format!(
            "quarantine until {} (Unix ms {until}, {} s from now{since}; a namespace used with a \
             longer max_lead_ms or clock_skew_ms waits longer): {}",
            time::rfc3339(until),
            (until - now_ms).div_ceil(1000),
            q.reason
        )
    })
}

/// One worker as JSON. With `datacenter=N` in the URL, `worker` is the
/// worker within datacenter N (docs/AUTHORITIES.md, "Regions").
fn as_json(w: &WorkerStatus, datacenter: Option<u32>, now_ms: u64) -> serde_json::Value {
    let expiry = (w.lease_expiry != 0).then(|| time::rfc3339(w.layout.unix_ms_of(w.lease_expiry)));
    json!({
        "namespace": w.namespace,
        "datacenter": datacenter,
        "worker": w.worker,
        "holder": w.holder.map(|h| format!("{h:#018x}")),
        "lease": lease(w, now_ms),
        "lease_expiry_tick": w.lease_expiry,
        "lease_expiry": expiry,
        "high_water_tick": w.high_water,
        "high_water": time::rfc3339(w.layout.unix_ms_of(w.high_water)),
        "fencing": w.fencing,
    })
}

fn table(
    out: &mut impl Write,
    workers: &[WorkerStatus],
    namespace: Option<&str>,
    datacenter: Option<u32>,
    now_ms: u64,
) -> std::io::Result<()> {
    if let Some(dc) = datacenter {
        writeln!(
            out,
            "datacenter {dc} (workers are numbered within the datacenter)"
        )?;
    }
    if workers.is_empty() {
        let scope = namespace
            .map(|n| format!(" in namespace {n:?}"))
            .unwrap_or_default();
        return writeln!(out, "no workers{scope}");
    }
    writeln!(
        out,
        "{:<20} {:>6}  {:<18}  {:<8}  {:<24}  {:<24}  {:>8}",
        "namespace", "worker", "holder", "lease", "lease expiry", "high-water", "grant_id"
    )?;
    for w in workers {
        let holder = w
            .holder
            .map(|h| format!("{h:#018x}"))
            .unwrap_or_else(|| "-".into());
        let expiry = if w.lease_expiry == 0 {
            "-".into()
        } else {
            time::rfc3339(w.layout.unix_ms_of(w.lease_expiry))
        };
        writeln!(
            out,
            "{:<20} {:>6}  {:<18}  {:<8}  {:<24}  {:<24}  {:>8}",
            w.namespace,
            w.worker,
            holder,
            lease(w, now_ms),
            expiry,
            time::rfc3339(w.layout.unix_ms_of(w.high_water)),
            w.fencing
        )?;
    }
    Ok(())
}
