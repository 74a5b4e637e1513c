//! Helpers shared by the integration tests: which engines are reachable,
//! request builders, and the disjointness check.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use grantid::{Clock, Grant, GrantRequest, GrantSource, Layout};
use grantid_authority::{FileAuthority, MysqlAuthority, Options, PgAuthority, RedisAuthority};

#[cfg(feature = "dynamodb")]
pub mod moto;
pub mod stores;

/// A server URL from the environment, or `None` (with a note) when the test
/// should skip. Under `GRANTID_REQUIRE_SERVICES=1` a missing URL fails.
pub fn service(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            if std::env::var("GRANTID_REQUIRE_SERVICES").as_deref() == Ok("1") {
                panic!("{var} is not set and GRANTID_REQUIRE_SERVICES=1");
            }
            eprintln!("note: {var} is not set; skipping (scripts/with-services.sh sets it)");
            None
        }
    }
}

/// The test server named by `var`, declared a new deployment once per
/// process (so its first use does not start a state-loss quarantine).
fn declared(var: &'static str) -> Option<String> {
    static DECLARED: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let url = service(var)?;
    let mut done = DECLARED.lock().unwrap_or_else(|p| p.into_inner());
    if !done.contains(&var) {
        grantid_authority::open(&url)
            .unwrap()
            .init_new_deployment()
            .unwrap();
        done.push(var);
    }
    Some(url)
}

/// The test PostgreSQL (GRANTID_TEST_POSTGRES_URL), declared new.
pub fn postgres_url() -> Option<String> {
    declared("GRANTID_TEST_POSTGRES_URL")
}

/// The test Redis (GRANTID_TEST_REDIS_URL), declared new.
pub fn redis_url() -> Option<String> {
    declared("GRANTID_TEST_REDIS_URL")
}

/// The test MySQL / MariaDB (GRANTID_TEST_MYSQL_URL), declared new.
pub fn mysql_url() -> Option<String> {
    declared("GRANTID_TEST_MYSQL_URL")
}

/// The test etcd (GRANTID_TEST_ETCD_URL), declared new.
#[cfg(feature = "etcd")]
pub fn etcd_url() -> Option<String> {
    declared("GRANTID_TEST_ETCD_URL")
}

/// The endpoint of the test DynamoDB (moto, GRANTID_TEST_DYNAMODB_ENDPOINT);
/// tests make tables of their own on it.
#[cfg(feature = "dynamodb")]
pub fn dynamodb_endpoint() -> Option<String> {
    service("GRANTID_TEST_DYNAMODB_ENDPOINT")
}

/// Runs `sql` on the MySQL server of `url` (`mysql://USER@HOST:PORT/DB`)
/// with the `mariadb` command-line client (which the server's package
/// brings); returns its tab-separated output, without column names.
pub fn mariadb_cli(url: &str, sql: &str) -> String {
    let rest = url.strip_prefix("mysql://").expect("a mysql:// URL");
    let (user, rest) = rest.split_once('@').expect("USER@");
    let (hostport, db) = rest.split_once('/').expect("/DB");
    let db = db.split('?').next().unwrap_or_default();
    let (host, port) = hostport.split_once(':').expect("HOST:PORT");
    let out = std::process::Command::new("mariadb")
        .args([
            "--no-defaults",
            "-N",
            "-B",
            "-u",
            user,
            "-h",
            host,
            "-P",
            port,
            db,
            "-e",
            sql,
        ])
        .output()
        .expect("the mariadb client");
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// A free TCP port on 127.0.0.1 (bound, then released).
/// Whether a server listens on 127.0.0.1:`port`. A connection whose two
/// ends are one address is no server: with nothing listening, Linux may
/// pick `port` itself as the ephemeral source port and connect the socket
/// to itself (TCP simultaneous open), which a readiness loop retrying for
/// seconds meets now and then.
pub fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok_and(|s| is_a_server(&s))
}

/// Whether `stream` reached another socket (not itself).
pub fn is_a_server(stream: &std::net::TcpStream) -> bool {
    matches!((stream.local_addr(), stream.peer_addr()), (Ok(l), Ok(p)) if l != p)
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A fresh random 64-bit value.
pub fn random() -> u64 {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).expect("random bytes");
    u64::from_le_bytes(b)
}

/// A namespace no other test run uses.
pub fn namespace(tag: &str) -> String {
    format!("test-{tag}-{:016x}", random())
}

