//! The lease manager: one renewal thread per generator.
//!
//! It acquires the first grant, renews the same worker before the committed
//! grants run out (keeping at most `horizon` ticks committed ahead of the
//! clock), retries uncertain answers with exponential backoff and jitter, and
//! on a confirmed loss seals the cursor at once, calls `on_lease_lost`, and
//! acquires a new worker. Safety never waits on this thread: the cursor
//! refuses every tick at or past the committed end by itself, so a source that
//! hangs forever only stops renewal.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use crate::error::ErrorKind;
use crate::grant::{Grant, GrantError, GrantRequest};
use crate::state::{LeaseHandle, Shared, Switched};
use crate::stats::Counters;

/// A fresh random 64-bit incarnation.
pub(crate) fn new_incarnation() -> u64 {
    getrandom::u64().unwrap_or_else(|_| {
        use std::hash::{BuildHasher, RandomState};
        RandomState::new().hash_one((std::process::id(), std::time::SystemTime::now()))
    })
}

/// Starts the renewal thread of a new activation.
pub(crate) fn spawn(
    shared: Arc<Shared>,
    incarnation: u64,
    starter: Thread,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("grantid-lease".into())
        .spawn(move || {
            let record = LeaseHandle::new(Arc::clone(&shared));
            let wake = starter.clone();
            let run = catch_unwind(AssertUnwindSafe(|| {
                Manager::new(LeaseHandle::new(shared), incarnation, starter).run()
            }));
            if let Err(panic) = run {
                // Issuing goes on inside the committed grants (the cursor
                // needs no renewal thread for that); renewal is over, and
                // every error from now on says why.
                let what = panic_text(panic.as_ref());
                log::error!(target: "grantid", "event=renewal_panicked namespace={} reason={what}", record.namespace());
                record.renewal_stopped(format!(
                    "the renewal thread panicked ({what}); no grant will be renewed: close this generator and start a new one"
                ));
                wake.unpark();
            }
        })
}

/// The message of a caught panic.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string payload".into())
}

struct Manager {
    state: LeaseHandle,
    incarnation: u64,
    fork_generation: u64,
    next_request_id: u64,
    /// An uncertain request, retried with the same id so the authority can
    /// answer it with the grant it may have recorded.
    retry: Option<GrantRequest>,
    worker: Option<u32>,
    /// End installed in the cursor.
    installed_end: u64,
    /// End of every committed grant of the worker.
    committed_end: u64,
    /// Committed intervals not yet installed (after a gap, or past what one
    /// generation can address).
    pending: VecDeque<(u64, u64)>,
    generation: u64,
    backoff: Duration,
    rng: u64,
    starter: Option<Thread>,
}

enum Outcome {
    Granted,
    Uncertain,
    Lost,
}

impl Manager {
    fn new(state: LeaseHandle, incarnation: u64, starter: Thread) -> Manager {
        let backoff = state.config().backoff_min;
        // Go on from the cursor's tag (a fork() child's cursor carries its
        // parent's), so every switch installs a new tag.
        let generation = state.generation();
        Manager {
            state,
            incarnation,
            fork_generation: grantid_fork::generation(),
            next_request_id: 1,
            retry: None,
            worker: None,
            installed_end: 0,
            committed_end: 0,
            pending: VecDeque::new(),
            generation,
            backoff,
            rng: incarnation | 1,
            starter: Some(starter),
        }
    }

    fn stopped(&self) -> bool {
        self.state.is_closed() || grantid_fork::generation() != self.fork_generation
    }

    fn run(mut self) {
        self.state.wake_on_clock_jumps();
        while !self.stopped() {
            let now = self.state.now();
            let drift = self.state.drift();
            let Some(worker) = self.worker else {
                let floor = self.state.reached().map_or(0, |r| r + 1);
                match self.call(None, floor, now) {
                    Outcome::Granted => continue,
                    Outcome::Uncertain | Outcome::Lost => {
                        self.back_off();
                        continue;
                    }
                }
            };
            // Move to the next committed interval when the installed one is
            // about to be used up (the cursor may lead the clock by `drift`).
            let switch_at = self.installed_end.saturating_sub(drift + 1);
            if let Some(&(start, end)) = self.pending.front()
                && now >= switch_at
            {
                self.pending.pop_front();
                self.switch_to(worker, start, end);
                continue;
            }
            let config = self.state.config();
            // Renew when the committed time left falls to `horizon - duration`
            // (at least half a grant, so a horizon equal to the duration
            // still renews before the end).
            let threshold = (config.horizon_ticks - config.grant_ticks).max(config.grant_ticks / 2);
            let renew_at = self.committed_end.saturating_sub(threshold);
            let more_possible = self.committed_end < self.state.layout().timestamp_limit();
            if now >= renew_at && more_possible {
                match self.call(Some(worker), self.committed_end, now) {
                    Outcome::Granted | Outcome::Lost => continue,
                    Outcome::Uncertain => {
                        self.back_off();
                        continue;
                    }
                }
            }
            let wake = if self.pending.is_empty() {
                if more_possible { renew_at } else { u64::MAX }
            } else {
                renew_at.min(switch_at)
            };
            self.sleep_until(wake);
        }
    }

    fn sleep_until(&self, tick: u64) {
        let nap = self
            .state
            .time_until(tick)
            .unwrap_or(Duration::from_millis(1))
            .clamp(Duration::from_micros(100), Duration::from_secs(1));
        std::thread::park_timeout(nap);
    }

    fn back_off(&mut self) {
        // Equal jitter: half the delay fixed, half random.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let half = self.backoff / 2;
        let jitter = half.mul_f64((self.rng % 1024) as f64 / 1024.0);
        std::thread::park_timeout(half + jitter);
        self.backoff = self
            .backoff
            .saturating_mul(2)
            .min(self.state.config().backoff_max);
    }

