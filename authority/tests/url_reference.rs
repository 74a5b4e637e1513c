//! The reference pages agree with the code: every (scheme, option) of the
//! table in docs/reference/urls.md opens, every option name of the table is
//! refused on the schemes it is not listed for, a made-up option is refused
//! on every scheme, and the documented defaults are the parser's. The error
//! table of docs/reference/errors.md follows `ErrorKind::ALL`. Needs every
//! scheme's feature (`--all-features`); opening never connects.

#![cfg(all(
    feature = "file",
    feature = "static",
    feature = "postgres",
    feature = "mysql",
    feature = "redis",
    feature = "etcd",
    feature = "dynamodb",
    feature = "grpc"
))]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use grantid::ErrorKind;
use grantid_authority::{Options, open, parse_url};

/// A row of the URL table: the schemes it is about, the option names it
/// lists (empty for the row of the scheme itself) and its default cell.
struct Row {
    schemes: Vec<String>,
    options: Vec<String>,
    default: String,
    line: usize,
}

fn page(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/reference")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The backticked words of a cell.
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The cells of the first table whose header row is `header`, each with its
/// line number.
fn table(text: &str, header: &str) -> Vec<(usize, Vec<String>)> {
    let mut lines = text.lines().enumerate();
    lines
        .by_ref()
        .find(|(_, l)| l.trim() == header)
        .unwrap_or_else(|| panic!("no table with the header {header:?}"));
    lines
        .skip(1) // the |---| row
        .take_while(|(_, l)| l.starts_with('|'))
        .map(|(n, l)| {
            let cells = l.trim().trim_matches('|').split('|');
            (n + 1, cells.map(|c| c.trim().to_owned()).collect())
        })
        .collect()
}

fn url_rows() -> Vec<Row> {
    let rows: Vec<Row> = table(
        &page("urls.md"),
        "| scheme | option | default | cargo feature | meaning |",
    )
    .into_iter()
    .map(|(line, cells)| {
        assert_eq!(cells.len(), 5, "urls.md:{line}: five cells");
        Row {
            schemes: ticked(&cells[0]),
            options: ticked(&cells[1]),
            default: cells[2].clone(),
            line,
        }
    })
    .collect();
    assert!(rows.len() > 10, "the URL table has {} rows", rows.len());
    rows
}

/// A URL of `scheme` that opens, without options.
fn base(scheme: &str) -> &'static str {
    match scheme {
        "file:" => "file:/tmp/grantid-url-reference/state.json",
        "static:" => "static:1",
        "postgres://" => "postgres://app@127.0.0.1:1/ids",
        "postgresql://" => "postgresql://app@127.0.0.1:1/ids",
        "mysql://" => "mysql://app@127.0.0.1:1/ids",
        "mariadb://" => "mariadb://app@127.0.0.1:1/ids",
        "redis://" => "redis://127.0.0.1:1/0",
        "etcd://" => "etcd://127.0.0.1:1,127.0.0.2:1",
        "etcds://" => "etcds://127.0.0.1:1,127.0.0.2:1",
        "dynamodb://" => "dynamodb://grantid-ids",
        "grpc://" => "grpc://127.0.0.1:1",
        "rediss://" => "rediss://127.0.0.1:1/0",
        // Without tls_ca: the system's roots (the ca-certificates package).
        "grpcs://" => "grpcs://127.0.0.1:1",
        other => panic!("urls.md names the scheme {other:?}: give the test a URL of it"),
    }
}

/// PEM files for the TLS options, made once: (CA, client certificate,
/// client key).
fn pem_files() -> &'static (String, String, String) {
    static FILES: std::sync::OnceLock<(String, String, String)> = std::sync::OnceLock::new();
    FILES.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("grantid-url-reference-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(Vec::new())
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let put = |name: &str, text: String| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path.display().to_string()
        };
        (
            put("ca.pem", ca_pem),
            put("client.pem", cert.pem()),
            put("client.key", key.serialize_pem()),
        )
    })
}

