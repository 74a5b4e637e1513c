//! State loss on real servers (issue 20), each fault with generators issuing
//! before it and new generators after it, checked for 0 duplicate IDs across
//! all of them, with the measured unavailability (how long the new
//! generators' first grant waited):
//!
//! - a redis-server restarted from a stale RDB snapshot (`SAVE`, more grants,
//!   SIGKILL, restart from the old dump);
//! - a PostgreSQL streaming standby that lagged (its WAL receiver cut, its
//!   replay paused) promoted after the primary crashed;
//! - a PostgreSQL base backup restored three ways: started as copied (same
//!   system identifier and timeline: **not detected**, the test shows what
//!   happens), started after `grantid authority fence` (the runbook), and
//!   recovered from the WAL archive (a new timeline: detected).
//!
//! Each test starts its own throwaway servers on free loopback ports (as the
//! `postgres` user when run as root) and removes them at the end. They take
//! tens of seconds, so they are `#[ignore]`d in the plain `cargo test` and
//! run by scripts/test.d/32-state-loss.sh; without the server binaries they
//! skip, or fail under `GRANTID_REQUIRE_SERVICES=1`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use grantid::{Generator, Layout};
use grantid_authority::{from_url, open};

/// Short quarantines for the tests: every grant ends at most `MAX_LEAD_MS`
/// after the authority's clock, and a loss waits that plus `SKEW_MS`.
const MAX_LEAD_MS: u64 = 2_000;
const SKEW_MS: u64 = 200;
const QUARANTINE: Duration = Duration::from_millis(MAX_LEAD_MS + SKEW_MS);

fn options() -> String {
    // A short lease grace, so a lease recorded in stale state expires soon
    // after the grant it covers: a new generator may then take that worker,
    // which is what makes a missed loss repeat IDs.
    format!("max_lead_ms={MAX_LEAD_MS}&clock_skew_ms={SKEW_MS}&lease_grace_ms=100")
}

/// Four workers (see [`churn`]) and 16 IDs per 1 ms tick, which keeps the
/// lists small enough to check quickly.
fn layout() -> Layout {
    Layout::new(41, 2, 4).unwrap()
}

fn required() -> bool {
    std::env::var("GRANTID_REQUIRE_SERVICES").as_deref() == Ok("1")
}

/// `None` (with a note) when a server binary is missing; a panic under
/// `GRANTID_REQUIRE_SERVICES=1`.
fn missing(what: &str) -> Option<()> {
    if required() {
        panic!("{what} and GRANTID_REQUIRE_SERVICES=1");
    }
    eprintln!("note: {what}; skipping");
    None
}

