//! The MySQL / MariaDB authority, `mysql://USER[:PASSWORD]@HOST:PORT/DATABASE`:
//! one call of the stored procedure `grantid_acquire`
//! (authority/src/engines/mysql/v1.sql) per grant, one InnoDB transaction.
//!
//! Authority time is the server's UTC clock. The connection (mysql_async,
//! TLS through rustls with `ssl-mode`, `ssl-ca`, `ssl-cert`, `ssl-key`:
//! [`SslMode`]) is opened on first use, again after any error, and in a
//! `fork()` child. Every call has a **client-side deadline** of `timeout_ms` covering
//! connecting, applying the schema and the statement (a frozen server costs
//! one `timeout_ms`, then the connection is dropped and the answer is
//! `Unavailable`); the session's `innodb_lock_wait_timeout` is set to the
//! same bound (in whole seconds) so the server gives up too. The procedure
//! refuses to grant on a server that may lose an acknowledged commit
//! (`innodb_flush_log_at_trx_commit` other than 1; the binary log on with
//! `sync_binlog` other than 1), refuses a multi-primary server (a Galera
//! node, a Group Replication group in multi-primary mode), and quarantines a
//! database whose grantid state is missing or whose server identity
//! (`server_id`, and MySQL's `server_uuid`) changed
//! (docs/reference/mysql.md).

pub(crate) mod url;

use std::sync::Arc;

use grantid::{Clock, Error, ErrorKind, Grant, GrantError, GrantRequest, GrantSource};
use mysql_async::prelude::Queryable;
use mysql_async::{ClientIdentity, Conn, DriverError, Opts, OptsBuilder, Row, SslOpts, Value};

use crate::answer::{StoredWorker, worker_status};
use crate::blocking::{Blocking, Work};
use crate::kernel::{Authority, Sessions, WorkerStatus, not_this_engines};
use crate::protocol::{self, SqlValue};
use crate::tls::Reached;
use crate::url::{Options, Target};

/// The registry's opener of MySQL URLs: `n` sessions, a connection each,
/// which share whether the server was once connected to (a certificate
/// failure is `Refused` only before).
pub(crate) fn open(
    url: &str,
    target: Target,
    options: Options,
    n: usize,
) -> Result<Sessions, Error> {
    match target {
        Target::Mysql(u) => Ok(Sessions::siblings(
            MysqlAuthority::new(&u, options)?,
            n,
            MysqlAuthority::sibling,
        )),
        _ => Err(not_this_engines(url, "mysql")),
    }
}

/// The tables and procedures (authority/src/engines/mysql/v1.sql; schema version
/// [`SCHEMA_VERSION`]).
pub const MYSQL_SQL_V1: &str = include_str!("v1.sql");

/// The version row authority/src/engines/mysql/v1.sql inserts: the adapter applies
/// the script when the database lacks it.
const SCHEMA_VERSION: i32 = 5;

/// The MySQL / MariaDB authority. See the module docs.
pub struct MysqlAuthority {
    opts: Opts,
    /// `ssl-mode=PREFERRED`: the options without TLS, for a server that
    /// does not offer it.
    plain: Option<Opts>,
    mode: SslMode,
    /// Whether the server was reached: until then a certificate or
    /// TLS-setting mismatch is `Refused`, after it `Unavailable`.
    reached: Reached,
    options: Options,
    clock: Option<Arc<dyn Clock>>,
    conn: Blocking<Conn>,
}

/// `ssl-mode`, with MySQL's meanings (`VERIFY_CA` is refused: the
/// driver's rustls verifier cannot check a chain without its host name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SslMode {
    /// No TLS.
    Disabled,
    /// TLS when the server offers it, plain text when it does not; no
    /// certificate check (the default without `ssl-ca`).
    Preferred,
    /// TLS or no connection; no certificate check.
    Required,
    /// TLS, the chain checked against `ssl-ca` and the host name against
    /// the certificate (the default with `ssl-ca`).
    VerifyIdentity,
}

impl std::fmt::Display for SslMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SslMode::Disabled => "DISABLED",
            SslMode::Preferred => "PREFERRED",
            SslMode::Required => "REQUIRED",
            SslMode::VerifyIdentity => "VERIFY_IDENTITY",
        })
    }
}

