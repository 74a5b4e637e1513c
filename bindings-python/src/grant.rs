//! `grantid.Grant`, `grantid.GrantRequest`, `grantid.LeaseLostEvent`, and
//! reading a grant source's answer (a `Grant` or a mapping).

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyString};

use crate::errors::invalid;
use crate::layout::PyLayout;

/// An interval of ticks `[start, end)` reserved for one worker of one
/// namespace, for one generator incarnation.
#[pyclass(frozen, eq, hash, module = "grantid", name = "Grant")]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PyGrant(pub grantid::Grant);

#[pymethods]
impl PyGrant {
    #[new]
    #[pyo3(signature = (*, namespace, worker, incarnation, grant_id, start, end))]
    fn new(
        namespace: String,
        worker: &Bound<'_, PyAny>,
        incarnation: &Bound<'_, PyAny>,
        grant_id: &Bound<'_, PyAny>,
        start: &Bound<'_, PyAny>,
        end: &Bound<'_, PyAny>,
    ) -> PyResult<PyGrant> {
        let field = |name: &str, v: &Bound<'_, PyAny>| int_field(name, v).map_err(invalid);
        Ok(PyGrant(grantid::Grant {
            namespace,
            worker: u32::try_from(field("worker", worker)?)
                .map_err(|_| invalid("grant field 'worker' does not fit in 32 bits"))?,
            incarnation: field("incarnation", incarnation)?,
            grant_id: field("grant_id", grant_id)?,
            start: field("start", start)?,
            end: field("end", end)?,
        }))
    }

    #[getter]
    fn namespace(&self) -> &str {
        &self.0.namespace
    }
    #[getter]
    fn worker(&self) -> u32 {
        self.0.worker
    }
    #[getter]
    fn incarnation(&self) -> u64 {
        self.0.incarnation
    }
    #[getter]
    fn grant_id(&self) -> u64 {
        self.0.grant_id
    }
    #[getter]
    fn start(&self) -> u64 {
        self.0.start
    }
    #[getter]
    fn end(&self) -> u64 {
        self.0.end
    }

    /// The grant as a dict with the same keys a grant source may return.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let g = &self.0;
        let d = PyDict::new(py);
        d.set_item("namespace", &g.namespace)?;
        d.set_item("worker", g.worker)?;
        d.set_item("incarnation", g.incarnation)?;
        d.set_item("grant_id", g.grant_id)?;
        d.set_item("start", g.start)?;
        d.set_item("end", g.end)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let g = &self.0;
        format!(
            "Grant(namespace={:?}, worker={}, incarnation={}, grant_id={}, start={}, end={})",
            g.namespace, g.worker, g.incarnation, g.grant_id, g.start, g.end
        )
    }
}

/// What a generator asks its grant source for. `worker` is `None` when any
/// free worker will do, else the worker to renew.
#[pyclass(frozen, eq, hash, module = "grantid", name = "GrantRequest")]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PyGrantRequest(pub grantid::GrantRequest);

#[pymethods]
impl PyGrantRequest {
    #[getter]
    fn namespace(&self) -> &str {
        &self.0.namespace
    }
    #[getter]
    fn incarnation(&self) -> u64 {
        self.0.incarnation
    }
    #[getter]
    fn request_id(&self) -> u64 {
        self.0.request_id
    }
    #[getter]
    fn worker(&self) -> Option<u32> {
        self.0.worker
    }
    #[getter]
    fn not_before(&self) -> u64 {
        self.0.not_before
    }
    #[getter]
    fn now(&self) -> u64 {
        self.0.now
    }
    #[getter]
    fn duration(&self) -> u64 {
        self.0.duration
    }
    #[getter]
    fn layout(&self) -> PyLayout {
        PyLayout(self.0.layout)
    }

    /// A grant answering this request (namespace and incarnation filled in).
    #[pyo3(signature = (*, worker, start, end, grant_id=0))]
    fn grant(&self, worker: u32, start: u64, end: u64, grant_id: u64) -> PyGrant {
        PyGrant(grantid::Grant {
            namespace: self.0.namespace.clone(),
            worker,
            incarnation: self.0.incarnation,
            grant_id,
            start,
            end,
        })
    }

