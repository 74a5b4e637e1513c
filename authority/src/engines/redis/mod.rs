//! The Redis authority: one Lua script (authority/src/engines/redis/v1.lua) per grant,
//! which Redis runs atomically. Authority time is the server's `TIME`.
//!
//! Durability is Redis's: see docs/AUTHORITIES.md. With `appendonly yes`
//! and `appendfsync always` an acknowledged grant survives a server crash;
//! with anything less, or after a failover to an asynchronous replica, an
//! acknowledged grant can be forgotten and its interval granted again.
//!
//! `rediss://` is TLS through rustls (authority/src/tls.rs): the server's
//! certificate is checked against the system's roots, or `tls_ca`'s; a
//! client certificate comes from `tls_cert` and `tls_key`; redis-rs's
//! `#insecure` turns every check off, and is logged at warn.

pub(crate) mod url;

use std::sync::Arc;

use grantid::{Clock, Error, ErrorKind, Grant, GrantError, GrantRequest, GrantSource};
use redis::{Client, Connection, Script};

use crate::answer::{StoredWorker, worker_status};
use crate::forklocal::ForkLocal;
use crate::kernel::{Authority, Sessions, WorkerStatus, not_this_engines};
use crate::protocol::{self, REDIS_STORE_KEY as STORE_KEY, redis_key_prefix as key_prefix};
use crate::url::{Options, Target, TlsFiles};

/// The registry's opener of Redis URLs: `n` sessions, a connection each.
pub(crate) fn open(
    url: &str,
    target: Target,
    options: Options,
    n: usize,
) -> Result<Sessions, Error> {
    match target {
        Target::Redis(u) => Sessions::each(n, || RedisAuthority::new(&u, options.clone())),
        _ => Err(not_this_engines(url, "redis")),
    }
}

/// The script, version 1 (authority/src/engines/redis/v1.lua).
pub const LUA_V1: &str = include_str!("v1.lua");

/// The Redis authority. See the module docs.
pub struct RedisAuthority {
    client: Client,
    options: Options,
    script: Script,
    clock: Option<Arc<dyn Clock>>,
    /// Whether the server was reached: until then a certificate check that
    /// fails is `Refused`, after it `Unavailable`.
    reached: crate::tls::Reached,
    conn: ForkLocal<Option<Connection>>,
}

impl std::fmt::Debug for RedisAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The address without its TLS parameters (certificates, a key).
        let addr = match &self.client.get_connection_info().addr {
            redis::ConnectionAddr::TcpTls { host, port, .. } => format!("rediss://{host}:{port}"),
            other => other.to_string(),
        };
        f.debug_struct("RedisAuthority")
            .field("addr", &addr)
            .finish_non_exhaustive()
    }
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> GrantError {
    GrantError::Unavailable(format!("redis: {what}: {e}"))
}