/// The `ssl-mode` values grantid takes.
const SSL_MODES: &str = "DISABLED, PREFERRED, REQUIRED, VERIFY_IDENTITY";

/// The TLS options of a `mysql://` URL, spelled as MySQL's clients spell
/// them (`mysql --ssl-mode`, MySQL Shell's `?ssl-mode=`).
const TLS_OPTIONS: [&str; 4] = ["ssl-mode", "ssl-ca", "ssl-cert", "ssl-key"];

/// The driver's own TLS keys, refused for grantid's (which say what they
/// check in MySQL's words).
const DRIVER_TLS_KEYS: &[&str] = &[
    "require_ssl",
    "verify_ca",
    "verify_identity",
    "built_in_roots",
];

/// Takes [`TLS_OPTIONS`] out of a `mysql://` URL; returns the URL without
/// them, the mode, and the driver's TLS settings (`None`: no TLS). The PEM
/// files are read here.
fn take_tls(url: &str) -> Result<(String, SslMode, Option<SslOpts>), Error> {
    let invalid = |why: String| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("authority URL {:?}: {why}", crate::url::redact(url)),
        )
    };
    let (rest, [mode, ca, cert, key]) = crate::tls::take_options(url, TLS_OPTIONS)?;
    let query = rest.split_once('?').map_or("", |(_, q)| q);
    for k in query
        .split('&')
        .map(|pair| pair.split_once('=').map_or(pair, |(k, _)| k))
    {
        if TLS_OPTIONS.contains(&k.replace('_', "-").as_str()) {
            return Err(invalid(format!(
                "{k}: write {} (MySQL's spelling)",
                k.replace('_', "-")
            )));
        }
        if DRIVER_TLS_KEYS.contains(&k) {
            return Err(invalid(format!(
                "{k} is the driver's TLS switch: write ssl-mode (one of {SSL_MODES}) and ssl-ca \
                 instead"
            )));
        }
    }
    let mode = match mode.as_deref().map(str::to_ascii_uppercase).as_deref() {
        None if ca.is_some() => SslMode::VerifyIdentity,
        None | Some("PREFERRED") => SslMode::Preferred,
        Some("DISABLED") => SslMode::Disabled,
        Some("REQUIRED") => SslMode::Required,
        Some("VERIFY_IDENTITY") => SslMode::VerifyIdentity,
        Some("VERIFY_CA") => {
            return Err(invalid(format!(
                "ssl-mode=VERIFY_CA is not supported: the MySQL driver cannot check the \
                 certificate's chain without its host name; write ssl-mode=VERIFY_IDENTITY \
                 and connect by a name the server's certificate holds (or one of {SSL_MODES})"
            )));
        }
        Some(other) => {
            return Err(invalid(format!(
                "ssl-mode={other:?} is not one of {SSL_MODES}"
            )));
        }
    };
    if mode == SslMode::Disabled {
        if let Some(k) = [(&ca, "ssl-ca"), (&cert, "ssl-cert"), (&key, "ssl-key")]
            .iter()
            .find_map(|(v, k)| v.is_some().then_some(*k))
        {
            return Err(invalid(format!(
                "{k} with ssl-mode=DISABLED: DISABLED uses no TLS; drop one"
            )));
        }
        return Ok((rest, mode, None));
    }
    let mut ssl = SslOpts::default();
    match (&ca, mode) {
        (Some(path), SslMode::VerifyIdentity) => {
            crate::tls::roots_from_file(url, "ssl-ca", path)?;
            let pem = crate::tls::read_pem(url, "ssl-ca", path, false)?;
            // Only ssl-ca's CA, not the driver's built-in roots.
            ssl = ssl
                .with_root_certs(vec![pem.into()])
                .with_disable_built_in_roots(true);
        }
        (None, SslMode::VerifyIdentity) => {
            return Err(invalid(
                "ssl-mode=VERIFY_IDENTITY needs the CA that signed the server's certificate: \
                 ssl-ca=PATH (a PEM file; /etc/ssl/certs/ca-certificates.crt for a public CA)"
                    .into(),
            ));
        }
        (Some(_), _) => {
            return Err(invalid(format!(
                "ssl-ca with ssl-mode={mode}: {mode} checks no certificate; write \
                 ssl-mode=VERIFY_IDENTITY to check it against ssl-ca"
            )));
        }
        // (The driver still builds its verifier from its built-in roots,
        // and uses only its check of the handshake's signatures.)
        (None, _) => ssl = ssl.with_danger_accept_invalid_certs(true),
    }
    if let Some((c, k)) = crate::tls::client_pem(
        url,
        ["ssl-cert", "ssl-key"],
        cert.as_deref(),
        key.as_deref(),
    )? {
        ssl = ssl.with_client_identity(Some(ClientIdentity::new(c.into(), k.into())));
    }
    // The driver builds its rustls configuration with the process's
    // default provider.
    crate::tls::install_default_provider();
    Ok((rest, mode, Some(ssl)))
}

