//! A Python callable driving the core's `GrantSource` trait.
//!
//! The core calls `acquire` on its renewal thread (never on the `next_id`
//! path); it attaches to the interpreter and calls the stored callable with
//! the GIL held. A `grantid.LeaseLost` raised by the callable is a confirmed
//! loss; an exception with `grant_error` (raised by the store decoders of
//! `protocol.rs`) is the answer it names; any other exception, and a
//! missing or mistyped grant field, is uncertain: logged on the `grantid`
//! logger and retried by the core.
//!
//! The callable runs on a helper thread and the renewal thread waits for it
//! at most `source_timeout`: a callable that blocks (a socket without a
//! timeout) makes the answer uncertain instead of stopping renewal, start-up
//! and `close()` with it. Python cannot interrupt the call, so while it has
//! not returned no new call is made (each retry waits for it again); when
//! it returns, its answer serves the retry of the same request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use grantid::{ErrorKind, Grant, GrantError, GrantRequest, GrantSource, LeaseLostEvent};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;

use crate::errors::is_kind;
use crate::grant::{PyGrant, PyGrantRequest, PyLeaseLostEvent, grant_from_answer};
use crate::protocol::named_answer;

/// Set when the interpreter is shutting down: no more calls into Python.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);

/// Stops calls from grantid's threads into Python (the `atexit` hook).
pub(crate) fn shut_down() {
    SHUTTING_DOWN.store(true, Ordering::SeqCst);
}

/// Runs `f` attached to the interpreter, unless it is shutting down.
fn with_python<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    if SHUTTING_DOWN.load(Ordering::SeqCst) {
        return None;
    }
    Python::try_attach(f)
}

/// Logs on the `grantid` logger; a failure to log is ignored (logging must
/// never take the renewal thread down).
pub(crate) fn log(py: Python<'_>, level: &str, message: &str, exc: Option<&PyErr>) {
    let result = (|| -> PyResult<()> {
        let logger = py
            .import("logging")?
            .call_method1("getLogger", ("grantid",))?;
        let kwargs = pyo3::types::PyDict::new(py);
        if let Some(e) = exc {
            kwargs.set_item("exc_info", e.value(py))?;
        }
        logger.call_method(level, (message,), Some(&kwargs))?;
        Ok(())
    })();
    if let Err(e) = result {
        e.print(py);
    }
}

/// The default bound on one call of a Python grant source, in seconds (the
/// Node binding's `sourceTimeoutMs` default).
pub(crate) const DEFAULT_SOURCE_TIMEOUT_S: f64 = 2.0;

type Answer = Result<Grant, GrantError>;

/// A call that did not return within the timeout: its request and where
/// its answer will arrive.
struct Pending {
    pid: u32,
    key: (u64, u64),
    answer: Receiver<Answer>,
}

/// A grant source made of a Python callable `(GrantRequest) -> Grant | dict`
/// and an optional `release(Grant)`, each call bounded by a timeout.
pub(crate) struct PySource {
    calls: Arc<PyCalls>,
    timeout: Duration,
    pending: Mutex<Option<Pending>>,
}

/// The callables themselves.
struct PyCalls {
    acquire: Py<PyAny>,
    release: Option<Py<PyAny>>,
}

impl PySource {
    /// `source` is a callable, or an object with an `acquire` method; a
    /// `release` method is called (best effort) when the generator closes.
    /// Each `acquire` call is awaited at most `timeout`.
    pub(crate) fn new(source: &Bound<'_, PyAny>, timeout: Duration) -> Option<PySource> {
        let acquire = match source.getattr("acquire") {
            Ok(m) if m.is_callable() => m,
            _ if source.is_callable() => source.clone(),
            _ => return None,
        };
        let release = source
            .getattr("release")
            .ok()
            .filter(|m| m.is_callable())
            .map(Bound::unbind);
        Some(PySource {
            calls: Arc::new(PyCalls {
                acquire: acquire.unbind(),
                release,
            }),
            timeout,
            pending: Mutex::new(None),
        })
    }

    /// Calls the source on a helper thread; waits at most the timeout.
    ///
    /// The pending call is kept under a lock taken only for an instant and
    /// only with `try_lock`: a `fork()` child inherits the lock in whatever
    /// state the parent's renewal thread left it, and a pending call of the
    /// parent (whose thread does not exist in the child) is ignored there.
    fn bounded_acquire(&self, request: &GrantRequest) -> Answer {
        let key = (request.incarnation, request.request_id);
        let pid = std::process::id();
        let earlier = self
            .pending
            .try_lock()
            .ok()
            .and_then(|mut p| p.take())
            .filter(|p| p.pid == pid);
        if let Some(p) = earlier {
            match p.answer.recv_timeout(self.timeout) {
                Ok(answer) if p.key == key => return answer,
                // An answer to an older request: the generator moved on.
                Ok(_) | Err(RecvTimeoutError::Disconnected) => {}
                Err(RecvTimeoutError::Timeout) => {
                    self.keep_pending(p);
                    return Err(GrantError::Unavailable(format!(
                        "the grant source has still not returned from an earlier call \
                         (source_timeout {:.3} s); no new call until it does",
                        self.timeout.as_secs_f64()
                    )));
                }
            }
        }
        let (tx, rx) = mpsc::sync_channel::<Answer>(1);
        let calls = Arc::clone(&self.calls);
        let owned = request.clone();
        let spawned = std::thread::Builder::new()
            .name("grantid-py-source".into())
            .spawn(move || {
                let answer = with_python(|py| calls.call(py, &owned)).unwrap_or_else(|| {
                    Err(GrantError::Unavailable(
                        "the Python interpreter is shutting down".to_owned(),
                    ))
                });
                let _ = tx.send(answer);
            });
        if let Err(e) = spawned {
            return Err(GrantError::Unavailable(format!(
                "cannot start a thread for the grant source: {e}"
            )));
        }
        match rx.recv_timeout(self.timeout) {
            Ok(answer) => answer,
            Err(RecvTimeoutError::Timeout) => {
                self.keep_pending(Pending {
                    pid,
                    key,
                    answer: rx,
                });
                Err(GrantError::Unavailable(format!(
                    "the grant source did not return within source_timeout ({:.3} s)",
                    self.timeout.as_secs_f64()
                )))
            }
            Err(RecvTimeoutError::Disconnected) => Err(GrantError::Unavailable(
                "the grant source's thread ended without an answer".into(),
            )),
        }
    }

