//! What the host-local authorities (`file:` and `static:`) share: the layout
//! record of their state files, and the error a failure to lock or write
//! one becomes.

use grantid::{Error, ErrorKind, GrantError, Layout};
use serde::{Deserialize, Serialize};

/// A layout as a state file records it.
#[derive(Serialize, Deserialize, Clone, Copy)]
pub(crate) struct LayoutDoc {
    pub timestamp_bits: u8,
    pub worker_bits: u8,
    pub sequence_bits: u8,
    pub epoch_ms: u64,
    pub tick_ms: u64,
    /// [`Layout::split_bits`]: the datacenter bits of the split whose one
    /// datacenter's workers the namespace numbers; absent for 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub split_bits: u8,
}

fn is_zero(v: &u8) -> bool {
    *v == 0
}

impl From<Layout> for LayoutDoc {
    fn from(l: Layout) -> LayoutDoc {
        LayoutDoc {
            timestamp_bits: l.timestamp_bits(),
            worker_bits: l.worker_bits(),
            sequence_bits: l.sequence_bits(),
            epoch_ms: l.epoch_ms(),
            tick_ms: l.tick_ms(),
            split_bits: l.split_bits(),
        }
    }
}

impl LayoutDoc {
    pub(crate) fn layout(self) -> Result<Layout, String> {
        Layout::registered(
            self.timestamp_bits,
            self.worker_bits,
            self.sequence_bits,
            self.epoch_ms,
            self.tick_ms,
            self.split_bits,
        )
        .map_err(|e| e.to_string())
    }
}

/// A state file that cannot be locked, read or written: the caller may retry.
pub(crate) fn unavailable(e: GrantError) -> Error {
    Error::new(ErrorKind::Unavailable, e.to_string())
}

/// Where this process keeps the sidecar of a state file (`file:PATH`,
/// `static:N?state=PATH`): the host-memory record that detects the file
/// being deleted, replaced or restored from a backup (docs/AUTHORITIES.md,
/// "State loss"). `None` when no directory for it can be named.
pub fn sidecar_path(state_file: &std::path::Path) -> Option<std::path::PathBuf> {
    // The authorities name it after the canonical path (a state file reached
    // through a symbolic link is one file, with one sidecar).
    match crate::lockfile::canonical(state_file) {
        Ok(path) => crate::sidecar::path_of(&path),
        Err(_) => crate::sidecar::path_of(state_file),
    }
}
