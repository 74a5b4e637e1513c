//! `grantid serve` as the authority of a fleet (`grpc://`): embedded
//! generators in several processes (this test binary, re-run) and in this
//! one get
//! their grants from a server that is killed with -9 and restarted. No ID
//! repeats; while the server is down, IDs stop at the end of the committed
//! grants.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use grantid::{ErrorKind, Generator, Layout};

mod common;

use common::{BIN, Ca, free_port, scratch, serve_logging_to as server_logging_to};

/// Starts `grantid serve` on `port` with a file authority at `state`, and
/// waits until it accepts connections.
fn server(port: u16, state: &Path) -> Child {
    server_on(port, &format!("file:{}", state.display()))
}

/// Starts `grantid serve` on `port` with the authority `url`, and waits
/// until it accepts connections.
fn server_on(port: u16, url: &str) -> Child {
    server_with_args(port, url, &[])
}

/// [`server_on`] with more flags of `grantid serve`.
fn server_with_args(port: u16, url: &str, args: &[&str]) -> Child {
    server_logging_to(port, url, args, Stdio::null())
}

/// Stops the server and removes the test's directory.
fn finish(mut srv: Child, dir: &Path) {
    kill_9(&mut srv);
    let _ = std::fs::remove_dir_all(dir);
}

fn kill_9(child: &mut Child) {
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
}

/// The fleet's layout: 16 IDs per ms per worker, so a few processes run
/// for seconds instead of milliseconds.
fn fleet_layout() -> Layout {
    Layout::new(41, 6, 4).unwrap()
}

fn assert_unique(ids: &mut [u64]) {
    let n = ids.len();
    ids.sort_unstable();
    let dup = ids.windows(2).filter(|w| w[0] == w[1]).count();
    assert_eq!(dup, 0, "{dup} duplicate IDs among {n}");
}

/// Set (to "URL OUTPUT") in the fleet processes this test starts.
const CHILD_ENV: &str = "GRANTID_TEST_FLEET_CHILD";
/// How long each fleet generator issues IDs.
const FLEET_RUN: Duration = Duration::from_secs(5);

/// Issues IDs from an embedded generator on `url` for `run`; returns them,
/// the number of refused calls and of uncertain authority answers.
fn issue_for(url: &str, run: Duration) -> (Vec<u64>, u64, u64) {
    let generator = Generator::builder(
        fleet_layout(),
        "fleet",
        grantid_authority::from_url(url).unwrap(),
    )
    .start()
    .unwrap();
    let (mut ids, mut failures) = (Vec::new(), 0u64);
    let started = Instant::now();
    while started.elapsed() < run {
        match generator.next_id() {
            Ok(id) => ids.push(id),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
                failures += 1;
            }
        }
    }
    let uncertain = generator.stats().uncertain_retries;
    generator.close();
    (ids, failures, uncertain)
}

/// A fleet process: does nothing unless started by the fleet test.
#[test]
fn fleet_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (url, out) = spec.split_once(' ').unwrap();
    let (ids, failures, _) = issue_for(url, FLEET_RUN);
    let mut text = format!("{failures}\n");
    for id in ids {
        text.push_str(&format!("{id}\n"));
    }
    std::fs::write(out, text).unwrap();
}

#[test]
fn a_fleet_keeps_unique_ids_across_kill_9_and_restart() {
    let dir = scratch("fleet");
    let state = dir.join("state.json");
    let port = free_port();
    let mut srv = server(port, &state);
    let url = format!("grpc://127.0.0.1:{port}?timeout_ms=300");

    // Three processes (this test binary again, running `fleet_child`) and
    // one generator in this process, each issuing for 5 s.
    let clients: Vec<(Child, PathBuf)> = (0..3)
        .map(|i| {
            let out = dir.join(format!("ids-{i}.txt"));
            let child = Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "fleet_child", "--test-threads=1", "--nocapture"])
                .env(CHILD_ENV, format!("{url} {}", out.display()))
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            (child, out)
        })
        .collect();
    let local = {
        let url = url.clone();
        std::thread::spawn(move || issue_for(&url, FLEET_RUN))
    };

    std::thread::sleep(Duration::from_millis(1_000));
    kill_9(&mut srv);
    // Down for 1.5 s: inside the generators' 5 s horizon, so they keep
    // issuing from committed grants and renew after the restart.
    std::thread::sleep(Duration::from_millis(1_500));
    let srv = server(port, &state);

    let mut all = Vec::new();
    for (mut child, out) in clients {
        let status = child.wait().unwrap();
        assert!(status.success(), "a fleet process failed: {status}");
        let text = std::fs::read_to_string(&out).unwrap();
        let mut lines = text.lines();
        let failures: u64 = lines.next().unwrap().parse().unwrap();
        assert_eq!(failures, 0, "the outage was inside the horizon");
        let ids: Vec<u64> = lines.map(|l| l.parse().unwrap()).collect();
        assert!(ids.len() > 10_000, "only {} IDs in a process", ids.len());
        all.extend(ids);
    }
    let (ids, failures, uncertain) = local.join().unwrap();
    assert!(ids.len() > 10_000, "only {} IDs in-process", ids.len());
    assert_eq!(failures, 0, "the outage was inside the horizon");
    assert!(uncertain > 0, "no renewal met the outage");
    all.extend(ids);
    assert_unique(&mut all);
    // The workers of the fleet are distinct (one per process).
    let workers: std::collections::BTreeSet<u64> = all
        .iter()
        .map(|&id| fleet_layout().decode(id).unwrap().worker)
        .collect();
    assert!(workers.len() >= 4, "workers used: {workers:?}");

    finish(srv, &dir);
}