impl RedisAuthority {
    /// Parses a `redis://` URL (without grantid's options). Does not
    /// connect.
    pub fn new(url: &str, options: Options) -> Result<RedisAuthority, Error> {
        let invalid = |e: &dyn std::fmt::Display| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("authority URL {:?}: {e}", crate::url::redact(url)),
            )
        };
        let (driver_url, files) = take_tls_options(url);
        let client = if url.starts_with("rediss:") {
            crate::tls::install_default_provider();
            if driver_url.ends_with("#insecure") {
                if files.ca.is_some() {
                    return Err(invalid(
                        &"tls_ca with #insecure: #insecure checks no certificate; drop one",
                    ));
                }
                log::warn!(
                    "{}: #insecure: the server's certificate is not checked (any server, or \
                     anyone in between, can answer as this Redis)",
                    crate::url::redact(url)
                );
            }
            let certificates = load_tls(&files, url)?;
            Client::build_with_tls(driver_url.as_str(), certificates)
        } else {
            Client::open(driver_url.as_str())
        }
        .map_err(|e| invalid(&e))?;
        Ok(RedisAuthority {
            client,
            options,
            script: Script::new(LUA_V1),
            clock: None,
            reached: crate::tls::Reached::default(),
            conn: ForkLocal::new(),
        })
    }

    /// Replaces the server's `TIME` by `clock`: tests and fault injection
    /// only.
    pub fn with_injected_clock(mut self, clock: Arc<dyn Clock>) -> RedisAuthority {
        self.clock = Some(clock);
        self
    }

    /// Connects and checks the server's settings.
    fn connect(&self) -> Result<Connection, GrantError> {
        let t = self.options.timeout;
        let con = self
            .client
            .get_connection_with_timeout(t)
            .map_err(|e| self.reached.connect_failed("redis", &e, &e))?;
        self.reached.mark();
        con.set_read_timeout(Some(t))
            .and_then(|_| con.set_write_timeout(Some(t)))
            .map_err(|e| unavailable("cannot set timeouts", e))?;
        let mut con = con;
        check_persistence(&mut con)?;
        Ok(con)
    }

    fn with_conn<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, GrantError>,
    ) -> Result<T, GrantError> {
        let mut slot = self.conn.get().lock();
        if slot.is_none() {
            *slot = Some(self.connect()?);
        }
        let con = slot.as_mut().expect("connected above");
        let result = f(con);
        if matches!(result, Err(GrantError::Unavailable(_))) {
            *slot = None;
        }
        result
    }

    fn now_ms(&self) -> Option<u64> {
        self.clock.as_ref().map(|c| c.now_ms())
    }

    fn now_arg(&self) -> String {
        self.now_ms().map(|ms| ms.to_string()).unwrap_or_default()
    }

    /// The script with `call`'s keys and arguments.
    fn invocation(&self, call: &protocol::ScriptCall) -> redis::ScriptInvocation<'_> {
        let mut invocation = self.script.prepare_invoke();
        for key in &call.keys {
            invocation.key(key);
        }
        for arg in &call.args {
            invocation.arg(arg);
        }
        invocation
    }
}

/// Takes grantid's TLS options ([`crate::url::TLS_OPTIONS`]) out of a
/// `rediss://` URL: the URL for redis-rs, and the files.
fn take_tls_options(url: &str) -> (String, TlsFiles) {
    let (body, fragment) = match url.split_once('#') {
        Some((b, f)) => (b, Some(f)),
        None => (url, None),
    };
    let (base, query) = body.split_once('?').unwrap_or((body, ""));
    let mut files = TlsFiles::default();
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = Some(crate::tls::decoded(v));
        match k {
            "tls_ca" => files.ca = v,
            "tls_cert" => files.cert = v,
            "tls_key" => files.key = v,
            _ => kept.push(pair),
        }
    }
    let mut out = base.to_owned();
    if !kept.is_empty() {
        out.push('?');
        out.push_str(&kept.join("&"));
    }
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    (out, files)
}

/// The files' PEM text for redis-rs, each parsed first so that a bad file
/// is refused here, by name (the key's path is never printed).
fn load_tls(files: &TlsFiles, url: &str) -> Result<redis::TlsCertificates, Error> {
    use crate::tls;
    let invalid = |why: &str| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("authority URL {:?}: {why}", crate::url::redact(url)),
        )
    };
    let root_cert = match files.ca.as_deref() {
        Some("") => return Err(invalid("tls_ca= needs the path of a PEM file")),
        Some(path) => {
            tls::roots_from_file(url, "tls_ca", path)?;
            Some(tls::read_pem(url, "tls_ca", path, false)?)
        }
        None => None,
    };
    let client_tls = tls::client_pem(
        url,
        ["tls_cert", "tls_key"],
        files.cert.as_deref(),
        files.key.as_deref(),
    )?
    .map(|(client_cert, client_key)| redis::ClientTlsConfig {
        client_cert,
        client_key,
    });
    Ok(redis::TlsCertificates {
        client_tls,
        root_cert,
    })
}