/// MySQL's refusal of a connection without TLS
/// (`require_secure_transport = ON`, ER_SECURE_TRANSPORT_REQUIRED).
const SECURE_TRANSPORT_REQUIRED: u16 = 3159;

/// ER_ACCESS_DENIED_ERROR: also MariaDB's answer to a connection without
/// TLS when it requires TLS.
const ACCESS_DENIED: u16 = 1045;

/// A failed connection as an answer: a certificate check, a server without
/// TLS for a mode that needs it, or MySQL requiring TLS from
/// `ssl-mode=DISABLED` is a setting to change ([`Reached`]); anything else
/// is `Unavailable`.
fn connect_error(e: &mysql_async::Error, mode: SslMode, reached: &Reached) -> GrantError {
    use mysql_async::Error::{Driver, Server};
    let setting = crate::tls::certificate_failure(e)
        .map(|why| format!("TLS: {why} (ssl-mode={mode})"))
        .or_else(|| match e {
            Driver(DriverError::NoClientSslFlagFromServer) => Some(format!(
                "ssl-mode={mode} needs TLS and the server does not offer it (set its ssl_cert \
                 and ssl_key, or write ssl-mode=PREFERRED)"
            )),
            Server(s) if s.code == SECURE_TRANSPORT_REQUIRED => Some(format!(
                "{e} (the server requires TLS: write ssl-mode=VERIFY_IDENTITY with ssl-ca, or \
                 REQUIRED)"
            )),
            _ => None,
        });
    match (setting, e) {
        (Some(why), _) => reached.setting_failed("mysql", why),
        // A wrong password, or MariaDB requiring TLS: retried, as any
        // refusal of a user may be put right on the server.
        (None, Server(s)) if s.code == ACCESS_DENIED && mode == SslMode::Disabled => unavailable(
            "cannot connect",
            format!(
                "{e} (with ssl-mode=DISABLED: MariaDB answers so when it requires TLS, \
                 require_secure_transport = ON; then write ssl-mode=VERIFY_IDENTITY with ssl-ca, \
                 or REQUIRED)"
            ),
        ),
        (None, _) => unavailable("cannot connect", e),
    }
}

/// Connects with `opts`; for `ssl-mode=PREFERRED`, again with `plain` when
/// the server does not offer TLS.
async fn connect(opts: Opts, plain: Option<Opts>) -> Result<Conn, mysql_async::Error> {
    match (Conn::new(opts).await, plain) {
        (Err(mysql_async::Error::Driver(DriverError::NoClientSslFlagFromServer)), Some(plain)) => {
            Conn::new(plain).await
        }
        (other, _) => other,
    }
}

impl std::fmt::Debug for MysqlAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlAuthority")
            .field("host", &self.opts.ip_or_hostname())
            .field("port", &self.opts.tcp_port())
            .field("db", &self.opts.db_name())
            .finish_non_exhaustive()
    }
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> GrantError {
    GrantError::Unavailable(format!("mysql: {what}: {e}"))
}

