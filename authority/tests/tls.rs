//! TLS on real servers: a throwaway PostgreSQL that accepts only `hostssl`
//! connections (and one role only with a client certificate), and a
//! throwaway redis-server listening only on a TLS port, first without then
//! with `--tls-auth-clients yes`. The certificates come from a CA the test
//! makes (rcgen); a second CA plays the wrong one.
//!
//! Each server: the right CA works (two generators through
//! `from_url`, 0 duplicate IDs); a wrong CA, a wrong host name (checked
//! names) and no TLS at all fail at start, each with a message naming the
//! cause; client certificates work where the server requires them. Without
//! the server binaries the tests skip, or fail under
//! `GRANTID_REQUIRE_SERVICES=1`.

#![cfg(all(feature = "postgres", feature = "redis"))]

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Scratch, Server, free_port, is_root, required};
use grantid::{Error, Generator, GrantError, Layout};
use grantid_authority::{from_url, open};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

// ---------------------------------------------------------------- certificates

/// A CA: its certificate (PEM) and what signs with it.
struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate (PEM) and its key (PEM) for `names` (DNS names or IP
    /// addresses), with `cn` as its common name.
    fn issue(&self, cn: &str, names: &[&str]) -> (String, String) {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// The PEM files of one test: the right CA, a wrong one, a server
/// certificate for 127.0.0.1 only, and a client certificate for the role
/// `certuser`.
struct Files {
    ca: PathBuf,
    wrong_ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

impl Files {
    /// The paths of the right CA, the client certificate and its key.
    #[cfg(any(feature = "mysql", feature = "etcd"))]
    fn paths(&self) -> [String; 3] {
        [&self.ca, &self.client_cert, &self.client_key].map(|p| p.display().to_string())
    }

    /// The query options `cert=CLIENT_CERT&key=CLIENT_KEY`.
    fn client(&self, cert: &str, key: &str) -> String {
        format!(
            "{cert}={}&{key}={}",
            self.client_cert.display(),
            self.client_key.display()
        )
    }

    fn write(dir: &Path) -> Files {
        let ca = Ca::new("grantid test CA");
        let wrong = Ca::new("grantid wrong CA");
        let (server_cert, server_key) = ca.issue("grantid test server", &["127.0.0.1"]);
        let (client_cert, client_key) = ca.issue("certuser", &[]);
        let put = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        Files {
            ca: put("ca.pem", &ca.pem),
            wrong_ca: put("wrong-ca.pem", &wrong.pem),
            server_cert: put("server.pem", &server_cert),
            server_key: put("server.key", &server_key),
            client_cert: put("client.pem", &client_cert),
            client_key: put("client.key", &client_key),
        }
    }
}

// ---------------------------------------------------------------- checks

fn layout() -> Layout {
    Layout::new(41, 2, 4).unwrap()
}

fn generator(url: &str, ns: &str) -> Result<Generator, Error> {
    Generator::builder(layout(), ns, from_url(url)?)
        .grant_duration_ms(300)
        .horizon_ms(1_500)
        .startup_timeout(Duration::from_secs(3))
        .start()
}

/// Two generators on `url` (and `other`), issuing at once: 0 duplicates.
fn two_generators_no_duplicates(url: &str, other: &str) {
    let ns = common::namespace("tls");
    open(url).unwrap().init_new_deployment().unwrap();
    let handles: Vec<_> = [url, other]
        .into_iter()
        .map(|u| {
            let g = Arc::new(generator(u, &ns).unwrap_or_else(|e| panic!("{u}: {e}")));
            std::thread::spawn(move || {
                let mut ids = Vec::with_capacity(20_000);
                for _ in 0..20_000 {
                    ids.push(g.next_id().unwrap());
                }
                g.close();
                ids
            })
        })
        .collect();
    let mut seen = HashSet::new();
    let mut total = 0;
    for h in handles {
        for id in h.join().unwrap() {
            total += 1;
            assert!(seen.insert(id), "duplicate ID {id}");
        }
    }
    assert_eq!(total, 40_000);
}

/// Starting a generator on `url` fails; its message contains every one of
/// `needles`. Returns the error.
fn start_fails(url: &str, needles: &[&str]) -> Error {
    let t0 = Instant::now();
    let e = match generator(url, &common::namespace("tls-fail")) {
        Ok(_) => panic!("{url}: a generator started"),
        Err(e) => e,
    };
    for n in needles {
        assert!(e.message().contains(n), "{url}: {n:?} not in {e}");
    }
    eprintln!("{url} ({:?}): {e}", t0.elapsed());
    e
}

/// As [`start_fails`], returning the message.
fn fails_at_start(url: &str, needles: &[&str]) -> String {
    start_fails(url, needles).message().to_owned()
}

fn skip(what: &str) -> Option<()> {
    if required() {
        panic!("{what} and GRANTID_REQUIRE_SERVICES=1");
    }
    eprintln!("note: {what}; skipping");
    None
}

// ---------------------------------------------------------------- PostgreSQL

/// A throwaway PostgreSQL with `ssl = on` whose pg_hba.conf has only
/// `hostssl` lines for TCP: the role `certuser` with a client certificate
/// (`cert`), every other role with `trust`.
struct Pg {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
}

impl Pg {
    fn start(bin: &Path, dir: &Path, files: &Files) -> Pg {
        let data = dir.join("data");
        common::as_pg(&format!(
            "{} -D {} -A trust -U postgres --no-sync >/dev/null",
            common::quote(&bin.join("initdb")),
            common::quote(&data)
        ));
        // The server reads its key only if no one else can.
        let key = data.join("server.key");
        std::fs::copy(&files.server_key, &key).unwrap();
        std::fs::copy(&files.server_cert, data.join("server.crt")).unwrap();
        std::fs::copy(&files.ca, data.join("ca.crt")).unwrap();
        if is_root() {
            let ok = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&data)
                .status();
            assert!(ok.is_ok_and(|s| s.success()));
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\n\
             hostssl all certuser 127.0.0.1/32 cert\n\
             hostssl all all 127.0.0.1/32 trust\n",
        )
        .unwrap();
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .unwrap();
        use std::io::Write;
        writeln!(
            conf,
            "\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n\
             ssl_ca_file = 'ca.crt'\nfsync = on"
        )
        .unwrap();
        let pg = Pg {
            bin: bin.to_path_buf(),
            data,
            port: free_port(),
        };
        common::as_pg(&format!(
            "{} -D {} -l {} -w -t 60 -o \"-c listen_addresses=127.0.0.1 -p {} -k {}\" start >/dev/null",
            common::quote(&pg.bin.join("pg_ctl")),
            common::quote(&pg.data),
            common::quote(&pg.data.with_extension("log")),
            pg.port,
            common::quote(dir)
        ));
        common::as_pg(&format!(
            "{} -h {} -p {} -U postgres -d postgres -qc 'CREATE ROLE certuser LOGIN SUPERUSER'",
            common::quote(&pg.bin.join("psql")),
            common::quote(dir),
            pg.port
        ));
        pg
    }

    fn url(&self, user: &str, query: &str) -> String {
        format!("postgres://{user}@127.0.0.1:{}/postgres?{query}", self.port)
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        common::as_pg(&format!(
            "{} -D {} -m immediate -w stop >/dev/null",
            common::quote(&self.bin.join("pg_ctl")),
            common::quote(&self.data)
        ));
    }
}

#[test]
fn postgres_over_tls() {
    let Some(bin) = common::pg_bin(&["initdb", "pg_ctl", "psql"]) else {
        let _ = skip("no PostgreSQL server binaries (apt-get install postgresql)");
        return;
    };
    let scratch = Scratch::new("tls-pg");
    if is_root() {
        let ok = Command::new("chown")
            .arg("postgres")
            .arg(&scratch.0)
            .status();
        assert!(ok.is_ok_and(|s| s.success()));
    }
    let files = Files::write(&scratch.0);
    let pg = Pg::start(&bin, &scratch.0, &files);
    let ca = files.ca.display();

    // The right CA, host name checked; and the default (prefer) and
    // require, which encrypt without checking: all reach the
    // hostssl-only server.
    let full = pg.url("postgres", &format!("sslmode=verify-full&sslrootcert={ca}"));
    two_generators_no_duplicates(&full, &pg.url("postgres", "sslmode=require"));
    two_generators_no_duplicates(
        &pg.url("postgres", ""),
        &pg.url("postgres", "sslmode=prefer"),
    );

    // A wrong CA: refused by the chain check, in every mode that checks.
    let wrong = files.wrong_ca.display();
    for mode in ["verify-full", "verify-ca", "require"] {
        refused_at_start(
            &pg.url("postgres", &format!("sslmode={mode}&sslrootcert={wrong}")),
            &["TLS", "UnknownIssuer"],
        );
    }
    // A host name the certificate does not name (the connection still
    // goes to 127.0.0.1): verify-full refuses it, verify-ca does not look.
    let other_host = format!(
        "postgres://postgres@db.example:{}/postgres?hostaddr=127.0.0.1&sslrootcert={ca}",
        pg.port
    );
    refused_at_start(
        &format!("{other_host}&sslmode=verify-full"),
        &["not valid for name", "db.example"],
    );
    two_generators_no_duplicates(
        &format!("{other_host}&sslmode=verify-ca"),
        &format!("{other_host}&sslmode=verify-ca"),
    );
    // No TLS: pg_hba.conf has no line for it.
    fails_at_start(
        &pg.url("postgres", "sslmode=disable"),
        &["no pg_hba.conf entry", "no encryption"],
    );
    // A role that needs a client certificate: refused without one, served
    // with one.
    fails_at_start(
        &pg.url("certuser", &format!("sslmode=verify-full&sslrootcert={ca}")),
        &["certificate"],
    );
    let with_cert = pg.url(
        "certuser",
        &format!(
            "sslmode=verify-full&sslrootcert={ca}&{}",
            files.client("sslcert", "sslkey")
        ),
    );
    two_generators_no_duplicates(&with_cert, &with_cert);
}

#[test]
fn postgres_tls_options_are_checked_when_opened() {
    let scratch = Scratch::new("tls-pg-options");
    let files = Files::write(&scratch.0);
    let ca = files.ca.display().to_string();
    let key = files.client_key.display().to_string();
    let base = "postgres://app:s3cret@127.0.0.1:1/db";
    for (query, needle) in [
        ("sslmode=verify-full", "sslrootcert=PATH"),
        ("sslmode=verify-ca", "sslrootcert=system"),
        ("sslmode=allow", "not supported"),
        ("sslmode=bogus", "not one of disable, prefer, require"),
        (
            "sslmode=require&sslrootcert=system",
            "only sslmode=verify-full",
        ),
        (
            "sslrootcert=/nonexistent/ca.pem",
            "sslrootcert=/nonexistent/ca.pem",
        ),
        (&format!("sslrootcert={key}"), "no certificate"),
        (&format!("sslcert={ca}"), "go together"),
        (
            "sslcert=/nonexistent/c.pem&sslkey=/secret/k.pem",
            "cannot read",
        ),
        (
            &format!("sslcert={ca}&sslkey=/secret/k.pem"),
            "sslkey: cannot read the key file",
        ),
        (
            &format!("sslcert={ca}&sslkey={ca}"),
            "no unencrypted private key",
        ),
        ("sslrootcert=", "needs a value"),
    ] {
        let url = format!("{base}?{query}");
        let e = open(&url).map(|_| ()).unwrap_err();
        assert_eq!(e.kind(), grantid::ErrorKind::InvalidArgument, "{url}: {e}");
        assert!(e.message().contains(needle), "{url}: {needle:?} not in {e}");
        assert!(!e.message().contains("s3cret"), "{e}");
        assert!(!e.message().contains("/secret/k.pem"), "{e}");
    }
    // Opening never connects: every mode with its files opens.
    for query in [
        "sslmode=disable".to_owned(),
        "sslmode=prefer".to_owned(),
        "sslmode=require".to_owned(),
        format!("sslmode=verify-ca&sslrootcert={ca}"),
        format!("sslmode=verify-full&sslrootcert={ca}"),
        format!(
            "sslrootcert={ca}&sslcert={}&sslkey={key}",
            files.client_cert.display()
        ),
    ] {
        open(&format!("{base}?{query}")).unwrap_or_else(|e| panic!("{query}: {e}"));
    }
}

// ---------------------------------------------------------------- Redis

/// A redis-server listening only on a TLS port (`--port 0`).
fn redis_tls(dir: &Path, files: &Files, auth_clients: bool) -> Option<Server> {
    let port = free_port();
    let p = |p: &Path| p.display().to_string();
    let args: Vec<String> = [
        "--port",
        "0",
        "--tls-port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        &p(dir),
        "--tls-cert-file",
        &p(&files.server_cert),
        "--tls-key-file",
        &p(&files.server_key),
        "--tls-ca-cert-file",
        &p(&files.ca),
        "--tls-auth-clients",
        if auth_clients { "yes" } else { "no" },
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    Server::start("redis-server", args, port)
}

#[test]
fn redis_over_tls() {
    let scratch = Scratch::new("tls-redis");
    let files = Files::write(&scratch.0);
    let Some(server) = redis_tls(&scratch.0, &files, false) else {
        return;
    };
    let port = server.port;
    let ca = files.ca.display();
    let right = format!("rediss://127.0.0.1:{port}/0?tls_ca={ca}");
    two_generators_no_duplicates(&right, &right);

    // A wrong CA, and no CA at all (the system's roots do not know the
    // test CA).
    refused_at_start(
        &format!(
            "rediss://127.0.0.1:{port}/0?tls_ca={}",
            files.wrong_ca.display()
        ),
        &["UnknownIssuer"],
    );
    refused_at_start(&format!("rediss://127.0.0.1:{port}/0"), &["UnknownIssuer"]);
    // A host name the certificate (127.0.0.1 only) does not name.
    refused_at_start(
        &format!("rediss://localhost:{port}/0?tls_ca={ca}"),
        &["not valid for name", "localhost"],
    );
    // #insecure: the explicit opt-out of every check.
    two_generators_no_duplicates(
        &format!("rediss://localhost:{port}/0#insecure"),
        &format!("rediss://127.0.0.1:{port}/0?timeout_ms=2000#insecure"),
    );
    // Plain text to a TLS port.
    fails_at_start(&format!("redis://127.0.0.1:{port}/0"), &["redis"]);
    drop(server);

    // Client certificates required.
    let Some(server) = redis_tls(&scratch.0, &files, true) else {
        return;
    };
    let port = server.port;
    fails_at_start(
        &format!("rediss://127.0.0.1:{port}/0?tls_ca={ca}"),
        &["redis"],
    );
    let with_cert = format!(
        "rediss://127.0.0.1:{port}/0?tls_ca={ca}&{}",
        files.client("tls_cert", "tls_key")
    );
    two_generators_no_duplicates(&with_cert, &with_cert);
}

#[test]
fn redis_tls_options_are_checked_when_opened() {
    let scratch = Scratch::new("tls-redis-options");
    let files = Files::write(&scratch.0);
    let ca = files.ca.display().to_string();
    let cert = files.client_cert.display().to_string();
    let base = "rediss://:s3cret@127.0.0.1:1/0";
    for (url, needle) in [
        (
            format!("{base}?tls_ca=/nonexistent/ca.pem"),
            "tls_ca=/nonexistent/ca.pem",
        ),
        (
            format!("{base}?tls_ca={}", files.client_key.display()),
            "no certificate",
        ),
        (format!("{base}?tls_cert={cert}"), "go together"),
        (
            format!("{base}?tls_cert={cert}&tls_key=/secret/k.pem"),
            "tls_key: cannot read the key file",
        ),
        (
            format!("{base}?tls_cert={cert}&tls_key={ca}"),
            "no unencrypted private key",
        ),
        (
            format!("{base}?tls_ca={ca}#insecure"),
            "#insecure checks no certificate",
        ),
        (format!("{base}#bogus"), "takes #insecure only"),
        (
            format!("redis://127.0.0.1:1/0?tls_ca={ca}"),
            "applies to rediss:// only",
        ),
        (
            "redis://127.0.0.1:1/0#insecure".to_owned(),
            "applies to rediss:// only",
        ),
    ] {
        let e = open(&url).map(|_| ()).unwrap_err();
        assert_eq!(e.kind(), grantid::ErrorKind::InvalidArgument, "{url}: {e}");
        assert!(e.message().contains(needle), "{url}: {needle:?} not in {e}");
        assert!(!e.message().contains("s3cret"), "{e}");
        assert!(!e.message().contains("/secret/k.pem"), "{e}");
    }
    for url in [
        base.to_owned(),
        format!("{base}?tls_ca={ca}&timeout_ms=5"),
        format!("{base}?timeout_ms=5#insecure"),
        format!(
            "{base}?tls_ca={ca}&tls_cert={cert}&tls_key={}",
            files.client_key.display()
        ),
    ] {
        open(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
    }
}

/// As [`fails_at_start`], refused: a setting to change (the start fails
/// with `InvalidArgument` at once), not `Unavailable` retried until the
/// start-up timeout. Then the same URL's answers to a fresh process
/// (`check_answers`): a first grant is `Refused`, a renewal `Unavailable`
/// (the worker it names was given by the store, so the settings reached
/// it once: a restarted `grantid serve` forwarding a client's renewal
/// must not make the client lose its worker).
fn refused_at_start(url: &str, needles: &[&str]) -> String {
    let e = start_fails(url, needles);
    assert_eq!(
        e.kind(),
        grantid::ErrorKind::InvalidArgument,
        "{url}: not refused: {e}"
    );
    let ns = common::namespace("tls-answers");
    let layout = common::small_layout();
    let inc = common::random();
    let answer = |worker: Option<u32>| {
        open(url)
            .unwrap()
            .acquire(&common::request(&ns, inc, 1, worker, 0, 2_000, layout))
    };
    let first = answer(None);
    assert!(
        matches!(first, Err(GrantError::Refused(ref m)) if m.contains(needles[0])),
        "{url}: first grant: {first:?}"
    );
    let renewal = answer(Some(0));
    assert!(
        matches!(renewal, Err(GrantError::Unavailable(ref m)) if m.contains(needles[0])),
        "{url}: renewal: {renewal:?}"
    );
    e.message().to_owned()
}

#[cfg(any(feature = "mysql", feature = "etcd"))]
/// Opening each `url` fails with `InvalidArgument` naming its needle,
/// without the password or the key's path.
fn refused_when_opened(cases: &[(String, String)]) {
    for (url, needle) in cases {
        let e = open(url).map(|_| ()).unwrap_err();
        assert_eq!(e.kind(), grantid::ErrorKind::InvalidArgument, "{url}: {e}");
        assert!(e.message().contains(needle), "{url}: {needle:?} not in {e}");
        assert!(!e.message().contains("s3cret"), "{e}");
        assert!(!e.message().contains("/secret/k.pem"), "{e}");
    }
}

/// A scratch directory, its certificates, and the server `start` runs on
/// them (`None`: no server, the test skips). Bind them in this order: the
/// server stops before its directory goes.
#[cfg(any(feature = "mysql", feature = "etcd"))]
fn with_server<S>(
    tag: &str,
    start: impl FnOnce(&Path, &Files) -> Option<S>,
) -> Option<(Scratch, Files, S)> {
    let (scratch, files) = scratch_files(tag);
    let server = start(&scratch.0, &files)?;
    Some((scratch, files, server))
}

/// Certificates in a scratch directory, and the cases every set of TLS
/// file options refuses when opened: `url` with a missing CA file, a CA
/// file without a certificate, a client certificate without its key, an
/// unreadable key, a key file without a key. `names`: the options of the
/// CA, the client certificate and its key.
#[cfg(any(feature = "mysql", feature = "etcd"))]
fn bad_files(tag: &str, url: &str, names: [&str; 3]) -> (Scratch, Files, Vec<(String, String)>) {
    let (scratch, files) = scratch_files(tag);
    let [ca, cert, key] = files.paths();
    let [o_ca, o_cert, o_key] = names;
    let cases = [
        (
            format!("{o_ca}=/nonexistent/ca.pem"),
            format!("{o_ca}=/nonexistent/ca.pem"),
        ),
        (format!("{o_ca}={key}"), "no certificate".into()),
        (format!("{o_cert}={cert}"), "go together".into()),
        (
            format!("{o_cert}={cert}&{o_key}="),
            format!("{o_key}= needs"),
        ),
        (
            format!("{o_cert}={cert}&{o_key}=/secret/k.pem"),
            format!("{o_key}: cannot read the key file"),
        ),
        (
            format!("{o_cert}={cert}&{o_key}={ca}"),
            "no unencrypted private key".into(),
        ),
    ]
    .into_iter()
    .map(|(query, needle)| (format!("{url}?{query}"), needle))
    .collect();
    (scratch, files, cases)
}

/// A scratch directory and its certificates.
#[cfg(any(feature = "mysql", feature = "etcd"))]
fn scratch_files(tag: &str) -> (Scratch, Files) {
    let scratch = Scratch::new(tag);
    let files = Files::write(&scratch.0);
    (scratch, files)
}

// ---------------------------------------------------------------- MySQL

/// A throwaway MariaDB with TLS (`ssl_cert`, `ssl_key`, `ssl_ca`), a role
/// `certuser` that needs a client certificate (`REQUIRE X509`), then
/// `require_secure_transport = ON`.
#[cfg(feature = "mysql")]
fn mariadb_tls(dir: &Path, files: &Files) -> Option<Server> {
    let p = |p: &Path| p.display().to_string();
    let server = common::mariadb(
        dir,
        &[
            format!("--ssl-cert={}", p(&files.server_cert)),
            format!("--ssl-key={}", p(&files.server_key)),
            format!("--ssl-ca={}", p(&files.ca)),
        ],
    )?;
    let admin = format!("mysql://root@127.0.0.1:{}/mysql", server.port);
    for sql in [
        "CREATE USER certuser@'127.0.0.1' REQUIRE X509",
        "GRANT ALL ON grantid_test.* TO certuser@'127.0.0.1'",
        "SET GLOBAL require_secure_transport = ON",
    ] {
        assert!(common::cli_ok(&admin, sql), "{sql}");
    }
    Some(server)
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_over_tls() {
    let Some((_scratch, files, server)) = with_server("tls-mysql", mariadb_tls) else {
        return;
    };
    let url = |user: &str, host: &str, query: &str| {
        format!("mysql://{user}@{host}:{}/grantid_test?{query}", server.port)
    };
    let ca = files.ca.display();

    // The right CA (the host name checked; the default mode with ssl-ca),
    // and the modes that encrypt without checking.
    two_generators_no_duplicates(
        &url(
            "root",
            "127.0.0.1",
            &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}"),
        ),
        &url("root", "127.0.0.1", &format!("ssl-ca={ca}")),
    );
    two_generators_no_duplicates(
        &url("root", "127.0.0.1", "ssl-mode=REQUIRED"),
        &url("root", "127.0.0.1", ""),
    );

    // A wrong CA; a host name the certificate (127.0.0.1 only) does not
    // name: refused at once, naming the cause.
    let wrong = files.wrong_ca.display();
    refused_at_start(
        &url(
            "root",
            "127.0.0.1",
            &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={wrong}"),
        ),
        &["TLS", "UnknownIssuer"],
    );
    refused_at_start(
        &url(
            "root",
            "localhost",
            &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}"),
        ),
        &["not valid for name", "localhost"],
    );
    // No TLS to a server that requires it: MariaDB answers "Access
    // denied" (as to a wrong password: retried until the start-up timeout).
    fails_at_start(
        &url("root", "127.0.0.1", "ssl-mode=DISABLED"),
        &[
            "Access denied",
            "require_secure_transport",
            "ssl-mode=VERIFY_IDENTITY",
        ],
    );
    // A role that needs a client certificate: refused without one, served
    // with one.
    fails_at_start(
        &url("certuser", "127.0.0.1", &format!("ssl-ca={ca}")),
        &["Access denied", "certuser"],
    );
    let with_cert = url(
        "certuser",
        "127.0.0.1",
        &format!("ssl-ca={ca}&{}", files.client("ssl-cert", "ssl-key")),
    );
    two_generators_no_duplicates(&with_cert, &with_cert);
    drop(server);

    // A server without TLS (the shared test server): PREFERRED falls back
    // to plain text, REQUIRED is refused at once.
    let Some(plain) = common::mysql_url() else {
        let _ = skip("no GRANTID_TEST_MYSQL_URL (a MariaDB without TLS)");
        return;
    };
    let sep = if plain.contains('?') { '&' } else { '?' };
    two_generators_no_duplicates(&format!("{plain}{sep}ssl-mode=PREFERRED"), &plain);
    refused_at_start(
        &format!("{plain}{sep}ssl-mode=REQUIRED"),
        &["ssl-mode=REQUIRED needs TLS", "does not offer it"],
    );
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_tls_options_are_checked_when_opened() {
    let base = "mysql://app:s3cret@127.0.0.1:1/db";
    let names = ["ssl-ca", "ssl-cert", "ssl-key"];
    let (_scratch, files, mut cases) = bad_files("tls-mysql-options", base, names);
    let [ca, cert, key] = files.paths();
    for (query, needle) in [
        ("ssl-mode=VERIFY_CA", "VERIFY_CA is not supported"),
        ("ssl-mode=VERIFY_IDENTITY", "ssl-ca=PATH"),
        ("ssl-mode=bogus", "not one of DISABLED, PREFERRED"),
        (
            &format!("ssl-mode=REQUIRED&ssl-ca={ca}"),
            "checks no certificate",
        ),
        (
            &format!("ssl-mode=DISABLED&ssl-ca={ca}"),
            "DISABLED uses no TLS",
        ),
        ("ssl-ca=", "needs a value"),
        ("ssl_mode=REQUIRED", "write ssl-mode"),
        ("require_ssl=true", "write ssl-mode"),
        ("verify_identity=true", "write ssl-mode"),
    ] {
        cases.push((format!("{base}?{query}"), needle.into()));
    }
    refused_when_opened(&cases);
    // Opening never connects: every mode with its files opens.
    for query in [
        "ssl-mode=DISABLED".to_owned(),
        "ssl-mode=preferred".to_owned(),
        "ssl-mode=REQUIRED".to_owned(),
        format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}"),
        format!("ssl-ca={ca}&ssl-cert={cert}&ssl-key={key}"),
        format!("ssl-mode=REQUIRED&ssl-cert={cert}&ssl-key={key}"),
    ] {
        open(&format!("{base}?{query}")).unwrap_or_else(|e| panic!("{query}: {e}"));
    }
}

// ---------------------------------------------------------------- etcd

/// A single-member etcd serving clients only over TLS, with client
/// certificates required (`--client-cert-auth`).
#[cfg(feature = "etcd")]
fn etcd_tls(dir: &Path, files: &Files) -> Option<Server> {
    let p = |p: &Path| p.display().to_string();
    let flags = [
        ("--cert-file", p(&files.server_cert)),
        ("--key-file", p(&files.server_key)),
        ("--trusted-ca-file", p(&files.ca)),
    ];
    let mut extra: Vec<String> = flags
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_owned(), value])
        .collect();
    extra.push("--client-cert-auth".into());
    common::etcd_with(dir, "https", extra)
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_over_tls() {
    let Some((_scratch, files, server)) = with_server("tls-etcd", etcd_tls) else {
        return;
    };
    let port = server.port;
    let ca = files.ca.display();
    let client = files.client("tls_cert", "tls_key");
    let right = format!("etcds://127.0.0.1:{port}?tls_ca={ca}&{client}");
    two_generators_no_duplicates(&right, &format!("{right}&timeout_ms=2000"));

    // A wrong CA, and none (the system's roots do not know the test CA).
    refused_at_start(
        &format!(
            "etcds://127.0.0.1:{port}?tls_ca={}&{client}",
            files.wrong_ca.display()
        ),
        &["TLS", "UnknownIssuer"],
    );
    refused_at_start(
        &format!("etcds://127.0.0.1:{port}?{client}"),
        &["UnknownIssuer"],
    );
    // A host name the certificate (127.0.0.1 only) does not name.
    refused_at_start(
        &format!("etcds://localhost:{port}?tls_ca={ca}&{client}"),
        &["not valid for name", "localhost"],
    );
    // No client certificate, where the server requires one: it sends an
    // alert after the handshake (TLS 1.3) and closes the connection; the
    // driver reports the one or the other (a write into the closed
    // connection as a broken pipe), as text.
    let message = fails_at_start(
        &format!("etcds://127.0.0.1:{port}?tls_ca={ca}"),
        &["give tls_cert and tls_key"],
    );
    assert!(
        [
            "connection closed",
            "BadCertificate",
            "broken pipe",
            "connection reset"
        ]
        .iter()
        .any(|signal| message.contains(signal)),
        "{message}"
    );
    // Plain text to the TLS port.
    fails_at_start(&format!("etcd://127.0.0.1:{port}"), &["etcd"]);
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_tls_options_are_checked_when_opened() {
    let base = "etcds://127.0.0.1:1,127.0.0.2:1";
    let names = ["tls_ca", "tls_cert", "tls_key"];
    let (_scratch, files, mut cases) = bad_files("tls-etcd-options", base, names);
    let [ca, _, _] = files.paths();
    cases.push((format!("{base}?tls_ca="), "needs the path".into()));
    cases.push((
        format!("etcd://127.0.0.1:1?tls_ca={ca}"),
        "applies to etcds:// only".into(),
    ));
    refused_when_opened(&cases);
    for url in [
        base.to_owned(),
        format!("{base}?tls_ca={ca}&timeout_ms=5"),
        format!("{base}?tls_ca={ca}&{}", files.client("tls_cert", "tls_key")),
    ] {
        open(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
    }
}

/// The sessions of one process (`open_sessions`, as `grantid serve` opens
/// them) share whether the server was once connected to: after a first
/// connection on one session, a certificate failure on another that never
/// connected is `Unavailable` (a client's renewal keeps its grant while the
/// certificate is put right), not the `Refused` of a start-up, which a
/// running generator takes as the loss of its worker.
#[test]
fn mysql_sessions_share_a_first_connection() {
    let Some((_scratch, files, server)) = with_server("tls-mysql-sessions", mariadb_tls) else {
        return;
    };
    let url = format!(
        "mysql://root@127.0.0.1:{}/grantid_test?ssl-mode=VERIFY_IDENTITY&ssl-ca={}&max_lead_ms=60000",
        server.port,
        files.ca.display()
    );
    let sessions = grantid_authority::open_sessions(&url, 3).unwrap();
    sessions[0].init_new_deployment().unwrap();
    let ns = common::namespace("tls-sessions");
    let layout = common::small_layout();
    let inc = common::random();
    let g = sessions[0]
        .acquire(&common::request(&ns, inc, 1, None, 0, 2_000, layout))
        .unwrap();
    // The server's certificate is replaced by one the client's CA did not
    // sign; new connections fail their check.
    let other = Ca::new("grantid rotated CA");
    let (cert, key) = other.issue("grantid test server", &["127.0.0.1"]);
    std::fs::write(&files.server_cert, cert).unwrap();
    std::fs::write(&files.server_key, key).unwrap();
    let admin = format!("mysql://root@127.0.0.1:{}/mysql", server.port);
    assert!(common::cli_ok(&admin, "FLUSH SSL"));
    for (session, id) in [(1, 2), (2, 3)] {
        let r = sessions[session].acquire(&common::request(
            &ns,
            inc,
            id,
            Some(g.worker),
            g.end,
            2_000,
            layout,
        ));
        assert!(
            matches!(r, Err(GrantError::Unavailable(ref m)) if m.contains("certificate")),
            "session {session}: {r:?}"
        );
    }
}
