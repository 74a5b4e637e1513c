//! The PostgreSQL authority: one call of the PL/pgSQL function
//! `grantid.acquire` (authority/sql/v1.sql) per grant, in one transaction.
//!
//! Authority time is the database's `clock_timestamp()`. The connection is
//! opened on first use (and again after any error, and in a `fork()` child),
//! with a connect timeout, `statement_timeout`, `lock_timeout` and a TCP user
//! timeout of `timeout_ms`, so a call never hangs. The schema is applied
//! when missing, under an advisory lock.

use std::sync::Arc;

use grantid::{Clock, Error, ErrorKind, Grant, GrantError, GrantRequest, GrantSource, Layout};
use postgres::{Client, NoTls};

use crate::forklocal::ForkLocal;
use crate::url::Options;
use crate::{Authority, WorkerStatus};

/// The schema and functions, version 1 (authority/sql/v1.sql).
pub const SQL_V1: &str = include_str!("../sql/v1.sql");

const ACQUIRE: &str = "SELECT status, worker, grant_id, start_tick, end_tick, message \
     FROM grantid.acquire($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)";

/// The PostgreSQL authority. See the module docs.
pub struct PgAuthority {
    config: postgres::Config,
    options: Options,
    clock: Option<Arc<dyn Clock>>,
    conn: ForkLocal<Option<Client>>,
}

impl std::fmt::Debug for PgAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgAuthority")
            .field("hosts", &self.config.get_hosts())
            .field("dbname", &self.config.get_dbname())
            .finish_non_exhaustive()
    }
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> GrantError {
    GrantError::Unavailable(format!("postgres: {what}: {e}"))
}

impl PgAuthority {
    /// Parses a `postgres://` URL (without grantid's options). Does not
    /// connect.
    pub fn new(url: &str, options: Options) -> Result<PgAuthority, Error> {
        let mut config: postgres::Config = url.parse().map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("authority URL {:?}: {e}", crate::url::redact(url)),
            )
        })?;
        let ms = options.timeout.as_millis();
        config
            .connect_timeout(options.timeout)
            .tcp_user_timeout(options.timeout)
            .keepalives(true)
            .keepalives_idle(options.timeout)
            .options(&format!(
                "-c statement_timeout={ms} -c lock_timeout={ms} \
                 -c idle_in_transaction_session_timeout={ms}"
            ));
        if config.get_application_name().is_none() {
            config.application_name("grantid");
        }
        Ok(PgAuthority {
            config,
            options,
            clock: None,
            conn: ForkLocal::new(),
        })
    }

    /// Replaces the database clock by `clock` (passed as `p_now_ms`): for
    /// tests and fault injection only.
    pub fn with_injected_clock(mut self, clock: Arc<dyn Clock>) -> PgAuthority {
        self.clock = Some(clock);
        self
    }

    fn connect(&self) -> Result<Client, GrantError> {
        let mut client = self
            .config
            .connect(NoTls)
            .map_err(|e| unavailable("cannot connect", e))?;
        let ready = client
            .query_opt(
                "SELECT 1 FROM pg_catalog.pg_tables \
                 WHERE schemaname = 'grantid' AND tablename = 'schema_version'",
                &[],
            )
            .map_err(|e| unavailable("cannot read the catalog", e))?
            .is_some()
            && client
                .query_opt(
                    "SELECT 1 FROM grantid.schema_version WHERE version >= 1",
                    &[],
                )
                .map_err(|e| unavailable("cannot read grantid.schema_version", e))?
                .is_some();
        if !ready {
            apply_schema(&mut client).map_err(|e| unavailable("cannot apply the schema", e))?;
        }
        Ok(client)
    }

    /// Runs `f` on this process's connection, connecting first if needed;
    /// any error drops the connection (the next call reconnects).
    fn with_client<T>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<T, GrantError>,
    ) -> Result<T, GrantError> {
        let mut slot = self.conn.get().lock();
        if slot.as_ref().is_some_and(|c| c.is_closed()) {
            *slot = None;
        }
        if slot.is_none() {
            *slot = Some(self.connect()?);
        }
        let client = slot.as_mut().expect("connected above");
        let result = f(client);
        if matches!(result, Err(GrantError::Unavailable(_))) {
            *slot = None;
        }
        result
    }

    fn now_ms(&self) -> Option<i64> {
        self.clock.as_ref().map(|c| c.now_ms() as i64)
    }
}

/// Applies [`SQL_V1`] in one transaction under an advisory lock.
fn apply_schema(client: &mut Client) -> Result<(), postgres::Error> {
    let mut tx = client.transaction()?;
    tx.batch_execute("SELECT pg_advisory_xact_lock(hashtext('grantid schema'))")?;
    tx.batch_execute(SQL_V1)?;
    tx.commit()
}

