//! `grantid decode`: the fields of IDs given as arguments, or read from
//! standard input one per line (`-`).

use std::io::{self, BufRead, Write};

use clap::Args;
use grantid::Error;

use crate::args::LayoutArgs;
use crate::exit::Failure;
use crate::output::{self, Format};

#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// The IDs: decimal digits or 0x-prefixed hex; `-` reads IDs from
    /// standard input, one per line (blank lines are skipped).
    #[arg(required = true)]
    pub ids: Vec<String>,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Same as `--format json`: one JSON object per line.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    #[command(flatten)]
    pub layout: LayoutArgs,
}

pub fn run(a: DecodeArgs) -> Result<(), Failure> {
    let layout = a.layout.layout()?;
    let format = if a.json { Format::Json } else { a.format };
    let mut out = output::stdout();
    output::header(&mut out, format, &layout)?;
    let mut first = true;
    for arg in &a.ids {
        if arg == "-" {
            for (n, line) in io::stdin().lock().lines().enumerate() {
                let line = line?;
                let text = line.trim();
                if text.is_empty() {
                    continue;
                }
                let id = grantid::parse_id(text).map_err(|e| on_line(e, n + 1))?;
                output::id(&mut out, format, &layout, id, first).map_err(|f| match f {
                    Failure::Grant(e) => Failure::Grant(on_line(e, n + 1)),
                    io => io,
                })?;
                first = false;
                if format == Format::Text {
                    // Interactive use: show each block as soon as it is read.
                    out.flush()?;
                }
            }
        } else {
            output::id(&mut out, format, &layout, grantid::parse_id(arg)?, first)?;
            first = false;
        }
    }
    out.flush()?;
    Ok(())
}

/// The error with the standard-input line it came from.
fn on_line(e: Error, line: usize) -> Error {
    Error::new(
        e.kind(),
        format!("standard input line {line}: {}", e.message()),
    )
}
