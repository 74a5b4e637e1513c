//! Standard output and the ways an ID is printed, shared by `next` and
//! `decode`. Every write returns its error (a closed pipe ends the command
//! quietly, see `exit.rs`); nothing here uses `println!`, which panics on a
//! closed pipe.

use std::io::{self, BufWriter, StdoutLock, Write};

use clap::ValueEnum;
use grantid::{Decoded, Layout};
use serde_json::json;

use crate::exit::Failure;
use crate::time;

/// Buffered standard output.
pub fn stdout() -> BufWriter<StdoutLock<'static>> {
    BufWriter::with_capacity(64 * 1024, io::stdout().lock())
}

/// How IDs are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One decimal ID per line.
    Dec,
    /// One 0x-prefixed hexadecimal ID per line.
    Hex,
    /// One JSON object per line: the ID (as a string) and its fields.
    Json,
    /// A table for people: the ID and its decoded fields.
    Table,
    /// Each ID's fields, one per line, blocks separated by a blank line.
    Text,
}

/// The header line of a format, if it has one. A layout with datacenter
/// bits adds the columns `datacenter` and `dc_worker`.
pub fn header(out: &mut impl Write, format: Format, layout: &Layout) -> io::Result<()> {
    if format == Format::Table {
        write!(
            out,
            "{:<20} {:<24} {:>14} {:>7} {:>9}",
            "id", "time", "timestamp", "worker", "sequence"
        )?;
        if layout.datacenter_bits() > 0 {
            write!(out, " {:>10} {:>9}", "datacenter", "dc_worker")?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// Prints one ID in `format`, decoded in `layout` when the format shows
/// fields (a bad ID is `InvalidArgument`). `first` tells the text format
/// whether a blank line goes before the block.
pub fn id(
    out: &mut impl Write,
    format: Format,
    layout: &Layout,
    id: u64,
    first: bool,
) -> Result<(), Failure> {
    match format {
        Format::Dec => return Ok(writeln!(out, "{id}")?),
        Format::Hex => return Ok(writeln!(out, "{id:#x}")?),
        _ => {}
    }
    let d = layout.decode(id)?;
    Ok(fields_in(out, format, layout, id, &d, first)?)
}

fn fields_in(
    out: &mut impl Write,
    format: Format,
    layout: &Layout,
    id: u64,
    d: &Decoded,
    first: bool,
) -> io::Result<()> {
    match format {
        Format::Dec => writeln!(out, "{id}"),
        Format::Hex => writeln!(out, "{id:#x}"),
        Format::Json => writeln!(out, "{}", fields(layout, id, d)),
        Format::Table => {
            write!(
                out,
                "{id:<20} {:<24} {:>14} {:>7} {:>9}",
                time::rfc3339(d.unix_ms),
                d.timestamp,
                d.worker,
                d.sequence
            )?;
            if layout.datacenter_bits() > 0 {
                write!(out, " {:>10} {:>9}", d.datacenter, d.datacenter_worker)?;
            }
            writeln!(out)
        }
        Format::Text => {
            if !first {
                writeln!(out)?;
            }
            writeln!(out, "id         {id}")?;
            writeln!(out, "hex        {id:#x}")?;
            writeln!(out, "timestamp  {}", d.timestamp)?;
            writeln!(out, "unix_ms    {}", d.unix_ms)?;
            writeln!(out, "time       {}", time::rfc3339(d.unix_ms))?;
            writeln!(out, "worker     {}", d.worker)?;
            if layout.datacenter_bits() > 0 {
                writeln!(out, "datacenter {}", d.datacenter)?;
                writeln!(out, "dc_worker  {}", d.datacenter_worker)?;
            }
            writeln!(out, "sequence   {}", d.sequence)
        }
    }
}

/// An ID and its fields as one JSON object (the ID as a string: it does not
/// fit a JavaScript number).
pub fn fields(layout: &Layout, id: u64, d: &Decoded) -> serde_json::Value {
    json!({
        "id": id.to_string(),
        "hex": format!("{id:#x}"),
        "timestamp": d.timestamp,
        "unix_ms": d.unix_ms,
        "time": time::rfc3339(d.unix_ms),
        "worker": d.worker,
        "datacenter": d.datacenter,
        "datacenter_worker": d.datacenter_worker,
        "sequence": d.sequence,
        "layout": {
            "timestamp_bits": layout.timestamp_bits(),
            "worker_bits": layout.worker_bits(),
            "datacenter_bits": layout.datacenter_bits(),
            "sequence_bits": layout.sequence_bits(),
            "epoch_ms": layout.epoch_ms(),
            "tick_ms": layout.tick_ms(),
        },
    })
}