/// A token file, made once.
fn token_file() -> String {
    let (ca, _, _) = pem_files();
    let path = std::path::Path::new(ca).with_file_name("token");
    std::fs::write(&path, "token-of-the-url-reference-test\n").unwrap();
    path.display().to_string()
}

/// A value the option accepts (a certificate's option brings its key's,
/// and the other way round: they go together).
fn sample(option: &str) -> String {
    let (ca, cert, key) = pem_files();
    if option == "datacenter_by_region" {
        // The region this process runs in (the tiers set AWS_REGION).
        let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into());
        return format!("{region}:1,zz-test-9:2");
    }
    match option {
        "sslrootcert" | "tls_ca" | "ssl-ca" => return ca.clone(),
        "sslcert" => return format!("{cert}&sslkey={key}"),
        "sslkey" => return format!("{key}&sslcert={cert}"),
        "tls_cert" => return format!("{cert}&tls_key={key}"),
        "tls_key" => return format!("{key}&tls_cert={cert}"),
        "token_file" => return token_file(),
        "ssl-cert" => return format!("{cert}&ssl-key={key}"),
        "ssl-key" => return format!("{key}&ssl-cert={cert}"),
        _ => {}
    }
    match option {
        "state" => "/tmp/grantid-url-reference/static.json",
        "endpoint" => "http://127.0.0.1:1",
        "region" => "eu-west-1",
        "datacenter" => "0",
        "protocol" => "resp3",
        "db" | "user" | "pass" | "password" | "dbname" | "application_name" => "x",
        "options" => "-c%20search_path%3Dx",
        "sslmode" => "disable",
        "ssl-mode" => "REQUIRED",
        "sslnegotiation" => "postgres",
        "host" | "hostaddr" => "127.0.0.1",
        "port" => "1",
        "target_session_attrs" => "any",
        "channel_binding" | "load_balance_hosts" => "disable",
        "compression" => "fast",
        "socket" => "/tmp/grantid-url-reference/mysql.sock",
        "pool_min" => "1",
        "pool_max" => "100",
        "tcp_nodelay" | "prefer_socket" | "secure_auth" | "client_found_rows"
        | "reset_connection" => "true",
        "enable_cleartext_plugin"
        | "require_ssl"
        | "verify_ca"
        | "verify_identity"
        | "built_in_roots" => "false",
        _ => "1",
    }
    .to_owned()
}

/// Every (scheme, option) the table documents; a row whose scheme cell
/// names none is about every scheme of the table.
fn documented(rows: &[Row]) -> (BTreeSet<String>, BTreeMap<String, BTreeSet<String>>) {
    let schemes: BTreeSet<String> = rows.iter().flat_map(|r| r.schemes.clone()).collect();
    let mut by_scheme: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for row in rows {
        let applies = if row.schemes.is_empty() {
            schemes.iter().cloned().collect()
        } else {
            row.schemes.clone()
        };
        for s in applies {
            by_scheme
                .entry(s)
                .or_default()
                .extend(row.options.iter().cloned());
        }
    }
    (schemes, by_scheme)
}

fn with(url: &str, option: &str, value: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{option}={value}")
}

#[test]
fn every_documented_scheme_and_option_opens() {
    let rows = url_rows();
    for row in &rows {
        for scheme in &row.schemes {
            if let Err(e) = open(base(scheme)) {
                panic!("urls.md:{}: {} does not open: {e}", row.line, base(scheme));
            }
        }
    }
    let (_, by_scheme) = documented(&rows);
    for (scheme, options) in &by_scheme {
        for option in options {
            let url = with(base(scheme), option, &sample(option));
            match open(&url) {
                Err(e)
                    if option == "datacenter_by_region" && std::env::var("AWS_REGION").is_err() =>
                {
                    assert!(e.message().contains("AWS_REGION is not set"), "{e}");
                }
                Err(e) => panic!("urls.md lists {option} for {scheme}, but {url} is refused: {e}"),
                Ok(_) => {}
            }
        }
    }
}

