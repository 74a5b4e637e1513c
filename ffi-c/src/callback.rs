//! The C grant callback wrapped as a `grantid::GrantSource`, and the
//! `user_data` it shares with the other callbacks.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::Arc;

use grantid::{Grant, GrantError, GrantRequest, GrantSource, LeaseLostEvent};

use crate::guard::c_string;
use crate::layout::grantid_layout;

/// Size of `grantid_grant.reason`, NUL included.
pub const GRANTID_REASON_LEN: usize = 256;

/// Grant callback return value: `*out` holds a grant. The generator checks
/// it (namespace, incarnation, worker range, interval); a grant that fails
/// the check is never used and counts as unavailable.
pub const GRANTID_GRANT_OK: c_int = 0;
/// Grant callback return value: the authority positively refused (the worker
/// belongs to someone else, or no worker is free). Issuing from the worker
/// stops at once and `on_lease_lost` is called.
pub const GRANTID_GRANT_LOST: c_int = 1;
/// Grant callback return value: uncertain (timeout, dropped connection).
/// The generator keeps issuing inside its committed grants and retries with
/// backoff. Any value other than the three constants counts as this.
pub const GRANTID_GRANT_UNAVAILABLE: c_int = 2;

/// What the generator asks the authority for (docs/DESIGN.md section 2).
/// Everything it points to is valid only during the callback.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct grantid_grant_request {
    /// The namespace, NUL-terminated (spelled `namespace_` so the header
    /// also compiles as C++).
    pub namespace_: *const c_char,
    /// The asking generator's incarnation (fresh random 64 bits per
    /// activation); the grant must carry it back.
    pub incarnation: u64,
    /// Increases per request of one incarnation; a retry reuses it, and the
    /// authority should answer a retry with the recorded grant.
    pub request_id: u64,
    /// True to renew `worker`; false for any free worker.
    pub has_worker: bool,
    /// The worker to renew, when `has_worker`.
    pub worker: u32,
    /// The grant may not start before this tick.
    pub not_before: u64,
    /// The generator's clock in ticks (an authority may use its own).
    pub now: u64,
    /// Wanted length of the interval in ticks.
    pub duration: u64,
    /// The namespace's layout (to cap `end` at `2^timestamp_bits`).
    pub layout: grantid_layout,
}

/// The authority's answer, filled by the grant callback. The generator
/// zeroes it before each call.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct grantid_grant {
    /// The namespace, NUL-terminated (for example `request->namespace_` or a
    /// static string). Read right after the callback returns; NULL makes the
    /// grant invalid.
    pub namespace_: *const c_char,
    /// The worker value the IDs will carry.
    pub worker: u32,
    /// The incarnation of the request.
    pub incarnation: u64,
    /// The authority's identifier for the grant (reported only).
    pub grant_id: u64,
    /// First tick of the interval.
    pub start: u64,
    /// First tick after the interval (exclusive).
    pub end: u64,
    /// Optional reason for `GRANTID_GRANT_LOST` / `GRANTID_GRANT_UNAVAILABLE`,
    /// NUL-terminated (read up to its full size if there is no NUL).
    pub reason: [c_char; GRANTID_REASON_LEN],
}

/// The authority: returns `GRANTID_GRANT_OK` with `*out` filled,
/// `GRANTID_GRANT_LOST`, or `GRANTID_GRANT_UNAVAILABLE` (any other value
/// counts as unavailable). Runs on the generator's renewal thread, one call
/// at a time, never on the `grantid_next_id` path; `grantid_generator_new`
/// (and the first call in a `fork()` child) waits for its first answer. It
/// may block; it must not call `grantid_generator_close` or `_free` on its
/// own generator.
///
/// No callback may unwind: a C++ exception, or a `longjmp`, that leaves a
/// callback passes through Rust frames, which is undefined behaviour (the
/// process may abort, or go on with a generator in a broken state). In C++
/// wrap the body in `try { ... } catch (...) { return
/// GRANTID_GRANT_UNAVAILABLE; }` (and catch everything in the release,
/// lease-lost and free callbacks too); C code has nothing to do.
#[allow(non_camel_case_types)]
pub type grantid_grant_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        request: *const grantid_grant_request,
        out: *mut grantid_grant,
    ) -> c_int,
>;

/// Optional: gives the worker back (best effort) when the generator
/// closes. Runs on the thread calling `grantid_generator_close` / `_free`;
/// it can overlap a grant call that was still blocked at close. It must not
/// unwind (see `grantid_grant_fn`).
#[allow(non_camel_case_types)]
pub type grantid_release_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, last: *const grantid_grant)>;

/// Optional: told once per confirmed loss of the worker, after issuing from
/// it stopped. Runs on the renewal thread; `reason` is valid during the call.
/// It must not unwind (see `grantid_grant_fn`).
#[allow(non_camel_case_types)]
pub type grantid_lease_lost_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, worker: u32, reason: *const c_char)>;

/// Optional: frees `user_data`. Called exactly once, when no callback can
/// run any more (see `grantid_generator_new`).
#[allow(non_camel_case_types)]
pub type grantid_free_fn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

