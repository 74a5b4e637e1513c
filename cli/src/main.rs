//! The `grantid` command: issue and decode IDs, set up and inspect
//! authorities. See `grantid --help`.

mod args;
mod time;

use std::io::{BufWriter, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use grantid::{Decoded, Error, ErrorKind, Generator, Layout};
use serde_json::json;

use args::{AuthorityCommand, Cli, Command, DecodeArgs, Format, NextArgs};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Next(a) => next(a),
        Command::Decode(a) => decode(a),
        Command::Authority(AuthorityCommand::Init {
            url,
            new_deployment,
        }) => init(&url, new_deployment),
        Command::Authority(AuthorityCommand::Fence { url }) => grantid_authority::open(&url)
            .and_then(|a| a.fence())
            .map(|report| println!("{report}")),
        Command::Authority(AuthorityCommand::Status { url, namespace }) => {
            status(&url, namespace.as_deref())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("grantid: {e}");
            ExitCode::FAILURE
        }
    }
}

fn io_error(e: std::io::Error) -> Error {
    Error::new(ErrorKind::Unavailable, format!("cannot write output: {e}"))
}

fn fields(layout: &Layout, id: u64, d: &Decoded) -> serde_json::Value {
    json!({
        "id": id.to_string(),
        "hex": format!("{id:#x}"),
        "timestamp": d.timestamp,
        "unix_ms": d.unix_ms,
        "time": time::rfc3339(d.unix_ms),
        "worker": d.worker,
        "sequence": d.sequence,
        "layout": {
            "timestamp_bits": layout.timestamp_bits(),
            "worker_bits": layout.worker_bits(),
            "sequence_bits": layout.sequence_bits(),
            "epoch_ms": layout.epoch_ms(),
            "tick_ms": layout.tick_ms(),
        },
    })
}

fn next(a: NextArgs) -> Result<(), Error> {
    let layout = a.layout.layout()?;
    let url = a
        .authority
        .clone()
        .unwrap_or_else(|| grantid_authority::DEFAULT_URL.to_owned());
    let source = grantid_authority::from_url(&url)?;
    let generator = Generator::builder(layout, a.namespace.as_str(), source)
        .startup_timeout(Duration::from_millis(a.timeout_ms))
        .start()?;
    let out = std::io::stdout();
    let mut out = BufWriter::new(out.lock());
    let mut left = a.count;
    let mut batch = vec![0u64; a.count.min(grantid::DEFAULT_MAX_BATCH)];
    if let Format::Table = a.format {
        writeln!(
            out,
            "{:<20} {:<24} {:>14} {:>7} {:>9}",
            "id", "time", "timestamp", "worker", "sequence"
        )
        .map_err(io_error)?;
    }
    while left > 0 {
        let chunk = &mut batch[..left.min(grantid::DEFAULT_MAX_BATCH)];
        generator.fill(chunk)?;
        for &id in chunk.iter() {
            match a.format {
                Format::Dec => writeln!(out, "{id}"),
                Format::Hex => writeln!(out, "{id:#x}"),
                Format::Json => {
                    let d = layout.decode(id)?;
                    writeln!(out, "{}", fields(&layout, id, &d))
                }
                Format::Table => {
                    let d = layout.decode(id)?;
                    let time = time::rfc3339(d.unix_ms);
                    writeln!(
                        out,
                        "{id:<20} {time:<24} {:>14} {:>7} {:>9}",
                        d.timestamp, d.worker, d.sequence
                    )
                }
            }
            .map_err(io_error)?;
        }
        left -= chunk.len();
    }
    out.flush().map_err(io_error)?;
    generator.close();
    Ok(())
}

fn decode(a: DecodeArgs) -> Result<(), Error> {
    let layout = a.layout.layout()?;
    let id = grantid::parse_id(&a.id)?;
    let d = layout.decode(id)?;
    if a.json {
        println!("{}", fields(&layout, id, &d));
    } else {
        println!("id         {id}");
        println!("hex        {id:#x}");
        println!("timestamp  {}", d.timestamp);
        println!("unix_ms    {}", d.unix_ms);
        println!("time       {}", time::rfc3339(d.unix_ms));
        println!("worker     {}", d.worker);
        println!("sequence   {}", d.sequence);
    }
    Ok(())
}

fn init(url: &str, new_deployment: bool) -> Result<(), Error> {
    let authority = grantid_authority::open(url)?;
    let report = if new_deployment {
        authority.init_new_deployment()?
    } else {
        authority.init()?
    };
    println!("{report}");
    Ok(())
}

fn status(url: &str, namespace: Option<&str>) -> Result<(), Error> {
    let authority = grantid_authority::open(url)?;
    let workers = authority.status(namespace)?;
    if workers.is_empty() {
        println!(
            "no workers{}",
            namespace
                .map(|n| format!(" in namespace {n:?}"))
                .unwrap_or_default()
        );
        return Ok(());
    }
    let now_ms = grantid::SystemClock::now_ns() / 1_000_000;
    println!(
        "{:<20} {:>6}  {:<18}  {:<8}  {:<24}  {:<24}  {:>8}",
        "namespace", "worker", "holder", "lease", "lease expiry", "high-water", "grant_id"
    );
    for w in workers {
        let now = w.layout.tick_at(now_ms as u64);
        let holder = w
            .holder
            .map(|h| format!("{h:#018x}"))
            .unwrap_or_else(|| "-".into());
        let lease = if w.is_live(now) {
            "live"
        } else if w.holder.is_some() {
            "expired"
        } else {
            "free"
        };
        let expiry = if w.lease_expiry == 0 {
            "-".into()
        } else {
            time::rfc3339(w.layout.unix_ms_of(w.lease_expiry))
        };
        println!(
            "{:<20} {:>6}  {:<18}  {:<8}  {:<24}  {:<24}  {:>8}",
            w.namespace,
            w.worker,
            holder,
            lease,
            expiry,
            time::rfc3339(w.layout.unix_ms_of(w.high_water)),
            w.fencing
        );
    }
    Ok(())
}