pub fn temp_path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir()
        .join(format!("grantid-authority-tests-{}", std::process::id()))
        .join(format!("{tag}-{:x}.json", random()))
}

/// A small layout: 40 timestamp bits, 2 worker bits (4 workers), 1 ms ticks.
pub fn small_layout() -> Layout {
    Layout::new(40, 2, 8).unwrap()
}

pub fn request(
    ns: &str,
    incarnation: u64,
    request_id: u64,
    worker: Option<u32>,
    not_before: u64,
    duration: u64,
    layout: Layout,
) -> GrantRequest {
    GrantRequest {
        namespace: ns.to_owned(),
        incarnation,
        request_id,
        worker,
        not_before,
        now: 0,
        duration,
        layout,
    }
}

/// Which backend a rule test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Memory,
    File,
    Postgres,
    Redis,
    Mysql,
    #[cfg(feature = "etcd")]
    Etcd,
    #[cfg(feature = "dynamodb")]
    Dynamodb,
}

/// A source of `kind` whose authority time is `clock`, with `grace_ms` of
/// lease grace. `None` when the engine is not available (skip).
pub fn source(kind: Kind, clock: Arc<dyn Clock>, grace_ms: u64) -> Option<Box<dyn GrantSource>> {
    let options = Options {
        lease_grace_ms: grace_ms,
        ..Options::default()
    };
    // The rule's cases step the clock by hours: no bounded lead for the
    // engines that have one (tests/state_loss.rs covers it).
    let unbounded = Options {
        max_lead_ms: 1 << 40,
        ..options.clone()
    };
    Some(match kind {
        Kind::Memory => Box::new(
            grantid::MemoryAuthority::new()
                .with_lease_grace(grace_ms)
                .with_clock(clock),
        ),
        // The rule's cases step the clock by hours: no bounded lead here
        // (tests/state_loss.rs covers it).
        Kind::File => Box::new(
            FileAuthority::new(
                temp_path("rule"),
                Options {
                    max_lead_ms: 1 << 40,
                    ..options
                },
            )
            .with_clock(clock),
        ),
        Kind::Postgres => Box::new(
            PgAuthority::new(
                &postgres_url()?,
                Options {
                    max_lead_ms: 1 << 40,
                    ..options
                },
            )
            .unwrap()
            .with_injected_clock(clock),
        ),
        Kind::Redis => Box::new(
            RedisAuthority::new(
                &redis_url()?,
                Options {
                    max_lead_ms: 1 << 40,
                    ..options
                },
            )
            .unwrap()
            .with_injected_clock(clock),
        ),
        Kind::Mysql => Box::new(
            MysqlAuthority::new(&mysql_url()?.replace("mariadb://", "mysql://"), unbounded)
                .unwrap()
                .with_injected_clock(clock),
        ),
        #[cfg(feature = "etcd")]
        Kind::Etcd => Box::new(
            grantid_authority::EtcdAuthority::from_url(&etcd_url()?, unbounded)
                .unwrap()
                .with_injected_clock(clock),
        ),
        #[cfg(feature = "dynamodb")]
        Kind::Dynamodb => Box::new(
            grantid_authority::DynamoAuthority::from_url(
                &stores::store("dynamodb", "rule", 0)?.url,
                unbounded,
            )
            .unwrap()
            .with_injected_clock(clock),
        ),
    })
}

/// Panics unless the grants of each worker are pairwise disjoint; returns
/// how many workers were seen.
pub fn assert_disjoint(grants: &[Grant]) -> usize {
    // (start, end, grant_id) per (namespace, worker).
    type Spans = Vec<(u64, u64, u64)>;
    let mut by_worker: BTreeMap<(String, u32), Spans> = BTreeMap::new();
    for g in grants {
        assert!(g.start < g.end, "empty grant {g:?}");
        by_worker
            .entry((g.namespace.clone(), g.worker))
            .or_default()
            .push((g.start, g.end, g.grant_id));
    }
    for ((ns, w), v) in &mut by_worker {
        v.sort();
        for pair in v.windows(2) {
            assert!(
                pair[0].1 <= pair[1].0,
                "{ns} worker {w}: grants {:?} and {:?} overlap",
                pair[0],
                pair[1]
            );
            assert!(
                pair[0].2 < pair[1].2,
                "{ns} worker {w}: fencing tokens do not increase with time: {:?} then {:?}",
                pair[0],
                pair[1]
            );
        }
    }
    by_worker.len()
}

