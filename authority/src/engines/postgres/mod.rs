//! The PostgreSQL authority: one call of the PL/pgSQL function
//! `grantid.acquire` (authority/src/engines/postgres/v1.sql) per grant, in one transaction.
//!
//! Authority time is the database's `clock_timestamp()`. The connection is
//! opened on first use (and again after any error, and in a `fork()` child;
//! authority/src/blocking.rs, which also serves a caller inside a tokio
//! runtime).
//! Every call has a **client-side deadline** of `timeout_ms` covering
//! connecting, applying the schema and the statement: a server that stops
//! answering (frozen, partitioned with the socket still open) costs one
//! `timeout_ms`, then the connection is dropped and the answer is
//! `Unavailable`. `statement_timeout`, `lock_timeout` and a TCP user
//! timeout are also set, so the server gives up too. The function forces
//! `synchronous_commit = on` for its own transaction (a database or role
//! default of `off` would let an acknowledged grant vanish in a crash), and
//! refuses a server running with `fsync = off`. The schema is applied when
//! missing or older, under an advisory lock.
//!
//! TLS is rustls (authority/src/tls.rs), with libpq's `sslmode`,
//! `sslrootcert`, `sslcert` and `sslkey`; the default `prefer` encrypts when
//! the server offers TLS.

pub(crate) mod url;

use std::future::Future;
use std::sync::Arc;

use grantid::{Clock, Error, ErrorKind, Grant, GrantError, GrantRequest, GrantSource};
use tokio_postgres::Client;
use tokio_postgres::types::ToSql;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::answer::{StoredWorker, worker_status};
use crate::blocking::Blocking;
use crate::kernel::{Authority, Sessions, WorkerStatus, not_this_engines};
use crate::protocol::{self, SqlValue};
use crate::tls::Reached;
use crate::url::{Options, Target};

/// The registry's opener of PostgreSQL URLs: `n` sessions, a connection
/// each.
pub(crate) fn open(
    url: &str,
    target: Target,
    options: Options,
    n: usize,
) -> Result<Sessions, Error> {
    match target {
        Target::Postgres(u) => Sessions::each(n, || PgAuthority::new(&u, options.clone())),
        _ => Err(not_this_engines(url, "postgres")),
    }
}

/// The schema and functions (authority/src/engines/postgres/v1.sql; schema version 8).
pub const SQL_V1: &str = include_str!("v1.sql");

/// The version row that authority/src/engines/postgres/v1.sql inserts: the adapter (and
/// every binding's helper) applies the script again when the database has
/// only older versions.
pub const SCHEMA_VERSION: i32 = 8;

/// The statement that makes every application of the schema to one
/// database wait for the others (the adapter, `grantid authority init`,
/// every binding's helper), inside the applying transaction.
pub const SCHEMA_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtext('grantid schema'))";

/// The statements that tell whether a database holds schema version
/// [`SCHEMA_VERSION`] or later: it does when each, run in order, returns a
/// row. When it does not, [`schema_script`] is run. The adapter and every
/// binding's helper (Python's `PostgresSource`, Node's `postgres()`) run
/// these, and no other check.
pub fn schema_checks() -> [String; 2] {
    [
        "SELECT 1 FROM pg_catalog.pg_tables \
         WHERE schemaname = 'grantid' AND tablename = 'schema_version'"
            .to_owned(),
        format!("SELECT 1 FROM grantid.schema_version WHERE version >= {SCHEMA_VERSION} LIMIT 1"),
    ]
}

/// [`SQL_V1`] in one transaction under [`SCHEMA_LOCK`]: one batch of
/// statements without parameters.
pub fn schema_script() -> String {
    format!("BEGIN; {SCHEMA_LOCK};\n{SQL_V1}\nCOMMIT;")
}

/// One process's connection: the client, and the task that owns the
/// socket (on the bridge's runtime, which drives it only while a call runs).
struct Conn {
    client: Arc<Client>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The PostgreSQL authority. See the module docs.
pub struct PgAuthority {
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    options: Options,
    clock: Option<Arc<dyn Clock>>,
    /// Whether the server was reached: until then a certificate check that
    /// fails is `Refused`, after it `Unavailable`.
    reached: Reached,
    conn: Blocking<Conn>,
}

impl std::fmt::Debug for PgAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgAuthority")
            .field("hosts", &self.config.get_hosts())
            .field("dbname", &self.config.get_dbname())
            .finish_non_exhaustive()
    }
}

