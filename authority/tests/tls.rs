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
use grantid::{Error, Generator, Layout};
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
/// `needles`. Returns the message.
fn fails_at_start(url: &str, needles: &[&str]) -> String {
    let t0 = Instant::now();
    let e = match generator(url, &common::namespace("tls-fail")) {
        Ok(_) => panic!("{url}: a generator started"),
        Err(e) => e,
    };
    let message = e.message().to_owned();
    for n in needles {
        assert!(message.contains(n), "{url}: {n:?} not in {message}");
    }
    eprintln!("{url} ({:?}): {message}", t0.elapsed());
    message
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
        fails_at_start(
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
    fails_at_start(
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
            "sslmode=verify-full&sslrootcert={ca}&sslcert={}&sslkey={}",
            files.client_cert.display(),
            files.client_key.display()
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
    fails_at_start(
        &format!(
            "rediss://127.0.0.1:{port}/0?tls_ca={}",
            files.wrong_ca.display()
        ),
        &["UnknownIssuer"],
    );
    fails_at_start(&format!("rediss://127.0.0.1:{port}/0"), &["UnknownIssuer"]);
    // A host name the certificate (127.0.0.1 only) does not name.
    fails_at_start(
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
        "rediss://127.0.0.1:{port}/0?tls_ca={ca}&tls_cert={}&tls_key={}",
        files.client_cert.display(),
        files.client_key.display()
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
