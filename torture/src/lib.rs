//! # grantid-torture
//!
//! A fault-injection torture of grantid against a real PostgreSQL
//! authority. Two binaries:
//!
//! * `torture-worker`: one process, several threads issuing IDs from the
//!   PostgreSQL authority, every ID appended to the process's record file
//!   ([`idfile`]); optionally a clock that steps back and forward
//!   ([`skewclock`]); a status file the harness reads ([`status`]).
//! * `torture-harness`: starts a throwaway PostgreSQL ([`pgserver`]), runs
//!   the workers, injects faults (kill -9, SIGSTOP past the grant and
//!   takeover, PostgreSQL stop/start), then proves the run ([`check`]): no
//!   duplicate across all record files, every ID inside a grant the
//!   authority's grant log recorded for that worker and that process's
//!   incarnation, and the same IDs loaded into a `BIGINT PRIMARY KEY` table.
//! * `torture-harness --authority redis`, the state-loss mode: the workers
//!   on a throwaway Redis without persistence ([`redisserver`]) that is
//!   killed and restarted empty or from a stale snapshot; the proof is from
//!   the IDs alone (the grant log is rolled back with the rest of the
//!   state), and the summary gives the unavailability after each restart.
//!
//! See docs/RELIABILITY.md for the short and long forms.

pub mod args;
pub mod certs;
pub mod check;
pub mod deploy;
pub mod faults;
pub mod fleet;
pub mod harness;
pub mod hostile;
pub mod idfile;
pub mod pgserver;
pub mod redisserver;
pub mod skewclock;
pub mod sources;
pub mod status;
pub mod verify;
pub mod worker;

use grantid::{DEFAULT_EPOCH_MS, Error, Layout};

/// A name for a temporary directory: `prefix.PID.RANDOM`. The pid keeps two
/// harnesses started with the same `--seed` (the random generator is seeded
/// with it) apart.
pub fn scratch_name(prefix: &str) -> String {
    format!("{prefix}.{}.{:016x}", std::process::id(), fastrand::u64(..))
}

/// The layout of every torture run: 41 timestamp bits (1 ms ticks), 4
/// worker bits and 12 sequence bits. Sixteen workers keep the authority
/// recycling worker values (a killed or stopped process's worker goes to
/// someone else), which a 1,024-worker layout would rarely do.
pub fn torture_layout() -> Result<Layout, Error> {
    Layout::with_all(41, 4, 12, DEFAULT_EPOCH_MS, 1)
}
