//! The stores' calls and answers for `grantid.authorities` (the helpers over
//! an application's own psycopg connection or redis-py client), built and
//! decoded by the authority crate's `protocol` module: the helpers only do
//! the I/O, and every answer has the kind it has in Rust.
//!
//! A decoder raises the exception of the answer's kind (`LeaseLost`,
//! `Unavailable`, `InvalidArgument` for a refusal, `Unavailable` for an
//! invalid grant) with `grant_error` naming the answer (`"lost"`,
//! `"unavailable"`, `"refused"`, `"invalid"`); a grant source that lets it
//! propagate reports exactly that answer to the generator (`source.rs`).

use grantid::{Error, GrantError};
use grantid_authority::Options;
use grantid_authority::protocol::{self, SqlValue};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyList, PyString, PyTuple};

use crate::errors::{invalid, to_pyerr};
use crate::grant::{PyGrant, PyGrantRequest};

/// The attribute that names the answer on a decoder's exception.
const ANSWER_ATTRIBUTE: &str = "grant_error";

/// One run of the Redis script: `(keys, args)`, as a redis-py `Script`
/// takes them.
type ScriptCall = (Vec<String>, Vec<String>);

/// One SQL statement: `(text, params)` with psycopg's `%s` placeholders.
type SqlStatement = (String, Vec<Py<PyAny>>);

/// The exception a decoder raises for `e`.
fn answer_error(py: Python<'_>, e: GrantError) -> PyErr {
    let name = e.name();
    let err = to_pyerr(Error::from(e));
    if let Err(e) = err.value(py).setattr(ANSWER_ATTRIBUTE, name) {
        return e;
    }
    err
}

/// The answer an exception names with `grant_error` (raised by a decoder
/// of this module, or by a grant source that names one), if it names one.
pub(crate) fn named_answer(py: Python<'_>, err: &PyErr) -> Option<GrantError> {
    let value = err.value(py);
    let name: String = value.getattr(ANSWER_ATTRIBUTE).ok()?.extract().ok()?;
    let message = value.to_string();
    // The message as the decoder made it from the answer: drop what the
    // conversion to an `Error` put before the reason.
    let added = Error::from(GrantError::named(&name, String::new())?);
    let why = message.strip_prefix(added.message()).unwrap_or(&message);
    GrantError::named(&name, why.to_owned())
}

/// A call option in milliseconds (`None`: the reference authorities'
/// default).
fn ms(name: &str, value: Option<i64>, default: u64) -> PyResult<u64> {
    match value {
        None => Ok(default),
        Some(v) => u64::try_from(v).map_err(|_| invalid(format!("{name} is {v}, it must be >= 0"))),
    }
}

/// The helpers' call options, with the URL options' names and rules
/// (docs/reference/urls.md); a missing one takes its default.
fn call_options(
    lease_grace_ms: Option<i64>,
    log_max: Option<i64>,
    max_lead_ms: Option<i64>,
    clock_skew_ms: Option<i64>,
) -> PyResult<Options> {
    let d = Options::default();
    Ok(Options {
        lease_grace_ms: ms("lease_grace_ms", lease_grace_ms, d.lease_grace_ms)?,
        log_max: ms("log_max", log_max, d.log_max)?,
        max_lead_ms: grantid_authority::max_lead_ms(ms("max_lead_ms", max_lead_ms, d.max_lead_ms)?)
            .map_err(invalid)?,
        clock_skew_ms: ms("clock_skew_ms", clock_skew_ms, d.clock_skew_ms)?,
        ..d
    })
}