    /// The request as a dict (the layout as a `Layout`).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = &self.0;
        let d = PyDict::new(py);
        d.set_item("namespace", &r.namespace)?;
        d.set_item("incarnation", r.incarnation)?;
        d.set_item("request_id", r.request_id)?;
        d.set_item("worker", r.worker)?;
        d.set_item("not_before", r.not_before)?;
        d.set_item("now", r.now)?;
        d.set_item("duration", r.duration)?;
        d.set_item("layout", PyLayout(r.layout))?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let r = &self.0;
        format!(
            "GrantRequest(namespace={:?}, incarnation={}, request_id={}, worker={}, not_before={}, now={}, duration={})",
            r.namespace,
            r.incarnation,
            r.request_id,
            r.worker
                .map_or_else(|| "None".to_owned(), |w| w.to_string()),
            r.not_before,
            r.now,
            r.duration
        )
    }
}

/// What `on_lease_lost` is called with.
#[derive(Debug)]
#[pyclass(frozen, module = "grantid", name = "LeaseLostEvent")]
pub struct PyLeaseLostEvent {
    #[pyo3(get)]
    worker: u32,
    #[pyo3(get)]
    reason: String,
}

impl From<&grantid::LeaseLostEvent> for PyLeaseLostEvent {
    fn from(e: &grantid::LeaseLostEvent) -> Self {
        PyLeaseLostEvent {
            worker: e.worker,
            reason: e.reason.clone(),
        }
    }
}

#[pymethods]
impl PyLeaseLostEvent {
    fn __repr__(&self) -> String {
        format!(
            "LeaseLostEvent(worker={}, reason={:?})",
            self.worker, self.reason
        )
    }
}

/// A non-negative `int` field below 2^64 (a `bool` is refused); the error
/// names the field.
fn int_field(name: &str, value: &Bound<'_, PyAny>) -> Result<u64, String> {
    if !value.is_instance_of::<PyInt>() || value.is_instance_of::<PyBool>() {
        let type_name = value
            .get_type()
            .name()
            .map_or_else(|_| "?".to_owned(), |n| n.to_string());
        return Err(format!(
            "grant field '{name}' must be an int, got {type_name}"
        ));
    }
    value
        .extract::<u64>()
        .map_err(|_| format!("grant field '{name}' is {value}, outside 0 ..= 2^64 - 1"))
}

/// Reads a grant source's answer: a `grantid.Grant`, or a mapping with the
/// keys namespace, worker, incarnation, grant_id, start and end. The error
/// names the first missing or mistyped field.
pub(crate) fn grant_from_answer(answer: &Bound<'_, PyAny>) -> Result<grantid::Grant, String> {
    if let Ok(grant) = answer.cast::<PyGrant>() {
        return Ok(grant.get().0.clone());
    }
    if answer.is_none() || answer.is_instance_of::<PyString>() || answer.getattr("keys").is_err() {
        let type_name = answer
            .get_type()
            .name()
            .map_or_else(|_| "?".to_owned(), |n| n.to_string());
        return Err(format!(
            "expected a grantid.Grant or a mapping with namespace, worker, incarnation, grant_id, start and end; got {type_name}"
        ));
    }
    let get = |name: &str| {
        answer
            .get_item(name)
            .map_err(|_| format!("grant field '{name}' is missing"))
    };
    let namespace = get("namespace")?;
    let namespace = namespace
        .cast::<PyString>()
        .map_err(|_| "grant field 'namespace' must be a str".to_owned())?
        .to_cow()
        .map_err(|e| format!("grant field 'namespace': {e}"))?
        .into_owned();
    let worker = int_field("worker", &get("worker")?)?;
    Ok(grantid::Grant {
        namespace,
        worker: u32::try_from(worker)
            .map_err(|_| format!("grant field 'worker' is {worker}, more than 32 bits"))?,
        incarnation: int_field("incarnation", &get("incarnation")?)?,
        grant_id: int_field("grant_id", &get("grant_id")?)?,
        start: int_field("start", &get("start")?)?,
        end: int_field("end", &get("end")?)?,
    })
}
