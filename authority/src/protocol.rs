//! The calls of the stores' own procedures, built once, and their answers
//! decoded once (with [`crate::answer`]). The Rust backends send these
//! calls through their drivers; the Python and Node helpers
//! (`grantid.authorities`) send the very same calls over the connections an
//! application already keeps, so a binding only does the I/O and every
//! answer means the same thing in every language.
//!
//! | store | acquire | release |
//! |---|---|---|
//! | Redis (authority/src/engines/redis/v1.lua) | [`redis_acquire`] → `EVAL` with `keys`, `args`; reply to [`redis_grant`] | [`redis_release`] |
//! | PostgreSQL (authority/src/engines/postgres/v1.sql) | [`postgres_acquire`] → one row; its fields to [`postgres_grant`] | [`postgres_release`] |
//! | MySQL, MariaDB (authority/src/engines/mysql/v1.sql) | [`mysql_acquire`] → `CALL`, one row; its fields to [`mysql_grant`] | [`mysql_release`] |

use grantid::{Grant, GrantError, GrantRequest};

use crate::answer::{AcquireAnswer, grant_from_answer};
use crate::url::Options;

#[cfg(feature = "redis")]
/// The key of the store-wide state-loss record of a Redis store
/// (docs/AUTHORITIES.md, "State loss").
pub const REDIS_STORE_KEY: &str = "grantid:store";

#[cfg(feature = "redis")]
/// Largest timestamp width the Redis script serves: Lua numbers are
/// doubles, exact up to 2^53.
pub const REDIS_MAX_TIMESTAMP_BITS: u8 = 52;

#[cfg(feature = "redis")]
/// The key prefix of a namespace in Redis: `grantid:{<namespace>}`.
pub fn redis_key_prefix(namespace: &str) -> String {
    format!("grantid:{{{namespace}}}")
}

#[cfg(feature = "redis")]
/// One run of the Redis script: its keys and arguments, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptCall {
    /// `KEYS`.
    pub keys: Vec<String>,
    /// `ARGV`.
    pub args: Vec<String>,
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// One parameter of a SQL call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlValue {
    /// `text`.
    Text(String),
    /// `integer`.
    Int4(i32),
    /// `bigint`.
    Int8(i64),
    /// `bigint unsigned` (MySQL; PostgreSQL has none, and is never sent
    /// one).
    UInt8(u64),
    /// `NULL` (a `bigint`).
    Null,
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// One SQL statement of a store's schema: the function (or procedure) and
/// the columns it selects, and its parameters in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlCall {
    /// The function called, e.g. `grantid.acquire`.
    pub function: &'static str,
    /// The columns selected from it (empty: `SELECT function(...)`).
    pub columns: &'static str,
    /// The parameters, in order.
    pub params: Vec<SqlValue>,
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
impl SqlCall {
    /// The statement, with the placeholder `placeholder(i)` for the `i`-th
    /// parameter (1-based): `$1` for tokio-postgres and node-postgres,
    /// `%s` for psycopg.
    pub fn text(&self, placeholder: impl Fn(usize) -> String) -> String {
        let args: Vec<String> = (1..=self.params.len()).map(placeholder).collect();
        if self.columns.is_empty() {
            format!("SELECT {}({})", self.function, args.join(", "))
        } else {
            format!(
                "SELECT {} FROM {}({})",
                self.columns,
                self.function,
                args.join(", ")
            )
        }
    }

    /// The statement as a call of a stored procedure, with `?`
    /// placeholders (MySQL): `CALL grantid_acquire(?, ...)`.
    pub fn procedure_text(&self) -> String {
        let args = vec!["?"; self.params.len()];
        format!("CALL {}({})", self.function, args.join(", "))
    }
}

/// A lease grace in ticks of `tick_ms`, at most `cap`.
fn grace_ticks(lease_grace_ms: u64, tick_ms: u64, cap: u64) -> u64 {
    lease_grace_ms.div_ceil(tick_ms).min(cap)
}

#[cfg(feature = "redis")]
fn now_arg(now_ms: Option<u64>) -> String {
    now_ms.map(|ms| ms.to_string()).unwrap_or_default()
}

