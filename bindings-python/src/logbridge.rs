//! The core's `log` events (target `grantid`, messages `event=NAME ...`)
//! forwarded to Python's `logging.getLogger("grantid")` by `pyo3-log`.
//!
//! A process has one `log` logger. This module installs the bridge when the
//! extension is imported, unless another logger is already installed (an
//! other extension module built on `pyo3-log`, or a host program embedding
//! Python): then the core's events go to that logger and
//! `grantid.log_bridge_installed()` is False.
//!
//! Cost: the ID path logs nothing; events come from the renewal thread, a
//! few per grant. `pyo3-log` caches the Python logger object of each target
//! (`Caching::Loggers`) but not its level, so `logging` reconfigured at any
//! time (levels, `caplog`, `dictConfig`) takes effect on the next event at
//! the price of one `isEnabledFor` call per event. Caching levels too would
//! freeze the level seen at the first event, a trap for no gain on a path
//! that runs once per renewal.

use std::sync::OnceLock;

use log::LevelFilter;
use pyo3::prelude::*;
use pyo3_log::{Caching, Logger, ResetHandle};

static HANDLE: OnceLock<ResetHandle> = OnceLock::new();

/// Installs the bridge (once per process). Other crates' targets are
/// forwarded from warning up; `grantid` from debug.
pub(crate) fn install(py: Python<'_>) -> PyResult<()> {
    if HANDLE.get().is_some() {
        return Ok(());
    }
    let logger = Logger::new(py, Caching::Loggers)?
        .filter(LevelFilter::Warn)
        .filter_target("grantid".to_owned(), LevelFilter::Debug);
    if let Ok(handle) = logger.install() {
        let _ = HANDLE.set(handle);
    }
    Ok(())
}

/// True when this module's bridge is the process's `log` logger.
#[pyfunction]
pub(crate) fn log_bridge_installed() -> bool {
    HANDLE.get().is_some()
}
