//! `nextId`, `nextIdBigInt` and `nextIds` as plain Node-API functions.
//!
//! A `#[napi]` method costs about ten times the ID itself: for every call the
//! napi-rs runtime unwraps `this`, checks its class in a global registry,
//! allocates a borrow scope and records the `&self` borrow in a global
//! mutex-guarded map, then releases all of it (profiled with perf: 85 % of a
//! call). These calls need none of that, so each generator instance gets its
//! own `nextId` / `nextIdBigInt` / `nextIds` functions, made with
//! `napi_create_function` and carrying an `Arc` of the core generator as
//! their data: a call reads that pointer, issues the ID and makes the string
//! or bigint, nothing else. The class methods of the same names stay (they
//! are what `index.d.ts` declares, and what `Generator.prototype.nextId.call`
//! reaches); the instance's own functions shadow them.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::Arc;

use napi::bindgen_prelude::{FromNapiValue, JsError, ToNapiValue, TypeName, Unknown};
use napi::{Env, ValueType, sys};

use crate::convert::count_from_js;
use crate::errors::{Result, from_napi, invalid, map_error};

/// The data of one hot function: the generator it issues from.
type Data = Arc<grantid::Generator>;

/// A JS value made on the JS thread, returned as is (the resolved value of
/// `Generator.start`).
pub struct RawValue(pub sys::napi_value);

impl TypeName for RawValue {
    fn type_name() -> &'static str {
        "Generator"
    }
    fn value_type() -> ValueType {
        ValueType::Object
    }
}

impl ToNapiValue for RawValue {
    unsafe fn to_napi_value(_env: sys::napi_env, value: Self) -> napi::Result<sys::napi_value> {
        Ok(value.0)
    }
}

fn check(status: sys::napi_status, what: &str) -> napi::Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(napi::Error::new(
            napi::Status::GenericFailure,
            format!("{what} failed (napi status {status})"),
        ))
    }
}

