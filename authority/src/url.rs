//! What every authority URL shares (docs/reference/urls.md): grantid's
//! options and their defaults, the query grammar the engines' grammars
//! are written with, redaction, local paths, and the parsed [`Target`].
//! Each engine's grammar is in its folder (`engines/<name>/url.rs`); the
//! registry's table picks it by scheme.

// The helpers of the engines' grammars: a build without some engines
// leaves some of them unused (the full build checks that none is dead).
#![cfg_attr(
    not(all(
        feature = "file",
        feature = "static",
        feature = "postgres",
        feature = "mysql",
        feature = "redis",
        feature = "etcd",
        feature = "grpc"
    )),
    allow(dead_code)
)]

use std::path::PathBuf;
use std::time::Duration;

use grantid::{Error, ErrorKind};

/// Default lease grace: how long a worker lease outlives the end of its last
/// grant. 5 s is the generator's default horizon: a process that stops
/// renewing frees its worker 5 s after its committed time ran out.
pub const DEFAULT_LEASE_GRACE_MS: u64 = 5_000;
/// Default bound on one authority call (connect, statement, lock wait).
pub const DEFAULT_TIMEOUT_MS: u64 = 3_000;
/// Default bound on how far after the authority's clock a grant may end
/// (`max_lead_ms`): the generator's default horizon (5 s) plus its default
/// grant (1 s) plus 1 s. After a state loss the authority waits this long
/// (plus the clock-skew allowance) before granting again.
pub const DEFAULT_MAX_LEAD_MS: u64 = 7_000;
/// Default allowance for the difference between the clocks an authority
/// has used across a loss (a failover to another server), in ms.
pub const DEFAULT_CLOCK_SKEW_MS: u64 = 1_000;
/// Default cap on the Redis grant log stream (approximate, `XADD MAXLEN ~`).
pub const DEFAULT_REDIS_LOG_MAX: u64 = 1_000_000;

/// grantid's own options, the keys [`apply_option`] takes (`log_max` only
/// on `redis://`).
pub(crate) const GRANTID_OPTIONS: &[&str] = &[
    "lease_grace_ms",
    "timeout_ms",
    "log_max",
    "max_lead_ms",
    "clock_skew_ms",
    "datacenter",
    "datacenter_by_region",
];

/// grantid's TLS options (PEM files: the CA, the client certificate and
/// its key), as every engine that speaks TLS through grantid's own
/// options names them (`rediss://`, `etcds://`, `grpcs://`).
pub(crate) const TLS_OPTIONS: &[&str] = &["tls_ca", "tls_cert", "tls_key"];

/// The backend named by a URL; its `Debug` shows the URLs as [`redact`]
/// does (no password, no key or token path).
#[derive(Clone, PartialEq, Eq)]
pub enum Target {
    /// `file:PATH` (or `file:` for [`default_file_path`]).
    File(PathBuf),
    /// `static:N` or `static:env:VAR`, optionally `?state=PATH`.
    Static {
        /// The worker value.
        worker: u32,
        /// A state file that keeps the high-water mark across restarts.
        state: Option<PathBuf>,
    },
    /// A `postgres://` or `postgresql://` URL (without grantid's options).
    Postgres(String),
    /// A `redis://` or `rediss://` URL (without grantid's options).
    Redis(String),
    /// `grpc://HOST:PORT`: a grantid server's GrantService.
    Grpc(String),
    /// `grpcs://HOST:PORT[?OPTIONS]`: the same over TLS; the address with
    /// its TLS and token options ([`GRPCS_OPTIONS`]), `?`-separated.
    Grpcs(String),
    /// A `mysql://` (or `mariadb://`) URL, as `mysql://` (without grantid's
    /// options).
    Mysql(String),
    /// `etcd://HOST:PORT[,HOST:PORT...]`: the endpoints.
    Etcd(Vec<String>),
    /// `etcds://HOST:PORT[,HOST:PORT...]`: the endpoints, over TLS.
    Etcds(Vec<String>, TlsFiles),
    /// `dynamodb://TABLE[?region=REGION&endpoint=URL]`.
    Dynamodb {
        /// The table.
        table: String,
        /// The AWS region (`None`: the SDK's, from `AWS_REGION` or the
        /// profile).
        region: Option<String>,
        /// Another endpoint than the region's (a VPC endpoint, an
        /// emulator).
        endpoint: Option<String>,
    },
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (name, url) = match self {
            Target::Postgres(u) => ("Postgres", u),
            Target::Redis(u) => ("Redis", u),
            Target::Grpc(u) => ("Grpc", u),
            Target::Grpcs(u) => ("Grpcs", u),
            Target::Mysql(u) => ("Mysql", u),
            _ => ("", &String::new()),
        };
        match self {
            Target::File(path) => f.debug_tuple("File").field(path).finish(),
            Target::Static { worker, state } => f
                .debug_struct("Static")
                .field("worker", worker)
                .field("state", state)
                .finish(),
            Target::Etcd(endpoints) => f.debug_tuple("Etcd").field(endpoints).finish(),
            Target::Etcds(endpoints, files) => f
                .debug_tuple("Etcds")
                .field(endpoints)
                .field(files)
                .finish(),
            Target::Dynamodb {
                table,
                region,
                endpoint,
            } => f
                .debug_struct("Dynamodb")
                .field("table", table)
                .field("region", region)
                .field("endpoint", endpoint)
                .finish(),
            _ => f.debug_tuple(name).field(&redact(url)).finish(),
        }
    }
}

