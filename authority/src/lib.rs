//! # grantid-authority
//!
//! The reference grant authorities of grantid, each chosen by a URL:
//!
//! ```no_run
//! use grantid::{Generator, Layout};
//!
//! let source = grantid_authority::from_url("file:/var/lib/myapp/grantid.json")?;
//! let generator = Generator::builder(Layout::default(), "orders-v1", source).start()?;
//! let id = generator.next_id()?;
//! # let _ = id;
//! # Ok::<(), grantid::Error>(())
//! ```
//!
//! | URL | backend | scope |
//! |---|---|---|
//! | `file:PATH`, `file:` | a lock-guarded state file ([`FileAuthority`]) | one host, any number of processes |
//! | `postgres://...` | one PL/pgSQL function ([`PgAuthority`]) | a fleet |
//! | `mysql://USER@HOST:PORT/DB` | one stored procedure (`MysqlAuthority`, feature `mysql`, on by default) | a fleet on MySQL / MariaDB |
//! | `redis://...` | one Lua script ([`RedisAuthority`]) | a fleet (durability: see docs/AUTHORITIES.md) |
//! | `etcd://HOST:PORT[,HOST:PORT...]` | compare-and-swap transactions (`EtcdAuthority`, feature `etcd`, off by default: it needs `protoc` to build) | a fleet on etcd |
//! | `static:N`, `static:env:POD_NAME` | a fixed worker ([`StaticAuthority`]) | fleets that already own their worker numbers |
//! | `grpc://HOST:PORT` | a grantid server's GrantService (`GrpcAuthority`, feature `grpc`) | a fleet, through a few servers (docs/SERVICE.md) |
//!
//! Every backend applies the one allocation rule of docs/DESIGN.md section 2
//! (the rule [`grantid::rule::decide`] states in Rust):
//!
//! * a worker lease (holder incarnation + expiry = grant end + lease grace)
//!   for liveness, and per (namespace, worker) a durable high-water mark;
//! * `start = max(high_water, authority_now, not_before)`,
//!   `end = min(start + duration, 2^timestamp_bits)`, the high-water moved to
//!   `end` in the same atomic step, the grant recorded;
//! * a retry of the same (incarnation, request_id) gets the recorded grant;
//! * renewing a worker held by another live incarnation is
//!   [`GrantError::Lost`](grantid::GrantError::Lost); free and expired
//!   workers are chosen by one order (never-used, then usable now, then
//!   released before expired, longest first), and a first grant more than
//!   100 ms ahead of the clock is `Unavailable` (docs/AUTHORITIES.md, "Which
//!   worker");
//! * a namespace is registered with its layout; another layout, a worker
//!   outside it, an unstorable namespace or an unsafe server setting is
//!   [`GrantError::Refused`](grantid::GrantError::Refused), which fails a
//!   generator's start-up at once;
//! * the high-water mark never moves back, even when the authority's clock
//!   does.
//!
//! Properties:
//!
//! * **Thread-safe**: every source is `Send + Sync`.
//! * **Never a hang**: every call has a client-side deadline of about
//!   `timeout_ms` (default 3 s), even against a frozen server; past it the
//!   answer is `Unavailable` (docs/AUTHORITIES.md, "Deadlines").
//! * **Durable or refused**: PostgreSQL grants commit with
//!   `synchronous_commit` at least `on`; a PostgreSQL server without `fsync`
//!   and a Redis server with an evicting `maxmemory-policy` are refused, and
//!   so is a MySQL server with `innodb_flush_log_at_trx_commit` other than 1
//!   (or the binary log on with `sync_binlog` other than 1); etcd commits on
//!   a majority (docs/AUTHORITIES.md, "Durability, per engine").
//! * **Never a panic** on a bad server or URL: a malformed URL is
//!   `InvalidArgument` from [`from_url`]; an unreachable server is
//!   `Unavailable` from `acquire` (never from `from_url`).
//! * **Fork-safe**: a `fork()` child opens its own connection; it never
//!   reuses (nor closes) its parent's, and never inherits the file lock.
#![warn(missing_docs)]

use grantid::{Error, GrantSource};

pub mod answer;
#[cfg(any(
    feature = "postgres",
    feature = "mysql",
    feature = "etcd",
    feature = "grpc"
))]
mod blocking;
mod datacenter;
mod forklocal;
pub mod hosted;
#[cfg(any(feature = "file", feature = "static"))]
mod local;
#[cfg(any(feature = "file", feature = "static"))]
mod lockfile;
#[cfg(any(feature = "postgres", feature = "redis"))]
pub mod protocol;
#[cfg(any(feature = "file", feature = "static"))]
mod sidecar;
mod status;
#[cfg(any(feature = "postgres", feature = "redis"))]
mod tls;
mod url;

#[cfg(feature = "etcd")]
mod etcd;
#[cfg(feature = "file")]
mod file;
#[cfg(feature = "grpc")]
mod grpc;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod pg;
#[cfg(feature = "redis")]
mod redis_backend;
#[cfg(feature = "static")]
mod static_worker;