/// Defines `nextId`, `nextIdBigInt` and `nextIds` on `object` (a Generator instance),
/// non-enumerable, each holding a clone of `generator` until it is collected.
pub fn install(env: &Env, object: sys::napi_value, generator: &Data) -> napi::Result<()> {
    let functions: [(&str, sys::napi_callback); 3] = [
        ("nextId", Some(next_id_string)),
        ("nextIdBigInt", Some(next_id_bigint)),
        ("nextIds", Some(next_ids)),
    ];
    for (name, callback) in functions {
        let data = Box::into_raw(Box::new(Arc::clone(generator))).cast::<c_void>();
        let mut function = ptr::null_mut();
        // SAFETY: `env` is the live env of the current call on the JS thread;
        // `name` is valid for `name.len()` bytes; `data` is a leaked box that
        // the finalizer added below frees once.
        let made = unsafe {
            sys::napi_create_function(
                env.raw(),
                name.as_ptr().cast(),
                name.len() as isize,
                callback,
                data,
                &mut function,
            )
        };
        if let Err(e) = check(made, "napi_create_function") {
            // SAFETY: `data` came from `Box::into_raw` above and nothing else
            // owns it (the function was not made).
            drop(unsafe { Box::from_raw(data.cast::<Data>()) });
            return Err(e);
        }
        // SAFETY: `function` is a live function; `finalize` frees `data` once,
        // when the function is collected (or at env teardown).
        let finalizer = unsafe {
            sys::napi_add_finalizer(
                env.raw(),
                function,
                data,
                Some(finalize),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        if let Err(e) = check(finalizer, "napi_add_finalizer") {
            // SAFETY: no finalizer owns `data`: free it here (the function
            // may still exist but is not reachable from JS yet and never
            // runs).
            drop(unsafe { Box::from_raw(data.cast::<Data>()) });
            return Err(e);
        }
        let mut key = ptr::null_mut();
        // SAFETY: as above; `key` receives a new string.
        let made = unsafe {
            sys::napi_create_string_utf8(
                env.raw(),
                name.as_ptr().cast(),
                name.len() as isize,
                &mut key,
            )
        };
        check(made, "napi_create_string_utf8")?;
        let descriptor = sys::napi_property_descriptor {
            utf8name: ptr::null(),
            name: key,
            method: None,
            getter: None,
            setter: None,
            value: function,
            // Writable and configurable, like a class method; not enumerable.
            attributes: sys::PropertyAttributes::writable | sys::PropertyAttributes::configurable,
            data: ptr::null_mut(),
        };
        // SAFETY: `object` is a live object of this env; one descriptor.
        let defined = unsafe { sys::napi_define_properties(env.raw(), object, 1, &descriptor) };
        check(defined, "napi_define_properties")?;
    }
    Ok(())
}

unsafe extern "C" fn finalize(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the box leaked in `install`, finalized exactly once.
    drop(unsafe { Box::from_raw(data.cast::<Data>()) });
}

/// Runs `make` on the generator behind `info`'s data; a core error becomes
/// the addon's usual `Error` with `code`, a panic becomes an `Error` too
/// (never an unwind into Node).
///
/// # Safety
/// `env` and `info` are the arguments of a Node-API callback made by
/// `install`.
unsafe fn call(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    run: impl FnOnce(&grantid::Generator, sys::napi_value) -> Result<sys::napi_value>,
) -> sys::napi_value {
    let mut data = ptr::null_mut();
    let mut argc = 1usize;
    let mut arg = ptr::null_mut();
    // SAFETY: valid env and callback info; room for one argument.
    let status = unsafe {
        sys::napi_get_cb_info(env, info, &mut argc, &mut arg, ptr::null_mut(), &mut data)
    };
    let result = if status != sys::Status::napi_ok || data.is_null() {
        Err(invalid(
            "the generator function was called without its data",
        ))
    } else {
        // SAFETY: `data` is the `Data` box of this function, alive until the
        // function is finalized (it cannot be finalized while it runs).
        let generator = unsafe { &*data.cast::<Data>() };
        // `arg` is `undefined` when the caller passed nothing.
        catch_unwind(AssertUnwindSafe(|| run(generator, arg))).unwrap_or_else(|_| {
            Err(napi::Error::new(
                "GenericFailure".to_string(),
                "the generator call panicked".to_string(),
            ))
        })
    };
    match result {
        Ok(value) => value,
        Err(e) => {
            // SAFETY: valid env on the JS thread.
            unsafe { JsError::from(e).throw_into(env) };
            ptr::null_mut()
        }
    }
}

/// The decimal digits of `v` at the end of `buf`.
fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

fn make_string(env: sys::napi_env, id: u64) -> Result<sys::napi_value> {
    let mut buf = [0u8; 20];
    let digits = decimal(id, &mut buf);
    let mut out = ptr::null_mut();
    // SAFETY: valid env; `digits` is valid Latin-1 for its length.
    let status = unsafe {
        sys::napi_create_string_latin1(env, digits.as_ptr().cast(), digits.len() as isize, &mut out)
    };
    check(status, "napi_create_string_latin1").map_err(from_napi)?;
    Ok(out)
}

fn make_bigint(env: sys::napi_env, id: u64) -> Result<sys::napi_value> {
    let mut out = ptr::null_mut();
    // SAFETY: valid env.
    let status = unsafe { sys::napi_create_bigint_uint64(env, id, &mut out) };
    check(status, "napi_create_bigint_uint64").map_err(from_napi)?;
    Ok(out)
}

/// Strings pushed per `Array.prototype.push` call: one call per chunk
/// instead of one `napi_set_element` per ID (about 60 ns each), well below
/// any engine's argument limit.
const PUSH_CHUNK: usize = 4_096;

/// `n` IDs as an array of decimal strings; `n` is checked as the class
/// method checks it.
fn make_batch(
    env: sys::napi_env,
    g: &grantid::Generator,
    n: sys::napi_value,
) -> Result<sys::napi_value> {
    // SAFETY: `n` is a live value of this env (or `undefined`).
    let n = unsafe { Unknown::from_napi_value(env, n) }.map_err(from_napi)?;
    let n = count_from_js(&n, "n")?;
    let ids = g.next_ids(n as usize).map_err(map_error)?;
    let mut array = ptr::null_mut();
    let mut push = ptr::null_mut();
    // SAFETY: valid env; `array` is the array just made and `push` is read
    // from it by a NUL-terminated name.
    unsafe {
        check(
            sys::napi_create_array_with_length(env, 0, &mut array),
            "napi_create_array",
        )
        .map_err(from_napi)?;
        check(
            sys::napi_get_named_property(env, array, c"push".as_ptr(), &mut push),
            "napi_get_named_property",
        )
        .map_err(from_napi)?;
    }
    let mut values = Vec::with_capacity(ids.len().min(PUSH_CHUNK));
    for chunk in ids.chunks(PUSH_CHUNK) {
        values.clear();
        for id in chunk {
            values.push(make_string(env, *id)?);
        }
        let mut ignored = ptr::null_mut();
        // SAFETY: `push` is the array's own method, called on it with live
        // string values.
        let status = unsafe {
            sys::napi_call_function(
                env,
                array,
                push,
                values.len(),
                values.as_ptr(),
                &mut ignored,
            )
        };
        check(status, "Array.prototype.push").map_err(from_napi)?;
    }
    Ok(array)
}

unsafe extern "C" fn next_id_string(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by Node as the callback `install` registered.
    unsafe {
        call(env, info, |g, _| {
            make_string(env, g.next_id().map_err(map_error)?)
        })
    }
}

unsafe extern "C" fn next_id_bigint(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by Node as the callback `install` registered.
    unsafe {
        call(env, info, |g, _| {
            make_bigint(env, g.next_id().map_err(map_error)?)
        })
    }
}

unsafe extern "C" fn next_ids(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: called by Node as the callback `install` registered.
    unsafe { call(env, info, |g, n| make_batch(env, g, n)) }
}

#[cfg(test)]
mod tests {
    use super::decimal;

    #[test]
    fn decimal_digits_match_to_string() {
        let mut buf = [0u8; 20];
        for v in [
            0,
            1,
            9,
            10,
            4_096,
            1_234_567_890_123,
            i64::MAX as u64,
            u64::MAX,
        ] {
            assert_eq!(decimal(v, &mut buf), v.to_string().as_bytes());
        }
    }
}