fn layout_params(l: &Layout) -> [i64; 5] {
    [
        i64::from(l.timestamp_bits()),
        i64::from(l.worker_bits()),
        i64::from(l.sequence_bits()),
        l.epoch_ms() as i64,
        l.tick_ms() as i64,
    ]
}

impl GrantSource for PgAuthority {
    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        let l = request.layout;
        if l.timestamp_bits() > 62
            || l.epoch_ms() > i64::MAX as u64
            || l.tick_ms() > i64::MAX as u64
        {
            return Err(GrantError::Lost(
                "the PostgreSQL authority supports at most 62 timestamp bits".into(),
            ));
        }
        let [_, _, _, epoch_ms, tick_ms] = layout_params(&l);
        let grace = (self.options.lease_grace_ms.div_ceil(l.tick_ms())).min(i64::MAX as u64 / 2);
        let duration = request.duration.clamp(1, l.timestamp_limit()) as i64;
        let not_before = request.not_before.min(l.timestamp_limit()) as i64;
        let worker = request.worker.map(i64::from);
        let now_ms = self.now_ms();
        let row = self.with_client(|c| {
            c.query_one(
                ACQUIRE,
                &[
                    &request.namespace,
                    &(request.incarnation as i64),
                    &(request.request_id as i64),
                    &worker,
                    &not_before,
                    &duration,
                    &i32::from(l.timestamp_bits()),
                    &i32::from(l.worker_bits()),
                    &i32::from(l.sequence_bits()),
                    &epoch_ms,
                    &tick_ms,
                    &(grace as i64),
                    &now_ms,
                ],
            )
            .map_err(|e| unavailable("grantid.acquire failed", e))
        })?;
        let status: String = row.get(0);
        if status != "granted" {
            let message: Option<String> = row.get(5);
            return Err(GrantError::Lost(message.unwrap_or(status)));
        }
        let field = |i: usize| -> Result<i64, GrantError> {
            row.try_get::<_, i64>(i)
                .map_err(|e| unavailable("malformed answer", e))
        };
        Ok(Grant {
            namespace: request.namespace.clone(),
            worker: u32::try_from(field(1)?).map_err(|e| unavailable("malformed worker", e))?,
            incarnation: request.incarnation,
            grant_id: field(2)? as u64,
            start: field(3)? as u64,
            end: field(4)? as u64,
        })
    }

    fn release(&self, last: &Grant) {
        let now_ms = self.now_ms();
        let _ = self.with_client(|c| {
            c.execute(
                "SELECT grantid.release($1, $2, $3, $4)",
                &[
                    &last.namespace,
                    &i64::from(last.worker),
                    &(last.incarnation as i64),
                    &now_ms,
                ],
            )
            .map_err(|e| unavailable("grantid.release failed", e))
        });
    }
}

impl Authority for PgAuthority {
    fn init(&self) -> Result<String, Error> {
        self.with_client(|c| {
            apply_schema(c).map_err(|e| unavailable("cannot apply the schema", e))
        })
        .map_err(Error::from)?;
        Ok(
            "schema grantid version 1 is in place (tables namespaces, workers, grant_log; \
            functions acquire, release, prune_grant_log)"
                .into(),
        )
    }

    fn status(&self, namespace: Option<&str>) -> Result<Vec<WorkerStatus>, Error> {
        let rows = self
            .with_client(|c| {
                c.query(
                    "SELECT n.namespace, n.timestamp_bits, n.worker_bits, n.sequence_bits, \
                            n.epoch_ms, n.tick_ms, w.worker, w.holder, w.lease_expiry, \
                            w.high_water, w.fencing \
                     FROM grantid.workers w JOIN grantid.namespaces n USING (namespace) \
                     WHERE $1::text IS NULL OR n.namespace = $1 \
                     ORDER BY n.namespace, w.worker",
                    &[&namespace],
                )
                .map_err(|e| unavailable("cannot read grantid.workers", e))
            })
            .map_err(Error::from)?;
        rows.iter()
            .map(|r| {
                let layout = Layout::with_all(
                    r.get::<_, i32>(1) as u8,
                    r.get::<_, i32>(2) as u8,
                    r.get::<_, i32>(3) as u8,
                    r.get::<_, i64>(4) as u64,
                    r.get::<_, i64>(5) as u64,
                )?;
                Ok(WorkerStatus {
                    namespace: r.get(0),
                    layout,
                    worker: r.get::<_, i64>(6) as u32,
                    holder: r.get::<_, Option<i64>>(7).map(|h| h as u64),
                    lease_expiry: r.get::<_, i64>(8) as u64,
                    high_water: r.get::<_, i64>(9) as u64,
                    fencing: r.get::<_, i64>(10) as u64,
                })
            })
            .collect()
    }
}
