//! The server's authority sessions for GrantService (docs/SERVICE.md,
//! "Fan-in"): a few independent connections to the store, each running one
//! call at a time, and a bounded wait for a free one.
//!
//! A fleet's grant calls queue here, never inside an authority session:
//! the authority's own `timeout_ms` then bounds only the store's work, not
//! the wait for a turn, so a queue never times a session out (which would
//! drop its connection and make the next call slower still). The wait ends
//! with the caller: tonic drops a call whose client deadline
//! (`grpc-timeout`) has passed, and a call dropped while it waits never
//! reaches the store. Past [`Sessions::max_waiting`] waiting calls, or
//! after [`MAX_WAIT`], a call is shed at once with `RESOURCE_EXHAUSTED`:
//! the client backs off and retries, and the server keeps its throughput
//! instead of collapsing under work nobody waits for.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use grantid::{Error, ErrorKind};
use grantid_authority::Authority;
use metrics::{Counter, Gauge};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio::time::Instant;

/// Default number of authority sessions of one server.
pub const DEFAULT_AUTHORITY_SESSIONS: usize = 4;
/// Calls that may wait for a session, per session, before more are shed.
pub const WAITING_PER_SESSION: usize = 64;
/// Longest wait for a session, whatever the client's deadline (the
/// `grpc://` authority's default `timeout_ms`); a shorter deadline ends it
/// sooner.
pub const MAX_WAIT: Duration = Duration::from_secs(3);

/// What a call is for, which decides which sessions it may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// A renewal or a release: what keeps a live process issuing, and what
    /// frees a worker. May use every session.
    Renewal,
    /// A first grant (any free worker), `Status`, `Init`, `Limits`. May
    /// use at most half the sessions (at least one), so that however many
    /// starts a fleet retries at once (a saturated fleet retries its starts
    /// for seconds), renewals always find a session.
    New,
}

/// A session in use: back to the idle list, and its permits released, when
/// dropped (on the blocking thread that ran the call, whatever the call
/// did).
struct InUse {
    pool: Arc<Pool>,
    session: Option<Arc<dyn Authority>>,
    _permits: (OwnedSemaphorePermit, Option<OwnedSemaphorePermit>),
}

impl Drop for InUse {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            // A Vec is never left half-changed: a poisoned lock is usable.
            let mut idle = self
                .pool
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            idle.push(s);
        }
        self.pool.busy.decrement(1.0);
    }
}

struct Pool {
    idle: Mutex<Vec<Arc<dyn Authority>>>,
    busy: Gauge,
}

/// Permits with a bounded number of waiters.
#[derive(Debug)]
struct Gate {
    permits: Arc<Semaphore>,
    waiting: AtomicUsize,
    max_waiting: usize,
}

/// Decrements the waiting count when the wait ends, also when the call is
/// dropped while it waits.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why a wait for a permit ended without one.
enum Refused {
    Full(usize),
    Late,
    Closed,
}

impl Gate {
    fn new(permits: usize, max_waiting: usize) -> Gate {
        Gate {
            permits: Arc::new(Semaphore::new(permits)),
            waiting: AtomicUsize::new(0),
            max_waiting,
        }
    }

    async fn enter(&self, deadline: Instant) -> Result<OwnedSemaphorePermit, Refused> {
        match Arc::clone(&self.permits).try_acquire_owned() {
            Ok(p) => return Ok(p),
            Err(TryAcquireError::Closed) => return Err(Refused::Closed),
            Err(TryAcquireError::NoPermits) => {}
        }
        if self.waiting.fetch_add(1, Ordering::Relaxed) >= self.max_waiting {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            return Err(Refused::Full(self.max_waiting));
        }
        let _waiting = Waiting(&self.waiting);
        match tokio::time::timeout_at(deadline, Arc::clone(&self.permits).acquire_owned()).await {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(_)) => Err(Refused::Closed),
            Err(_) => Err(Refused::Late),
        }
    }
}