/// Reads the server's eviction, cluster and persistence settings (on every
/// new connection and at `init`). A server in cluster mode is refused
/// (below). An evicting `maxmemory-policy` is refused: an
/// evicted worker hash is a forgotten high-water mark, and the worker would
/// be granted again over a live interval. Returns a one-line report of
/// `maxmemory-policy`, `appendonly` and `appendfsync` (durability is the
/// operator's choice: docs/AUTHORITIES.md).
fn check_persistence(c: &mut Connection) -> Result<String, GrantError> {
    let info = |section: &str, c: &mut Connection| -> Result<String, GrantError> {
        redis::cmd("INFO")
            .arg(section)
            .query::<String>(c)
            .map_err(|e| unavailable(&format!("INFO {section} failed"), e))
    };
    let field = |text: &str, name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    };
    let memory = info("memory", c)?;
    let policy = field(&memory, "maxmemory_policy").ok_or_else(|| {
        GrantError::Refused("redis: INFO memory reports no maxmemory_policy".into())
    })?;
    if policy != "noeviction" {
        return Err(GrantError::Refused(format!(
            "redis: maxmemory-policy is {policy}: Redis may evict a worker's record and \
             forget its high-water mark (duplicate IDs); set maxmemory-policy noeviction"
        )));
    }
    // Redis Cluster: the script reads and writes a namespace's keys and the
    // store's record (`grantid:store`) in one call, which a cluster refuses
    // across hash slots; refused by name instead of failing every call.
    let cluster = info("cluster", c)?;
    if field(&cluster, "cluster_enabled").as_deref() == Some("1") {
        return Err(GrantError::Refused(
            "redis: the server runs in cluster mode (cluster_enabled:1), which the Redis \
             authority does not support: one grant reads and writes the namespace's keys and \
             the store's record in one script, across hash slots; use a standalone primary \
             (with replicas, and Sentinel for failover)"
                .into(),
        ));
    }
    let persistence = info("persistence", c)?;
    let aof = field(&persistence, "aof_enabled").unwrap_or_default();
    // CONFIG may be disabled (managed services): then appendfsync is unknown.
    let fsync = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendfsync")
        .query::<Vec<String>>(c)
        .ok()
        .and_then(|v| v.get(1).cloned())
        .unwrap_or_else(|| "unknown (CONFIG GET refused)".into());
    Ok(format!(
        "maxmemory-policy {policy}; appendonly {}; appendfsync {fsync}",
        if aof == "1" { "yes" } else { "no" }
    ))
}

impl GrantSource for RedisAuthority {
    fn max_lead_ms(&self) -> Option<u64> {
        Some(self.options.max_lead_ms)
    }

    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        self.reached.renewing(request);
        let call = protocol::redis_acquire(request, &self.options, self.now_ms())?;
        let reply: Vec<String> = self.with_conn(|c| {
            self.invocation(&call)
                .invoke(c)
                .map_err(|e| unavailable("script failed", e))
        })?;
        protocol::redis_grant(request, &reply)
    }

    fn release(&self, last: &Grant) {
        let call = protocol::redis_release(last, self.now_ms());
        let _ = self.with_conn(|c| {
            self.invocation(&call)
                .invoke::<i64>(c)
                .map_err(|e| unavailable("release failed", e))
        });
    }
}

impl Authority for RedisAuthority {
    fn init(&self) -> Result<String, Error> {
        let (sha, settings) = self
            .with_conn(|c| {
                let sha: String = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(LUA_V1)
                    .query(c)
                    .map_err(|e| unavailable("SCRIPT LOAD failed", e))?;
                Ok((sha, check_persistence(c)?))
            })
            .map_err(Error::from)?;
        Ok(format!("script v1 loaded as {sha}; {settings}"))
    }

    fn status(&self, namespace: Option<&str>) -> Result<Vec<WorkerStatus>, Error> {
        self.with_conn(|c| read_status(c, namespace))
            .map_err(Error::from)
    }

    fn init_new_deployment(&self) -> Result<String, Error> {
        let report = self.init()?;
        let created: i64 = self
            .with_conn(|c| {
                self.script
                    .key(STORE_KEY)
                    .arg("new_deployment")
                    .arg("")
                    .arg(self.now_arg())
                    .invoke(c)
                    .map_err(|e| unavailable("new_deployment failed", e))
            })
            .map_err(Error::from)?;
        Ok(crate::kernel::reports::declared(
            &report,
            created == 1,
            "store",
        ))
    }

    fn quarantine(&self) -> Result<Option<grantid::rule::Quarantine>, Error> {
        self.with_conn(read_quarantine).map_err(Error::from)
    }

