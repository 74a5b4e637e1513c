//! Lifting a quarantine, on every engine: `grantid authority status` shows
//! a fence with its cause and end, `grantid authority lift-quarantine`
//! ends it, and IDs are issued again before it would have ended
//! (docs/AUTHORITIES.md, "Lifting a quarantine").

mod common;

use std::process::{Command, Output};

use common::{BIN, scratch, service_url};

fn grantid(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn stdout_of(args: &[&str]) -> String {
    let out = grantid(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn fence_and_lift(url: &str) {
    stdout_of(&["authority", "fence", url]);
    let status = stdout_of(&["authority", "status", url]);
    let line = status.lines().next().unwrap_or_default();
    assert!(
        line.starts_with("quarantine until ") && line.contains("fenced by the operator"),
        "{status}"
    );
    let until: u64 = line
        .split("Unix ms ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no end in {line:?}"));

    let lifted = stdout_of(&["authority", "lift-quarantine", url]);
    assert!(
        lifted.contains("quarantine lifted") && lifted.contains("fenced by the operator"),
        "{lifted}"
    );
    let namespace = format!("lifted-{}", now_ms());
    let ids = stdout_of(&[
        "next",
        "-n",
        "3",
        "--authority",
        url,
        "--namespace",
        &namespace,
    ]);
    assert_eq!(ids.lines().count(), 3, "{ids}");
    assert!(now_ms() < until, "IDs only once the quarantine had ended");
    let status = stdout_of(&["authority", "status", url]);
    assert!(!status.contains("quarantine"), "{status}");
    let again = stdout_of(&["authority", "lift-quarantine", url]);
    assert!(again.contains("no quarantine was running"), "{again}");
}

#[test]
fn file() {
    let dir = scratch("lift-file");
    fence_and_lift(&format!("file:{}", dir.join("state.json").display()));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn static_with_a_state_file() {
    let dir = scratch("lift-static");
    fence_and_lift(&format!(
        "static:2?state={}",
        dir.join("static.json").display()
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn postgres() {
    if let Some(url) = service_url("GRANTID_TEST_POSTGRES_URL") {
        fence_and_lift(&url);
    }
}

#[test]
fn redis() {
    if let Some(url) = service_url("GRANTID_TEST_REDIS_URL") {
        fence_and_lift(&url);
    }
}

#[test]
fn mysql() {
    if let Some(url) = service_url("GRANTID_TEST_MYSQL_URL") {
        fence_and_lift(&url);
    }
}

#[cfg(feature = "etcd")]
#[test]
fn etcd() {
    if let Some(url) = service_url("GRANTID_TEST_ETCD_URL") {
        fence_and_lift(&url);
    }
}

#[cfg(feature = "dynamodb")]
#[test]
fn dynamodb() {
    if let Some(url) = service_url("GRANTID_TEST_DYNAMODB_URL") {
        let url = url.replace("grantid_test", "grantid_lift");
        stdout_of(&["authority", "init", "--new-deployment", &url]);
        fence_and_lift(&url);
    }
}

/// Through a server the store is not reachable: the command says where to
/// lift it.
#[test]
fn a_grpc_url_is_told_to_lift_it_on_the_store() {
    let out = grantid(&["authority", "lift-quarantine", "grpc://127.0.0.1:1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("server's own authority URL"), "{err}");
}
