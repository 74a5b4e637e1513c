//! The harness must be able to fail: two workers forced onto one worker
//! value and one tick range (a fake grant that bypasses the authority, a
//! fault-injection mode of the worker) must be reported as duplicates and
//! as IDs outside the grant log, by the file check and by PostgreSQL's
//! primary key, with a failing exit status.

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

#[test]
fn two_workers_sharing_a_grant_are_reported() {
    if grantid_torture::pgserver::find_bin().is_none() {
        assert!(
            std::env::var_os("GRANTID_REQUIRE_SERVICES").is_none(),
            "GRANTID_REQUIRE_SERVICES is set but there are no PostgreSQL server binaries"
        );
        eprintln!("skipped: no PostgreSQL server binaries (install postgresql)");
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_torture-harness"))
        .args(["--processes", "3", "--threads", "2", "--rate", "20000"])
        .args(["--duration-s", "4", "--faults", "none", "--seed", "7"])
        .arg("--fault-shared-fake-grant")
        .output()
        .expect("the harness runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let both = format!("{stdout}\n--- stderr\n{stderr}");
    assert_eq!(out.status.code(), Some(1), "{both}");
    assert!(stdout.contains("RESULT: FAIL"), "{both}");
    assert!(field(&stdout, "IDs recorded") > 10_000, "{both}");
    assert!(field(&stdout, "duplicates") > 0, "{both}");
    assert!(field(&stdout, "outside grants") > 0, "{both}");
    assert!(
        stdout.contains("primary key refused"),
        "PostgreSQL's primary key must refuse the IDs too:\n{both}"
    );
    assert!(stdout.contains("FAIL: "), "{both}");
}