#[cfg(feature = "etcd")]
pub use etcd::EtcdAuthority;
#[cfg(feature = "file")]
pub use file::FileAuthority;
#[cfg(feature = "grpc")]
pub use grpc::GrpcAuthority;
#[cfg(feature = "mysql")]
pub use mysql::{MYSQL_SQL_V1, MysqlAuthority};
#[cfg(feature = "postgres")]
pub use pg::{PgAuthority, SCHEMA_VERSION as POSTGRES_SCHEMA_VERSION, SQL_V1};
#[cfg(feature = "redis")]
pub use redis_backend::{LUA_V1, RedisAuthority};
#[cfg(feature = "static")]
pub use static_worker::StaticAuthority;
pub use status::WorkerStatus;
pub use url::{
    AuthorityUrl, DEFAULT_CLOCK_SKEW_MS, DEFAULT_LEASE_GRACE_MS, DEFAULT_MAX_LEAD_MS,
    DEFAULT_REDIS_LOG_MAX, DEFAULT_TIMEOUT_MS, Options, Scope, Target, default_file_path,
    parse as parse_url, trailing_ordinal,
};

/// The default authority URL: the file authority at [`default_file_path`].
pub const DEFAULT_URL: &str = "file:";

/// The default authority URL with its path spelled out
/// (`file:/home/me/.local/state/grantid/authority.json`).
pub fn default_url() -> String {
    format!("file:{}", default_file_path().display())
}

/// Where this process keeps the sidecar of a state file (`file:PATH`,
/// `static:N?state=PATH`): the host-memory record that detects the file
/// being deleted, replaced or restored from a backup (docs/AUTHORITIES.md,
/// "State loss"). `None` when no directory for it can be named.
#[cfg(any(feature = "file", feature = "static"))]
pub fn sidecar_path(state_file: &std::path::Path) -> Option<std::path::PathBuf> {
    // The authorities name it after the canonical path (a state file reached
    // through a symbolic link is one file, with one sidecar).
    match lockfile::canonical(state_file) {
        Ok(path) => sidecar::path_of(&path),
        Err(_) => sidecar::path_of(state_file),
    }
}

/// The namespace check of the generator's builder
/// ([`grantid::check_namespace`]), for requests that reach an authority
/// directly (a host's own grant loop): a name no authority can store is a
/// permanent refusal, never a retry. (A `grpc://` server checks its own.)
#[cfg(any(
    feature = "file",
    feature = "static",
    feature = "postgres",
    feature = "redis",
    feature = "mysql",
    feature = "etcd"
))]
pub(crate) fn check_namespace(namespace: &str) -> Result<(), grantid::GrantError> {
    grantid::check_namespace(namespace)
        .map_err(|e| grantid::GrantError::Refused(e.message().to_owned()))
}

/// The checks of a request to an authority that stores ticks in signed
/// 64-bit columns (PostgreSQL, MySQL): a storable namespace, at most 62
/// timestamp bits, epoch and tick that fit.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn check_sql_request(
    request: &grantid::GrantRequest,
    engine: &str,
) -> Result<(), grantid::GrantError> {
    check_namespace(&request.namespace)?;
    let l = request.layout;
    if l.timestamp_bits() > 62 || l.epoch_ms() > i64::MAX as u64 || l.tick_ms() > i64::MAX as u64 {
        return Err(grantid::GrantError::Refused(format!(
            "the {engine} authority supports at most 62 timestamp bits"
        )));
    }
    Ok(())
}

/// A grant source that can also set itself up and report its state.
pub trait Authority: GrantSource {
    /// Creates what the backend needs (PostgreSQL schema and function,
    /// Redis script, the file's directory). Idempotent. Returns a one-line
    /// description of what was done.
    fn init(&self) -> Result<String, Error>;

    /// Every worker record (of `namespace`, or of all namespaces).
    fn status(&self, namespace: Option<&str>) -> Result<Vec<WorkerStatus>, Error>;

    /// Like [`Authority::init`], and declares the store new: if it holds no
    /// grantid state yet, it is created without the quarantine a store
    /// that may have lost state gets (the operator promises that no ID was
    /// ever issued from it). Authorities without quarantine just `init`.
    fn init_new_deployment(&self) -> Result<String, Error> {
        self.init()
    }

    /// Starts a quarantine from now: no grant until every interval that may
    /// have been granted before has ended (the operator's command after a
    /// restore or failover the authority cannot detect). Returns a one-line
    /// description.
    fn fence(&self) -> Result<String, Error> {
        Err(Error::new(
            grantid::ErrorKind::InvalidArgument,
            "this authority has no quarantine to start (see docs/AUTHORITIES.md, \"State loss\")",
        ))
    }