    fn keep_pending(&self, p: Pending) {
        if let Ok(mut slot) = self.pending.try_lock() {
            *slot = Some(p);
        }
    }
}

impl PyCalls {
    /// Calls the source inside `grantid._forkguard.GUARD`, so that `fork()`
    /// never splits a call in two.
    fn call(&self, py: Python<'_>, request: &GrantRequest) -> Result<Grant, GrantError> {
        let guard = fork_guard(py);
        if let Some(g) = &guard
            && let Err(e) = g.call_method0(py, "enter")
        {
            log(py, "warning", "cannot enter the fork guard", Some(&e));
        }
        let result = self.call_unguarded(py, request);
        if let Some(g) = &guard {
            let _ = g.call_method0(py, "exit");
        }
        result
    }

    fn call_unguarded(&self, py: Python<'_>, request: &GrantRequest) -> Result<Grant, GrantError> {
        let request = Py::new(py, PyGrantRequest(request.clone()))
            .map_err(|e| GrantError::Unavailable(format!("cannot make the request: {e}")))?;
        let answer = match self.acquire.call1(py, (request,)) {
            Ok(answer) => answer,
            // An answer decoded by grantid.authorities keeps its kind.
            Err(err) => return Err(named_answer(py, &err).unwrap_or_else(|| failure(py, &err))),
        };
        // The core logs an invalid grant (`event=grant_invalid`, error).
        grant_from_answer(answer.bind(py))
            .map_err(|why| GrantError::Invalid(format!("from the grant source: {why}")))
    }
}

/// What an exception raised by the source reports: `LeaseLost` a confirmed
/// loss, anything else an uncertain answer.
fn failure(py: Python<'_>, err: &PyErr) -> GrantError {
    if is_kind(py, err, ErrorKind::LeaseLost) {
        return GrantError::Lost(err.value(py).to_string());
    }
    // The core logs the failure once (`event=grant_uncertain`, warning,
    // with this reason); the traceback goes at debug.
    let why = format!("the grant source raised {}", describe(py, err));
    log(
        py,
        "debug",
        &format!("event={} {why}", grantid::events::SOURCE_TRACEBACK.name),
        Some(err),
    );
    GrantError::Unavailable(why)
}

/// `grantid._forkguard.GUARD` (None if the package is not importable).
fn fork_guard(py: Python<'_>) -> Option<Py<PyAny>> {
    static GUARD: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    GUARD
        .get_or_try_init(py, || {
            py.import("grantid._forkguard")?
                .getattr("GUARD")
                .map(Bound::unbind)
        })
        .ok()
        .map(|g| g.clone_ref(py))
}

fn describe(py: Python<'_>, err: &PyErr) -> String {
    let name = err
        .get_type(py)
        .name()
        .map_or_else(|_| "an exception".to_owned(), |n| n.to_string());
    format!("{name}: {}", err.value(py))
}

impl GrantSource for PySource {
    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        if SHUTTING_DOWN.load(Ordering::SeqCst) {
            return Err(GrantError::Unavailable(
                "the Python interpreter is shutting down".to_owned(),
            ));
        }
        self.bounded_acquire(request)
    }

    fn release(&self, last: &Grant) {
        let Some(release) = &self.calls.release else {
            return;
        };
        with_python(|py| {
            let guard = fork_guard(py);
            if let Some(g) = &guard {
                let _ = g.call_method0(py, "enter");
            }
            let grant = PyGrant(last.clone());
            let result = Py::new(py, grant)
                .and_then(|g| PyTuple::new(py, [g]))
                .and_then(|args| release.call1(py, args));
            if let Some(g) = &guard {
                let _ = g.call_method0(py, "exit");
            }
            if let Err(err) = result {
                let why = format!("the grant source's release raised {}", describe(py, &err));
                log(py, "warning", &why, Some(&err));
            }
        });
    }
}

/// Wraps a Python `on_lease_lost(event)` callable for the core.
pub(crate) fn lost_callback(callback: Py<PyAny>) -> impl Fn(&LeaseLostEvent) + Send + Sync {
    move |event: &LeaseLostEvent| {
        with_python(|py| {
            let result =
                Py::new(py, PyLeaseLostEvent::from(event)).and_then(|e| callback.call1(py, (e,)));
            if let Err(err) = result {
                let why = format!("on_lease_lost raised {}", describe(py, &err));
                log(py, "error", &why, Some(&err));
            }
        });
    }
}
