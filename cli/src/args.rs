//! Command-line arguments: the top-level command and the options every
//! subcommand shares. Each subcommand's own arguments live in its module.

use clap::{Args, Parser, Subcommand};
use grantid::{DEFAULT_EPOCH_MS, Error, Layout};

use crate::{authority, completions, decode, next};

/// Unique, roughly time-sorted 63-bit IDs inside durable timestamp grants.
#[derive(Debug, Parser)]
#[command(name = "grantid", version, about, after_long_help = crate::exit::HELP)]
pub struct Cli {
    /// Print the core's events (grants, renewal trouble, lost leases) to
    /// standard error; -vv adds trace records.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Issues IDs from a generator backed by an authority.
    Next(next::NextArgs),
    /// Shows the fields of IDs (decimal or 0x-prefixed hex; `-` reads them
    /// from standard input, one per line).
    Decode(decode::DecodeArgs),
    /// Sets up or inspects an authority.
    #[command(subcommand)]
    Authority(authority::AuthorityCommand),
    /// Public IDs: a keyed, reversible permutation of IDs for URLs and APIs.
    #[command(subcommand)]
    Public(crate::public::PublicCommand),
    /// Prints a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(completions::CompletionsArgs),
    /// Serves IDs and grants over gRPC until SIGTERM/SIGINT (docs/SERVICE.md).
    Serve(crate::serve::ServeArgs),
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

/// The generator's grant length and horizon (`next` and `serve`).
#[derive(Debug, Args)]
pub struct GrantArgs {
    /// Length of each grant the generator asks for, in ms.
    #[arg(long, default_value_t = grantid::DEFAULT_GRANT_DURATION_MS)]
    pub grant_duration_ms: u64,
    /// Committed time the generator keeps ahead of its clock, in ms: how
    /// long it keeps issuing while its authority does not answer. With the
    /// grant length, at most the authority's `max_lead_ms`.
    #[arg(long, default_value_t = grantid::DEFAULT_HORIZON_MS)]
    pub horizon_ms: u64,
}
