//! The stores' calls and answers for `grantid/authorities` (the helpers over
//! an application's own node-postgres or node-redis connection), built and
//! decoded by the authority crate's `protocol` module: the helpers only do
//! the I/O, and every answer has the kind it has in Rust.
//!
//! A decoder throws an `Error` whose `code` is the kind's code and whose
//! `grantError` names the answer (`'lost'`, `'unavailable'`, `'invalid'`,
//! `'refused'`); a grant source that rethrows it reports exactly that
//! answer to the generator (`source.rs`).

use grantid::{Grant, GrantError, GrantRequest};
use grantid_authority::Options;
use grantid_authority::protocol::{self, SqlValue};
use napi::bindgen_prelude::{JsError, JsObjectValue, Object, Unknown};
use napi::{Env, JsValue, ValueType};
use napi_derive::napi;

use crate::convert::{LayoutOptions, MAX_SAFE, layout_from_js, number_to_u64};
use crate::errors::{JsErr, invalid, map_error};
use crate::source::{GrantShape, integer, plain_string, type_name};

/// The options of the helpers' calls; a missing one takes the reference
/// authorities' default (the URL options of docs/reference/urls.md).
#[napi(object)]
#[derive(Debug, Clone, Default)]
pub struct StoreCallOptions {
    /// `lease_grace_ms` (5000).
    pub lease_grace_ms: Option<f64>,
    /// `log_max` (Redis, 1000000).
    pub log_max: Option<f64>,
    /// `max_lead_ms` (7000).
    pub max_lead_ms: Option<f64>,
    /// `clock_skew_ms` (1000).
    pub clock_skew_ms: Option<f64>,
}

/// One run of the Redis script, as node-redis's `eval` takes it.
#[napi(object)]
pub struct RedisCall {
    pub keys: Vec<String>,
    pub arguments: Vec<String>,
}

/// One SQL statement, as node-postgres's `query` takes it (`$1` ...;
/// 64-bit values as decimal strings).
#[napi(object)]
pub struct SqlStatement {
    pub text: String,
    #[napi(ts_type = "Array<string | number | null>")]
    pub values: Vec<Option<String>>,
}

/// The call options; the authority's time is always the server's clock.
/// The calls' options. The authority's time is always the server's clock.
fn options_from_js(o: Option<&StoreCallOptions>) -> Result<Options, JsErr> {
    let d = Options::default();
    let Some(o) = o else { return Ok(d) };
    let ms = |v: Option<f64>, name: &str, default: u64| match v {
        None => Ok(default),
        Some(v) => number_to_u64(v, name, MAX_SAFE),
    };
    let options = Options {
        lease_grace_ms: ms(o.lease_grace_ms, "leaseGraceMs", d.lease_grace_ms)?,
        log_max: ms(o.log_max, "logMax", d.log_max)?,
        max_lead_ms: grantid_authority::max_lead_ms(ms(o.max_lead_ms, "maxLeadMs", d.max_lead_ms)?)
            .map_err(|e| invalid(e.replace("max_lead_ms", "maxLeadMs")))?,
        clock_skew_ms: ms(o.clock_skew_ms, "clockSkewMs", d.clock_skew_ms)?,
        ..d
    };
    Ok(options)
}

fn as_object<'a>(value: &Unknown<'a>, what: &str) -> Result<Object<'a>, JsErr> {
    match value.get_type() {
        Ok(ValueType::Object) => {
            // SAFETY: the value's type was checked to be an object.
            unsafe { value.cast::<Object>() }.map_err(|e| invalid(format!("{what}: {}", e.reason)))
        }
        _ => Err(invalid(format!(
            "{what} must be an object, got {}",
            type_name(value)
        ))),
    }
}

fn property<'a>(object: &Object<'a>, name: &str) -> Result<Unknown<'a>, JsErr> {
    object
        .get_named_property::<Unknown>(name)
        .map_err(|e| invalid(format!("`{name}` cannot be read: {}", e.reason)))
}

