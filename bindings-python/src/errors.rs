//! The exception classes, made once from `grantid::ErrorKind`, and the one
//! mapping from `grantid::Error` to a Python exception.
//!
//! `grantid.GrantIdError` is the base; each kind gets a subclass named by
//! `ErrorKind::name()` with a class attribute `code` (`ErrorKind::code()`).
//! `InvalidArgument` also subclasses `ValueError`, as callers expect of a
//! bad argument. A class's docstring is `ErrorKind::description()`.

use grantid::{Error, ErrorKind};
use pyo3::exceptions::{PyException, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

/// The base class and one class per kind, in `ErrorKind::ALL` order.
struct Classes {
    base: Py<PyType>,
    kinds: Vec<(ErrorKind, Py<PyType>)>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

fn make_class<'py>(
    py: Python<'py>,
    name: &str,
    bases: Bound<'py, PyTuple>,
    code: Option<&str>,
    doc: &str,
) -> PyResult<Bound<'py, PyType>> {
    let dict = PyDict::new(py);
    dict.set_item("__module__", "grantid")?;
    dict.set_item("__doc__", doc)?;
    dict.set_item("code", code)?;
    let class = py.get_type::<PyType>().call1((name, bases, dict))?;
    Ok(class.cast_into::<PyType>()?)
}

/// The class's docstring: the core's description of the kind, and what a
/// grant source does with `LeaseLost`.
fn doc_of(kind: ErrorKind) -> String {
    let description = kind.description();
    if kind == ErrorKind::LeaseLost {
        format!("{description} A grant source raises it to report a confirmed loss.")
    } else {
        description.to_owned()
    }
}

fn classes(py: Python<'_>) -> PyResult<&Classes> {
    CLASSES.get_or_try_init(py, || {
        let base = make_class(
            py,
            "GrantIdError",
            PyTuple::new(py, [py.get_type::<PyException>()])?,
            None,
            "Base class of every grantid error; `code` is the stable code string.",
        )?;
        let mut kinds = Vec::with_capacity(ErrorKind::ALL.len());
        for kind in ErrorKind::ALL {
            let bases = if kind == ErrorKind::InvalidArgument {
                PyTuple::new(py, [base.clone(), py.get_type::<PyValueError>()])?
            } else {
                PyTuple::new(py, [base.clone()])?
            };
            let class = make_class(py, kind.name(), bases, Some(kind.code()), &doc_of(kind))?;
            kinds.push((kind, class.unbind()));
        }
        Ok(Classes {
            base: base.unbind(),
            kinds,
        })
    })
}

/// Adds `GrantIdError` and the per-kind classes to the module.
pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    let classes = classes(py)?;
    module.add("GrantIdError", classes.base.bind(py))?;
    for (kind, class) in &classes.kinds {
        module.add(kind.name(), class.bind(py))?;
    }
    Ok(())
}

/// The exception class of a kind (the base for a kind this build does not
/// know).
fn class_of(py: Python<'_>, kind: ErrorKind) -> PyResult<Bound<'_, PyType>> {
    let classes = classes(py)?;
    let class = classes
        .kinds
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(&classes.base, |(_, c)| c);
    Ok(class.bind(py).clone())
}

/// The one mapping from a core error to a Python exception.
pub(crate) fn to_pyerr(err: Error) -> PyErr {
    Python::attach(|py| match class_of(py, err.kind()) {
        Ok(class) => PyErr::from_type(class, err.message().to_owned()),
        Err(e) => PyRuntimeError::new_err(format!("{err} (and the error classes failed: {e})")),
    })
}

/// An `InvalidArgument` error with `message`.
pub(crate) fn invalid(message: impl Into<String>) -> PyErr {
    to_pyerr(Error::new(ErrorKind::InvalidArgument, message.into()))
}

/// True when `err` is an instance of the class of `kind`.
pub(crate) fn is_kind(py: Python<'_>, err: &PyErr, kind: ErrorKind) -> bool {
    class_of(py, kind).is_ok_and(|class| err.get_type(py).is_subclass(&class).unwrap_or(false))
}
