//! The allocation rule as one pure decision (docs/AUTHORITIES.md, sections
//! 2, 3 and 7), written once: every authority that decides in Rust reads
//! its state, calls [`decide`], and writes what the [`Decision`] says in
//! one atomic step (a locked file write, a compare-and-swap transaction)
//! before it answers.
//!
//! [`decide`] does no I/O. It sees one namespace through a [`View`]: the
//! registered layout with the longest lead and skew any caller used on it
//! ([`Registered`]), the worker records read (all of the namespace's for a
//! first grant, the one asked for for a renewal), the answer recorded for
//! the request's (incarnation, request_id) if the store kept one, and the
//! store's [`Quarantine`]. It answers in this order:
//!
//! 1. a retry gets its recorded grant, and nothing is written;
//! 2. another layout is `Refused`, during a quarantine too (it can never
//!    succeed, as on every engine); past this check the namespace is
//!    registered with the request's layout, and its recorded lead and skew
//!    raised, whatever the answer (as the stores' functions do);
//! 3. during a quarantine ([`gate`]) a first grant is `Unavailable` and a
//!    renewal `Lost`; then a worker outside the layout is `Refused`;
//! 4. a renewal of a worker another incarnation holds is `Lost`, and one
//!    beyond the worker's high-water ([`forgotten_grant`]) is `Lost` with a
//!    quarantine to start, unless it is beyond any grant the store could
//!    have made ([`evidence_bound`]): then it is `Lost` and starts none;
//! 5. a first grant takes a worker by "Which worker" ([`pick_worker`]), or
//!    the authority's only one ([`Policy::only_worker`]) unless another
//!    incarnation holds it; none when every free one is more than
//!    [`FIRST_GRANT_LEAD_MS`] ahead;
//! 6. the grant: `start = max(high_water, now, not_before)`, its end capped
//!    at the timestamp field and at `now + max_lead_ms`; the worker's new
//!    record and the namespace's record to write with it.

use crate::grant::{Grant, GrantError, GrantRequest};
use crate::layout::Layout;

/// How far ahead of authority time a first grant (no worker asked for) may
/// start, in ms: the generator waits out that much at `next_id` (its
/// default `max_wait`, [`crate::DEFAULT_MAX_WAIT`]). A first grant that
/// would start later (every free worker's high-water is further ahead) is
/// not made: the answer is `Unavailable`, and the generator's start-up
/// retries until the clock has caught up, instead of starting with a grant
/// that fails every call with `NotYetValid`.
pub const FIRST_GRANT_LEAD_MS: u64 = 100;

/// One worker's record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerRecord {
    /// The incarnation holding the worker's lease, if any.
    pub holder: Option<u64>,
    /// The tick at which the lease expires.
    pub lease_expiry: u64,
    /// End of every interval ever granted for the worker (ticks).
    pub high_water: u64,
    /// Increases with every grant of the worker: a fencing token.
    pub fencing: u64,
    /// True once the worker was ever held (free workers are preferred).
    pub used: bool,
}

/// The record of a worker never used.
static UNUSED: WorkerRecord = WorkerRecord {
    holder: None,
    lease_expiry: 0,
    high_water: 0,
    fencing: 0,
    used: false,
};

/// The workers of one namespace, kept sparsely: only those ever used have
/// a record, so a layout with 2^32 workers costs memory per worker used,
/// not per worker possible. Indexing a worker never used gives an empty
/// record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Workers {
    map: std::collections::BTreeMap<u32, WorkerRecord>,
}

impl Workers {
    /// The record of `worker`, if it was ever used.
    pub fn get(&self, worker: u32) -> Option<&WorkerRecord> {
        self.map.get(&worker)
    }

    /// The record of `worker`, if it has one, to change.
    pub fn get_mut(&mut self, worker: u32) -> Option<&mut WorkerRecord> {
        self.map.get_mut(&worker)
    }

    /// The record of `worker`, made empty if it was never used.
    pub fn record(&mut self, worker: u32) -> &mut WorkerRecord {
        self.map.entry(worker).or_default()
    }

