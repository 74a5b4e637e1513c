//! The allocation rule over plain state, and an in-memory authority built on
//! it.
//!
//! [`Allocator`] keeps what the rule ([`crate::rule::decide`], docs/DESIGN.md
//! section 2) decides over: the namespaces with their worker records (a
//! worker lease, holder incarnation + expiry, for liveness; a high-water
//! mark per worker for safety), the answers recorded for retries, and a log
//! of the grants made. The file authority persists this state; PostgreSQL,
//! MySQL and Redis implement the same rule in SQL and Lua, and etcd calls
//! [`crate::rule::decide`] over the keys it reads.
//!
//! [`MemoryAuthority`] keeps it in memory: for tests, examples, and
//! single-process programs that restart rarely (a restart forgets the
//! high-water marks, so it is not safe across restarts: use the file
//! authority for that).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::clock::Clock;
use crate::grant::{Grant, GrantError, GrantRequest, GrantSource};
use crate::layout::Layout;
use crate::rule::{self, Decision, Policy, Registered, View, Workers};

/// The state of one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceRecord {
    /// The layout the namespace was registered with.
    pub layout: Layout,
    /// The workers ever used.
    pub workers: Workers,
}

/// The allocation rule over plain state.
#[derive(Debug, Clone, Default)]
pub struct Allocator {
    /// Namespaces by name.
    pub namespaces: HashMap<String, NamespaceRecord>,
    /// Recorded answers by (namespace, incarnation, request_id), kept while
    /// the grant's lease lives (a retry comes within seconds).
    pub answers: HashMap<(String, u64, u64), Grant>,
    /// The grants made, in order (the newest `log_capacity`).
    pub log: std::collections::VecDeque<Grant>,
    /// How many grants `log` keeps.
    pub log_capacity: usize,
    /// How long a worker lease outlives its grant's end, in ticks.
    pub lease_grace: u64,
    /// The bounded lead, in ms: no grant ends more than this after `now`
    /// (docs/AUTHORITIES.md, "State loss"); a renewal that would start past
    /// it is `Unavailable` until the clock catches up. `None`: unbounded.
    pub max_lead_ms: Option<u64>,
}

impl Allocator {
    /// An empty allocator whose leases outlive their grants by `lease_grace`
    /// ticks.
    pub fn new(lease_grace: u64) -> Allocator {
        Allocator {
            lease_grace,
            log_capacity: 100_000,
            ..Allocator::default()
        }
    }

    /// Applies the rule to one request at authority time `now` (ticks).
    pub fn allocate(&mut self, request: &GrantRequest, now: u64) -> Result<Grant, GrantError> {
        let key = (
            request.namespace.clone(),
            request.incarnation,
            request.request_id,
        );
        let answer = self.answers.get(&key).cloned();
        if answer.is_none() && self.answers.len() >= 1024 {
            // Only this namespace's answers are measured against `now`: the
            // ticks of another namespace count in another layout.
            let grace = self.lease_grace;
            self.answers.retain(|(ns, _, _), g| {
                *ns != request.namespace || g.end.saturating_add(grace) > now
            });
        }
        let ns = self.namespaces.get(&request.namespace);
        let registered = ns.map(|ns| Registered {
            layout: ns.layout,
            next_unused: 0,
            max_lead_ms: 0,
            clock_skew_ms: 0,
        });
        let empty = Workers::default();
        let view = View {
            registered: registered.as_ref(),
            workers: ns.map_or(&empty, |ns| &ns.workers),
            answer: answer.as_ref(),
            quarantine: None,
        };
        let policy = Policy {
            lease_grace: self.lease_grace,
            max_lead_ms: self.max_lead_ms,
            clock_skew_ms: 0,
            only_worker: None,
        };
        let now_ms = request.layout.unix_ms_of(now);
        let decision = rule::decide(&view, request, &policy, now_ms, now);
        let (grant, record, namespace) = match decision {
            Decision::Grant {
                grant,
                record,
                namespace,
                ..
            } => (grant, record, namespace),
            Decision::Answer {
                namespace: Some(namespace),
                ref error,
                ..
            } => {
                self.register(&request.namespace, namespace.layout);
                return Err(error.clone());
            }
            _ => return decision.answer(),
        };
        let ns = self.register(&request.namespace, namespace.layout);
        *ns.workers.record(grant.worker) = record;
        self.answers.insert(key, grant.clone());
        while self.log.len() >= self.log_capacity.max(1) {
            self.log.pop_front();
        }
        self.log.push_back(grant.clone());
        Ok(grant)
    }