/// A `GrantRequest` as the generator passed it to the grant source.
fn request_from_js(value: &Unknown<'_>) -> Result<GrantRequest, JsErr> {
    let object = as_object(value, "the request")?;
    let bad = |e: GrantError| invalid(format!("the request's {}", e.reason()));
    let number = |name: &str| -> Result<u64, JsErr> {
        integer(&property(&object, name)?, name, MAX_SAFE, false).map_err(bad)
    };
    let namespace = plain_string(&property(&object, "namespace")?)
        .ok_or_else(|| invalid("the request's `namespace` must be a string"))?;
    let worker_value = property(&object, "worker")?;
    let worker = match worker_value.get_type() {
        Ok(ValueType::Null | ValueType::Undefined) => None,
        _ => {
            Some(integer(&worker_value, "worker", u64::from(u32::MAX), false).map_err(bad)? as u32)
        }
    };
    let layout: LayoutOptions = {
        let v = property(&object, "layout")?;
        // SAFETY: `v` is a live value of this env; the conversion checks its type.
        unsafe { v.cast::<LayoutOptions>() }
            .map_err(|e| invalid(format!("the request's `layout`: {}", e.reason)))?
    };
    Ok(GrantRequest {
        namespace,
        incarnation: integer(
            &property(&object, "incarnation")?,
            "incarnation",
            u64::MAX,
            true,
        )
        .map_err(bad)?,
        request_id: number("requestId")?,
        worker,
        not_before: number("notBefore")?,
        now: number("now")?,
        duration: number("duration")?,
        layout: layout_from_js(Some(&layout))?,
    })
}

/// `error` thrown as the JS error object (its `code` kept).
fn thrown(env: &Env, error: JsErr) -> napi::Error {
    napi::Error::from(JsError::from(error).into_unknown(*env))
}

/// The error a decoder throws: the kind's `code`, and `grantError`.
fn answer_error(env: &Env, e: GrantError) -> napi::Error {
    let name = e.name();
    let error = map_error(grantid::Error::from(e));
    let js = JsError::from(error).into_unknown(*env);
    // SAFETY: `js` is the error object just made, a live value of this env.
    if let Ok(mut object) = unsafe { js.cast::<Object>() } {
        let _ = object.set_named_property("grantError", name);
    }
    napi::Error::from(js)
}

fn grant_to_js(grant: &Grant) -> Result<GrantShape, JsErr> {
    let tick = |v: u64, what: &str| crate::convert::u64_to_number(v, what);
    Ok(GrantShape {
        namespace: grant.namespace.clone(),
        worker: grant.worker,
        incarnation: grant.incarnation.to_string(),
        grant_id: grant.grant_id.to_string(),
        start: tick(grant.start, "start")?,
        end: tick(grant.end, "end")?,
    })
}

fn sql_to_js(call: &protocol::SqlCall) -> SqlStatement {
    SqlStatement {
        text: call.text(|i| format!("${i}")),
        values: call
            .params
            .iter()
            .map(|p| match p {
                SqlValue::Text(s) => Some(s.clone()),
                SqlValue::Int4(v) => Some(v.to_string()),
                SqlValue::Int8(v) => Some(v.to_string()),
                SqlValue::UInt8(v) => Some(v.to_string()),
                SqlValue::Null => None,
            })
            .collect(),
    }
}

/// An element of a script reply or a column of a row, as text: strings as
/// they are, integral numbers and bigints in decimal, anything else absent.
fn answer_text(value: &Unknown<'_>) -> Option<String> {
    match value.get_type() {
        Ok(ValueType::String) => plain_string(value),
        Ok(ValueType::Number) => {
            // SAFETY: the value's type was checked to be a number.
            let n = unsafe { value.cast::<f64>() }.ok()?;
            (n.is_finite() && n.fract() == 0.0 && n.abs() <= MAX_SAFE as f64)
                .then(|| (n as i64).to_string())
        }
        Ok(ValueType::BigInt) => {
            // SAFETY: the value's type was checked to be a bigint.
            let big = unsafe { value.cast::<napi::bindgen_prelude::BigInt>() }.ok()?;
            let (v, lossless) = big.get_i128();
            lossless.then(|| v.to_string())
        }
        _ => None,
    }
}

/// The Redis script run (`keys`, `arguments`) that asks for `request`.
#[napi(ts_args_type = "request: GrantRequest, options?: StoreCallOptions")]
pub fn redis_acquire_call(
    env: Env,
    request: Unknown<'_>,
    options: Option<StoreCallOptions>,
) -> napi::Result<RedisCall> {
    let request = request_from_js(&request).map_err(|e| thrown(&env, e))?;
    let options = options_from_js(options.as_ref()).map_err(|e| thrown(&env, e))?;
    let call =
        protocol::redis_acquire(&request, &options, None).map_err(|e| answer_error(&env, e))?;
    Ok(RedisCall {
        keys: call.keys,
        arguments: call.args,
    })
}