#[test]
fn ids_stop_at_the_grant_end_while_the_server_is_down() {
    let dir = scratch("stop");
    let state = dir.join("state.json");
    let port = free_port();
    let mut srv = server(port, &state);
    let url = format!("grpc://127.0.0.1:{port}?timeout_ms=200");
    let layout = fleet_layout();
    let generator = Generator::builder(layout, "stop", grantid_authority::from_url(&url).unwrap())
        .grant_duration_ms(200)
        .horizon_ms(400)
        .backoff(Duration::from_millis(10), Duration::from_millis(50))
        .start()
        .unwrap();
    let mut ids = generator.next_ids(1_000).unwrap();

    kill_9(&mut srv);
    let killed = Instant::now();
    let mut after_kill = Vec::new();
    let error = loop {
        match generator.next_id() {
            Ok(id) => after_kill.push(id),
            Err(e) => break e,
        }
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "IDs went on for 5 s without a server"
        );
    };
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    // No answer can arrive now: the committed end is final.
    let end = generator.stats().grant_end.expect("a grant was held");
    assert!(!after_kill.is_empty());
    for &id in &after_kill {
        let ts = layout.decode(id).unwrap().timestamp;
        assert!(ts < end, "ID {id} at tick {ts} is past the grant end {end}");
    }
    // Still refused a little later: no ID without a grant.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        generator.next_id().unwrap_err().kind(),
        ErrorKind::Unavailable
    );

    let srv = server(port, &state);
    let deadline = Instant::now() + Duration::from_secs(10);
    let resumed = loop {
        if let Ok(id) = generator.next_id() {
            break id;
        }
        assert!(Instant::now() < deadline, "no grant after the restart");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(layout.decode(resumed).unwrap().timestamp >= end);
    ids.extend(after_kill);
    ids.push(resumed);
    ids.extend(generator.next_ids(1_000).unwrap());
    assert_unique(&mut ids);
    generator.close();
    finish(srv, &dir);
}

