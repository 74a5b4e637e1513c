//! The allocation rule in Rust, and an in-memory authority built on it.
//!
//! [`Allocator`] is the rule every reference authority implements
//! (docs/DESIGN.md section 2): a worker lease (holder incarnation + expiry) for
//! liveness, a high-water mark per worker for safety, `start = max(high_water,
//! now, not_before)`, `end = start + duration` capped at the timestamp field,
//! high-water moved to `end` before answering, and a retry of the same
//! (incarnation, request_id) answered with the recorded grant. The file
//! authority persists this state; PostgreSQL and Redis implement the same rule
//! in SQL and Lua.
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

/// The state of one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceRecord {
    /// The layout the namespace was registered with.
    pub layout: Layout,
    /// One record per worker value.
    pub workers: Vec<WorkerRecord>,
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
        if let Some(g) = self.answers.get(&key) {
            return Ok(g.clone());
        }
        if self.answers.len() >= 1024 {
            let grace = self.lease_grace;
            self.answers
                .retain(|_, g| g.end.saturating_add(grace) > now);
        }
        let layout = request.layout;
        let ns = self
            .namespaces
            .entry(request.namespace.clone())
            .or_insert_with(|| NamespaceRecord {
                layout,
                workers: vec![WorkerRecord::default(); layout.worker_count().min(1 << 20) as usize],
            });
        if ns.layout != layout {
            return Err(GrantError::Lost(format!(
                "namespace {:?} is registered with another layout ({:?})",
                request.namespace, ns.layout
            )));
        }
        let index = match request.worker {
            Some(w) => {
                let rec = ns.workers.get(w as usize).ok_or_else(|| {
                    GrantError::Lost(format!(
                        "worker {w} is outside the namespace's {} workers",
                        ns.workers.len()
                    ))
                })?;
                match rec.holder {
                    Some(h) if h != request.incarnation && rec.lease_expiry > now => {
                        return Err(GrantError::Lost(format!(
                            "worker {w} is held by incarnation {h:#x} until tick {}",
                            rec.lease_expiry
                        )));
                    }
                    _ => w as usize,
                }
            }
            None => pick_worker(&ns.workers, now).ok_or_else(|| {
                GrantError::Lost(format!(
                    "no free worker among the namespace's {} workers",
                    ns.workers.len()
                ))
            })?,
        };
        let rec = &mut ns.workers[index];
        let start = rec.high_water.max(now).max(request.not_before);
        let end = start
            .saturating_add(request.duration)
            .min(layout.timestamp_limit());
        if start >= end {
            return Err(GrantError::Lost(format!(
                "worker {index} has no timestamp space left (high-water {})",
                rec.high_water
            )));
        }
        rec.high_water = end;
        rec.holder = Some(request.incarnation);
        rec.lease_expiry = end.saturating_add(self.lease_grace);
        rec.fencing += 1;
        rec.used = true;
        let grant = Grant {
            namespace: request.namespace.clone(),
            worker: index as u32,
            incarnation: request.incarnation,
            grant_id: rec.fencing,
            start,
            end,
        };
        self.answers.insert(key, grant.clone());
        while self.log.len() >= self.log_capacity.max(1) {
            self.log.pop_front();
        }
        self.log.push_back(grant.clone());
        Ok(grant)
    }

    /// Ends the lease of `last.worker` if `last.incarnation` holds it; the
    /// high-water mark stays.
    pub fn release(&mut self, last: &Grant, now: u64) {
        if let Some(ns) = self.namespaces.get_mut(&last.namespace)
            && let Some(rec) = ns.workers.get_mut(last.worker as usize)
            && rec.holder == Some(last.incarnation)
        {
            rec.holder = None;
            rec.lease_expiry = now;
        }
    }
}

/// Picks a worker nobody holds (or whose lease expired): first one that can
/// start now (high-water not in the future), free before expired, the
/// longest-expired first, so a crash-looping process reuses the same few
/// workers instead of walking through the worker space; then the one whose
/// high-water is nearest.
fn pick_worker(workers: &[WorkerRecord], now: u64) -> Option<usize> {
    workers
        .iter()
        .enumerate()
        .filter(|(_, w)| w.holder.is_none() || w.lease_expiry <= now)
        .min_by_key(|(i, w)| {
            let waits = w.high_water > now;
            (
                waits,
                waits.then_some(w.high_water),
                w.holder.is_some(),
                w.lease_expiry,
                *i,
            )
        })
        .map(|(i, _)| i)
}

/// An authority in process memory. Thread-safe; cheap to clone (shared).
#[derive(Clone)]
pub struct MemoryAuthority {
    state: Arc<Mutex<Allocator>>,
    clock: Option<Arc<dyn Clock>>,
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
        }
    }

    /// Sets how long a lease outlives its grant (ticks).
    pub fn with_lease_grace(self, ticks: u64) -> MemoryAuthority {
        self.lock().lease_grace = ticks;
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
            .and_then(|ns| ns.workers.get_mut(worker as usize))
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
        let now = self.now(request);
        self.lock().allocate(request, now)
    }

    fn release(&self, last: &Grant) {
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
        assert!(matches!(a.allocate(&other, 0), Err(GrantError::Lost(m)) if m.contains("layout")));
        let g = a.allocate(&req(3, 1, None, 0, 4090), 4090).unwrap();
        assert_eq!(g.end, 4096, "capped at the timestamp field");
        assert!(
            a.allocate(&req(3, 2, Some(g.worker), 4096, 4096), 4096)
                .is_err()
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
