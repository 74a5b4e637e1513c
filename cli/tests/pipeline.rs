//! The `grantid` command in pipelines: closed pipes, long streams, small
//! layouts, pauses, standard input, JSON status, exit statuses, completions
//! and `-v`. Each runs the built binary.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_grantid"))
}

fn state_url(tag: &str) -> String {
    let dir = std::env::temp_dir().join(format!("grantid-cli-pipeline-{}", std::process::id()));
    format!("file:{}", dir.join(format!("{tag}.json")).display())
}

fn stderr_of(child: &mut Child) -> String {
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    err
}

/// Runs `args` with standard output a pipe whose reading end is already
/// closed: every write fails with EPIPE.
fn with_closed_stdout(args: &[&str]) -> std::process::Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    bin()
        .args(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn a_closed_pipe_ends_every_command_quietly_with_status_0() {
    let url = state_url("closed");
    for args in [
        vec!["decode", "20497"],
        vec!["decode", "--format", "json", "20497"],
        vec!["next", "-n", "3", "-a", "static:3"],
        vec!["next", "-n", "200000", "-a", &url],
        vec!["authority", "status", &url, "--format", "json"],
        vec!["completions", "bash"],
        vec!["--help"],
    ] {
        let out = with_closed_stdout(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?} wrote to stderr: {err}");
    }
}

#[test]
fn next_piped_into_head_stops_quietly() {
    // `grantid next -n 200000 | head -1`: the reader goes away mid-stream.
    let mut child = bin()
        .args(["next", "-n", "200000", "-a", &state_url("head")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.trim().parse::<u64>().is_ok(), "{first:?}");
    let err = stderr_of(&mut child);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
}

/// The IDs a run of `grantid next ARGS` printed, checked increasing.
fn increasing_ids(args: &[&str]) -> Vec<u64> {
    let out = bin().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {err}");
    let ids: Vec<u64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "{args:?}: not increasing"
    );
    ids
}

#[test]
fn next_streams_more_than_a_drift_window_on_a_small_layout() {
    // 8 sequence bits: 256 IDs a tick, 25,600 in the 100 ms drift window,
    // so a 100,000-ID batch could never be filled in one call.
    let ids = increasing_ids(&[
        "next",
        "-n",
        "300000",
        "--sequence-bits",
        "8",
        "-a",
        "static:1",
    ]);
    assert_eq!(ids.len(), 300_000);
}

#[test]
fn next_streams_past_one_batch_on_the_default_layout() {
    let ids = increasing_ids(&["next", "-n", "250001", "-a", &state_url("long")]);
    assert_eq!(ids.len(), 250_001);
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

#[test]
fn next_paused_past_its_grants_waits_for_the_authority_and_finishes() {
    // The default horizon keeps 5 s of grants ahead and the file authority
    // keeps the lease 5 s past their end: a 12 s stop outlives both, so the
    // calls after SIGCONT find no committed grant until the renewal thread
    // has a new one (a 6 s stop did not fail before the fix, 12 s did).
    let n = 2_000_000u64;
    let mut child = bin()
        .args(["next", "-n", &n.to_string(), "-a", &state_url("pause")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut ids = Vec::with_capacity(n as usize);
    for _ in 0..100_000 {
        ids.push(lines.next().unwrap().unwrap().parse::<u64>().unwrap());
    }
    signal(&child, "-STOP");
    std::thread::sleep(Duration::from_secs(12));
    signal(&child, "-CONT");
    for line in lines {
        ids.push(line.unwrap().parse().unwrap());
    }
    let err = stderr_of(&mut child);
    assert!(child.wait().unwrap().success(), "{err}");
    assert_eq!(ids.len() as u64, n, "{err}");
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
}

/// `grantid decode - ARGS` with `input` on standard input.
fn decode_stdin(args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = bin()
        .args(["decode", "-"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn decode_reads_ids_from_standard_input() {
    let worked = ["--timestamp-bits", "12", "--worker-bits", "3"];
    let args = [&worked[..], &["--sequence-bits", "4", "--format", "json"]].concat();
    let out = decode_stdin(&args, b"20497\n0x5012\n\n  20624  \n");
    assert!(out.status.success());
    let fields: Vec<(u64, u64, u64)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let f = |k: &str| v[k].as_u64().unwrap();
            (f("timestamp"), f("worker"), f("sequence"))
        })
        .collect();
    assert_eq!(fields, [(160, 1, 1), (160, 1, 2), (161, 1, 0)]);
}

#[test]
fn decode_names_the_bad_input_line() {
    let out = decode_stdin(&[], b"20497\nnope\n");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(17), "{err}");
    assert!(
        err.contains("INVALID_ARGUMENT: standard input line 2"),
        "{err}"
    );
}

#[test]
fn usage_errors_exit_2_and_the_help_lists_every_status() {
    let out = bin().args(["next", "--bogus"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let help = bin().arg("--help").output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    for line in ["0   success", "13  UNAVAILABLE", "17  INVALID_ARGUMENT"] {
        assert!(help.contains(line), "{line}: {help}");
    }
}

#[test]
fn authority_status_prints_json() {
    let url = state_url("status-json");
    let ok = bin()
        .args(["next", "-n", "1", "-a", &url, "--namespace", "js"])
        .output()
        .unwrap();
    assert!(ok.status.success());
    let out = bin()
        .args(["authority", "status", &url, "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    let row = rows.iter().find(|r| r["namespace"] == "js").unwrap();
    assert!(row["worker"].is_u64());
    assert!(row["high_water_tick"].as_u64().unwrap() > 0);
    assert!(row["high_water"].as_str().unwrap().ends_with('Z'));
    assert!(["live", "expired", "free"].contains(&row["lease"].as_str().unwrap()));
}

#[test]
fn completions_are_scripts_for_each_shell() {
    for (shell, needle) in [
        ("bash", "_grantid()"),
        ("zsh", "#compdef grantid"),
        ("fish", "complete -c grantid"),
    ] {
        let out = bin().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains(needle), "{shell}: {script}");
        assert!(script.contains("authority"), "{shell}");
    }
}

#[test]
fn verbose_prints_the_cores_events_to_stderr() {
    let url = state_url("verbose");
    let quiet = bin().args(["next", "-a", &url]).output().unwrap();
    assert!(quiet.status.success());
    assert!(quiet.stderr.is_empty());
    let loud = bin().args(["-v", "next", "-a", &url]).output().unwrap();
    assert!(loud.status.success());
    let err = String::from_utf8(loud.stderr).unwrap();
    assert!(err.contains("event=grant "), "{err}");
    assert!(err.contains("event=closed"), "{err}");
    assert_eq!(String::from_utf8(loud.stdout).unwrap().lines().count(), 1);
}

/// A store that loses its state under a running stream (here the state
/// file deleted): the stream's lease is lost, the generator takes another
/// worker once the loss is waited out, and `next` goes on instead of
/// exiting `LEASE_LOST`; every ID is printed once and none repeats.
#[test]
fn a_lost_lease_under_a_stream_is_waited_out() {
    let dir = std::env::temp_dir().join(format!("grantid-cli-lost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state.json");
    let url = format!("file:{}", state.display());
    // 16 IDs per 1 ms tick: 40,000 IDs take at least 2.5 s.
    let mut child = bin()
        .args(["next", "-n", "40000", "-a", &url, "--sequence-bits", "4"])
        .args(["--grant-duration-ms", "100", "--horizon-ms", "200"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut ids = Vec::new();
    for line in lines.by_ref().take(2_000) {
        ids.push(line.unwrap());
    }
    std::fs::remove_file(&state).unwrap();
    ids.extend(lines.map(Result::unwrap));
    let status = child.wait().unwrap();
    let err = stderr_of(&mut child);
    assert!(status.success(), "{status}: {err}");
    assert_eq!(ids.len(), 40_000, "{err}");
    let unique: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "an ID repeated");
    let _ = std::fs::remove_dir_all(&dir);
}
