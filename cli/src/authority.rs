//! `grantid authority init|fence|status`: set up, fence and inspect an
//! authority.

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
    /// Lists workers: holder, lease expiry, high-water, fencing token.
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
    for limit in authority.limits()? {
        eprintln!("note: identity check: {limit}");
    }
    let datacenter = authority.datacenter();
    let now_ms = grantid::SystemClock::now_ns() / 1_000_000;
    let now_ms = u64::try_from(now_ms).unwrap_or(u64::MAX);
    let mut out = output::stdout();
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