    /// The workers with a record, in worker order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &WorkerRecord)> {
        self.map.iter().map(|(w, r)| (*w, r))
    }

    /// How many workers have a record.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no worker has a record.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The lowest worker in `from..count` that was never used.
    fn first_unused(&self, from: u64, count: u64) -> Option<u32> {
        let mut next = from;
        let Ok(low) = u32::try_from(from) else {
            return None;
        };
        for (w, r) in self.map.range(low..) {
            if u64::from(*w) > next {
                break;
            }
            if r.used {
                next = u64::from(*w) + 1;
            } else {
                break;
            }
        }
        (next < count).then_some(next as u32)
    }
}

impl std::ops::Index<usize> for Workers {
    type Output = WorkerRecord;
    fn index(&self, worker: usize) -> &WorkerRecord {
        u32::try_from(worker)
            .ok()
            .and_then(|w| self.map.get(&w))
            .unwrap_or(&UNUSED)
    }
}

/// A namespace as registered: its layout (the encoding and the datacenter
/// split, [`Layout::without_datacenter_bits`]) and what the store keeps
/// with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registered {
    /// The layout the namespace was registered with.
    pub layout: Layout,
    /// Every worker below it was used: never-used workers are looked for
    /// from here (0: from the first).
    pub next_unused: u64,
    /// The longest `max_lead_ms` any caller used on the namespace: raised
    /// by every request past the layout check, never lowered
    /// (docs/AUTHORITIES.md, "State loss").
    pub max_lead_ms: u64,
    /// The longest `clock_skew_ms` any caller used on the namespace.
    pub clock_skew_ms: u64,
}

/// A store's quarantine: no grant before its end (docs/AUTHORITIES.md,
/// "State loss").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quarantine {
    /// Unix ms: no grant before it.
    pub until_ms: u64,
    /// Unix ms when the latest quarantine started (0: not recorded): a
    /// namespace waits at least its recorded lead and skew from it.
    pub since_ms: u64,
    /// Why it started.
    pub reason: String,
}

impl Quarantine {
    /// Its end for a namespace whose longest lead and skew are `lead_ms`
    /// and `skew_ms`.
    pub fn until_for(&self, lead_ms: u64, skew_ms: u64) -> u64 {
        if self.since_ms == 0 {
            return self.until_ms;
        }
        self.until_ms.max(
            self.since_ms
                .saturating_add(lead_ms)
                .saturating_add(skew_ms),
        )
    }
}

/// What a caller brings to the rule besides the request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Policy {
    /// How long a worker lease outlives its grant's end, in ticks.
    pub lease_grace: u64,
    /// The bounded lead, in ms: no grant ends more than this after `now`; a
    /// renewal that would start past it is `Unavailable` until the clock
    /// catches up. `None`: unbounded.
    pub max_lead_ms: Option<u64>,
    /// The clock-skew allowance every quarantine adds, in ms.
    pub clock_skew_ms: u64,
    /// The one worker an authority grants, when it grants only one (a
    /// static worker, `static:N`): a first grant takes it or none, and a
    /// renewal of another worker is `Refused`. `None`: every worker of the
    /// layout.
    pub only_worker: Option<u32>,
}

/// One namespace's state as read for a request.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// The namespace's record; `None` before its first request.
    pub registered: Option<&'a Registered>,
    /// The worker records read: every record of the namespace for a first
    /// grant, at least the one asked for for a renewal.
    pub workers: &'a Workers,
    /// The grant recorded for the request's (incarnation, request_id), if
    /// the store still keeps it.
    pub answer: Option<&'a Grant>,
    /// The store's quarantine, if it keeps one.
    pub quarantine: Option<&'a Quarantine>,
}

/// What the rule decided, with the writes it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// A retry: the recorded grant, and nothing to write.
    Recorded(Grant),
    /// A new grant. `record` (the record of `grant.worker`) and, when
    /// `namespace_changed`, `namespace` are written in one atomic step
    /// before the grant is answered.
    Grant {
        /// The grant to answer.
        grant: Grant,
        /// The worker's record after the grant.
        record: WorkerRecord,
        /// The namespace's record after the grant.
        namespace: Registered,
        /// True when `namespace` differs from what was read (registered
        /// now, a lead or skew raised, `next_unused` moved).
        namespace_changed: bool,
    },
    /// No grant. When `quarantine` is set, the store starts (or extends) a
    /// quarantine to its end before answering; when `namespace` is set, it
    /// writes the namespace's record first.
    Answer {
        /// The answer.
        error: GrantError,
        /// A quarantine to start: its end (Unix ms) and reason.
        quarantine: Option<(u64, String)>,
        /// The namespace's record to write when it changed: a request that
        /// passed the layout check registers the namespace (its layout) and
        /// raises its recorded lead and skew, granted or not, as the stores'
        /// functions do (a namespace's layout is fixed by its first request,
        /// and a registration is never undone).
        namespace: Option<Registered>,
    },
}