/// The PEM files of `etcds://`'s `tls_ca`, `tls_cert` and `tls_key`
/// (`%XX` decoded); its `Debug` hides the key's path.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA certificates to trust (`None`: the system's roots).
    pub ca: Option<String>,
    /// The client certificate.
    pub cert: Option<String>,
    /// The client certificate's private key.
    pub key: Option<String>,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsFiles")
            .field("ca", &self.ca)
            .field("cert", &self.cert)
            .field("key", &self.key.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Which processes can share the authority a URL names: what it remembers
/// lives where it keeps its high-water marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Only the process that opened it: `static:N` without a state file
    /// keeps its high-water mark in that process's memory, lost when the
    /// process ends.
    Process,
    /// The processes of one host: `file:` and `static:N?state=PATH` keep
    /// theirs in a file of that host.
    Host,
    /// Every process that reaches the store, on any host.
    Fleet,
}

impl Target {
    /// Which processes can share this authority.
    pub fn scope(&self) -> Scope {
        match self {
            Target::Static { state: None, .. } => Scope::Process,
            Target::File(_) | Target::Static { state: Some(_), .. } => Scope::Host,
            Target::Postgres(_)
            | Target::Redis(_)
            | Target::Grpc(_)
            | Target::Grpcs(_)
            | Target::Mysql(_)
            | Target::Etcd(_)
            | Target::Etcds(..)
            | Target::Dynamodb { .. } => Scope::Fleet,
        }
    }
}

/// Options common to every backend, from the URL's query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `lease_grace_ms`: how long a lease outlives its grant's end.
    pub lease_grace_ms: u64,
    /// `timeout_ms`: bound on connecting, on one statement, on a lock wait.
    pub timeout: Duration,
    /// `log_max` (Redis): approximate length cap of the grant log stream;
    /// 0 keeps every entry.
    pub log_max: u64,
    /// `max_lead_ms` (every engine; `static:` with a state file): no grant ends more than this after the
    /// authority's clock; the quarantine after a state loss lasts this long
    /// plus `clock_skew_ms`.
    pub max_lead_ms: u64,
    /// `clock_skew_ms` (Redis, PostgreSQL, MySQL, etcd): added to every quarantine.
    pub clock_skew_ms: u64,
    /// `datacenter` (every backend): grant only the workers of this
    /// datacenter (docs/AUTHORITIES.md, "Regions").
    pub datacenter: Option<u32>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            lease_grace_ms: DEFAULT_LEASE_GRACE_MS,
            timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
            log_max: DEFAULT_REDIS_LOG_MAX,
            max_lead_ms: DEFAULT_MAX_LEAD_MS,
            clock_skew_ms: DEFAULT_CLOCK_SKEW_MS,
            datacenter: None,
        }
    }
}

