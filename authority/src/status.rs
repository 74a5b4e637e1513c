//! What `grantid authority status` shows.

use grantid::Layout;

/// One worker record of an authority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerStatus {
    /// The namespace.
    pub namespace: String,
    /// The layout the namespace is registered with.
    pub layout: Layout,
    /// The worker value.
    pub worker: u32,
    /// The incarnation holding the lease, if any.
    pub holder: Option<u64>,
    /// The tick at which the lease expires (0 when never held).
    pub lease_expiry: u64,
    /// The end of every interval ever granted (ticks).
    pub high_water: u64,
    /// The last grant's fencing epoch (`grant_id`).
    pub fencing: u64,
}

impl WorkerStatus {
    /// True when the lease is held and not expired at `now` (ticks).
    pub fn is_live(&self, now: u64) -> bool {
        self.holder.is_some() && self.lease_expiry > now
    }
}
