//! The options several subcommands share (the layout, the grants). Each
//! subcommand's own arguments live in its module; the top-level command in
//! main.rs.

use clap::Args;
use grantid::{DEFAULT_EPOCH_MS, Error, Layout};

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
    /// How many top bits of the worker field are the datacenter (0: none;
    /// at most --worker-bits). The encoded ID does not change.
    #[arg(long, default_value_t = 0)]
    pub datacenter_bits: u8,
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
        )?
        .with_datacenter_bits(self.datacenter_bits)
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

/// The help of every `--authority` option: the schemes come from the URL
/// parser, so a new scheme is listed without another edit.
pub fn authority_help() -> String {
    format!(
        "The authority URL ({}), with ?key=value options (docs/reference/urls.md)",
        grantid_authority::schemes()
    )
}