/// The statements of a script for the command-line client: `DELIMITER X`
/// lines switch the statement terminator; `--` comment lines are left out.
fn statements(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut delimiter = ";".to_owned();
    let mut current = String::new();
    for line in script.lines() {
        let trimmed = line.trim();
        if let Some(d) = trimmed.strip_prefix("DELIMITER ") {
            delimiter = d.trim().to_owned();
            continue;
        }
        if trimmed.starts_with("--") || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        current.push_str(line);
        current.push('\n');
        if trimmed.ends_with(delimiter.as_str()) {
            let text = current.trim_end();
            let text = text[..text.len() - delimiter.len()].trim();
            if !text.is_empty() {
                out.push(text.to_owned());
            }
            current.clear();
        }
    }
    out
}

/// Applies [`MYSQL_SQL_V1`], one statement at a time, under a named lock of
/// the server (so that concurrent first users do not race on DROP / CREATE
/// PROCEDURE).
async fn apply_schema(c: &mut Conn, lock_secs: u64) -> Result<(), GrantError> {
    let locked: Option<Option<i64>> = c
        .query_first(format!(
            "SELECT GET_LOCK(CONCAT('grantid schema ', DATABASE()), {lock_secs})"
        ))
        .await
        .map_err(|e| unavailable("cannot take the schema lock", e))?;
    if locked.flatten() != Some(1) {
        return Err(unavailable(
            "cannot take the schema lock",
            "GET_LOCK timed out (another client is applying the schema)",
        ));
    }
    let mut result = Ok(());
    for stmt in statements(MYSQL_SQL_V1) {
        if let Err(e) = c.query_drop(stmt).await {
            result = Err(unavailable("cannot apply the schema", e));
            break;
        }
    }
    let _ = c
        .query_drop("DO RELEASE_LOCK(CONCAT('grantid schema ', DATABASE()))")
        .await;
    result
}

/// The refusal of a Galera node: the text of `grantid_multi_primary` in
/// the script, which answers it at every grant.
const GALERA_REFUSED: &str = concat!(
    "the server is a Galera cluster node (wsrep_on = ON): grantid needs a single primary (each ",
    "node has its own identity, and a row lock on one node does not hold on the others); point ",
    "grantid at a server with wsrep_on = OFF (a single primary, with asynchronous replicas if ",
    "you like), or use another authority (PostgreSQL, etcd)"
);

/// The refusal of a Group Replication member in multi-primary mode: the
/// text of `grantid_multi_primary` in the script.
const GROUP_REFUSED: &str = concat!(
    "the server is a member of a MySQL Group Replication group in multi-primary mode ",
    "(group_replication_single_primary_mode = OFF): grantid needs a single primary (each member ",
    "has its own identity, and a row lock on one member does not hold on the others); switch the ",
    "group to single-primary mode (SELECT group_replication_switch_to_single_primary_mode()), or ",
    "use another authority (PostgreSQL, etcd)"
);

/// A global boolean or integer system variable (`ON` is 1, `OFF` 0), or
/// `None` when the server has no such variable (ER_UNKNOWN_SYSTEM_VARIABLE:
/// a build without wsrep, no group replication plugin) or it is NULL or
/// not a number. Any other error is returned.
async fn global_variable(c: &mut Conn, name: &str) -> Result<Option<i64>, mysql_async::Error> {
    let row = match c
        .query_first::<Row, _>(format!("SELECT @@GLOBAL.{name}"))
        .await
    {
        Ok(row) => row,
        Err(mysql_async::Error::Server(e)) if e.code == 1193 => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(match row.as_ref().and_then(|r| r.as_ref(0)) {
        Some(Value::Int(n)) => Some(*n),
        Some(Value::UInt(n)) => i64::try_from(*n).ok(),
        Some(Value::Bytes(b)) => match std::str::from_utf8(b).unwrap_or_default() {
            v if v.eq_ignore_ascii_case("ON") => Some(1),
            v if v.eq_ignore_ascii_case("OFF") => Some(0),
            v => v.parse().ok(),
        },
        _ => None,
    })
}

/// The multi-primary setups grantid refuses, read without the schema, as
/// `grantid_multi_primary` reads them at every grant: a Galera node
/// (`wsrep_on = ON`), or a member of a Group Replication group in
/// multi-primary mode that is not OFFLINE. Checked before the schema is
/// applied, so such a server gets the refusal, not grantid's tables.
async fn multi_primary(c: &mut Conn) -> Result<Option<&'static str>, mysql_async::Error> {
    if global_variable(c, "wsrep_on").await? == Some(1) {
        return Ok(Some(GALERA_REFUSED));
    }
    if global_variable(c, "group_replication_single_primary_mode").await? == Some(0) {
        let offline: Option<i64> = c
            .query_first(
                "SELECT COUNT(*) FROM performance_schema.replication_group_members \
                 WHERE MEMBER_ID = @@server_uuid AND MEMBER_STATE = 'OFFLINE'",
            )
            .await?;
        if offline.unwrap_or(0) == 0 {
            return Ok(Some(GROUP_REFUSED));
        }
    }
    Ok(None)
}