fn sql_to_py(py: Python<'_>, call: &protocol::SqlCall) -> PyResult<SqlStatement> {
    let params = call
        .params
        .iter()
        .map(|p| {
            Ok(match p {
                SqlValue::Text(s) => s.into_pyobject(py)?.into_any().unbind(),
                SqlValue::Int4(v) => v.into_pyobject(py)?.into_any().unbind(),
                SqlValue::Int8(v) => v.into_pyobject(py)?.into_any().unbind(),
                SqlValue::UInt8(v) => v.into_pyobject(py)?.into_any().unbind(),
                SqlValue::Null => py.None(),
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok((call.text(|_| "%s".to_owned()), params))
}

/// An element of a script reply as text: `str` as it is, `bytes` as UTF-8,
/// an `int` in decimal, anything else absent.
fn reply_text(value: &Bound<'_, PyAny>) -> Option<String> {
    if let Ok(s) = value.cast::<PyString>() {
        return s.to_cow().ok().map(std::borrow::Cow::into_owned);
    }
    if let Ok(b) = value.cast::<PyBytes>() {
        return std::str::from_utf8(b.as_bytes()).ok().map(str::to_owned);
    }
    if value.is_instance_of::<PyInt>() && !value.is_instance_of::<PyBool>() {
        return value.str().ok().map(|s| s.to_string());
    }
    None
}

/// A column of a row as a number: an `int`, or a `str` of decimal digits;
/// `None` for NULL and anything else.
fn column_number(value: &Bound<'_, PyAny>) -> Option<i128> {
    if value.is_instance_of::<PyBool>() {
        return None;
    }
    if value.is_instance_of::<PyInt>() {
        return value.extract().ok();
    }
    value.cast::<PyString>().ok()?.to_cow().ok()?.parse().ok()
}

/// A column of a row as text (`None` for NULL and anything else).
fn column_text(value: &Bound<'_, PyAny>) -> Option<String> {
    value
        .cast::<PyString>()
        .ok()?
        .to_cow()
        .ok()
        .map(std::borrow::Cow::into_owned)
}

/// The Redis script run `(keys, args)` that asks for `request`; a missing
/// option takes the reference authorities' default. The authority's time is
/// the server's clock.
#[pyfunction]
#[pyo3(signature = (request, *, lease_grace_ms=None, log_max=None, max_lead_ms=None, clock_skew_ms=None))]
pub(crate) fn redis_acquire_call(
    py: Python<'_>,
    request: PyRef<'_, PyGrantRequest>,
    lease_grace_ms: Option<i64>,
    log_max: Option<i64>,
    max_lead_ms: Option<i64>,
    clock_skew_ms: Option<i64>,
) -> PyResult<ScriptCall> {
    let options = call_options(lease_grace_ms, log_max, max_lead_ms, clock_skew_ms)?;
    let call =
        protocol::redis_acquire(&request.0, &options, None).map_err(|e| answer_error(py, e))?;
    Ok((call.keys, call.args))
}

/// The Redis script run `(keys, args)` that releases `grant`.
#[pyfunction]
pub(crate) fn redis_release_call(grant: PyRef<'_, PyGrant>) -> ScriptCall {
    let call = protocol::redis_release(&grant.0, None);
    (call.keys, call.args)
}

/// The grant the script's `reply` gives `request`; else raises the answer
/// (`grant_error`: `"lost"`, `"unavailable"` for `wait`, `"refused"`,
/// `"invalid"` for anything malformed).
#[pyfunction]
pub(crate) fn grant_from_redis_reply(
    py: Python<'_>,
    request: PyRef<'_, PyGrantRequest>,
    reply: &Bound<'_, PyAny>,
) -> PyResult<PyGrant> {
    let elements: Vec<String> =
        if reply.is_instance_of::<PyList>() || reply.is_instance_of::<PyTuple>() {
            reply
                .try_iter()?
                .map(|v| v.ok().and_then(|v| reply_text(&v)).unwrap_or_default())
                .collect()
        } else {
            Vec::new()
        };
    protocol::redis_grant(&request.0, &elements)
        .map(PyGrant)
        .map_err(|e| answer_error(py, e))
}

/// The `grantid.acquire` statement `(text, params)` that asks for
/// `request`; a missing option takes the reference authorities' default.
/// The authority's time is the server's clock.
#[pyfunction]
#[pyo3(signature = (request, *, lease_grace_ms=None, max_lead_ms=None, clock_skew_ms=None))]
pub(crate) fn postgres_acquire_call(
    py: Python<'_>,
    request: PyRef<'_, PyGrantRequest>,
    lease_grace_ms: Option<i64>,
    max_lead_ms: Option<i64>,
    clock_skew_ms: Option<i64>,
) -> PyResult<SqlStatement> {
    let options = call_options(lease_grace_ms, None, max_lead_ms, clock_skew_ms)?;
    let call =
        protocol::postgres_acquire(&request.0, &options, None).map_err(|e| answer_error(py, e))?;
    sql_to_py(py, &call)
}

/// The `grantid.release` statement `(text, params)` for `grant`.
#[pyfunction]
pub(crate) fn postgres_release_call(
    py: Python<'_>,
    grant: PyRef<'_, PyGrant>,
) -> PyResult<SqlStatement> {
    sql_to_py(py, &protocol::postgres_release(&grant.0, None))
}

/// The grant the row of `grantid.acquire` gives `request` (a sequence in
/// the statement's column order, a mapping by column name, or `None` for no
/// row); else raises the answer, as `grant_from_redis_reply` does.
#[pyfunction]
pub(crate) fn grant_from_postgres_row(
    py: Python<'_>,
    request: PyRef<'_, PyGrantRequest>,
    row: &Bound<'_, PyAny>,
) -> PyResult<PyGrant> {
    let names: Vec<&str> = protocol::POSTGRES_ACQUIRE_COLUMNS.split(", ").collect();
    let by_name = row.getattr("keys").is_ok() && !row.is_instance_of::<PyString>();
    let by_position = row.is_instance_of::<PyList>() || row.is_instance_of::<PyTuple>();
    let columns: Vec<Option<Bound<'_, PyAny>>> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            if by_name {
                row.get_item(name).ok()
            } else if by_position {
                row.get_item(i).ok()
            } else {
                None
            }
        })
        .collect();
    let text = |i: usize| columns[i].as_ref().and_then(column_text);
    let number = |i: usize| columns[i].as_ref().and_then(column_number);
    let (status, message) = (text(0), text(5));
    protocol::postgres_grant(
        &request.0,
        status.as_deref(),
        [number(1), number(2), number(3), number(4)],
        message.as_deref(),
    )
    .map(PyGrant)
    .map_err(|e| answer_error(py, e))
}

/// Adds the builders and decoders to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(redis_acquire_call, m)?)?;
    m.add_function(wrap_pyfunction!(redis_release_call, m)?)?;
    m.add_function(wrap_pyfunction!(grant_from_redis_reply, m)?)?;
    m.add_function(wrap_pyfunction!(postgres_acquire_call, m)?)?;
    m.add_function(wrap_pyfunction!(postgres_release_call, m)?)?;
    m.add_function(wrap_pyfunction!(grant_from_postgres_row, m)?)?;
    Ok(())
}
