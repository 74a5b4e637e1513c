//! Grant sources the worker puts in front of (or, for the negative test,
//! instead of) the PostgreSQL authority.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use grantid::{Grant, GrantError, GrantRequest, GrantSource};

/// Asks the authority for one named worker value on the first acquisition
/// (instead of "any free worker"), so the harness can make a fresh process
/// take over the worker of a stopped one. The authority decides: while the
/// worker's lease is held, its refusal is turned into "uncertain" (the
/// generator retries) until `until`; after that, any worker is asked for.
/// Renewals and later acquisitions pass through unchanged.
#[derive(Debug)]
pub struct PreferWorker<S> {
    inner: S,
    worker: u32,
    until: Instant,
    done: AtomicBool,
}

impl<S: GrantSource> PreferWorker<S> {
    /// Prefers `worker` until `until`.
    pub fn new(inner: S, worker: u32, until: Instant) -> PreferWorker<S> {
        PreferWorker {
            inner,
            worker,
            until,
            done: AtomicBool::new(false),
        }
    }
}

impl<S: GrantSource> GrantSource for PreferWorker<S> {
    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        if request.worker.is_some()
            || self.done.load(Ordering::SeqCst)
            || Instant::now() >= self.until
        {
            return self.inner.acquire(request);
        }
        let mut wanted = request.clone();
        wanted.worker = Some(self.worker);
        match self.inner.acquire(&wanted) {
            Ok(g) => {
                self.done.store(true, Ordering::SeqCst);
                Ok(g)
            }
            Err(GrantError::Lost(why)) => Err(GrantError::Unavailable(format!(
                "preferred worker {} is not free yet: {why}",
                self.worker
            ))),
            Err(e) => Err(e),
        }
    }

    fn release(&self, last: &Grant) {
        self.inner.release(last)
    }

    fn max_lead_ms(&self) -> Option<u64> {
        self.inner.max_lead_ms()
    }
}

/// FAULT INJECTION ONLY — never an authority. Answers every request with a
/// grant of one fixed worker over a fixed hour of ticks (aligned on the
/// minute, so two processes started within the same minute get the same
/// range), recording nothing anywhere. Two processes using it issue from
/// the same worker and ticks: the harness must then report duplicates and
/// IDs outside the grant log. It exists to prove that the checks can fail.
#[derive(Debug)]
pub struct SharedFakeGrant {
    /// The worker value every grant names.
    pub worker: u32,
}

/// Ticks per fake grant (one hour of 1 ms ticks).
const FAKE_GRANT_TICKS: u64 = 3_600_000;

impl GrantSource for SharedFakeGrant {
    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        let base = request.now / 60_000 * 60_000;
        let start = base.max(request.not_before);
        Ok(Grant {
            namespace: request.namespace.clone(),
            worker: self.worker,
            incarnation: request.incarnation,
            grant_id: 0,
            start,
            end: start + FAKE_GRANT_TICKS,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use grantid::{Layout, source_fn};
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;
    use std::time::Duration;

    fn request(worker: Option<u32>) -> GrantRequest {
        GrantRequest {
            namespace: "ns".into(),
            incarnation: 9,
            request_id: 1,
            worker,
            not_before: 0,
            now: 125_000,
            duration: 10,
            layout: Layout::default(),
        }
    }

    #[test]
    fn the_preferred_worker_is_asked_for_once() {
        let asked = Arc::new(AtomicU64::new(0));
        let a = Arc::clone(&asked);
        let inner = source_fn(move |r: &GrantRequest| {
            a.fetch_add(1, Ordering::SeqCst);
            match r.worker {
                Some(5) if a.load(Ordering::SeqCst) == 1 => Err(GrantError::Lost("held".into())),
                w => Ok(Grant {
                    namespace: r.namespace.clone(),
                    worker: w.unwrap_or(1),
                    incarnation: r.incarnation,
                    grant_id: 1,
                    start: 0,
                    end: 10,
                }),
            }
        });
        let p = PreferWorker::new(inner, 5, Instant::now() + Duration::from_secs(60));
        let first = p.acquire(&request(None));
        assert!(matches!(first, Err(GrantError::Unavailable(ref m)) if m.contains("worker 5")));
        assert_eq!(p.acquire(&request(None)).unwrap().worker, 5);
        assert_eq!(
            p.acquire(&request(None)).unwrap().worker,
            1,
            "only the first grant"
        );
    }

    #[test]
    fn the_fake_grant_is_the_same_for_two_processes() {
        let f = SharedFakeGrant { worker: 3 };
        let a = f.acquire(&request(None)).unwrap();
        let mut other = request(None);
        other.now += 20_000;
        let b = f.acquire(&other).unwrap();
        assert_eq!((a.worker, a.start, a.end), (b.worker, b.start, b.end));
        assert_eq!(a.start, 120_000);
    }
}
