//! State loss and restarts on real MariaDB and etcd servers (issues 14 and
//! 20):
//!
//! * the quarantine of a store with no grantid state, the bounded lead, the
//!   operator's fence, and the automatic detection of a loss (MariaDB: the
//!   server identity changed; etcd: another cluster id, and a revision that
//!   went back after a data directory was restored);
//! * a server killed with SIGKILL and restarted while generators issue: the
//!   authority's answers are uncertain during the outage, then grants come
//!   back, and no ID repeats.
//!
//! The restart tests start their own servers (the packages mariadb-server
//! and etcd-server, which scripts/lib/services.sh installs) on free ports.

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use grantid::{Generator, Grant, GrantError, GrantSource, Layout};
use grantid_authority::{from_url, open};

fn layout() -> Layout {
    Layout::new(41, 2, 8).unwrap()
}

#[cfg(feature = "etcd")]
use common::etcd;
use common::{Scratch, Server, mariadb, quarantine_lead_and_fence, waits};

#[test]
fn mysql_quarantines_new_state_a_fence_and_another_server_and_bounds_the_lead() {
    let Some(base) = common::mysql_url() else {
        return;
    };
    // A fresh database on the test server, dropped at the end.
    let db = format!("grantid_loss_{:x}", common::random());
    let server = base.rsplit_once('/').unwrap().0.to_owned();
    common::mariadb_cli(&base, &format!("CREATE DATABASE {db}"));
    struct DropDatabase(String, String);
    impl Drop for DropDatabase {
        fn drop(&mut self) {
            common::mariadb_cli(&self.0, &format!("DROP DATABASE IF EXISTS {}", self.1));
        }
    }
    let _cleanup = DropDatabase(base.clone(), db.clone());
    let url = format!("{server}/{db}?max_lead_ms=400&clock_skew_ms=100");
    let ns = common::namespace("myloss");
    let authority = quarantine_lead_and_fence(&url, &ns, layout());
    // A failover to another server: the recorded identity differs from the
    // server's (here made to differ, as a row copied from elsewhere would).
    common::mariadb_cli(
        &url,
        "UPDATE grantid_store SET identity = 'server_id=99 server_uid=elsewhere'",
    );
    waits(
        authority.acquire(&common::request(&ns, 5, 1, None, 0, 10, layout())),
        "identity changed",
    );
    // An unsafe server setting is refused (and init says so).
    common::mariadb_cli(&url, "SET GLOBAL innodb_flush_log_at_trx_commit = 2");
    let refused = authority.acquire(&common::request(&ns, 6, 1, None, 0, 10, layout()));
    let init = authority.init();
    common::mariadb_cli(&url, "SET GLOBAL innodb_flush_log_at_trx_commit = 1");
    assert!(
        matches!(refused, Err(GrantError::Refused(ref m)) if m.contains("innodb_flush_log_at_trx_commit")),
        "{refused:?}"
    );
    let init = init.unwrap_err();
    assert!(
        init.message()
            .contains("innodb_flush_log_at_trx_commit = 2"),
        "{init}"
    );
}