/// The quarantine columns of `grantid_store`, if it has its row.
async fn read_quarantine(c: &mut Conn) -> Result<Option<grantid::rule::Quarantine>, GrantError> {
    let row: Option<(i64, i64, Option<String>)> = c
        .query_first("SELECT quarantine_until_ms, quarantine_since_ms, reason FROM grantid_store")
        .await
        .map_err(|e| unavailable("cannot read grantid_store", e))?;
    Ok(row.map(|(until, since, reason)| grantid::rule::Quarantine {
        until_ms: until.max(0) as u64,
        since_ms: since.max(0) as u64,
        reason: reason.unwrap_or_default(),
    }))
}

/// Applies the schema when `grantid_schema_version` lacks our version (a
/// multi-primary server is refused first).
async fn prepare(c: &mut Conn, lock_secs: u64) -> Result<(), GrantError> {
    let ready = match c
        .query_first::<Option<i32>, _>("SELECT MAX(version) FROM grantid_schema_version")
        .await
    {
        Ok(v) => v.flatten().is_some_and(|v| v >= SCHEMA_VERSION),
        // ER_NO_SUCH_TABLE: a database never used by grantid.
        Err(mysql_async::Error::Server(e)) if e.code == 1146 => false,
        Err(e) => return Err(unavailable("cannot read grantid_schema_version", e)),
    };
    if !ready {
        let refused = multi_primary(c)
            .await
            .map_err(|e| unavailable("cannot read the server's settings", e))?;
        if let Some(why) = refused {
            return Err(GrantError::Refused(format!("mysql: {why}")));
        }
        apply_schema(c, lock_secs).await?;
    }
    Ok(())
}

