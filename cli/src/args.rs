//! Command-line arguments.

use clap::{Args, Parser, Subcommand, ValueEnum};
use grantid::{DEFAULT_EPOCH_MS, Error, Layout};

/// Unique, roughly time-sorted 63-bit IDs inside durable timestamp grants.
#[derive(Debug, Parser)]
#[command(name = "grantid", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Issues IDs from a generator backed by an authority.
    Next(NextArgs),
    /// Shows the fields of an ID (decimal or 0x-prefixed hex).
    Decode(DecodeArgs),
    /// Sets up or inspects an authority.
    #[command(subcommand)]
    Authority(AuthorityCommand),
}

#[derive(Debug, Args)]
pub struct NextArgs {
    /// How many IDs.
    #[arg(short = 'n', long = "count", default_value_t = 1)]
    pub count: usize,
    /// The authority URL: file:PATH, postgres://..., redis://..., static:N
    /// (default: the file authority under $XDG_STATE_HOME/grantid or
    /// ~/.local/state/grantid).
    #[arg(long, short = 'a', env = "GRANTID_AUTHORITY")]
    pub authority: Option<String>,
    /// The ID format's namespace.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Dec)]
    pub format: Format,
    /// Longest wait for the first grant, in ms.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    #[command(flatten)]
    pub layout: LayoutArgs,
}

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
}

#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// The ID: decimal digits or 0x-prefixed hex.
    pub id: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub layout: LayoutArgs,
}

/// The layout (default: 41/10/12 bits, 1 ms ticks, epoch 2026-01-01).
#[derive(Debug, Args)]
pub struct LayoutArgs {
    /// Width of the timestamp field.
    #[arg(long, default_value_t = 41)]
    pub timestamp_bits: u8,
    /// Width of the worker field.
    #[arg(long, default_value_t = 10)]
    pub worker_bits: u8,
    /// Width of the sequence field.
    #[arg(long, default_value_t = 12)]
    pub sequence_bits: u8,
    /// Unix ms of timestamp 0.
    #[arg(long, default_value_t = DEFAULT_EPOCH_MS)]
    pub epoch_ms: u64,
    /// Milliseconds per tick.
    #[arg(long, default_value_t = 1)]
    pub tick_ms: u64,
}

impl LayoutArgs {
    pub fn layout(&self) -> Result<Layout, Error> {
        Layout::with_all(
            self.timestamp_bits,
            self.worker_bits,
            self.sequence_bits,
            self.epoch_ms,
            self.tick_ms,
        )
    }
}

#[derive(Debug, Subcommand)]
pub enum AuthorityCommand {
    /// Creates what the authority needs (PostgreSQL schema and function,
    /// Redis script, the state file). Idempotent.
    Init {
        /// The authority URL.
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
        url: String,
    },
    /// Lists workers: holder, lease expiry, high-water, fencing epoch.
    Status {
        /// The authority URL.
        url: String,
        /// Only this namespace.
        #[arg(long)]
        namespace: Option<String>,
    },
}