#[test]
fn mysql_namespaces_that_differ_in_case_are_distinct() {
    let Some(url) = common::mysql_url() else {
        return;
    };
    let upper = format!("Case-{:x}", common::random());
    let lower = upper.to_lowercase();
    let s = from_url(&url).unwrap();
    s.acquire(&common::request(&upper, 1, 1, None, 0, 10, layout()))
        .unwrap();
    // Another layout under the lower-case name: its own namespace, granted.
    let other = Layout::new(40, 3, 8).unwrap();
    let g = s
        .acquire(&common::request(&lower, 2, 1, None, 0, 10, other))
        .unwrap();
    assert_eq!(g.worker, 0, "a namespace of its own starts at worker 0");
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_quarantines_new_state_a_fence_another_cluster_and_a_revision_that_went_back() {
    let scratch = Scratch::new("etcd-loss");
    let Some(mut server) = etcd(&scratch.0) else {
        return;
    };
    let url = format!(
        "etcd://127.0.0.1:{}?max_lead_ms=400&clock_skew_ms=100",
        server.port
    );
    let ns = common::namespace("etcdloss");
    let authority = quarantine_lead_and_fence(&url, &ns, layout());
    let req = |inc| common::request(&ns, inc, 1, None, 0, 10, layout());

    // A backup of the data directory, taken while the server is down.
    server.kill();
    let backup = scratch.0.join("backup");
    copy_dir(&scratch.0.join("data"), &backup);
    server.spawn().unwrap();
    // More grants after the backup: the cluster's revision moves on (the
    // first calls after the restart may find the old connection broken).
    let mut written = 0;
    let t0 = Instant::now();
    for inc in 10.. {
        match authority.acquire(&req(inc)) {
            Ok(_) | Err(GrantError::Lost(_)) => written += 1,
            Err(e) => assert!(t0.elapsed() < Duration::from_secs(10), "{e}"),
        }
        if written == 5 {
            break;
        }
    }
    // The data directory is restored from the backup: this process has
    // seen later revisions, so the store is quarantined.
    server.kill();
    std::fs::remove_dir_all(scratch.0.join("data")).unwrap();
    copy_dir(&backup, &scratch.0.join("data"));
    server.spawn().unwrap();
    let t0 = Instant::now();
    let r = loop {
        // The restarted member may answer "unavailable" for a moment first.
        let r = authority.acquire(&req(30));
        match &r {
            Err(GrantError::Unavailable(m)) if !m.contains("quarantine") => {
                assert!(t0.elapsed() < Duration::from_secs(10), "{r:?}");
                std::thread::sleep(Duration::from_millis(50));
            }
            _ => break r,
        }
    };
    waits(r, "revision went back");
    // A store record from another cluster.
    std::thread::sleep(Duration::from_millis(600));
    authority.acquire(&req(31)).unwrap();
    let copied_from = |cluster_id: u64| {
        let record = format!(
            r#"{{"cluster_id":{cluster_id},"epoch":9,"quarantine_until_ms":0,"reason":"copied"}}"#
        );
        let put = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints=127.0.0.1:{}", server.port))
            .args(["put", "grantid/store", &record])
            .output()
            .unwrap();
        assert!(put.status.success(), "{put:?}");
    };
    copied_from(12345);
    waits(open(&url).unwrap().acquire(&req(32)), "cluster id changed");
    // When a loss is found, another layout is still refused first.
    copied_from(54321);
    let other = grantid::GrantRequest {
        layout: Layout::new(41, 9, 13).unwrap(),
        ..req(33)
    };
    let r = open(&url).unwrap().acquire(&other);
    assert!(
        matches!(r, Err(GrantError::Refused(ref m)) if m.contains("another layout")),
        "{r:?}"
    );
}

/// A loss found while the namespace holds a worker record that cannot be
/// read is recorded all the same: the quarantine is written before any
/// worker record is decoded, so every namespace waits.
#[cfg(feature = "etcd")]
#[test]
fn etcd_records_a_loss_over_an_unreadable_worker_record() {
    let scratch = Scratch::new("etcd-loss-unreadable");
    let Some(server) = etcd(&scratch.0) else {
        return;
    };
    let url = format!(
        "etcd://127.0.0.1:{}?max_lead_ms=400&clock_skew_ms=100",
        server.port
    );
    let authority = open(&url).unwrap();
    authority.init_new_deployment().unwrap();
    let ns = common::namespace("unreadable");
    let req = |inc| common::request(&ns, inc, 1, None, 0, 10, layout());
    authority.acquire(&req(1)).unwrap();
    let put = |key: &str, value: &str| {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints=127.0.0.1:{}", server.port))
            .args(["put", key, value])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    put(&format!("grantid/ns/{ns}/w/1"), "not a record");
    put(
        "grantid/store",
        r#"{"cluster_id":12345,"epoch":9,"quarantine_until_ms":0,"reason":"copied"}"#,
    );
    let r = open(&url).unwrap().acquire(&req(2));
    assert!(
        matches!(&r, Err(GrantError::Unavailable(m)) if m.contains("cluster id changed")),
        "{r:?}"
    );
    let q = authority.quarantine().unwrap().expect("a quarantine");
    assert!(q.reason.contains("cluster id changed"), "{q:?}");
}

#[cfg(feature = "etcd")]
fn copy_dir(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}

/// Generators and a renewing probe run while the server is killed with
/// SIGKILL and restarted: the probe's answers go from granted to uncertain
/// and back, the generators issue again after the restart, and no ID
/// repeats.
fn killed_and_restarted_while_generators_run(url: &str, server: &mut Server) {
    let ns = common::namespace("restart");
    let stop = Arc::new(AtomicBool::new(false));
    let restarted_at = Arc::new(std::sync::Mutex::new(None::<u64>));
    let issued = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let generators: Vec<Arc<Generator>> = (0..3)
        .map(|_| {
            Arc::new(
                Generator::builder(layout(), ns.as_str(), from_url(url).unwrap())
                    .grant_duration_ms(300)
                    .horizon_ms(800)
                    .startup_timeout(Duration::from_secs(10))
                    .start()
                    .unwrap(),
            )
        })
        .collect();
    let issuing: Vec<_> = generators
        .iter()
        .map(|g| {
            let (g, stop, issued) = (Arc::clone(g), Arc::clone(&stop), Arc::clone(&issued));
            std::thread::spawn(move || {
                let mut ids = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    match g.next_id() {
                        Ok(id) => {
                            ids.push(id);
                            issued.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                    if ids.len() % 64 == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                ids
            })
        })
        .collect();
    // The probe: one incarnation renewing its worker every 20 ms.
    let probe = {
        let (url, ns, stop) = (url.to_owned(), ns.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let source = from_url(&url).unwrap();
            let inc = common::random();
            let mut outcomes = Vec::new();
            let mut held: Option<Grant> = None;
            let mut request_id = 0;
            while !stop.load(Ordering::SeqCst) {
                request_id += 1;
                let r = common::request(
                    &ns,
                    inc,
                    request_id,
                    held.as_ref().map(|g| g.worker),
                    held.as_ref().map_or(0, |g| g.end),
                    50,
                    layout(),
                );
                let answer = source.acquire(&r);
                outcomes.push(match &answer {
                    Ok(_) => 'g',
                    Err(GrantError::Unavailable(_)) => 'u',
                    Err(_) => 'l',
                });
                match answer {
                    Ok(g) => held = Some(g),
                    Err(GrantError::Lost(_)) => held = None,
                    Err(_) => {}
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            outcomes
        })
    };
    std::thread::sleep(Duration::from_millis(700));
    server.kill();
    std::thread::sleep(Duration::from_millis(1_500));
    server.spawn().unwrap();
    *restarted_at.lock().unwrap() = Some(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64,
    );
    // Until the generators issue again (their grants, 300 ms, ended during
    // the outage: these IDs are of grants made after the restart), within
    // 30 s; then a while more for the probe.
    let before = issued.load(Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(30);
    while issued.load(Ordering::SeqCst) == before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1_000));
    stop.store(true, Ordering::SeqCst);
    let outcomes: String = probe.join().unwrap().into_iter().collect();
    let per_generator: Vec<Vec<u64>> = issuing.into_iter().map(|h| h.join().unwrap()).collect();
    let restarted = restarted_at.lock().unwrap().unwrap();
    let mut all = HashSet::new();
    let mut total = 0;
    let mut after = 0;
    for (g, ids) in generators.iter().zip(&per_generator) {
        for &id in ids {
            total += 1;
            all.insert(id);
            if g.decode(id).unwrap().unix_ms >= restarted {
                after += 1;
            }
        }
        g.close();
    }
    eprintln!("{url}: probe answers {outcomes}; {total} IDs, {after} stamped after the restart");
    assert_eq!(all.len(), total, "{} IDs repeated", total - all.len());
    let first_u = outcomes
        .find('u')
        .expect("no uncertain answer while the server was down");
    assert!(
        outcomes[..first_u].contains('g'),
        "no grant before the outage: {outcomes}"
    );
    assert!(
        outcomes[first_u..].contains('g'),
        "no grant after the restart: {outcomes}"
    );
    assert!(after > 0, "the generators issued nothing after the restart");
}

#[test]
fn mysql_killed_and_restarted_while_generators_run() {
    if common::service("GRANTID_TEST_MYSQL_URL").is_none() {
        return;
    }
    let scratch = Scratch::new("mariadb-restart");
    let Some(mut server) = mariadb(&scratch.0, &[]) else {
        return;
    };
    let base = format!("mysql://root@127.0.0.1:{}/grantid_test", server.port);
    restart_case(&base, &mut server);
}

/// Declares the store at `base` new (with the default timeout: a server
/// just started may need a moment, and MariaDB's first init applies the
/// schema), then runs the restart case with a short `timeout_ms`.
fn restart_case(base: &str, server: &mut Server) {
    open(base).unwrap().init_new_deployment().unwrap();
    killed_and_restarted_while_generators_run(&format!("{base}?timeout_ms=500"), server);
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_killed_and_restarted_while_generators_run() {
    let scratch = Scratch::new("etcd-restart");
    let Some(mut server) = etcd(&scratch.0) else {
        return;
    };
    restart_case(&format!("etcd://127.0.0.1:{}", server.port), &mut server);
}
