//! One error taxonomy for every surface (docs/DESIGN.md section 4).

use std::borrow::Cow;
use std::fmt;

/// Declares [`ErrorKind`] with one sentence per kind, written once: the
/// variant's doc and [`ErrorKind::description`], from which the C status's
/// doc and message and the Python class's docstring are made.
macro_rules! error_kinds {
    ($($kind:ident: $description:literal,)+) => {
        /// What went wrong, in the same kinds for Rust, C, Python and Node.
        #[non_exhaustive]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorKind {
            $(#[doc = $description] $kind,)+
        }

        impl ErrorKind {
            /// What the kind means, one sentence (the kind's doc above):
            /// `"The clock is before the committed grant's start."`.
            pub const fn description(self) -> &'static str {
                match self {
                    $(ErrorKind::$kind => $description,)+
                }
            }
        }
    };
}

error_kinds! {
    NotYetValid: "The clock is before the committed grant's start.",
    GrantExhausted: "The timestamp field is used up: move to a new namespace.",
    Unavailable: "No committed grant covers the clock and the authority is uncertain.",
    CapacityExhausted: "No sequence number was left within the call's deadline.",
    ClockRollback: "The clock stepped back further than `max_drift_ms` for longer than the \
        call's deadline.",
    LeaseLost: "The authority refused ownership of the worker; no new grant yet.",
    InvalidArgument: "A bad layout, count, ID, grant or configuration.",
    Closed: "The generator was closed (or forked and not re-activated).",
}

impl ErrorKind {
    /// Every kind, in the order of their stable C status numbers (1..).
    pub const ALL: [ErrorKind; 8] = [
        ErrorKind::NotYetValid,
        ErrorKind::GrantExhausted,
        ErrorKind::Unavailable,
        ErrorKind::CapacityExhausted,
        ErrorKind::ClockRollback,
        ErrorKind::LeaseLost,
        ErrorKind::InvalidArgument,
        ErrorKind::Closed,
    ];

    /// The stable code string, as used by Node (`err.code`) and Python
    /// (`exc.code`): `"GRANT_EXHAUSTED"`, ...
    pub const fn code(self) -> &'static str {
        match self {
            ErrorKind::NotYetValid => "NOT_YET_VALID",
            ErrorKind::GrantExhausted => "GRANT_EXHAUSTED",
            ErrorKind::Unavailable => "UNAVAILABLE",
            ErrorKind::CapacityExhausted => "CAPACITY_EXHAUSTED",
            ErrorKind::ClockRollback => "CLOCK_ROLLBACK",
            ErrorKind::LeaseLost => "LEASE_LOST",
            ErrorKind::InvalidArgument => "INVALID_ARGUMENT",
            ErrorKind::Closed => "CLOSED",
        }
    }

    /// The kind's name in the design (`"GrantExhausted"`), also the Python
    /// exception class name.
    pub const fn name(self) -> &'static str {
        match self {
            ErrorKind::NotYetValid => "NotYetValid",
            ErrorKind::GrantExhausted => "GrantExhausted",
            ErrorKind::Unavailable => "Unavailable",
            ErrorKind::CapacityExhausted => "CapacityExhausted",
            ErrorKind::ClockRollback => "ClockRollback",
            ErrorKind::LeaseLost => "LeaseLost",
            ErrorKind::InvalidArgument => "InvalidArgument",
            ErrorKind::Closed => "Closed",
        }
    }

    /// Parses a code string (`"LEASE_LOST"`) or a kind name (`"LeaseLost"`).
    pub fn from_code(code: &str) -> Option<ErrorKind> {
        ErrorKind::ALL
            .into_iter()
            .find(|k| k.code() == code || k.name() == code)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A grantid error: a kind plus a message saying exactly what failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: Cow<'static, str>,
}

impl Error {
    /// Makes an error of `kind` with a message.
    pub fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<Cow<'static, str>>) -> Error {
        Error::new(ErrorKind::InvalidArgument, message)
    }

    /// The kind of the error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The stable code string of the kind (`"GRANT_EXHAUSTED"`).
    pub fn code(&self) -> &'static str {
        self.kind.code()
    }

    /// The human-readable message, without the code.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.code(), self.message)
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable_and_round_trip() {
        let codes: Vec<_> = ErrorKind::ALL.iter().map(|k| k.code()).collect();
        assert_eq!(
            codes,
            [
                "NOT_YET_VALID",
                "GRANT_EXHAUSTED",
                "UNAVAILABLE",
                "CAPACITY_EXHAUSTED",
                "CLOCK_ROLLBACK",
                "LEASE_LOST",
                "INVALID_ARGUMENT",
                "CLOSED"
            ]
        );
        for k in ErrorKind::ALL {
            assert_eq!(ErrorKind::from_code(k.code()), Some(k));
            assert_eq!(ErrorKind::from_code(k.name()), Some(k));
        }
        assert_eq!(ErrorKind::from_code("nope"), None);
        let e = Error::new(ErrorKind::Closed, "gone");
        assert_eq!(e.to_string(), "CLOSED: gone");
        assert_eq!(e.code(), "CLOSED");
    }

    #[test]
    fn every_kind_has_one_sentence() {
        for k in ErrorKind::ALL {
            let d = k.description();
            assert!(d.starts_with(char::is_uppercase), "{k}: {d:?}");
            assert!(
                d.ends_with('.') && !d[..d.len() - 1].contains(". "),
                "{k}: {d:?}"
            );
            // It becomes a C string (grantid_status_message).
            assert!(!d.contains('\0'), "{k}: {d:?}");
        }
        assert_eq!(
            ErrorKind::ClockRollback.description(),
            "The clock stepped back further than `max_drift_ms` for longer than the call's \
             deadline."
        );
    }
}
