//! The DynamoDB engine from the command line, on a moto server of the
//! test's own: `grantid authority init` makes the table, three `grantid
//! next` processes stream IDs of one namespace, and the server restarts
//! empty mid-run (every table gone) and `authority init` makes the table
//! again. The streams finish, and no ID repeats.
#![cfg(feature = "dynamodb")]

mod common;

#[path = "../../authority/tests/common/moto.rs"]
mod moto;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{BIN, free_port};
use moto::Moto;

fn init(url: &str) -> String {
    let out = Command::new(BIN)
        .args(["authority", "init", url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "init: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn three_processes_across_a_store_restarted_empty_never_repeat_an_id() {
    let Some(server) = Moto::start(free_port()) else {
        return;
    };
    // Short quarantines: every grant ends at most 2 s after the clock.
    let url = format!(
        "{}&max_lead_ms=2000&clock_skew_ms=200",
        server.url("grantid_cli")
    );
    let created = init(&url);
    assert!(created.contains("created"), "{created}");
    // Declared new: the first grants wait for nothing.
    let out = Command::new(BIN)
        .args(["authority", "init", "--new-deployment", &url])
        .output()
        .unwrap();
    assert!(out.status.success());
    let streams: Vec<_> = (0..3)
        .map(|_| {
            Command::new(BIN)
                .args(["next", "-a", &url, "--namespace", "cli", "-n", "60000"])
                // 16 IDs a ms: each stream lasts about 4 s, across the
                // restart.
                .args(["--sequence-bits", "4", "--horizon-ms", "1000"])
                .args(["--grant-duration-ms", "500", "--wait-ms", "30000"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1_500));
    let server = server.kill_and_restart();
    // The table made again: no store record, or a quarantine that a
    // running stream's renewal started as soon as the table was there.
    let again = init(&url);
    assert!(
        again.contains("created")
            && (again.contains("store record missing") || again.contains("(quarantine 1,")),
        "{again}"
    );
    let mut all = Vec::new();
    for child in streams {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "a stream failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ids: Vec<u64> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        assert_eq!(ids.len(), 60_000);
        all.extend(ids);
    }
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(n - all.len(), 0, "repeated IDs across the restart");
    drop(server);
}
