//! The fleet's own record of every worker value, kept from what the
//! authority answered (through [`crate::source::Switched`]) and from what the
//! fleet did (kills, graceful stops). It is what the checks compare the
//! authority's behaviour against:
//!
//! * a first-grant refusal while some worker was usable for the whole call
//!   (and more usable workers than other first requests in flight) is a
//!   **start refused while a slot was free**;
//! * a killed worker becomes usable at its last grant's end plus the lease
//!   grace; how long after the kill it is granted again is its **reuse
//!   delay**;
//! * a gracefully closed worker is released, and usable once its high-water
//!   mark (its last grant's end) is within 100 ms of the clock: the
//!   authority's rule for a first grant (docs/AUTHORITIES.md, "Which
//!   worker").
//!
//! An uncertain answer (a timeout, a dropped connection) may still have
//! been granted: the store may commit after the client gave up. The
//! refusal check keeps what the ledger cannot know on its lenient side: an
//! uncertain renewal may have leased its worker until the request's end
//! plus the grace, and an uncertain first request may hold some worker the
//! ledger never heard of until that grant's end plus the grace, so it
//! counts like a first request in flight until then (unless its process's
//! retry is in flight, which the in-flight count already covers, or is
//! granted). The early-reuse check keeps to what is certain. A call the
//! server shed (docs/SERVICE.md, "Fan-in") never reached the store: no
//! grant, certainly.

use std::sync::Mutex;

use grantid::{Grant, GrantRequest, Layout};
use hdrhistogram::Histogram;

/// How far ahead of the clock a free worker's high-water mark may be for a
/// first grant (authority/src/engines/postgres/v1.sql and docs/AUTHORITIES.md: 100 ms).
pub const FIRST_GRANT_LEAD_MS: u64 = 100;

/// Allowance, in ms, before a worker the ledger thinks usable counts against
/// a refusal: the authority reads its clock in whole ticks, and the ledger
/// learns of a release when `close()` returns.
pub const USABLE_TOLERANCE_MS: u64 = 50;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Never granted in this run's namespace.
    Unused,
    /// Held by a live process (`end_ms`: end of its last grant).
    Held { incarnation: u64, end_ms: u64 },
    /// Its process was killed at `kill_ms`; usable from `usable_ms` (last
    /// grant end + grace).
    Killed {
        incarnation: u64,
        kill_ms: u64,
        end_ms: u64,
        usable_ms: u64,
    },
    /// Released by a graceful close at `stop_ms`; usable from `usable_ms`
    /// (high-water within the first-grant lead of the clock; or the grant's
    /// end plus the grace when a renewal in flight at the close committed
    /// after the release).
    Released {
        incarnation: u64,
        stop_ms: u64,
        usable_ms: u64,
    },
}

impl State {
    /// The first Unix ms from which the authority may grant it to a new
    /// process, if it is not held.
    fn usable_from(&self) -> Option<u64> {
        match *self {
            State::Unused => Some(0),
            State::Held { .. } => None,
            State::Killed { usable_ms, .. } | State::Released { usable_ms, .. } => Some(usable_ms),
        }
    }
}

/// A refusal that the ledger shows was wrong, kept for the report.
#[derive(Debug, Clone)]
pub struct Violation {
    /// Unix ms the request was sent and answered.
    pub sent_ms: u64,
    /// Unix ms of the answer.
    pub answered_ms: u64,
    /// Workers usable for the whole call.
    pub usable: usize,
    /// Other first requests in flight when it was answered.
    pub in_flight: usize,
    /// A usable worker and its state.
    pub example: String,
    /// The authority's answer.
    pub answer: String,
}

