//! State loss on a real Redis (issue 20): a server without persistence is
//! killed and restarted empty while a generator issues; a new generator
//! started after the restart never repeats an ID of the first one. The test
//! starts its own redis-server (the package redis-server) on a free port.

mod common;

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use grantid::{Generator, GrantSource, Layout};
use grantid_authority::{from_url, open};

struct Server {
    port: u16,
    child: Child,
}

impl Server {
    fn start(port: u16) -> Option<Server> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) => {
                if std::env::var("GRANTID_REQUIRE_SERVICES").as_deref() == Ok("1") {
                    panic!("cannot start redis-server: {e}");
                }
                eprintln!("note: cannot start redis-server ({e}); skipping");
                return None;
            }
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !common::listening(port) {
            assert!(Instant::now() < deadline, "redis-server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Server { port, child })
    }

    fn kill(mut self) -> u16 {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.port
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn layout() -> Layout {
    Layout::new(41, 2, 8).unwrap()
}

fn generator(url: &str, ns: &str, losses: Arc<AtomicUsize>) -> Generator {
    Generator::builder(layout(), ns, from_url(url).unwrap())
        .grant_duration_ms(300)
        .horizon_ms(800)
        .startup_timeout(Duration::from_secs(10))
        .on_lease_lost(move |_| {
            losses.fetch_add(1, Ordering::SeqCst);
        })
        .start()
        .unwrap()
}

/// The epoch in a file authority's state file (+1 per quarantine; 0 when
/// the file or the field is missing).
fn store_epoch(path: &std::path::Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.split("\"epoch\":")
        .nth(1)
        .and_then(|rest| {
            rest.trim_start()
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// Issues from `g` on a thread of its own until `stop`; every ID it got.
fn issue_until(g: &Arc<Generator>, stop: &Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<u64>> {
    let (g, stop) = (Arc::clone(g), Arc::clone(stop));
    std::thread::spawn(move || {
        let mut ids = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            match g.next_id() {
                Ok(id) => ids.push(id),
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        ids
    })
}

#[test]
fn redis_restarted_empty_never_repeats_an_id() {
    let Some(server) = Server::start(common::free_port()) else {
        return;
    };
    let url = format!(
        "redis://127.0.0.1:{}/?max_lead_ms=1500&clock_skew_ms=200&timeout_ms=500",
        server.port
    );
    open(&url).unwrap().init_new_deployment().unwrap();
    let ns = common::namespace("loss");
    let a_losses = Arc::new(AtomicUsize::new(0));
    let a = Arc::new(generator(&url, &ns, a_losses.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let issuing = issue_until(&a, &stop);
    std::thread::sleep(Duration::from_millis(500));
    // The server dies and comes back empty; the operator runs init again.
    let port = server.kill();
    let _server = Server::start(port).unwrap();
    open(&url).unwrap().init().unwrap();
    let t0 = Instant::now();
    let b = generator(&url, &ns, Arc::new(AtomicUsize::new(0)));
    let waited = t0.elapsed();
    let mut later = Vec::new();
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        if let Ok(id) = b.next_id() {
            later.push(id);
        }
    }
    stop.store(true, Ordering::SeqCst);
    let earlier = issuing.join().unwrap();
    eprintln!(
        "first generator: {} IDs; second: {} IDs after waiting {waited:?} at start-up",
        earlier.len(),
        later.len()
    );
    assert!(!earlier.is_empty() && !later.is_empty());
    let first: HashSet<u64> = earlier.iter().copied().collect();
    let repeated = later.iter().filter(|id| first.contains(id)).count();
    assert_eq!(repeated, 0, "{repeated} IDs repeated after the restart");
    assert!(
        waited >= Duration::from_millis(1_000),
        "the second generator did not wait out the quarantine ({waited:?})"
    );
    // The first generator renewed during the quarantine: its worker was
    // lost (its grants came from the history the restart erased).
    assert!(
        a_losses.load(Ordering::SeqCst) >= 1,
        "the first generator kept its worker across the loss"
    );
}

#[test]
fn a_fence_quarantines_and_a_restart_from_a_stale_store_is_detected() {
    let Some(server) = Server::start(common::free_port()) else {
        return;
    };
    let url = format!(
        "redis://127.0.0.1:{}/?max_lead_ms=400&clock_skew_ms=100",
        server.port
    );
    let authority = open(&url).unwrap();
    // First use of an empty store: quarantined (it may have been wiped).
    let ns = common::namespace("fence");
    let req = |inc| common::request(&ns, inc, 1, None, 0, 10, layout());
    let r = authority.acquire(&req(1));
    assert!(
        matches!(r, Err(grantid::GrantError::Unavailable(ref m)) if m.contains("no grantid state")),
        "{r:?}"
    );
    std::thread::sleep(Duration::from_millis(600));
    authority.acquire(&req(2)).unwrap();
    // The operator fences: quarantined again at once.
    let report = authority.fence().unwrap();
    assert!(report.contains("quarantine until"), "{report}");
    let r = authority.acquire(&req(3));
    assert!(
        matches!(r, Err(grantid::GrantError::Unavailable(ref m)) if m.contains("fenced")),
        "{r:?}"
    );
    // A renewal during the quarantine loses its worker.
    let held = authority.acquire(&req(2)).unwrap();
    let renewal = common::request(&ns, 2, 2, Some(held.worker), held.end, 10, layout());
    let r = authority.acquire(&renewal);
    assert!(
        matches!(r, Err(grantid::GrantError::Lost(ref m)) if m.contains("acquire again")),
        "{r:?}"
    );
    std::thread::sleep(Duration::from_millis(600));
    authority.acquire(&req(4)).unwrap();
    // A stale store: the record survives (here: written back as a snapshot
    // would restore it) but the server's run_id differs after a restart.
    let mut con = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let record: Vec<String> = redis::cmd("HGETALL")
        .arg("grantid:store")
        .query(&mut con)
        .unwrap();
    drop(con);
    let port = server.kill();
    let _server = Server::start(port).unwrap();
    let mut con = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("grantid:store")
        .arg(&record)
        .query(&mut con)
        .unwrap();
    let r = open(&url).unwrap().acquire(&req(5));
    assert!(
        matches!(r, Err(grantid::GrantError::Unavailable(ref m)) if m.contains("run_id changed")),
        "{r:?}"
    );
}

/// A fresh database on the test server, dropped at the end.
struct Database {
    admin: postgres::Client,
    name: String,
    url: String,
}

impl Database {
    fn create() -> Option<Database> {
        let url = common::postgres_url()?;
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let name = format!("grantid_loss_{:x}", common::random());
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        let base = url.split('?').next().unwrap();
        let url = format!("{}/{name}", base.rsplit_once('/').unwrap().0);
        Some(Database { admin, name, url })
    }
}

impl Database {
    /// Runs `sql` as the administrator, after the database is dropped.
    fn admin_batch(mut self, sql: &str) -> Result<(), postgres::Error> {
        let _ = self
            .admin
            .batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", self.name));
        self.admin.batch_execute(sql)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let _ = self
            .admin
            .batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", self.name));
    }
}

#[test]
fn postgres_quarantines_new_state_a_fence_and_a_new_timeline_and_bounds_the_lead() {
    let Some(db) = Database::create() else {
        return;
    };
    let url = format!("{}?max_lead_ms=400&clock_skew_ms=100", db.url);
    let ns = common::namespace("pgloss");
    let authority = common::quarantine_lead_and_fence(&url, &ns, layout());
    let req =
        |inc, worker, not_before| common::request(&ns, inc, 1, worker, not_before, 10, layout());
    // A promotion or point-in-time recovery moves to a new timeline: here
    // the recorded identity is made to differ, as a restored row would.
    let mut c = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
    c.batch_execute("UPDATE grantid.store SET timeline = timeline - 1")
        .unwrap();
    common::waits(authority.acquire(&req(5, None, 0)), "identity changed");
}

/// The file authority: while a generator issues, its state file is restored
/// from an earlier copy (a backup), or deleted; the sidecar in this host's
/// memory shows both, so a second generator waits until the first one's
/// intervals have ended, the first one loses its worker at its next
/// renewal, and no ID repeats. (With the sidecar directory unwritable,
/// `GRANTID_RUNTIME_DIR=/proc/none`, both faults repeat IDs.)
#[test]
fn a_restored_or_deleted_state_file_never_repeats_an_id() {
    let dir = std::env::temp_dir().join(format!("grantid-file-loss-{:x}", common::random()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state.json");
    let url = format!("file:{}", state.display());
    let ns = common::namespace("fileloss");
    for fault in ["restore", "delete"] {
        // The backup: a file whose worker 0 is free (its generator closed).
        drop(generator(&url, &ns, Arc::new(AtomicUsize::new(0))));
        let backup = std::fs::read(&state).unwrap();
        let a_losses = Arc::new(AtomicUsize::new(0));
        let a = Arc::new(generator(&url, &ns, a_losses.clone()));
        let stop = Arc::new(AtomicBool::new(false));
        let issuing = issue_until(&a, &stop);
        std::thread::sleep(Duration::from_millis(400));
        // The fault happens outside the file lock, as a restore does: a
        // write of the first generator that read the file before it and
        // renames after it undoes it (nothing is lost then). Repeat it
        // until it stands, or until a reader has seen it (a new epoch).
        let epoch_before = store_epoch(&state);
        loop {
            match fault {
                "restore" => std::fs::write(&state, &backup).unwrap(),
                _ => std::fs::remove_file(&state).unwrap(),
            }
            std::thread::sleep(Duration::from_millis(100));
            let stands = match std::fs::read(&state) {
                Ok(bytes) => fault == "restore" && bytes == backup,
                Err(_) => fault == "delete",
            };
            if stands || store_epoch(&state) > epoch_before {
                break;
            }
        }
        let t0 = Instant::now();
        let b = generator(&url, &ns, Arc::new(AtomicUsize::new(0)));
        let waited = t0.elapsed();
        let mut later = Vec::new();
        let until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < until {
            if let Ok(id) = b.next_id() {
                later.push(id);
            }
        }
        stop.store(true, Ordering::SeqCst);
        let earlier = issuing.join().unwrap();
        let first: HashSet<u64> = earlier.iter().copied().collect();
        let repeated = later.iter().filter(|id| first.contains(id)).count();
        eprintln!(
            "file {fault}: first generator {} IDs, second {} IDs after waiting {waited:?}; \
             {repeated} repeated",
            earlier.len(),
            later.len()
        );
        assert!(!earlier.is_empty() && !later.is_empty());
        assert_eq!(repeated, 0, "file {fault}: {repeated} IDs repeated");
        assert!(
            a_losses.load(Ordering::SeqCst) >= 1,
            "file {fault}: the first generator kept its worker"
        );
        drop(b);
        drop(a);
    }
    std::fs::remove_dir_all(&dir).unwrap();
    if let Some(sidecar) = grantid_authority::sidecar_path(&state) {
        let _ = std::fs::remove_file(sidecar);
    }
}

/// A role that may not run `pg_control_system()` (revoked on some managed
/// services): `init` and `limits` (printed by `grantid authority status`)
/// say that the identity check compares the WAL timeline alone.
#[test]
fn postgres_without_pg_control_system_says_the_identity_check_is_partial() {
    let Some(db) = Database::create() else {
        return;
    };
    let role = format!("grantid_limited_{:x}", common::random() >> 16);
    let mut admin = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN;
             ALTER DATABASE {} OWNER TO {role};
             GRANT CREATE ON SCHEMA public TO {role};
             REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC;",
            db.name
        ))
        .unwrap();
    let limited_url = db.url.replacen("postgres@", &format!("{role}@"), 1);
    let limited = open(&limited_url).unwrap();
    let report = limited.init().unwrap();
    assert!(
        report.contains("identity check: the WAL timeline only"),
        "{report}"
    );
    let limits = limited.caveats().unwrap();
    assert!(
        limits.len() == 1 && limits[0].contains("pg_control_system()"),
        "{limits:?}"
    );
    let full = open(&db.url).unwrap();
    assert!(full.caveats().unwrap().is_empty(), "a superuser runs it");
    drop((full, limited, admin));
    let _ = db.admin_batch(&format!("DROP OWNED BY {role}; DROP ROLE {role}"));
}