/// A driver error with its whole cause: the server's SQLSTATE, message,
/// detail and hint, or the chain of I/O causes ("error connecting to
/// server: Connection refused (os error 111)"), never a bare "db error".
fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut out = format!("{} {}: {}", db.severity(), db.code().code(), db.message());
        if let Some(d) = db.detail() {
            out.push_str(&format!(" (detail: {d})"));
        }
        if let Some(h) = db.hint() {
            out.push_str(&format!(" (hint: {h})"));
        }
        return out;
    }
    let mut out = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> GrantError {
    GrantError::Unavailable(format!("postgres: {what}: {e}"))
}

impl PgAuthority {
    /// Parses a `postgres://` URL (without grantid's options). Does not
    /// connect.
    pub fn new(url: &str, options: Options) -> Result<PgAuthority, Error> {
        let (driver_url, tls) = crate::tls::postgres(url)?;
        let mut config: tokio_postgres::Config = driver_url.parse().map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "authority URL {:?}: {}",
                    crate::url::redact(url),
                    describe(&e)
                ),
            )
        })?;
        let ms = options.timeout.as_millis();
        config
            .ssl_mode(tls.mode)
            .connect_timeout(options.timeout)
            .tcp_user_timeout(options.timeout)
            .keepalives(true)
            // The kernel takes keepalive idle times in whole seconds (0 is
            // refused with EINVAL), so a shorter timeout_ms keeps 1 s here.
            .keepalives_idle(options.timeout.max(std::time::Duration::from_secs(1)))
            .options(format!(
                "-c statement_timeout={ms} -c lock_timeout={ms} \
                 -c idle_in_transaction_session_timeout={ms} -c synchronous_commit=on"
            ));
        if config.get_application_name().is_none() {
            config.application_name("grantid");
        }
        Ok(PgAuthority {
            config,
            tls: MakeRustlsConnect::new(tls.config),
            options,
            clock: None,
            reached: Reached::default(),
            conn: Blocking::new("postgres"),
        })
    }

    /// Replaces the database clock by `clock` (passed as `p_now_ms`): for
    /// tests and fault injection only.
    pub fn with_injected_clock(mut self, clock: Arc<dyn Clock>) -> PgAuthority {
        self.clock = Some(clock);
        self
    }

    /// Connects; the socket's task runs on the bridge's runtime.
    async fn connect(
        config: &tokio_postgres::Config,
        tls: MakeRustlsConnect,
        reached: &Reached,
    ) -> Result<Conn, GrantError> {
        let (client, connection) = config
            .connect(tls)
            .await
            .map_err(|e| reached.connect_failed("postgres", &e, describe(&e)))?;
        reached.mark();
        Ok(Conn {
            client: Arc::new(client),
            task: tokio::spawn(async move {
                let _ = connection.await;
            }),
        })
    }

    async fn prepare(client: &Client) -> Result<(), GrantError> {
        for check in schema_checks() {
            let row = client
                .query_opt(&check, &[])
                .await
                .map_err(|e| unavailable("cannot read the schema's version", describe(&e)))?;
            if row.is_none() {
                return apply_schema(client).await;
            }
        }
        Ok(())
    }

    /// Runs `op` on this process's connection (connecting and preparing the
    /// schema first if needed), all within one deadline of `timeout_ms`.
    /// Past the deadline, or on any driver error, the connection is dropped
    /// (the next call reconnects) and the answer is `Unavailable`.
    fn call<T, F, Fut>(&self, what: &str, op: F) -> Result<T, GrantError>
    where
        T: Send,
        F: FnOnce(Arc<Client>) -> Fut + Send,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let config = &self.config;
        let tls = self.tls.clone();
        let reached = &self.reached;
        self.conn.call(
            self.options.timeout,
            what,
            async move |slot: &mut Option<Conn>| {
                if slot.as_ref().is_some_and(|c| c.client.is_closed()) {
                    *slot = None;
                }
                let conn = match slot {
                    Some(c) => c,
                    None => {
                        let conn = Self::connect(config, tls, reached).await?;
                        // A connection whose schema could not be prepared
                        // is dropped (its task aborted) here.
                        Self::prepare(&conn.client).await?;
                        slot.insert(conn)
                    }
                };
                op(Arc::clone(&conn.client))
                    .await
                    .map_err(|e| unavailable(what, describe(&e)))
            },
        )
    }

    fn now_ms(&self) -> Option<u64> {
        self.clock.as_ref().map(|c| c.now_ms())
    }
}

