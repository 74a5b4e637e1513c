//! `grantid.Layout`, `grantid.Decoded`, and reading an ID given as an `int`
//! or a `str`.

use grantid::Decoded as CoreDecoded;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyString};

use crate::errors::{invalid, to_pyerr};

/// `Layout(...)`'s positional arguments, for pickling.
type LayoutArgs = (u8, u8, u8, u64, u64, u8);

/// The bit widths, epoch and tick of an ID format, and optionally how many
/// top bits of the worker field are a datacenter. Frozen and hashable.
#[pyclass(frozen, eq, hash, module = "grantid", name = "Layout")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyLayout(pub grantid::Layout);

fn width(name: &str, value: i64) -> PyResult<u8> {
    u8::try_from(value).map_err(|_| invalid(format!("{name} is {value}, not a bit width")))
}

fn non_negative(name: &str, value: i64) -> PyResult<u64> {
    u64::try_from(value).map_err(|_| invalid(format!("{name} is {value}, it must be >= 0")))
}

#[pymethods]
impl PyLayout {
    #[new]
    #[pyo3(signature = (timestamp_bits=41, worker_bits=10, sequence_bits=12, epoch_ms=grantid::DEFAULT_EPOCH_MS as i64, tick_ms=1, datacenter_bits=0))]
    fn new(
        timestamp_bits: i64,
        worker_bits: i64,
        sequence_bits: i64,
        epoch_ms: i64,
        tick_ms: i64,
        datacenter_bits: i64,
    ) -> PyResult<PyLayout> {
        let datacenter_bits = width("datacenter_bits", datacenter_bits)?;
        grantid::Layout::with_all(
            width("timestamp_bits", timestamp_bits)?,
            width("worker_bits", worker_bits)?,
            width("sequence_bits", sequence_bits)?,
            non_negative("epoch_ms", epoch_ms)?,
            non_negative("tick_ms", tick_ms)?,
        )
        .and_then(|l| l.with_datacenter_bits(datacenter_bits))
        .map(PyLayout)
        .map_err(to_pyerr)
    }

    #[getter]
    fn timestamp_bits(&self) -> u8 {
        self.0.timestamp_bits()
    }
    #[getter]
    fn worker_bits(&self) -> u8 {
        self.0.worker_bits()
    }
    #[getter]
    fn sequence_bits(&self) -> u8 {
        self.0.sequence_bits()
    }
    /// How many top bits of the worker field are the datacenter.
    #[getter]
    fn datacenter_bits(&self) -> u8 {
        self.0.datacenter_bits()
    }
    #[getter]
    fn epoch_ms(&self) -> u64 {
        self.0.epoch_ms()
    }
    #[getter]
    fn tick_ms(&self) -> u64 {
        self.0.tick_ms()
    }
    /// `2^timestamp_bits`: the exclusive upper bound of a grant's end.
    #[getter]
    fn timestamp_limit(&self) -> u64 {
        self.0.timestamp_limit()
    }
    /// `2^worker_bits`.
    #[getter]
    fn worker_count(&self) -> u64 {
        self.0.worker_count()
    }
    /// `2^sequence_bits`.
    #[getter]
    fn sequence_count(&self) -> u64 {
        self.0.sequence_count()
    }

    /// The ID of a (timestamp, worker, sequence) tuple; every field's width
    /// is checked first.
    fn encode(&self, timestamp: i64, worker: i64, sequence: i64) -> PyResult<u64> {
        self.0
            .encode(
                non_negative("timestamp", timestamp)?,
                non_negative("worker", worker)?,
                non_negative("sequence", sequence)?,
            )
            .map_err(to_pyerr)
    }

    /// The fields of an ID (an `int`, or a `str` of decimal digits or
    /// `0x` hex).
    fn decode(&self, id: &Bound<'_, PyAny>) -> PyResult<PyDecoded> {
        decode_with(&self.0, id)
    }

    /// The tick containing a Unix time in ms.
    fn tick_at(&self, unix_ms: i64) -> PyResult<u64> {
        Ok(self.0.tick_at(non_negative("unix_ms", unix_ms)?))
    }

    /// The Unix time in ms at which `tick` starts.
    fn unix_ms_of(&self, tick: i64) -> PyResult<u64> {
        Ok(self.0.unix_ms_of(non_negative("tick", tick)?))
    }