impl Decision {
    /// The answer to give once the writes are made.
    pub fn answer(&self) -> Result<Grant, GrantError> {
        match self {
            Decision::Recorded(grant) | Decision::Grant { grant, .. } => Ok(grant.clone()),
            Decision::Answer { error, .. } => Err(error.clone()),
        }
    }
}

/// The latest tick at which a grant the store made can end, at authority
/// time `now` (ticks): no grant ends more than the namespace's longest
/// `lead_ms` after the clock that granted it, and that clock was at most
/// `skew_ms` ahead of this one (docs/AUTHORITIES.md, "State loss"). `None`
/// when the lead is unbounded. Every engine bounds a renewal's evidence
/// with it: `now + ceil((lead_ms + skew_ms) / tick_ms)`.
pub fn evidence_bound(now: u64, lead_ms: Option<u64>, skew_ms: u64, tick_ms: u64) -> Option<u64> {
    lead_ms.map(|lead| now.saturating_add(lead.saturating_add(skew_ms).div_ceil(tick_ms.max(1))))
}

/// The words every engine's answer to a claim beyond [`evidence_bound`]
/// contains, so a server or a log search can tell it from any other `Lost`.
pub const NOT_EVIDENCE: &str = "not evidence of a lost grant";

/// What a renewal's `not_before` says about the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Within the worker's high-water: the store forgot nothing.
    Consistent,
    /// Beyond the high-water and within [`evidence_bound`]: the store lost a
    /// grant it made. The answer is `Lost`, and a store that keeps a
    /// quarantine starts one until the holder's grants have ended.
    Forgotten(String),
    /// Beyond [`evidence_bound`]: no holder of a grant of this store could
    /// send it (a hostile or broken caller). The answer is `Lost`, and no
    /// quarantine starts.
    Impossible(String),
}

/// The forgotten-grant check, on every engine (docs/AUTHORITIES.md,
/// "State loss"): a renewal's `not_before` is the end of the grants its
/// holder holds, which is the worker's high-water in a store that forgot
/// nothing. Beyond the store's high-water, it proves that the store lost a
/// grant it made (restored from a backup or a snapshot that its identity
/// checks cannot tell apart), unless it is beyond `bound`
/// ([`evidence_bound`]), the latest end of any grant the store could have
/// made.
pub fn forgotten_grant(worker: u32, not_before: u64, high_water: u64, bound: Option<u64>) -> Claim {
    if not_before <= high_water {
        return Claim::Consistent;
    }
    if let Some(bound) = bound.filter(|b| not_before > *b) {
        return Claim::Impossible(format!(
            "worker {worker}: a renewal from tick {not_before} is {NOT_EVIDENCE}: it is beyond \
             any grant the store could have made (tick {bound}: the authority's clock plus \
             max_lead_ms and clock_skew_ms); no quarantine starts, and no grant is made"
        ));
    }
    Claim::Forgotten(format!(
        "worker {worker}: its holder holds grants until tick {not_before}, beyond the store's \
         high-water (tick {high_water}): the store forgot a grant it made (restored from a \
         backup or a snapshot?); stop issuing from them and acquire again"
    ))
}

/// The quarantine gate: no grant before `until_ms`. At `now_ms` before
/// it, a first grant waits (`Unavailable`); a renewal of `renewal` is
/// `Lost`, because the grants it holds came from before what started the
/// quarantine.
pub fn gate(
    until_ms: u64,
    reason: &str,
    now_ms: u64,
    renewal: Option<u32>,
) -> Result<(), GrantError> {
    if now_ms >= until_ms {
        return Ok(());
    }
    let why = format!(
        "quarantine: {reason}; no grant before Unix ms {until_ms} ({} ms from now), when every \
         interval granted before it has ended",
        until_ms - now_ms
    );
    Err(match renewal {
        Some(w) => GrantError::Lost(format!(
            "worker {w}: {why}; the grants it holds came from before it: stop issuing from them \
             and acquire again"
        )),
        None => GrantError::Unavailable(why),
    })
}

