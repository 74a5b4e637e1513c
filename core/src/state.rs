//! The issuing state: what the generator's handle, its renewal thread and
//! its ticker share. The generator (`generator.rs`) and the lease manager
//! (`lease.rs`) both depend on this module; it depends on neither, and the
//! lease manager does not depend on the generator. The lease manager works
//! through [`LeaseHandle`] only: it never touches the cursor or the lease
//! view's fields itself.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::clock::Ticks;
use crate::cursor::{Cursor, Status};
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
    /// The fork generation the current activation belongs to.
    pub fork_generation: AtomicU64,
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

/// What a grant switch did (see [`LeaseHandle::switch`]).
pub(crate) enum Switched {
    /// `[start, end)` lies before ticks already issued: nothing installed,
    /// the cursor answers `Unavailable`.
    Behind,
    /// The generator was closed: the cursor stays closed.
    Closed,
    /// Installed up to this end (less than the grant's when one
    /// generation cannot address all of it).
    Installed(u64),
}

/// The lease manager's only door into the issuing state: it reads the
/// generator's configuration and clock, and changes the cursor and the
/// lease view in named steps (switch, extend, lose), each keeping the order
/// of stores the hot path and `stats()` rely on. Nothing else of [`Shared`]
/// is reachable through it.
pub(crate) struct LeaseHandle {
    shared: Arc<Shared>,
}

impl LeaseHandle {
    pub(crate) fn new(shared: Arc<Shared>) -> LeaseHandle {
        LeaseHandle { shared }
    }