/// A parsed authority URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorityUrl {
    /// The backend and its address.
    pub target: Target,
    /// grantid's options.
    pub options: Options,
}

pub(crate) fn invalid(url: &str, why: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        format!("authority URL {:?}: {why}", redact(url)),
    )
}

/// `url` with its secrets masked, for messages and logs: the password of
/// the user information (`postgres://app:***@host/db`) and the values of
/// the query options [`is_secret`] names.
pub fn redact(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = String::with_capacity(url.len());
    match base.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            out.push_str(scheme);
            out.push_str("://");
            match authority.rsplit_once('@') {
                Some((user_info, host)) => {
                    match user_info.split_once(':') {
                        Some((user, _)) => {
                            out.push_str(user);
                            out.push_str(":***");
                        }
                        None => out.push_str(user_info),
                    }
                    out.push('@');
                    out.push_str(host);
                }
                None => out.push_str(authority),
            }
            out.push_str(path);
        }
        None => out.push_str(base),
    }
    if let Some(q) = query {
        out.push('?');
        let pairs: Vec<String> = q
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if is_secret(k) => format!("{k}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
    }
    out
}

/// Whether the value of query option `key` is a secret, or names a file
/// that holds one: a password (`password`, `pass`, `sslpassword`), a
/// private key's path (`sslkey`, `tls_key`, `ssl-key`, any `*key`), a
/// token file (`token_file`). One rule for every engine's options.
fn is_secret(key: &str) -> bool {
    key == "pass"
        || key.ends_with("password")
        || key.ends_with("key")
        || key.ends_with("token_file")
}

/// Decodes `%XX` escapes of a path; refuses a NUL byte and a relative path
/// (processes started in different directories would use different state:
/// two authorities, duplicate IDs).
pub(crate) fn local_path(url: &str, what: &str, raw: &str) -> Result<PathBuf, Error> {
    use std::os::unix::ffi::OsStringExt;
    let bytes: Vec<u8> = percent_encoding::percent_decode_str(raw).collect();
    if bytes.contains(&0) {
        return Err(invalid(url, format!("{what} contains a NUL byte")));
    }
    let path = PathBuf::from(std::ffi::OsString::from_vec(bytes));
    if !path.is_absolute() {
        return Err(invalid(
            url,
            format!(
                "{what} {} is relative: processes started in different directories would \
                 use different state files; give an absolute path (file:/var/lib/app/grantid.json)",
                path.display()
            ),
        ));
    }
    Ok(path)
}

/// The default state file of the file authority:
/// `$XDG_STATE_HOME/grantid/authority.json`, else
/// `$HOME/.local/state/grantid/authority.json`, else one under the temporary
/// directory.
pub fn default_file_path() -> PathBuf {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local").join("state"))
        })
        .unwrap_or_else(std::env::temp_dir);
    base.join("grantid").join("authority.json")
}

/// The trailing decimal ordinal of a name such as a StatefulSet pod's
/// `web-3` (or a plain number).
pub fn trailing_ordinal(name: &str) -> Option<u32> {
    let digits: String = name
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    if digits.is_empty() {
        return None;
    }
    digits.parse().ok()
}

/// An authority URL as its engine's grammar reads it: the whole URL (for
/// messages), its scheme and what follows the scheme's `:`.
pub(crate) struct Parts<'a> {
    /// The whole URL.
    pub url: &'a str,
    /// The scheme, without its `:`.
    pub scheme: &'a str,
    /// What follows `scheme:`.
    pub rest: &'a str,
}

impl Parts<'_> {
    /// `InvalidArgument` for this URL (redacted) and `why`.
    pub fn invalid(&self, why: impl std::fmt::Display) -> Error {
        invalid(self.url, why)
    }

    /// Refuses a server URL without `//HOST` (`postgres:localhost`).
    pub fn require_host(&self) -> Result<(), Error> {
        if self.rest.starts_with("//") {
            Ok(())
        } else {
            Err(self.invalid(format!("expected {}://HOST...", self.scheme)))
        }
    }
}

