//! A JavaScript function as the generator's grant source.
//!
//! The core calls `acquire` on its renewal thread. That thread hands the
//! request to the JS thread through a `ThreadsafeFunction` and waits for the
//! answer with a timeout: the function may return a grant, a Promise of one,
//! throw, or reject. A thrown / rejected value whose `code` is `'LEASE_LOST'`
//! is a confirmed loss; anything else, a timeout included, is "unavailable".
//! A blocked event loop therefore stalls renewal, and the core keeps every ID
//! inside the committed grants meanwhile.
//!
//! The wait is the one machine of `grantid_authority::hosted`. A call that
//! has not settled within the timeout stays pending: the next retries wait
//! for its answer (which serves the retry of the same request) instead of
//! calling the function again. Each call attaches handlers to its promise
//! that live as long as the promise, so a call counts as in flight until
//! its promise settles or is collected. A promise still pending after
//! fifteen timeouts (30 s at the default) is given up and the function
//! called again, while fewer than [`MAX_IN_FLIGHT`] calls are in flight: a
//! source whose promises never settle holds at most that many.

use std::time::Duration;

use grantid::{Grant, GrantError, GrantRequest};
use grantid_authority::hosted::{Answer, CallBounds, Host, HostedSource, Reply};
use napi::bindgen_prelude::{
    BigInt, CallbackContext, Either, JsObjectValue, Null, Object, PromiseRaw, Unknown,
};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Env, JsValue, Status, ValueType};
use napi_derive::napi;

use crate::convert::{LayoutInfo, MAX_SAFE};

/// What the grant source is asked for (ticks are numbers, the 64-bit
/// incarnation a bigint).
#[napi(object, object_from_js = false, js_name = "GrantRequest")]
pub struct JsGrantRequest {
    pub namespace: String,
    /// Fresh random 64 bits per activation; echo it in the grant (as a
    /// bigint or a decimal string).
    pub incarnation: BigInt,
    /// Increases per request; a retry of an uncertain request reuses it.
    pub request_id: f64,
    /// The worker to renew, or `null` for any free worker.
    #[napi(ts_type = "number | null")]
    pub worker: Either<u32, Null>,
    /// The grant may not start before this tick.
    pub not_before: f64,
    /// The generator's clock, in ticks.
    pub now: f64,
    /// The wanted length of the interval, in ticks.
    pub duration: f64,
    pub layout: LayoutInfo,
}

/// What `onLeaseLost` is told.
#[napi(object, object_from_js = false)]
pub struct LeaseLost {
    pub worker: u32,
    pub reason: String,
}

/// The grant source function, held weakly: it never keeps the process
/// alive by itself.
pub type SourceFn =
    ThreadsafeFunction<JsGrantRequest, Unknown<'static>, JsGrantRequest, Status, false, true>;
/// The `onLeaseLost` callback, held weakly.
pub type LostFn = ThreadsafeFunction<LeaseLost, Unknown<'static>, LeaseLost, Status, false, true>;

/// The most calls of a JS source in flight (promises neither settled nor
/// collected): enough to get past a few promises that hang, few enough
/// that a source whose promises never settle holds only a handful.
pub const MAX_IN_FLIGHT: usize = 4;

/// A JS function as a [`grantid::GrantSource`].
pub type JsSource = HostedSource<JsHost>;

/// The JS function, called on the JS thread.
pub struct JsHost {
    function: SourceFn,
}

/// `function` as a grant source, each call awaited at most `timeout`.
pub fn new_source(function: SourceFn, timeout: Duration) -> JsSource {
    HostedSource::new(
        JsHost { function },
        CallBounds::new(timeout).max_in_flight(MAX_IN_FLIGHT),
    )
}

impl Host for JsHost {
    const TIMEOUT_OPTION: &'static str = "sourceTimeoutMs";
    const STALL_HINT: &'static str = "is the event loop blocked, or does its promise never settle?";

    fn start_acquire(
        &self,
        request: &GrantRequest,
        reply: Reply<Answer>,
    ) -> Result<(), GrantError> {
        let status = self.function.call_with_return_value(
            to_js(request),
            ThreadsafeFunctionCallMode::NonBlocking,
            move |returned, env| {
                settle(returned, &env, reply);
                Ok(())
            },
        );
        if status != Status::Ok {
            return Err(GrantError::Unavailable(format!(
                "cannot call the grant source on the JS thread ({status})"
            )));
        }
        Ok(())
    }
}

