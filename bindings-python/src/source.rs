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
//! Each call runs on a helper thread, bounded by the one machine of
//! `grantid_authority::hosted`: the renewal thread waits at most
//! `source_timeout`, so a callable that blocks (a socket without a timeout)
//! makes the answer uncertain instead of stopping renewal, start-up and
//! `close()` with it. Python cannot interrupt the call, so while it has not
//! returned no new call is made (one call in flight: a callable need not be
//! reentrant, and each running call holds a thread and the fork guard);
//! when it returns, its answer serves the retry of the same request. A
//! `release` is waited for at most `source_timeout` too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use grantid::{ErrorKind, Grant, GrantError, GrantRequest, LeaseLostEvent};
use grantid_authority::hosted::{Answer, CallBounds, Host, HostedSource, Reply};
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

/// A grant source made of a Python callable `(GrantRequest) -> Grant | dict`
/// and an optional `release(Grant)`, each call bounded by a timeout.
pub(crate) type PySource = HostedSource<PyHost>;

/// The callables, called on helper threads.
pub(crate) struct PyHost {
    calls: Arc<PyCalls>,
}

/// The callables themselves.
struct PyCalls {
    acquire: Py<PyAny>,
    release: Option<Py<PyAny>>,
}

/// `source` is a callable, or an object with an `acquire` method; a
/// `release` method is called (best effort) when the generator closes.
/// Each call is awaited at most `timeout`.
pub(crate) fn new_source(source: &Bound<'_, PyAny>, timeout: Duration) -> Option<PySource> {
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
    let host = PyHost {
        calls: Arc::new(PyCalls {
            acquire: acquire.unbind(),
            release,
        }),
    };
    Some(HostedSource::new(host, CallBounds::new(timeout)))
}

/// Runs `f` on a new thread named for grant-source calls.
fn spawn(f: impl FnOnce() + Send + 'static) -> Result<(), GrantError> {
    std::thread::Builder::new()
        .name("grantid-py-source".into())
        .spawn(f)
        .map(drop)
        .map_err(|e| {
            GrantError::Unavailable(format!("cannot start a thread for the grant source: {e}"))
        })
}

impl Host for PyHost {
    const TIMEOUT_OPTION: &'static str = "source_timeout";

    fn start_acquire(
        &self,
        request: &GrantRequest,
        reply: Reply<Answer>,
    ) -> Result<(), GrantError> {
        let calls = Arc::clone(&self.calls);
        let owned = request.clone();
        spawn(move || {
            let answer = with_python(|py| calls.call(py, &owned)).unwrap_or_else(|| {
                Err(GrantError::Unavailable(
                    "the Python interpreter is shutting down".to_owned(),
                ))
            });
            reply.send(answer);
        })
    }

    fn start_release(&self, last: &Grant, done: Reply<()>) -> bool {
        if self.calls.release.is_none() {
            return false;
        }
        let calls = Arc::clone(&self.calls);
        let last = last.clone();
        spawn(move || {
            with_python(|py| calls.release(py, &last));
            done.send(());
        })
        .is_ok()
    }

    fn closed(&self) -> Option<String> {
        SHUTTING_DOWN
            .load(Ordering::SeqCst)
            .then(|| "the Python interpreter is shutting down".to_owned())
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

    /// Calls `release(last)`, if there is one, inside the fork guard; an
    /// exception is logged.
    fn release(&self, py: Python<'_>, last: &Grant) {
        let Some(release) = &self.release else {
            return;
        };
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