    fn lift_quarantine(&self) -> Result<String, Error> {
        let was = self
            .with_conn(|c| {
                use redis::Commands;
                let was = read_quarantine(c)?;
                if let Some(q) = &was {
                    let reason = format!("lifted by the operator (was: {})", q.reason);
                    let () = c
                        .hset_multiple(
                            STORE_KEY,
                            &[
                                ("quarantine_until", "0"),
                                ("q_since", "0"),
                                ("reason", reason.as_str()),
                            ],
                        )
                        .map_err(|e| unavailable("cannot lift the quarantine", e))?;
                }
                Ok(was)
            })
            .map_err(Error::from)?;
        Ok(crate::kernel::lifted(
            "redis",
            was.as_ref(),
            self.now_ms().unwrap_or_else(crate::kernel::system_ms),
        ))
    }

    fn fence(&self) -> Result<String, Error> {
        let until: String = self
            .with_conn(|c| {
                self.script
                    .key(STORE_KEY)
                    .arg("fence")
                    .arg("")
                    .arg(self.options.max_lead_ms)
                    .arg(self.options.clock_skew_ms)
                    .arg(self.now_arg())
                    .invoke(c)
                    .map_err(|e| unavailable("fence failed", e))
            })
            .map_err(Error::from)?;
        Ok(crate::kernel::reports::fenced(until, &self.options))
    }
}

/// The store hash's quarantine, if the hash exists.
fn read_quarantine(c: &mut Connection) -> Result<Option<grantid::rule::Quarantine>, GrantError> {
    use redis::Commands;
    let (until, since, reason): (Option<String>, Option<String>, Option<String>) = c
        .hget(STORE_KEY, &["quarantine_until", "q_since", "reason"])
        .map_err(|e| unavailable("cannot read the store hash", e))?;
    let number = |v: Option<String>| v.and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0) as u64;
    Ok(until.is_some().then(|| grantid::rule::Quarantine {
        until_ms: number(until),
        since_ms: number(since),
        reason: reason.unwrap_or_default(),
    }))
}

fn glob_escape(s: &str) -> String {
    let mut out = String::new();
    for ch in s.chars() {
        if matches!(ch, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

fn scan(c: &mut Connection, pattern: &str) -> Result<Vec<String>, GrantError> {
    use redis::Commands;
    let mut keys: Vec<String> = c
        .scan_match::<_, String>(pattern)
        .map_err(|e| unavailable("SCAN failed", e))?
        .collect();
    keys.sort();
    keys.dedup();
    Ok(keys)
}

fn read_status(
    c: &mut Connection,
    namespace: Option<&str>,
) -> Result<Vec<WorkerStatus>, GrantError> {
    use redis::Commands;
    let pattern = match namespace {
        Some(ns) => format!("{}:layout", glob_escape(&key_prefix(ns))),
        None => "grantid:{*}:layout".to_owned(),
    };
    let mut out = Vec::new();
    for layout_key in scan(c, &pattern)? {
        let prefix = layout_key.trim_end_matches(":layout").to_owned();
        let ns = prefix
            .strip_prefix("grantid:{")
            .and_then(|s| s.strip_suffix('}'))
            .unwrap_or(&prefix)
            .to_owned();
        let number = |v: &Option<String>| v.as_deref().and_then(|v| v.parse::<i128>().ok());
        let f: Vec<Option<String>> = c
            .hget(
                &layout_key,
                &[
                    "timestamp_bits",
                    "worker_bits",
                    "sequence_bits",
                    "epoch_ms",
                    "tick_ms",
                ],
            )
            .map_err(|e| unavailable("HMGET failed", e))?;
        let layout = std::array::from_fn(|i| f.get(i).and_then(number));
        for wk in scan(c, &format!("{}:w:*", glob_escape(&prefix)))? {
            let worker = wk.rsplit(':').next().and_then(|w| w.parse::<i128>().ok());
            let [holder, expiry, hw, fencing]: [Option<String>; 4] = c
                .hget(&wk, &["holder", "lease_expiry", "high_water", "fencing"])
                .map_err(|e| unavailable("HMGET failed", e))?;
            let record = StoredWorker {
                namespace: &ns,
                layout,
                worker,
                holder: number(&holder),
                lease_expiry: number(&expiry),
                high_water: number(&hw),
                fencing: number(&fencing),
            };
            out.push(worker_status("redis", &record)?);
        }
    }
    out.sort_by(|a, b| (&a.namespace, a.worker).cmp(&(&b.namespace, b.worker)));
    Ok(out)
}
