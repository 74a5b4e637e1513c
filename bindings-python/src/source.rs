//! A Python callable driving the core's `GrantSource` trait.
//!
//! The core calls `acquire` on its renewal thread (never on the `next_id`
//! path); it attaches to the interpreter and calls the stored callable with
//! the GIL held. A `grantid.LeaseLost` raised by the callable is a confirmed
//! loss; any other exception, and a missing or mistyped grant field, is
//! uncertain: logged on the `grantid` logger and retried by the core.

use std::sync::atomic::{AtomicBool, Ordering};

use grantid::{ErrorKind, Grant, GrantError, GrantRequest, GrantSource, LeaseLostEvent};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;

use crate::errors::is_kind;
use crate::grant::{PyGrant, PyGrantRequest, PyLeaseLostEvent, grant_from_answer};

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

/// A grant source made of a Python callable `(GrantRequest) -> Grant | dict`
/// and an optional `release(Grant)`.
pub(crate) struct PySource {
    acquire: Py<PyAny>,
    release: Option<Py<PyAny>>,
}

impl PySource {
    /// `source` is a callable, or an object with an `acquire` method; a
    /// `release` method is called (best effort) when the generator closes.
    pub(crate) fn new(source: &Bound<'_, PyAny>) -> Option<PySource> {
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
            acquire: acquire.unbind(),
            release,
        })
    }

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
            Err(err) if is_kind(py, &err, ErrorKind::LeaseLost) => {
                let reason = err.value(py).to_string();
                return Err(GrantError::Lost(reason));
            }
            Err(err) => {
                let why = format!("the grant source raised {}", describe(py, &err));
                log(py, "error", &why, Some(&err));
                return Err(GrantError::Unavailable(why));
            }
        };
        grant_from_answer(answer.bind(py)).map_err(|why| {
            let why = format!("from the grant source: {why}");
            log(py, "error", &format!("invalid grant {why}"), None);
            GrantError::Invalid(why)
        })
    }
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
        with_python(|py| self.call(py, request)).unwrap_or_else(|| {
            Err(GrantError::Unavailable(
                "the Python interpreter is shutting down".to_owned(),
            ))
        })
    }

    fn release(&self, last: &Grant) {
        let Some(release) = &self.release else {
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
