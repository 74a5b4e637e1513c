//! The one place where grantid errors become JavaScript errors.
//!
//! Every error thrown (or rejected) by the addon is an `Error` whose `code`
//! is `grantid::ErrorKind::code()`: `'GRANT_EXHAUSTED'`, `'UNAVAILABLE'`,
//! `'NOT_YET_VALID'`, `'CAPACITY_EXHAUSTED'`, `'CLOCK_ROLLBACK'`,
//! `'LEASE_LOST'`, `'INVALID_ARGUMENT'` or `'CLOSED'`.

use grantid::{Error, ErrorKind};
use napi::Env;
use napi::bindgen_prelude::JsError;

/// A napi error whose status string is the grantid code (it becomes the JS
/// error's `code` property).
pub type JsErr = napi::Error<String>;

/// The result type of every exported function.
pub type Result<T> = std::result::Result<T, JsErr>;

/// Maps a core error to a JS error: `code` is the kind's stable code, the
/// message is the core's message.
pub fn map_error(error: Error) -> JsErr {
    napi::Error::new(error.code().to_string(), error.message().to_string())
}

/// An `INVALID_ARGUMENT` error.
pub fn invalid(message: impl Into<String>) -> JsErr {
    map_error(Error::new(ErrorKind::InvalidArgument, message.into()))
}

/// A napi conversion failure (an argument of the wrong type) as
/// `INVALID_ARGUMENT`.
pub fn from_napi(error: napi::Error) -> JsErr {
    invalid(error.reason.clone())
}

/// Builds the JS error object for `error` now, on the JS thread, and wraps it
/// so a promise settled with it rejects with that very object (code
/// included).
pub fn rejection(env: &Env, error: Error) -> napi::Error {
    let js = JsError::from(map_error(error)).into_unknown(*env);
    napi::Error::from(js)
}

/// Every code the addon can throw, in the core's order.
pub fn codes() -> Vec<&'static str> {
    grantid::ErrorKind::ALL.iter().map(|k| k.code()).collect()
}