fn to_js(request: &GrantRequest) -> JsGrantRequest {
    JsGrantRequest {
        namespace: request.namespace.clone(),
        incarnation: BigInt::from(request.incarnation),
        request_id: request.request_id as f64,
        worker: match request.worker {
            Some(w) => Either::A(w),
            None => Either::B(Null),
        },
        // Exact: the generator refuses layouts with more than 53 timestamp
        // bits, so every tick is a safe integer.
        not_before: request.not_before as f64,
        now: request.now as f64,
        duration: request.duration as f64,
        layout: LayoutInfo::from(&request.layout),
    }
}

/// Runs on the JS thread with what the source returned (or threw).
fn settle(returned: napi::Result<Unknown<'static>>, env: &Env, reply: Reply<Answer>) {
    let value = match returned {
        Ok(value) => value,
        Err(thrown) => {
            let value = napi::bindgen_prelude::JsError::from(thrown).into_unknown(*env);
            reply.send(Err(refusal(&value)));
            return;
        }
    };
    if value.is_promise().unwrap_or(false) {
        // SAFETY: `value` is a live JS value of this env, checked to be a
        // Promise just above.
        let promise: PromiseRaw<'static, Unknown<'static>> =
            match unsafe { value.cast::<PromiseRaw<'static, Unknown<'static>>>() } {
                Ok(p) => p,
                Err(e) => {
                    reply.send(Err(GrantError::Unavailable(e.reason)));
                    return;
                }
            };
        let on_reject = reply.clone();
        let chained = promise
            .then(move |ctx: CallbackContext<Unknown<'static>>| {
                reply.send(parse_grant(&ctx.value));
                Ok(())
            })
            .and_then(|p| {
                p.catch(move |ctx: CallbackContext<Unknown<'static>>| {
                    on_reject.send(Err(refusal(&ctx.value)));
                    Ok(())
                })
            });
        // If attaching the handlers failed, nothing will answer: the renewal
        // thread times out and retries.
        drop(chained);
        return;
    }
    reply.send(parse_grant(&value));
}

/// Classifies a thrown or rejected value: a `grantError` naming an answer
/// (`'lost'`, `'unavailable'`, `'invalid'`, `'refused'`, as the decoders of
/// `protocol.rs` throw them) is that answer; else `code === 'LEASE_LOST'`
/// is a confirmed loss, anything else uncertain.
fn refusal(value: &Unknown<'_>) -> GrantError {
    let (code, message, answer) = match as_object(value) {
        Some(object) => (
            string_property(&object, "code"),
            string_property(&object, "message"),
            string_property(&object, "grantError"),
        ),
        None => (None, plain_string(value), None),
    };
    let why = message.unwrap_or_else(|| "the grant source failed without a message".into());
    if let Some(answer) = answer.and_then(|name| GrantError::named(&name, why.clone())) {
        return answer;
    }
    if code.as_deref() == Some("LEASE_LOST") {
        GrantError::Lost(why)
    } else {
        GrantError::Unavailable(format!("the grant source failed: {why}"))
    }
}

fn as_object<'a>(value: &Unknown<'a>) -> Option<Object<'a>> {
    match value.get_type() {
        // SAFETY: the value's type was checked to be an object or a function.
        Ok(ValueType::Object | ValueType::Function) => unsafe { value.cast::<Object>() }.ok(),
        _ => None,
    }
}

pub(crate) fn plain_string(value: &Unknown<'_>) -> Option<String> {
    match value.get_type() {
        // SAFETY: the value's type was checked to be a string.
        Ok(ValueType::String) => unsafe { value.cast::<String>() }.ok(),
        _ => None,
    }
}

fn string_property(object: &Object<'_>, name: &str) -> Option<String> {
    let value: Unknown = object.get_named_property(name).ok()?;
    plain_string(&value)
}

fn invalid(field: &str, why: &str) -> GrantError {
    GrantError::Invalid(format!("field `{field}` {why}"))
}

