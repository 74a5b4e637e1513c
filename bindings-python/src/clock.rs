//! `grantid.ManualClock` and `grantid.MemoryAuthority`: the core's test clock
//! and in-process authority, for tests and single-process programs.

use std::sync::Arc;

use pyo3::prelude::*;

use crate::errors::invalid;

/// A clock that moves only when told (Unix ms). Pass it as
/// `Generator(..., clock=...)`; it is read without the GIL.
#[derive(Debug)]
#[pyclass(frozen, module = "grantid", name = "ManualClock")]
pub struct PyManualClock(pub Arc<grantid::ManualClock>);

fn ms(value: i64) -> PyResult<u64> {
    u64::try_from(value).map_err(|_| invalid(format!("{value} ms is before 1970")))
}

#[pymethods]
impl PyManualClock {
    #[new]
    fn new(unix_ms: i64) -> PyResult<Self> {
        Ok(PyManualClock(grantid::ManualClock::new(ms(unix_ms)?)))
    }
    /// Sets the time (it may go back).
    fn set(&self, unix_ms: i64) -> PyResult<()> {
        self.0.set(ms(unix_ms)?);
        Ok(())
    }
    /// Moves the time forward by `ms`.
    fn advance(&self, delta_ms: i64) -> PyResult<()> {
        self.0.advance(ms(delta_ms)?);
        Ok(())
    }
    /// The time in Unix ms.
    fn now_ms(&self) -> u64 {
        grantid::Clock::now_ms(&*self.0)
    }
    fn __repr__(&self) -> String {
        format!("ManualClock({})", self.now_ms())
    }
}

/// The core's in-memory authority: the allocation rule kept in this
/// process's memory. Share one between generators of a process; it forgets
/// everything when the process ends (use a file or database authority to
/// survive restarts).
#[derive(Debug)]
#[pyclass(frozen, module = "grantid", name = "MemoryAuthority")]
pub struct PyMemoryAuthority(pub grantid::MemoryAuthority);

#[pymethods]
impl PyMemoryAuthority {
    #[new]
    fn new() -> Self {
        PyMemoryAuthority(grantid::MemoryAuthority::new())
    }
    /// Every grant made so far, in order.
    fn grants(&self) -> Vec<crate::grant::PyGrant> {
        self.0
            .grants()
            .into_iter()
            .map(crate::grant::PyGrant)
            .collect()
    }
    /// Gives `worker` of `namespace` to incarnation `thief` until tick
    /// `until`, as another process would take it after the lease expired:
    /// the holder's next renewal is refused (lost).
    fn steal(&self, namespace: &str, worker: u32, thief: u64, until: u64) {
        self.0.steal(namespace, worker, thief, until);
    }
    fn __repr__(&self) -> &'static str {
        "MemoryAuthority()"
    }
}
