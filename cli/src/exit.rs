//! How a run ends: one exit status per error kind, a quiet 0 when the reader
//! of standard output went away (`grantid next | head -1`), never a panic.

use std::io;
use std::process::ExitCode;

use grantid::{Error, ErrorKind};

/// The exit statuses, printed at the end of `grantid --help` (and in
/// docs/CLI.md).
pub const HELP: &str = "\
Exit status:
  0   success, also when the reader of standard output closed it early
  1   standard output or input failed (other than a closed pipe)
  2   bad command line (usage)
  11  NOT_YET_VALID       the clock is before the committed grant's start
  12  GRANT_EXHAUSTED     the timestamp field is used up: use a new namespace
  13  UNAVAILABLE         no committed grant and the authority is uncertain
  14  CAPACITY_EXHAUSTED  no sequence number was left within the deadline
  15  CLOCK_ROLLBACK      the clock stepped back for longer than the deadline
  16  LEASE_LOST          the authority refused the worker; no new grant yet
  17  INVALID_ARGUMENT    a bad layout, count, ID or authority URL
  18  CLOSED              the generator was closed";

/// Why a subcommand stopped.
#[derive(Debug)]
pub enum Failure {
    /// An error of the core or an authority: exits with its kind's status.
    Grant(Error),
    /// Reading or writing a standard stream failed.
    Io(io::Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Grant(e)
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        Failure::Io(e)
    }
}

/// The exit status of an error kind: 10 plus its stable C status number
/// (the kind's place in `ErrorKind::ALL`, which only grows at the end).
pub fn status_of(kind: ErrorKind) -> u8 {
    let index = ErrorKind::ALL.iter().position(|k| *k == kind);
    index.map_or(1, |i| 11 + i as u8)
}

/// Prints the failure (if any) to standard error and gives the exit status.
pub fn report(result: Result<(), Failure>) -> ExitCode {
    let (status, message) = match result {
        Ok(()) => return ExitCode::SUCCESS,
        Err(Failure::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => {
            return ExitCode::SUCCESS;
        }
        Err(Failure::Io(e)) => (1, e.to_string()),
        Err(Failure::Grant(e)) => (status_of(e.kind()), e.to_string()),
    };
    // Standard error may be a closed pipe too: never panic over it.
    let _ = io::Write::write_all(
        &mut io::stderr(),
        format!("grantid: {message}\n").as_bytes(),
    );
    ExitCode::from(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_documented_status() {
        let mut seen = std::collections::HashSet::new();
        for kind in ErrorKind::ALL {
            let status = status_of(kind);
            assert!(seen.insert(status), "{kind} shares status {status}");
            let line = format!("  {status}  {}", kind.code());
            assert!(HELP.contains(&line), "{line:?} missing from the help");
        }
    }
}
