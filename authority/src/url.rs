//! Authority URLs: `file:PATH`, `static:N`, `static:env:VAR`,
//! `postgres://...`, `mysql://...`, `redis://...`, `etcd://...`,
//! `etcds://...`, `grpc://...` and `grpcs://...`, each with optional `?key=value` options
//! (docs/reference/urls.md).

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

/// Every scheme an authority URL may have, as messages and help texts list
/// them.
pub const SCHEMES: &str =
    "file:, static:, postgres://, mysql://, redis://, etcd://, etcds://, grpc://, grpcs://";

/// grantid's own options, the keys [`apply_option`] takes (`log_max` only
/// on `redis://`).
const GRANTID_OPTIONS: &[&str] = &[
    "lease_grace_ms",
    "timeout_ms",
    "log_max",
    "max_lead_ms",
    "clock_skew_ms",
    "datacenter",
];

/// The query options the Redis driver reads (redis-rs `protocol`, and `db`,
/// `user`, `pass` for `redis+unix:`); any other key is refused.
const REDIS_DRIVER_OPTIONS: &[&str] = &["protocol", "db", "user", "pass"];

/// grantid's TLS options of `rediss://` and `etcds://` (PEM files: the CA,
/// the client certificate and its key), read by authority/src/engines/redis/mod.rs
/// and authority/src/engines/etcd/mod.rs.
pub(crate) const REDIS_TLS_OPTIONS: &[&str] = &["tls_ca", "tls_cert", "tls_key"];

/// grantid's options of `grpcs://` (PEM files: the CA, the client
/// certificate and its key; a file holding the bearer token), read by
/// authority/src/engines/grpc/mod.rs.
pub(crate) const GRPCS_OPTIONS: &[&str] = &["tls_ca", "tls_cert", "tls_key", "token_file"];

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
            | Target::Etcds(..) => Scope::Fleet,
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

fn invalid(url: &str, why: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        format!("authority URL {:?}: {why}", redact(url)),
    )
}

/// `url` with its secrets masked, for messages and logs: the password of
/// the user information (`postgres://app:***@host/db`) and the values of
/// `password=` / `pass=` query options and of the private keys' paths
/// (`sslkey=`, `tls_key=`, `ssl-key=`, `token_file=`, and `sslpassword=`, which is
/// refused).
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
                Some((k, _))
                    if matches!(
                        k,
                        "password"
                            | "pass"
                            | "sslpassword"
                            | "sslkey"
                            | "tls_key"
                            | "ssl-key"
                            | "token_file"
                    ) =>
                {
                    format!("{k}=***")
                }
                _ => pair.to_owned(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
    }
    out
}

