//! Two regions (docs/AUTHORITIES.md, "Regions"): two throwaway PostgreSQL
//! servers, one per datacenter, the same namespace, layout 41 / 5
//! datacenter + 5 worker / 12. Each region keeps three processes issuing at
//! once; every ~150 ms one of them is killed with SIGKILL or exits cleanly
//! and a new one starts, so the 32 workers of a region are used up and
//! recycled. At the end: no ID twice across both regions, every ID's
//! datacenter is its region's, and some worker served more than one
//! process.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use grantid::{Generator, Layout};
use grantid_torture::pgserver::PgServer;

/// Set in a child: `URL DATACENTER OUT RUN_MS`.
const CHILD_ENV: &str = "GRANTID_REGIONS_CHILD";
const NAMESPACE: &str = "regions-v1";
/// How long the parent keeps starting and killing processes.
const RUN: Duration = Duration::from_secs(10);
const PER_REGION: usize = 3;

fn layout() -> Layout {
    Layout::new(41, 10, 12)
        .unwrap()
        .with_datacenter_bits(5)
        .unwrap()
}

/// The child: issues IDs into OUT (u64 little-endian, flushed per batch)
/// for RUN_MS, then closes (releasing its worker), unless killed first.
#[test]
fn regions_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return; // Not a child: nothing to do.
    };
    let parts: Vec<&str> = spec.split(' ').collect();
    let (url, dc, out, run_ms) = (parts[0], parts[1].parse().unwrap(), parts[2], parts[3]);
    let source = grantid_authority::from_url(url).unwrap();
    let generator = Generator::builder(layout(), NAMESPACE, source)
        .datacenter(dc)
        .grant_duration_ms(200)
        .horizon_ms(1_000)
        .startup_timeout(Duration::from_secs(20))
        .start()
        .unwrap();
    let mut file = std::fs::File::create(out).unwrap();
    let end = Instant::now() + Duration::from_millis(run_ms.parse().unwrap());
    let mut ids = vec![0u64; 500];
    while Instant::now() < end {
        // On a loaded machine a call may time out waiting (a renewal late,
        // the clock behind): no ID comes from a failed call; try again.
        if let Err(e) = generator.fill(&mut ids) {
            eprintln!("fill: {e}");
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
        file.write_all(&bytes).unwrap();
        // About 50,000 IDs per second per process: the machine is shared.
        std::thread::sleep(Duration::from_millis(10));
    }
    generator.close();
}

struct Running {
    child: Child,
    err: PathBuf,
    stop_at: Instant,
    kill: bool,
}

fn spawn(url: &str, dc: u32, out: &Path) -> Running {
    let run_ms = 100 + fastrand::u64(0..300);
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "regions_child", "--test-threads=1"])
        .env(CHILD_ENV, format!("{url} {dc} {} {run_ms}", out.display()))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(out.with_extension("err")).unwrap())
        .spawn()
        .unwrap();
    Running {
        err: out.with_extension("err"),
        child,
        // Half are killed (SIGKILL) while issuing, half exit by themselves
        // after `run_ms` of issuing (closing, which releases the worker).
        stop_at: Instant::now() + Duration::from_millis(50 + fastrand::u64(0..run_ms)),
        kill: fastrand::bool(),
    }
}

fn err_of(r: &Running) -> String {
    std::fs::read_to_string(&r.err).unwrap_or_default()
}

fn read_ids(path: &Path) -> Vec<u64> {
    let bytes = std::fs::read(path).unwrap_or_default();
    // A SIGKILL may cut the last batch: whole IDs only.
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn two_regions_never_collide() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let servers: Vec<PgServer> = match (PgServer::start(), PgServer::start()) {
        (Ok(a), Ok(b)) => vec![a, b],
        (Err(e), _) | (_, Err(e)) => {
            if std::env::var("GRANTID_REQUIRE_SERVICES").as_deref() == Ok("1") {
                panic!("cannot start PostgreSQL: {e}");
            }
            eprintln!("note: skipping, cannot start PostgreSQL: {e}");
            return;
        }
    };
    let urls: Vec<String> = servers
        .iter()
        .enumerate()
        .map(|(dc, s)| format!("{}?datacenter={dc}&lease_grace_ms=100", s.url()))
        .collect();
    for url in &urls {
        grantid_authority::open(url)
            .unwrap()
            .init_new_deployment()
            .unwrap();
    }
    let dir = std::env::temp_dir().join(format!("grantid-regions-{:016x}", fastrand::u64(..)));
    std::fs::create_dir_all(&dir).unwrap();

    // (datacenter, output file) of every process started.
    let mut outputs: Vec<(u32, PathBuf)> = Vec::new();
    let mut running: Vec<(u32, Running)> = Vec::new();
    let (mut kills, mut clean) = (0, 0);
    let start = Instant::now();
    while start.elapsed() < RUN {
        for (dc, url) in urls.iter().enumerate() {
            let dc = dc as u32;
            while running.iter().filter(|(d, _)| *d == dc).count() < PER_REGION {
                let out = dir.join(format!("ids-{}.bin", outputs.len()));
                outputs.push((dc, out.clone()));
                running.push((dc, spawn(url, dc, &out)));
            }
        }
        std::thread::sleep(Duration::from_millis(50));
        let mut left = Vec::new();
        for (dc, mut r) in running {
            if let Some(status) = r.child.try_wait().unwrap() {
                assert!(
                    status.success(),
                    "a process of datacenter {dc} failed: {status}: {}",
                    err_of(&r)
                );
                clean += 1;
            } else if Instant::now() >= r.stop_at && r.kill {
                r.child.kill().unwrap(); // SIGKILL
                r.child.wait().unwrap();
                kills += 1;
            } else {
                left.push((dc, r));
            }
        }
        running = left;
    }
    for (dc, mut r) in running {
        let status = r.child.wait().unwrap();
        assert!(
            status.success(),
            "a process of datacenter {dc} failed: {status}: {}",
            err_of(&r)
        );
        clean += 1;
    }

    let layout = layout();
    let mut all = Vec::new();
    // Per datacenter: worker within it -> how many processes used it.
    let mut users: BTreeMap<u32, BTreeMap<u64, usize>> = BTreeMap::new();
    for (dc, out) in &outputs {
        let ids = read_ids(out);
        // The workers this process used (one, unless it lost its lease).
        let mut workers = BTreeSet::new();
        for &id in &ids {
            let d = layout.decode(id).unwrap();
            assert_eq!(d.datacenter, u64::from(*dc), "ID {id} of datacenter {dc}");
            workers.insert(d.datacenter_worker);
        }
        for w in workers {
            *users.entry(*dc).or_default().entry(w).or_default() += 1;
        }
        all.extend(ids);
    }
    let total = all.len();
    all.sort_unstable();
    all.dedup();
    let duplicates = total - all.len();
    eprintln!(
        "regions: {} processes ({kills} killed, {clean} clean), {total} IDs, {duplicates} duplicates",
        outputs.len()
    );
    assert_eq!(duplicates, 0);
    assert!(total > 100_000, "only {total} IDs");
    assert!(
        kills >= 4 && clean >= 4,
        "{kills} kills, {clean} clean exits"
    );
    for dc in 0..2u32 {
        let used = &users[&dc];
        assert!(
            used.values().any(|&n| n > 1),
            "datacenter {dc}: no worker was recycled ({used:?})"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    drop(servers);
}
