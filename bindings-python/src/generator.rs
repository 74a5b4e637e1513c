//! `grantid.Generator`: the core generator behind a frozen pyclass. Every
//! call that can wait runs with the GIL released.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use grantid::{ForkPolicy, GrantSource};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyString};

use crate::clock::{PyManualClock, PyMemoryAuthority};
use crate::errors::{invalid, to_pyerr};
use crate::layout::{PyDecoded, PyLayout, decode_with};
use crate::source::{lost_callback, new_source};

/// Every generator made in this process, so the `atexit` hook can close the
/// ones still open before the interpreter goes away.
static LIVE: Mutex<Vec<Weak<grantid::Generator>>> = Mutex::new(Vec::new());

fn remember(generator: &Arc<grantid::Generator>) {
    let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    live.retain(|w| w.strong_count() > 0);
    live.push(Arc::downgrade(generator));
}

/// Closes every open generator (called at interpreter exit).
pub(crate) fn close_all() {
    let live: Vec<_> = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|p| p.into_inner()));
    for generator in live.iter().filter_map(Weak::upgrade) {
        generator.close();
    }
}

fn seconds(name: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        invalid(format!(
            "{name} is {value}, it must be a finite number of seconds >= 0"
        ))
    })
}

/// The grant source from `grant_source`: an authority URL, a
/// `MemoryAuthority`, a callable, or an object with `acquire`.
fn make_source(
    py: Python<'_>,
    grant_source: &Bound<'_, PyAny>,
    source_timeout: Duration,
) -> PyResult<Box<dyn GrantSource>> {
    if let Ok(url) = grant_source.cast::<PyString>() {
        let url = url.to_cow()?.into_owned();
        return py.detach(|| crate::url::from_url(&url)).map_err(to_pyerr);
    }
    if let Ok(memory) = grant_source.cast::<PyMemoryAuthority>() {
        return Ok(Box::new(memory.get().0.clone()));
    }
    let is_async: bool = py
        .import("grantid._aio")
        .and_then(|m| m.getattr("is_async")?.call1((grant_source,))?.extract())
        .unwrap_or(false);
    if is_async {
        return Err(invalid(
            "the grant source is a coroutine function (async def): start the generator with \
             `await grantid.Generator.start_async(...)` inside the event loop that should run it",
        ));
    }
    match new_source(grant_source, source_timeout) {
        Some(source) => Ok(Box::new(source)),
        None => Err(invalid(format!(
            "grant_source must be an authority URL (str), a callable (request) -> grant, or an object with acquire(request); got {}",
            grant_source.get_type().name()?
        ))),
    }
}

/// `array.array`, looked up once.
fn array_type(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static ARRAY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    ARRAY
        .get_or_try_init(py, || Ok(py.import("array")?.getattr("array")?.unbind()))
        .map(|a| a.bind(py))
}

/// Issues IDs inside committed grants. Thread-safe: share one per process
/// (or per namespace) between threads.
#[derive(Debug)]
#[pyclass(frozen, weakref, module = "grantid", name = "Generator")]
pub struct PyGenerator {
    inner: Arc<grantid::Generator>,
}