/// Picks a worker for a first grant, by the one rule every authority
/// follows (docs/AUTHORITIES.md, "Which worker"): a never-used worker (the
/// lowest from `next_unused`); else, among workers nobody holds (or whose
/// lease expired), first those usable now (high-water not after `now`),
/// else the one whose high-water is nearest; then released before expired;
/// then the longest released or expired (so a crash-looping process reuses
/// the same few workers instead of walking through the worker space); then
/// the lowest number.
pub fn pick_worker(workers: &Workers, next_unused: u64, count: u64, now: u64) -> Option<u32> {
    let unused = workers.first_unused(next_unused, count);
    if unused.is_some() {
        return unused;
    }
    workers
        .iter()
        .filter(|(w, r)| u64::from(*w) < count && (r.holder.is_none() || r.lease_expiry <= now))
        .min_by_key(|(w, r)| {
            let waits = r.high_water > now;
            (
                waits,
                waits.then_some(r.high_water),
                r.used,
                r.holder.is_some(),
                r.lease_expiry,
                *w,
            )
        })
        .map(|(w, _)| w)
}

fn refuse(error: GrantError) -> Decision {
    Decision::Answer {
        error,
        quarantine: None,
        namespace: None,
    }
}

/// Applies the rule to `request` over `view`, at authority time `now_ms`
/// (Unix ms) and `now` (the same time in ticks of the request's layout).
/// See the module docs for the order of the checks.
pub fn decide(
    view: &View<'_>,
    request: &GrantRequest,
    policy: &Policy,
    now_ms: u64,
    now: u64,
) -> Decision {
    if let Some(g) = view.answer {
        return Decision::Recorded(g.clone());
    }
    // The namespace's longest lead and skew, this caller's included.
    let (have_lead, have_skew) = view
        .registered
        .map_or((0, 0), |r| (r.max_lead_ms, r.clock_skew_ms));
    let ns_lead = have_lead.max(policy.max_lead_ms.unwrap_or(0));
    let ns_skew = have_skew.max(policy.clock_skew_ms);
    // A store registers the encoding and the split; a datacenter split is
    // only a reading of the worker field (docs/AUTHORITIES.md, "Regions").
    let layout = request.layout.without_datacenter_bits();
    let mut namespace = match view.registered {
        Some(r) if r.layout != layout => {
            return refuse(GrantError::Refused(format!(
                "namespace {:?} is registered with another layout ({:?})",
                request.namespace, r.layout
            )));
        }
        Some(r) => *r,
        None => Registered {
            layout,
            next_unused: 0,
            max_lead_ms: 0,
            clock_skew_ms: 0,
        },
    };
    namespace.max_lead_ms = ns_lead;
    namespace.clock_skew_ms = ns_skew;
    match decide_registered(view, request, policy, now_ms, now, namespace) {
        // The namespace's record is written whatever the answer.
        Decision::Answer {
            error, quarantine, ..
        } => Decision::Answer {
            error,
            quarantine,
            namespace: (view.registered != Some(&namespace)).then_some(namespace),
        },
        other => other,
    }
}