#[cfg(feature = "redis")]
/// The script run that asks for `request` (`now_ms`: the authority's time,
/// `None` for the server's `TIME`). A layout the script cannot serve is
/// refused here.
pub fn redis_acquire(
    request: &GrantRequest,
    options: &Options,
    now_ms: Option<u64>,
) -> Result<ScriptCall, GrantError> {
    crate::kernel::check_namespace(&request.namespace)?;
    let l = request.layout;
    if l.timestamp_bits() > REDIS_MAX_TIMESTAMP_BITS
        || l.epoch_ms() > 1 << 53
        || l.tick_ms() > 1 << 53
    {
        return Err(GrantError::Refused(format!(
            "the Redis authority serves layouts of at most {REDIS_MAX_TIMESTAMP_BITS} timestamp \
             bits and epoch/tick below 2^53 ms"
        )));
    }
    let args = [
        "acquire".to_owned(),
        request.incarnation.to_string(),
        request.request_id.to_string(),
        request.worker.map(|w| w.to_string()).unwrap_or_default(),
        request.not_before.min(l.timestamp_limit()).to_string(),
        request.duration.clamp(1, l.timestamp_limit()).to_string(),
        l.timestamp_bits().to_string(),
        l.worker_bits().to_string(),
        l.sequence_bits().to_string(),
        l.epoch_ms().to_string(),
        l.tick_ms().to_string(),
        grace_ticks(options.lease_grace_ms, l.tick_ms(), 1 << 40).to_string(),
        now_arg(now_ms),
        options.log_max.to_string(),
        String::new(),
        options.max_lead_ms.to_string(),
        options.clock_skew_ms.to_string(),
        l.split_bits().to_string(),
    ];
    Ok(ScriptCall {
        keys: vec![
            redis_key_prefix(&request.namespace),
            REDIS_STORE_KEY.to_owned(),
        ],
        args: args.into(),
    })
}

#[cfg(feature = "redis")]
/// The script run that releases `last` (best effort).
pub fn redis_release(last: &Grant, now_ms: Option<u64>) -> ScriptCall {
    ScriptCall {
        keys: vec![redis_key_prefix(&last.namespace)],
        args: vec![
            "release".to_owned(),
            last.incarnation.to_string(),
            last.worker.to_string(),
            now_arg(now_ms),
        ],
    }
}

#[cfg(feature = "redis")]
/// The script's reply to [`redis_acquire`], every element as a string.
pub fn redis_grant(request: &GrantRequest, reply: &[String]) -> Result<Grant, GrantError> {
    grant_from_answer("redis", request, &AcquireAnswer::from_script_reply(reply))
}

#[cfg(feature = "postgres")]
/// The columns `grantid.acquire` answers, in the order [`postgres_grant`]
/// takes them.
pub const POSTGRES_ACQUIRE_COLUMNS: &str =
    "status, worker, grant_id, start_tick, end_tick, message";