/// Counters and histograms of the ledger.
#[derive(Debug)]
pub struct Tally {
    /// First grants (a start, or a new worker after a loss).
    pub first_grants: u64,
    /// Renewals answered with a grant.
    pub renewals: u64,
    /// First requests refused: no worker free.
    pub refused_none_free: u64,
    /// First requests told to wait: every free worker's high-water ahead.
    pub refused_wait: u64,
    /// Renewals answered `Lost` (the worker was taken: a renewal came too
    /// late).
    pub lease_losses: u64,
    /// Uncertain answers (timeouts, transport errors).
    pub uncertain: u64,
    /// Calls the server shed before they reached the store.
    pub shed: u64,
    /// Refusals while a worker was usable (must stay 0).
    pub violations: Vec<Violation>,
    /// Killed workers granted again, and reuse delays (kill to grant) in ms.
    pub reuse_ms: Histogram<u64>,
    /// Killed workers granted again, lateness after becoming usable, in ms.
    pub reuse_late_ms: Histogram<u64>,
    /// Killed workers granted again before they were usable (must stay 0).
    pub reused_early: u64,
    /// Released workers granted again, delay after the close in ms.
    pub released_reuse_ms: Histogram<u64>,
    /// Killed workers whose lease the authority extended by a grant that
    /// answered after the kill (a renewal in flight at the kill).
    pub late_grants_after_kill: u64,
    /// Closed processes whose renewal, in flight at the close, was
    /// answered after the release: the worker is leased again until that
    /// grant's end plus the grace.
    pub late_grants_after_close: u64,
}

/// The ledger of one run.
#[derive(Debug)]
pub struct Ledger {
    layout: Layout,
    grace_ms: u64,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    slots: Vec<State>,
    in_flight_first: usize,
    /// The incarnations of those first requests.
    in_flight_incarnations: Vec<u64>,
    /// Uncertain first requests that may hold an unknown worker: the
    /// incarnation and the end (Unix ms) of such a lease.
    maybe_held: Vec<(u64, u64)>,
    /// Per worker: until when (Unix ms) an uncertain renewal may have
    /// leased it (0: none).
    maybe_leased_until: Vec<u64>,
    tally: Tally,
}

impl Inner {
    /// A first request of `incarnation` was answered.
    fn answered_first(&mut self, incarnation: u64) {
        self.in_flight_first = self.in_flight_first.saturating_sub(1);
        if let Some(i) = self
            .in_flight_incarnations
            .iter()
            .position(|&inc| inc == incarnation)
        {
            self.in_flight_incarnations.swap_remove(i);
        }
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000, 3).expect("static bounds")
}

/// Counts of the ledger's worker states at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct SlotCounts {
    /// Held by a live process.
    pub held: usize,
    /// Killed, lease not yet expired.
    pub killed_waiting: usize,
    /// Released, high-water still ahead of the clock.
    pub released_cooling: usize,
    /// Usable by a first grant now.
    pub usable: usize,
}