/// [`decide`] past the layout check, for a namespace registered (or to be
/// registered) as `namespace`.
fn decide_registered(
    view: &View<'_>,
    request: &GrantRequest,
    policy: &Policy,
    now_ms: u64,
    now: u64,
    mut namespace: Registered,
) -> Decision {
    let layout = namespace.layout;
    let (ns_lead, ns_skew) = (namespace.max_lead_ms, namespace.clock_skew_ms);
    // Nothing is granted during a quarantine.
    if let Some(q) = view.quarantine
        && let Err(e) = gate(
            q.until_for(ns_lead, ns_skew),
            &q.reason,
            now_ms,
            request.worker,
        )
    {
        return refuse(e);
    }
    let count = layout.worker_count();
    if let Some(only) = policy.only_worker {
        if u64::from(only) >= count {
            return refuse(GrantError::Refused(format!(
                "static worker {only} does not fit in the layout's {} worker bits",
                layout.worker_bits()
            )));
        }
        if let Some(w) = request.worker.filter(|w| *w != only) {
            return refuse(GrantError::Refused(format!(
                "this authority only grants static worker {only}, not {w}"
            )));
        }
    }
    let worker = match request.worker {
        Some(w) => {
            if u64::from(w) >= count {
                return refuse(GrantError::Refused(format!(
                    "worker {w} is outside the namespace's {count} workers"
                )));
            }
            let rec = &view.workers[w as usize];
            // The forgotten-grant check comes first: grants beyond the
            // high-water are evidence of a loss whoever the store says holds
            // the worker (a restored copy may name another holder).
            let bound = evidence_bound(
                now,
                policy.max_lead_ms.map(|_| ns_lead),
                ns_skew,
                layout.tick_ms(),
            );
            match forgotten_grant(w, request.not_before, rec.high_water, bound) {
                Claim::Consistent => {}
                Claim::Impossible(why) => return refuse(GrantError::Lost(why)),
                Claim::Forgotten(why) => {
                    // Until the holder's grants have ended, and at least the
                    // namespace's lead, plus the skew.
                    let evidence_ms =
                        layout.unix_ms_of(request.not_before.min(layout.timestamp_limit()));
                    let until = evidence_ms
                        .max(now_ms.saturating_add(ns_lead))
                        .saturating_add(ns_skew);
                    return Decision::Answer {
                        error: GrantError::Lost(why.clone()),
                        quarantine: Some((until, why)),
                        namespace: None,
                    };
                }
            }
            if let Some(h) = rec.holder
                && h != request.incarnation
                && rec.lease_expiry > now
            {
                return refuse(GrantError::Lost(format!(
                    "worker {w} is held by incarnation {h:#x} until tick {}",
                    rec.lease_expiry
                )));
            }
            w
        }
        None => {
            let picked = match policy.only_worker {
                Some(only) => {
                    let rec = &view.workers[only as usize];
                    if let Some(h) = rec.holder
                        && h != request.incarnation
                        && rec.lease_expiry > now
                    {
                        return refuse(GrantError::Lost(format!(
                            "static worker {only} is held by incarnation {h:#x} until tick {}",
                            rec.lease_expiry
                        )));
                    }
                    Some(only)
                }
                None => pick_worker(view.workers, namespace.next_unused, count, now),
            };
            let Some(w) = picked else {
                return refuse(GrantError::Lost(format!(
                    "no free worker among the namespace's {count} workers"
                )));
            };
            let lead = FIRST_GRANT_LEAD_MS.div_ceil(layout.tick_ms());
            let high_water = view.workers[w as usize].high_water;
            if high_water > now.saturating_add(lead) {
                return refuse(GrantError::Unavailable(format!(
                    "every free worker's high-water is ahead of the authority's clock: the \
                     nearest, worker {w}, by {} ticks; a first grant waits for it",
                    high_water - now
                )));
            }
            w
        }
    };
    if request.worker.is_none() {
        // Every worker below the one taken was used (pick_worker takes the
        // lowest never-used first); past every worker, none is left.
        let next = if view.workers[worker as usize].used {
            count
        } else {
            u64::from(worker) + 1
        };
        namespace.next_unused = namespace.next_unused.max(next);
    }
    let rec = &view.workers[worker as usize];
    let start = rec.high_water.max(now).max(request.not_before);
    let end = start
        .saturating_add(request.duration)
        .min(layout.timestamp_limit());
    if start >= end {
        return refuse(GrantError::Lost(format!(
            "worker {worker} has no timestamp space left (high-water {})",
            rec.high_water
        )));
    }
    let end = match policy.max_lead_ms {
        Some(lead_ms) => end.min(now.saturating_add(lead_ms / layout.tick_ms())),
        None => end,
    };
    if start >= end {
        return refuse(GrantError::Unavailable(format!(
            "worker {worker}: a grant from tick {start} would end more than max_lead ({} ms) \
             after the clock",
            policy.max_lead_ms.unwrap_or_default()
        )));
    }
    let record = WorkerRecord {
        holder: Some(request.incarnation),
        lease_expiry: end.saturating_add(policy.lease_grace),
        high_water: end,
        fencing: rec.fencing + 1,
        used: true,
    };
    let grant = Grant {
        namespace: request.namespace.clone(),
        worker,
        incarnation: request.incarnation,
        grant_id: record.fencing,
        start,
        end,
    };
    Decision::Grant {
        grant,
        record,
        namespace_changed: view.registered != Some(&namespace),
        namespace,
    }
}