#[cfg(feature = "postgres")]
/// The `grantid.acquire` call that asks for `request` (`now_ms`: the
/// authority's time, `None` for the server's clock).
pub fn postgres_acquire(
    request: &GrantRequest,
    options: &Options,
    now_ms: Option<u64>,
) -> Result<SqlCall, GrantError> {
    crate::kernel::check_sql_request(request, "PostgreSQL")?;
    // A bigint holds the 64 bits as two's complement.
    let mut params = sql_request_params(request, options, |v| SqlValue::Int8(v as i64));
    params.extend([
        now_ms.map_or(SqlValue::Null, int8),
        SqlValue::Int4(i32::from(request.layout.split_bits())),
        bounded_ms(options.max_lead_ms),
        bounded_ms(options.clock_skew_ms),
    ]);
    Ok(SqlCall {
        function: "grantid.acquire",
        columns: POSTGRES_ACQUIRE_COLUMNS,
        params,
    })
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// A bigint parameter, at most `i64::MAX` (the request checks keep every
/// value below it).
fn int8(v: u64) -> SqlValue {
    SqlValue::Int8(v.min(i64::MAX as u64) as i64)
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// A duration in ms (`max_lead_ms`, `clock_skew_ms`) as a bigint far below
/// the columns' range, so that the store's sums cannot overflow.
fn bounded_ms(v: u64) -> SqlValue {
    int8(v.min(i64::MAX as u64 / 4))
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// The parameters every SQL store's `acquire` takes first, in order: the
/// namespace, incarnation and request id (as `id` spells a 64-bit
/// identifier in the store's column type), worker, not_before, duration,
/// the layout and the lease grace in ticks.
fn sql_request_params(
    request: &GrantRequest,
    options: &Options,
    id: fn(u64) -> SqlValue,
) -> Vec<SqlValue> {
    let l = request.layout;
    vec![
        SqlValue::Text(request.namespace.clone()),
        id(request.incarnation),
        id(request.request_id),
        request
            .worker
            .map_or(SqlValue::Null, |w| SqlValue::Int8(i64::from(w))),
        int8(request.not_before.min(l.timestamp_limit())),
        int8(request.duration.clamp(1, l.timestamp_limit())),
        SqlValue::Int4(i32::from(l.timestamp_bits())),
        SqlValue::Int4(i32::from(l.worker_bits())),
        SqlValue::Int4(i32::from(l.sequence_bits())),
        int8(l.epoch_ms()),
        int8(l.tick_ms()),
        int8(grace_ticks(
            options.lease_grace_ms,
            l.tick_ms(),
            i64::MAX as u64 / 2,
        )),
    ]
}

#[cfg(feature = "postgres")]
/// The `grantid.release` call for `last` (best effort).
pub fn postgres_release(last: &Grant, now_ms: Option<u64>) -> SqlCall {
    SqlCall {
        function: "grantid.release",
        columns: "",
        params: vec![
            SqlValue::Text(last.namespace.clone()),
            SqlValue::Int8(i64::from(last.worker)),
            SqlValue::Int8(last.incarnation as i64),
            now_ms.map_or(SqlValue::Null, |ms| SqlValue::Int8(ms as i64)),
        ],
    }
}

#[cfg(feature = "postgres")]
/// The row `grantid.acquire` answered to [`postgres_acquire`]: its columns
/// in [`POSTGRES_ACQUIRE_COLUMNS`] order (`None`: NULL or not a number).
pub fn postgres_grant(
    request: &GrantRequest,
    status: Option<&str>,
    numbers: [Option<i128>; 4],
    message: Option<&str>,
) -> Result<Grant, GrantError> {
    row_grant("postgres", request, status, numbers, message)
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// The grant a SQL store's answer row gives `request`: its status, its
/// numbers (worker, grant_id, start, end) and its message.
fn row_grant(
    store: &str,
    request: &GrantRequest,
    status: Option<&str>,
    numbers: [Option<i128>; 4],
    message: Option<&str>,
) -> Result<Grant, GrantError> {
    let [worker, grant_id, start, end] = numbers;
    let answer = AcquireAnswer {
        status,
        message,
        worker,
        grant_id,
        start,
        end,
    };
    grant_from_answer(store, request, &answer)
}

#[cfg(feature = "mysql")]
/// The `grantid_acquire` procedure call that asks for `request` (`now_ms`:
/// the authority's time, `None` for the server's clock). Its result row
/// has the columns `status, worker, grant_id, start_tick, end_tick,
/// message`, read by [`mysql_grant`].
pub fn mysql_acquire(
    request: &GrantRequest,
    options: &Options,
    now_ms: Option<u64>,
) -> Result<SqlCall, GrantError> {
    crate::kernel::check_sql_request(request, "MySQL")?;
    let mut params = sql_request_params(request, options, SqlValue::UInt8);
    params.extend([
        bounded_ms(options.max_lead_ms),
        bounded_ms(options.clock_skew_ms),
        now_ms.map_or(SqlValue::Null, int8),
        SqlValue::Int4(i32::from(request.layout.split_bits())),
    ]);
    Ok(SqlCall {
        function: "grantid_acquire",
        columns: "",
        params,
    })
}

#[cfg(feature = "mysql")]
/// The `grantid_release` procedure call for `last` (best effort).
pub fn mysql_release(last: &Grant, now_ms: Option<u64>) -> SqlCall {
    SqlCall {
        function: "grantid_release",
        columns: "",
        params: vec![
            SqlValue::Text(last.namespace.clone()),
            SqlValue::Int8(i64::from(last.worker)),
            SqlValue::UInt8(last.incarnation),
            now_ms.map_or(SqlValue::Null, int8),
        ],
    }
}

#[cfg(feature = "mysql")]
/// The row `grantid_acquire` answered to [`mysql_acquire`]: its columns
/// `worker, grant_id, start_tick, end_tick` as numbers (`None`: NULL or
/// not a number).
pub fn mysql_grant(
    request: &GrantRequest,
    status: Option<&str>,
    numbers: [Option<i128>; 4],
    message: Option<&str>,
) -> Result<Grant, GrantError> {
    row_grant("mysql", request, status, numbers, message)
}

#[cfg(all(test, feature = "redis", feature = "postgres"))]
mod tests {
    use grantid::Layout;

    use super::*;

    fn request() -> GrantRequest {
        GrantRequest {
            namespace: "orders".into(),
            incarnation: u64::MAX,
            request_id: 3,
            worker: None,
            not_before: 10,
            now: 10,
            duration: 500,
            layout: Layout::default(),
        }
    }

    #[test]
    fn the_script_call_names_both_keys_and_every_argument() {
        let call = redis_acquire(&request(), &Options::default(), Some(77)).unwrap();
        assert_eq!(call.keys, ["grantid:{orders}", "grantid:store"]);
        assert_eq!(call.args.len(), 18);
        assert_eq!(call.args[1], u64::MAX.to_string());
        assert_eq!(call.args[3], "");
        assert_eq!(call.args[11], "5000");
        assert_eq!(call.args[12], "77");
        assert_eq!(call.args[15], "7000");
        assert_eq!(call.args[16], "1000");
        assert_eq!(call.args[17], "0");
    }

    #[test]
    fn a_layout_the_script_cannot_serve_is_refused() {
        let mut r = request();
        r.layout = Layout::with_all(53, 4, 6, 0, 1).unwrap();
        assert!(matches!(
            redis_acquire(&r, &Options::default(), None),
            Err(GrantError::Refused(_))
        ));
    }

    #[test]
    fn the_sql_call_spells_its_placeholders_as_asked() {
        let call = postgres_acquire(&request(), &Options::default(), None).unwrap();
        assert_eq!(call.params.len(), 16);
        assert_eq!(call.params[1], SqlValue::Int8(-1));
        assert_eq!(call.params[12], SqlValue::Null);
        let d = Options::default();
        assert_eq!(call.params[14], SqlValue::Int8(d.max_lead_ms as i64));
        assert_eq!(call.params[15], SqlValue::Int8(d.clock_skew_ms as i64));
        let text = call.text(|i| format!("${i}"));
        assert!(text.starts_with("SELECT status, worker"), "{text}");
        assert!(text.ends_with(
            "grantid.acquire($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)"
        ));
        let release = postgres_release(&redis_grant_for_test(), None).text(|_| "%s".into());
        assert_eq!(release, "SELECT grantid.release(%s, %s, %s, %s)");
    }

    fn redis_grant_for_test() -> Grant {
        Grant {
            namespace: "orders".into(),
            worker: 1,
            incarnation: 2,
            grant_id: 3,
            start: 10,
            end: 20,
        }
    }

    #[test]
    fn every_answer_kind_decodes_to_its_error() {
        let r = request();
        let reply = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let granted = redis_grant(&r, &reply(&["granted", "4", "9", "10", "510"])).unwrap();
        assert_eq!((granted.worker, granted.start, granted.end), (4, 10, 510));
        for (status, name) in [
            ("lost", "lost"),
            ("wait", "unavailable"),
            ("refused", "refused"),
        ] {
            let e = redis_grant(&r, &reply(&[status, "why"])).unwrap_err();
            assert_eq!(e.name(), name, "{status}: {e}");
            let e = postgres_grant(&r, Some(status), [None; 4], Some("why")).unwrap_err();
            assert_eq!(e.name(), name, "{status}: {e}");
        }
        for bad in [reply(&["granted", "4"]), reply(&["maybe"]), reply(&[])] {
            assert_eq!(redis_grant(&r, &bad).unwrap_err().name(), "invalid");
        }
    }
}