impl MysqlAuthority {
    /// Parses a `mysql://` URL (without grantid's options; the driver
    /// refuses keys it does not know). Does not connect.
    pub fn new(url: &str, options: Options) -> Result<MysqlAuthority, Error> {
        let invalid = |why: String| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("authority URL {:?}: {why}", crate::url::redact(url)),
            )
        };
        let (driver_url, mode, ssl) = take_tls(url)?;
        let opts = Opts::from_url(&driver_url).map_err(|e| invalid(e.to_string()))?;
        if opts.db_name().is_none_or(str::is_empty) {
            return Err(invalid(
                "no database: expected mysql://USER@HOST:PORT/DATABASE".into(),
            ));
        }
        let lock_wait = options.timeout.as_millis().div_ceil(1000).max(1);
        let plain: Opts = OptsBuilder::from_opts(opts)
            .tcp_nodelay(true)
            .prefer_socket(false)
            .init(vec![format!(
                "SET SESSION innodb_lock_wait_timeout = {lock_wait}"
            )])
            .into();
        let opts: Opts = OptsBuilder::from_opts(plain.clone()).ssl_opts(ssl).into();
        Ok(MysqlAuthority {
            opts,
            plain: (mode == SslMode::Preferred).then_some(plain),
            mode,
            reached: Reached::default(),
            options,
            clock: None,
            conn: Blocking::new("mysql"),
        })
    }

    /// Another session on the same server, with a connection of its own:
    /// what the process knows of the server (that it once connected, so a
    /// certificate failure is then `Unavailable`, not `Refused`) is shared,
    /// as `open_sessions` promises.
    pub(crate) fn sibling(&self) -> MysqlAuthority {
        MysqlAuthority {
            opts: self.opts.clone(),
            plain: self.plain.clone(),
            mode: self.mode,
            reached: self.reached.clone(),
            options: self.options.clone(),
            clock: self.clock.clone(),
            conn: Blocking::new("mysql"),
        }
    }

    /// Replaces the server's clock by `clock` (passed as `p_now_ms`): for
    /// tests and fault injection only.
    pub fn with_injected_clock(mut self, clock: Arc<dyn Clock>) -> MysqlAuthority {
        self.clock = Some(clock);
        self
    }

    fn now_ms(&self) -> Option<i64> {
        self.clock.as_ref().map(|c| c.now_ms() as i64)
    }

    fn lock_secs(&self) -> u64 {
        self.options.timeout.as_millis().div_ceil(1000).max(1) as u64
    }

    /// Runs `op` on this process's connection (connecting and preparing the
    /// schema first if needed), within one deadline of `timeout_ms`.
    fn call<T: Send + 'static>(
        &self,
        what: &str,
        op: impl for<'a> FnOnce(&'a mut Conn) -> Work<'a, T> + Send + 'static,
    ) -> Result<T, GrantError> {
        let opts = self.opts.clone();
        let plain = self.plain.clone();
        let (mode, reached) = (self.mode, self.reached.clone());
        let lock_secs = self.lock_secs();
        self.conn.call(
            self.options.timeout,
            what,
            async move |slot: &mut Option<Conn>| {
                let conn = match slot {
                    Some(c) => c,
                    None => {
                        let mut c = connect(opts, plain)
                            .await
                            .map_err(|e| connect_error(&e, mode, &reached))?;
                        reached.mark();
                        prepare(&mut c, lock_secs).await?;
                        slot.insert(c)
                    }
                };
                op(conn).await
            },
        )
    }

    /// The server's durability settings, checked: a server that may lose an
    /// acknowledged commit is an error. Returns a one-line report.
    async fn settings(c: &mut Conn) -> Result<Result<String, String>, mysql_async::Error> {
        let row: Option<(String, i64, i64, i64, String)> = c
            .query_first(
                "SELECT @@version, @@innodb_flush_log_at_trx_commit, @@log_bin, @@sync_binlog, \
                 @@binlog_format",
            )
            .await?;
        c.query_drop("CALL grantid_identity(@grantid_identity)")
            .await?;
        let identity: Option<Option<String>> = c.query_first("SELECT @grantid_identity").await?;
        let Some((version, flush, log_bin, sync_binlog, format)) = row else {
            return Ok(Err("the server did not report its settings".into()));
        };
        if flush != 1 {
            return Ok(Err(format!(
                "innodb_flush_log_at_trx_commit = {flush}: an acknowledged grant could vanish in \
                 a crash; grantid_acquire refuses to grant (set it to 1)"
            )));
        }
        if log_bin == 1 && sync_binlog != 1 {
            return Ok(Err(format!(
                "the binary log is on with sync_binlog = {sync_binlog}: an acknowledged grant \
                 could vanish in a crash of the host; grantid_acquire refuses to grant (set it \
                 to 1)"
            )));
        }
        Ok(Ok(format!(
            "server {version}; innodb_flush_log_at_trx_commit = {flush}; log_bin = {}; \
             sync_binlog = {sync_binlog}; binlog_format = {format}; identity {:?}",
            if log_bin == 1 { "ON" } else { "OFF" },
            identity.flatten().unwrap_or_default()
        )))
    }
}

