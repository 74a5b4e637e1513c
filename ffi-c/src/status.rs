//! `grantid_status`: one stable number per error kind, and its message.

use std::ffi::c_char;

use grantid::ErrorKind;

/// What a call did. Numbers are stable and append-only: `GRANTID_OK` is 0,
/// then one per error kind in the order of docs/DESIGN.md section 4 (the core's
/// `ErrorKind::ALL`), then the two statuses of the C boundary itself.
///
/// Every function of this library that can fail returns one; a status other
/// than `GRANTID_OK` means nothing was written through the output pointers.
/// `grantid_last_error_message()` then gives the detailed message.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum grantid_status {
    /// Success.
    GRANTID_OK = 0,
    /// The clock is before the committed grant's start.
    GRANTID_NOT_YET_VALID = 1,
    /// The committed grants have run out.
    GRANTID_GRANT_EXHAUSTED = 2,
    /// No committed grant and the authority is uncertain.
    GRANTID_UNAVAILABLE = 3,
    /// No sequence number was left within the call's deadline.
    GRANTID_CAPACITY_EXHAUSTED = 4,
    /// The clock stepped back further than `max_drift_ms`.
    GRANTID_CLOCK_ROLLBACK = 5,
    /// The authority refused ownership of the worker; no new grant yet.
    GRANTID_LEASE_LOST = 6,
    /// A bad layout, count, ID, string or option.
    GRANTID_INVALID_ARGUMENT = 7,
    /// The generator was closed.
    GRANTID_CLOSED = 8,
    /// A required pointer argument was NULL.
    GRANTID_NULL_ARGUMENT = 9,
    /// The library panicked (a bug); the call had no effect on the caller's
    /// outputs. The generator may still be used.
    GRANTID_PANIC = 10,
}

impl grantid_status {
    /// Every status, in numeric order.
    pub(crate) const ALL: [grantid_status; 11] = [
        grantid_status::GRANTID_OK,
        grantid_status::GRANTID_NOT_YET_VALID,
        grantid_status::GRANTID_GRANT_EXHAUSTED,
        grantid_status::GRANTID_UNAVAILABLE,
        grantid_status::GRANTID_CAPACITY_EXHAUSTED,
        grantid_status::GRANTID_CLOCK_ROLLBACK,
        grantid_status::GRANTID_LEASE_LOST,
        grantid_status::GRANTID_INVALID_ARGUMENT,
        grantid_status::GRANTID_CLOSED,
        grantid_status::GRANTID_NULL_ARGUMENT,
        grantid_status::GRANTID_PANIC,
    ];

    /// The status of an error kind of the core.
    pub fn from_kind(kind: ErrorKind) -> grantid_status {
        match kind {
            ErrorKind::NotYetValid => grantid_status::GRANTID_NOT_YET_VALID,
            ErrorKind::GrantExhausted => grantid_status::GRANTID_GRANT_EXHAUSTED,
            ErrorKind::Unavailable => grantid_status::GRANTID_UNAVAILABLE,
            ErrorKind::CapacityExhausted => grantid_status::GRANTID_CAPACITY_EXHAUSTED,
            ErrorKind::ClockRollback => grantid_status::GRANTID_CLOCK_ROLLBACK,
            ErrorKind::LeaseLost => grantid_status::GRANTID_LEASE_LOST,
            ErrorKind::InvalidArgument => grantid_status::GRANTID_INVALID_ARGUMENT,
            ErrorKind::Closed => grantid_status::GRANTID_CLOSED,
            // A kind added to the core needs a new status appended after
            // GRANTID_PANIC; the test below fails until it has one.
            _ => grantid_status::GRANTID_UNAVAILABLE,
        }
    }

    /// The static, NUL-terminated message of the status.
    pub fn message(self) -> &'static std::ffi::CStr {
        match self {
            grantid_status::GRANTID_OK => c"success",
            grantid_status::GRANTID_NOT_YET_VALID => c"the clock is before the grant's start",
            grantid_status::GRANTID_GRANT_EXHAUSTED => c"the committed grants have run out",
            grantid_status::GRANTID_UNAVAILABLE => {
                c"no committed grant and the authority is uncertain"
            }
            grantid_status::GRANTID_CAPACITY_EXHAUSTED => {
                c"no sequence number left within the deadline"
            }
            grantid_status::GRANTID_CLOCK_ROLLBACK => {
                c"the clock stepped back further than max_drift_ms"
            }
            grantid_status::GRANTID_LEASE_LOST => {
                c"the authority refused the worker; no new grant yet"
            }
            grantid_status::GRANTID_INVALID_ARGUMENT => {
                c"invalid argument (layout, count, ID, string or option)"
            }
            grantid_status::GRANTID_CLOSED => c"the generator is closed",
            grantid_status::GRANTID_NULL_ARGUMENT => c"a required pointer argument was NULL",
            grantid_status::GRANTID_PANIC => c"internal error: the library panicked",
        }
    }
}

/// The static message of a status: never NULL, never to be freed. A number
/// that is no status gives `"unknown status"`.
#[unsafe(no_mangle)]
pub extern "C" fn grantid_status_message(status: u32) -> *const c_char {
    grantid_status::ALL
        .get(status as usize)
        .map_or(c"unknown status", |s| s.message())
        .as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_follow_the_core_kinds() {
        assert_eq!(ErrorKind::ALL.len(), 8, "append a status for the new kind");
        for (i, kind) in ErrorKind::ALL.into_iter().enumerate() {
            assert_eq!(
                grantid_status::from_kind(kind) as u32,
                i as u32 + 1,
                "{kind}"
            );
        }
        for (i, s) in grantid_status::ALL.into_iter().enumerate() {
            assert_eq!(s as u32, i as u32);
        }
    }

    #[test]
    fn every_status_has_a_message() {
        for s in grantid_status::ALL {
            assert!(!s.message().is_empty());
        }
        // SAFETY: grantid_status_message returns a static NUL-terminated string.
        let unknown = unsafe { std::ffi::CStr::from_ptr(grantid_status_message(999)) };
        assert_eq!(unknown, c"unknown status");
    }
}
