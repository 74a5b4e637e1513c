//! The one bridge from the authorities' blocking calls to their async
//! drivers (PostgreSQL, MySQL, etcd, gRPC): one process's connection,
//! driven by a small single-threaded tokio runtime that runs only inside a
//! call.
//!
//! * [`Blocking::call`] (the database engines): one client-side deadline
//!   of `timeout_ms` per call, counted from the moment the call is made
//!   (waiting behind another call of the process included), so every call
//!   answers within about `timeout_ms` (docs/AUTHORITIES.md, "Deadlines").
//!   The connection is made on first use, inside the deadline, and again
//!   after any timeout or `Unavailable` answer (the old one is dropped: a
//!   statement cut off by the deadline may still commit on the server, so
//!   the caller's retry with the same request id gets the recorded grant).
//! * [`Blocking::run`] (gRPC): the same connection slot and runtime, with
//!   the deadlines and the error mapping left to the caller; the
//!   connection is kept (a channel reconnects by itself).
//! * A `fork()` child gets its own runtime and connection ([`ForkLocal`]).
//! * Inside a caller's tokio runtime (an async function, a `spawn_blocking`
//!   thread) a runtime of our own cannot block, so the call runs on a
//!   scoped thread, and a panic there is an `Unavailable` answer.

#[cfg(any(feature = "mysql", feature = "etcd", feature = "dynamodb"))]
use std::future::Future;
#[cfg(any(feature = "mysql", feature = "etcd", feature = "dynamodb"))]
use std::pin::Pin;
#[cfg(any(
    feature = "postgres",
    feature = "mysql",
    feature = "etcd",
    feature = "dynamodb"
))]
use std::time::{Duration, Instant};

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

/// A future borrowing a connection (the MySQL and etcd statements).
#[cfg(any(feature = "mysql", feature = "etcd", feature = "dynamodb"))]
pub(crate) type Work<'a, T> = Pin<Box<dyn Future<Output = Result<T, GrantError>> + 'a>>;

/// Per-process connections of type `C`. See the module docs.
pub(crate) struct Blocking<C: Send> {
    /// What the errors are about: `postgres`, `grpc://HOST:PORT`, ...
    label: String,
    slot: ForkLocal<Option<Session<C>>>,
}

impl<C: Send> std::fmt::Debug for Blocking<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blocking")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl<C: Send> Blocking<C> {
    pub(crate) fn new(label: impl Into<String>) -> Blocking<C> {
        Blocking {
            label: label.into(),
            slot: ForkLocal::new(),
        }
    }

    /// Runs `work` on this process's connection slot (`None` when there is
    /// no connection yet: `work` makes one and stores it), all within
    /// `timeout` of now. Past it, or on an `Unavailable` answer, the
    /// connection is dropped and the next call reconnects.
    #[cfg(any(
        feature = "postgres",
        feature = "mysql",
        feature = "etcd",
        feature = "dynamodb"
    ))]
    pub(crate) fn call<T: Send>(
        &self,
        timeout: Duration,
        what: &str,
        work: impl AsyncFnOnce(&mut Option<C>) -> Result<T, GrantError> + Send,
    ) -> Result<T, GrantError> {
        let deadline = Instant::now() + timeout;
        self.on_session(what, |runtime, conn| {
            // The timer is made inside the runtime (it needs its time
            // driver).
            let outcome = runtime
                .block_on(async { tokio::time::timeout_at(deadline.into(), work(conn)).await });
            match outcome {
                Err(_elapsed) => {
                    // Dropped outside the runtime's context, so that no
                    // driver spawns a goodbye task that could wait on a
                    // frozen server.
                    *conn = None;
                    Err(GrantError::Unavailable(format!(
                        "{}: {what}: no answer within timeout_ms ({} ms, client-side deadline); \
                         the connection was dropped",
                        self.label,
                        timeout.as_millis()
                    )))
                }
                Ok(answer) => {
                    if matches!(answer, Err(GrantError::Unavailable(_))) {
                        *conn = None;
                    }
                    answer
                }
            }
        })
    }

    /// Runs `work` on this process's connection slot, without a deadline
    /// of its own and without ever dropping the connection.
    #[cfg(feature = "grpc")]
    pub(crate) fn run<T: Send>(
        &self,
        what: &str,
        work: impl AsyncFnOnce(&mut Option<C>) -> Result<T, GrantError> + Send,
    ) -> Result<T, GrantError> {
        self.on_session(what, |runtime, conn| runtime.block_on(work(conn)))
    }

    /// Calls `f` with this process's runtime and connection slot, on a
    /// scoped thread when the caller is inside a tokio runtime.
    fn on_session<T: Send>(
        &self,
        what: &str,
        f: impl FnOnce(&Runtime, &mut Option<C>) -> Result<T, GrantError> + Send,
    ) -> Result<T, GrantError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return self.on_session_here(f);
        }
        std::thread::scope(|s| {
            s.spawn(|| self.on_session_here(f))
                .join()
                .unwrap_or_else(|_| {
                    Err(GrantError::Unavailable(format!(
                        "{}: {what}: the call panicked",
                        self.label
                    )))
                })
        })
    }

    fn on_session_here<T>(
        &self,
        f: impl FnOnce(&Runtime, &mut Option<C>) -> Result<T, GrantError>,
    ) -> Result<T, GrantError> {
        let mut slot = self.slot.get().lock();
        if slot.is_none() {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| {
                    GrantError::Unavailable(format!(
                        "{}: cannot start the I/O runtime: {e}",
                        self.label
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
                self.label
            )));
        };
        f(runtime, &mut session.conn)
    }
}