    /// The namespace's record, made with `layout` (without datacenter
    /// bits) on first use: the rule registers a namespace with its first
    /// request past the layout check, whatever the answer.
    pub fn register(&mut self, name: &str, layout: Layout) -> &mut NamespaceRecord {
        self.namespaces
            .entry(name.to_owned())
            .or_insert_with(|| NamespaceRecord {
                layout,
                workers: Workers::default(),
            })
    }

    /// Ends the lease of `last.worker` if `last.incarnation` holds it; the
    /// high-water mark stays.
    pub fn release(&mut self, last: &Grant, now: u64) {
        if let Some(ns) = self.namespaces.get_mut(&last.namespace)
            && let Some(rec) = ns.workers.get_mut(last.worker)
            && let Some(released) = rule::release(rec, last.incarnation, now)
        {
            *rec = released;
        }
    }
}

/// An authority in process memory. Thread-safe; cheap to clone (shared).
///
/// It belongs to the process that made it: in a `fork()` child its state is
/// a copy that the parent keeps changing, so the child would be granted the
/// parent's workers over the parent's intervals. A child's `acquire` is
/// therefore refused ([`GrantError::Refused`]).
#[derive(Clone)]
pub struct MemoryAuthority {
    state: Arc<Mutex<Allocator>>,
    clock: Option<Arc<dyn Clock>>,
    owner_pid: u32,
}

impl std::fmt::Debug for MemoryAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryAuthority").finish_non_exhaustive()
    }
}

impl Default for MemoryAuthority {
    fn default() -> MemoryAuthority {
        MemoryAuthority::new()
    }
}

impl MemoryAuthority {
    /// An authority with a lease grace of 1,000 ticks, timed by each
    /// request's `now`.
    pub fn new() -> MemoryAuthority {
        MemoryAuthority {
            state: Arc::new(Mutex::new(Allocator::new(1_000))),
            clock: None,
            owner_pid: std::process::id(),
        }
    }

    /// Sets how long a lease outlives its grant (ticks).
    pub fn with_lease_grace(self, ticks: u64) -> MemoryAuthority {
        self.lock().lease_grace = ticks;
        self
    }

    /// Bounds the lead (docs/AUTHORITIES.md, "State loss"): no grant ends
    /// more than `ms` after the authority's time, and a generator whose
    /// horizon plus grant duration exceed it is refused at start-up.
    pub fn with_max_lead_ms(self, ms: u64) -> MemoryAuthority {
        self.lock().max_lead_ms = Some(ms);
        self
    }

    /// Times grants by `clock` (its own clock) instead of the requester's.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> MemoryAuthority {
        self.clock = Some(clock);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Allocator> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self, request: &GrantRequest) -> u64 {
        match &self.clock {
            Some(c) => request.layout.tick_at(c.now_ms()),
            None => request.now,
        }
    }

    /// Every grant made so far.
    pub fn grants(&self) -> Vec<Grant> {
        self.lock().log.iter().cloned().collect()
    }

    /// Gives `worker` of `namespace` to another incarnation, as another
    /// process would take it after the lease expired: the next renewal by
    /// the old holder is lost. The high-water mark stays.
    pub fn steal(&self, namespace: &str, worker: u32, thief: u64, until: u64) {
        let mut state = self.lock();
        if let Some(rec) = state
            .namespaces
            .get_mut(namespace)
            .and_then(|ns| ns.workers.get_mut(worker))
        {
            rec.holder = Some(thief);
            rec.lease_expiry = until;
        }
    }

    /// A copy of the state.
    pub fn snapshot(&self) -> Allocator {
        self.lock().clone()
    }
}

