//! What the command's service tests share: scratch directories, free
//! ports, files written at once, a test CA, and `grantid serve` started and
//! waited for.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_grantid");

/// A new directory of the test `name`.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "grantid-serve-{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Ports [`free_port`] picks from: below Linux's ephemeral range
/// (32768-60999), where the many outgoing connections of the tests take
/// their local ports, so none of them can take a port a server is about
/// to bind.
const TEST_PORTS: std::ops::Range<u16> = 20_000..32_768;

/// A port nothing listens on now, from [`TEST_PORTS`], different for each
/// call of one process.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, RandomState};
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let span = u64::from(TEST_PORTS.end - TEST_PORTS.start);
    let seed = RandomState::new().hash_one(std::process::id()) % span;
    loop {
        let n = CALLS.fetch_add(1, Ordering::Relaxed);
        assert!(n < span, "no free port in {TEST_PORTS:?}");
        let port = TEST_PORTS.start + u16::try_from((seed + n * 7_919) % span).unwrap();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Writes `text` to `dir/name` at once (a rename), as a deployment
/// replaces a file.
pub fn put(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    path
}

/// `grantid serve` on `port` with the authority `url` and `args`, its log
/// in `dir/server.log`; waits until it listens.
pub fn serve(dir: &Path, port: u16, url: &str, args: &[&str]) -> Child {
    let log = std::fs::File::create(dir.join("server.log")).unwrap();
    serve_logging_to(port, url, args, Stdio::from(log))
}

/// [`serve`] with its log (stderr) to `log`.
pub fn serve_logging_to(port: u16, url: &str, args: &[&str], log: Stdio) -> Child {
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--authority", url])
        .args(
            Some(["--namespace", "server-own"])
                .filter(|_| !args.contains(&"--namespace"))
                .into_iter()
                .flatten(),
        )
        .args(args)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    // (a socket connected to itself, which Linux may make while nothing
    // listens, is no server)
    while !TcpStream::connect(("127.0.0.1", port))
        .is_ok_and(|s| s.local_addr().ok() != s.peer_addr().ok())
    {
        // (a server that exited, its port taken meanwhile, say, fails the
        // test at once rather than be mistaken for whatever listens there)
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the server on port {port} exited before it listened: {status}");
        }
        assert!(Instant::now() < deadline, "the server did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// The URL of the test server of `var` (`GRANTID_TEST_POSTGRES_URL`...),
/// or `None` (a note) to skip; under `GRANTID_REQUIRE_SERVICES=1` a missing
/// server fails.
pub fn service_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            assert_ne!(
                std::env::var("GRANTID_REQUIRE_SERVICES").as_deref(),
                Ok("1"),
                "{var} is not set and GRANTID_REQUIRE_SERVICES=1"
            );
            eprintln!("note: {var} is not set; skipping");
            None
        }
    }
}

/// A CA of a test: its certificate (PEM) and what signs with it.
pub struct Ca {
    pub pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            pem,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A certificate and its key (PEM) for `names`, written to
    /// `dir/NAME.pem` and `dir/NAME.key`.
    pub fn issue(&self, dir: &Path, name: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (
            put(dir, &format!("{name}.pem"), &cert.pem()),
            put(dir, &format!("{name}.key"), &key.serialize_pem()),
        )
    }
}