/// See the module docs.
pub(crate) struct Sessions {
    pool: Arc<Pool>,
    /// Every session.
    all: Gate,
    /// The share [`Class::New`] calls may use.
    new_work: Gate,
    shed: Counter,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("all", &self.all)
            .field("new_work", &self.new_work)
            .finish_non_exhaustive()
    }
}

impl Sessions {
    /// A pool of `sessions` (at least one).
    pub fn new(sessions: Vec<Arc<dyn Authority>>) -> Sessions {
        let n = sessions.len().max(1);
        metrics::gauge!("grantid_authority_sessions").set(sessions.len() as f64);
        Sessions {
            all: Gate::new(sessions.len(), n * WAITING_PER_SESSION),
            new_work: Gate::new((n / 2).max(1), n * WAITING_PER_SESSION),
            pool: Arc::new(Pool {
                idle: Mutex::new(sessions),
                busy: metrics::gauge!("grantid_authority_sessions_busy"),
            }),
            shed: metrics::counter!("grantid_grant_calls_shed_total"),
        }
    }

    /// The drain began: calls still waiting for a session, and any that
    /// come, are answered at once (`UNAVAILABLE`: retry on another server);
    /// calls on a session finish.
    pub fn close(&self) {
        self.all.permits.close();
        self.new_work.permits.close();
    }

    fn refused(&self, why: Refused) -> Error {
        let why = match why {
            Refused::Closed => return Error::new(ErrorKind::Closed, "the server is stopping"),
            Refused::Full(n) => format!("{n} calls already wait for an authority session"),
            Refused::Late => format!("no authority session was free within {MAX_WAIT:?}"),
        };
        self.shed.increment(1);
        Error::new(
            ErrorKind::CapacityExhausted,
            format!("the server is at capacity: {why}; retry after a back-off"),
        )
    }

    /// Waits (bounded) for a free session `class` may use.
    async fn take(&self, class: Class) -> Result<InUse, Error> {
        let deadline = Instant::now() + MAX_WAIT;
        let share = match class {
            Class::Renewal => None,
            Class::New => Some(
                self.new_work
                    .enter(deadline)
                    .await
                    .map_err(|w| self.refused(w))?,
            ),
        };
        let permit = self
            .all
            .enter(deadline)
            .await
            .map_err(|w| self.refused(w))?;
        let session = self
            .pool
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let Some(session) = session else {
            // Every permit has its idle session (the permit is released
            // after its session is back): never here.
            return Err(Error::new(
                ErrorKind::Unavailable,
                "the server's authority sessions are unusable",
            ));
        };
        self.pool.busy.increment(1.0);
        Ok(InUse {
            pool: Arc::clone(&self.pool),
            session: Some(session),
            _permits: (permit, share),
        })
    }

    /// Runs `op` on a free session, on a blocking thread (the authority
    /// blocks on its store, bounded by its `timeout_ms`). The session goes
    /// back to the pool when `op` returns, even if the caller has gone. A
    /// panic is `Ok(None)`, for the caller to report.
    pub async fn run<T: Send + 'static>(
        &self,
        class: Class,
        op: impl FnOnce(&dyn Authority) -> T + Send + 'static,
    ) -> Result<Option<T>, Error> {
        let in_use = self.take(class).await?;
        let joined = tokio::task::spawn_blocking(move || {
            let result = in_use
                .session
                .as_ref()
                .and_then(|s| catch_unwind(AssertUnwindSafe(|| op(s.as_ref()))).ok());
            drop(in_use);
            result
        })
        .await;
        match joined {
            Ok(result) => Ok(result),
            // The runtime shut down before the blocking thread ran.
            Err(e) if e.is_cancelled() => {
                Err(Error::new(ErrorKind::Closed, "the server is stopping"))
            }
            Err(_) => Ok(None),
        }
    }
}