    fn request(&mut self, worker: Option<u32>, not_before: u64, now: u64) -> GrantRequest {
        if let Some(mut r) = self.retry.take()
            && r.worker == worker
            && r.not_before == not_before
        {
            r.now = now;
            return r;
        }
        let request_id = self.next_request_id;
        self.next_request_id += 1;
        GrantRequest {
            namespace: self.state.namespace().to_owned(),
            incarnation: self.incarnation,
            request_id,
            worker,
            not_before,
            now,
            duration: self.state.config().grant_ticks,
            layout: self.state.layout(),
        }
    }

    fn call(&mut self, worker: Option<u32>, not_before: u64, now: u64) -> Outcome {
        let request = self.request(worker, not_before, now);
        let source = self.state.source();
        self.state.set_in_flight(true);
        let answer = catch_unwind(AssertUnwindSafe(|| source.acquire(&request)));
        self.state.set_in_flight(false);
        if self.stopped() {
            // A grant committed after close() gave up waiting for this call
            // and released the worker leased it again: give it back, or it
            // stays out of use until its lease ends. (If close() had not
            // given up when this was read, its release comes after this
            // grant's commit and covers it.) Never in a fork() child: the
            // worker is its parent's.
            if let Ok(Ok(grant)) = &answer
                && self.state.abandoned()
                && grantid_fork::generation() == self.fork_generation
                && catch_unwind(AssertUnwindSafe(|| source.release(grant))).is_err()
            {
                log::warn!(target: "grantid", "event=release_panicked worker={}", grant.worker);
            }
            return Outcome::Uncertain;
        }
        match answer {
            Err(panic) => {
                let what = panic_text(panic.as_ref());
                self.retry = Some(request);
                self.uncertain(format!("the grant source panicked: {what}"))
            }
            Ok(Err(GrantError::Unavailable(why))) => {
                self.retry = Some(request);
                self.uncertain(why)
            }
            Ok(Err(GrantError::Lost(why))) => self.lost(why),
            Ok(Err(GrantError::Refused(why))) => {
                let outcome = self.lost(why.clone());
                self.state.set_failure(ErrorKind::InvalidArgument, why);
                outcome
            }
            Ok(Err(GrantError::Invalid(why))) => self.invalid(why),
            Ok(Ok(grant)) => match grant.validate_in(&request, self.state.config().datacenter) {
                Err(invalid) => self.invalid(invalid.0),
                Ok(()) => {
                    self.accept(grant);
                    Outcome::Granted
                }
            },
        }
    }

    fn invalid(&mut self, why: String) -> Outcome {
        Counters::bump(&self.state.counters().invalid_grants);
        log::error!(target: "grantid", "event=grant_invalid namespace={} reason={why}", self.state.namespace());
        self.uncertain(format!("invalid grant: {why}"))
    }

    fn uncertain(&mut self, why: String) -> Outcome {
        Counters::bump(&self.state.counters().uncertain_retries);
        log::warn!(target: "grantid", "event=grant_uncertain namespace={} reason={why}", self.state.namespace());
        self.state.uncertain(why);
        Outcome::Uncertain
    }

    fn lost(&mut self, why: String) -> Outcome {
        self.state.set_failure(ErrorKind::LeaseLost, why.clone());
        let Some(worker) = self.worker.take() else {
            // No worker yet (none free): nothing to stop.
            log::warn!(target: "grantid", "event=grant_refused namespace={} reason={why}", self.state.namespace());
            return Outcome::Lost;
        };
        self.pending.clear();
        self.retry = None;
        self.state.lose(worker, why);
        Outcome::Lost
    }

    fn accept(&mut self, grant: Grant) {
        self.retry = None;
        self.backoff = self.state.config().backoff_min;
        self.state.granted();
        log::debug!(target: "grantid", "event=grant namespace={} worker={} start={} end={} grant_id={}", grant.namespace, grant.worker, grant.start, grant.end, grant.grant_id);
        match self.worker {
            None => {
                self.worker = Some(grant.worker);
                self.committed_end = grant.end;
                self.switch_to(grant.worker, grant.start, grant.end);
            }
            Some(_) => {
                Counters::bump(&self.state.counters().renewals);
                let contiguous = grant.start == self.committed_end;
                if contiguous && self.pending.is_empty() && self.installed_end == self.committed_end
                {
                    self.installed_end = self.state.extend(grant.end);
                    if self.installed_end < grant.end {
                        // Past what one generation addresses: re-base later.
                        self.pending.push_back((self.installed_end, grant.end));
                    }
                } else if contiguous && let Some(last) = self.pending.back_mut() {
                    last.1 = grant.end;
                } else {
                    self.pending.push_back((grant.start, grant.end));
                }
                self.committed_end = grant.end;
            }
        }
        self.state
            .committed(grant, self.committed_end, !self.pending.is_empty());
        if let Some(starter) = self.starter.take() {
            starter.unpark();
        }
    }

    /// Seals the cursor and installs `[start, end)` for `worker` as a new
    /// generation, starting after every tick already reached so IDs keep
    /// increasing per thread.
    fn switch_to(&mut self, worker: u32, start: u64, end: u64) {
        match self.state.switch(
            self.generation + 1,
            worker,
            start,
            end,
            !self.pending.is_empty(),
        ) {
            // Nothing installed: the next grant goes through a switch too.
            Switched::Behind => self.installed_end = 0,
            Switched::Closed => self.generation += 1,
            Switched::Installed(installed) => {
                self.generation += 1;
                self.installed_end = installed;
                if installed < end {
                    self.pending.push_front((installed, end));
                }
            }
        }
    }
}