/// Decodes `%XX` escapes of a path; refuses a NUL byte and a relative path
/// (processes started in different directories would use different state:
/// two authorities, duplicate IDs).
fn local_path(url: &str, what: &str, raw: &str) -> Result<PathBuf, Error> {
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

/// Parses an authority URL. Environment variables named by `static:env:VAR`
/// are read here.
pub fn parse(url: &str) -> Result<AuthorityUrl, Error> {
    let (scheme, rest) = url
        .split_once(':')
        .ok_or_else(|| invalid(url, format!("no scheme (expected {SCHEMES})")))?;
    let mut options = Options::default();
    let target = match scheme {
        "file" => {
            let (path, query) = split_query(rest);
            take_options(url, scheme, query, &mut options, &[])?;
            // file:PATH, file:///PATH, file://localhost/PATH (RFC 8089).
            let path = match path.strip_prefix("//") {
                Some(after) => {
                    let (host, p) = after.split_at(after.find('/').unwrap_or(after.len()));
                    if !host.is_empty() && host != "localhost" {
                        return Err(invalid(
                            url,
                            format!(
                                "file://{host}/... names the host {host:?}, not a path; \
                                 write file:/PATH or file:///PATH"
                            ),
                        ));
                    }
                    p
                }
                None => path,
            };
            if path.is_empty() {
                Target::File(default_file_path())
            } else {
                Target::File(local_path(url, "the path", path)?)
            }
        }
        "static" => {
            let (spec, query) = split_query(rest);
            let mut state = None;
            let extra = take_options(url, scheme, query, &mut options, &["state"])?;
            for (k, v) in extra {
                if k == "state" {
                    if v.is_empty() {
                        return Err(invalid(url, "state= needs a path"));
                    }
                    state = Some(local_path(url, "state=", &v)?);
                }
            }
            let worker = if let Some(var) = spec.strip_prefix("env:") {
                if var.is_empty() {
                    return Err(invalid(url, "static:env: needs a variable name"));
                }
                let value = std::env::var(var)
                    .map_err(|_| invalid(url, format!("environment variable {var} is not set")))?;
                trailing_ordinal(&value).ok_or_else(|| {
                    invalid(
                        url,
                        format!("{var}={value:?} does not end in a worker number (like web-3)"),
                    )
                })?
            } else {
                if spec.is_empty() || !spec.chars().all(|c| c.is_ascii_digit()) {
                    return Err(invalid(
                        url,
                        format!("{spec:?} is not a worker number (static:N or static:env:VAR)"),
                    ));
                }
                spec.parse()
                    .map_err(|_| invalid(url, format!("worker {spec} does not fit in 32 bits")))?
            };
            Target::Static { worker, state }
        }
        "postgres" | "postgresql" => {
            let kept = strip_options(url, scheme, &mut options)?;
            Target::Postgres(kept)
        }
        "redis" | "rediss" => {
            // redis-rs's one fragment, `#insecure`, ends the URL (after the
            // query).
            let (body, fragment) = match url.split_once('#') {
                Some((b, f)) => (b, Some(f)),
                None => (url, None),
            };
            match fragment {
                None => {}
                Some("insecure") if scheme == "rediss" => {}
                Some("insecure") => {
                    return Err(invalid(url, "#insecure applies to rediss:// only"));
                }
                Some(f) => {
                    return Err(invalid(
                        url,
                        format!("unknown fragment #{f} (rediss:// takes #insecure only)"),
                    ));
                }
            }
            let kept = strip_options(body, scheme, &mut options)?;
            // The driver ignores query keys it does not know: a misspelled
            // option (timeout_msec=) would be dropped silently.
            if let Some((_, q)) = kept.split_once('?') {
                for pair in q.split('&').filter(|p| !p.is_empty()) {
                    let k = pair.split_once('=').map_or(pair, |(k, _)| k);
                    if REDIS_TLS_OPTIONS.contains(&k) {
                        if scheme != "rediss" {
                            return Err(invalid(
                                url,
                                format!("{k} applies to rediss:// only (TLS)"),
                            ));
                        }
                        continue;
                    }
                    if !REDIS_DRIVER_OPTIONS.contains(&k) {
                        return Err(invalid(
                            url,
                            format!(
                                "unknown option {k:?} (grantid: {}, {}; the Redis driver: {})",
                                GRANTID_OPTIONS.join(", "),
                                REDIS_TLS_OPTIONS.join(", "),
                                REDIS_DRIVER_OPTIONS.join(", ")
                            ),
                        ));
                    }
                }
            }
            match fragment {
                Some(f) => Target::Redis(format!("{kept}#{f}")),
                None => Target::Redis(kept),
            }
        }
        "mysql" | "mariadb" => {
            let kept = strip_options(url, scheme, &mut options)?;
            Target::Mysql(format!("mysql:{}", &kept[scheme.len() + 1..]))
        }
        "etcd" | "etcds" => {
            let addrs = rest.strip_prefix("//").unwrap_or_default();
            let (addrs, query) = split_query(addrs);
            let mut files = TlsFiles::default();
            for (k, v) in take_options(url, scheme, query, &mut options, REDIS_TLS_OPTIONS)? {
                if scheme != "etcds" {
                    return Err(invalid(url, format!("{k} applies to etcds:// only (TLS)")));
                }
                let v = percent_encoding::percent_decode_str(&v)
                    .decode_utf8_lossy()
                    .into_owned();
                if v.is_empty() {
                    return Err(invalid(url, format!("{k}= needs the path of a PEM file")));
                }
                *match k.as_str() {
                    "tls_ca" => &mut files.ca,
                    "tls_cert" => &mut files.cert,
                    _ => &mut files.key,
                } = Some(v);
            }
            let endpoints: Vec<String> = addrs.split(',').map(str::to_owned).collect();
            for e in &endpoints {
                let ok = e.rsplit_once(':').is_some_and(|(host, port)| {
                    !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok()
                });
                if !ok {
                    return Err(invalid(
                        url,
                        format!("endpoint {e:?}: expected {scheme}://HOST:PORT[,HOST:PORT...]"),
                    ));
                }
            }
            if scheme == "etcds" {
                Target::Etcds(endpoints, files)
            } else {
                Target::Etcd(endpoints)
            }
        }
        "grpc" | "grpcs" => {
            let addr = rest.strip_prefix("//").unwrap_or_default();
            let (addr, query) = split_query(addr);
            let tls = take_options(url, scheme, query, &mut options, GRPCS_OPTIONS)?;
            if addr.is_empty() {
                return Err(invalid(url, format!("expected {scheme}://HOST:PORT")));
            }
            if scheme == "grpc" {
                if let Some((k, _)) = tls.first() {
                    return Err(invalid(
                        url,
                        format!(
                            "{k} applies to grpcs:// only (TLS; a token is never sent in the clear)"
                        ),
                    ));
                }
                Target::Grpc(addr.to_owned())
            } else {
                let kept: Vec<String> = tls.iter().map(|(k, v)| format!("{k}={v}")).collect();
                Target::Grpcs(if kept.is_empty() {
                    addr.to_owned()
                } else {
                    format!("{addr}?{}", kept.join("&"))
                })
            }
        }
        other => {
            return Err(invalid(
                url,
                format!("unknown scheme {other:?} (expected {SCHEMES})"),
            ));
        }
    };
    if matches!(
        target,
        Target::Postgres(_) | Target::Redis(_) | Target::Mysql(_)
    ) && !rest.starts_with("//")
    {
        return Err(invalid(url, format!("expected {scheme}://HOST...")));
    }
    Ok(AuthorityUrl { target, options })
}

fn split_query(rest: &str) -> (&str, &str) {
    rest.split_once('?').unwrap_or((rest, ""))
}

/// Applies grantid's options from `query`; returns the pairs listed in
/// `extra`; refuses anything else.
fn take_options(
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
fn strip_options(url: &str, scheme: &str, options: &mut Options) -> Result<String, Error> {
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
fn apply_option(
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
            let ms = number()?;
            if ms == 0 {
                return Err(invalid(url, "max_lead_ms must be at least 1"));
            }
            options.max_lead_ms = ms;
        }
        "clock_skew_ms" => options.clock_skew_ms = number()?,
        "datacenter" => {
            let n = u32::try_from(number()?)
                .map_err(|_| invalid(url, format!("datacenter={value} does not fit in 32 bits")))?;
            options.datacenter = Some(n);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// The schemes that messages and `--authority`'s help list are the
    /// schemes the parser has targets for: a new target does not compile
    /// here until it is named, and then fails until SCHEMES lists it.
    #[test]
    fn schemes_lists_every_target() {
        let examples = [
            "file:/x",
            "static:1",
            "postgres://h/db",
            "redis://h",
            "grpc://h:1",
            "grpcs://h:1",
            "mysql://u@h/db",
            "etcd://h:1",
            "etcds://h:1",
        ];
        let listed: Vec<&str> = SCHEMES.split(", ").collect();
        let mut named = Vec::new();
        for url in examples {
            let scheme = match parse(url).unwrap().target {
                Target::File(_) => "file:",
                Target::Static { .. } => "static:",
                Target::Postgres(_) => "postgres://",
                Target::Redis(_) => "redis://",
                Target::Grpc(_) => "grpc://",
                Target::Grpcs(_) => "grpcs://",
                Target::Mysql(_) => "mysql://",
                Target::Etcd(_) => "etcd://",
                Target::Etcds(..) => "etcds://",
            };
            assert!(listed.contains(&scheme), "SCHEMES lacks {scheme}");
            named.push(scheme);
        }
        named.sort_unstable();
        let mut listed = listed;
        listed.sort_unstable();
        assert_eq!(named, listed, "SCHEMES names a scheme no target has");
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
        let files = parse("etcds://h:1?tls_cert=/c.pem&tls_key=/secret/k.pem").unwrap();
        assert!(!format!("{files:?}").contains("/secret/k.pem"), "{files:?}");
        assert_eq!(redact("redis://h/0"), "redis://h/0");
        assert_eq!(
            redact("grpcs://h:1?tls_key=/k.pem&token_file=/run/t"),
            "grpcs://h:1?tls_key=***&token_file=***"
        );
        let e = parse("postgres://app:s3cret@h/db?bogus&timeout_ms=x").unwrap_err();
        assert!(!e.message().contains("s3cret"), "{e}");
    }

    #[test]
    fn ordinals() {
        assert_eq!(trailing_ordinal("web-3"), Some(3));
        assert_eq!(trailing_ordinal("12"), Some(12));
        assert_eq!(trailing_ordinal("web"), None);
        assert_eq!(trailing_ordinal("web-99999999999"), None);
    }

    #[test]
    fn every_grantid_option_is_taken_and_named() {
        for key in GRANTID_OPTIONS {
            let mut options = Options::default();
            assert_eq!(
                apply_option("redis://h/0", "redis", key, "1", &mut options).ok(),
                Some(true),
                "{key}"
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
