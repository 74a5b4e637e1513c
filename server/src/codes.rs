//! The one table from grantid error kinds to gRPC status codes
//! (docs/SERVICE.md, "Status codes"). The message keeps the core's text and
//! the `grantid-code` response metadata carries the kind's stable code
//! (`GRANT_EXHAUSTED`, ...), so a client can tell the kinds apart even where
//! two share a gRPC code.

use grantid::{Error, ErrorKind};
use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

/// The metadata key that carries the grantid error code.
pub const CODE_METADATA: &str = "grantid-code";

/// The gRPC code of a grantid error kind.
///
/// * `InvalidArgument` -> `INVALID_ARGUMENT`: the request is wrong; do not
///   retry it unchanged.
/// * `CapacityExhausted` -> `RESOURCE_EXHAUSTED`: no sequence left within
///   the call's deadline; retry after a short back-off.
/// * `GrantExhausted` -> `FAILED_PRECONDITION`: the layout's timestamp field
///   is used up; only a new namespace helps, no retry will.
/// * `Unavailable`, `NotYetValid`, `ClockRollback`, `LeaseLost`, `Closed` ->
///   `UNAVAILABLE`: this server holds no usable grant right now (authority
///   uncertain, clock stepped back, worker lost and being replaced, server
///   draining); retry, on another server if there is one.
pub fn code_of(kind: ErrorKind) -> Code {
    match kind {
        ErrorKind::InvalidArgument => Code::InvalidArgument,
        ErrorKind::CapacityExhausted => Code::ResourceExhausted,
        ErrorKind::GrantExhausted => Code::FailedPrecondition,
        ErrorKind::Unavailable
        | ErrorKind::NotYetValid
        | ErrorKind::ClockRollback
        | ErrorKind::LeaseLost
        | ErrorKind::Closed => Code::Unavailable,
        // A kind added to the core later: uncertain until mapped here.
        _ => Code::Unavailable,
    }
}

/// The status of a grantid error: its gRPC code, the core's message, and
/// the `grantid-code` metadata.
pub fn status_of(e: &Error) -> Status {
    let mut status = Status::new(code_of(e.kind()), e.to_string());
    status
        .metadata_mut()
        .insert(CODE_METADATA, MetadataValue::from_static(e.code()));
    status
}

/// An `INVALID_ARGUMENT` status with the grantid code.
pub fn invalid(message: impl Into<String>) -> Status {
    status_of(&Error::new(ErrorKind::InvalidArgument, message.into()))
}

/// The gRPC code of a handler's result.
pub fn result_code<T>(r: &Result<T, Status>) -> Code {
    r.as_ref().map_or_else(|s| s.code(), |_| Code::Ok)
}

/// The status of a panic caught at the RPC boundary (a bug: reported, never
/// propagated).
pub fn internal_panic(method: &str) -> Status {
    log::error!(target: "grantid_server", "event=handler_panicked method={method}");
    Status::internal(format!("{method}: internal error (a handler panicked)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_documented_code() {
        let table: Vec<(ErrorKind, Code)> = ErrorKind::ALL
            .into_iter()
            .map(|k| (k, code_of(k)))
            .collect();
        assert_eq!(
            table,
            [
                (ErrorKind::NotYetValid, Code::Unavailable),
                (ErrorKind::GrantExhausted, Code::FailedPrecondition),
                (ErrorKind::Unavailable, Code::Unavailable),
                (ErrorKind::CapacityExhausted, Code::ResourceExhausted),
                (ErrorKind::ClockRollback, Code::Unavailable),
                (ErrorKind::LeaseLost, Code::Unavailable),
                (ErrorKind::InvalidArgument, Code::InvalidArgument),
                (ErrorKind::Closed, Code::Unavailable),
            ]
        );
    }

    #[test]
    fn the_status_keeps_the_message_and_the_code() {
        let s = status_of(&Error::new(ErrorKind::GrantExhausted, "field used up"));
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert_eq!(s.message(), "GRANT_EXHAUSTED: field used up");
        assert_eq!(s.metadata().get(CODE_METADATA).unwrap(), "GRANT_EXHAUSTED");
    }
}