/// Forks; the child acquires through the same source and reports through a
/// pipe whether it got a grant. Returns the child's answer.
pub fn acquire_in_child(source: &dyn grantid::GrantSource, ns: &str) -> bool {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid two-element array for pipe(2).
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child only uses the source (opening its own connection),
    // writes one byte and calls _exit; it never returns into the harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let ok = source
            .acquire(&request(ns, 77, 1, None, 0, 10, small_layout()))
            .is_ok();
        let b = [u8::from(ok)];
        // SAFETY: writes one byte from a valid buffer, then exits.
        unsafe {
            libc::write(fds[1], b.as_ptr().cast(), 1);
            libc::_exit(0);
        }
    }
    let mut b = [0u8; 1];
    // SAFETY: reads one byte into a valid buffer; waits for our own child.
    unsafe {
        libc::close(fds[1]);
        libc::read(fds[0], b.as_mut_ptr().cast(), 1);
        libc::close(fds[0]);
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
    }
    b[0] == 1
}

/// Asserts that `r` is `Unavailable` with `needle` in its message.
pub fn waits(r: Result<Grant, grantid::GrantError>, needle: &str) {
    assert!(
        matches!(r, Err(grantid::GrantError::Unavailable(ref m)) if m.contains(needle)),
        "{needle}: {r:?}"
    );
}

/// The state-loss checks every engine passes on a fresh store (its URL
/// with `max_lead_ms=400&clock_skew_ms=100`): first use quarantined, then
/// a grant; the bounded lead; the operator's fence, during which a first
/// grant waits and a renewal loses its worker. Returns the authority.
pub fn quarantine_lead_and_fence(
    url: &str,
    ns: &str,
    layout: Layout,
) -> Box<dyn grantid_authority::Authority> {
    let authority = grantid_authority::open(url).unwrap();
    let req = |inc, worker, not_before| request(ns, inc, 1, worker, not_before, 10, layout);
    waits(authority.acquire(&req(1, None, 0)), "no grantid state");
    std::thread::sleep(std::time::Duration::from_millis(600));
    let g = authority.acquire(&req(2, None, 0)).unwrap();
    // The bounded lead: a grant asked to start 10 s ahead must wait.
    waits(
        authority.acquire(&request(ns, 9, 1, None, g.end + 10_000, 10, layout)),
        "max_lead",
    );
    assert!(authority.fence().unwrap().contains("quarantine until"));
    waits(authority.acquire(&req(3, None, 0)), "fenced");
    let renewal = request(ns, 2, 3, Some(g.worker), g.end, 10, layout);
    let r = authority.acquire(&renewal);
    assert!(
        matches!(r, Err(grantid::GrantError::Lost(ref m)) if m.contains("acquire again")),
        "a renewal during a quarantine: {r:?}"
    );
    std::thread::sleep(std::time::Duration::from_millis(600));
    authority.acquire(&req(4, None, 0)).unwrap();
    authority
}

/// A server process started from a command line, killed with SIGKILL and
/// started again on the same data and port.
pub struct Server {
    pub program: &'static str,
    pub args: Vec<String>,
    pub port: u16,
    pub child: Option<Child>,
}

impl Server {
    pub fn start(program: &'static str, args: Vec<String>, port: u16) -> Option<Server> {
        let mut s = Server {
            program,
            args,
            port,
            child: None,
        };
        match s.spawn() {
            Ok(()) => Some(s),
            Err(e) => {
                if std::env::var("GRANTID_REQUIRE_SERVICES").as_deref() == Ok("1") {
                    panic!("cannot start {program}: {e}");
                }
                eprintln!("note: cannot start {program} ({e}); skipping");
                None
            }
        }
    }

