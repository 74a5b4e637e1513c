//! Regressions of the authority safety review (issue 21): each test
//! reproduces a way the authorities could repeat IDs, hang, or answer
//! wrongly, on the real component (fork(), file system, servers).

mod common;

use std::time::{Duration, Instant};

use common::{acquire_in_child, namespace, request, small_layout, temp_path};
use grantid::{ErrorKind, Generator, GrantError, GrantSource, Layout, MemoryAuthority};
use grantid_authority::{FileAuthority, Options, from_url};

#[test]
fn memory_authority_refuses_a_fork_child() {
    let source = MemoryAuthority::new();
    let ns = namespace("memfork");
    source
        .acquire(&request(&ns, 1, 1, None, 0, 10, small_layout()))
        .unwrap();
    assert!(
        !acquire_in_child(&source, &ns),
        "a fork() child was granted from its stale copy of the parent's state"
    );
    // The parent goes on.
    source
        .acquire(&request(&ns, 2, 1, None, 0, 10, small_layout()))
        .unwrap();
}

#[test]
fn a_permanent_refusal_fails_start_up_at_once() {
    let url = format!("file:{}", temp_path("refusal").display());
    let ns = namespace("refusal");
    let first = Generator::builder(
        Layout::new(41, 4, 8).unwrap(),
        ns.as_str(),
        from_url(&url).unwrap(),
    )
    .start()
    .unwrap();
    first.close();
    let t0 = Instant::now();
    let err = Generator::builder(
        Layout::new(41, 5, 7).unwrap(),
        ns.as_str(),
        from_url(&url).unwrap(),
    )
    .startup_timeout(Duration::from_secs(30))
    .start()
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.message().contains("another layout"), "{err}");
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "start-up retried a permanent refusal for {:?}",
        t0.elapsed()
    );
}

#[test]
fn file_authority_serves_the_whole_worker_range() {
    let l = Layout::with_all(30, 32, 1, grantid::DEFAULT_EPOCH_MS, 1_000).unwrap();
    let file = FileAuthority::new(temp_path("wide"), Options::default());
    let ns = namespace("wide");
    let g = file
        .acquire(&request(&ns, 1, 1, Some(u32::MAX), 0, 10, l))
        .unwrap();
    assert_eq!(g.worker, u32::MAX);
    let g0 = file.acquire(&request(&ns, 2, 1, None, 0, 10, l)).unwrap();
    assert_eq!(g0.worker, 0);
    let r = file.acquire(&request(&ns, 3, 1, Some(u32::MAX), 0, 10, l));
    assert!(
        matches!(r, Err(GrantError::Lost(ref m)) if m.contains("held by")),
        "{r:?}"
    );
}

/// A TCP relay to a real server that can be frozen: the sockets stay open
/// but nothing more passes, as with a server stopped by SIGSTOP or a
/// silent network partition.
struct Relay {
    port: u16,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Relay {
    fn to(upstream: std::net::SocketAddr) -> Relay {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let frozen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let f = frozen.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = std::net::TcpStream::connect(upstream) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let f = f.clone();
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            while f.load(Ordering::SeqCst) {
                                std::thread::sleep(Duration::from_millis(50));
                            }
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                    });
                }
            }
        });
        Relay { port, frozen }
    }

    fn freeze(&self) {
        self.frozen.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

fn host_port(url: &str) -> std::net::SocketAddr {
    let after = url.split_once("://").unwrap().1;
    let after = after.rsplit_once('@').map_or(after, |(_, h)| h);
    let hp = after.split(['/', '?']).next().unwrap();
    std::net::ToSocketAddrs::to_socket_addrs(hp)
        .unwrap()
        .next()
        .unwrap()
}

/// Runs `f` on a thread; fails the test if it has not returned in `limit`.
fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what} was still blocked after {limit:?}"))
}

