//! One process's connection to an async driver, driven by a small
//! single-threaded tokio runtime that runs only inside a call, with one
//! client-side deadline per call (the MySQL and etcd authorities).
//!
//! * The connection is made on first use, inside the deadline, and again
//!   after any error or timeout (the old one is dropped: a statement cut off
//!   by the deadline may still commit on the server, so the caller's retry
//!   with the same request id gets the recorded grant).
//! * A `fork()` child gets its own runtime and connection ([`ForkLocal`]).
//! * Inside a caller's tokio runtime (an async context, a `spawn_blocking`
//!   thread) a runtime of our own cannot block, so the call runs on a scoped
//!   thread, as the gRPC authority does.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use grantid::GrantError;
use tokio::runtime::Runtime;

use crate::forklocal::ForkLocal;

/// The runtime and the connection of one process.
struct Session<C> {
    runtime: Option<Runtime>,
    conn: Option<C>,
}

impl<C> Drop for Session<C> {
    fn drop(&mut self) {
        // The connection first, while its runtime still exists.
        self.conn = None;
        // Never blocks, so a drop inside another runtime is fine.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// A future borrowing the connection slot.
pub(crate) type Work<'a, T> = Pin<Box<dyn Future<Output = Result<T, GrantError>> + 'a>>;

/// Per-process connections of type `C`. See the module docs.
pub(crate) struct Blocking<C: Send> {
    engine: &'static str,
    slot: ForkLocal<Option<Session<C>>>,
}

impl<C: Send> std::fmt::Debug for Blocking<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blocking")
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

impl<C: Send> Blocking<C> {
    pub(crate) const fn new(engine: &'static str) -> Blocking<C> {
        Blocking {
            engine,
            slot: ForkLocal::new(),
        }
    }

    /// Runs `work` on this process's connection slot (`None` when there is
    /// no connection yet: `work` makes one and stores it), all within
    /// `timeout`. Past it, or on an `Unavailable` answer, the connection is
    /// dropped and the next call reconnects.
    pub(crate) fn call<T: Send>(
        &self,
        timeout: Duration,
        what: &str,
        work: impl for<'a> FnOnce(&'a mut Option<C>) -> Work<'a, T> + Send,
    ) -> Result<T, GrantError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return self.call_here(timeout, what, work);
        }
        std::thread::scope(|s| {
            s.spawn(|| self.call_here(timeout, what, work))
                .join()
                .unwrap_or_else(|_| {
                    Err(GrantError::Unavailable(format!(
                        "{}: {what}: the call panicked",
                        self.engine
                    )))
                })
        })
    }

    fn call_here<T>(
        &self,
        timeout: Duration,
        what: &str,
        work: impl for<'a> FnOnce(&'a mut Option<C>) -> Work<'a, T>,
    ) -> Result<T, GrantError> {
        let mut slot = self.slot.get().lock();
        if slot.is_none() {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| {
                    GrantError::Unavailable(format!(
                        "{}: cannot start the I/O runtime: {e}",
                        self.engine
                    ))
                })?;
            *slot = Some(Session {
                runtime: Some(runtime),
                conn: None,
            });
        }
        let session = slot.as_mut().expect("made above");
        let Some(runtime) = session.runtime.as_ref() else {
            return Err(GrantError::Unavailable(format!(
                "{}: no runtime",
                self.engine
            )));
        };
        let conn = &mut session.conn;
        // The timer is made inside the runtime (it needs its time driver).
        let outcome = runtime.block_on(async { tokio::time::timeout(timeout, work(conn)).await });
        match outcome {
            Err(_elapsed) => {
                // Dropped outside the runtime's context, so that no driver
                // spawns a goodbye task that could wait on a frozen server.
                session.conn = None;
                Err(GrantError::Unavailable(format!(
                    "{}: {what}: no answer within timeout_ms ({} ms, client-side deadline); \
                     the connection was dropped",
                    self.engine,
                    timeout.as_millis()
                )))
            }
            Ok(answer) => {
                if matches!(answer, Err(GrantError::Unavailable(_))) {
                    session.conn = None;
                }
                answer
            }
        }
    }
}
