//! Many threads and several processes acquiring grants of one namespace at
//! once, on few workers with short leases (so workers are contended, stolen
//! and recycled): every worker's intervals are disjoint, in the grants the
//! clients received and in the authority's whole grant log.
//!
//! The processes are this test binary run again on `child_acquirer`.

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::{assert_disjoint, namespace, random, request, small_layout};
use grantid::{Grant, GrantError, GrantSource};

const THREADS: usize = 6;
const PROCESSES: usize = 3;
const ROUNDS: u64 = 40;

/// One client: an incarnation that takes any worker, renews it, and starts
/// over when it is lost. An uncertain answer (a busy lock, a slow server) is
/// retried with the same request id, as the generator does. Returns every
/// grant it received.
fn client(source: &dyn GrantSource, ns: &str) -> Vec<Grant> {
    let layout = small_layout();
    let incarnation = random();
    let mut held: Option<Grant> = None;
    let mut out = Vec::new();
    let mut request_id = 1;
    let mut uncertain = 0;
    while request_id <= ROUNDS {
        let (worker, not_before) = match &held {
            Some(g) => (Some(g.worker), g.end),
            None => (None, 0),
        };
        let r = request(ns, incarnation, request_id, worker, not_before, 2, layout);
        match source.acquire(&r) {
            Ok(g) => {
                assert!(g.start >= not_before);
                held = Some(g.clone());
                out.push(g);
            }
            Err(GrantError::Lost(_)) => {
                // Every worker is held: wait for a lease to run out.
                held = None;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => {
                uncertain += 1;
                assert!(uncertain < 100, "the authority stayed uncertain: {e}");
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        }
        // Sometimes pause past the lease, so the worker is recycled.
        if request_id % 7 == 0 {
            std::thread::sleep(Duration::from_millis(6));
        }
        request_id += 1;
    }
    out
}

fn run(url: &str, ns: &str) -> Vec<Grant> {
    let mut children = Vec::new();
    for _ in 0..PROCESSES {
        children.push(
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--ignored",
                    "--exact",
                    "child_acquirer",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("GRANTID_CHILD_URL", url)
                .env("GRANTID_CHILD_NAMESPACE", ns)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        );
    }
    let source: Arc<dyn GrantSource> = Arc::from(grantid_authority::from_url(url).unwrap());
    let mut grants: Vec<Grant> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|_| {
                let source = Arc::clone(&source);
                s.spawn(move || client(&*source, ns))
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let from_threads = grants.len();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "child failed: {:?}", out.status);
        let text = String::from_utf8(out.stdout).unwrap();
        // libtest may print "test child_acquirer ... " before the first line.
        for line in text
            .lines()
            .filter_map(|l| l.split_once("GRANT ").map(|(_, g)| g))
        {
            let f: Vec<u64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
            grants.push(Grant {
                namespace: ns.to_owned(),
                worker: f[0] as u32,
                incarnation: f[1],
                grant_id: f[2],
                start: f[3],
                end: f[4],
            });
        }
    }
    // Which client wins a contended worker is up to the scheduler; the
    // processes as a whole must have taken part.
    assert!(grants.len() > from_threads, "no child process got a grant");
    assert!(
        grants.len() > THREADS * 4,
        "too few grants: {}",
        grants.len()
    );
    let workers = assert_disjoint(&grants);
    assert_eq!(workers, 4, "all four workers were used");
    grants
}

#[test]
#[ignore = "run by the concurrency tests in a child process"]
fn child_acquirer() {
    let url = std::env::var("GRANTID_CHILD_URL").expect("GRANTID_CHILD_URL");
    let ns = std::env::var("GRANTID_CHILD_NAMESPACE").expect("GRANTID_CHILD_NAMESPACE");
    let source = grantid_authority::from_url(&url).unwrap();
    let grants: Vec<Grant> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2).map(|_| s.spawn(|| client(&*source, &ns))).collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    for g in grants {
        println!(
            "GRANT {} {} {} {} {}",
            g.worker, g.incarnation, g.grant_id, g.start, g.end
        );
    }
}

