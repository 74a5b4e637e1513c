//! `grantid_stats`: a plain mirror of `grantid::Stats`.

use grantid::Stats;

use crate::sized::Growable;

impl Growable for grantid_generator_stats {
    /// Version 0.1.0, the first with `struct_size`.
    const FIRST_SIZE: usize = 128;
    const NAME: &'static str = "grantid_generator_stats";
    const HOW: &'static str =
        "call the grantid_stats(generator, &stats) macro, which passes sizeof stats";
}

/// A snapshot of a generator's counters and lease (`grantid::Stats`),
/// written by `grantid_stats(gen, &stats)` (a macro that passes
/// `sizeof stats`). The struct grows at its end in later versions.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct grantid_generator_stats {
    /// How many bytes the library wrote: the smaller of the caller's
    /// `sizeof` and the library's own (bytes past the library's are zero).
    pub struct_size: usize,
    /// IDs handed out.
    pub ids_issued: u64,
    /// Calls that had to wait (capacity, clock, start of grant).
    pub waits: u64,
    /// Calls that found the clock behind the cursor by more than max_drift.
    pub clock_rollbacks: u64,
    /// Backward steps of the system clock seen by the ticker.
    pub clock_steps_back: u64,
    /// Grants received and used.
    pub grants_acquired: u64,
    /// Renewals of the same worker.
    pub renewals: u64,
    /// Authority calls that ended uncertain (unavailable, invalid grant,
    /// unknown return value) and were retried.
    pub uncertain_retries: u64,
    /// Grants refused by validation (also in `uncertain_retries`).
    pub invalid_grants: u64,
    /// Confirmed losses of the worker.
    pub lease_losses: u64,
    /// True when a grant is installed and `worker` is meaningful.
    pub has_worker: bool,
    /// The worker in use.
    pub worker: u32,
    /// True when `grant_end` is meaningful.
    pub has_grant_end: bool,
    /// End (exclusive, ticks) of the committed grants.
    pub grant_end: u64,
    /// Ticks left before `grant_end`.
    pub remaining_ticks: u64,
    /// The current incarnation.
    pub incarnation: u64,
    /// Re-activations after `fork()`.
    pub fork_reactivations: u64,
}

impl From<Stats> for grantid_generator_stats {
    fn from(s: Stats) -> grantid_generator_stats {
        // No `..`: a field added to `Stats` must be added here too.
        let Stats {
            ids_issued,
            waits,
            clock_rollbacks,
            clock_steps_back,
            grants_acquired,
            renewals,
            uncertain_retries,
            invalid_grants,
            lease_losses,
            worker,
            grant_end,
            remaining_ticks,
            incarnation,
            fork_reactivations,
        } = s;
        grantid_generator_stats {
            struct_size: std::mem::size_of::<grantid_generator_stats>(),
            ids_issued,
            waits,
            clock_rollbacks,
            clock_steps_back,
            grants_acquired,
            renewals,
            uncertain_retries,
            invalid_grants,
            lease_losses,
            has_worker: worker.is_some(),
            worker: worker.unwrap_or(0),
            has_grant_end: grant_end.is_some(),
            grant_end: grant_end.unwrap_or(0),
            remaining_ticks,
            incarnation,
            fork_reactivations,
        }
    }
}