/// A store row's quarantine columns (signed 64-bit, never negative).
fn quarantine_of(until_ms: i64, since_ms: i64, reason: String) -> grantid::rule::Quarantine {
    grantid::rule::Quarantine {
        until_ms: until_ms.max(0) as u64,
        since_ms: since_ms.max(0) as u64,
        reason,
    }
}

/// A call's parameters as tokio-postgres values.
fn sql_params(params: &[SqlValue]) -> Vec<Box<dyn ToSql + Sync + Send>> {
    params
        .iter()
        .map(|p| -> Box<dyn ToSql + Sync + Send> {
            match p {
                SqlValue::Text(s) => Box::new(s.clone()),
                SqlValue::Int4(v) => Box::new(*v),
                SqlValue::Int8(v) => Box::new(*v),
                // PostgreSQL has no unsigned type and its calls send none:
                // as text, a bigint parameter refuses it at bind time.
                SqlValue::UInt8(v) => Box::new(v.to_string()),
                SqlValue::Null => Box::new(None::<i64>),
            }
        })
        .collect()
}

fn sql_refs(params: &[Box<dyn ToSql + Sync + Send>]) -> Vec<&(dyn ToSql + Sync)> {
    params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

/// Applies [`SQL_V1`] in one transaction under an advisory lock.
async fn apply_schema(client: &Client) -> Result<(), GrantError> {
    client
        .batch_execute(&schema_script())
        .await
        .map_err(|e| unavailable("cannot apply the schema", describe(&e)))
}

impl GrantSource for PgAuthority {
    fn max_lead_ms(&self) -> Option<u64> {
        Some(self.options.max_lead_ms)
    }

    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        self.reached.renewing(request);
        let call = protocol::postgres_acquire(request, &self.options, self.now_ms())?;
        let row = self.call("grantid.acquire failed", |c| async move {
            let params = sql_params(&call.params);
            c.query_one(&call.text(|i| format!("${i}")), &sql_refs(&params))
                .await
        })?;
        let number = |i: usize| {
            row.try_get::<_, Option<i64>>(i)
                .ok()
                .flatten()
                .map(i128::from)
        };
        let text = |i: usize| row.try_get::<_, Option<&str>>(i).ok().flatten();
        protocol::postgres_grant(
            request,
            text(0),
            [number(1), number(2), number(3), number(4)],
            text(5),
        )
    }

    fn release(&self, last: &Grant) {
        let call = protocol::postgres_release(last, self.now_ms());
        let _ = self.call("grantid.release failed", |c| async move {
            let params = sql_params(&call.params);
            c.execute(&call.text(|i| format!("${i}")), &sql_refs(&params))
                .await
        });
    }
}