/// Every received grant is in the log, and the whole log is disjoint per
/// worker.
fn check_log(received: &[Grant], log: Vec<Grant>) {
    assert_disjoint(&log);
    for g in received {
        assert!(
            log.iter().any(|l| l == g),
            "grant {g:?} is missing from the authority's log"
        );
    }
    assert_eq!(
        log.len(),
        received.len(),
        "the log holds exactly the grants made"
    );
}

#[test]
fn file_threads_and_processes() {
    let path = common::temp_path("concurrent");
    let ns = namespace("conc");
    let url = format!("file:{}?lease_grace_ms=2", path.display());
    let grants = run(&url, &ns);
    // The state file's high-water marks cover every grant.
    assert_covered(&url, &ns, &grants);
}

/// The authority's high-water marks and fencing tokens cover every grant.
fn assert_covered(url: &str, ns: &str, grants: &[Grant]) {
    let status = grantid_authority::open(url)
        .unwrap()
        .status(Some(ns))
        .unwrap();
    for g in grants {
        let w = status.iter().find(|w| w.worker == g.worker).unwrap();
        assert!(w.high_water >= g.end);
        assert!(w.fencing >= g.grant_id);
    }
}

#[test]
fn postgres_threads_and_processes() {
    let Some(base) = common::postgres_url() else {
        return;
    };
    let ns = namespace("conc");
    let grants = run(&format!("{base}?lease_grace_ms=2"), &ns);
    let mut client = postgres::Client::connect(&base, postgres::NoTls).unwrap();
    let log = client
        .query(
            "SELECT worker, incarnation, grant_id, start_tick, end_tick \
             FROM grantid.grant_log WHERE namespace = $1",
            &[&ns],
        )
        .unwrap()
        .iter()
        .map(|r| Grant {
            namespace: ns.clone(),
            worker: r.get::<_, i64>(0) as u32,
            incarnation: r.get::<_, i64>(1) as u64,
            grant_id: r.get::<_, i64>(2) as u64,
            start: r.get::<_, i64>(3) as u64,
            end: r.get::<_, i64>(4) as u64,
        })
        .collect();
    check_log(&grants, log);
}

#[test]
fn redis_threads_and_processes() {
    let Some(base) = common::redis_url() else {
        return;
    };
    let ns = namespace("conc");
    let grants = run(&format!("{base}?lease_grace_ms=2"), &ns);
    let mut con = redis::Client::open(base.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(format!("grantid:{{{ns}}}:log"))
        .arg("-")
        .arg("+")
        .query(&mut con)
        .unwrap();
    let log = entries
        .into_iter()
        .map(|(_, fields)| {
            let get = |k: &str| -> u64 {
                fields
                    .iter()
                    .find(|(f, _)| f == k)
                    .unwrap()
                    .1
                    .parse()
                    .unwrap()
            };
            Grant {
                namespace: ns.clone(),
                worker: get("worker") as u32,
                incarnation: get("incarnation"),
                grant_id: get("grant_id"),
                start: get("start"),
                end: get("end"),
            }
        })
        .collect();
    check_log(&grants, log);
}

#[test]
fn mysql_threads_and_processes() {
    let Some(base) = common::mysql_url() else {
        return;
    };
    let ns = namespace("conc");
    let grants = run(&format!("{base}?lease_grace_ms=2"), &ns);
    let rows = common::mariadb_cli(
        &base,
        &format!(
            "SELECT worker, incarnation, grant_id, start_tick, end_tick \
             FROM grantid_grant_log WHERE namespace = '{ns}'"
        ),
    );
    let log = rows
        .lines()
        .map(|l| {
            l.split('\t')
                .map(|x| x.parse().unwrap())
                .collect::<Vec<u64>>()
        })
        .map(|f| Grant {
            namespace: ns.clone(),
            worker: f[0] as u32,
            incarnation: f[1],
            grant_id: f[2],
            start: f[3],
            end: f[4],
        })
        .collect();
    check_log(&grants, log);
}

/// etcd keeps no grant log of its own (the history of each worker key is
/// one until compaction): the grants received are disjoint, and every
/// worker's high-water covers them.
#[cfg(feature = "etcd")]
#[test]
fn etcd_threads_and_processes() {
    let Some(base) = common::etcd_url() else {
        return;
    };
    let ns = namespace("conc");
    let url = format!("{base}?lease_grace_ms=2");
    let grants = run(&url, &ns);
    assert_covered(&url, &ns, &grants);
}