#[pymethods]
impl PyGenerator {
    #[new]
    #[pyo3(signature = (
        grant_source,
        *,
        namespace,
        layout = None,
        max_drift_ms = grantid::DEFAULT_MAX_DRIFT_MS,
        startup_timeout = grantid::DEFAULT_STARTUP_TIMEOUT.as_secs_f64(),
        on_lease_lost = None,
        max_wait = grantid::DEFAULT_MAX_WAIT.as_secs_f64(),
        max_batch = grantid::DEFAULT_MAX_BATCH,
        grant_duration_ms = grantid::DEFAULT_GRANT_DURATION_MS,
        horizon_ms = grantid::DEFAULT_HORIZON_MS,
        backoff_min = grantid::DEFAULT_BACKOFF_MIN.as_secs_f64(),
        backoff_max = grantid::DEFAULT_BACKOFF_MAX.as_secs_f64(),
        shards = None,
        fork_policy = "reactivate",
        clock = None,
        source_timeout = crate::source::DEFAULT_SOURCE_TIMEOUT_S,
        datacenter = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        grant_source: &Bound<'_, PyAny>,
        namespace: String,
        layout: Option<&Bound<'_, PyLayout>>,
        max_drift_ms: u64,
        startup_timeout: f64,
        on_lease_lost: Option<Bound<'_, PyAny>>,
        max_wait: f64,
        max_batch: usize,
        grant_duration_ms: u64,
        horizon_ms: u64,
        backoff_min: f64,
        backoff_max: f64,
        shards: Option<usize>,
        fork_policy: &str,
        clock: Option<&Bound<'_, PyManualClock>>,
        source_timeout: f64,
        datacenter: Option<u32>,
    ) -> PyResult<Self> {
        let source_timeout = seconds("source_timeout", source_timeout)?;
        if source_timeout.is_zero() {
            return Err(invalid("source_timeout must be more than 0 seconds"));
        }
        let layout = layout.map_or_else(grantid::Layout::default, |l| l.get().0);
        let fork_policy = match fork_policy {
            "reactivate" => ForkPolicy::Reactivate,
            "close" => ForkPolicy::Close,
            other => {
                return Err(invalid(format!(
                    "fork_policy is {other:?}, expected \"reactivate\" or \"close\""
                )));
            }
        };
        let mut builder = grantid::Generator::builder(
            layout,
            namespace,
            make_source(py, grant_source, source_timeout)?,
        )
        .max_drift_ms(max_drift_ms)
        .startup_timeout(seconds("startup_timeout", startup_timeout)?)
        .max_wait(seconds("max_wait", max_wait)?)
        .max_batch(max_batch)
        .grant_duration_ms(grant_duration_ms)
        .horizon_ms(horizon_ms)
        .backoff(
            seconds("backoff_min", backoff_min)?,
            seconds("backoff_max", backoff_max)?,
        )
        .fork_policy(fork_policy);
        if let Some(callback) = on_lease_lost {
            if !callback.is_callable() {
                return Err(invalid("on_lease_lost must be callable"));
            }
            builder = builder.on_lease_lost(lost_callback(callback.unbind()));
        }
        if let Some(shards) = shards {
            builder = builder.shards(shards);
        }
        if let Some(clock) = clock {
            builder = builder.clock(clock.get().0.clone());
        }
        if let Some(datacenter) = datacenter {
            builder = builder.datacenter(datacenter);
        }
        // The grant source may be Python code run on the renewal thread:
        // wait for the first grant without the GIL.
        let inner = Arc::new(py.detach(|| builder.start()).map_err(to_pyerr)?);
        remember(&inner);
        Ok(PyGenerator { inner })
    }

    /// `await Generator.start_async(grant_source, namespace=..., ...)`: the
    /// constructor run in the loop's default executor, so the loop keeps
    /// running while the first grant is awaited. A coroutine grant source
    /// (`async def`) runs on this loop (see `grantid._aio`).
    #[classmethod]
    #[pyo3(signature = (grant_source, **options))]
    fn start_async<'py>(
        cls: &Bound<'py, pyo3::types::PyType>,
        grant_source: &Bound<'py, PyAny>,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = cls.py();
        py.import("grantid._aio")?
            .getattr("start_async")?
            .call((cls, grant_source), options)
    }

    /// `await gen.aclose()`: `close()` in the loop's default executor (a
    /// coroutine grant source may need the loop to finish its call).
    fn aclose<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.py()
            .import("grantid._aio")?
            .getattr("aclose")?
            .call1((slf,))
    }

    /// `async with await Generator.start_async(...) as gen:`
    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let done = py
            .import("asyncio")?
            .call_method0("get_running_loop")?
            .call_method0("create_future")?;
        done.call_method1("set_result", (slf,))?;
        Ok(done)
    }

    fn __aexit__<'py>(
        slf: &Bound<'py, Self>,
        _exc_type: &Bound<'py, PyAny>,
        _exc: &Bound<'py, PyAny>,
        _tb: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        Self::aclose(slf)
    }

    /// The next ID. The common case runs with the GIL held (no wait is
    /// possible on it); a call that has to wait releases the GIL.
    fn next_id(&self, py: Python<'_>) -> PyResult<u64> {
        if let Some(id) = self.inner.try_next_id() {
            return Ok(id);
        }
        py.detach(|| self.inner.next_id()).map_err(to_pyerr)
    }

    /// The next ID as a decimal string (for JSON and JavaScript).
    fn next_id_str(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.next_id(py)?.to_string())
    }

    /// `n` IDs in increasing order, all or none (`n <= max_batch`).
    fn next_ids(&self, py: Python<'_>, n: i64) -> PyResult<Vec<u64>> {
        let n = usize::try_from(n).map_err(|_| invalid(format!("batch of {n} is negative")))?;
        py.detach(|| self.inner.next_ids(n)).map_err(to_pyerr)
    }

    /// `n` IDs in increasing order as an `array.array('Q')`, all or none
    /// (`n <= max_batch`): filled in Rust with the GIL released, no Python
    /// int per ID.
    fn next_ids_array<'py>(&self, py: Python<'py>, n: i64) -> PyResult<Bound<'py, PyAny>> {
        let n = usize::try_from(n).map_err(|_| invalid(format!("batch of {n} is negative")))?;
        let mut ids = vec![0u64; n];
        py.detach(|| self.inner.fill(&mut ids)).map_err(to_pyerr)?;
        let bytes = PyBytes::new_with(py, n * 8, |buf| {
            for (chunk, id) in buf.chunks_exact_mut(8).zip(&ids) {
                chunk.copy_from_slice(&id.to_ne_bytes());
            }
            Ok(())
        })?;
        array_type(py)?.call1(("Q", bytes))
    }

    /// The fields of an ID of this generator's layout.
    fn decode(&self, id: &Bound<'_, PyAny>) -> PyResult<PyDecoded> {
        decode_with(self.inner.layout(), id)
    }

    #[getter]
    fn layout(&self) -> PyLayout {
        PyLayout(*self.inner.layout())
    }

    #[getter]
    fn namespace(&self) -> &str {
        self.inner.namespace()
    }

    /// The datacenter this generator issues in (its `datacenter` option or
    /// its authority URL's `datacenter=N`), or `None`.
    #[getter]
    fn datacenter(&self) -> Option<u32> {
        self.inner.datacenter()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Counters and lease state as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("ids_issued", s.ids_issued)?;
        d.set_item("waits", s.waits)?;
        d.set_item("clock_rollbacks", s.clock_rollbacks)?;
        d.set_item("clock_steps_back", s.clock_steps_back)?;
        d.set_item("grants_acquired", s.grants_acquired)?;
        d.set_item("renewals", s.renewals)?;
        d.set_item("uncertain_retries", s.uncertain_retries)?;
        d.set_item("invalid_grants", s.invalid_grants)?;
        d.set_item("lease_losses", s.lease_losses)?;
        d.set_item("worker", s.worker)?;
        d.set_item("grant_end", s.grant_end)?;
        d.set_item("remaining_ticks", s.remaining_ticks)?;
        d.set_item("incarnation", s.incarnation)?;
        d.set_item("fork_reactivations", s.fork_reactivations)?;
        Ok(d)
    }

    /// Stops issuing (`Closed` from then on), stops the generator's threads
    /// and releases the worker. Idempotent.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.close());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        let s = self.inner.stats();
        format!(
            "Generator(namespace={:?}, worker={}, closed={})",
            self.inner.namespace(),
            s.worker
                .map_or_else(|| "None".to_owned(), |w| w.to_string()),
            if self.inner.is_closed() {
                "True"
            } else {
                "False"
            }
        )
    }
}

impl Drop for PyGenerator {
    fn drop(&mut self) {
        // Closing joins the renewal thread, which may be waiting for the GIL
        // to call a Python grant source: close without it.
        let inner = &self.inner;
        if !inner.is_closed() {
            let _ = Python::try_attach(|py| py.detach(|| inner.close()));
            inner.close();
        }
    }
}