impl GrantSource for MysqlAuthority {
    fn max_lead_ms(&self) -> Option<u64> {
        Some(self.options.max_lead_ms)
    }

    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        self.reached.renewing(request);
        let call =
            protocol::mysql_acquire(request, &self.options, self.now_ms().map(|ms| ms as u64))?;
        let (text, params) = (call.procedure_text(), driver_params(&call.params));
        let row = self.call("grantid_acquire failed", |c| {
            Box::pin(async move {
                c.exec_first::<Row, _, _>(text, params)
                    .await
                    .map_err(|e| unavailable("grantid_acquire failed", e))
            })
        })?;
        let row = row.as_ref();
        let text = |i: usize| row.and_then(|r| row_text(r, i));
        let number = |i: usize| row.and_then(|r| row_number(r, i));
        protocol::mysql_grant(
            request,
            text(0).as_deref(),
            [number(1), number(2), number(3), number(4)],
            text(5).as_deref(),
        )
    }

    fn release(&self, last: &Grant) {
        let call = protocol::mysql_release(last, self.now_ms().map(|ms| ms as u64));
        let (text, params) = (call.procedure_text(), driver_params(&call.params));
        let _ = self.call("grantid_release failed", |c| {
            Box::pin(async move {
                c.exec_drop(text, params)
                    .await
                    .map_err(|e| unavailable("grantid_release failed", e))
            })
        });
    }
}

/// A SQL call's parameters as the driver sends them.
fn driver_params(params: &[SqlValue]) -> Vec<Value> {
    params
        .iter()
        .map(|p| match p {
            SqlValue::Text(s) => Value::from(s.as_str()),
            SqlValue::Int4(v) => Value::from(*v),
            SqlValue::Int8(v) => Value::from(*v),
            SqlValue::UInt8(v) => Value::from(*v),
            SqlValue::Null => Value::NULL,
        })
        .collect()
}

/// Column `i` of `row` as text (`None`: missing, NULL or not UTF-8).
fn row_text(row: &Row, i: usize) -> Option<String> {
    match row.as_ref(i)? {
        Value::Bytes(b) => String::from_utf8(b.clone()).ok(),
        _ => None,
    }
}