/// A scratch directory under /tmp, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = PathBuf::from(format!("/tmp/grantid-{tag}.{:016x}", common::random()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// One owned by `postgres` when we are root (the servers run as it).
    fn for_postgres(tag: &str) -> Scratch {
        let scratch = Scratch::new(tag);
        if common::is_root() {
            let ok = Command::new("chown")
                .arg("postgres")
                .arg(&scratch.0)
                .status();
            assert!(
                ok.is_ok_and(|s| s.success()),
                "chown postgres {:?}",
                scratch.0
            );
        }
        scratch
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ---------------------------------------------------------------- issuing

/// One generator issuing as fast as it can on its own thread, as a process
/// of the application would.
struct Issuer {
    name: &'static str,
    generator: Arc<Generator>,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicUsize>,
    thread: JoinHandle<Vec<u64>>,
    /// How long `start()` waited for the first grant.
    waited: Duration,
    /// When `start()` returned (the first grant was in hand).
    ready: Instant,
}

impl Issuer {
    fn start(name: &'static str, url: &str, ns: &str) -> Issuer {
        let t0 = Instant::now();
        let generator = Generator::builder(layout(), ns, from_url(url).unwrap())
            .grant_duration_ms(300)
            .horizon_ms(1_500)
            .startup_timeout(Duration::from_secs(20))
            .start()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let ready = Instant::now();
        let generator = Arc::new(generator);
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (g, stop, count) = (generator.clone(), stop.clone(), count.clone());
            std::thread::spawn(move || {
                let mut ids = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    match g.next_ids(64) {
                        Ok(batch) => {
                            ids.extend_from_slice(&batch);
                            count.store(ids.len(), Ordering::SeqCst);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
                ids
            })
        };
        Issuer {
            name,
            generator,
            stop,
            count,
            thread,
            waited: ready - t0,
            ready,
        }
    }

    fn issued(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    fn finish(self) -> (&'static str, Vec<u64>) {
        self.stop.store(true, Ordering::SeqCst);
        let ids = self.thread.join().unwrap();
        self.generator.close();
        (self.name, ids)
    }
}

/// The generators issuing when the fault comes, with some churn first:
/// `a0`, `a2`, `a3` and `a4` take the four workers; `a0` ends (releasing
/// worker 0), then `a3` (worker 2), before the state the authority will
/// fall back to is captured (`capture`: a snapshot, a standby cut off, a
/// base backup); `a1` starts after it and takes worker 0, released longest
/// ago. The lost state shows worker 0 released, so a new generator after a
/// missed loss takes it while `a1` still issues in it: that is how a missed
/// loss repeats IDs. Worker 2 stays free, so a new generator finds a worker
/// however the running ones fare after a detected loss.
fn churn(url: &str, ns: &str, capture: impl FnOnce()) -> ChurnedIssuers {
    let a0 = Issuer::start("a0", url, ns);
    let a2 = Issuer::start("a2", url, ns);
    let a3 = Issuer::start("a3", url, ns);
    let a4 = Issuer::start("a4", url, ns);
    std::thread::sleep(Duration::from_millis(300));
    let a0 = a0.finish();
    std::thread::sleep(Duration::from_millis(100));
    let a3 = a3.finish();
    std::thread::sleep(Duration::from_millis(100));
    let ended = vec![a0, a3];
    let mut running = vec![a2, a4];
    let at_capture = ended.iter().map(|e| e.1.len()).sum::<usize>()
        + running.iter().map(Issuer::issued).sum::<usize>();
    capture();
    running.push(Issuer::start("a1", url, ns));
    ChurnedIssuers {
        ended,
        running,
        at_capture,
    }
}

struct ChurnedIssuers {
    ended: Vec<(&'static str, Vec<u64>)>,
    running: Vec<Issuer>,
    /// IDs issued when the state was captured.
    at_capture: usize,
}

impl ChurnedIssuers {
    fn issued(&self) -> usize {
        self.ended.iter().map(|e| e.1.len()).sum::<usize>()
            + self.running.iter().map(Issuer::issued).sum::<usize>()
    }

    fn finish(self) -> Vec<(&'static str, Vec<u64>)> {
        let mut all = self.ended;
        all.extend(self.running.into_iter().map(Issuer::finish));
        all
    }
}

/// After a fault at `fault_at` (the restart, the promotion): a new
/// generator on `url` issues for 700 ms. Checks 0 repeated IDs across every
/// generator, and that the new one's first grant waited out the quarantine.
fn after_fault(
    what: &str,
    url: &str,
    ns: &str,
    a: ChurnedIssuers,
    before_fault: usize,
    fault_at: Instant,
) {
    let b = Issuer::start("b", url, ns);
    std::thread::sleep(Duration::from_millis(700));
    let unavailable = b.ready - fault_at;
    let b_waited = b.waited;
    let at_capture = a.at_capture;
    let earlier = a.finish();
    let later = vec![b.finish()];
    let repeated = counted(what, &earlier, &later);
    eprintln!(
        "{what}: {at_capture} IDs before the state fallen back to was captured, {} after it \
         and before the fault; new generator: start-up waited {b_waited:?}, first grant \
         {unavailable:?} after the fault (quarantine {QUARANTINE:?}); {repeated} repeated IDs",
        before_fault - at_capture
    );
    assert!(at_capture > 0 && before_fault > at_capture && !later[0].1.is_empty());
    assert_eq!(
        repeated, 0,
        "{what}: {repeated} IDs repeated after the fault"
    );
    // The quarantine started at the first acquire after the fault, so no
    // new grant came before fault + quarantine (same machine, same clock).
    assert!(
        unavailable + Duration::from_millis(50) >= QUARANTINE,
        "{what}: the new generator was granted {unavailable:?} after the fault"
    );
}

/// IDs of `later` that repeat one of `earlier` (each list is one
/// generator's; a generator never repeats its own IDs, so repeats inside one
/// list are counted too).
fn repeats(earlier: &[(&str, Vec<u64>)], later: &[(&str, Vec<u64>)]) -> usize {
    let mut all: Vec<u64> = earlier
        .iter()
        .chain(later)
        .flat_map(|(_, ids)| ids.iter().copied())
        .collect();
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    n - all.len()
}

/// Prints how many IDs each generator issued; returns [`repeats`].
fn counted(what: &str, earlier: &[(&str, Vec<u64>)], later: &[(&str, Vec<u64>)]) -> usize {
    let counts: Vec<String> = earlier
        .iter()
        .chain(later)
        .map(|(n, ids)| format!("{n} {}", ids.len()))
        .collect();
    eprintln!("{what}: IDs issued: {}", counts.join(", "));
    repeats(earlier, later)
}

// ---------------------------------------------------------------- Redis

struct Redis {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Redis {
    /// A redis-server without automatic snapshots or AOF whose dump file is
    /// `DIR/grantid.rdb`: it writes one only on `SAVE`, and loads it at
    /// start.
    fn start(port: u16, dir: &Path) -> Option<Redis> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .args(["--dbfilename", "grantid.rdb"])
            .stdout(Stdio::null())
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) => {
                missing(&format!("cannot start redis-server ({e})"))?;
                unreachable!()
            }
        };
        let server = Redis {
            port,
            dir: dir.to_path_buf(),
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ok = server
                .connection()
                .ok()
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c).ok());
            if ok.is_some() {
                return Some(server);
            }
            assert!(Instant::now() < deadline, "redis-server did not answer");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/?{}", self.port, options())
    }

    fn connection(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?.get_connection()
    }

    fn query<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> T {
        cmd.query(&mut self.connection().unwrap()).unwrap()
    }

    fn run_id(&self) -> String {
        let info: String = self.query(redis::cmd("INFO").arg("server"));
        info.lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .unwrap()
            .trim()
            .to_string()
    }

    /// SIGKILL, then a new server on the same port and directory.
    fn kill_and_restart(mut self) -> Redis {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        Redis::start(self.port, &self.dir).unwrap()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
#[ignore = "fault test on throwaway servers: scripts/test.d/32-state-loss.sh runs it"]
fn redis_restarted_from_a_stale_snapshot_never_repeats_an_id() {
    let scratch = Scratch::new("loss-redis");
    let Some(server) = Redis::start(common::free_port(), &scratch.0) else {
        return;
    };
    let url = server.url();
    open(&url).unwrap().init_new_deployment().unwrap();
    let ns = common::namespace("stale-rdb");
    let mut old_run_id = String::new();
    // The snapshot: everything granted after it is lost at the restart.
    let a = churn(&url, &ns, || {
        let _: String = server.query(&mut redis::cmd("SAVE"));
        old_run_id = server.run_id();
    });
    std::thread::sleep(Duration::from_millis(1_000));
    let before_kill = a.issued();
    let server = server.kill_and_restart();
    let restarted = Instant::now();
    // The restarted server loaded the stale dump: the store record is back,
    // with the run_id of the server that wrote it, unless a renewal of the
    // running generators came first and already quarantined the store for
    // that run_id.
    let (recorded, reason): (Option<String>, Option<String>) = server.query(
        redis::cmd("HMGET")
            .arg("grantid:store")
            .arg("run_id")
            .arg("reason"),
    );
    let new_run_id = server.run_id();
    assert_ne!(new_run_id, old_run_id);
    let reason = reason.unwrap_or_default();
    assert!(
        recorded.as_deref() == Some(old_run_id.as_str())
            || reason.contains(&format!("run_id changed from {old_run_id} to {new_run_id}")),
        "the restart did not load the snapshot: {recorded:?}, {reason}"
    );
    after_fault("redis, stale RDB", &url, &ns, a, before_kill, restarted);
}

// ---------------------------------------------------------------- PostgreSQL

/// One throwaway PostgreSQL data directory and the port it serves on.
struct Pg {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    running: bool,
}

impl Pg {
    /// `initdb` (trust authentication, which pg_hba.conf also grants to
    /// replication connections from 127.0.0.1) with `conf` appended to
    /// postgresql.conf.
    fn init(bin: &Path, data: PathBuf, conf: &str) -> Pg {
        common::as_pg(&format!(
            "{} -D {} -A trust -U postgres --no-sync >/dev/null",
            common::quote(&bin.join("initdb")),
            common::quote(&data)
        ));
        let pg = Pg::at(bin, data);
        pg.append_conf(conf);
        pg
    }

    fn at(bin: &Path, data: PathBuf) -> Pg {
        Pg {
            bin: bin.to_path_buf(),
            data,
            port: common::free_port(),
            running: false,
        }
    }

    fn append_conf(&self, conf: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.data.join("postgresql.conf"))
            .unwrap();
        writeln!(f, "\n{conf}").unwrap();
    }

    /// A copy of the data directory `from` (a base backup) in `data`.
    fn copy_of(bin: &Path, from: &Path, data: PathBuf) -> Pg {
        common::as_pg(&format!(
            "cp -a {} {}",
            common::quote(from),
            common::quote(&data)
        ));
        Pg::at(bin, data)
    }

    fn start(&mut self) {
        let dir = self.data.parent().unwrap();
        common::as_pg(&format!(
            "{} -D {} -l {} -w -t 60 -o \"-c listen_addresses=127.0.0.1 -p {} -k {}\" start >/dev/null",
            common::quote(&self.bin.join("pg_ctl")),
            common::quote(&self.data),
            common::quote(&self.data.with_extension("log")),
            self.port,
            common::quote(dir)
        ));
        self.running = true;
    }

    /// A crash: `pg_ctl stop -m immediate` (no checkpoint, sessions cut).
    fn crash(&mut self) {
        common::as_pg(&format!(
            "{} -D {} -m immediate -w stop >/dev/null",
            common::quote(&self.bin.join("pg_ctl")),
            common::quote(&self.data)
        ));
        self.running = false;
    }

    fn promote(&self) {
        common::as_pg(&format!(
            "{} -D {} -w -t 60 promote >/dev/null",
            common::quote(&self.bin.join("pg_ctl")),
            common::quote(&self.data)
        ));
    }

    /// `pg_basebackup` of this server into `data` (`-R`: as a streaming
    /// standby of it).
    fn base_backup(&self, data: &Path, standby: bool) {
        common::as_pg(&format!(
            "{} -h 127.0.0.1 -p {} -U postgres -D {} -X stream --checkpoint=fast --no-sync{}",
            common::quote(&self.bin.join("pg_basebackup")),
            self.port,
            common::quote(data),
            if standby { " -R" } else { "" }
        ));
    }

    fn plain_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn url(&self) -> String {
        format!("{}?{}", self.plain_url(), options())
    }

    fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.plain_url(), postgres::NoTls).unwrap()
    }

    fn value(&self, sql: &str) -> String {
        let row = self.client().query_one(sql, &[]).unwrap();
        row.get::<_, Option<String>>(0).unwrap_or_default()
    }

    /// (system identifier, timeline) as grantid reads them now.
    fn identity(&self) -> (String, i32) {
        let row = self
            .client()
            .query_one(
                "SELECT system_identifier, timeline FROM grantid.identity()",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    }

    /// (system identifier, timeline, quarantine_until_ms) as `grantid.store`
    /// recorded them.
    fn recorded(&self) -> (String, i32, i64) {
        let row = self
            .client()
            .query_one(
                "SELECT system_identifier, timeline, quarantine_until_ms FROM grantid.store",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    }

    /// Waits until recovery has ended (an archive recovery accepts
    /// read-only sessions before it does).
    fn wait_writable(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.value("SELECT pg_is_in_recovery()::text") == "true" {
            assert!(Instant::now() < deadline, "recovery did not end");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn grant_log_rows(&self) -> i64 {
        self.value("SELECT count(*)::text FROM grantid.grant_log")
            .parse()
            .unwrap()
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        if self.running {
            self.crash();
        }
    }
}

fn postgres_bin() -> Option<PathBuf> {
    match common::pg_bin(&["initdb", "pg_ctl", "pg_basebackup"]) {
        Some(b) => Some(b),
        None => {
            missing(
                "no PostgreSQL server binaries with pg_basebackup (apt-get install postgresql)",
            )?;
            unreachable!()
        }
    }
}

#[test]
#[ignore = "fault test on throwaway servers: scripts/test.d/32-state-loss.sh runs it"]
fn postgres_promotion_of_a_lagging_standby_never_repeats_an_id() {
    let Some(bin) = postgres_bin() else {
        return;
    };
    let scratch = Scratch::for_postgres("loss-pg-promote");
    let mut primary = Pg::init(&bin, scratch.0.join("primary"), "wal_level = replica");
    primary.start();
    open(&primary.url()).unwrap().init_new_deployment().unwrap();
    let standby_dir = scratch.0.join("standby");
    primary.base_backup(&standby_dir, true);
    let mut standby = Pg::at(&bin, standby_dir);
    standby.start();
    let ns = common::namespace("promote");
    // The standby falls behind: replay paused, and its WAL receiver cut
    // (a promotion first replays every WAL record already received, so a
    // paused replay alone loses nothing; an asynchronous standby that lost
    // its connection to the primary does).
    let a = churn(&primary.url(), &ns, || {
        // Paused only once the receiver has stopped: a paused startup
        // process would not act on the new primary_conninfo.
        let mut c = standby.client();
        c.batch_execute("ALTER SYSTEM SET primary_conninfo = ''")
            .unwrap();
        c.batch_execute("SELECT pg_reload_conf()").unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while standby.value("SELECT count(*)::text FROM pg_stat_wal_receiver") != "0" {
            assert!(Instant::now() < deadline, "the WAL receiver did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
        c.batch_execute("SELECT pg_wal_replay_pause()").unwrap();
    });
    std::thread::sleep(Duration::from_millis(1_000));
    let before_crash = a.issued();
    let primary_rows = primary.grant_log_rows();
    primary.crash();
    standby.promote();
    let promoted = Instant::now();
    // Counted after the promotion, which replays what the standby received.
    let standby_rows = standby.grant_log_rows();
    let recorded = standby.recorded();
    let now = standby.identity();
    eprintln!(
        "postgres promotion: grant_log rows: primary {primary_rows}, standby {standby_rows}; \
         recorded identity {recorded:?}, promoted server's {now:?}"
    );
    assert!(standby_rows < primary_rows, "the standby did not lag");
    assert_eq!(recorded.0, now.0, "a standby keeps the system identifier");
    assert_ne!(recorded.1, now.1, "a promotion starts a new timeline");
    after_fault(
        "postgres promotion",
        &standby.url(),
        &ns,
        a,
        before_crash,
        promoted,
    );
}

#[test]
#[ignore = "fault test on throwaway servers: scripts/test.d/32-state-loss.sh runs it"]
fn postgres_restored_from_a_base_backup() {
    let Some(bin) = postgres_bin() else {
        return;
    };
    let scratch = Scratch::for_postgres("loss-pg-restore");
    let archive = scratch.0.join("archive");
    common::as_pg(&format!("mkdir {}", common::quote(&archive)));
    let archive_command = format!(
        "archive_mode = on\narchive_command = 'cp %p {}/%f'",
        archive.display()
    );
    let mut primary = Pg::init(&bin, scratch.0.join("primary"), &archive_command);
    primary.start();
    open(&primary.url()).unwrap().init_new_deployment().unwrap();
    let ns = common::namespace("restore");
    let backup = scratch.0.join("backup");
    let a = churn(&primary.url(), &ns, || primary.base_backup(&backup, false));
    let at_backup = a.at_capture;
    let primary_identity = primary.identity();
    // Three restores of that backup, each a server of its own, prepared
    // while the primary still serves:
    // - as copied: the files of the backup started as they are (crash
    //   recovery from its own WAL, then the same timeline);
    let mut copied = Pg::copy_of(&bin, &backup, scratch.0.join("copied"));
    // - the same, then fenced by the operator (the runbook);
    let mut fenced = Pg::copy_of(&bin, &backup, scratch.0.join("fenced"));
    // - a point-in-time recovery from the WAL archive (recovery.signal),
    //   which ends on a new timeline.
    let mut recovered = Pg::copy_of(&bin, &backup, scratch.0.join("recovered"));
    recovered.append_conf(&format!(
        "restore_command = 'cp {}/%f %p'",
        archive.display()
    ));
    common::as_pg(&format!(
        "touch {}",
        common::quote(&recovered.data.join("recovery.signal"))
    ));
    for pg in [&mut copied, &mut fenced, &mut recovered] {
        pg.start();
        pg.wait_writable();
    }
    let report_fence = open(&fenced.url()).unwrap().fence().unwrap();
    let identities = [copied.identity(), fenced.identity(), recovered.identity()];
    eprintln!(
        "postgres restore: primary identity {primary_identity:?}; restored as copied {:?}, \
         fenced {:?} ({report_fence}), recovered from the archive {:?}",
        identities[0], identities[1], identities[2],
    );
    std::thread::sleep(Duration::from_millis(300));
    let before_loss = a.issued();
    // The primary is lost; the restores take over.
    primary.crash();
    let started = Instant::now();
    let urls = [copied.url(), fenced.url(), recovered.url()];
    let starts: Vec<JoinHandle<Issuer>> = [("copied", 0), ("fenced", 1), ("recovered", 2)]
        .into_iter()
        .map(|(name, i)| {
            let (url, ns) = (urls[i].clone(), ns.clone());
            std::thread::spawn(move || Issuer::start(name, &url, &ns))
        })
        .collect();
    let later: Vec<Issuer> = starts.into_iter().map(|h| h.join().unwrap()).collect();
    // The copied backup started no quarantine: its record is as the
    // primary left it when the backup was taken.
    let copied_record = copied.recorded();
    std::thread::sleep(Duration::from_millis(700));
    let waits: Vec<String> = later
        .iter()
        .map(|b| {
            format!(
                "{} waited {:?} ({:?} after the primary was lost)",
                b.name,
                b.waited,
                b.ready - started
            )
        })
        .collect();
    let earlier = a.finish();
    let later: Vec<(&str, Vec<u64>)> = later.into_iter().map(Issuer::finish).collect();
    let each: Vec<usize> = later
        .iter()
        .map(|l| counted("postgres restore", &earlier, std::slice::from_ref(l)))
        .collect();
    eprintln!(
        "postgres restore: {at_backup} IDs before the backup, {} after it; {}; repeated IDs: \
         as copied {}, fenced {}, recovered {}",
        before_loss - at_backup,
        waits.join(", "),
        each[0],
        each[1],
        each[2]
    );
    assert!(at_backup > 0 && before_loss > at_backup);
    assert!(later.iter().all(|(_, ids)| !ids.is_empty()));
    // What a restore that keeps the identity does: not detected. The system
    // identifier and the timeline are the primary's, and the record carries
    // no quarantine, so the first acquire was granted at once; IDs repeat
    // unless the operator fences (docs/AUTHORITIES.md, "State loss").
    assert_eq!(
        identities[0], primary_identity,
        "a copied base backup keeps the identity"
    );
    assert_eq!(
        (copied_record.0.clone(), copied_record.1),
        primary_identity,
        "the copied backup's record matches its identity"
    );
    assert!(
        copied_record.2 < 1,
        "the copied backup started a quarantine ({copied_record:?}): detection exists now, \
         update this test and docs/AUTHORITIES.md"
    );
    // The runbook (fence) and an archive recovery (a new timeline) hold.
    assert_eq!(identities[1], primary_identity);
    assert_ne!(
        identities[2].1, primary_identity.1,
        "archive recovery starts a new timeline"
    );
    assert_eq!(
        each[1], 0,
        "{} IDs repeated after the fenced restore",
        each[1]
    );
    assert_eq!(
        each[2], 0,
        "{} IDs repeated after the archive recovery",
        each[2]
    );
}

// ---------------------------------------------------------------- DynamoDB

#[cfg(feature = "dynamodb")]
use common::moto::Moto;

/// DynamoDB's server restarted empty (every table gone) mid-run, and the
/// table made again by `grantid authority init`: no store record, so the
/// first acquire quarantines; the running generators' renewals are
/// refused, and they finish on what they hold.
#[cfg(feature = "dynamodb")]
#[test]
#[ignore = "fault test on a throwaway server: scripts/test.d/32-state-loss.sh runs it"]
fn dynamodb_restarted_empty_never_repeats_an_id() {
    let Some(server) = Moto::start(common::free_port()) else {
        return;
    };
    let url = format!("{}&{}", server.url("grantid_loss"), options());
    open(&url).unwrap().init_new_deployment().unwrap();
    let ns = common::namespace("moto-empty");
    let a = churn(&url, &ns, || {});
    std::thread::sleep(Duration::from_millis(1_000));
    let before_kill = a.issued();
    // Kept until the end: dropping it stops the server.
    let _server = server.kill_and_restart();
    let restarted = Instant::now();
    // The table made again: no store record, or a quarantine that a
    // running generator's renewal started as soon as the table was there.
    let report = open(&url).unwrap().init().unwrap();
    assert!(
        report.contains("created")
            && (report.contains("store record missing") || report.contains("(quarantine 1,")),
        "{report}"
    );
    after_fault(
        "dynamodb, restarted empty",
        &url,
        &ns,
        a,
        before_kill,
        restarted,
    );
}

/// The table deleted and restored from an on-demand backup under its own
/// name: every item is back, the store record too, with the identity of
/// the table that wrote it. The restored table is a new table (another
/// creation time): the first grant on it quarantines.
#[cfg(feature = "dynamodb")]
#[test]
#[ignore = "fault test on a throwaway server: scripts/test.d/32-state-loss.sh runs it"]
fn dynamodb_restored_from_a_backup_never_repeats_an_id() {
    let Some(server) = Moto::start(common::free_port()) else {
        return;
    };
    let table = "grantid_restore";
    let url = format!("{}&{}", server.url(table), options());
    open(&url).unwrap().init_new_deployment().unwrap();
    let ns = common::namespace("moto-backup");
    let mut backup = String::new();
    let a = churn(&url, &ns, || {
        backup = server.boto3(&format!(
            "print(ddb.create_backup(TableName='{table}', BackupName='grantid-test')\
             ['BackupDetails']['BackupArn'])"
        ));
    });
    std::thread::sleep(Duration::from_millis(1_000));
    let before = a.issued();
    server.boto3(&format!(
        "ddb.delete_table(TableName='{table}')\n\
         ddb.restore_table_from_backup(TargetTableName='{table}', BackupArn='{backup}')"
    ));
    let restored = Instant::now();
    // The store record as restored, with the identity of the table that
    // wrote it, unless a renewal of the running generators came first and
    // already quarantined the restored table (its worker item is behind
    // the renewal's grants).
    let store = server.boto3(&format!(
        "i = ddb.get_item(TableName='{table}', ConsistentRead=True, \
         Key={{'PK': {{'S': 'grantid#store'}}, 'SK': {{'S': 'store'}}}})['Item']\n\
         print(i['table_identity']['S'], '|', i['reason']['S'])"
    ));
    let (recorded, reason) = store.split_once(" | ").unwrap();
    assert!(
        !recorded.contains("restored from") || reason.contains("forgot a grant"),
        "the store record of the restored table: {recorded:?} ({reason})"
    );
    after_fault(
        "dynamodb, restored from a backup",
        &url,
        &ns,
        a,
        before,
        restored,
    );
}

/// A backup restored while no generator runs: no renewal can show the
/// loss, only the table's identity. The first grant on the restored
/// table quarantines and says why.
#[cfg(feature = "dynamodb")]
#[test]
#[ignore = "fault test on a throwaway server: scripts/test.d/32-state-loss.sh runs it"]
fn dynamodb_restored_while_nothing_runs_is_told_by_its_identity() {
    let Some(server) = Moto::start(common::free_port()) else {
        return;
    };
    let table = "grantid_identity";
    let url = format!("{}&{}", server.url(table), options());
    open(&url).unwrap().init_new_deployment().unwrap();
    let ns = common::namespace("moto-identity");
    let a = Issuer::start("a", &url, &ns);
    std::thread::sleep(Duration::from_millis(300));
    let backup = server.boto3(&format!(
        "print(ddb.create_backup(TableName='{table}', BackupName='grantid-test')\
         ['BackupDetails']['BackupArn'])"
    ));
    std::thread::sleep(Duration::from_millis(500));
    let earlier = vec![a.finish()];
    server.boto3(&format!(
        "ddb.delete_table(TableName='{table}')\n\
         ddb.restore_table_from_backup(TargetTableName='{table}', BackupArn='{backup}')"
    ));
    let restored = Instant::now();
    let b = Issuer::start("b", &url, &ns);
    std::thread::sleep(Duration::from_millis(300));
    let waited = b.ready - restored;
    let later = vec![b.finish()];
    let reason = server.boto3(&format!(
        "print(ddb.get_item(TableName='{table}', ConsistentRead=True, \
         Key={{'PK': {{'S': 'grantid#store'}}, 'SK': {{'S': 'store'}}}})['Item']['reason']['S'])"
    ));
    assert!(reason.contains("identity changed"), "{reason}");
    assert!(
        waited + Duration::from_millis(50) >= QUARANTINE,
        "granted {waited:?} after the restore"
    );
    assert_eq!(counted("dynamodb, restored idle", &earlier, &later), 0);
}

/// The namespace's item deleted by hand, its workers left: their
/// high-water marks are ticks of a layout nothing records any more, so a
/// generator is refused at once (a first grant timed out before, and
/// registering its own layout could number IDs as theirs did).
#[cfg(feature = "dynamodb")]
#[test]
#[ignore = "fault test on a throwaway server: scripts/test.d/32-state-loss.sh runs it"]
fn dynamodb_without_its_namespace_item_refuses_at_once() {
    let Some(server) = Moto::start(common::free_port()) else {
        return;
    };
    let table = "grantid_orphans";
    let url = format!("{}&{}", server.url(table), options());
    open(&url).unwrap().init_new_deployment().unwrap();
    let ns = common::namespace("moto-orphans");
    let a = Issuer::start("a", &url, &ns);
    std::thread::sleep(Duration::from_millis(300));
    assert!(!a.finish().1.is_empty());
    let deleted = server.boto3(&format!(
        "print(len(ddb.delete_item(TableName='{table}', ReturnValues='ALL_OLD', \
         Key={{'PK': {{'S': 'NS#{ns}'}}, 'SK': {{'S': 'LAYOUT'}}}}).get('Attributes', {{}})))"
    ));
    assert_ne!(deleted, "0", "no LAYOUT item was deleted");
    let t0 = Instant::now();
    let e = Generator::builder(layout(), &ns, from_url(&url).unwrap())
        .grant_duration_ms(300)
        .horizon_ms(1_500)
        .startup_timeout(Duration::from_secs(20))
        .start()
        .unwrap_err();
    assert!(e.message().contains("no LAYOUT item"), "{e}");
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "refused after {:?}",
        t0.elapsed()
    );
}