/// `user_data` and its free function; frees it when the last holder drops.
#[derive(Debug)]
pub(crate) struct UserData {
    ptr: *mut c_void,
    free: grantid_free_fn,
}

// SAFETY: the header requires `user_data` and every callback to be usable
// from any thread (they run on the generator's renewal thread and on the
// threads that close or free it); the library only passes the pointer on.
unsafe impl Send for UserData {}
// SAFETY: as above; the library never dereferences the pointer itself.
unsafe impl Sync for UserData {}

impl UserData {
    pub(crate) fn new(ptr: *mut c_void, free: grantid_free_fn) -> Arc<UserData> {
        Arc::new(UserData { ptr, free })
    }
}

impl Drop for UserData {
    fn drop(&mut self) {
        if let Some(free) = self.free {
            // SAFETY: the caller handed `ptr` and `free` together; this runs
            // once, when the last holder (source or lease-lost callback) is gone.
            unsafe { free(self.ptr) };
        }
    }
}

/// The C callbacks as a grant source.
#[derive(Debug)]
pub(crate) struct CSource {
    pub grant: unsafe extern "C" fn(
        *mut c_void,
        *const grantid_grant_request,
        *mut grantid_grant,
    ) -> c_int,
    pub release: grantid_release_fn,
    pub user: Arc<UserData>,
}

fn zeroed_grant() -> grantid_grant {
    grantid_grant {
        namespace_: std::ptr::null(),
        worker: 0,
        incarnation: 0,
        grant_id: 0,
        start: 0,
        end: 0,
        reason: [0; GRANTID_REASON_LEN],
    }
}

fn reason(out: &grantid_grant, default: &str) -> String {
    let bytes: Vec<u8> = out
        .reason
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    if bytes.is_empty() {
        default.to_owned()
    } else {
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl GrantSource for CSource {
    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        let namespace = CString::new(request.namespace.as_str())
            .map_err(|_| GrantError::Unavailable("the namespace contains a NUL byte".into()))?;
        let c_request = grantid_grant_request {
            namespace_: namespace.as_ptr(),
            incarnation: request.incarnation,
            request_id: request.request_id,
            has_worker: request.worker.is_some(),
            worker: request.worker.unwrap_or(0),
            not_before: request.not_before,
            now: request.now,
            duration: request.duration,
            layout: request.layout.into(),
        };
        let mut out = zeroed_grant();
        // SAFETY: `grant` is the caller's callback; the request and the out
        // struct are valid for the call, and `user_data` is theirs.
        let rc = unsafe { (self.grant)(self.user.ptr, &c_request, &mut out) };
        match rc {
            GRANTID_GRANT_OK => {
                if out.namespace_.is_null() {
                    return Err(GrantError::Invalid(
                        "the callback left grant.namespace_ NULL".into(),
                    ));
                }
                // SAFETY: the callback promises a NUL-terminated namespace that
                // stays valid until it has been copied, which is now.
                let ns = unsafe { CStr::from_ptr(out.namespace_) };
                Ok(Grant {
                    namespace: ns.to_string_lossy().into_owned(),
                    worker: out.worker,
                    incarnation: out.incarnation,
                    grant_id: out.grant_id,
                    start: out.start,
                    end: out.end,
                })
            }
            GRANTID_GRANT_LOST => Err(GrantError::Lost(reason(
                &out,
                "the grant callback returned GRANTID_GRANT_LOST",
            ))),
            GRANTID_GRANT_UNAVAILABLE => Err(GrantError::Unavailable(reason(
                &out,
                "the grant callback returned GRANTID_GRANT_UNAVAILABLE",
            ))),
            other => Err(GrantError::Unavailable(format!(
                "the grant callback returned {other}, which is not GRANTID_GRANT_OK (0), \
                 GRANTID_GRANT_LOST (1) or GRANTID_GRANT_UNAVAILABLE (2)"
            ))),
        }
    }

    fn release(&self, last: &Grant) {
        let Some(release) = self.release else {
            return;
        };
        let namespace = c_string(&last.namespace);
        let c_last = grantid_grant {
            namespace_: namespace.as_ptr(),
            worker: last.worker,
            incarnation: last.incarnation,
            grant_id: last.grant_id,
            start: last.start,
            end: last.end,
            reason: [0; GRANTID_REASON_LEN],
        };
        // SAFETY: `release` is the caller's callback; `c_last` and the
        // namespace it points to are valid for the call.
        unsafe { release(self.user.ptr, &c_last) };
    }
}

/// The `on_lease_lost` callback as the core's closure.
pub(crate) fn lease_lost(
    callback: unsafe extern "C" fn(*mut c_void, u32, *const c_char),
    user: Arc<UserData>,
) -> impl Fn(&LeaseLostEvent) + Send + Sync + 'static {
    move |event: &LeaseLostEvent| {
        let why = c_string(&event.reason);
        // SAFETY: `callback` is the caller's; `why` is valid for the call and
        // `user_data` is theirs.
        unsafe { callback(user.ptr, event.worker, why.as_ptr()) };
    }
}