pub(crate) fn split_query(rest: &str) -> (&str, &str) {
    rest.split_once('?').unwrap_or((rest, ""))
}

/// Applies grantid's options from `query`; returns the pairs listed in
/// `extra`; refuses anything else.
pub(crate) fn take_options(
    url: &str,
    scheme: &str,
    query: &str,
    options: &mut Options,
    extra: &[&str],
) -> Result<Vec<(String, String)>, Error> {
    let mut out = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if !apply_option(url, scheme, k, v, options)? {
            if extra.contains(&k) {
                out.push((k.to_owned(), v.to_owned()));
            } else {
                return Err(invalid(url, format!("unknown option {k:?}")));
            }
        }
    }
    Ok(out)
}

/// Takes grantid's options out of a server URL's query, keeping the rest for
/// the driver.
pub(crate) fn strip_options(
    url: &str,
    scheme: &str,
    options: &mut Options,
) -> Result<String, Error> {
    let (base, query) = split_query(url);
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if !apply_option(url, scheme, k, v, options)? {
            kept.push(pair);
        }
    }
    Ok(if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    })
}

/// Applies one of grantid's options ([`GRANTID_OPTIONS`]) to `options`;
/// `false` for any other key.
pub(crate) fn apply_option(
    url: &str,
    scheme: &str,
    key: &str,
    value: &str,
    options: &mut Options,
) -> Result<bool, Error> {
    let number = || {
        value
            .parse::<u64>()
            .map_err(|_| invalid(url, format!("{key}={value:?} is not a whole number")))
    };
    match key {
        "lease_grace_ms" => options.lease_grace_ms = number()?,
        "timeout_ms" => {
            let ms = number()?;
            if ms == 0 {
                return Err(invalid(url, "timeout_ms must be at least 1"));
            }
            options.timeout = Duration::from_millis(ms);
        }
        "log_max" if !matches!(scheme, "redis" | "rediss") => {
            return Err(invalid(
                url,
                "log_max applies to redis:// only (the length of its grant-log stream)",
            ));
        }
        "log_max" => options.log_max = number()?,
        "max_lead_ms" => {
            options.max_lead_ms = max_lead_ms(number()?).map_err(|e| invalid(url, e))?
        }
        "clock_skew_ms" => options.clock_skew_ms = number()?,
        "datacenter" | "datacenter_by_region" if options.datacenter.is_some() => {
            return Err(invalid(
                url,
                "the datacenter is given twice: give one datacenter= or datacenter_by_region=",
            ));
        }
        "datacenter" => {
            let n = u32::try_from(number()?)
                .map_err(|_| invalid(url, format!("datacenter={value} does not fit in 32 bits")))?;
            options.datacenter = Some(n);
        }
        "datacenter_by_region" => {
            let region = std::env::var(REGION_VARIABLE).unwrap_or_default();
            options.datacenter =
                Some(datacenter_of_region(value, &region).map_err(|e| invalid(url, e))?);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// The environment variable `datacenter_by_region` reads the region from,
/// as the AWS SDKs do.
pub const REGION_VARIABLE: &str = "AWS_REGION";

/// The datacenter `map` (`datacenter_by_region`'s value:
/// `REGION:N[,REGION:N...]`) gives `region`.
pub fn datacenter_of_region(map: &str, region: &str) -> Result<u32, String> {
    let mut regions: Vec<(&str, u32)> = Vec::new();
    for pair in map.split(',') {
        let parsed = pair
            .split_once(':')
            .filter(|(r, _)| !r.is_empty())
            .and_then(|(r, n)| Some((r, n.parse::<u32>().ok()?)));
        let Some((r, n)) = parsed else {
            return Err(format!(
                "datacenter_by_region: {pair:?} is not REGION:N (us-east-1:1,eu-west-1:2)"
            ));
        };
        if regions.iter().any(|(seen, _)| *seen == r) {
            return Err(format!("datacenter_by_region: region {r} is listed twice"));
        }
        if let Some((other, _)) = regions.iter().find(|(_, m)| *m == n) {
            return Err(format!(
                "datacenter_by_region: regions {other} and {r} are both datacenter {n}"
            ));
        }
        regions.push((r, n));
    }
    if region.is_empty() {
        return Err(format!(
            "datacenter_by_region: {REGION_VARIABLE} is not set: set it to this host's region"
        ));
    }
    regions
        .iter()
        .find(|(r, _)| *r == region)
        .map(|(_, n)| *n)
        .ok_or_else(|| {
            format!(
                "datacenter_by_region: {REGION_VARIABLE}={region} is not in the map ({}): \
                 add {region}:N",
                regions
                    .iter()
                    .map(|(r, _)| *r)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// `ms` as a `max_lead_ms`, wherever it comes from (a URL, a binding's
/// store helper): at least 1.
pub fn max_lead_ms(ms: u64) -> Result<u64, &'static str> {
    if ms == 0 {
        Err("max_lead_ms must be at least 1")
    } else {
        Ok(ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/x?sslmode=disable&password=p4ss"),
            "postgres://app:***@db:5432/x?sslmode=disable&password=***"
        );
        assert_eq!(redact("redis://:pw@h/0"), "redis://:***@h/0");
        assert_eq!(
            redact("postgres://h/x?sslcert=/c.pem&sslkey=/k.pem&sslpassword=p"),
            "postgres://h/x?sslcert=/c.pem&sslkey=***&sslpassword=***"
        );
        assert_eq!(
            redact("rediss://:pw@h/0?tls_ca=/ca.pem&tls_key=/k.pem"),
            "rediss://:***@h/0?tls_ca=/ca.pem&tls_key=***"
        );
        assert_eq!(
            redact("mysql://app:pw@h/db?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem&ssl-key=/k.pem"),
            "mysql://app:***@h/db?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem&ssl-key=***"
        );
        assert_eq!(
            redact("etcds://h:1,h:2?tls_ca=/ca.pem&tls_key=/k.pem"),
            "etcds://h:1,h:2?tls_ca=/ca.pem&tls_key=***"
        );
        assert_eq!(redact("redis://h/0"), "redis://h/0");
        assert_eq!(
            redact("grpcs://h:1?tls_key=/k.pem&token_file=/run/t&pass=x"),
            "grpcs://h:1?tls_key=***&token_file=***&pass=***"
        );
        // A key option of an engine yet to come is masked by the same rule.
        assert_eq!(
            redact("dynamodb://t?secret_access_key=abc&region=r"),
            "dynamodb://t?secret_access_key=***&region=r"
        );
    }

    #[test]
    fn ordinals() {
        assert_eq!(trailing_ordinal("web-3"), Some(3));
        assert_eq!(trailing_ordinal("12"), Some(12));
        assert_eq!(trailing_ordinal("web"), None);
        assert_eq!(trailing_ordinal("web-99999999999"), None);
    }
}

#[cfg(test)]
mod region_tests {
    use super::datacenter_of_region;

    #[test]
    fn the_region_picks_its_datacenter() {
        let map = "us-east-1:1,eu-west-1:2,ap-south-1:0";
        assert_eq!(datacenter_of_region(map, "us-east-1"), Ok(1));
        assert_eq!(datacenter_of_region(map, "ap-south-1"), Ok(0));
        let e = datacenter_of_region(map, "us-west-2").unwrap_err();
        assert!(
            e.contains("AWS_REGION=us-west-2 is not in the map (us-east-1, eu-west-1, ap-south-1)"),
            "{e}"
        );
        assert!(
            datacenter_of_region(map, "")
                .unwrap_err()
                .contains("AWS_REGION is not set")
        );
    }

    #[test]
    fn a_map_that_could_give_two_regions_one_datacenter_is_refused() {
        for (map, says) in [
            ("us-east-1:1,us-west-2:1", "both datacenter 1"),
            ("us-east-1:1,us-east-1:2", "listed twice"),
            ("us-east-1", "not REGION:N"),
            ("us-east-1:x", "not REGION:N"),
            (":1", "not REGION:N"),
            ("", "not REGION:N"),
        ] {
            let e = datacenter_of_region(map, "us-east-1").unwrap_err();
            assert!(e.contains(says), "{map}: {e}");
        }
    }
}