#[test]
fn the_command_takes_a_grpc_authority() {
    let dir = scratch("cli");
    let port = free_port();
    let mut srv = server(port, &dir.join("state.json"));
    let url = format!("grpc://127.0.0.1:{port}");
    let out = Command::new(BIN)
        .args(["next", "-n", "5", "--authority", &url, "--namespace", "cli"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut ids: Vec<u64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(ids.len(), 5);
    assert_unique(&mut ids);
    // Status through the server is its authority's own (the lease column,
    // computed from the clock at each read, aside).
    let file_url = format!("file:{}", dir.join("state.json").display());
    let status = |url: &str, namespace: Option<&str>| -> serde_json::Value {
        let mut cmd = Command::new(BIN);
        cmd.args(["authority", "status", url, "--format", "json"]);
        if let Some(ns) = namespace {
            cmd.args(["--namespace", ns]);
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{url}: {err}");
        let mut rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for row in rows.as_array_mut().unwrap() {
            row.as_object_mut().unwrap().remove("lease");
        }
        rows
    };
    // The server's own generator renews between two reads: compare its
    // records by name only; the `cli` records (closed) field by field.
    let workers = |rows: &serde_json::Value| -> Vec<(String, u64)> {
        let rows = rows.as_array().unwrap().iter();
        rows.map(|r| {
            (
                r["namespace"].as_str().unwrap().to_owned(),
                r["worker"].as_u64().unwrap(),
            )
        })
        .collect()
    };
    let all = workers(&status(&url, None));
    assert_eq!(all, workers(&status(&file_url, None)));
    assert!(all.iter().any(|(ns, _)| ns == "cli"), "{all:?}");
    assert!(all.iter().any(|(ns, _)| ns == "server-own"), "{all:?}");
    let only = status(&url, Some("cli"));
    assert!(!only.as_array().unwrap().is_empty());
    assert!(
        only.as_array()
            .unwrap()
            .iter()
            .all(|r| r["namespace"] == "cli"),
        "{only}"
    );
    assert_eq!(only, status(&file_url, Some("cli")));
    // Init runs the server's authority's init; a new deployment is declared
    // where the store is, never through the server.
    let out = Command::new(BIN)
        .args(["authority", "init", &url])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("the server's authority") && said.contains("state file"),
        "{said}"
    );
    for args in [["init", "--new-deployment"].as_slice(), &["fence"]] {
        let out = Command::new(BIN)
            .arg("authority")
            .args(args)
            .arg(&url)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("where the store is"), "{args:?}: {err}");
    }
    kill_9(&mut srv);
    // Status with the server gone: UNAVAILABLE, not a wrong answer.
    let out = Command::new(BIN)
        .args(["authority", "status", &format!("{url}?timeout_ms=200")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("grpc://"));
    // With the server gone: UNAVAILABLE within the start-up timeout.
    let out = Command::new(BIN)
        .args(["next", "--authority", &format!("{url}?timeout_ms=200")])
        .args(["--namespace", "cli", "--wait-ms", "500"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("UNAVAILABLE") && err.contains("grpc://"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn grant_request(incarnation: u64, worker: Option<u32>, not_before: u64) -> grantid::GrantRequest {
    grantid::GrantRequest {
        namespace: "fork".into(),
        incarnation,
        request_id: 1,
        worker,
        not_before,
        now: 0,
        duration: 10,
        layout: fleet_layout(),
    }
}

#[test]
fn a_fork_child_uses_its_own_connection() {
    let dir = scratch("fork");
    let port = free_port();
    let srv = server(port, &dir.join("state.json"));
    let source = grantid_authority::from_url(&format!("grpc://127.0.0.1:{port}")).unwrap();
    // The parent's connection is open before the fork.
    let g = source.acquire(&grant_request(1, None, 0)).unwrap();
    // SAFETY: the child only uses the source (connecting afresh) and calls
    // _exit with the answer; it never returns into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let ok = source.acquire(&grant_request(77, None, 0)).is_ok();
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child, writing into a valid int.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child got no grant (wait status {status:#x})"
    );
    // The parent's connection still works after the child exited.
    let mut renewal = grant_request(1, Some(g.worker), g.end);
    renewal.request_id = 2;
    let g2 = source.acquire(&renewal).unwrap();
    assert!(g2.start >= g.end);
    finish(srv, &dir);
}

/// The PostgreSQL of the test command, or `None` (a note) to skip.
fn postgres_url() -> Option<String> {
    common::service_url("GRANTID_TEST_POSTGRES_URL")
}

#[test]
fn two_servers_on_one_postgres_answer_for_each_other() {
    let Some(pg) = postgres_url() else {
        return;
    };
    let init = Command::new(BIN)
        .args(["authority", "init", &pg])
        .output()
        .unwrap();
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let (pa, pb) = (free_port(), free_port());
    let (mut a, mut b) = (server_on(pa, &pg), server_on(pb, &pg));
    let via_a = grantid_authority::from_url(&format!("grpc://127.0.0.1:{pa}")).unwrap();
    let via_b = grantid_authority::from_url(&format!("grpc://127.0.0.1:{pb}")).unwrap();
    let mut first = grant_request(1, None, 0);
    first.namespace = format!("two-servers-{}", std::process::id());
    let g = via_a.acquire(&first).unwrap();
    // The same request again, through the other server: the recorded grant.
    assert_eq!(via_b.acquire(&first).unwrap(), g);
    kill_9(&mut a);
    // The renewal reaches the other server: the same worker, later time.
    let renewal = grantid::GrantRequest {
        request_id: 2,
        worker: Some(g.worker),
        not_before: g.end,
        ..first.clone()
    };
    let g2 = via_b.acquire(&renewal).unwrap();
    assert_eq!(g2.worker, g.worker);
    assert!(g2.start >= g.end);
    // Another incarnation cannot take that worker through either server.
    let thief = grantid::GrantRequest {
        incarnation: 2,
        request_id: 1,
        worker: Some(g.worker),
        ..first.clone()
    };
    assert!(matches!(
        via_b.acquire(&thief),
        Err(grantid::GrantError::Lost(_))
    ));
    assert!(matches!(
        via_a.acquire(&thief),
        Err(grantid::GrantError::Unavailable(_))
    ));
    kill_9(&mut b);
}

/// A server whose authority is PostgreSQL stops with status 0 on SIGTERM:
/// the authority's I/O runtime is dropped inside the server's async code
/// without a panic (it once exited with 101 there).
#[test]
fn a_postgres_backed_server_stops_cleanly_on_sigterm() {
    let Some(pg) = postgres_url() else {
        return;
    };
    let port = free_port();
    let mut srv = server_on(port, &pg);
    // Grants through the server: its authority's connection is in use.
    let via = grantid_authority::from_url(&format!("grpc://127.0.0.1:{port}")).unwrap();
    let mut first = grant_request(1, None, 0);
    first.namespace = format!("sigterm-{}", std::process::id());
    let deadline = Instant::now() + Duration::from_secs(20);
    while via.acquire(&first).is_err() {
        assert!(Instant::now() < deadline, "the server never granted");
        std::thread::sleep(Duration::from_millis(100));
    }
    let term = Command::new("kill")
        .args(["-TERM", &srv.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    stops_with_status_0(&mut srv);
}

/// Waits (at most 15 s) for a server sent SIGTERM to exit, with status 0.
fn stops_with_status_0(srv: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = srv.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not stop after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// A server killed when the test ends, also when it fails.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `grantid serve` on PostgreSQL with `sessions` authority sessions
/// and a long authority timeout, so that a call blocked on a row lock holds
/// its session for as long as the test keeps the lock.
fn server_with_sessions(pg: &str, sessions: usize) -> (Running, u16) {
    let port = free_port();
    let sessions = sessions.to_string();
    let child = server_with_args(
        port,
        &format!("{pg}?timeout_ms=20000"),
        &["--authority-sessions", &sessions],
    );
    (Running(child), port)
}

/// A PostgreSQL transaction holding the row of `namespace`: every request
/// for a new worker of that namespace waits for it in the store.
struct NamespaceLock {
    client: postgres::Client,
    pid: i32,
}

impl NamespaceLock {
    fn hold(pg: &str, namespace: &str) -> NamespaceLock {
        let mut client = postgres::Client::connect(pg, postgres::NoTls).unwrap();
        client.batch_execute("BEGIN").unwrap();
        let rows = client
            .execute(
                "SELECT 1 FROM grantid.namespaces WHERE namespace = $1 FOR UPDATE",
                &[&namespace],
            )
            .unwrap();
        assert_eq!(rows, 1, "namespace {namespace} is not registered");
        let pid = client
            .query_one("SELECT pg_backend_pid()", &[])
            .unwrap()
            .get(0);
        NamespaceLock { client, pid }
    }

    fn release(mut self) {
        self.client.batch_execute("COMMIT").unwrap();
    }
}

/// Waits until `n` calls wait for `lock` in PostgreSQL: they reached the
/// store and are stuck there.
fn wait_for_lock_waiters(pg: &str, lock: &NamespaceLock, n: i64) {
    let mut client = postgres::Client::connect(pg, postgres::NoTls).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let waiting: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                &[&lock.pid],
            )
            .unwrap()
            .get(0);
        if waiting >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{waiting} of {n} calls reached the lock"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A first request of incarnation 2 in `namespace` through the server at
/// `url`, stuck in the store (on a session) until the lock is released.
fn stuck_in_the_store(
    pg: &str,
    url: &str,
    namespace: &str,
) -> (
    NamespaceLock,
    std::thread::JoinHandle<Result<grantid::Grant, grantid::GrantError>>,
) {
    let lock = NamespaceLock::hold(pg, namespace);
    let call = acquire_in_background(url, namespace, 2);
    wait_for_lock_waiters(pg, &lock, 1);
    (lock, call)
}

/// Grants the store recorded for `namespace` and incarnations from `first`.
fn logged_grants(pg: &str, namespace: &str, first: u64) -> i64 {
    let mut client = postgres::Client::connect(pg, postgres::NoTls).unwrap();
    client
        .query_one(
            "SELECT count(*) FROM grantid.grant_log WHERE namespace = $1 AND incarnation >= $2",
            &[&namespace, &(first as i64)],
        )
        .unwrap()
        .get(0)
}

/// A namespace of its own, registered through the server.
fn registered_namespace(pg: &str, via: &dyn grantid::GrantSource, name: &str) -> String {
    let mut first = grant_request(1, None, 0);
    first.namespace = format!("{name}-{}", std::process::id());
    let deadline = Instant::now() + Duration::from_secs(20);
    while via.acquire(&first).is_err() {
        assert!(Instant::now() < deadline, "the server never granted");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(logged_grants(pg, &first.namespace, 1), 1);
    first.namespace
}

/// A server on PostgreSQL with `sessions` authority sessions and a namespace
/// of its own registered through it: the server, its `grpc://` URL and the
/// namespace.
fn served_namespace(pg: &str, sessions: usize, name: &str) -> (Running, String, String) {
    let (server, port) = server_with_sessions(pg, sessions);
    let url = format!("grpc://127.0.0.1:{port}");
    let via = grantid_authority::from_url(&url).unwrap();
    let namespace = registered_namespace(pg, via.as_ref(), name);
    (server, url, namespace)
}

/// A first request of `incarnation` in `namespace` through the server at
/// `url`, on a connection of its own, with a timeout longer than any lock
/// a test holds.
fn acquire_in_background(
    url: &str,
    namespace: &str,
    incarnation: u64,
) -> std::thread::JoinHandle<Result<grantid::Grant, grantid::GrantError>> {
    let url = format!("{url}?timeout_ms=20000");
    let mut r = grant_request(incarnation, None, 0);
    r.namespace = namespace.to_owned();
    std::thread::spawn(move || grantid_authority::from_url(&url).unwrap().acquire(&r))
}

/// Grant calls on different sessions do not wait for each other: while one
/// call is stuck in the store, another namespace's call is answered.
#[test]
fn a_call_stuck_in_the_store_does_not_hold_up_the_others() {
    let Some(pg) = postgres_url() else {
        return;
    };
    let (_server, port) = server_with_sessions(&pg, 4);
    let url = format!("grpc://127.0.0.1:{port}");
    let via = grantid_authority::from_url(&url).unwrap();
    let stuck = registered_namespace(&pg, via.as_ref(), "stuck");
    let free = registered_namespace(&pg, via.as_ref(), "free");
    // The stuck call reaches its session and waits in the store.
    let (lock, blocked) = stuck_in_the_store(&pg, &url, &stuck);
    let mut other = grant_request(2, None, 0);
    other.namespace = free;
    let short = grantid_authority::from_url(&format!("{url}?timeout_ms=2000")).unwrap();
    let answer = short.acquire(&other);
    assert!(
        !blocked.is_finished(),
        "the stuck call ended while its row was locked"
    );
    lock.release();
    assert!(answer.is_ok(), "the other namespace waited: {answer:?}");
    let stuck_answer = blocked.join().unwrap();
    assert!(stuck_answer.is_ok(), "{stuck_answer:?}");
}

/// Under overload the server sheds and drops work nobody waits for: with
/// one session held in the store, calls beyond the wait bound are refused
/// at once (`RESOURCE_EXHAUSTED`), and calls whose client gave up while
/// they waited never reach the store (no grant for a caller that is gone).
#[test]
fn an_overloaded_server_sheds_and_drops_calls_whose_client_has_gone() {
    let Some(pg) = postgres_url() else {
        return;
    };
    let (_server, url, namespace) = served_namespace(&pg, 1, "overload");
    let (lock, blocker) = stuck_in_the_store(&pg, &url, &namespace);
    // More callers than may wait for the one session; each gives up after
    // 1 s, while the session is still held, and well before the server's
    // own bound on a wait (`MAX_WAIT`, 3 s): only the deadline each sends
    // can end its wait.
    let callers = grantid_server::WAITING_PER_SESSION + 16;
    let first_incarnation = 1_000;
    let waiting: Vec<_> = (0..callers as u64)
        .map(|i| {
            let url = format!("{url}?timeout_ms=1000");
            let mut r = grant_request(first_incarnation + i, None, 0);
            r.namespace = namespace.clone();
            std::thread::spawn(move || {
                // Kept open afterwards, as a generator keeps its
                // connection: a closed one would cancel the call anyway.
                let via = grantid_authority::from_url(&url).unwrap();
                let answer = via.acquire(&r);
                (via, answer)
            })
        })
        .collect();
    let (_connections, answers): (Vec<_>, Vec<_>) =
        waiting.into_iter().map(|t| t.join().unwrap()).unzip();
    // The server's deadline of each call runs from when it arrived, a
    // moment after its client's: past both before the session is free, and
    // still inside the server's own bound.
    std::thread::sleep(Duration::from_millis(500));
    lock.release();
    assert!(blocker.join().unwrap().is_ok());
    let shed = answers
        .iter()
        .filter(|a| matches!(a, Err(grantid::GrantError::Unavailable(why)) if why.contains("at capacity")))
        .count();
    // The others gave up (their deadline passed while they waited).
    assert!(
        answers
            .iter()
            .all(|a| matches!(a, Err(grantid::GrantError::Unavailable(_)))),
        "{answers:?}"
    );
    assert!(shed >= 1, "none shed: {answers:?}");
    assert!(shed < callers, "all shed: {answers:?}");
    // What the store does after the lock is gone comes within moments; the
    // dropped calls must never come.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        logged_grants(&pg, &namespace, first_incarnation),
        0,
        "calls whose clients had gone were granted"
    );
}

/// A permanent refusal of the server's authority reaches the client as
/// one (a starting generator then fails at once instead of retrying until
/// its start-up timeout).
#[test]
fn a_refusal_passes_through_as_a_refusal() {
    let dir = scratch("refused");
    let port = free_port();
    let srv = server(port, &dir.join("state.json"));
    let source = grantid_authority::from_url(&format!("grpc://127.0.0.1:{port}")).unwrap();
    let mut first = grant_request(1, None, 0);
    first.namespace = "refused".into();
    source.acquire(&first).unwrap();
    let other_layout = grantid::GrantRequest {
        incarnation: 2,
        layout: Layout::new(41, 8, 14).unwrap(),
        ..first
    };
    let answer = source.acquire(&other_layout);
    assert!(
        matches!(&answer, Err(grantid::GrantError::Refused(why)) if why.contains("layout")),
        "{answer:?}"
    );
    let started = Generator::builder(
        Layout::new(41, 8, 14).unwrap(),
        "refused",
        std::sync::Arc::<dyn grantid::GrantSource>::from(source),
    )
    .start();
    assert_eq!(
        started.err().map(|e| e.kind()),
        Some(ErrorKind::InvalidArgument)
    );
    finish(srv, &dir);
}

/// Renewals keep a share of the sessions: however many first requests a
/// fleet retries (a saturated fleet retries its starts for seconds), a live
/// process's renewal finds a session.
#[test]
fn renewals_find_a_session_while_first_requests_fill_theirs() {
    let Some(pg) = postgres_url() else {
        return;
    };
    let (_server, url, namespace) = served_namespace(&pg, 2, "renewals");
    let via = grantid_authority::from_url(&url).unwrap();
    let mut live = grant_request(2, None, 0);
    live.namespace = namespace.clone();
    let held = via.acquire(&live).unwrap();
    let lock = NamespaceLock::hold(&pg, &namespace);
    // Two starts: the first stuck in the store, the second waiting for a
    // session (without the renewals' share it would take the second
    // session and be stuck in the store too).
    let mut starts = vec![acquire_in_background(&url, &namespace, 3)];
    wait_for_lock_waiters(&pg, &lock, 1);
    starts.push(acquire_in_background(&url, &namespace, 4));
    std::thread::sleep(Duration::from_millis(300));
    let renewal = grantid::GrantRequest {
        request_id: 2,
        worker: Some(held.worker),
        not_before: held.end,
        ..live
    };
    let short = grantid_authority::from_url(&format!("{url}?timeout_ms=2000")).unwrap();
    let answer = short.acquire(&renewal);
    assert!(
        starts.iter().all(|t| !t.is_finished()),
        "a start ended while its namespace was locked"
    );
    lock.release();
    assert!(answer.is_ok(), "the renewal found no session: {answer:?}");
    for t in starts {
        let start = t.join().unwrap();
        assert!(start.is_ok(), "{start:?}");
    }
}

#[test]
fn authority_sessions_out_of_range_are_refused() {
    for n in ["0", "65"] {
        let out = Command::new(BIN)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--authority",
                "static:1",
                "--authority-sessions",
                n,
            ])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{n}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("authority sessions must be 1 to 64"),
            "{n}: {err}"
        );
    }
}

/// At the drain, calls still waiting for a session are answered at once
/// (`UNAVAILABLE`, "stopping": retry on another server) instead of waiting
/// out the drain.
#[test]
fn a_drain_turns_away_calls_waiting_for_a_session() {
    let Some(pg) = postgres_url() else {
        return;
    };
    let (server, url, namespace) = served_namespace(&pg, 1, "drain");
    let (lock, stuck) = stuck_in_the_store(&pg, &url, &namespace);
    let waiting = acquire_in_background(&url, &namespace, 3);
    std::thread::sleep(Duration::from_millis(300));
    let term = Command::new("kill")
        .args(["-TERM", &server.0.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let answer = waiting.join().unwrap();
    lock.release();
    assert!(
        matches!(&answer, Err(grantid::GrantError::Unavailable(why)) if why.contains("stopping")),
        "{answer:?}"
    );
    // The call on the session finishes: the drain waits for it.
    let stuck = stuck.join().unwrap();
    assert!(stuck.is_ok(), "{stuck:?}");
}

/// Through `--drain-delay-ms` the server still serves: only health says
/// `NOT_SERVING`, so load balancers move the fleet's grant calls elsewhere
/// while the calls that still arrive are granted (a renewal refused there
/// would stall its process for nothing).
#[test]
fn grant_calls_are_served_through_the_drain_delay() {
    let dir = scratch("drain-delay");
    let port = free_port();
    let url = format!("file:{}", dir.join("state.json").display());
    let mut srv = server_with_args(port, &url, &["--drain-delay-ms", "3000"]);
    let via = grantid_authority::from_url(&format!("grpc://127.0.0.1:{port}")).unwrap();
    let first = via.acquire(&grant_request(1, None, 0)).unwrap();
    let term = Command::new("kill")
        .args(["-TERM", &srv.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    std::thread::sleep(Duration::from_millis(300));
    let mut renewal = grant_request(1, Some(first.worker), first.end);
    renewal.request_id = 2;
    let renewed = via.acquire(&renewal);
    assert!(
        matches!(&renewed, Ok(g) if g.start >= first.end),
        "{renewed:?}"
    );
    let other = via.acquire(&grant_request(2, None, 0));
    assert!(other.is_ok(), "{other:?}");
    stops_with_status_0(&mut srv);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The value of the Prometheus sample `name` (with its labels) served at
/// `http://127.0.0.1:PORT/metrics`, or `None` when it is not there.
fn scraped(port: u16, name: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
}

/// A call whose client gives up while it waits for a session is dropped
/// by the server before it answers; it is still counted, as `CANCELLED`.
#[test]
fn calls_dropped_before_their_answer_are_counted_cancelled() {
    let Some(pg) = postgres_url() else {
        return;
    };
    let (port, metrics_port) = (free_port(), free_port());
    let metrics = format!("127.0.0.1:{metrics_port}");
    let _server = Running(server_with_args(
        port,
        &format!("{pg}?timeout_ms=20000"),
        &["--authority-sessions", "1", "--metrics", &metrics],
    ));
    let url = format!("grpc://127.0.0.1:{port}");
    let via = grantid_authority::from_url(&url).unwrap();
    let namespace = registered_namespace(&pg, via.as_ref(), "cancelled");
    // Connected before the session is taken, so that the call the client
    // gives up on reaches the server well within its deadline.
    let impatient = grantid_authority::open(&format!("{url}?timeout_ms=1500")).unwrap();
    impatient.status(Some(&namespace)).unwrap();
    let (lock, stuck) = stuck_in_the_store(&pg, &url, &namespace);
    let mut r = grant_request(3, None, 0);
    r.namespace = namespace.clone();
    let gave_up = impatient.acquire(&r);
    lock.release();
    assert!(stuck.join().unwrap().is_ok());
    assert!(gave_up.is_err(), "{gave_up:?}");
    // The server counts the call when it drops it, which follows the
    // client's reset of the stream by a moment: wait for it, boundedly.
    let sample = r#"grantid_requests_total{method="Acquire",code="CANCELLED"}"#;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut cancelled = scraped(metrics_port, sample);
    while cancelled < Some(1.0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        cancelled = scraped(metrics_port, sample);
    }
    assert!(cancelled >= Some(1.0), "{sample}: {cancelled:?}");
}

/// A network service names its authority: two replicas that each took a
/// host-local default would both hold worker 0 (issue 27, path 2).
#[test]
fn serve_without_an_authority_is_refused() {
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_remove("GRANTID_AUTHORITY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            kill_9(&mut child);
            panic!("grantid serve started without --authority");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success());
    assert!(err.contains("--authority"), "{err}");
}

/// `static:N` without a state file remembers its high-water mark in the
/// server process only: a restarted server would grant again what a
/// grpc:// client still holds (issue 27, path 3). Its GrantService refuses,
/// and the client's start fails at once, saying why; the server's own IDs
/// are still served.
#[test]
fn grants_of_a_static_authority_without_state_are_refused() {
    let port = free_port();
    let mut srv = server_on(port, "static:3");
    let out = Command::new(BIN)
        .args([
            "next",
            "-n",
            "1",
            "--authority",
            &format!("grpc://127.0.0.1:{port}"),
        ])
        .args(["--namespace", "static-behind-serve", "--wait-ms", "5000"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a grpc:// client was granted from static:3: {err}"
    );
    assert!(err.contains("without a state file"), "{err}");
    kill_9(&mut srv);
}

/// A `grpc://` client makes the start-up horizon check of the server's
/// authority (issue 27, item 4): behind a server whose store bounds the
/// lead at 2,000 ms, the default horizon (5,000 + 1,000 ms) exits 17 at
/// once with both numbers, as on the store's own URL; a horizon inside the
/// lead is served.
#[test]
fn a_horizon_past_the_servers_bounded_lead_is_refused_at_start() {
    let dir = scratch("lead");
    let port = free_port();
    let store = format!("file:{}?max_lead_ms=2000", dir.join("state.json").display());
    let srv = server_with_args(
        port,
        &store,
        &["--horizon-ms", "1000", "--grant-duration-ms", "500"],
    );
    let url = format!("grpc://127.0.0.1:{port}");
    let next = |authority: &str, args: &[&str]| {
        Command::new(BIN)
            .args(["next", "-n", "1", "--authority", authority])
            .args(["--namespace", "lead", "--wait-ms", "5000"])
            .args(args)
            .output()
            .unwrap()
    };
    for authority in [url.as_str(), store.as_str()] {
        let t0 = Instant::now();
        let out = next(authority, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(17), "{authority}: {err}");
        assert!(
            err.contains("horizon_ms (5000) + grant_duration_ms (1000)")
                && err.contains("max_lead_ms (2000)"),
            "{authority}: {err}"
        );
        assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    }
    let out = next(
        &url,
        &["--horizon-ms", "1000", "--grant-duration-ms", "500"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    finish(srv, &dir);
}

/// A `grpc://...?datacenter=1` client registers the split on the server's
/// store: an unsplit layout as wide as the split's per-datacenter part is
/// refused on the namespace, through the server as on the store's URL.
#[test]
fn a_split_through_the_server_and_an_unsplit_layout_never_share_a_namespace() {
    let dir = scratch("split");
    let port = free_port();
    let srv = server(port, &dir.join("state.json"));
    let url = format!("grpc://127.0.0.1:{port}");
    let regional = grantid_authority::from_url(&format!("{url}?datacenter=1")).unwrap();
    let whole = grantid_authority::from_url(&url).unwrap();
    let split = Layout::new(40, 4, 8)
        .unwrap()
        .with_datacenter_bits(1)
        .unwrap();
    let unsplit = Layout::new(40, 3, 8).unwrap();
    let request = |incarnation, layout| grantid::GrantRequest {
        namespace: "split".into(),
        layout,
        ..grant_request(incarnation, None, 0)
    };
    let g = regional.acquire(&request(1, split)).unwrap();
    assert_eq!(split.datacenter_of(u64::from(g.worker)), 1);
    let r = whole.acquire(&request(2, unsplit));
    assert!(
        matches!(r, Err(grantid::GrantError::Refused(ref m)) if m.contains("another layout")),
        "{r:?}"
    );
    finish(srv, &dir);
}

// ---------------------------------------------------------------- TLS

/// Waits until `done`, at most 5 s; else fails with `failure`.
fn within_5_s(failure: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "{failure}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends `signal` to the server.
fn signal(srv: &Child, signal: i32) {
    // SAFETY: a signal to our own child process, still running (not
    // waited for).
    let sent = unsafe { libc::kill(srv.id() as i32, signal) };
    assert_eq!(sent, 0);
}

/// Writes `text` to `dir/name` at once (a rename), as a deployment
/// replaces a certificate.
fn put(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    path
}

const TOKEN_A: &str = "token-for-tls-a-0123456789abcdef";
const TOKEN_B: &str = "token-for-other-0123456789abcdef";

/// `grantid serve` with `args`, its log in `dir/server.log`; waits until
/// it listens.
fn logged_server(dir: &Path, port: u16, args: &[&str]) -> Child {
    let log = std::fs::File::create(dir.join("server.log")).unwrap();
    let url = format!("file:{}", dir.join("state.json").display());
    server_logging_to(port, &url, args, log.into())
}

/// [`logged_server`] serving TLS with `cert` and `key`, and `more` flags.
fn tls_server(dir: &Path, port: u16, (cert, key): (&Path, &Path), more: &[&str]) -> Child {
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let mut args = vec!["--tls-cert", &cert, "--tls-key", &key];
    args.extend_from_slice(more);
    logged_server(dir, port, &args)
}

fn tls_generator(
    url: &str,
    namespace: &str,
    startup: Duration,
) -> Result<Generator, grantid::Error> {
    Generator::builder(fleet_layout(), namespace, grantid_authority::from_url(url)?)
        .startup_timeout(startup)
        .start()
}

/// A start on `url` fails with `kind` (`InvalidArgument`: refused, at
/// once; `Unavailable`: uncertain until the start-up timeout) and every one
/// of `needles` in its message.
fn refused_at_start(url: &str, namespace: &str, kind: ErrorKind, needles: &[&str]) {
    // An uncertain start ends at its start-up timeout; a refused one at
    // once, long before its 10 s.
    let startup = if kind == ErrorKind::Unavailable {
        // Long enough for a handshake's refusal to be read on a loaded
        // machine (a TLS 1.3 server refuses a missing client certificate
        // after the client's half of the handshake).
        Duration::from_secs(4)
    } else {
        Duration::from_secs(10)
    };
    let e = match tls_generator(url, namespace, startup) {
        Ok(_) => panic!("{url}: started"),
        Err(e) => e,
    };
    assert_eq!(e.kind(), kind, "{url}: {e}");
    for needle in needles {
        assert!(
            e.message().contains(needle),
            "{url}: {needle:?} not in: {e}"
        );
    }
    for secret in [TOKEN_A, TOKEN_B] {
        assert!(!e.message().contains(secret), "{e}");
    }
}

#[test]
fn tls_with_client_certificates_and_tokens() {
    let dir = scratch("tls");
    let ca = Ca::new("grantid test CA");
    let wrong = Ca::new("grantid wrong CA");
    let (cert, key) = ca.issue(&dir, "server", &["127.0.0.1"]);
    let (client, client_key) = ca.issue(&dir, "client", &[]);
    let (stranger, stranger_key) = wrong.issue(&dir, "stranger", &[]);
    let ca_pem = put(&dir, "ca.pem", &ca.pem);
    let wrong_pem = put(&dir, "wrong-ca.pem", &wrong.pem);
    let tokens = put(
        &dir,
        "tokens",
        &format!("# clients\n{TOKEN_A} tls-a,tls-cli\n{TOKEN_B} other\n"),
    );
    let token_a = put(&dir, "a.token", &format!("{TOKEN_A}\n"));
    let token_b = put(&dir, "b.token", TOKEN_B);
    let port = free_port();
    let path = |p: &PathBuf| p.display().to_string();
    let srv = tls_server(
        &dir,
        port,
        (&cert, &key),
        &[
            "--tls-client-ca",
            &path(&ca_pem),
            "--token-file",
            &path(&tokens),
        ],
    );
    let base = format!("grpcs://127.0.0.1:{port}?timeout_ms=1000");
    let client_opts = format!("tls_cert={}&tls_key={}", path(&client), path(&client_key));
    let good = format!(
        "{base}&tls_ca={}&{client_opts}&token_file={}",
        path(&ca_pem),
        path(&token_a)
    );

    // The right CA, client certificate and token: two generators, 0
    // duplicates.
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let url = good.clone();
            std::thread::spawn(move || {
                let g = tls_generator(&url, "tls-a", Duration::from_secs(10)).unwrap();
                let ids: Vec<u64> = (0..20_000).map(|_| g.next_id().unwrap()).collect();
                g.close();
                ids
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.join().unwrap());
    }
    assert_eq!(all.len(), 40_000);
    assert_unique(&mut all);

    // The command takes grpcs:// as every binding does; without the token
    // it exits at once with InvalidArgument's status.
    let next = |url: &str| {
        Command::new(BIN)
            .args([
                "next",
                "-n",
                "3",
                "--namespace",
                "tls-cli",
                "--authority",
                url,
            ])
            .output()
            .unwrap()
    };
    let out = next(&good);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
    let out = next(&format!("{base}&tls_ca={}&{client_opts}", path(&ca_pem)));
    assert_eq!(out.status.code(), Some(17), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no bearer token"));

    // No client certificate: refused at the handshake.
    refused_at_start(
        &format!(
            "{base}&tls_ca={}&token_file={}",
            path(&ca_pem),
            path(&token_a)
        ),
        "tls-a",
        ErrorKind::InvalidArgument,
        &["requires a client certificate"],
    );
    // A client certificate of another CA.
    refused_at_start(
        &format!(
            "{base}&tls_ca={}&tls_cert={}&tls_key={}&token_file={}",
            path(&ca_pem),
            path(&stranger),
            path(&stranger_key),
            path(&token_a)
        ),
        "tls-a",
        ErrorKind::InvalidArgument,
        &["refused this client's certificate"],
    );
    // The wrong CA, and a name the certificate does not hold.
    refused_at_start(
        &format!(
            "{base}&tls_ca={}&{client_opts}&token_file={}",
            path(&wrong_pem),
            path(&token_a)
        ),
        "tls-a",
        ErrorKind::InvalidArgument,
        &["not signed by a CA this client trusts", "tls_ca="],
    );
    refused_at_start(
        &format!(
            "grpcs://localhost:{port}?timeout_ms=500&tls_ca={}&{client_opts}&token_file={}",
            path(&ca_pem),
            path(&token_a)
        ),
        "tls-a",
        ErrorKind::InvalidArgument,
        &["not valid for the host name"],
    );
    // No token: UNAUTHENTICATED, a refusal at once (no retry for the
    // start-up timeout).
    refused_at_start(
        &format!("{base}&tls_ca={}&{client_opts}", path(&ca_pem)),
        "tls-a",
        ErrorKind::InvalidArgument,
        &["Unauthenticated", "no bearer token"],
    );
    // A token of another namespace: PERMISSION_DENIED.
    refused_at_start(
        &format!(
            "{base}&tls_ca={}&{client_opts}&token_file={}",
            path(&ca_pem),
            path(&token_b)
        ),
        "tls-a",
        ErrorKind::InvalidArgument,
        &["PermissionDenied", "not bound to the namespace \"tls-a\""],
    );
    // The whole authority needs a token of every namespace.
    let status = grantid_authority::open(&good)
        .unwrap()
        .status(None)
        .unwrap_err();
    assert_eq!(status.kind(), ErrorKind::InvalidArgument, "{status}");
    // A renewal (a worker the server gave before, to this process or to
    // the one it restarted from) is never refused for a setting: with a
    // certificate the client's CA did not sign, or without its token, it
    // is `Unavailable`, so the generator keeps its grant to its end; a
    // first grant is refused.
    for (url, why) in [
        (
            format!(
                "{base}&tls_ca={}&{client_opts}&token_file={}",
                path(&wrong_pem),
                path(&token_a)
            ),
            "not signed by a CA",
        ),
        (
            format!("{base}&tls_ca={}&{client_opts}", path(&ca_pem)),
            "no bearer token",
        ),
    ] {
        let fresh = || grantid_authority::from_url(&url).unwrap();
        let renewal = fresh().acquire(&grant_request(1, Some(0), 0));
        assert!(
            matches!(renewal, Err(grantid::GrantError::Unavailable(ref m)) if m.contains(why)),
            "{url}: renewal: {renewal:?}"
        );
        let first = fresh().acquire(&grant_request(2, None, 0));
        assert!(
            matches!(first, Err(grantid::GrantError::Refused(ref m)) if m.contains(why)),
            "{url}: first grant: {first:?}"
        );
    }
    // Plaintext to a TLS server: uncertain, never a grant.
    let plain = grantid_authority::from_url(&format!("grpc://127.0.0.1:{port}?timeout_ms=300"));
    assert!(matches!(
        plain.unwrap().acquire(&grant_request(1, None, 0)),
        Err(grantid::GrantError::Unavailable(_))
    ));
    let log = std::fs::read_to_string(dir.join("server.log")).unwrap();
    assert!(log.contains("event=tls_refused"), "{log}");
    for secret in [TOKEN_A, TOKEN_B] {
        assert!(!log.contains(secret), "a token in the log");
    }
    finish(srv, &dir);
}

#[test]
fn tokens_need_tls_and_bad_files_are_refused_at_start() {
    let dir = scratch("tls-refused");
    let tokens = put(&dir, "tokens", &format!("{TOKEN_A}\n"));
    let short = put(&dir, "short", "abc\n");
    let ca = Ca::new("grantid test CA");
    let (cert, key) = ca.issue(&dir, "server", &["127.0.0.1"]);
    let (_, other_key) = ca.issue(&dir, "other", &["127.0.0.1"]);
    let path = |p: &PathBuf| p.display().to_string();
    let state = format!("file:{}", dir.join("state.json").display());
    for (args, needle) in [
        (vec!["--token-file".to_owned(), path(&tokens)], "--tls-cert"),
        (
            vec!["--tls-cert", &path(&cert), "--tls-key", &path(&other_key)]
                .into_iter()
                .map(str::to_owned)
                .collect(),
            "not a certificate and its key",
        ),
        (
            vec![
                "--tls-cert",
                &path(&cert),
                "--tls-key",
                &path(&key),
                "--token-file",
                &path(&short),
            ]
            .into_iter()
            .map(str::to_owned)
            .collect(),
            "line 1: a token is at least 16",
        ),
    ] {
        let out = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--authority", &state])
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(
            !stderr.contains(&path(&other_key)),
            "a key's path: {stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sighup_reloads_the_certificate_while_a_client_keeps_calling() {
    let dir = scratch("tls-reload");
    let (old_ca, new_ca) = (Ca::new("grantid old CA"), Ca::new("grantid new CA"));
    let (cert, key) = old_ca.issue(&dir, "server", &["127.0.0.1"]);
    let old_pem = put(&dir, "old-ca.pem", &old_ca.pem);
    let new_pem = put(&dir, "new-ca.pem", &new_ca.pem);
    let both = put(&dir, "both.pem", &format!("{}{}", old_ca.pem, new_ca.pem));
    let port = free_port();
    let path = |p: &PathBuf| p.display().to_string();
    let mut srv = tls_server(&dir, port, (&cert, &key), &[]);
    let url = |ca: &PathBuf| {
        format!(
            "grpcs://127.0.0.1:{port}?timeout_ms=2000&tls_ca={}",
            path(ca)
        )
    };
    let opens = |ca: &PathBuf| {
        grantid_authority::open(&url(ca))
            .unwrap()
            .status(None)
            .map(|_| ())
    };
    opens(&old_pem).unwrap();
    assert!(opens(&new_pem).is_err());

    // A client renewing every 50 ms on one connection, through the reload.
    let calling = {
        let url = url(&both);
        std::thread::spawn(move || {
            let g = Generator::builder(
                fleet_layout(),
                "reload",
                grantid_authority::from_url(&url).unwrap(),
            )
            .grant_duration_ms(50)
            .horizon_ms(2_000)
            .start()
            .unwrap();
            let t0 = Instant::now();
            let mut ids = 0u64;
            while t0.elapsed() < Duration::from_secs(4) {
                g.next_id().unwrap();
                ids += 1;
            }
            let stats = g.stats();
            g.close();
            (ids, stats.grants_acquired, stats.uncertain_retries)
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let sighup = |srv: &Child| signal(srv, libc::SIGHUP);
    // The new CA's certificate, in place, then SIGHUP.
    let fresh = new_ca.issue(&dir, "fresh", &["127.0.0.1"]);
    put(
        &dir,
        "server.key",
        &std::fs::read_to_string(&fresh.1).unwrap(),
    );
    put(
        &dir,
        "server.pem",
        &std::fs::read_to_string(&fresh.0).unwrap(),
    );
    sighup(&srv);
    within_5_s("new connections kept the old certificate", || {
        opens(&new_pem).is_ok()
    });
    let e = opens(&old_pem).unwrap_err();
    assert!(e.message().contains("not signed by a CA"), "{e}");

    // A bad certificate (not the key's): the one in use stays.
    let (other, _) = old_ca.issue(&dir, "other", &["127.0.0.1"]);
    put(
        &dir,
        "server.pem",
        &std::fs::read_to_string(&other).unwrap(),
    );
    sighup(&srv);
    std::thread::sleep(Duration::from_millis(1_500));
    opens(&new_pem).unwrap();

    let (ids, grants, uncertain) = calling.join().unwrap();
    assert!(ids > 1_000 && grants > 20, "{ids} IDs, {grants} grants");
    assert_eq!(uncertain, 0, "a call failed during the reload");
    let log = std::fs::read_to_string(dir.join("server.log")).unwrap();
    assert!(log.contains("event=reloaded what=tls"), "{log}");
    assert!(
        log.contains("event=reload_failed what=tls kept=previous"),
        "{log}"
    );
    assert!(
        !log.contains("server.key"),
        "a key's path in the log: {log}"
    );
    signal(&srv, libc::SIGTERM);
    stops_with_status_0(&mut srv);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sighup_reloads_the_tokens_even_when_the_file_looks_unchanged() {
    let dir = scratch("tls-tokens");
    let ca = Ca::new("grantid test CA");
    let (cert, key) = ca.issue(&dir, "server", &["127.0.0.1"]);
    let ca_pem = put(&dir, "ca.pem", &ca.pem);
    let tokens = put(&dir, "tokens", &format!("{TOKEN_A}\n"));
    let token_a = put(&dir, "a.token", TOKEN_A);
    let token_b = put(&dir, "b.token", TOKEN_B);
    let port = free_port();
    let path = |p: &PathBuf| p.display().to_string();
    let tokens_flag = path(&tokens);
    let mut srv = tls_server(&dir, port, (&cert, &key), &["--token-file", &tokens_flag]);
    let status = |token: &PathBuf| {
        let url = format!(
            "grpcs://127.0.0.1:{port}?timeout_ms=2000&tls_ca={}&token_file={}",
            path(&ca_pem),
            path(token)
        );
        grantid_authority::open(&url).unwrap().status(None)
    };
    status(&token_a).unwrap();
    assert_eq!(
        status(&token_b).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    // The other token, written in place with the same length and the old
    // modification time: the file check sees no change, SIGHUP reloads.
    assert_eq!(TOKEN_A.len(), TOKEN_B.len());
    let modified = std::fs::metadata(&tokens).unwrap().modified().unwrap();
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&tokens)
            .unwrap();
        f.write_all(format!("{TOKEN_B}\n").as_bytes()).unwrap();
        f.set_modified(modified).unwrap();
    }
    std::thread::sleep(Duration::from_millis(1_500));
    status(&token_a).unwrap();
    signal(&srv, libc::SIGHUP);
    within_5_s("SIGHUP did not reload the tokens", || {
        status(&token_b).is_ok()
    });
    let e = status(&token_a).unwrap_err();
    assert!(e.message().contains("Unauthenticated"), "{e}");
    let log = std::fs::read_to_string(dir.join("server.log")).unwrap();
    assert!(log.contains("event=reloaded what=tokens tokens=1"), "{log}");
    assert!(
        !log.contains(TOKEN_A) && !log.contains(TOKEN_B),
        "a token in the log"
    );
    signal(&srv, libc::SIGTERM);
    stops_with_status_0(&mut srv);
    let _ = std::fs::remove_dir_all(&dir);
}