impl Ledger {
    /// A ledger for `layout`'s workers, with the authority's lease grace.
    pub fn new(layout: Layout, grace_ms: u64) -> Ledger {
        let slots = vec![State::Unused; layout.worker_count() as usize];
        let maybe_leased_until = vec![0; slots.len()];
        Ledger {
            layout,
            grace_ms,
            inner: Mutex::new(Inner {
                slots,
                in_flight_first: 0,
                in_flight_incarnations: Vec::new(),
                maybe_held: Vec::new(),
                maybe_leased_until,
                tally: Tally {
                    first_grants: 0,
                    renewals: 0,
                    refused_none_free: 0,
                    refused_wait: 0,
                    lease_losses: 0,
                    uncertain: 0,
                    shed: 0,
                    violations: Vec::new(),
                    reuse_ms: histogram(),
                    reuse_late_ms: histogram(),
                    reused_early: 0,
                    released_reuse_ms: histogram(),
                    late_grants_after_kill: 0,
                    late_grants_after_close: 0,
                },
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A first request (any free worker) of `incarnation` is about to be
    /// sent.
    pub fn first_sent(&self, incarnation: u64) {
        let mut inner = self.lock();
        inner.in_flight_first += 1;
        inner.in_flight_incarnations.push(incarnation);
    }

    /// The Unix ms at which a grant's interval ends.
    fn end_ms(&self, grant: &Grant) -> u64 {
        self.layout.unix_ms_of(grant.end)
    }

    /// A grant answered at `answered_ms`.
    pub fn granted(&self, first: bool, grant: &Grant, answered_ms: u64) {
        let end_ms = self.end_ms(grant);
        let grace = self.grace_ms;
        let mut inner = self.lock();
        if first {
            inner.answered_first(grant.incarnation);
            // A retry of an uncertain first request: now its worker is known.
            inner
                .maybe_held
                .retain(|&(inc, _)| inc != grant.incarnation);
        }
        let Some(slot) = inner.slots.get(grant.worker as usize).copied() else {
            return;
        };
        if first {
            inner.maybe_leased_until[grant.worker as usize] = 0;
            inner.tally.first_grants += 1;
            match slot {
                State::Killed {
                    kill_ms, usable_ms, ..
                } => {
                    let t = &mut inner.tally;
                    let _ = t
                        .reuse_ms
                        .record(answered_ms.saturating_sub(kill_ms).max(1));
                    if answered_ms + USABLE_TOLERANCE_MS < usable_ms {
                        t.reused_early += 1;
                    } else {
                        let _ = t
                            .reuse_late_ms
                            .record(answered_ms.saturating_sub(usable_ms).max(1));
                    }
                }
                State::Released { stop_ms, .. } => {
                    let _ = inner
                        .tally
                        .released_reuse_ms
                        .record(answered_ms.saturating_sub(stop_ms).max(1));
                }
                State::Unused | State::Held { .. } => {}
            }
            inner.slots[grant.worker as usize] = State::Held {
                incarnation: grant.incarnation,
                end_ms,
            };
            return;
        }
        inner.tally.renewals += 1;
        match slot {
            State::Held { incarnation, .. } if incarnation == grant.incarnation => {
                inner.slots[grant.worker as usize] = State::Held {
                    incarnation,
                    end_ms,
                };
            }
            State::Killed {
                incarnation,
                kill_ms,
                end_ms: old_end,
                ..
            } if incarnation == grant.incarnation => {
                // A renewal in flight when the process was killed: the
                // authority committed it, so the lease lasts longer.
                inner.tally.late_grants_after_kill += 1;
                let end_ms = end_ms.max(old_end);
                inner.slots[grant.worker as usize] = State::Killed {
                    incarnation,
                    kill_ms,
                    end_ms,
                    usable_ms: end_ms + grace,
                };
            }
            State::Released {
                incarnation,
                stop_ms,
                usable_ms,
            } if incarnation == grant.incarnation => {
                inner.tally.late_grants_after_close += 1;
                inner.slots[grant.worker as usize] = State::Released {
                    incarnation,
                    stop_ms,
                    usable_ms: usable_ms.max(end_ms + grace),
                };
            }
            _ => {}
        }
    }

    /// A first request refused at `answered_ms` (sent at `sent_ms`): checks
    /// that no worker was usable for the whole call beyond those other
    /// first requests in flight could have taken.
    pub fn refused(&self, incarnation: u64, wait: bool, why: &str, sent_ms: u64, answered_ms: u64) {
        let mut inner = self.lock();
        inner.answered_first(incarnation);
        if wait {
            inner.tally.refused_wait += 1;
        } else {
            inner.tally.refused_none_free += 1;
        }
        let cutoff = sent_ms.saturating_sub(USABLE_TOLERANCE_MS);
        let mut usable = 0;
        let mut example = None;
        for (worker, s) in inner.slots.iter().enumerate() {
            let maybe = inner.maybe_leased_until[worker];
            if s.usable_from()
                .is_some_and(|from| from.max(maybe) <= cutoff)
            {
                usable += 1;
                example.get_or_insert_with(|| format!("worker {worker}: {s:?}"));
            }
        }
        let maybe_held = inner
            .maybe_held
            .iter()
            .filter(|&&(inc, until)| {
                until > sent_ms && !inner.in_flight_incarnations.contains(&inc)
            })
            .count();
        let in_flight = inner.in_flight_first + maybe_held;
        if usable > in_flight {
            inner.tally.violations.push(Violation {
                sent_ms,
                answered_ms,
                usable,
                in_flight,
                example: example.unwrap_or_default(),
                answer: why.to_owned(),
            });
        }
    }

    /// The latest Unix ms a grant for `request` answered at `answered_ms`
    /// can end: the authority starts it at the request's `not_before` or
    /// its clock, whichever is later.
    fn possible_end_ms(&self, request: &GrantRequest, answered_ms: u64) -> u64 {
        let duration_ms = request.duration.saturating_mul(self.layout.tick_ms());
        self.layout
            .unix_ms_of(request.not_before)
            .max(answered_ms)
            .saturating_add(duration_ms)
    }

    /// A first request that ended uncertain at `answered_ms`.
    pub fn first_uncertain(&self, request: &GrantRequest, answered_ms: u64) {
        let until = self.possible_end_ms(request, answered_ms) + self.grace_ms;
        let mut inner = self.lock();
        inner.answered_first(request.incarnation);
        inner.tally.uncertain += 1;
        inner
            .maybe_held
            .retain(|&(inc, _)| inc != request.incarnation);
        inner.maybe_held.push((request.incarnation, until));
        inner.maybe_held.retain(|&(_, u)| u > answered_ms);
    }

    /// A renewal that ended uncertain at `answered_ms`: it may have been
    /// granted, and the lease extended.
    pub fn renewal_uncertain(&self, request: &GrantRequest, answered_ms: u64) {
        let until = self.possible_end_ms(request, answered_ms) + self.grace_ms;
        let mut inner = self.lock();
        inner.tally.uncertain += 1;
        let Some(w) = request.worker.map(|w| w as usize) else {
            return;
        };
        let ours = match inner.slots.get(w) {
            Some(
                State::Held { incarnation, .. }
                | State::Killed { incarnation, .. }
                | State::Released { incarnation, .. },
            ) => *incarnation == request.incarnation,
            _ => false,
        };
        if ours {
            inner.maybe_leased_until[w] = inner.maybe_leased_until[w].max(until);
        }
    }

    /// A first request of `incarnation` that certainly got no grant: the
    /// server shed it before the store (`shed`), or the store refused it
    /// for good.
    pub fn first_no_grant(&self, incarnation: u64, shed: bool) {
        let mut inner = self.lock();
        inner.answered_first(incarnation);
        if shed {
            inner.tally.shed += 1;
        }
    }

    /// A renewal the server shed: it never reached the store.
    pub fn renewal_shed(&self) {
        self.lock().tally.shed += 1;
    }

    /// A renewal answered `Lost`.
    pub fn renewal_lost(&self) {
        self.lock().tally.lease_losses += 1;
    }

    /// Moves `worker` from held by `incarnation` (its last grant ending at
    /// `end_ms`) to the state `next(end_ms)`; nothing if another holds it.
    fn stop(&self, worker: u32, incarnation: u64, next: impl FnOnce(u64) -> State) {
        let mut inner = self.lock();
        if let Some(State::Held {
            incarnation: held,
            end_ms,
        }) = inner.slots.get(worker as usize).copied()
            && held == incarnation
        {
            inner.slots[worker as usize] = next(end_ms);
        }
    }

    /// The process holding `worker` as `incarnation` was killed at
    /// `kill_ms`: no release, the lease runs out.
    pub fn killed(&self, worker: u32, incarnation: u64, kill_ms: u64) {
        let grace = self.grace_ms;
        self.stop(worker, incarnation, |end_ms| State::Killed {
            incarnation,
            kill_ms,
            end_ms,
            usable_ms: end_ms + grace,
        });
    }

    /// The process holding `worker` as `incarnation` closed (its release
    /// ran) at `stop_ms`.
    pub fn released(&self, worker: u32, incarnation: u64, stop_ms: u64) {
        self.stop(worker, incarnation, |end_ms| State::Released {
            incarnation,
            stop_ms,
            usable_ms: end_ms.saturating_sub(FIRST_GRANT_LEAD_MS).max(stop_ms),
        });
    }

    /// The ledger's worker states at `now_ms`.
    pub fn counts(&self, now_ms: u64) -> SlotCounts {
        let inner = self.lock();
        let mut c = SlotCounts::default();
        for s in &inner.slots {
            match *s {
                State::Held { .. } => c.held += 1,
                State::Killed { usable_ms, .. } if usable_ms > now_ms => c.killed_waiting += 1,
                State::Released { usable_ms, .. } if usable_ms > now_ms => c.released_cooling += 1,
                _ => c.usable += 1,
            }
        }
        c
    }

    /// The killed workers not granted again, with the Unix ms from which
    /// each is usable: (worker, incarnation, usable_ms).
    pub fn killed_pending(&self) -> Vec<(u32, u64, u64)> {
        self.lock()
            .slots
            .iter()
            .enumerate()
            .filter_map(|(w, s)| match *s {
                State::Killed {
                    incarnation,
                    usable_ms,
                    ..
                } => Some((w as u32, incarnation, usable_ms)),
                _ => None,
            })
            .collect()
    }

    /// The incarnations the ledger shows holding a worker.
    pub fn holder_of(&self, worker: u32) -> Option<u64> {
        match self.lock().slots.get(worker as usize) {
            Some(State::Held { incarnation, .. }) => Some(*incarnation),
            _ => None,
        }
    }

    /// Runs `f` on the tally.
    pub fn with_tally<T>(&self, f: impl FnOnce(&Tally) -> T) -> T {
        f(&self.lock().tally)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(worker: u32, incarnation: u64, end_ms: u64, layout: &Layout) -> Grant {
        let end = layout.tick_at(end_ms);
        Grant {
            namespace: "t".into(),
            worker,
            incarnation,
            grant_id: 1,
            start: end - 10,
            end,
        }
    }

    const T0: u64 = 1_800_000_000_000;

    /// Two workers granted at T0 to incarnations 1 and 2 until T0 + 5 s;
    /// incarnation 2 closes at T0 + 1 s.
    fn two_held_then_one_released() -> (Ledger, Layout) {
        let layout = Layout::new(41, 1, 21).unwrap();
        let ledger = Ledger::new(layout, 5_000);
        for w in 0..2 {
            ledger.first_sent(0);
            ledger.granted(true, &grant(w, 1 + u64::from(w), T0 + 5_000, &layout), T0);
        }
        ledger.released(1, 2, T0 + 1_000);
        (ledger, layout)
    }

    #[test]
    fn a_refusal_while_a_worker_is_usable_is_a_violation() {
        let layout = Layout::new(41, 1, 21).unwrap();
        let ledger = Ledger::new(layout, 5_000);
        for w in 0..2 {
            ledger.first_sent(0);
            ledger.granted(true, &grant(w, 10 + u64::from(w), T0 + 1_000, &layout), T0);
        }
        // Both held: a refusal is right.
        ledger.first_sent(0);
        ledger.refused(0, false, "no free worker", T0 + 10, T0 + 20);
        assert!(ledger.with_tally(|t| t.violations.is_empty()));
        // Worker 0 killed: usable from its end plus the grace only.
        ledger.killed(0, 10, T0 + 100);
        ledger.first_sent(0);
        ledger.refused(0, false, "no free worker", T0 + 5_000, T0 + 5_010);
        assert!(ledger.with_tally(|t| t.violations.is_empty()));
        ledger.first_sent(0);
        ledger.refused(0, false, "no free worker", T0 + 6_100, T0 + 6_110);
        assert_eq!(ledger.with_tally(|t| t.violations.len()), 1);
        // Granted again: the reuse delay is measured from the kill.
        ledger.first_sent(0);
        ledger.granted(true, &grant(0, 12, T0 + 8_000, &layout), T0 + 6_200);
        ledger.with_tally(|t| {
            assert_eq!(t.reuse_ms.len(), 1);
            assert_eq!(t.reused_early, 0);
            let d = t.reuse_ms.max();
            assert!((6_095..=6_110).contains(&d), "{d}");
        });
    }

    #[test]
    fn a_usable_worker_another_request_may_take_is_no_violation() {
        let layout = Layout::new(41, 1, 21).unwrap();
        let ledger = Ledger::new(layout, 5_000);
        ledger.first_sent(0);
        ledger.granted(true, &grant(0, 1, T0 + 1_000, &layout), T0);
        // Worker 1 unused, but two first requests race for it.
        ledger.first_sent(0);
        ledger.first_sent(0);
        ledger.refused(0, false, "no free worker", T0 + 100, T0 + 110);
        assert!(ledger.with_tally(|t| t.violations.is_empty()));
        // The other one got nothing either: now it is a violation.
        ledger.refused(0, false, "no free worker", T0 + 100, T0 + 120);
        assert_eq!(ledger.with_tally(|t| t.violations.len()), 1);
    }

    #[test]
    fn a_released_worker_is_usable_once_its_high_water_is_near() {
        let (ledger, _) = two_held_then_one_released();
        let c = ledger.counts(T0 + 2_000);
        assert_eq!((c.held, c.released_cooling, c.usable), (1, 1, 0));
        let c = ledger.counts(T0 + 4_950);
        assert_eq!((c.held, c.released_cooling, c.usable), (1, 0, 1));
    }

    #[test]
    fn a_renewal_answered_after_the_release_leases_the_worker_again() {
        let (ledger, layout) = two_held_then_one_released();
        // The renewal that was in flight at the close commits afterwards.
        ledger.granted(false, &grant(1, 2, T0 + 6_000, &layout), T0 + 1_100);
        ledger.with_tally(|t| assert_eq!(t.late_grants_after_close, 1));
        // Not usable before that grant's end plus the grace: a refusal at
        // T0 + 6_000 is right, one at T0 + 11_100 is not.
        ledger.first_sent(0);
        ledger.refused(0, true, "wait", T0 + 6_000, T0 + 6_010);
        assert!(ledger.with_tally(|t| t.violations.is_empty()));
        ledger.first_sent(0);
        ledger.refused(0, true, "wait", T0 + 11_100, T0 + 11_110);
        assert_eq!(ledger.with_tally(|t| t.violations.len()), 1);
    }

    fn request(incarnation: u64, worker: Option<u32>, layout: &Layout) -> GrantRequest {
        GrantRequest {
            namespace: "t".into(),
            incarnation,
            request_id: 1,
            worker,
            not_before: 0,
            now: 0,
            duration: layout.tick_at(T0 + 1_000) - layout.tick_at(T0),
            layout: *layout,
        }
    }

    /// A ledger of `worker_bits` workers (5 s grace) in which incarnation 1
    /// holds worker 0 until T0 + 10 s.
    fn holding_worker_0(worker_bits: u8) -> (Layout, Ledger) {
        let layout = Layout::new(41, worker_bits, 22 - worker_bits).unwrap();
        let ledger = Ledger::new(layout, 5_000);
        ledger.first_sent(1);
        ledger.granted(true, &grant(0, 1, T0 + 10_000, &layout), T0);
        (layout, ledger)
    }

    #[test]
    fn an_uncertain_first_request_may_hold_a_worker_until_its_lease_ends() {
        let (layout, ledger) = holding_worker_0(1);
        // Worker 1 unused; a first request times out: it may have got it.
        ledger.first_sent(2);
        ledger.first_uncertain(&request(2, None, &layout), T0 + 100);
        ledger.first_sent(4);
        ledger.refused(4, false, "no free worker", T0 + 200, T0 + 210);
        assert!(ledger.with_tally(|t| t.violations.is_empty()));
        // Its retry in flight is counted once: while it is in flight, one
        // refusal is right (the retry may hold or take worker 1), and a
        // second is not.
        ledger.first_sent(2);
        ledger.first_sent(5);
        ledger.refused(5, false, "no free worker", T0 + 300, T0 + 310);
        assert!(ledger.with_tally(|t| t.violations.is_empty()));
        ledger.first_uncertain(&request(2, None, &layout), T0 + 400);
        // That lease would have ended (1 s grant + 5 s grace): a violation.
        ledger.first_sent(4);
        ledger.refused(4, false, "no free worker", T0 + 6_500, T0 + 6_510);
        assert_eq!(ledger.with_tally(|t| t.violations.len()), 1);
        // Its retry is granted worker 1: known again, no allowance left.
        ledger.first_sent(3);
        ledger.first_uncertain(&request(3, None, &layout), T0 + 6_600);
        ledger.first_sent(3);
        ledger.granted(true, &grant(1, 3, T0 + 7_600, &layout), T0 + 6_700);
        assert!(ledger.lock().maybe_held.is_empty());
    }

    #[test]
    fn a_retry_in_flight_is_counted_once() {
        // Four workers, worker 0 held: three usable.
        let (layout, ledger) = holding_worker_0(2);
        // Incarnation 2 timed out and retries; 5 is in flight too: they
        // may take two workers, not three.
        ledger.first_sent(2);
        ledger.first_uncertain(&request(2, None, &layout), T0 + 100);
        ledger.first_sent(2);
        ledger.first_sent(5);
        ledger.first_sent(6);
        ledger.refused(6, false, "no free worker", T0 + 200, T0 + 210);
        assert_eq!(ledger.with_tally(|t| t.violations.len()), 1);
    }

    #[test]
    fn a_shed_first_request_holds_nothing() {
        let (_, ledger) = holding_worker_0(1);
        ledger.first_sent(2);
        ledger.first_no_grant(2, true);
        ledger.first_sent(3);
        ledger.refused(3, false, "no free worker", T0 + 200, T0 + 210);
        ledger.with_tally(|t| assert_eq!((t.violations.len(), t.shed, t.uncertain), (1, 1, 0)));
    }

    #[test]
    fn an_uncertain_renewal_may_have_extended_the_lease() {
        let layout = Layout::new(41, 1, 21).unwrap();
        let ledger = Ledger::new(layout, 5_000);
        for (w, end) in [(0, T0 + 5_000), (1, T0 + 20_000)] {
            ledger.first_sent(1 + u64::from(w));
            ledger.granted(true, &grant(w, 1 + u64::from(w), end, &layout), T0);
        }
        // Worker 0 (incarnation 1, until T0 + 5 s) renews for 1 s more at
        // T0 + 4 s: the answer is lost, then the process is killed.
        let mut r = request(1, Some(0), &layout);
        r.not_before = layout.tick_at(T0 + 5_000);
        ledger.renewal_uncertain(&r, T0 + 4_000);
        ledger.killed(0, 1, T0 + 4_100);
        // For a refusal: usable only after T0 + 6 s + the grace, not
        // T0 + 5 s + the grace.
        ledger.first_sent(3);
        ledger.refused(3, false, "no free worker", T0 + 10_500, T0 + 10_510);
        assert!(ledger.with_tally(|t| t.violations.is_empty()));
        ledger.first_sent(3);
        ledger.refused(3, false, "no free worker", T0 + 11_100, T0 + 11_110);
        assert_eq!(ledger.with_tally(|t| t.violations.len()), 1);
        // For an early reuse only what is certain counts: the renewal may
        // not have been granted, so a grant at T0 + 10.5 s is not early.
        let ledger = Ledger::new(layout, 5_000);
        ledger.first_sent(1);
        ledger.granted(true, &grant(0, 1, T0 + 5_000, &layout), T0);
        ledger.renewal_uncertain(&r, T0 + 4_000);
        ledger.killed(0, 1, T0 + 4_100);
        ledger.first_sent(7);
        ledger.granted(true, &grant(0, 7, T0 + 11_500, &layout), T0 + 10_500);
        ledger.with_tally(|t| assert_eq!(t.reused_early, 0));
        assert_eq!(ledger.lock().maybe_leased_until[0], 0);
    }
}
