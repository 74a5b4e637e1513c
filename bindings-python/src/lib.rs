//! The `grantid._grantid` extension module: PyO3 classes over the core
//! crate. The Python package `grantid` (python/grantid) re-exports them.
//!
//! This crate converts types and errors only; every ID rule lives in the
//! core crate `grantid`.

use pyo3::prelude::*;

mod clock;
mod errors;
mod generator;
mod grant;
mod layout;
mod logbridge;
mod protocol;
mod public;
mod source;
mod url;

/// Closes every open generator and stops calls into Python from grantid's
/// threads: registered with `atexit` by the package.
#[pyfunction]
fn _shutdown(py: Python<'_>) {
    py.detach(|| {
        generator::close_all();
        source::shut_down();
    });
}

#[pymodule]
fn _grantid(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<layout::PyLayout>()?;
    m.add_class::<layout::PyDecoded>()?;
    m.add_class::<grant::PyGrant>()?;
    m.add_class::<grant::PyGrantRequest>()?;
    m.add_class::<grant::PyLeaseLostEvent>()?;
    m.add_class::<clock::PyManualClock>()?;
    m.add_class::<clock::PyMemoryAuthority>()?;
    m.add_class::<generator::PyGenerator>()?;
    m.add_class::<public::PyPublicIds>()?;
    m.add_function(wrap_pyfunction!(layout::decode, m)?)?;
    m.add_function(wrap_pyfunction!(layout::parse_id, m)?)?;
    m.add_function(wrap_pyfunction!(_shutdown, m)?)?;
    url::register(m)?;
    protocol::register(m)?;
    logbridge::install(m.py())?;
    m.add_function(wrap_pyfunction!(logbridge::log_bridge_installed, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEFAULT_EPOCH_MS", grantid::DEFAULT_EPOCH_MS)?;
    m.add("DEFAULT_MAX_DRIFT_MS", grantid::DEFAULT_MAX_DRIFT_MS)?;
    m.add("DEFAULT_MAX_BATCH", grantid::DEFAULT_MAX_BATCH)?;
    m.add(
        "ERROR_CODES",
        grantid::ErrorKind::ALL
            .iter()
            .map(|k| (k.name(), k.code()))
            .collect::<Vec<_>>(),
    )?;
    Ok(())
}