/// Column `i` of `row` as an integer (`None`: missing, NULL or not an
/// integer), whether the server sent it binary or as text.
fn row_number(row: &Row, i: usize) -> Option<i128> {
    match row.as_ref(i)? {
        Value::Int(v) => Some(i128::from(*v)),
        Value::UInt(v) => Some(i128::from(*v)),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

impl Authority for MysqlAuthority {
    fn init(&self) -> Result<String, Error> {
        let lock_secs = self.lock_secs();
        let report = self
            .call("cannot apply the schema", move |c| {
                Box::pin(async move {
                    let refused = multi_primary(c)
                        .await
                        .map_err(|e| unavailable("cannot read the server's settings", e))?;
                    if let Some(why) = refused {
                        return Ok(Err(why.to_owned()));
                    }
                    apply_schema(c, lock_secs).await?;
                    Self::settings(c)
                        .await
                        .map_err(|e| unavailable("cannot read the server's settings", e))
                })
            })
            .map_err(Error::from)?
            .map_err(|why| Error::new(ErrorKind::InvalidArgument, format!("mysql: {why}")))?;
        Ok(format!(
            "tables grantid_* version {SCHEMA_VERSION} are in place (namespaces, workers, \
             grant_log, store; procedures grantid_acquire, grantid_release, grantid_fence, \
             grantid_prune_grant_log); {report}"
        ))
    }

    fn init_new_deployment(&self) -> Result<String, Error> {
        let report = self.init()?;
        let created = self
            .call("grantid_declare_new_deployment failed", |c| {
                Box::pin(async move {
                    c.query_first::<i64, _>("CALL grantid_declare_new_deployment()")
                        .await
                        .map_err(|e| unavailable("grantid_declare_new_deployment failed", e))
                })
            })
            .map_err(Error::from)?;
        Ok(crate::kernel::reports::declared(
            &report,
            created == Some(1),
            "database",
        ))
    }

    fn fence(&self) -> Result<String, Error> {
        let params: Vec<Value> = vec![
            self.now_ms().into(),
            (self.options.max_lead_ms as i64).into(),
            (self.options.clock_skew_ms as i64).into(),
        ];
        let until = self
            .call("grantid_fence failed", |c| {
                Box::pin(async move {
                    c.exec_first::<i64, _, _>("CALL grantid_fence(?, ?, ?)", params)
                        .await
                        .map_err(|e| unavailable("grantid_fence failed", e))
                })
            })
            .map_err(Error::from)?
            .ok_or_else(|| Error::from(unavailable("grantid_fence failed", "no row")))?;
        Ok(crate::kernel::reports::fenced(until, &self.options))
    }

    fn quarantine(&self) -> Result<Option<grantid::rule::Quarantine>, Error> {
        self.call("cannot read grantid_store", |c| {
            Box::pin(async move { read_quarantine(c).await })
        })
        .map_err(Error::from)
    }

    fn lift_quarantine(&self) -> Result<String, Error> {
        let was = self
            .call("cannot lift the quarantine", |c| {
                Box::pin(async move {
                    let was = read_quarantine(c).await?;
                    c.query_drop(
                        "UPDATE grantid_store SET quarantine_until_ms = 0, \
                         quarantine_since_ms = 0, reason = LEFT(CONCAT('lifted by the operator \
                         (was: ', COALESCE(reason, ''), ')'), 512)",
                    )
                    .await
                    .map_err(|e| unavailable("cannot lift the quarantine", e))?;
                    Ok(was)
                })
            })
            .map_err(Error::from)?;
        Ok(crate::kernel::lifted(
            "mysql",
            was.as_ref(),
            self.now_ms()
                .map_or_else(crate::kernel::system_ms, |ms| ms as u64),
        ))
    }

    fn status(&self, namespace: Option<&str>) -> Result<Vec<WorkerStatus>, Error> {
        let ns: Value = namespace.into();
        let rows = self
            .call("cannot read grantid_workers", |c| {
                Box::pin(async move {
                    c.exec::<Row, _, _>(
                        "SELECT n.namespace, n.timestamp_bits, n.worker_bits, n.sequence_bits, \
                                n.epoch_ms, n.tick_ms, w.worker, w.holder, w.lease_expiry, \
                                w.high_water, w.fencing \
                         FROM grantid_workers w JOIN grantid_namespaces n USING (namespace) \
                         WHERE ? IS NULL OR n.namespace = ? \
                         ORDER BY n.namespace, w.worker",
                        (ns.clone(), ns),
                    )
                    .await
                    .map_err(|e| unavailable("cannot read grantid_workers", e))
                })
            })
            .map_err(Error::from)?;
        rows.iter()
            .map(|r| {
                let number = |i: usize| row_number(r, i);
                let namespace = row_text(r, 0).unwrap_or_default();
                let record = StoredWorker {
                    namespace: &namespace,
                    layout: [number(1), number(2), number(3), number(4), number(5)],
                    worker: number(6),
                    holder: number(7),
                    lease_expiry: number(8),
                    high_water: number(9),
                    fencing: number(10),
                };
                worker_status("mysql", &record)
            })
            .collect::<Result<Vec<_>, GrantError>>()
            .map_err(Error::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_splits_into_whole_statements() {
        let all = statements(MYSQL_SQL_V1);
        assert!(all.iter().all(|s| !s.contains("DELIMITER")));
        let acquire = all
            .iter()
            .find(|s| s.starts_with("CREATE PROCEDURE grantid_acquire"))
            .expect("the acquire procedure");
        assert!(acquire.trim_end().ends_with("END"), "{acquire}");
        assert!(acquire.contains("START TRANSACTION;"));
        assert_eq!(
            all.last().map(String::as_str),
            Some(
                "INSERT IGNORE INTO grantid_schema_version (version) VALUES (1), (2), (3), (4), (5)"
            )
        );
        assert!(
            MYSQL_SQL_V1.contains(&format!(", ({SCHEMA_VERSION});")),
            "SCHEMA_VERSION matches the script"
        );
    }

    #[test]
    fn urls_need_a_database_and_known_options() {
        for (url, needle) in [
            ("mysql://root@127.0.0.1:3306", "no database"),
            ("mysql://root@127.0.0.1:3306/", "no database"),
            ("mysql://root@127.0.0.1:3306/db?bogus=1", "bogus"),
        ] {
            let e = MysqlAuthority::new(url, Options::default()).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{url}");
            assert!(e.message().contains(needle), "{url}: {e}");
        }
        MysqlAuthority::new("mysql://root:pw@127.0.0.1:3306/db", Options::default()).unwrap();
    }
}
