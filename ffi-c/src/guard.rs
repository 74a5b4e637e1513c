//! The panic boundary every export runs inside, NULL checks, and the
//! per-thread last error message.

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::status::grantid_status;

/// Why a call failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// An error of the core (or a conversion reported with its kind).
    Core(grantid::Error),
    /// A required pointer was NULL: the argument's name.
    Null(&'static str),
}

impl From<grantid::Error> for Failure {
    fn from(e: grantid::Error) -> Failure {
        Failure::Core(e)
    }
}

/// An `InvalidArgument` failure with a message.
pub(crate) fn invalid(message: impl Into<String>) -> Failure {
    Failure::Core(grantid::Error::new(
        grantid::ErrorKind::InvalidArgument,
        message.into(),
    ))
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Makes a C string of `text`, dropping interior NUL bytes.
pub(crate) fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', "")).unwrap_or_default()
}

fn set_last_error(message: &str) {
    // During thread teardown the slot may be gone; the status still says it.
    let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = c_string(message));
}

/// Runs `body` inside a panic boundary and turns its outcome into a status,
/// recording the message of a failure for `grantid_last_error_message`.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), Failure>) -> grantid_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => grantid_status::GRANTID_OK,
        Ok(Err(Failure::Core(e))) => {
            set_last_error(&e.to_string());
            grantid_status::from_kind(e.kind())
        }
        Ok(Err(Failure::Null(name))) => {
            set_last_error(&format!("NULL_ARGUMENT: {name} must not be NULL"));
            grantid_status::GRANTID_NULL_ARGUMENT
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            set_last_error(&format!("PANIC: {what}"));
            grantid_status::GRANTID_PANIC
        }
    }
}

/// Borrows `*ptr`, or fails with `NULL_ARGUMENT` naming the argument.
///
/// # Safety
///
/// `ptr` is NULL or points to a valid `T` that outlives `'a` and is not
/// mutated elsewhere during `'a`.
pub(crate) unsafe fn arg<'a, T>(ptr: *const T, name: &'static str) -> Result<&'a T, Failure> {
    // SAFETY: the caller guarantees that a non-NULL `ptr` is valid for 'a.
    unsafe { ptr.as_ref() }.ok_or(Failure::Null(name))
}

/// Fails with `NULL_ARGUMENT` when an output pointer is NULL. Outputs are
/// checked before any work, and written only after it succeeded.
pub(crate) fn out_arg<T>(ptr: *mut T, name: &'static str) -> Result<*mut T, Failure> {
    if ptr.is_null() {
        Err(Failure::Null(name))
    } else {
        Ok(ptr)
    }
}

/// The message of the most recent failed call on the calling thread (its
/// status code, a colon, and what exactly failed), or `""` if no call on
/// this thread has failed yet. Successful calls leave it as it was, like
/// `errno`. The string belongs to the library and stays valid until the next
/// failing call on the same thread; copy it to keep it. Never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn grantid_last_error_message() -> *const c_char {
    catch_unwind(|| {
        LAST_ERROR
            .try_with(|slot| slot.borrow().as_ptr())
            .unwrap_or(c"".as_ptr())
    })
    .unwrap_or(c"".as_ptr())
}