#[test]
fn postgres_calls_have_a_client_side_deadline() {
    let Some(url) = common::postgres_url() else {
        return;
    };
    let addr = host_port(&url);
    let relay = Relay::to(addr);
    let relayed = url.replacen(&addr.port().to_string(), &relay.port.to_string(), 1);
    let source: std::sync::Arc<dyn GrantSource> =
        std::sync::Arc::from(from_url(&format!("{relayed}?timeout_ms=1000")).unwrap());
    let ns = namespace("frozen");
    let g = source
        .acquire(&request(&ns, 1, 1, None, 0, 10, small_layout()))
        .unwrap();
    relay.freeze();
    let s = source.clone();
    let n = ns.clone();
    let t0 = Instant::now();
    let r = within(
        Duration::from_secs(8),
        "a renewal on a frozen server",
        move || {
            s.acquire(&request(
                &n,
                1,
                2,
                Some(g.worker),
                g.end,
                10,
                small_layout(),
            ))
        },
    );
    assert!(
        matches!(r, Err(GrantError::Unavailable(ref m)) if m.contains("deadline")),
        "{r:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    // release (what close() calls) is bounded too.
    let s = source.clone();
    within(
        Duration::from_secs(8),
        "a release on a frozen server",
        move || s.release(&g),
    );
}

#[test]
fn postgres_errors_keep_their_cause() {
    let Some(url) = common::postgres_url() else {
        return;
    };
    let base = url.split('?').next().unwrap();
    let (server, _) = base.rsplit_once('/').unwrap();
    let missing = format!("{server}/grantid_no_such_db_{:x}", common::random());
    let r = from_url(&missing)
        .unwrap()
        .acquire(&request("ns", 1, 1, None, 0, 10, small_layout()));
    assert!(
        matches!(r, Err(GrantError::Unavailable(ref m)) if m.contains("does not exist") && m.contains("3D000")),
        "{r:?}"
    );
    let r = from_url("postgres://postgres@127.0.0.1:1/x?timeout_ms=500")
        .unwrap()
        .acquire(&request("ns", 1, 1, None, 0, 10, small_layout()));
    assert!(
        matches!(r, Err(GrantError::Unavailable(ref m)) if m.to_lowercase().contains("refused")),
        "{r:?}"
    );
}

#[test]
fn postgres_grants_commit_synchronously_whatever_the_database_default() {
    let Some(url) = common::postgres_url() else {
        return;
    };
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let db = format!("grantid_sc_{:x}", common::random());
    admin
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .unwrap();
    admin
        .batch_execute(&format!("ALTER DATABASE {db} SET synchronous_commit = off"))
        .unwrap();
    let base = url.split('?').next().unwrap();
    let db_url = format!("{}/{db}", base.rsplit_once('/').unwrap().0);
    let authority = grantid_authority::open(&db_url).unwrap();
    authority.init_new_deployment().unwrap();
    let mut raw = postgres::Client::connect(&db_url, postgres::NoTls).unwrap();
    let show = |c: &mut postgres::Client| -> String {
        c.query_one("SHOW synchronous_commit", &[]).unwrap().get(0)
    };
    assert_eq!(
        show(&mut raw),
        "off",
        "the database default applies to a plain session"
    );
    let mut tx = raw.transaction().unwrap();
    let row = tx
        .query_one(
            "SELECT status FROM grantid.acquire('sc', 1, 1, NULL, 0, 10, 41, 2, 8, 0, 1, 5)",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "granted");
    let in_tx: String = tx.query_one("SHOW synchronous_commit", &[]).unwrap().get(0);
    assert_eq!(in_tx, "on", "the grant's transaction commits synchronously");
    tx.commit().unwrap();
    drop(raw);
    drop(authority);
    let _ = admin.batch_execute(&format!("DROP DATABASE {db} WITH (FORCE)"));
}

#[test]
fn redis_script_checks_the_lease_under_the_normalised_worker() {
    let Some(url) = common::redis_url() else {
        return;
    };
    let source = from_url(&url).unwrap();
    let ns = namespace("norm");
    let l = small_layout();
    let a = source
        .acquire(&request(&ns, 1, 1, Some(1), 0, 100_000, l))
        .unwrap();
    let mut con = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let reply: Vec<String> = redis::Script::new(grantid_authority::LUA_V1)
        .key(format!("grantid:{{{ns}}}"))
        .arg("acquire")
        .arg("2")
        .arg("1")
        .arg("01")
        .arg(0)
        .arg(10)
        .arg(l.timestamp_bits())
        .arg(l.worker_bits())
        .arg(l.sequence_bits())
        .arg(l.epoch_ms())
        .arg(l.tick_ms())
        .arg(50)
        .arg("")
        .arg(0)
        .invoke(&mut con)
        .unwrap();
    assert_eq!(
        reply[0], "lost",
        "worker \"01\" is worker 1, held by {a:?}: {reply:?}"
    );
}

#[test]
fn a_namespace_no_authority_can_store_is_refused_at_once() {
    let e = Generator::builder(small_layout(), "a\0b", MemoryAuthority::new())
        .start()
        .err()
        .map(|e| (e.kind(), e.message().to_owned()));
    assert!(
        matches!(e, Some((ErrorKind::InvalidArgument, ref m)) if m.contains("contains")),
        "{e:?}"
    );
    let mut urls = vec![
        format!("file:{}", temp_path("nul").display()),
        "static:1".into(),
    ];
    urls.extend(common::postgres_url());
    urls.extend(common::redis_url());
    for url in urls {
        let r =
            from_url(&url)
                .unwrap()
                .acquire(&request("a\0b", 1, 1, None, 0, 10, small_layout()));
        assert!(
            matches!(r, Err(GrantError::Refused(ref m)) if m.contains("contains")),
            "{url}: {r:?}"
        );
    }
}

#[test]
fn postgres_connects_with_a_timeout_under_one_second() {
    // TCP keepalive idle times are whole seconds: a sub-second timeout_ms
    // once made every connect fail with EINVAL ("Invalid argument").
    let Some(url) = common::postgres_url() else {
        return;
    };
    let base = url.split('?').next().unwrap();
    let ns = common::namespace("short-timeout");
    for ms in [200, 500, 999] {
        let r = from_url(&format!("{base}?timeout_ms={ms}"))
            .unwrap()
            .acquire(&request(&ns, ms, 1, None, 0, 10, small_layout()));
        assert!(r.is_ok(), "timeout_ms={ms}: {r:?}");
    }
}

/// Two processes' URLs for one state file: `file:` through a symbolic link
/// (and through a linked directory), and `file:` on the real path. Each
/// request takes a free worker: the second must see the first's, and the
/// link must still be a link after the writes (a replacement through the
/// link's name used to replace the link with a file of its own).
fn one_state_file_through(link: &std::path::Path, real: &std::path::Path, what: &str) {
    let ns = namespace("symlink");
    let a = from_url(&format!("file:{}", link.display())).unwrap();
    let b = from_url(&format!("file:{}", real.display())).unwrap();
    let first = a
        .acquire(&request(&ns, 1, 1, None, 0, 1_000, small_layout()))
        .unwrap();
    let second = b
        .acquire(&request(&ns, 2, 1, None, 0, 1_000, small_layout()))
        .unwrap();
    assert_ne!(
        first.worker, second.worker,
        "{what}: the same worker was granted to two processes for one interval \
         ({first:?}, {second:?})"
    );
    let third = a
        .acquire(&request(&ns, 3, 1, None, 0, 1_000, small_layout()))
        .unwrap();
    assert!(
        third.worker != first.worker && third.worker != second.worker,
        "{what}: {third:?} repeats a worker of {first:?} or {second:?}"
    );
}

#[test]
fn a_state_file_through_a_symlink_is_one_authority() {
    let dir = temp_path("symlink-dir").with_extension("");
    std::fs::create_dir_all(&dir).unwrap();
    let real = dir.join("state.json");
    let link = dir.join("link.json");
    std::os::unix::fs::symlink("state.json", &link).unwrap();
    one_state_file_through(&link, &real, "a symbolic link to the file");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the write replaced the symbolic link with a file"
    );
    // A linked directory, and `..` in the path.
    let linked_dir = dir.with_extension("linked");
    std::os::unix::fs::symlink(&dir, &linked_dir).unwrap();
    let other = dir.join("other.json");
    let dotted = linked_dir
        .join("..")
        .join(linked_dir.file_name().unwrap())
        .join("other.json");
    one_state_file_through(&dotted, &other, "a linked directory and `..`");
    let _ = std::fs::remove_file(&linked_dir);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_state_file_with_a_second_hard_link_is_refused() {
    let dir = temp_path("hardlink-dir").with_extension("");
    std::fs::create_dir_all(&dir).unwrap();
    let real = dir.join("state.json");
    let ns = namespace("hardlink");
    let a = from_url(&format!("file:{}", real.display())).unwrap();
    a.acquire(&request(&ns, 1, 1, None, 0, 1_000, small_layout()))
        .unwrap();
    std::fs::hard_link(&real, dir.join("copy.json")).unwrap();
    let b = from_url(&format!("file:{}", dir.join("copy.json").display())).unwrap();
    match b.acquire(&request(&ns, 2, 1, None, 0, 1_000, small_layout())) {
        Err(GrantError::Refused(why)) => assert!(why.contains("hard links"), "{why}"),
        other => panic!("a hard-linked state file was not refused: {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
