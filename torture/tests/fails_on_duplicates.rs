//! The harness must be able to fail:
//!
//! - two workers forced onto one worker value and one tick range (a fake
//!   grant that bypasses the authority, a fault-injection mode of the
//!   worker) must be reported as duplicates and as IDs outside the grant
//!   log, by the file check and by PostgreSQL's primary key, with a failing
//!   exit status; in the state-loss mode (Redis) too, where the proof is
//!   from the IDs alone;
//! - in the state-loss mode, Redis losses hidden from the authority (the
//!   harness rewrites the store record after each restart, so no quarantine
//!   starts) must repeat IDs: the faults matter, and the quarantine is what
//!   makes the passing runs pass.

use std::process::Command;

fn field(summary: &str, name: &str) -> u64 {
    let line = summary
        .lines()
        .find(|l| l.trim_start().starts_with(name))
        .unwrap_or_else(|| panic!("no {name:?} line in:\n{summary}"));
    line.trim_start()[name.len()..]
        .split_whitespace()
        .next()
        .and_then(|v| v.replace(',', "").parse().ok())
        .unwrap_or_else(|| panic!("no number on {line:?}"))
}

/// `false` (with a note) when `what` is missing; a panic under
/// `GRANTID_REQUIRE_SERVICES`.
fn have(ok: bool, what: &str) -> bool {
    if !ok {
        assert!(
            std::env::var_os("GRANTID_REQUIRE_SERVICES").is_none(),
            "GRANTID_REQUIRE_SERVICES is set but there is no {what}"
        );
        eprintln!("skipped: no {what}");
    }
    ok
}

fn have_postgres() -> bool {
    have(
        grantid_torture::pgserver::find_bin().is_some(),
        "PostgreSQL server binaries (install postgresql)",
    )
}

fn have_redis() -> bool {
    have(
        Command::new("redis-server")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "redis-server (install redis-server)",
    )
}

/// Runs the harness; returns its stdout and everything it printed, after
/// checking that it failed (exit status 1, `RESULT: FAIL`, a `FAIL:` line)
/// with duplicates among more than `min_ids` recorded IDs.
fn failing_run(args: &[&str], min_ids: u64) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_torture-harness"))
        .args(args)
        .output()
        .expect("the harness runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let both = format!("{stdout}\n--- stderr\n{stderr}");
    assert_eq!(out.status.code(), Some(1), "{both}");
    assert!(stdout.contains("RESULT: FAIL"), "{both}");
    assert!(stdout.contains("FAIL: "), "{both}");
    assert!(field(&stdout, "IDs recorded") > min_ids, "{both}");
    assert!(field(&stdout, "duplicates") > 0, "{both}");
    (stdout, both)
}

const SHARED_FAKE_GRANT: &[&str] = &[
    "--processes",
    "3",
    "--threads",
    "2",
    "--rate",
    "20000",
    "--duration-s",
    "4",
    "--faults",
    "none",
    "--seed",
    "7",
    "--fault-shared-fake-grant",
];

#[test]
fn two_workers_sharing_a_grant_are_reported() {
    if !have_postgres() {
        return;
    }
    let (stdout, both) = failing_run(SHARED_FAKE_GRANT, 10_000);
    assert!(field(&stdout, "outside grants") > 0, "{both}");
    assert!(
        stdout.contains("primary key refused"),
        "PostgreSQL's primary key must refuse the IDs too:\n{both}"
    );
}

#[test]
fn two_workers_sharing_a_grant_are_reported_in_the_state_loss_mode() {
    if !have_postgres() || !have_redis() {
        return;
    }
    let mut args = vec!["--authority", "redis"];
    args.extend_from_slice(SHARED_FAKE_GRANT);
    let (stdout, both) = failing_run(&args, 10_000);
    assert!(
        stdout.contains("grant log              not checked"),
        "the state-loss mode proves from the IDs alone:\n{both}"
    );
    assert!(
        stdout.contains("primary key refused"),
        "PostgreSQL's primary key must refuse the IDs too:\n{both}"
    );
}

/// Redis restarts, each hidden from the authority, each followed by a new
/// process. A generator with a 2 s horizon and 2 s grants renews about
/// every 2 s, so the new process asks before the holder of the lowest
/// worker value has renewed: in the emptied store that value looks never
/// used, and both issue from it until the holder's next renewal, which
/// proves the store forgot its grant (the forgotten-grant check, before the
/// holder check) and starts a quarantine. Each fault takes the quarantine
/// to recover from: 20 s leave room for two faults or more.
/// (The same run without `--fault-defeat-quarantine` passes with 0
/// duplicates: docs/RELIABILITY.md, "State-loss mode".)
#[test]
fn redis_losses_hidden_from_the_authority_repeat_ids() {
    if !have_redis() {
        return;
    }
    let (stdout, both) = failing_run(
        &[
            "--authority",
            "redis",
            "--processes",
            "4",
            "--threads",
            "2",
            "--rate",
            "25000",
            "--duration-s",
            "20",
            "--fault-interval-ms",
            "3000",
            "--faults",
            "redis-empty",
            "--horizon-ms",
            "2000",
            "--grant-ms",
            "2000",
            "--no-pg-check",
            "--seed",
            "4",
            "--fault-defeat-quarantine",
        ],
        100_000,
    );
    assert!(
        field(&stdout, "fault redis-empty") >= 2,
        "the losses must have happened:\n{both}"
    );
}
