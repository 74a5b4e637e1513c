//! The issuing state: what the generator's handle, its renewal thread and
//! its ticker share. The generator (`generator.rs`) and the lease manager
//! (`lease.rs`) both depend on this module; it depends on neither, and the
//! lease manager does not depend on the generator.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::clock::Ticks;
use crate::cursor::Cursor;
use crate::error::ErrorKind;
use crate::forksafe::ForkSafeMutex;
use crate::grant::{Grant, GrantSource};
use crate::layout::Layout;
use crate::stats::Counters;

/// What a `fork()` child does on its first call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForkPolicy {
    /// Re-activate on first use: a fresh incarnation, a new worker and a new
    /// grant before the child's first ID (the call waits up to the start-up
    /// timeout).
    #[default]
    Reactivate,
    /// Refuse with `Closed` in the child.
    Close,
}

/// What `on_lease_lost` is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseLostEvent {
    /// The worker that was lost.
    pub worker: u32,
    /// The authority's reason.
    pub reason: String,
}

pub(crate) type LostCallback = Arc<dyn Fn(&LeaseLostEvent) + Send + Sync>;

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub max_wait: Duration,
    pub max_batch: usize,
    pub grant_ticks: u64,
    pub horizon_ticks: u64,
    pub startup_timeout: Duration,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    pub fork_policy: ForkPolicy,
    /// The generator's datacenter: grants outside it are invalid.
    pub datacenter: Option<u32>,
}

/// Test-only: points of a grant switch where a test can stop the renewal
/// thread.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HookPoint {
    /// The cursor is sealed for the switch; the new grant is not installed.
    BeforeInstall,
    /// The install returned.
    AfterInstall,
}

#[cfg(test)]
pub(crate) type Hook = Arc<dyn Fn(HookPoint) + Send + Sync>;

/// State shared by the handle, the renewal thread and the ticker.
pub(crate) struct Shared {
    pub layout: Layout,
    pub namespace: String,
    pub cursor: Cursor,
    pub ticks: Arc<Ticks>,
    pub config: Config,
    pub source: Arc<dyn GrantSource>,
    pub on_lease_lost: Option<LostCallback>,
    pub counters: Counters,
    pub lease: LeaseView,
    pub closed: AtomicBool,
    /// The fork epoch the current activation belongs to.
    pub fork_epoch: AtomicU64,
    pub reactivating: AtomicBool,
    #[cfg(test)]
    pub hook: Option<Hook>,
}

impl Shared {
    #[cfg(test)]
    pub(crate) fn hook(&self, point: HookPoint) {
        if let Some(hook) = &self.hook {
            hook(point);
        }
    }
}

pub(crate) const NONE: u64 = u64::MAX;

/// What the hot path and `stats()` may read of the lease.
pub(crate) struct LeaseView {
    pub(crate) worker: AtomicU64,
    pub(crate) committed_end: AtomicU64,
    pub(crate) incarnation: AtomicU64,
    pub(crate) renewal_uncertain: AtomicBool,
    pub(crate) switch_pending: AtomicBool,
    pub(crate) installed: AtomicBool,
    pub(crate) in_flight: AtomicBool,
    /// The renewal thread of this activation panicked: no renewal comes.
    pub(crate) renewal_stopped: AtomicBool,
    pub(crate) reached: AtomicU64,
    pub(crate) failure: ForkSafeMutex<(ErrorKind, String)>,
    pub(crate) last_grant: ForkSafeMutex<Option<Grant>>,
}

impl Default for LeaseView {
    fn default() -> LeaseView {
        LeaseView {
            worker: AtomicU64::new(NONE),
            committed_end: AtomicU64::new(NONE),
            incarnation: AtomicU64::new(0),
            renewal_uncertain: AtomicBool::new(false),
            switch_pending: AtomicBool::new(false),
            installed: AtomicBool::new(false),
            in_flight: AtomicBool::new(false),
            renewal_stopped: AtomicBool::new(false),
            reached: AtomicU64::new(NONE),
            failure: ForkSafeMutex::new((ErrorKind::Unavailable, "no grant requested yet".into())),
            last_grant: ForkSafeMutex::new(None),
        }
    }
}

impl LeaseView {
    /// A fresh activation: no worker, no grant (the reached tick stays, so
    /// the next activation's IDs still come after the last ones).
    pub fn reset(&self, incarnation: u64) {
        self.worker.store(NONE, Ordering::SeqCst);
        self.committed_end.store(NONE, Ordering::SeqCst);
        self.incarnation.store(incarnation, Ordering::SeqCst);
        self.renewal_uncertain.store(false, Ordering::SeqCst);
        self.switch_pending.store(false, Ordering::SeqCst);
        self.installed.store(false, Ordering::SeqCst);
        self.renewal_stopped.store(false, Ordering::SeqCst);
        *self.last_grant.lock() = None;
        self.set_failure(ErrorKind::Unavailable, "waiting for the first grant");
    }
    pub fn worker(&self) -> Option<u32> {
        let w = self.worker.load(Ordering::Acquire);
        (w != NONE).then_some(w as u32)
    }
    pub fn committed_end(&self) -> Option<u64> {
        let e = self.committed_end.load(Ordering::Acquire);
        (e != NONE).then_some(e)
    }
    pub fn incarnation(&self) -> u64 {
        self.incarnation.load(Ordering::Acquire)
    }
    /// True when the last authority call ended uncertain.
    pub fn renewal_uncertain(&self) -> bool {
        self.renewal_uncertain.load(Ordering::Acquire)
    }
    /// True while an authority call waits for its answer.
    pub fn in_flight(&self) -> bool {
        self.in_flight.load(Ordering::Acquire)
    }
    /// True once this activation installed a grant.
    pub fn installed(&self) -> bool {
        self.installed.load(Ordering::Acquire)
    }
    /// True once this activation's renewal thread panicked.
    pub fn renewal_stopped(&self) -> bool {
        self.renewal_stopped.load(Ordering::Acquire)
    }
    pub fn switch_pending(&self) -> bool {
        self.switch_pending.load(Ordering::Acquire)
    }
    pub fn note_reached(&self, tick: u64) {
        let mut cur = self.reached.load(Ordering::Acquire);
        while cur == NONE || cur < tick {
            match self
                .reached
                .compare_exchange(cur, tick, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }
    pub(crate) fn reached(&self) -> Option<u64> {
        let r = self.reached.load(Ordering::Acquire);
        (r != NONE).then_some(r)
    }
    pub(crate) fn set_failure(&self, kind: ErrorKind, why: impl Into<String>) {
        let why = why.into();
        *self.failure.lock() = (kind, why);
    }
    /// The last authority failure, for error messages.
    pub fn last_failure(&self) -> (ErrorKind, String) {
        self.failure.lock().clone()
    }
    pub fn last_grant(&self) -> Option<Grant> {
        self.last_grant.lock().clone()
    }
}
