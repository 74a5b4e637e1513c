//! `grantid_status`: one stable number per error kind, and its message.

use std::ffi::{CStr, CString, c_char};
use std::sync::OnceLock;

use grantid::ErrorKind;

/// What a call did. Numbers are stable and append-only: `GRANTID_OK` is 0,
/// then one per error kind in the order of docs/DESIGN.md section 4 (the core's
/// `ErrorKind::ALL`), then the two statuses of the C boundary itself. A
/// kind's doc and message are the core's `ErrorKind::description()`.
///
/// Every function of this library that can fail returns one; a status other
/// than `GRANTID_OK` means nothing was written through the output pointers.
/// `grantid_last_error_message()` then gives the detailed message.
// cbindgen reads only literal docs: the kinds' docs below are copies of the
// core's sentences, and `tests::kinds_are_described_by_the_core` fails when
// one differs.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum grantid_status {
    /// Success.
    GRANTID_OK = 0,
    /// The clock is before the committed grant's start.
    GRANTID_NOT_YET_VALID = 1,
    /// The timestamp field is used up: move to a new namespace.
    GRANTID_GRANT_EXHAUSTED = 2,
    /// No committed grant covers the clock and the authority is uncertain.
    GRANTID_UNAVAILABLE = 3,
    /// No sequence number was left within the call's deadline.
    GRANTID_CAPACITY_EXHAUSTED = 4,
    /// The clock stepped back further than `max_drift_ms` for longer than the
    /// call's deadline.
    GRANTID_CLOCK_ROLLBACK = 5,
    /// The authority refused ownership of the worker; no new grant yet.
    GRANTID_LEASE_LOST = 6,
    /// A bad layout, count, ID, grant or configuration.
    GRANTID_INVALID_ARGUMENT = 7,
    /// The generator was closed (or forked and not re-activated).
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

    /// The static, NUL-terminated message of the status: for an error
    /// kind, the core's `ErrorKind::description()` as a message.
    pub fn message(self) -> &'static CStr {
        let kind = match self {
            grantid_status::GRANTID_OK => return c"success",
            grantid_status::GRANTID_NULL_ARGUMENT => {
                return c"a required pointer argument was NULL";
            }
            grantid_status::GRANTID_PANIC => return c"internal error: the library panicked",
            grantid_status::GRANTID_NOT_YET_VALID => ErrorKind::NotYetValid,
            grantid_status::GRANTID_GRANT_EXHAUSTED => ErrorKind::GrantExhausted,
            grantid_status::GRANTID_UNAVAILABLE => ErrorKind::Unavailable,
            grantid_status::GRANTID_CAPACITY_EXHAUSTED => ErrorKind::CapacityExhausted,
            grantid_status::GRANTID_CLOCK_ROLLBACK => ErrorKind::ClockRollback,
            grantid_status::GRANTID_LEASE_LOST => ErrorKind::LeaseLost,
            grantid_status::GRANTID_INVALID_ARGUMENT => ErrorKind::InvalidArgument,
            grantid_status::GRANTID_CLOSED => ErrorKind::Closed,
        };
        static KINDS: OnceLock<Vec<CString>> = OnceLock::new();
        let messages = KINDS.get_or_init(|| {
            ErrorKind::ALL
                .iter()
                .map(|k| as_message(k.description()))
                .collect()
        });
        ErrorKind::ALL
            .iter()
            .position(|k| *k == kind)
            .and_then(|i| messages.get(i))
            .map_or(c"unknown status", CString::as_c_str)
    }
}

/// A kind's sentence as a C message, like the others here: lower case, no
/// final period (`"the clock is before the committed grant's start"`).
fn as_message(description: &str) -> CString {
    let mut chars = description.chars();
    let first = chars.next().map(|c| c.to_lowercase().to_string());
    let rest = chars.as_str().strip_suffix('.').unwrap_or(chars.as_str());
    // The core's sentences hold no NUL (its tests check).
    CString::new(first.unwrap_or_default() + rest).unwrap_or_default()
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

    /// What a kind's message must be: its sentence in lower case, without
    /// the final period.
    fn expected_message(description: &str) -> String {
        let mut chars = description.chars();
        let first = chars.next().map(|c| c.to_lowercase().to_string());
        let rest = chars.as_str().strip_suffix('.').unwrap_or(chars.as_str());
        first.unwrap_or_default() + rest
    }

    #[test]
    fn kinds_are_described_by_the_core() {
        let header = include_str!("../include/grantid.h");
        let lines: Vec<&str> = header.lines().map(str::trim).collect();
        for kind in ErrorKind::ALL {
            let status = grantid_status::from_kind(kind);
            let at = lines
                .iter()
                .position(|l| l.starts_with(&format!("{status:?} = ")))
                .unwrap_or_else(|| panic!("{status:?} is in include/grantid.h"));
            let doc: Vec<&str> = lines[..at]
                .iter()
                .rev()
                .map_while(|l| l.strip_prefix("// "))
                .collect();
            let doc = doc.into_iter().rev().collect::<Vec<_>>().join(" ");
            assert_eq!(doc, kind.description(), "the doc of {status:?}");
            assert_eq!(
                status.message().to_str().unwrap(),
                expected_message(kind.description()),
                "grantid_status_message({status:?})"
            );
        }
    }
}