/// Reads a grant object. A missing or mistyped field is an invalid grant,
/// reported with the field's name (counted as invalid, handled as uncertain).
fn parse_grant(value: &Unknown<'_>) -> Answer {
    let Some(object) = as_object(value) else {
        return Err(GrantError::Invalid(format!(
            "expected an object, got {}",
            type_name(value)
        )));
    };
    let field = |name: &str| -> Result<Unknown<'_>, GrantError> {
        let v: Unknown = object
            .get_named_property(name)
            .map_err(|e| invalid(name, &format!("cannot be read: {}", e.reason)))?;
        match v.get_type() {
            Ok(ValueType::Undefined) => Err(invalid(name, "is missing")),
            _ => Ok(v),
        }
    };
    let namespace = plain_string(&field("namespace")?)
        .ok_or_else(|| invalid("namespace", "must be a string"))?;
    let worker = integer(&field("worker")?, "worker", u64::from(u32::MAX), false)? as u32;
    let incarnation = big_integer(&field("incarnation")?, "incarnation")?;
    let grant_id = integer(&field("grantId")?, "grantId", u64::MAX, true)?;
    let start = integer(&field("start")?, "start", u64::MAX, true)?;
    let end = integer(&field("end")?, "end", u64::MAX, true)?;
    Ok(Grant {
        namespace,
        worker,
        incarnation,
        grant_id,
        start,
        end,
    })
}

pub(crate) fn type_name(value: &Unknown<'_>) -> &'static str {
    match value.get_type() {
        Ok(ValueType::Undefined) => "undefined",
        Ok(ValueType::Null) => "null",
        Ok(ValueType::Boolean) => "a boolean",
        Ok(ValueType::Number) => "a number",
        Ok(ValueType::String) => "a string",
        Ok(ValueType::Symbol) => "a symbol",
        Ok(ValueType::Object) => "an object",
        Ok(ValueType::Function) => "a function",
        Ok(ValueType::BigInt) => "a bigint",
        _ => "an unknown value",
    }
}

/// A non-negative integer given as a safe-integer number, a bigint, or (when
/// `text` allows) a decimal string.
pub(crate) fn integer(
    value: &Unknown<'_>,
    name: &str,
    max: u64,
    text: bool,
) -> Result<u64, GrantError> {
    let parsed = match value.get_type() {
        Ok(ValueType::Number) => {
            // SAFETY: the value's type was checked to be a number.
            let n = unsafe { value.cast::<f64>() }.map_err(|e| invalid(name, &e.reason))?;
            if !n.is_finite() || n.fract() != 0.0 || n < 0.0 || n > MAX_SAFE as f64 {
                return Err(invalid(
                    name,
                    &format!("must be a non-negative safe integer, got {n}"),
                ));
            }
            n as u64
        }
        Ok(ValueType::BigInt) => big_integer(value, name)?,
        Ok(ValueType::String) if text => big_integer(value, name)?,
        _ => {
            return Err(invalid(
                name,
                &format!("must be an integer, got {}", type_name(value)),
            ));
        }
    };
    if parsed > max {
        return Err(invalid(
            name,
            &format!("is {parsed}, at most {max} allowed"),
        ));
    }
    Ok(parsed)
}

/// A 64-bit value given as a bigint or a decimal string.
fn big_integer(value: &Unknown<'_>, name: &str) -> Result<u64, GrantError> {
    match value.get_type() {
        Ok(ValueType::BigInt) => {
            // SAFETY: the value's type was checked to be a bigint.
            let big = unsafe { value.cast::<BigInt>() }.map_err(|e| invalid(name, &e.reason))?;
            let (negative, v, lossless) = big.get_u64();
            if (negative && v != 0) || !lossless {
                return Err(invalid(name, "must fit in an unsigned 64-bit integer"));
            }
            Ok(v)
        }
        Ok(ValueType::String) => {
            let text = plain_string(value).unwrap_or_default();
            if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid(
                    name,
                    &format!("must be a decimal string, got {text:?}"),
                ));
            }
            text.parse::<u64>()
                .map_err(|_| invalid(name, "must fit in an unsigned 64-bit integer"))
        }
        _ => Err(invalid(
            name,
            &format!(
                "must be a bigint or a decimal string, got {}",
                type_name(value)
            ),
        )),
    }
}

/// The shape of a grant, for the TypeScript declarations. Answers are read
/// field by field by `parse_grant`, which names a missing or mistyped field.
#[napi(object, object_from_js = false, js_name = "Grant")]
pub struct GrantShape {
    pub namespace: String,
    pub worker: u32,
    /// The request's incarnation, echoed.
    #[napi(ts_type = "bigint | string")]
    pub incarnation: String,
    /// The authority's identifier for the grant (a fencing token).
    #[napi(ts_type = "number | bigint | string")]
    pub grant_id: String,
    /// First tick of the interval.
    #[napi(ts_type = "number | bigint")]
    pub start: f64,
    /// First tick after the interval (exclusive).
    #[napi(ts_type = "number | bigint")]
    pub end: f64,
}
