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
//! | `etcd://HOST:PORT[,HOST:PORT...]`, `etcds://...` (TLS) | compare-and-swap transactions (`EtcdAuthority`, feature `etcd`, off by default: it needs `protoc` to build) | a fleet on etcd |
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

pub mod answer;
#[cfg(any(
    feature = "postgres",
    feature = "mysql",
    feature = "etcd",
    feature = "dynamodb",
    feature = "grpc"
))]
mod blocking;
#[cfg(any(feature = "etcd", feature = "dynamodb"))]
mod cas;
mod datacenter;
mod forklocal;
pub mod hosted;
mod kernel;
#[cfg(any(feature = "file", feature = "static"))]
mod local;
#[cfg(any(feature = "file", feature = "static"))]
mod lockfile;
#[cfg(any(feature = "postgres", feature = "redis", feature = "mysql"))]
pub mod protocol;
mod registry;
#[cfg(any(feature = "file", feature = "static"))]
mod sidecar;
#[cfg(any(
    feature = "postgres",
    feature = "redis",
    feature = "mysql",
    feature = "etcd",
    feature = "grpc"
))]
mod tls;
mod url;

mod engines;

#[cfg(feature = "dynamodb")]
pub use engines::dynamodb::DynamoAuthority;
#[cfg(feature = "etcd")]
pub use engines::etcd::EtcdAuthority;
#[cfg(feature = "file")]
pub use engines::file::FileAuthority;
#[cfg(feature = "grpc")]
pub use engines::grpc::GrpcAuthority;
#[cfg(feature = "mysql")]
pub use engines::mysql::{MYSQL_SQL_V1, MysqlAuthority};
#[cfg(feature = "postgres")]
pub use engines::postgres::{
    PgAuthority, SCHEMA_LOCK as POSTGRES_SCHEMA_LOCK, SCHEMA_VERSION as POSTGRES_SCHEMA_VERSION,
    SQL_V1, schema_checks as postgres_schema_checks, schema_script as postgres_schema_script,
};
#[cfg(feature = "redis")]
pub use engines::redis::{LUA_V1, RedisAuthority};
#[cfg(feature = "static")]
pub use engines::static_worker::StaticAuthority;
pub use kernel::{Authority, WorkerStatus};
#[cfg(any(feature = "file", feature = "static"))]
pub use local::sidecar_path;
pub use registry::{
    DEFAULT_URL, EngineName, default_url, engines, from_url, from_url_in, open, open_sessions,
    parse as parse_url, schemes,
};
pub use url::{
    AuthorityUrl, DEFAULT_CLOCK_SKEW_MS, DEFAULT_LEASE_GRACE_MS, DEFAULT_MAX_LEAD_MS,
    DEFAULT_REDIS_LOG_MAX, DEFAULT_TIMEOUT_MS, Options, Scope, Target, TlsFiles, default_file_path,
    max_lead_ms, redact, trailing_ordinal,
};
