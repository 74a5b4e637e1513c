//! The registry: the table of engines ([`ENGINES`]), which engine a URL
//! names, and how it is opened. The one module that imports every engine;
//! engines import only the kernel (`kernel.rs`, `url.rs` and the shared
//! modules below them). A new engine is a folder under `engines/` (its
//! grammar `url.rs`, its `open`), a row here, a cargo feature, and a
//! variant of [`Target`].

use grantid::{Error, GrantSource};

use crate::datacenter;
use crate::kernel::{Authority, Sessions};
use crate::url::{self, AuthorityUrl, Options, Parts, Target, default_file_path};

/// The default authority URL: the file authority at [`default_file_path`].
pub const DEFAULT_URL: &str = "file:";

/// The default authority URL with its path spelled out
/// (`file:/home/me/.local/state/grantid/authority.json`).
pub fn default_url() -> String {
    format!("file:{}", default_file_path().display())
}

/// An engine's grammar: the target of a URL of one of its schemes, with
/// grantid's options taken into `options`.
type Parse = fn(&Parts<'_>, &mut Options) -> Result<Target, Error>;

/// An engine's opener: `sessions` sessions (at least one) of the
/// authority a URL of its grammar names (`url` for messages).
type Open = fn(&str, Target, Options, usize) -> Result<Sessions, Error>;

/// One engine: what the registry knows of it.
struct Engine {
    /// Its name: the cargo feature that builds it, its folder
    /// `engines/<name>` (`static` is `engines/static_worker`).
    name: &'static str,
    /// Its schemes, the first as messages name it.
    schemes: &'static [&'static str],
    /// Whether its URLs are `scheme://...` (a server) or `scheme:...`.
    server: bool,
    /// What a build needs besides the feature, for the message of a build
    /// without it.
    needs: &'static str,
    /// Its grammar and opener; `None` in a build without its feature.
    parts: Option<(Parse, Open)>,
}

/// Every engine, in the order messages list them.
const ENGINES: &[Engine] = &[
    Engine {
        name: "file",
        schemes: &["file"],
        server: false,
        needs: "",
        #[cfg(feature = "file")]
        parts: Some((crate::engines::file::url::parse, crate::engines::file::open)),
        #[cfg(not(feature = "file"))]
        parts: None,
    },
    Engine {
        name: "static",
        schemes: &["static"],
        server: false,
        needs: "",
        #[cfg(feature = "static")]
        parts: Some((
            crate::engines::static_worker::url::parse,
            crate::engines::static_worker::open,
        )),
        #[cfg(not(feature = "static"))]
        parts: None,
    },
    Engine {
        name: "postgres",
        schemes: &["postgres", "postgresql"],
        server: true,
        needs: "",
        #[cfg(feature = "postgres")]
        parts: Some((
            crate::engines::postgres::url::parse,
            crate::engines::postgres::open,
        )),
        #[cfg(not(feature = "postgres"))]
        parts: None,
    },
    Engine {
        name: "mysql",
        schemes: &["mysql", "mariadb"],
        server: true,
        needs: "",
        #[cfg(feature = "mysql")]
        parts: Some((
            crate::engines::mysql::url::parse,
            crate::engines::mysql::open,
        )),
        #[cfg(not(feature = "mysql"))]
        parts: None,
    },
    Engine {
        name: "redis",
        schemes: &["redis", "rediss"],
        server: true,
        needs: "",
        #[cfg(feature = "redis")]
        parts: Some((
            crate::engines::redis::url::parse,
            crate::engines::redis::open,
        )),
        #[cfg(not(feature = "redis"))]
        parts: None,
    },
    Engine {
        name: "etcd",
        schemes: &["etcd", "etcds"],
        server: true,
        needs: "; it needs protoc: apt-get install protobuf-compiler",
        #[cfg(feature = "etcd")]
        parts: Some((crate::engines::etcd::url::parse, crate::engines::etcd::open)),
        #[cfg(not(feature = "etcd"))]
        parts: None,
    },
    Engine {
        name: "dynamodb",
        schemes: &["dynamodb"],
        server: true,
        needs: "",
        #[cfg(feature = "dynamodb")]
        parts: Some((
            crate::engines::dynamodb::url::parse,
            crate::engines::dynamodb::open,
        )),
        #[cfg(not(feature = "dynamodb"))]
        parts: None,
    },
    Engine {
        name: "grpc",
        schemes: &["grpc", "grpcs"],
        server: true,
        needs: "",
        #[cfg(feature = "grpc")]
        parts: Some((crate::engines::grpc::url::parse, crate::engines::grpc::open)),
        #[cfg(not(feature = "grpc"))]
        parts: None,
    },
];