impl Authority for PgAuthority {
    fn init(&self) -> Result<String, Error> {
        let settings = self
            .call("cannot apply the schema", |c| async move {
                c.batch_execute(&schema_script()).await?;
                c.query_one(
                    "SELECT current_setting('fsync'), current_setting('synchronous_commit'), \
                            current_setting('synchronous_standby_names')",
                    &[],
                )
                .await
            })
            .map_err(Error::from)?;
        let (fsync, sync_commit, standbys): (String, String, String) =
            (settings.get(0), settings.get(1), settings.get(2));
        let identity = match self.caveats()?.first() {
            Some(limit) => format!("identity check: {limit}"),
            None => "identity check: system identifier and WAL timeline".to_owned(),
        };
        if fsync != "on" {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "postgres: the server runs with fsync = off: no grant would survive a crash; \
                 grantid.acquire refuses to grant",
            ));
        }
        Ok(format!(
            "schema grantid version {SCHEMA_VERSION} is in place (tables namespaces, workers, \
             grant_log, store; functions acquire, release, prune_grant_log, fence); \
             fsync = {fsync}; \
             synchronous_commit = {sync_commit} for this session, forced to at least on in \
             every grant transaction; synchronous_standby_names = {standbys:?}; {identity}"
        ))
    }

    /// Without `pg_control_system()` (revoked on some managed services),
    /// the identity check compares the WAL timeline alone.
    fn caveats(&self) -> Result<Vec<String>, Error> {
        let row = self
            .call("cannot read grantid.identity()", |c| async move {
                c.query_one(
                    "SELECT system_identifier IS NULL FROM grantid.identity()",
                    &[],
                )
                .await
            })
            .map_err(Error::from)?;
        let blind: bool = row.get(0);
        Ok(if blind {
            vec![
                "the WAL timeline only: this role may not run pg_control_system(), so the \
                 database's system identifier is not compared, and a restore into another \
                 cluster on the same timeline is not detected (grant the role pg_monitor, or \
                 EXECUTE on pg_control_system(), to compare it; docs/AUTHORITIES.md, \"State loss\")"
                    .to_owned(),
            ]
        } else {
            Vec::new()
        })
    }

    fn init_new_deployment(&self) -> Result<String, Error> {
        let report = self.init()?;
        let created = self
            .call("grantid.declare_new_deployment failed", |c| async move {
                c.query_one("SELECT grantid.declare_new_deployment()", &[])
                    .await
            })
            .map_err(Error::from)?
            .get::<_, bool>(0);
        Ok(crate::kernel::reports::declared(
            &report, created, "database",
        ))
    }

    fn fence(&self) -> Result<String, Error> {
        let now_ms = self.now_ms().map(|ms| ms as i64);
        let [lead, skew] = [self.options.max_lead_ms, self.options.clock_skew_ms]
            .map(|ms| ms.min(i64::MAX as u64 / 4) as i64);
        let until: i64 = self
            .call("grantid.fence failed", |c| async move {
                c.query_one("SELECT grantid.fence($1, $2, $3)", &[&now_ms, &lead, &skew])
                    .await
            })
            .map_err(Error::from)?
            .get(0);
        Ok(crate::kernel::reports::fenced(until, &self.options))
    }

    fn quarantine(&self) -> Result<Option<grantid::rule::Quarantine>, Error> {
        let row = self
            .call("cannot read grantid.store", |c| async move {
                c.query_opt(
                    "SELECT quarantine_until_ms, quarantine_since_ms, coalesce(reason, '') \
                     FROM grantid.store",
                    &[],
                )
                .await
            })
            .map_err(Error::from)?;
        Ok(row.map(|r| quarantine_of(r.get(0), r.get(1), r.get(2))))
    }

    fn lift_quarantine(&self) -> Result<String, Error> {
        let row = self
            .call("cannot lift the quarantine", |c| async move {
                c.query_opt(
                    "WITH old AS (SELECT * FROM grantid.store FOR UPDATE) \
                     UPDATE grantid.store s SET quarantine_until_ms = 0, quarantine_since_ms = 0, \
                            reason = 'lifted by the operator (was: ' || coalesce(old.reason, '') \
                                     || ')', updated_at = clock_timestamp() \
                     FROM old \
                     RETURNING old.quarantine_until_ms, old.quarantine_since_ms, \
                               coalesce(old.reason, '')",
                    &[],
                )
                .await
            })
            .map_err(Error::from)?;
        let was = row.map(|r| quarantine_of(r.get(0), r.get(1), r.get(2)));
        Ok(crate::kernel::lifted(
            "postgres",
            was.as_ref(),
            self.now_ms().unwrap_or_else(crate::kernel::system_ms),
        ))
    }

    fn status(&self, namespace: Option<&str>) -> Result<Vec<WorkerStatus>, Error> {
        let rows = self
            .call("cannot read grantid.workers", |c| async move {
                c.query(
                    "SELECT n.namespace, n.timestamp_bits, n.worker_bits, n.sequence_bits, \
                            n.epoch_ms, n.tick_ms, w.worker, w.holder, w.lease_expiry, \
                            w.high_water, w.fencing \
                     FROM grantid.workers w JOIN grantid.namespaces n USING (namespace) \
                     WHERE $1::text IS NULL OR n.namespace = $1 \
                     ORDER BY n.namespace, w.worker",
                    &[&namespace],
                )
                .await
            })
            .map_err(Error::from)?;
        rows.iter()
            .map(|r| {
                let number = |i: usize| {
                    (r.try_get::<_, Option<i64>>(i)
                        .ok()
                        .flatten()
                        .map(i128::from))
                    .or_else(|| {
                        r.try_get::<_, Option<i32>>(i)
                            .ok()
                            .flatten()
                            .map(i128::from)
                    })
                };
                let record = StoredWorker {
                    namespace: r.try_get(0).unwrap_or_default(),
                    layout: [number(1), number(2), number(3), number(4), number(5)],
                    worker: number(6),
                    holder: number(7),
                    lease_expiry: number(8),
                    high_water: number(9),
                    fencing: number(10),
                };
                worker_status("postgres", &record).map_err(Error::from)
            })
            .collect()
    }
}