/// Ends the lease of `worker` if `incarnation` holds it, at `now` (ticks):
/// the lease expiry moves back to `now` when it was later (a worker
/// released is free from now; one whose lease had already expired keeps
/// when it expired). The high-water stays. Returns the new record, or
/// `None` when nothing is to be written.
pub fn release(record: &WorkerRecord, incarnation: u64, now: u64) -> Option<WorkerRecord> {
    (record.holder == Some(incarnation)).then(|| WorkerRecord {
        holder: None,
        lease_expiry: record.lease_expiry.min(now),
        ..record.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(worker: Option<u32>) -> GrantRequest {
        GrantRequest {
            namespace: "ns".into(),
            incarnation: 7,
            request_id: 1,
            worker,
            not_before: 0,
            now: 0,
            duration: 10,
            layout: Layout::new(12, 2, 4).unwrap(),
        }
    }

    #[test]
    fn a_retry_is_answered_before_the_gate_and_a_grant_after_it() {
        let workers = Workers::default();
        let recorded = Grant {
            namespace: "ns".into(),
            worker: 0,
            incarnation: 7,
            grant_id: 1,
            start: 100,
            end: 110,
        };
        let q = Quarantine {
            until_ms: 5_000,
            since_ms: 0,
            reason: "fenced".into(),
        };
        let mut view = View {
            registered: None,
            workers: &workers,
            answer: Some(&recorded),
            quarantine: Some(&q),
        };
        let policy = Policy::default();
        let d = decide(&view, &request(None), &policy, 1_000, 100);
        assert_eq!(d, Decision::Recorded(recorded.clone()));
        view.answer = None;
        let first = decide(&view, &request(None), &policy, 1_000, 100).answer();
        assert!(matches!(first, Err(GrantError::Unavailable(ref m)) if m.contains("fenced")));
        let renewal = decide(&view, &request(Some(0)), &policy, 1_000, 100).answer();
        assert!(matches!(renewal, Err(GrantError::Lost(ref m)) if m.contains("fenced")));
        let after = decide(&view, &request(None), &policy, 5_000, 100);
        assert!(matches!(
            after,
            Decision::Grant {
                namespace_changed: true,
                ..
            }
        ));
    }

    #[test]
    fn another_layout_is_refused_during_a_quarantine_too() {
        let registered = Registered {
            layout: Layout::new(12, 2, 5).unwrap(),
            next_unused: 0,
            max_lead_ms: 0,
            clock_skew_ms: 0,
        };
        let q = Quarantine {
            until_ms: 5_000,
            since_ms: 0,
            reason: "fenced".into(),
        };
        let workers = Workers::default();
        let view = View {
            registered: Some(&registered),
            workers: &workers,
            answer: None,
            quarantine: Some(&q),
        };
        let policy = Policy::default();
        for worker in [None, Some(0)] {
            let r = decide(&view, &request(worker), &policy, 1_000, 100).answer();
            assert!(
                matches!(r, Err(GrantError::Refused(ref m)) if m.contains("another layout")),
                "{worker:?}: {r:?}"
            );
        }
        // The registered layout waits; a worker outside it is then refused.
        let ours = GrantRequest {
            layout: registered.layout,
            ..request(None)
        };
        let r = decide(&view, &ours, &policy, 1_000, 100).answer();
        assert!(matches!(r, Err(GrantError::Unavailable(ref m)) if m.contains("fenced")));
        let outside = GrantRequest {
            worker: Some(4),
            ..ours
        };
        let r = decide(&view, &outside, &policy, 5_000, 100).answer();
        assert!(matches!(r, Err(GrantError::Refused(ref m)) if m.contains("outside")));
    }

    /// A namespace's first request registers it with its layout, and its
    /// lead and skew, even when it gets no grant (as the stores' functions
    /// do): another layout is refused from then on. A registered namespace
    /// whose record does not change writes nothing.
    #[test]
    fn a_first_request_without_a_grant_registers_the_namespace() {
        let q = Quarantine {
            until_ms: 5_000,
            since_ms: 0,
            reason: "fenced".into(),
        };
        let workers = Workers::default();
        let mut view = View {
            registered: None,
            workers: &workers,
            answer: None,
            quarantine: Some(&q),
        };
        let policy = Policy {
            max_lead_ms: Some(300),
            clock_skew_ms: 20,
            ..Policy::default()
        };
        let first = decide(&view, &request(None), &policy, 1_000, 100);
        let Decision::Answer {
            error: GrantError::Unavailable(_),
            namespace: Some(registered),
            ..
        } = first
        else {
            panic!("{first:?}");
        };
        assert_eq!(registered.layout, request(None).layout);
        assert_eq!(
            (registered.max_lead_ms, registered.clock_skew_ms),
            (300, 20)
        );
        view.registered = Some(&registered);
        let again = decide(&view, &request(None), &policy, 1_000, 100);
        assert!(
            matches!(
                again,
                Decision::Answer {
                    namespace: None,
                    ..
                }
            ),
            "{again:?}"
        );
        let other = GrantRequest {
            layout: Layout::new(12, 2, 5).unwrap(),
            ..request(None)
        };
        let r = decide(&view, &other, &policy, 9_000, 100).answer();
        assert!(matches!(r, Err(GrantError::Refused(ref m)) if m.contains("another layout")));
    }

    /// A renewal beyond the worker's high-water starts a quarantine only
    /// while a grant of the store could end there: at the bound, not one
    /// tick past it, nor at the layout's last tick.
    #[test]
    fn evidence_of_a_lost_grant_is_bounded() {
        let workers = Workers::default();
        let view = View {
            registered: None,
            workers: &workers,
            answer: None,
            quarantine: None,
        };
        let policy = Policy {
            max_lead_ms: Some(300),
            clock_skew_ms: 25,
            ..Policy::default()
        };
        // 4 ms ticks: ceil(325 / 4) = 82 ticks past tick 100.
        let layout = Layout::new(40, 2, 4).unwrap().with_tick_ms(4).unwrap();
        assert_eq!(evidence_bound(100, Some(300), 25, 4), Some(182));
        assert_eq!(evidence_bound(100, None, 25, 4), None);
        let renewal = |not_before| GrantRequest {
            worker: Some(1),
            not_before,
            layout,
            ..request(None)
        };
        let at = decide(&view, &renewal(182), &policy, 400, 100);
        assert!(
            matches!(at, Decision::Answer { error: GrantError::Lost(ref m), quarantine: Some(_), .. }
                if m.contains("forgot a grant")),
            "{at:?}"
        );
        for not_before in [183, layout.timestamp_limit() - 1, u64::MAX] {
            let past = decide(&view, &renewal(not_before), &policy, 400, 100);
            assert!(
                matches!(past, Decision::Answer { error: GrantError::Lost(ref m), quarantine: None, .. }
                    if m.contains(NOT_EVIDENCE)),
                "{not_before}: {past:?}"
            );
        }
        // An unbounded lead bounds nothing.
        let unbounded = Policy {
            max_lead_ms: None,
            ..policy
        };
        let far = decide(&view, &renewal(u64::MAX), &unbounded, 400, 100);
        assert!(
            matches!(
                far,
                Decision::Answer {
                    quarantine: Some(_),
                    ..
                }
            ),
            "{far:?}"
        );
    }

    #[test]
    fn a_release_never_moves_the_expiry_later() {
        let held = WorkerRecord {
            holder: Some(7),
            lease_expiry: 50,
            high_water: 40,
            fencing: 1,
            used: true,
        };
        assert_eq!(release(&held, 7, 30).unwrap().lease_expiry, 30);
        assert_eq!(release(&held, 7, 90).unwrap().lease_expiry, 50);
        assert_eq!(release(&held, 8, 30), None);
    }
}