    fn __repr__(&self) -> String {
        let datacenter = match self.0.datacenter_bits() {
            0 => String::new(),
            bits => format!(", datacenter_bits={bits}"),
        };
        format!(
            "Layout(timestamp_bits={}, worker_bits={}, sequence_bits={}, epoch_ms={}, tick_ms={}{datacenter})",
            self.0.timestamp_bits(),
            self.0.worker_bits(),
            self.0.sequence_bits(),
            self.0.epoch_ms(),
            self.0.tick_ms()
        )
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, LayoutArgs)> {
        let l = slf.get().0;
        Ok((
            slf.get_type().into_any(),
            (
                l.timestamp_bits(),
                l.worker_bits(),
                l.sequence_bits(),
                l.epoch_ms(),
                l.tick_ms(),
                l.datacenter_bits(),
            ),
        ))
    }
}

/// The fields of a decoded ID. `unix_ms` is the start of the encoded tick: a
/// diagnostic, not a commit time.
#[pyclass(frozen, eq, hash, module = "grantid", name = "Decoded")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyDecoded(pub CoreDecoded);

#[pymethods]
impl PyDecoded {
    #[getter]
    fn timestamp(&self) -> u64 {
        self.0.timestamp
    }
    #[getter]
    fn worker(&self) -> u64 {
        self.0.worker
    }
    #[getter]
    fn sequence(&self) -> u64 {
        self.0.sequence
    }
    #[getter]
    fn unix_ms(&self) -> u64 {
        self.0.unix_ms
    }
    /// The datacenter: the top `datacenter_bits` of the worker field (0
    /// without a split).
    #[getter]
    fn datacenter(&self) -> u64 {
        self.0.datacenter
    }
    /// The worker within its datacenter (the whole worker field without a
    /// split).
    #[getter]
    fn datacenter_worker(&self) -> u64 {
        self.0.datacenter_worker
    }

    /// `{"timestamp", "unix_ms", "worker", "sequence", "datacenter",
    /// "datacenter_worker"}` as a dict.
    #[allow(clippy::wrong_self_convention)] // a Python method: `self` is borrowed from the object
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("timestamp", self.0.timestamp)?;
        d.set_item("unix_ms", self.0.unix_ms)?;
        d.set_item("worker", self.0.worker)?;
        d.set_item("sequence", self.0.sequence)?;
        d.set_item("datacenter", self.0.datacenter)?;
        d.set_item("datacenter_worker", self.0.datacenter_worker)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "Decoded(timestamp={}, unix_ms={}, worker={}, sequence={})",
            self.0.timestamp, self.0.unix_ms, self.0.worker, self.0.sequence
        )
    }
}

/// Reads an ID given as a non-negative `int` below 2^64 or as a `str`
/// (`grantid::parse_id`). Anything else is `InvalidArgument`.
pub(crate) fn id_arg(id: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(text) = id.cast::<PyString>() {
        return grantid::parse_id(&text.to_cow()?).map_err(to_pyerr);
    }
    if id.is_instance_of::<PyInt>() && !id.is_instance_of::<PyBool>() {
        return id
            .extract::<u64>()
            .map_err(|_| invalid(format!("{id} is not an ID (IDs are 1 ..= 2^63 - 1)")));
    }
    Err(invalid(format!(
        "an ID is an int or a str, not {}",
        id.get_type().name()?
    )))
}

pub(crate) fn decode_with(layout: &grantid::Layout, id: &Bound<'_, PyAny>) -> PyResult<PyDecoded> {
    layout.decode(id_arg(id)?).map(PyDecoded).map_err(to_pyerr)
}

/// Decodes an ID in `layout` (the default layout when `None`).
#[pyfunction]
#[pyo3(signature = (id, layout=None))]
pub(crate) fn decode(
    id: &Bound<'_, PyAny>,
    layout: Option<&Bound<'_, PyLayout>>,
) -> PyResult<PyDecoded> {
    let layout = layout.map_or_else(grantid::Layout::default, |l| l.get().0);
    decode_with(&layout, id)
}

/// Parses an ID written as decimal digits or `0x` hex.
#[pyfunction]
pub(crate) fn parse_id(text: &str) -> PyResult<u64> {
    grantid::parse_id(text).map_err(to_pyerr)
}