    pub(crate) fn namespace(&self) -> &str {
        &self.shared.namespace
    }
    pub(crate) fn layout(&self) -> Layout {
        self.shared.layout
    }
    pub(crate) fn config(&self) -> &Config {
        &self.shared.config
    }
    pub(crate) fn source(&self) -> Arc<dyn GrantSource> {
        Arc::clone(&self.shared.source)
    }
    pub(crate) fn counters(&self) -> &Counters {
        &self.shared.counters
    }
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::SeqCst)
    }
    /// True once `close()` released the worker without waiting for this
    /// thread's call in flight.
    pub(crate) fn abandoned(&self) -> bool {
        self.shared.lease.abandoned.load(Ordering::SeqCst)
    }
    /// The cursor's generation tag (a `fork()` child's carries its
    /// parent's, so every switch of the child installs a new one).
    pub(crate) fn generation(&self) -> u64 {
        self.shared.cursor.generation()
    }
    /// How far the cursor may lead the clock, in ticks.
    pub(crate) fn drift(&self) -> u64 {
        self.shared.cursor.shape().drift()
    }
    /// The clock now, in ticks (read fresh).
    pub(crate) fn now(&self) -> u64 {
        self.shared.ticks.fresh()
    }
    pub(crate) fn time_until(&self, tick: u64) -> Option<Duration> {
        self.shared.ticks.time_until(tick)
    }
    /// The calling thread is woken when the clock jumps forward.
    pub(crate) fn wake_on_clock_jumps(&self) {
        self.shared.ticks.set_on_jump(Some(std::thread::current()));
    }
    /// The highest tick IDs were issued at, across activations.
    pub(crate) fn reached(&self) -> Option<u64> {
        self.shared.lease.reached()
    }
    /// An authority call starts (`true`) or has its answer (`false`).
    pub(crate) fn set_in_flight(&self, in_flight: bool) {
        self.shared
            .lease
            .in_flight
            .store(in_flight, Ordering::Release);
    }
    /// The error every call reports while no grant can be used.
    pub(crate) fn set_failure(&self, kind: ErrorKind, why: impl Into<String>) {
        self.shared.lease.set_failure(kind, why);
    }
    /// The last authority call ended uncertain.
    pub(crate) fn uncertain(&self, why: String) {
        self.shared
            .lease
            .renewal_uncertain
            .store(true, Ordering::Release);
        self.shared.lease.set_failure(ErrorKind::Unavailable, why);
    }
    /// The renewal thread panicked: no renewal comes any more.
    pub(crate) fn renewal_stopped(&self, why: String) {
        self.shared.lease.set_failure(ErrorKind::Unavailable, why);
        self.shared
            .lease
            .renewal_stopped
            .store(true, Ordering::Release);
    }

    /// The worker is lost: the cursor is sealed at once, then the lease
    /// view forgets the worker, then `on_lease_lost` runs (a panic in it is
    /// logged, not passed on).
    pub(crate) fn lose(&self, worker: u32, why: String) {
        let shared = &self.shared;
        let sealed = shared.cursor.seal(Status::LeaseLost);
        if let Some(r) = sealed.reached {
            shared.lease.note_reached(r);
        }
        shared.lease.worker.store(NONE, Ordering::Release);
        shared.lease.committed_end.store(NONE, Ordering::Release);
        *shared.lease.last_grant.lock() = None;
        Counters::bump(&shared.counters.lease_losses);
        log::error!(target: "grantid", "event=lease_lost namespace={} worker={worker} reason={why}", shared.namespace);
        if let Some(callback) = &shared.on_lease_lost {
            let event = LeaseLostEvent {
                worker,
                reason: why,
            };
            if catch_unwind(AssertUnwindSafe(|| callback(&event))).is_err() {
                log::error!(target: "grantid", "event=on_lease_lost_panicked worker={worker}");
            }
        }
    }

    /// A valid grant arrived (before it is installed or extended).
    pub(crate) fn granted(&self) {
        self.shared
            .lease
            .renewal_uncertain
            .store(false, Ordering::Release);
        self.shared
            .lease
            .set_failure(ErrorKind::GrantExhausted, "no renewal was needed yet");
        Counters::bump(&self.shared.counters.grants_acquired);
    }

    /// The committed grants now end at `committed_end`, `grant` the last
    /// of them, with intervals waiting to be installed or not.
    pub(crate) fn committed(&self, grant: Grant, committed_end: u64, pending: bool) {
        let lease = &self.shared.lease;
        lease.switch_pending.store(pending, Ordering::Release);
        lease.committed_end.store(committed_end, Ordering::Release);
        *lease.last_grant.lock() = Some(grant);
    }

    /// Moves the installed grant's end to `end` (same generation); returns
    /// the end installed.
    pub(crate) fn extend(&self, end: u64) -> u64 {
        self.shared.cursor.extend(end)
    }

    /// Seals the cursor and installs `[start, end)` for `worker` as
    /// generation `generation`, starting after every tick already reached
    /// so IDs keep increasing per thread. `pending`: committed intervals
    /// wait after this one.
    pub(crate) fn switch(
        &self,
        generation: u64,
        worker: u32,
        start: u64,
        end: u64,
        pending: bool,
    ) -> Switched {
        let shared = &self.shared;
        let sealed = shared.cursor.seal(Status::Switching);
        if let Some(r) = sealed.reached {
            shared.lease.note_reached(r);
        }
        let floor = shared.lease.reached().map_or(start, |r| start.max(r + 1));
        shared
            .lease
            .switch_pending
            .store(pending, Ordering::Release);
        if floor >= end {
            shared.cursor.set_status(Status::Unavailable);
            shared.lease.set_failure(
                ErrorKind::Unavailable,
                format!(
                    "grant [{start}, {end}) lies before ticks already issued (up to {})",
                    floor - 1
                ),
            );
            return Switched::Behind;
        }
        #[cfg(test)]
        shared.hook(HookPoint::BeforeInstall);
        // A close that ran since the seal above keeps the cursor closed:
        // `Closed` is final in the cursor itself.
        let installed = shared
            .cursor
            .install(generation, u64::from(worker), floor, end);
        #[cfg(test)]
        shared.hook(HookPoint::AfterInstall);
        let Some(installed) = installed else {
            return Switched::Closed;
        };
        if installed < end {
            shared.lease.switch_pending.store(true, Ordering::Release);
        }
        shared
            .lease
            .worker
            .store(u64::from(worker), Ordering::Release);
        shared.lease.installed.store(true, Ordering::Release);
        Switched::Installed(installed)
    }
}

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
    /// `close()` stopped waiting for the renewal thread (a call was still in
    /// flight) before it released the worker: a grant that call still
    /// brings is released by the renewal thread itself.
    pub(crate) abandoned: AtomicBool,
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
            abandoned: AtomicBool::new(false),
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
        self.abandoned.store(false, Ordering::SeqCst);
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