    /// What this store's state-loss detection cannot check as configured,
    /// one sentence each for the operator (`grantid authority init` and
    /// `status` print them): e.g. a PostgreSQL role that may not read
    /// `pg_control_system()`. The default: nothing.
    fn limits(&self) -> Result<Vec<String>, Error> {
        Ok(Vec::new())
    }
}

/// Opens the authority named by `url` (see the table above). Only parsing
/// happens here: a server that cannot be reached makes `acquire` answer
/// `Unavailable`, it does not fail this call. With `datacenter=N` the
/// backend grants only the workers of datacenter N (docs/AUTHORITIES.md,
/// "Regions").
pub fn open(url: &str) -> Result<Box<dyn Authority>, Error> {
    let parsed = url::parse(url)?;
    let datacenter = parsed.options.datacenter;
    Ok(datacenter::restrict(open_backend(url, parsed)?, datacenter))
}

fn open_backend(url: &str, parsed: AuthorityUrl) -> Result<Box<dyn Authority>, Error> {
    // Unused only in a build with no authority at all.
    #[allow(unused_variables)]
    let options = parsed.options;
    match parsed.target {
        #[cfg(feature = "file")]
        Target::File(path) => Ok(Box::new(FileAuthority::new(path, options))),
        #[cfg(feature = "static")]
        Target::Static { worker, state } => {
            Ok(Box::new(StaticAuthority::new(worker, state, options)))
        }
        #[cfg(feature = "postgres")]
        Target::Postgres(u) => Ok(Box::new(PgAuthority::new(&u, options)?)),
        #[cfg(feature = "redis")]
        Target::Redis(u) => Ok(Box::new(RedisAuthority::new(&u, options)?)),
        #[cfg(feature = "grpc")]
        Target::Grpc(addr) => Ok(Box::new(GrpcAuthority::new(&addr, options)?)),
        #[cfg(feature = "mysql")]
        Target::Mysql(u) => Ok(Box::new(MysqlAuthority::new(&u, options)?)),
        #[cfg(feature = "etcd")]
        Target::Etcd(endpoints) => Ok(Box::new(EtcdAuthority::new(endpoints, options)?)),
        #[cfg(not(feature = "etcd"))]
        Target::Etcd(_) => Err(Error::new(
            grantid::ErrorKind::InvalidArgument,
            format!(
                "authority URL {:?}: this build has no etcd authority: build with the cargo \
                 feature `etcd` (for example `cargo build -p grantid-cli --features etcd`; it \
                 needs protoc: apt-get install protobuf-compiler); see docs/reference/etcd.md, \
                 \"Setup\"",
                url::redact(url)
            ),
        )),
        #[allow(unreachable_patterns)]
        // (Only the redacted URL is shown: the parsed target holds the
        // password.)
        _ => Err(Error::new(
            grantid::ErrorKind::InvalidArgument,
            format!(
                "authority URL {:?}: this build lacks the cargo feature of its scheme \
                 (docs/reference/urls.md)",
                url::redact(url)
            ),
        )),
    }
}

/// Opens `n` independent sessions of the authority named by `url` (at
/// least one), for a caller that runs several calls at once, such as a
/// grantid server forwarding a fleet's grants: each session has its own
/// connection, so calls on different sessions do not wait for each other.
/// The store serialises what must be serialised (a row lock, a script, a
/// transaction). What a process remembers of the store is shared by its
/// sessions: etcd's revision floor (a store that went back in time is
/// noticed whichever session saw the higher revision) and the datacenter
/// wrapper's layouts (a release may come on another session than its
/// acquire). `file:` and `static:` run every call under one file lock, so
/// more sessions would only wait on it: for them one session is returned,
/// whatever `n` is.
pub fn open_sessions(url: &str, n: usize) -> Result<Vec<Box<dyn Authority>>, Error> {
    let parsed = url::parse(url)?;
    let datacenter = parsed.options.datacenter;
    let backends: Vec<Box<dyn Authority>> = match parsed.target {
        Target::File(_) | Target::Static { .. } => vec![open_backend(url, parsed)?],
        #[cfg(feature = "etcd")]
        Target::Etcd(endpoints) => {
            let first = EtcdAuthority::new(endpoints, parsed.options)?;
            let mut all: Vec<Box<dyn Authority>> = (1..n.max(1))
                .map(|_| Box::new(first.sibling()) as Box<dyn Authority>)
                .collect();
            all.insert(0, Box::new(first));
            all
        }
        // No process-side state beyond the connection.
        _ => (0..n.max(1))
            .map(|_| open_backend(url, url::parse(url)?))
            .collect::<Result<_, _>>()?,
    };
    Ok(datacenter::restrict_all(backends, datacenter))
}

/// Opens the authority named by `url` as a [`GrantSource`]: the entry point
/// every binding uses. See [`open`].
pub fn from_url(url: &str) -> Result<Box<dyn GrantSource>, Error> {
    let authority: Box<dyn GrantSource> = open(url)?;
    Ok(authority)
}
