//! The `grantid` command, run as a built binary.

use assert_cmd::Command;

fn grantid() -> Command {
    Command::cargo_bin("grantid").unwrap()
}

fn state_url(tag: &str) -> String {
    let dir = std::env::temp_dir().join(format!("grantid-cli-tests-{}", std::process::id()));
    format!("file:{}", dir.join(format!("{tag}.json")).display())
}

#[test]
fn next_prints_n_increasing_ids() {
    let out = grantid()
        .args(["next", "-n", "5", "--authority", &state_url("next")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ids: Vec<u64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(ids.len(), 5);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn two_runs_on_one_file_never_repeat() {
    let url = state_url("repeat");
    let mut all = std::collections::HashSet::new();
    for _ in 0..2 {
        let out = grantid()
            .args(["next", "-n", "1000", "--format", "hex", "-a", &url])
            .output()
            .unwrap();
        assert!(out.status.success());
        for l in String::from_utf8(out.stdout).unwrap().lines() {
            assert!(l.starts_with("0x"));
            assert!(all.insert(l.to_owned()), "{l} repeated");
        }
    }
    assert_eq!(all.len(), 2000);
}

#[test]
fn next_json_has_string_ids_and_fields() {
    let out = grantid()
        .args([
            "next",
            "-n",
            "2",
            "--format",
            "json",
            "-a",
            "static:5",
            "--namespace",
            "cli",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    for v in &lines {
        assert!(v["id"].is_string());
        assert_eq!(v["worker"], 5);
    }
}

/// `grantid decode ID [extra]` in the worked example's layout (12/3/4).
fn decode_worked(id: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["decode", id, "--timestamp-bits", "12", "--worker-bits", "3"];
    args.extend(["--sequence-bits", "4"]);
    args.extend(extra);
    grantid().args(args).output().unwrap()
}

#[test]
fn decode_worked_vector() {
    // docs/DESIGN.md: layout 12/3/4, (160, 1, 1) -> 20497.
    let out = decode_worked("20497", &["--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            v["timestamp"].as_u64(),
            v["worker"].as_u64(),
            v["sequence"].as_u64()
        ),
        (Some(160), Some(1), Some(1))
    );
    assert_eq!(v["id"], "20497");
    let hex = decode_worked("0x5011", &[]);
    assert!(hex.status.success());
    assert!(
        String::from_utf8(hex.stdout)
            .unwrap()
            .contains("timestamp  160")
    );
}

#[test]
fn junk_is_a_clear_error_with_its_kinds_exit_status() {
    for (args, needle, status) in [
        (vec!["decode", "junk"], "is not an ID", 17),
        (vec!["decode", "0"], "reserved", 17),
        (
            vec!["decode", "99999999999999999999"],
            "larger than any ID",
            17,
        ),
        (
            vec!["decode", "5", "--timestamp-bits", "60"],
            "more than 63",
            17,
        ),
        (vec!["next", "-a", "ftp://x"], "unknown scheme", 17),
        (
            vec![
                "next",
                "-a",
                "postgres://postgres@127.0.0.1:1/x?timeout_ms=200",
                // The older spelling of --wait-ms.
                "--timeout-ms",
                "500",
            ],
            "UNAVAILABLE",
            13,
        ),
    ] {
        let out = grantid().args(&args).output().unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(status), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn authority_init_and_status_on_a_file() {
    let url = state_url("status");
    grantid()
        .args(["authority", "init", &url])
        .assert()
        .success();
    grantid()
        .args(["next", "-n", "1", "-a", &url, "--namespace", "st"])
        .assert()
        .success();
    let out = grantid()
        .args(["authority", "status", &url, "--namespace", "st"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("high-water") && text.lines().any(|l| l.starts_with("st ")),
        "{text}"
    );
}

#[test]
fn next_table_shows_each_id_with_its_fields() {
    let out = grantid()
        .args(["next", "-n", "3", "--format", "table", "-a", "static:7"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with("id "));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), 3);
    for row in &rows {
        let id: u64 = row[0].parse().unwrap();
        let d = grantid::Layout::default().decode(id).unwrap();
        assert_eq!(row[2], d.timestamp.to_string());
        assert_eq!(row[3], "7");
        assert_eq!(row[4], d.sequence.to_string());
    }
}