    pub fn spawn(&mut self) -> std::io::Result<()> {
        let child = Command::new(self.program)
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let child = self.child.insert(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !listening(self.port) {
            if let Some(status) = child.try_wait()? {
                return Err(std::io::Error::other(format!(
                    "{} exited ({status}) before it listened on {}",
                    self.program, self.port
                )));
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "{} did not listen on {}",
                    self.program, self.port
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A scratch directory removed at the end.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("grantid-{tag}-{:x}", random()));
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(feature = "etcd")]
pub fn etcd(dir: &Path) -> Option<Server> {
    etcd_with(dir, "http", Vec::new())
}

/// A single-member etcd whose client URL has `scheme` (`http`, or `https`
/// with the certificate flags in `extra`), with the flags of `extra`.
#[cfg(feature = "etcd")]
pub fn etcd_with(dir: &Path, scheme: &str, extra: Vec<String>) -> Option<Server> {
    let (port, peer) = (free_port(), free_port());
    let mut args: Vec<String> = vec![
        "--name".into(),
        "default".into(),
        "--data-dir".into(),
        dir.join("data").display().to_string(),
        "--listen-client-urls".into(),
        format!("{scheme}://127.0.0.1:{port}"),
        "--advertise-client-urls".into(),
        format!("{scheme}://127.0.0.1:{port}"),
        "--listen-peer-urls".into(),
        format!("http://127.0.0.1:{peer}"),
        "--initial-advertise-peer-urls".into(),
        format!("http://127.0.0.1:{peer}"),
        "--initial-cluster".into(),
        format!("default=http://127.0.0.1:{peer}"),
    ];
    args.extend(extra);
    Server::start("etcd", args, port)
}

/// Whether the tests must fail rather than skip without a server.
pub fn required() -> bool {
    std::env::var("GRANTID_REQUIRE_SERVICES").as_deref() == Ok("1")
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A MariaDB server of its own on a free port (mariadb-install-db, then
/// mariadbd with `extra` options, as the `mysql` user when run as root),
/// with database `grantid_test`.
pub fn mariadb(dir: &Path, extra: &[String]) -> Option<Server> {
    let port = free_port();
    let root = is_root();
    if root {
        let _ = Command::new("chown").arg("mysql").arg(dir).status();
    }
    let mut install = Command::new("mariadb-install-db");
    install
        .arg("--no-defaults")
        .arg(format!("--datadir={}", dir.join("data").display()))
        // Bootstraps running at once collide on temporary table names in
        // a shared /tmp.
        .arg(format!("--tmpdir={}", dir.display()))
        .arg("--auth-root-authentication-method=normal")
        .arg("--skip-test-db")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if root {
        install.arg("--user=mysql");
    }
    match install.status() {
        Ok(s) if s.success() => {}
        other => {
            if required() {
                panic!("mariadb-install-db failed: {other:?}");
            }
            eprintln!("note: mariadb-install-db failed ({other:?}); skipping");
            return None;
        }
    }
    let mut args = vec![
        "--no-defaults".to_owned(),
        format!("--datadir={}", dir.join("data").display()),
        format!("--tmpdir={}", dir.display()),
        format!("--port={port}"),
        "--bind-address=127.0.0.1".into(),
        format!("--socket={}", dir.join("sock").display()),
        format!("--log-error={}", dir.join("server.log").display()),
    ];
    if root {
        args.push("--user=mysql".into());
    }
    args.extend(extra.iter().cloned());
    let server = Server::start("mariadbd", args, port)?;
    // A Galera node listens a moment before it takes statements.
    let admin = format!("mysql://root@127.0.0.1:{port}/mysql");
    let t0 = Instant::now();
    while !cli_ok(&admin, "CREATE DATABASE IF NOT EXISTS grantid_test") {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the server on port {port} takes no statement: {}",
            std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(server)
}

/// Whether the `mariadb` client ran `sql` on the server of `url`.
pub fn cli_ok(url: &str, sql: &str) -> bool {
    let port = url.rsplit_once(':').unwrap().1.split('/').next().unwrap();
    Command::new("mariadb")
        .args(["--no-defaults", "-u", "root", "-h", "127.0.0.1", "-P", port])
        .args(["-e", sql])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The PostgreSQL server binaries with every one of `tools` (initdb,
/// pg_ctl, ...): `$GRANTID_PG_BIN`, else the newest
/// /usr/lib/postgresql/*/bin.
pub fn pg_bin(tools: &[&str]) -> Option<PathBuf> {
    let has = |b: &Path| tools.iter().all(|t| b.join(t).is_file());
    if let Some(dir) = std::env::var_os("GRANTID_PG_BIN").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir)).filter(|b| has(b));
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| has(b))
        .collect();
    found.sort();
    found.pop()
}

/// `p` quoted for a POSIX shell.
pub fn quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

/// Runs a shell command line, as `postgres` when we are root (PostgreSQL
/// refuses to run as root).
pub fn as_pg(cmd: &str) {
    let out = if is_root() {
        Command::new("su")
            .args(["postgres", "-s", "/bin/sh", "-c", cmd])
            .output()
    } else {
        Command::new("sh").args(["-c", cmd]).output()
    }
    .unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