/// The option names the parser itself lists when it refuses a key of a
/// Redis URL (grantid's and the Redis driver's), and the one it takes
/// beside them (`state` on `static:`).
fn code_names() -> BTreeSet<String> {
    let e = match open("redis://127.0.0.1:1/0?grantid_made_up_option=1") {
        Ok(_) => panic!("a made-up option of a Redis URL opens"),
        Err(e) => e,
    };
    let message = e.message();
    let list = message
        .split_once("(grantid: ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .unwrap_or_else(|| panic!("the parser no longer lists its options: {message}"))
        .0;
    let mut names: BTreeSet<String> = list
        .split([',', ';', ':'])
        .map(|w| w.trim().trim_start_matches("the Redis driver").trim())
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect();
    assert!(names.contains("timeout_ms"), "{names:?}");
    names.insert("state".to_owned());
    names
}

#[test]
fn options_not_documented_for_a_scheme_are_refused() {
    let rows = url_rows();
    let (schemes, by_scheme) = documented(&rows);
    let mut every_name: BTreeSet<String> = by_scheme.values().flatten().cloned().collect();
    every_name.extend(code_names());
    every_name.insert("grantid_made_up_option".to_owned());
    for scheme in &schemes {
        let listed = &by_scheme[scheme];
        for name in &every_name {
            if listed.contains(name) {
                continue;
            }
            let url = with(base(scheme), name, &sample(name));
            match open(&url) {
                Ok(_) => {
                    panic!("{url} opens, but urls.md does not list {name} for {scheme}: add a row")
                }
                Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{url}: {e}"),
            }
        }
    }
}

#[test]
fn documented_defaults_are_the_parsers() {
    let defaults = Options::default();
    let parsed = parse_url("file:/tmp/grantid-url-reference/state.json")
        .unwrap()
        .options;
    assert_eq!(parsed, defaults);
    let actual: BTreeMap<&str, u64> = [
        ("lease_grace_ms", defaults.lease_grace_ms),
        ("timeout_ms", defaults.timeout.as_millis() as u64),
        ("max_lead_ms", defaults.max_lead_ms),
        ("clock_skew_ms", defaults.clock_skew_ms),
        ("log_max", defaults.log_max),
    ]
    .into();
    let rows = url_rows();
    for (name, value) in actual {
        let row = rows
            .iter()
            .find(|r| r.options == [name])
            .unwrap_or_else(|| panic!("urls.md has no row of its own for {name}"));
        let written: String = row.default.chars().filter(|c| *c != ',').collect();
        assert_eq!(
            written.trim_matches('`').parse::<u64>().ok(),
            Some(value),
            "urls.md:{}: the default of {name} is {value}",
            row.line
        );
    }
    assert_eq!(defaults.datacenter, None);
}

#[test]
fn the_error_page_follows_error_kind_all() {
    let rows = table(
        &page("errors.md"),
        "| kind | code | C status | exit status | gRPC code | meaning |",
    );
    let kinds: Vec<(String, String, String, String)> = rows
        .iter()
        .map(|(line, cells)| {
            assert_eq!(cells.len(), 6, "errors.md:{line}: six cells");
            let one = |i: usize| ticked(&cells[i]).concat();
            (one(0), one(1), cells[2].clone(), cells[3].clone())
        })
        .collect();
    let expected: Vec<(String, String, String, String)> = ErrorKind::ALL
        .iter()
        .enumerate()
        .map(|(i, k)| {
            (
                k.name().to_owned(),
                k.code().to_owned(),
                (i + 1).to_string(),
                (i + 11).to_string(),
            )
        })
        .collect();
    assert_eq!(
        kinds, expected,
        "errors.md: one row per ErrorKind::ALL, in order"
    );
}
