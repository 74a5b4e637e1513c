//! Counters a generator keeps, and the snapshot `stats()` returns.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of a generator's counters and lease.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stats {
    /// IDs handed out (reserved sequence numbers that were not dropped).
    pub ids_issued: u64,
    /// Calls that had to wait (capacity, clock, start of grant).
    pub waits: u64,
    /// Calls that found the clock behind the cursor by more than `max_drift`.
    pub clock_rollbacks: u64,
    /// Backward steps of the system clock seen by the ticker.
    pub clock_steps_back: u64,
    /// Grants received and used (first grants, renewals, new workers).
    pub grants_acquired: u64,
    /// Renewals of the same worker.
    pub renewals: u64,
    /// Authority calls that ended uncertain (unavailable, panic, invalid
    /// grant) and were retried.
    pub uncertain_retries: u64,
    /// Grants refused by validation (also counted in `uncertain_retries`).
    pub invalid_grants: u64,
    /// Confirmed losses of the worker.
    pub lease_losses: u64,
    /// The worker in use, if a grant is installed.
    pub worker: Option<u32>,
    /// The end (exclusive, ticks) of the committed grants, if any.
    pub grant_end: Option<u64>,
    /// Ticks left before `grant_end`, by the generator's clock.
    pub remaining_ticks: u64,
    /// The current incarnation.
    pub incarnation: u64,
    /// Re-activations after `fork()`.
    pub fork_reactivations: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub waits: AtomicU64,
    pub clock_rollbacks: AtomicU64,
    pub grants_acquired: AtomicU64,
    pub renewals: AtomicU64,
    pub uncertain_retries: AtomicU64,
    pub invalid_grants: AtomicU64,
    pub lease_losses: AtomicU64,
    pub fork_reactivations: AtomicU64,
}

impl Counters {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