impl GrantSource for MemoryAuthority {
    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        let pid = std::process::id();
        if pid != self.owner_pid {
            return Err(GrantError::Refused(format!(
                "this in-memory authority belongs to process {}; process {pid} is a fork() \
                 child holding a stale copy of its state (use an authority outside the \
                 process, such as file:, for forking programs)",
                self.owner_pid
            )));
        }
        let now = self.now(request);
        self.lock().allocate(request, now)
    }

    fn max_lead_ms(&self) -> Option<u64> {
        self.lock().max_lead_ms
    }

    fn release(&self, last: &Grant) {
        if std::process::id() != self.owner_pid {
            return;
        }
        let now = match &self.clock {
            Some(c) => {
                let layout = self
                    .lock()
                    .namespaces
                    .get(&last.namespace)
                    .map(|ns| ns.layout);
                layout.map_or(0, |l| l.tick_at(c.now_ms()))
            }
            None => 0,
        };
        self.lock().release(last, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(inc: u64, id: u64, worker: Option<u32>, not_before: u64, now: u64) -> GrantRequest {
        GrantRequest {
            namespace: "ns".into(),
            incarnation: inc,
            request_id: id,
            worker,
            not_before,
            now,
            duration: 10,
            layout: Layout::new(12, 2, 4).unwrap(),
        }
    }

    #[test]
    fn the_rule() {
        let mut a = Allocator::new(5);
        let g1 = a.allocate(&req(1, 1, None, 0, 100), 100).unwrap();
        assert_eq!((g1.worker, g1.start, g1.end, g1.grant_id), (0, 100, 110, 1));
        // Idempotent retry.
        assert_eq!(a.allocate(&req(1, 1, None, 0, 100), 200).unwrap(), g1);
        // Renewal continues from the high-water mark.
        let g2 = a.allocate(&req(1, 2, Some(0), 110, 105), 105).unwrap();
        assert_eq!((g2.start, g2.end, g2.grant_id), (110, 120, 2));
        // Another incarnation gets a free worker, not worker 0.
        let g3 = a.allocate(&req(2, 1, None, 0, 105), 105).unwrap();
        assert_eq!(g3.worker, 1);
        // ...and may not renew worker 0 while its lease lives.
        assert!(matches!(
            a.allocate(&req(2, 2, Some(0), 0, 105), 105),
            Err(GrantError::Lost(_))
        ));
        // Free workers go first; then the longest-expired lease is recycled
        // (worker 1: [105, 115) + 5 expired at 120, before worker 0 at 125).
        for inc in [3, 4] {
            a.allocate(&req(inc, 1, None, 0, 106), 106).unwrap();
        }
        let g = a.allocate(&req(5, 1, None, 0, 112), 130).unwrap();
        assert_eq!(g.worker, 1);
        assert_eq!(g.start, 130, "authority time, past the old high-water");
        let stolen = a.allocate(&req(2, 2, Some(1), 115, 130), 130);
        assert!(matches!(stolen, Err(GrantError::Lost(_))));
        // The old holder of an expired lease may renew while nobody took it.
        let g0 = a.allocate(&req(1, 3, Some(0), 120, 130), 130).unwrap();
        assert_eq!(g0.start, 130);
    }

    #[test]
    fn the_lead_is_bounded() {
        // Layout::new's tick is 1 ms: max_lead 15 ms is 15 ticks.
        let mut a = Allocator::new(5);
        a.max_lead_ms = Some(15);
        let g1 = a.allocate(&req(1, 1, None, 0, 100), 100).unwrap();
        assert_eq!((g1.start, g1.end), (100, 110));
        // A renewal is cut at now + 15 ...
        let g2 = a.allocate(&req(1, 2, Some(0), 110, 100), 100).unwrap();
        assert_eq!((g2.start, g2.end), (110, 115));
        // ... and one that would start past it waits, leaving no trace.
        let r = a.allocate(&req(1, 3, Some(0), 115, 100), 100);
        assert!(
            matches!(r, Err(GrantError::Unavailable(ref m)) if m.contains("max_lead")),
            "{r:?}"
        );
        assert_eq!(a.namespaces["ns"].workers[0].high_water, 115);
        let g3 = a.allocate(&req(1, 3, Some(0), 115, 103), 103).unwrap();
        assert_eq!((g3.start, g3.end), (115, 118));
    }

    #[test]
    fn answers_are_per_namespace_and_pruned() {
        let mut a = Allocator::new(5);
        let g1 = a.allocate(&req(1, 1, None, 0, 100), 100).unwrap();
        let mut other = req(1, 1, None, 0, 100);
        other.namespace = "other".into();
        let g2 = a.allocate(&other, 100).unwrap();
        assert_eq!(g2.namespace, "other");
        assert_ne!(g1.namespace, g2.namespace);
        for id in 2..1_200 {
            let r = req(id, 1, None, 0, 100 + 3 * id);
            let g = a.allocate(&r, 100 + 3 * id).unwrap();
            a.release(&g, 100 + 3 * id);
        }
        assert!(a.answers.len() <= 1024, "{}", a.answers.len());
        a.log_capacity = 10;
        a.allocate(&req(9_999, 1, None, 0, 4_000), 4_000).unwrap();
        assert_eq!(a.log.len(), 10);
    }

    #[test]
    fn high_water_never_moves_back_when_the_clock_does() {
        let mut a = Allocator::new(5);
        let g1 = a.allocate(&req(1, 1, None, 0, 1000), 1000).unwrap();
        let g2 = a.allocate(&req(1, 2, Some(0), 0, 10), 10).unwrap();
        assert_eq!(g2.start, g1.end);
    }

    #[test]
    fn layout_mismatch_and_end_of_time_are_refused() {
        let mut a = Allocator::new(5);
        a.allocate(&req(1, 1, None, 0, 0), 0).unwrap();
        let mut other = req(2, 1, None, 0, 0);
        other.layout = Layout::new(12, 3, 4).unwrap();
        assert!(
            matches!(a.allocate(&other, 0), Err(GrantError::Refused(m)) if m.contains("layout"))
        );
        let g = a.allocate(&req(3, 1, None, 0, 4090), 4090).unwrap();
        assert_eq!(g.end, 4096, "capped at the timestamp field");
        assert!(
            a.allocate(&req(3, 2, Some(g.worker), 4096, 4096), 4096)
                .is_err()
        );
    }

    #[test]
    fn answers_are_pruned_with_their_own_namespace_clock() {
        // Namespace "slow" counts 1 s ticks, "ns" 1 ms ticks: an answer of
        // "slow" at tick 1,000 is live, and must survive pruning done with
        // "ns"'s clock (tick 100,000).
        let mut a = Allocator::new(5);
        let mut slow = req(1, 1, None, 0, 1_000);
        slow.namespace = "slow".into();
        slow.layout = Layout::with_all(20, 2, 4, 0, 1_000).unwrap();
        let g = a.allocate(&slow, 1_000).unwrap();
        for inc in 10..1_100 {
            let r = req(inc, 1, None, 0, 100_000);
            if let Ok(g) = a.allocate(&r, 100_000) {
                a.release(&g, 100_000);
            }
        }
        assert_eq!(a.allocate(&slow, 1_001).unwrap(), g, "the retry's answer");
    }

    #[test]
    fn a_renewal_beyond_the_high_water_is_lost() {
        let mut a = Allocator::new(5);
        let g = a.allocate(&req(1, 1, None, 0, 100), 100).unwrap();
        let r = a.allocate(&req(1, 2, Some(g.worker), g.end + 1, 101), 101);
        assert!(
            matches!(r, Err(GrantError::Lost(ref m)) if m.contains("forgot a grant")),
            "{r:?}"
        );
        a.allocate(&req(1, 3, Some(g.worker), g.end, 101), 101)
            .unwrap();
    }

    #[test]
    fn workers_are_kept_sparsely() {
        let mut a = Allocator::new(5);
        let mut r = req(1, 1, None, 0, 100);
        r.layout = Layout::new(20, 32, 1).unwrap();
        let g = a.allocate(&r, 100).unwrap();
        let mut again = req(2, 1, Some(u32::MAX), 0, 100);
        again.layout = r.layout;
        let top = a.allocate(&again, 100).unwrap();
        assert_eq!((g.worker, top.worker), (0, u32::MAX));
        assert_eq!(a.namespaces["ns"].workers.len(), 2);
        assert_eq!(a.namespaces["ns"].workers[7].high_water, 0);
    }

    #[test]
    fn a_worker_usable_now_goes_before_one_released_with_a_future_high_water() {
        let mut a = Allocator::new(5);
        // Workers 0..4 used; 0 renewed far ahead and released; 1 expired.
        let mut gs = Vec::new();
        for inc in 0..4 {
            gs.push(a.allocate(&req(inc, 1, None, 0, 100), 100).unwrap());
        }
        let mut long = req(0, 2, Some(0), gs[0].end, 100);
        long.duration = 1_900;
        let far = a.allocate(&long, 100).unwrap();
        a.release(&far, 101);
        a.release(&gs[1], 101);
        // Worker 0 was released first, but its high-water (2,010) is ahead;
        // worker 1 is usable now.
        let g = a.allocate(&req(9, 1, None, 0, 102), 102).unwrap();
        assert_eq!((g.worker, g.start), (1, 110));
        // With only worker 0 free, a first grant is not made so far ahead.
        let r = a.allocate(&req(10, 1, None, 0, 103), 103);
        assert!(
            matches!(r, Err(GrantError::Unavailable(ref m)) if m.contains("ahead")),
            "{r:?}"
        );
        // Within the lead it is made (workers 1..4 still held).
        for (inc, w) in [(9, 1), (2, 2), (3, 3)] {
            a.allocate(&req(inc, 5, Some(w), 0, 1_950), 1_950).unwrap();
        }
        let g = a.allocate(&req(11, 1, None, 0, 1_950), 1_950).unwrap();
        assert_eq!((g.worker, g.start), (0, 2_010));
    }

    #[test]
    fn out_of_range_worker_is_refused() {
        let mut a = Allocator::new(5);
        let r = a.allocate(&req(1, 1, Some(4), 0, 100), 100);
        assert!(
            matches!(r, Err(GrantError::Refused(ref m)) if m.contains("outside")),
            "{r:?}"
        );
    }

    #[test]
    fn no_free_worker_is_lost() {
        let mut a = Allocator::new(1000);
        for inc in 0..4 {
            a.allocate(&req(inc, 1, None, 0, 0), 0).unwrap();
        }
        assert!(
            matches!(a.allocate(&req(9, 1, None, 0, 0), 0), Err(GrantError::Lost(m)) if m.contains("no free worker"))
        );
    }
}