impl Engine {
    /// `scheme` as messages show it: `file:`, `postgres://`.
    fn shown(&self, scheme: &str) -> String {
        format!("{scheme}:{}", if self.server { "//" } else { "" })
    }

    /// The grammar and opener, or why this build has none.
    fn parts(&self, url: &str) -> Result<(Parse, Open), Error> {
        self.parts.ok_or_else(|| {
            url::invalid(
                url,
                format!(
                    "this build has no {name} authority: build with the cargo feature `{name}` \
                     (for example `cargo build -p grantid-cli --features {name}`{needs}); see \
                     docs/reference/urls.md",
                    name = self.name,
                    needs = self.needs,
                ),
            )
        })
    }
}

/// Every scheme an authority URL may have, as messages and help texts list
/// them: `file:, static:, postgres://, postgresql://, ...`.
pub fn schemes() -> String {
    ENGINES
        .iter()
        .flat_map(|e| e.schemes.iter().map(|s| e.shown(s)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An engine of the table, as tests and tools see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineName {
    /// Its name (its cargo feature).
    pub name: &'static str,
    /// Its schemes, the first as messages name it.
    pub schemes: &'static [&'static str],
    /// Whether this build has it.
    pub built: bool,
}

/// Every engine of the table, in its order: suites that run over the
/// engines take them from here, so that a new row reaches them.
pub fn engines() -> impl Iterator<Item = EngineName> {
    ENGINES.iter().map(|e| EngineName {
        name: e.name,
        schemes: e.schemes,
        built: e.parts.is_some(),
    })
}

/// The engine of `url`'s scheme, and the URL's parts.
fn engine_of(url: &str) -> Result<(&'static Engine, Parts<'_>), Error> {
    let (scheme, rest) = url
        .split_once(':')
        .ok_or_else(|| url::invalid(url, format!("no scheme (expected {})", schemes())))?;
    let engine = ENGINES
        .iter()
        .find(|e| e.schemes.contains(&scheme))
        .ok_or_else(|| {
            url::invalid(
                url,
                format!("unknown scheme {scheme:?} (expected {})", schemes()),
            )
        })?;
    Ok((engine, Parts { url, scheme, rest }))
}

/// Parses an authority URL by its engine's grammar. Environment variables
/// named by `static:env:VAR` are read here.
pub fn parse(url: &str) -> Result<AuthorityUrl, Error> {
    Ok(parsed(url)?.1)
}

/// `url` parsed by its engine's grammar, with the engine's opener.
fn parsed(url: &str) -> Result<(Open, AuthorityUrl), Error> {
    let (engine, parts) = engine_of(url)?;
    let (parse, open) = engine.parts(url)?;
    let mut options = Options::default();
    let target = parse(&parts, &mut options)?;
    Ok((open, AuthorityUrl { target, options }))
}

/// Opens the authority named by `url` (see the crate's table of URLs). Only parsing
/// happens here: a server that cannot be reached makes `acquire` answer
/// `Unavailable`, it does not fail this call. With `datacenter=N` the
/// backend grants only the workers of datacenter N (docs/AUTHORITIES.md,
/// "Regions").
pub fn open(url: &str) -> Result<Box<dyn Authority>, Error> {
    open_in(url, None)
}

/// [`open`], restricted to `datacenter` when the URL names none.
fn open_in(url: &str, datacenter: Option<u32>) -> Result<Box<dyn Authority>, Error> {
    let (sessions, named) = open_backends(url, 1)?;
    Ok(datacenter::restrict(sessions.first, named.or(datacenter)))
}

/// `n` sessions of the engine `url` names, and the URL's datacenter.
fn open_backends(url: &str, n: usize) -> Result<(Sessions, Option<u32>), Error> {
    let (open, AuthorityUrl { target, options }) = parsed(url)?;
    let datacenter = options.datacenter;
    Ok((open(url, target, options, n.max(1))?, datacenter))
}

/// Opens `n` independent sessions of the authority named by `url` (at
/// least one), for a caller that runs several calls at once, such as a
/// grantid server forwarding a fleet's grants: each session has its own
/// connection, so calls on different sessions do not wait for each other.
/// The store serialises what must be serialised (a row lock, a script, a
/// transaction). What a process remembers of the store is shared by its
/// sessions: etcd's revision floor (a store that went back in time is
/// noticed whichever session saw the higher revision), whether etcd or
/// MySQL was once connected to (a certificate failure is `Refused` only
/// before: after it a running generator keeps its grant) and the datacenter
/// wrapper's layouts (a release may come on another session than its
/// acquire). `file:` and `static:` run every call under one file lock, so
/// more sessions would only wait on it: for them one session is returned,
/// whatever `n` is.
pub fn open_sessions(url: &str, n: usize) -> Result<Vec<Box<dyn Authority>>, Error> {
    let (sessions, datacenter) = open_backends(url, n)?;
    Ok(datacenter::restrict_all(sessions.all(), datacenter))
}

/// Opens the authority named by `url` as a [`GrantSource`]: the entry point
/// every binding uses. See [`open`].
pub fn from_url(url: &str) -> Result<Box<dyn GrantSource>, Error> {
    from_url_in(url, None)
}

/// As [`from_url`], for a generator that runs in `datacenter`: a URL
/// without `datacenter=N` grants that datacenter's workers, as if it said
/// `datacenter=N` (docs/AUTHORITIES.md, "Regions"); a URL that names one
/// grants its own (the generator refuses a disagreement at start).
pub fn from_url_in(url: &str, datacenter: Option<u32>) -> Result<Box<dyn GrantSource>, Error> {
    let authority: Box<dyn GrantSource> = open_in(url, datacenter)?;
    Ok(authority)
}
#[cfg(test)]
mod tests {
    use std::time::Duration;

    use grantid::ErrorKind;

    use super::*;
    use crate::url::{GRANTID_OPTIONS, TlsFiles, apply_option};

    #[test]
    fn a_targets_debug_shows_no_secret() {
        for url in [
            "postgres://app:s3cret@db/grantid?sslkey=/secret/k.pem",
            "rediss://:s3cret@r:6380/0?tls_key=/secret/k.pem",
            "grpcs://h:9?tls_key=/secret/k.pem&token_file=/secret/t",
            "mysql://app:s3cret@db/grantid?ssl-key=/secret/k.pem",
            "etcds://h:2379?tls_key=/secret/k.pem",
        ] {
            let shown = format!("{:?}", parse(url).unwrap().target);
            assert!(!shown.contains("s3cret"), "{url}: {shown}");
            assert!(!shown.contains("/secret/"), "{url}: {shown}");
        }
    }

    /// Every row's schemes are listed, and each opens its own engine's
    /// target: a new row is tested here without another edit.
    #[test]
    fn every_row_parses_its_own_schemes() {
        let listed = schemes();
        for engine in ENGINES {
            for scheme in engine.schemes {
                let shown = engine.shown(scheme);
                assert!(listed.contains(&shown), "{listed} lacks {shown}");
                let url = match engine.name {
                    "file" => "file:/x".to_owned(),
                    "static" => "static:1".to_owned(),
                    "etcd" | "grpc" => format!("{shown}h:1"),
                    "dynamodb" => format!("{shown}ids"),
                    _ => format!("{shown}u@h/db"),
                };
                let Some((grammar, _)) = engine.parts else {
                    assert!(parse(&url).unwrap_err().message().contains(engine.name));
                    continue;
                };
                let (_, parts) = engine_of(&url).unwrap();
                let target = grammar(&parts, &mut Options::default()).unwrap();
                let name = format!("{target:?}").to_lowercase();
                assert!(name.starts_with(engine.name), "{url}: {name}");
            }
        }
        // A scheme of no row.
        let e = parse("ftp://x").unwrap_err();
        assert!(e.message().contains(&listed), "{e}");
    }

    #[test]
    fn good_urls() {
        let u = parse("file:/tmp/x.json?lease_grace_ms=7").unwrap();
        assert_eq!(u.target, Target::File("/tmp/x.json".into()));
        assert_eq!(u.options.lease_grace_ms, 7);
        assert_eq!(
            parse("file:").unwrap().target,
            Target::File(default_file_path())
        );
        assert_eq!(
            parse("static:3?state=/s").unwrap().target,
            Target::Static {
                worker: 3,
                state: Some("/s".into())
            }
        );
        let p = parse("postgres://u@h:5/db?sslmode=disable&timeout_ms=9").unwrap();
        assert_eq!(
            p.target,
            Target::Postgres("postgres://u@h:5/db?sslmode=disable".into())
        );
        assert_eq!(p.options.timeout, Duration::from_millis(9));
        assert_eq!(p.options.datacenter, None);
        for url in [
            "file:/tmp/x.json?datacenter=1",
            "static:3?datacenter=1",
            "postgres://h/db?datacenter=1",
            "redis://h/0?datacenter=1",
            "grpc://h:1?datacenter=1",
        ] {
            assert_eq!(parse(url).unwrap().options.datacenter, Some(1), "{url}");
        }
        assert_eq!(
            parse("postgres://h/db?datacenter=2&sslmode=disable")
                .unwrap()
                .target,
            Target::Postgres("postgres://h/db?sslmode=disable".into())
        );
        assert_eq!(
            parse("redis://h:1/0").unwrap().target,
            Target::Redis("redis://h:1/0".into())
        );
        let r = parse("rediss://h:1/0?timeout_ms=9&tls_ca=/ca.pem#insecure").unwrap();
        assert_eq!(
            r.target,
            Target::Redis("rediss://h:1/0?tls_ca=/ca.pem#insecure".into())
        );
        assert_eq!(r.options.timeout, Duration::from_millis(9));
        let g = parse("grpcs://ids:50051?timeout_ms=9&tls_ca=/ca.pem&token_file=/t").unwrap();
        assert_eq!(
            g.target,
            Target::Grpcs("ids:50051?tls_ca=/ca.pem&token_file=/t".into())
        );
        assert_eq!(g.options.timeout, Duration::from_millis(9));
        assert_eq!(
            parse("grpcs://ids:50051").unwrap().target,
            Target::Grpcs("ids:50051".into())
        );
    }

    #[test]
    fn mysql_and_etcd_urls() {
        let m = parse("mariadb://app@db:3306/ids?timeout_ms=250&max_lead_ms=900").unwrap();
        assert_eq!(m.target, Target::Mysql("mysql://app@db:3306/ids".into()));
        assert_eq!(m.options.timeout, Duration::from_millis(250));
        assert_eq!(m.options.max_lead_ms, 900);
        let e = parse("etcd://10.0.0.1:2379,10.0.0.2:2379?clock_skew_ms=5").unwrap();
        assert_eq!(
            e.target,
            Target::Etcd(vec!["10.0.0.1:2379".into(), "10.0.0.2:2379".into()])
        );
        assert_eq!(e.options.clock_skew_ms, 5);
        assert_eq!(
            parse("etcds://h:1,h:2?tls_ca=/a%20b.pem&timeout_ms=9")
                .unwrap()
                .target,
            Target::Etcds(
                vec!["h:1".into(), "h:2".into()],
                TlsFiles {
                    ca: Some("/a b.pem".into()),
                    ..TlsFiles::default()
                }
            )
        );
        for (url, needle) in [
            ("etcd://", "expected etcd://HOST:PORT"),
            ("etcd://h", "expected etcd://HOST:PORT"),
            ("etcd://h:1,", "expected etcd://HOST:PORT"),
            ("etcd://h:1/x", "expected etcd://HOST:PORT"),
            ("etcd://h:1?bogus=1", "unknown option"),
            (
                "etcd://h:1?tls_ca=/ca.pem",
                "tls_ca applies to etcds:// only",
            ),
            ("etcds://h:1?tls_key=", "tls_key= needs the path"),
            ("etcds://h", "expected etcds://HOST:PORT"),
            ("mysql:db", "expected mysql://"),
        ] {
            let err = parse(url).unwrap_err();
            assert!(err.message().contains(needle), "{url}: {err}");
        }
    }

    #[test]
    fn paths_are_absolute_and_percent_decoded() {
        for (url, path) in [
            ("file:/tmp/a%20b.json", "/tmp/a b.json"),
            ("file:///tmp/x.json", "/tmp/x.json"),
            ("file://localhost/tmp/x.json", "/tmp/x.json"),
        ] {
            assert_eq!(
                parse(url).unwrap().target,
                Target::File(path.into()),
                "{url}"
            );
        }
        assert_eq!(
            parse("static:2?state=/tmp/s%3F.json").unwrap().target,
            Target::Static {
                worker: 2,
                state: Some("/tmp/s?.json".into())
            }
        );
    }

    #[test]
    fn parsed_urls_show_no_secret() {
        let files = parse("etcds://h:1?tls_cert=/c.pem&tls_key=/secret/k.pem").unwrap();
        assert!(!format!("{files:?}").contains("/secret/k.pem"), "{files:?}");
        let e = parse("postgres://app:s3cret@h/db?bogus&timeout_ms=x").unwrap_err();
        assert!(!e.message().contains("s3cret"), "{e}");
    }

    #[test]
    fn every_grantid_option_is_taken_and_named() {
        for key in GRANTID_OPTIONS {
            let mut options = Options::default();
            // A map that names every region this host may have: the
            // datacenter of whatever AWS_REGION says, or none set.
            let value = if *key == "datacenter_by_region" {
                format!("{}:1", std::env::var("AWS_REGION").unwrap_or("x".into()))
            } else {
                "1".into()
            };
            let taken = apply_option("redis://h/0", "redis", key, &value, &mut options);
            assert!(
                taken == Ok(true)
                    || (*key == "datacenter_by_region" && std::env::var("AWS_REGION").is_err()),
                "{key}: {taken:?}"
            );
            let e = parse(&format!("redis://h/0?{key}x=1")).unwrap_err();
            assert!(e.message().contains(&format!(" {key}")), "{e}");
        }
        assert_eq!(
            apply_option(
                "redis://h/0",
                "redis",
                "bogus",
                "1",
                &mut Options::default()
            )
            .ok(),
            Some(false)
        );
    }

    #[test]
    fn bad_urls_name_the_problem() {
        for (url, needle) in [
            ("nothing", "no scheme"),
            ("nothing", "grpcs://)"),
            ("ftp://x", "unknown scheme"),
            ("ftp://x", "grpcs://)"),
            (
                "grpc://h:1?tls_ca=/ca.pem",
                "tls_ca applies to grpcs:// only",
            ),
            (
                "grpc://h:1?token_file=/t",
                "token_file applies to grpcs:// only",
            ),
            ("grpcs://?tls_ca=/ca.pem", "expected grpcs://HOST:PORT"),
            ("grpcs://h:1?sslmode=disable", "unknown option"),
            ("static:", "not a worker number"),
            ("static:-1", "not a worker number"),
            ("static:99999999999", "32 bits"),
            ("static:env:", "variable name"),
            ("static:env:GRANTID_SURELY_UNSET_VAR", "is not set"),
            ("static:1?state=", "needs a path"),
            ("file:/x?bogus=1", "unknown option"),
            ("file:/x?timeout_ms=0", "at least 1"),
            ("postgres:localhost", "expected postgres://"),
            ("redis://h?lease_grace_ms=abc", "not a whole number"),
            ("file:/x?log_max=1", "log_max applies to redis:// only"),
            (
                "postgres://h/db?log_max=1",
                "log_max applies to redis:// only",
            ),
            ("grpc://h:1?log_max=1", "log_max applies to redis:// only"),
            ("file:/x?datacenter=-1", "not a whole number"),
            ("static:1?datacenter=4294967296", "does not fit in 32 bits"),
            (
                "redis://h/?timeout_msec=100",
                "unknown option \"timeout_msec\"",
            ),
            ("file:var/lib/x.json", "is relative"),
            ("file://var/lib/x.json", "names the host \"var\""),
            ("file:/a%00b", "NUL"),
            ("static:1?state=rel/s.json", "is relative"),
            (
                "redis://h/0?tls_ca=/ca.pem",
                "tls_ca applies to rediss:// only",
            ),
            (
                "redis://h/0#insecure",
                "#insecure applies to rediss:// only",
            ),
            ("rediss://h/0#nope", "takes #insecure only"),
        ] {
            let e = parse(url).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.message().contains(needle), "{url}: {e}");
        }
    }
}