/// The grant the script's `reply` gives `request`; else throws the answer
/// (`grantError`: `'lost'`, `'unavailable'` for `wait`, `'refused'`,
/// `'invalid'` for anything malformed).
#[napi(
    ts_args_type = "request: GrantRequest, reply: unknown",
    ts_return_type = "Grant"
)]
pub fn grant_from_redis_reply(
    env: Env,
    request: Unknown<'_>,
    reply: Unknown<'_>,
) -> napi::Result<GrantShape> {
    let request = request_from_js(&request).map_err(|e| thrown(&env, e))?;
    let elements: Vec<String> = match reply.get_type() {
        Ok(ValueType::Object) => {
            // SAFETY: the value's type was checked to be an object.
            let object = unsafe { reply.cast::<Object>() }?;
            let array = object.is_array().unwrap_or(false);
            let len = if array {
                object.get_array_length().unwrap_or(0)
            } else {
                0
            };
            (0..len)
                .map(|i| {
                    object
                        .get_element::<Unknown>(i)
                        .ok()
                        .and_then(|v| answer_text(&v))
                        .unwrap_or_default()
                })
                .collect()
        }
        _ => Vec::new(),
    };
    let grant = protocol::redis_grant(&request, &elements).map_err(|e| answer_error(&env, e))?;
    grant_to_js(&grant).map_err(|e| thrown(&env, e))
}

/// The schema version the Rust adapter wants (authority/src/engines/postgres/v1.sql): a
/// database with only older versions is given the script again.
#[napi]
pub fn postgres_schema_version() -> i32 {
    grantid_authority::POSTGRES_SCHEMA_VERSION
}

/// The authority's PostgreSQL schema and functions (the SQL the Rust
/// adapter applies), for `grantid/authorities`'s `postgres()`.
#[napi]
pub fn postgres_schema_sql() -> &'static str {
    grantid_authority::SQL_V1
}

/// The Rust adapter's schema checks: the database holds the schema it
/// wants when each statement, run in order, returns a row.
#[napi]
pub fn postgres_schema_checks() -> Vec<String> {
    grantid_authority::postgres_schema_checks().to_vec()
}

/// The schema in one transaction under the adapter's advisory lock: one
/// batch of statements without parameters, as the adapter applies it.
#[napi]
pub fn postgres_schema_script() -> String {
    grantid_authority::postgres_schema_script()
}

/// The authority's Redis script (the Lua the Rust adapter runs), for
/// `grantid/authorities`'s `redis()`.
#[napi]
pub fn redis_script() -> &'static str {
    grantid_authority::LUA_V1
}

/// The `grantid.acquire` statement that asks for `request`.
#[napi(ts_args_type = "request: GrantRequest, options?: StoreCallOptions")]
pub fn postgres_acquire_call(
    env: Env,
    request: Unknown<'_>,
    options: Option<StoreCallOptions>,
) -> napi::Result<SqlStatement> {
    let request = request_from_js(&request).map_err(|e| thrown(&env, e))?;
    let options = options_from_js(options.as_ref()).map_err(|e| thrown(&env, e))?;
    let call =
        protocol::postgres_acquire(&request, &options, None).map_err(|e| answer_error(&env, e))?;
    Ok(sql_to_js(&call))
}

/// The grant the row of `grantid.acquire` gives `request`; else throws the
/// answer, as `grantFromRedisReply` does.
#[napi(
    ts_args_type = "request: GrantRequest, row: unknown",
    ts_return_type = "Grant"
)]
pub fn grant_from_postgres_row(
    env: Env,
    request: Unknown<'_>,
    row: Unknown<'_>,
) -> napi::Result<GrantShape> {
    let request = request_from_js(&request).map_err(|e| thrown(&env, e))?;
    let column = |name: &str| -> Option<String> {
        if row.get_type().ok()? != ValueType::Object {
            return None;
        }
        // SAFETY: the value's type was checked to be an object.
        let object = unsafe { row.cast::<Object>() }.ok()?;
        answer_text(&object.get_named_property::<Unknown>(name).ok()?)
    };
    let status = column("status");
    let message = column("message");
    let number = |name: &str| column(name).and_then(|t| t.parse::<i128>().ok());
    let grant = protocol::postgres_grant(
        &request,
        status.as_deref(),
        [
            number("worker"),
            number("grant_id"),
            number("start_tick"),
            number("end_tick"),
        ],
        message.as_deref(),
    )
    .map_err(|e| answer_error(&env, e))?;
    grant_to_js(&grant).map_err(|e| thrown(&env, e))
}
