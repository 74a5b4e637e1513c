//! The DynamoDB authority, `dynamodb://TABLE[?region=REGION&endpoint=URL]`
//! (feature `dynamodb`): the allocation rule as conditional writes on one
//! table (docs/reference/dynamodb.md). The AWS SDK for Rust signs the calls
//! with the standard credential chain (environment, profile, web identity,
//! ECS and EC2 roles) over rustls.
//!
//! The table's key is `PK` (string) and `SK` (string), as in the service
//! design's `WorkerNodeRegistryTable`. Items:
//!
//! * `PK = "grantid#store"`, `SK = "store"`: the store-wide record (the
//!   table's identity, the quarantine and its reason);
//! * `PK = "NS#<namespace>"`, `SK = "LAYOUT"`: the namespace's layout,
//!   `next_unused`, the longest lead and skew used;
//! * `PK = "NS#<namespace>"`, `SK = "WORKER#<n>"`: one worker:
//!   `instance_id` (the holding incarnation), `lease_expiry_ts` (Unix ms),
//!   `fencing_epoch` (the last grant's `grant_id`), `high_water` (ticks) and
//!   the last grant with its (incarnation, request_id), which answers a
//!   retry.
//!
//! Every item carries `version`, raised by each write; every write is
//! conditional on the versions read (`attribute_not_exists(PK)` for an item
//! it creates). Each grant reads with `TransactGetItems` (the store record,
//! the namespace's record, the worker: one serializable read) or, for a
//! first grant, those two and a consistent `Query` of the namespace's
//! workers; decides by [`grantid::rule::decide`] in the shared read →
//! decide → conditional-write loop (`authority/src/cas.rs`); then writes the
//! worker and, for a first grant, the namespace's record in one
//! `TransactWriteItems` that also checks the store record. A write whose
//! condition failed is decided again from fresh reads, within `timeout_ms`.
//! First grants of a namespace are serialised on its record; renewals of
//! different workers do not conflict.
//!
//! Authority time is this host's clock, as for etcd: hosts' clocks must
//! agree within `clock_skew_ms`, which every quarantine adds.
//!
//! State loss (docs/reference/dynamodb.md, "State loss"): a missing store
//! record (a table created again, or never declared) or, at a first grant,
//! a table identity (its ARN and creation time, from `DescribeTable`) other
//! than the recorded one (a table restored from a backup or to a point in
//! time is a new table) start a quarantine of `max_lead_ms + clock_skew_ms`
//! before anything is granted. A renewal reads no identity: a restored
//! worker item behind its holder's grants fails the forgotten-grant check.

pub(crate) mod url;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, ConditionCheck, Get, KeySchemaElement,
    KeyType, Put, ScalarAttributeType, TableStatus, TransactGetItem, TransactWriteItem,
};
use grantid::rule::{self, Quarantine, Registered};
use grantid::{Clock, Error, ErrorKind, Grant, GrantError, GrantRequest, GrantSource, Layout};

use crate::blocking::{Blocking, Work};
use crate::cas::{self, Seen};
use crate::kernel::{Authority, Sessions, WorkerStatus};
use crate::url::{Options, Target};

/// The registry's opener of DynamoDB URLs: `n` sessions, a client each.
pub(crate) fn open(
    url: &str,
    target: Target,
    options: Options,
    n: usize,
) -> Result<Sessions, Error> {
    Ok(Sessions::siblings(
        DynamoAuthority::open(url, target, options)?,
        n,
        DynamoAuthority::sibling,
    ))
}

/// The partition key of the store-wide record.
pub const STORE_PK: &str = "grantid#store";
const STORE_SK: &str = "store";
const LAYOUT_SK: &str = "LAYOUT";
const WORKER_PREFIX: &str = "WORKER#";
/// How long `authority init` waits for a table it created to be ACTIVE.
const CREATE_WAIT: Duration = Duration::from_secs(120);

type Item = HashMap<String, AttributeValue>;

fn unavailable(what: &str, e: impl std::fmt::Display) -> GrantError {
    GrantError::Unavailable(format!("dynamodb: {what}: {e}"))
}

fn malformed(what: impl std::fmt::Display) -> GrantError {
    unavailable("malformed item", what)
}

/// An SDK error as an answer: the service's code and message, or what
/// failed on the way (credentials, region, the connection).
fn sdk_error<E, R>(what: &str, e: aws_sdk_dynamodb::error::SdkError<E, R>) -> GrantError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    if let Some(code) = e.code() {
        let hint = match code {
            "ResourceNotFoundException" => {
                " (no such table: create it with `grantid authority init dynamodb://TABLE`)"
            }
            "AccessDeniedException" | "UnrecognizedClientException" => {
                " (see docs/reference/dynamodb.md, \"IAM policy\")"
            }
            _ => "",
        };
        return unavailable(
            what,
            format!("{code}: {}{hint}", e.message().unwrap_or_default()),
        );
    }
    unavailable(what, DisplayErrorContext(&e))
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn key(pk: &str, sk: &str) -> Item {
    HashMap::from([("PK".to_owned(), s(pk)), ("SK".to_owned(), s(sk))])
}

/// `NS#<namespace>`: the namespace's partition (a namespace is stored as
/// it is; the store record's key does not start with `NS#`).
fn ns_pk(namespace: &str) -> String {
    format!("NS#{namespace}")
}

fn worker_sk(worker: u32) -> String {
    format!("{WORKER_PREFIX}{worker}")
}

/// Number attribute `name` of `item`, if present.
fn number(item: &Item, name: &str) -> Result<Option<u64>, GrantError> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::N(v)) => v
            .parse::<u64>()
            .map(Some)
            .map_err(|_| malformed(format!("{name} = {v:?} is not a whole number"))),
        Some(other) => Err(malformed(format!("{name} is {other:?}, not a number"))),
    }
}

fn required(item: &Item, name: &str) -> Result<u64, GrantError> {
    number(item, name)?.ok_or_else(|| malformed(format!("an item without {name}")))
}

fn text(item: &Item, name: &str) -> Result<Option<String>, GrantError> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::S(v)) => Ok(Some(v.clone())),
        Some(other) => Err(malformed(format!("{name} is {other:?}, not a string"))),
    }
}

fn small(item: &Item, name: &str) -> Result<u8, GrantError> {
    let v = required(item, name)?;
    u8::try_from(v).map_err(|_| malformed(format!("{name} = {v} is too large")))
}

/// An item as read, with its `version` (0: absent; every item written
/// has a version of at least 1).
struct Read<T> {
    value: Option<T>,
    version: u64,
}

impl<T> Read<T> {
    fn absent() -> Read<T> {
        Read {
            value: None,
            version: 0,
        }
    }

    /// Decodes `item` (absent: `None`) with `decode`.
    fn of(
        item: Option<&Item>,
        decode: impl FnOnce(&Item) -> Result<T, GrantError>,
    ) -> Result<Read<T>, GrantError> {
        match item {
            None => Ok(Read::absent()),
            Some(item) => Ok(Read {
                value: Some(decode(item)?),
                version: required(item, "version")?,
            }),
        }
    }

    /// The condition that holds while the item is as read.
    fn condition(&self) -> (String, Option<AttributeValue>) {
        if self.version > 0 {
            ("version = :v".into(), Some(n(self.version)))
        } else {
            ("attribute_not_exists(PK)".into(), None)
        }
    }

    /// A `Put` of `item` (with the next version) on that condition.
    fn put(&self, table: &str, mut item: Item) -> Result<Put, GrantError> {
        item.insert("version".into(), n(self.version + 1));
        let (condition, v) = self.condition();
        Put::builder()
            .table_name(table)
            .set_item(Some(item))
            .condition_expression(condition)
            .set_expression_attribute_values(v.map(|v| HashMap::from([(":v".to_owned(), v)])))
            .build()
            .map_err(|e| unavailable("cannot build a write", e))
    }

    /// A `ConditionCheck` that the item at `key` is as read.
    fn check(&self, table: &str, key: Item) -> Result<ConditionCheck, GrantError> {
        let (condition, v) = self.condition();
        ConditionCheck::builder()
            .table_name(table)
            .set_key(Some(key))
            .condition_expression(condition)
            .set_expression_attribute_values(v.map(|v| HashMap::from([(":v".to_owned(), v)])))
            .build()
            .map_err(|e| unavailable("cannot build a write", e))
    }
}

/// The store-wide record.
#[derive(Debug, Clone)]
struct StoreRecord {
    /// The table's identity when the record was written ([`identity`]).
    table: String,
    quarantines: u64,
    until_ms: u64,
    since_ms: u64,
    reason: String,
}

impl StoreRecord {
    fn decode(item: &Item) -> Result<StoreRecord, GrantError> {
        Ok(StoreRecord {
            table: text(item, "table_identity")?.unwrap_or_default(),
            quarantines: number(item, "quarantines")?.unwrap_or(0),
            until_ms: number(item, "quarantine_until_ms")?.unwrap_or(0),
            since_ms: number(item, "quarantine_since_ms")?.unwrap_or(0),
            reason: text(item, "reason")?.unwrap_or_default(),
        })
    }

    fn item(&self) -> Item {
        let mut item = key(STORE_PK, STORE_SK);
        item.extend([
            ("table_identity".to_owned(), s(&self.table)),
            ("quarantines".to_owned(), n(self.quarantines)),
            ("quarantine_until_ms".to_owned(), n(self.until_ms)),
            ("quarantine_since_ms".to_owned(), n(self.since_ms)),
            ("reason".to_owned(), s(&self.reason)),
        ]);
        item
    }

    fn quarantine(&self) -> Quarantine {
        Quarantine {
            until_ms: self.until_ms,
            since_ms: self.since_ms,
            reason: self.reason.clone(),
        }
    }
}

/// The namespace's record, as the rule reads it.
fn decode_registered(item: &Item) -> Result<Registered, GrantError> {
    let layout = Layout::registered(
        small(item, "timestamp_bits")?,
        small(item, "worker_bits")?,
        small(item, "sequence_bits")?,
        required(item, "epoch_ms")?,
        required(item, "tick_ms")?,
        small(item, "split_bits")?,
    )
    .map_err(|e| malformed(format!("a namespace's layout: {e}")))?;
    Ok(Registered {
        layout,
        next_unused: required(item, "next_unused")?,
        max_lead_ms: number(item, "max_lead_ms")?.unwrap_or(0),
        clock_skew_ms: number(item, "clock_skew_ms")?.unwrap_or(0),
    })
}

fn registered_item(namespace: &str, r: &Registered) -> Item {
    let l = r.layout;
    let mut item = key(&ns_pk(namespace), LAYOUT_SK);
    item.extend([
        ("timestamp_bits".to_owned(), n(l.timestamp_bits().into())),
        ("worker_bits".to_owned(), n(l.worker_bits().into())),
        ("sequence_bits".to_owned(), n(l.sequence_bits().into())),
        ("epoch_ms".to_owned(), n(l.epoch_ms())),
        ("tick_ms".to_owned(), n(l.tick_ms())),
        ("split_bits".to_owned(), n(l.split_bits().into())),
        ("datacenter_bits".to_owned(), n(l.datacenter_bits().into())),
        ("next_unused".to_owned(), n(r.next_unused)),
        ("max_lead_ms".to_owned(), n(r.max_lead_ms)),
        ("clock_skew_ms".to_owned(), n(r.clock_skew_ms)),
    ]);
    item
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LastGrant {
    incarnation: u64,
    request_id: u64,
    start: u64,
    end: u64,
}

/// One worker's item.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WorkerItem {
    record: grantid::WorkerRecord,
    last: Option<LastGrant>,
}

/// An incarnation as `instance_id` shows it (as the rule's messages do).
fn instance_id(incarnation: u64) -> String {
    format!("{incarnation:#x}")
}

impl WorkerItem {
    /// Decodes a worker item of a namespace registered with `layout` (its
    /// `lease_expiry_ts` is Unix ms).
    fn decode(item: &Item, layout: &Layout) -> Result<WorkerItem, GrantError> {
        let holder = match text(item, "instance_id")? {
            None => None,
            Some(h) => Some(
                h.strip_prefix("0x")
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
                    .ok_or_else(|| malformed(format!("instance_id = {h:?}")))?,
            ),
        };
        let last = match number(item, "last_incarnation")? {
            None => None,
            Some(incarnation) => Some(LastGrant {
                incarnation,
                request_id: required(item, "last_request_id")?,
                start: required(item, "last_start")?,
                end: required(item, "last_end")?,
            }),
        };
        Ok(WorkerItem {
            record: grantid::WorkerRecord {
                holder,
                lease_expiry: layout.tick_at(required(item, "lease_expiry_ts")?),
                high_water: required(item, "high_water")?,
                fencing: required(item, "fencing_epoch")?,
                used: true,
            },
            last,
        })
    }

    fn item(&self, namespace: &str, worker: u32, layout: &Layout) -> Item {
        let r = &self.record;
        let mut item = key(&ns_pk(namespace), &worker_sk(worker));
        item.extend([
            ("worker".to_owned(), n(worker.into())),
            (
                "lease_expiry_ts".to_owned(),
                n(layout.unix_ms_of(r.lease_expiry)),
            ),
            ("high_water".to_owned(), n(r.high_water)),
            ("fencing_epoch".to_owned(), n(r.fencing)),
        ]);
        if let Some(h) = r.holder {
            item.insert("instance_id".into(), s(instance_id(h)));
        }
        if let Some(l) = self.last {
            item.extend([
                ("last_incarnation".to_owned(), n(l.incarnation)),
                ("last_request_id".to_owned(), n(l.request_id)),
                ("last_start".to_owned(), n(l.start)),
                ("last_end".to_owned(), n(l.end)),
            ]);
        }
        item
    }
}

/// The worker number of a worker item's sort key.
fn worker_of(item: &Item) -> Option<u32> {
    match item.get("SK") {
        Some(AttributeValue::S(sk)) => sk.strip_prefix(WORKER_PREFIX)?.parse().ok(),
        _ => None,
    }
}

/// The table's identity: its ARN and creation time, both new for a table
/// created again or restored (from a backup or to a point in time).
async fn identity(client: &Client, table: &str) -> Result<String, GrantError> {
    let out = client
        .describe_table()
        .table_name(table)
        .send()
        .await
        .map_err(|e| sdk_error("cannot describe the table", e))?;
    let t = out
        .table()
        .ok_or_else(|| unavailable("malformed answer", "DescribeTable without a table"))?;
    identity_of(t).ok_or_else(|| {
        unavailable(
            "malformed answer",
            "DescribeTable without the table's ARN and creation time",
        )
    })
}

/// A table's identity: its ARN, its `TableId` when the service gives one,
/// its creation time, and for a restored table the backup or table it was
/// restored from and when.
fn identity_of(t: &aws_sdk_dynamodb::types::TableDescription) -> Option<String> {
    let ms = |d: &aws_sdk_dynamodb::primitives::DateTime| d.to_millis().unwrap_or_default();
    let mut id = format!("{} created {}", t.table_arn()?, ms(t.creation_date_time()?));
    if let Some(table_id) = t.table_id() {
        id = format!("{id} id {table_id}");
    }
    if let Some(r) = t.restore_summary() {
        let from = r
            .source_backup_arn()
            .or(r.source_table_arn())
            .unwrap_or("?");
        id = format!("{id} restored from {from} at {}", ms(r.restore_date_time()));
    }
    Some(id)
}

/// Reads the items at `keys` in one serializable `TransactGetItems`.
async fn get_items(
    client: &Client,
    table: &str,
    keys: Vec<Item>,
) -> Result<Vec<Option<Item>>, GrantError> {
    let mut gets = Vec::with_capacity(keys.len());
    for k in keys {
        let get = Get::builder()
            .table_name(table)
            .set_key(Some(k))
            .build()
            .map_err(|e| unavailable("cannot build a read", e))?;
        gets.push(TransactGetItem::builder().get(get).build());
    }
    let count = gets.len();
    // A read that meets a write in flight on one of its items is cancelled
    // (`TransactionConflict`): read again (the caller's deadline bounds it).
    let out = loop {
        match client
            .transact_get_items()
            .set_transact_items(Some(gets.clone()))
            .send()
            .await
        {
            Ok(out) => break out,
            Err(e) if conflict_only(e.as_service_error().and_then(|e| match e {
                aws_sdk_dynamodb::operation::transact_get_items::TransactGetItemsError::TransactionCanceledException(c) => Some(c),
                _ => None,
            })) => tokio::time::sleep(Duration::from_millis(2)).await,
            Err(e) => return Err(sdk_error("cannot read", e)),
        }
    };
    let items: Vec<Option<Item>> = out.responses().iter().map(|r| r.item().cloned()).collect();
    if items.len() != count {
        return Err(unavailable(
            "malformed answer",
            format!("{} items for {count} keys", items.len()),
        ));
    }
    Ok(items)
}

/// Every item of partition `pk` whose sort key starts with `prefix`, read
/// consistently.
async fn query(
    client: &Client,
    table: &str,
    pk: &str,
    prefix: &str,
) -> Result<Vec<Item>, GrantError> {
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let mut q = client
            .query()
            .table_name(table)
            .consistent_read(true)
            .expression_attribute_values(":pk", s(pk));
        // A key condition takes no empty prefix.
        q = if prefix.is_empty() {
            q.key_condition_expression("PK = :pk")
        } else {
            q.key_condition_expression("PK = :pk AND begins_with(SK, :prefix)")
                .expression_attribute_values(":prefix", s(prefix))
        };
        let out = q
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| sdk_error("cannot read the workers", e))?;
        items.extend(out.items().iter().cloned());
        match out.last_evaluated_key() {
            Some(k) if !k.is_empty() => start = Some(k.clone()),
            _ => return Ok(items),
        }
    }
}

/// Whether a cancelled transaction met only conditions that failed or
/// other transactions (`ConditionalCheckFailed`, `TransactionConflict`):
/// nothing of it was applied, and deciding again is the answer.
fn conflict_only(
    cancelled: Option<&aws_sdk_dynamodb::types::error::TransactionCanceledException>,
) -> bool {
    let Some(c) = cancelled else {
        return false;
    };
    let reasons: Vec<&str> = c
        .cancellation_reasons()
        .iter()
        .filter_map(|r| r.code())
        .filter(|code| *code != "None")
        .collect();
    !reasons.is_empty()
        && reasons
            .iter()
            .all(|r| matches!(*r, "ConditionalCheckFailed" | "TransactionConflict"))
}

/// Sends a `TransactWriteItems`: whether its conditions held (a condition
/// that failed, or a transaction that met another, is `false`: decide
/// again).
async fn write(
    client: &Client,
    items: Vec<TransactWriteItem>,
    what: &str,
) -> Result<bool, GrantError> {
    match client
        .transact_write_items()
        .set_transact_items(Some(items))
        .send()
        .await
    {
        Ok(_) => Ok(true),
        Err(e) => {
            let cancelled = e.as_service_error().and_then(|e| match e {
                aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(c) => Some(c),
                _ => None,
            });
            if conflict_only(cancelled) {
                return Ok(false);
            }
            Err(sdk_error(what, e))
        }
    }
}

/// Writes the store record `record` if it is still as `store` read it.
async fn put_store(
    client: &Client,
    table: &str,
    store: &Read<StoreRecord>,
    record: &StoreRecord,
    what: &str,
) -> Result<bool, GrantError> {
    let put = store.put(table, record.item())?;
    write(
        client,
        vec![TransactWriteItem::builder().put(put).build()],
        what,
    )
    .await
}

/// Reads the store record.
async fn read_store(client: &Client, table: &str) -> Result<Read<StoreRecord>, GrantError> {
    let items = get_items(client, table, vec![key(STORE_PK, STORE_SK)]).await?;
    Read::of(items[0].as_ref(), StoreRecord::decode)
}

/// Where the table is and how to reach it.
#[derive(Debug, Clone)]
struct Place {
    table: String,
    region: Option<String>,
    endpoint: Option<String>,
}

/// The DynamoDB authority. See the module docs.
pub struct DynamoAuthority {
    place: Arc<Place>,
    ctx: Arc<Ctx>,
    conn: Blocking<Client>,
}

/// What a call needs besides the client.
struct Ctx {
    options: Options,
    clock: Option<Arc<dyn Clock>>,
}

impl std::fmt::Debug for DynamoAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoAuthority")
            .field("place", &self.place)
            .finish_non_exhaustive()
    }
}

/// A client of the SDK for `place`: the standard credential chain and
/// region (the URL's region first), rustls with ring, every call within
/// `timeout`.
async fn connect(place: &Place, timeout: Duration) -> Result<Client, GrantError> {
    use aws_config::{BehaviorVersion, Region, retry::RetryConfig, timeout::TimeoutConfig};
    use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(timeout)
                .operation_timeout(timeout)
                .build(),
        )
        .retry_config(RetryConfig::standard());
    if let Some(r) = &place.region {
        loader = loader.region(Region::new(r.clone()));
    }
    let sdk = loader.load().await;
    if sdk.region().is_none() {
        return Err(GrantError::Refused(format!(
            "dynamodb://{}: no AWS region: add region=REGION to the URL, or set AWS_REGION",
            place.table
        )));
    }
    let mut config = aws_sdk_dynamodb::config::Builder::from(&sdk);
    if let Some(e) = &place.endpoint {
        config = config.endpoint_url(e);
    }
    Ok(Client::from_conf(config.build()))
}

impl DynamoAuthority {
    /// The authority of a parsed `dynamodb://` URL. Does not connect.
    pub(crate) fn open(
        url: &str,
        target: Target,
        options: Options,
    ) -> Result<DynamoAuthority, Error> {
        let Target::Dynamodb {
            table,
            region,
            endpoint,
        } = target
        else {
            return Err(crate::kernel::not_this_engines(url, "dynamodb"));
        };
        Ok(DynamoAuthority {
            place: Arc::new(Place {
                table,
                region,
                endpoint,
            }),
            ctx: Arc::new(Ctx {
                options,
                clock: None,
            }),
            conn: Blocking::new("dynamodb"),
        })
    }

    /// Parses a `dynamodb://` URL (without grantid's options, which are
    /// taken from `options`).
    pub fn from_url(url: &str, options: Options) -> Result<DynamoAuthority, Error> {
        let (scheme, rest) = url.split_once(':').unwrap_or(("", url));
        if scheme != "dynamodb" {
            return Err(crate::kernel::not_this_engines(url, "dynamodb"));
        }
        let mut ignored = Options::default();
        let parts = crate::url::Parts { url, scheme, rest };
        DynamoAuthority::open(url, self::url::parse(&parts, &mut ignored)?, options)
    }

    /// Another session of the same table: a client of its own.
    pub(crate) fn sibling(&self) -> DynamoAuthority {
        DynamoAuthority {
            place: Arc::clone(&self.place),
            ctx: Arc::clone(&self.ctx),
            conn: Blocking::new("dynamodb"),
        }
    }

    /// Replaces this host's clock by `clock`: for tests and fault injection.
    pub fn with_injected_clock(mut self, clock: Arc<dyn Clock>) -> DynamoAuthority {
        self.ctx = Arc::new(Ctx {
            options: self.ctx.options.clone(),
            clock: Some(clock),
        });
        self
    }

    /// Runs `op` on this process's client (made first if needed), within
    /// one deadline of `timeout`.
    fn call_within<T: Send + 'static>(
        &self,
        timeout: Duration,
        what: &str,
        op: impl for<'a> FnOnce(&'a Client, &'a Place) -> Work<'a, T> + Send + 'static,
    ) -> Result<T, GrantError> {
        let place = Arc::clone(&self.place);
        let t = self.ctx.options.timeout;
        self.conn
            .call(timeout, what, async move |slot: &mut Option<Client>| {
                let client = match slot {
                    Some(c) => c,
                    None => slot.insert(connect(&place, t).await?),
                };
                op(client, &place).await
            })
    }

    fn call<T: Send + 'static>(
        &self,
        what: &str,
        op: impl for<'a> FnOnce(&'a Client, &'a Place) -> Work<'a, T> + Send + 'static,
    ) -> Result<T, GrantError> {
        self.call_within(self.ctx.options.timeout, what, op)
    }
}

impl Ctx {
    fn now_ms(&self) -> u64 {
        cas::now_ms(self.clock.as_ref())
    }

    fn hold_ms(&self) -> u64 {
        cas::hold_ms(&self.options)
    }
}

/// Writes a quarantine until `now + hold_ms` (extending any longer one) on
/// the store record as read, recording the table's identity `table`.
/// Returns false when the record changed meanwhile.
async fn quarantine(
    client: &Client,
    place: &Place,
    store: &Read<StoreRecord>,
    table: String,
    now_ms: u64,
    hold_ms: u64,
    reason: String,
) -> Result<bool, GrantError> {
    let old = store
        .value
        .as_ref()
        .map(|s| (s.quarantines, s.until_ms, s.since_ms));
    let (quarantines, until_ms, since_ms) = cas::extended(old, now_ms, hold_ms);
    let record = StoreRecord {
        table,
        quarantines,
        until_ms,
        since_ms,
        reason,
    };
    put_store(
        client,
        &place.table,
        store,
        &record,
        "cannot write the quarantine",
    )
    .await
}

/// The versions of one read of a namespace.
struct At {
    /// The table's identity, when the read asked for it (first grants).
    identity: Option<String>,
    namespace: String,
    store: Read<StoreRecord>,
    layout: Read<()>,
    workers: Vec<(u32, Read<WorkerItem>)>,
}

/// The rule's reads and conditional writes on one client.
struct Calls<'a> {
    client: &'a Client,
    place: &'a Place,
}

impl Calls<'_> {
    /// One read of what the rule needs; `None` when a first grant that
    /// committed between its calls left it incomplete (read again).
    async fn read_once(&mut self, request: &GrantRequest) -> Result<Option<Seen<At>>, GrantError> {
        let table = &self.place.table;
        let pk = ns_pk(&request.namespace);
        let first = request.worker.is_none();
        let mut keys = vec![key(STORE_PK, STORE_SK), key(&pk, LAYOUT_SK)];
        if let Some(w) = request.worker {
            keys.push(key(&pk, &worker_sk(w)));
        }
        let items = get_items(self.client, table, keys).await?;
        // The identity after the items: a table swapped between the two
        // calls shows its new identity beside the old table's record.
        let identity = if first {
            Some(identity(self.client, table).await?)
        } else {
            None
        };
        let store = Read::of(items[0].as_ref(), StoreRecord::decode)?;
        let layout = Read::of(items[1].as_ref(), decode_registered)?;
        let loss = match (&store.value, &identity) {
            (None, _) => {
                Some("the table had no grantid state (never used, created again, or lost)".into())
            }
            (Some(s), Some(now)) if &s.table != now => Some(format!(
                "the table's identity changed from {:?} to {now:?} (it was deleted and created \
                 again, or restored from a backup or to a point in time)",
                s.table
            )),
            _ => None,
        };
        let mut workers = Vec::new();
        // Over a loss nothing of the workers is read: the quarantine is
        // written first, whatever their items hold.
        if loss.is_none() {
            let worker_items = if first {
                query(self.client, table, &pk, WORKER_PREFIX).await?
            } else {
                items[2..].iter().flatten().cloned().collect()
            };
            // Worker items without the namespace's item (deleted by hand,
            // or a partial restore): their high-water marks are ticks of a
            // layout no item records any more, and registering the
            // request's could number IDs as theirs did.
            let registered = layout.value.as_ref().map(|r| r.layout);
            // With no item to read, any layout reads them (none).
            let Some(decoding) = registered.or(worker_items.is_empty().then_some(request.layout))
            else {
                // Workers seen beside no namespace item: either a first
                // grant committed between the two calls (it writes both at
                // once: the item is there now), or the item is gone.
                let again = get_items(self.client, table, vec![key(&pk, LAYOUT_SK)]).await?;
                if again[0].is_some() {
                    return Ok(None);
                }
                return Err(GrantError::Refused(format!(
                    "dynamodb: namespace {:?} has {} worker item(s) but no LAYOUT item (PK \
                     {pk:?}, SK {LAYOUT_SK:?}): put the item back from a backup, or use \
                     another namespace",
                    request.namespace,
                    worker_items.len()
                )));
            };
            for item in &worker_items {
                let Some(w) = worker_of(item) else { continue };
                let read = Read::of(Some(item), |i| WorkerItem::decode(i, &decoding))?;
                workers.push((w, read));
            }
        }
        let mut rule_workers = grantid::Workers::default();
        let mut answer = None;
        for (w, r) in &workers {
            let Some(item) = &r.value else { continue };
            *rule_workers.record(*w) = item.record.clone();
            if let Some(last) = item.last
                && last.incarnation == request.incarnation
                && last.request_id == request.request_id
            {
                answer = Some(Grant {
                    namespace: request.namespace.clone(),
                    worker: *w,
                    incarnation: request.incarnation,
                    grant_id: item.record.fencing,
                    start: last.start,
                    end: last.end,
                });
            }
        }
        Ok(Some(Seen {
            registered: layout.value,
            workers: rule_workers,
            answer,
            quarantine: store.value.as_ref().map(StoreRecord::quarantine),
            loss,
            at: At {
                identity,
                namespace: request.namespace.clone(),
                store,
                layout: Read {
                    value: None,
                    version: layout.version,
                },
                workers,
            },
        }))
    }
}

impl cas::Store for Calls<'_> {
    type At = At;

    async fn read(&mut self, request: &GrantRequest) -> Result<Seen<At>, GrantError> {
        // Bounded by the call's deadline, as every attempt is.
        loop {
            if let Some(seen) = self.read_once(request).await? {
                return Ok(seen);
            }
        }
    }

    async fn quarantine(
        &mut self,
        at: &At,
        now_ms: u64,
        hold_ms: u64,
        reason: String,
    ) -> Result<bool, GrantError> {
        let table = match &at.identity {
            Some(t) => t.clone(),
            None => identity(self.client, &self.place.table).await?,
        };
        quarantine(
            self.client,
            self.place,
            &at.store,
            table,
            now_ms,
            hold_ms,
            reason,
        )
        .await
    }

    async fn put_namespace(&mut self, at: &At, namespace: &Registered) -> Result<bool, GrantError> {
        let put = at
            .layout
            .put(&self.place.table, registered_item(&at.namespace, namespace))?;
        write(
            self.client,
            vec![TransactWriteItem::builder().put(put).build()],
            "cannot register the namespace",
        )
        .await
    }

    async fn put_grant(
        &mut self,
        at: &At,
        request: &GrantRequest,
        grant: &Grant,
        record: &grantid::WorkerRecord,
        namespace: Option<&Registered>,
    ) -> Result<bool, GrantError> {
        let table = &self.place.table;
        let absent = Read::absent();
        let current = at
            .workers
            .iter()
            .find(|(w, _)| *w == grant.worker)
            .map_or(&absent, |(_, r)| r);
        let next = WorkerItem {
            record: record.clone(),
            last: Some(LastGrant {
                incarnation: request.incarnation,
                request_id: request.request_id,
                start: grant.start,
                end: grant.end,
            }),
        };
        let mut items = vec![
            TransactWriteItem::builder()
                .condition_check(at.store.check(table, key(STORE_PK, STORE_SK))?)
                .build(),
            TransactWriteItem::builder()
                .put(current.put(
                    table,
                    next.item(&request.namespace, grant.worker, &request.layout),
                )?)
                .build(),
        ];
        if let Some(namespace) = namespace {
            items.push(
                TransactWriteItem::builder()
                    .put(
                        at.layout
                            .put(table, registered_item(&request.namespace, namespace))?,
                    )
                    .build(),
            );
        }
        write(self.client, items, "cannot write the grant").await
    }
}

impl GrantSource for DynamoAuthority {
    fn max_lead_ms(&self) -> Option<u64> {
        Some(self.ctx.options.max_lead_ms)
    }

    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        crate::kernel::check_namespace(&request.namespace)?;
        let ctx = Arc::clone(&self.ctx);
        let request = request.clone();
        self.call("acquire failed", move |client, place| {
            Box::pin(async move {
                let mut calls = Calls { client, place };
                cas::grant(&mut calls, &request, &ctx.options, || ctx.now_ms()).await
            })
        })?
    }

    fn release(&self, last: &Grant) {
        let pk = ns_pk(&last.namespace);
        let worker = last.worker;
        let namespace = last.namespace.clone();
        let incarnation = last.incarnation;
        let now_ms = self.ctx.now_ms();
        let _ = self.call("release failed", move |client, place| {
            Box::pin(async move {
                let table = &place.table;
                for _ in 0..8 {
                    let items = get_items(
                        client,
                        table,
                        vec![key(&pk, LAYOUT_SK), key(&pk, &worker_sk(worker))],
                    )
                    .await?;
                    let (Some(layout), Some(item)) = (&items[0], &items[1]) else {
                        return Ok(());
                    };
                    let layout = decode_registered(layout)?.layout;
                    let current = Read::of(Some(item), |i| WorkerItem::decode(i, &layout))?;
                    let Some(rec) = &current.value else {
                        return Ok(());
                    };
                    let now = layout.tick_at(now_ms);
                    let Some(released) = rule::release(&rec.record, incarnation, now) else {
                        return Ok(());
                    };
                    let next = WorkerItem {
                        record: released,
                        last: rec.last,
                    };
                    let put = current.put(table, next.item(&namespace, worker, &layout))?;
                    let items = vec![TransactWriteItem::builder().put(put).build()];
                    if write(client, items, "cannot write").await? {
                        return Ok(());
                    }
                }
                Ok(())
            })
        });
    }
}

/// The table as `DescribeTable` shows it, for `init`.
struct Described {
    status: String,
    identity: String,
    billing: String,
    keys: Vec<(String, String)>,
}

async fn describe(client: &Client, table: &str) -> Result<Option<Described>, GrantError> {
    let out = match client.describe_table().table_name(table).send().await {
        Ok(out) => out,
        Err(e) if e.code() == Some("ResourceNotFoundException") => return Ok(None),
        Err(e) => return Err(sdk_error("cannot describe the table", e)),
    };
    let Some(t) = out.table() else {
        return Ok(None);
    };
    let types: HashMap<&str, String> = t
        .attribute_definitions()
        .iter()
        .map(|a| (a.attribute_name(), a.attribute_type().as_str().to_owned()))
        .collect();
    let keys = t
        .key_schema()
        .iter()
        .map(|k| {
            (
                format!("{} {}", k.attribute_name(), k.key_type().as_str()),
                types.get(k.attribute_name()).cloned().unwrap_or_default(),
            )
        })
        .collect();
    Ok(Some(Described {
        status: t
            .table_status()
            .map_or_else(|| "UNKNOWN".to_owned(), |s| s.as_str().to_owned()),
        identity: identity_of(t).unwrap_or_default(),
        billing: t
            .billing_mode_summary()
            .and_then(|b| b.billing_mode())
            .map_or_else(|| "PROVISIONED".to_owned(), |b| b.as_str().to_owned()),
        keys,
    }))
}

/// The key schema grantid's items need.
fn wanted_keys() -> Vec<(String, String)> {
    vec![
        ("PK HASH".to_owned(), "S".to_owned()),
        ("SK RANGE".to_owned(), "S".to_owned()),
    ]
}

/// Creates `table` (on-demand capacity, key `PK`/`SK`) and waits until it
/// is ACTIVE; `false` when it already existed.
async fn create_table(client: &Client, table: &str) -> Result<bool, GrantError> {
    let attribute = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(|e| unavailable("cannot build the table", e))
    };
    let schema = |name: &str, kind: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
            .map_err(|e| unavailable("cannot build the table", e))
    };
    let created = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attribute("PK")?)
        .attribute_definitions(attribute("SK")?)
        .key_schema(schema("PK", KeyType::Hash)?)
        .key_schema(schema("SK", KeyType::Range)?)
        .send()
        .await;
    match created {
        Ok(_) => {}
        Err(e) if e.code() == Some("ResourceInUseException") => return Ok(false),
        Err(e) => return Err(sdk_error("cannot create the table", e)),
    }
    loop {
        if let Some(d) = describe(client, table).await?
            && d.status == TableStatus::Active.as_str()
        {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

impl Authority for DynamoAuthority {
    fn init(&self) -> Result<String, Error> {
        let (created, described, store) = self
            .call_within(CREATE_WAIT, "init failed", |client, place| {
                Box::pin(async move {
                    let created = match describe(client, &place.table).await? {
                        Some(_) => false,
                        None => create_table(client, &place.table).await?,
                    };
                    let described = describe(client, &place.table).await?;
                    let store = match &described {
                        Some(d) if d.keys == wanted_keys() => {
                            read_store(client, &place.table).await?.value
                        }
                        _ => None,
                    };
                    Ok((created, described, store))
                })
            })
            .map_err(Error::from)?;
        let table = &self.place.table;
        let Some(d) = described else {
            return Err(Error::new(
                ErrorKind::Unavailable,
                format!("dynamodb: table {table} was created but DescribeTable does not show it"),
            ));
        };
        if d.keys != wanted_keys() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "dynamodb: table {table} has the key {:?}; grantid needs PK (string, \
                     partition key) and SK (string, sort key): name another table, or create \
                     this one with `grantid authority init`",
                    d.keys
                ),
            ));
        }
        Ok(format!(
            "dynamodb table {table} ({}): {}, {}, {}; store record {}",
            d.identity,
            if created { "created" } else { "present" },
            d.status,
            d.billing,
            match store {
                Some(s) => format!(
                    "present (quarantine {}, until Unix ms {})",
                    s.quarantines, s.until_ms
                ),
                None => "missing: the first grant starts a quarantine".into(),
            }
        ))
    }

    fn quarantine(&self) -> Result<Option<Quarantine>, Error> {
        let store = self
            .call("cannot read the store record", |client, place| {
                Box::pin(async move { Ok(read_store(client, &place.table).await?.value) })
            })
            .map_err(Error::from)?;
        Ok(store.as_ref().map(StoreRecord::quarantine))
    }

    fn lift_quarantine(&self) -> Result<String, Error> {
        let was = self
            .call("cannot lift the quarantine", |client, place| {
                Box::pin(async move {
                    loop {
                        let store = read_store(client, &place.table).await?;
                        let Some(old) = store.value.clone() else {
                            return Ok(None);
                        };
                        let record = StoreRecord {
                            until_ms: 0,
                            since_ms: 0,
                            reason: format!("lifted by the operator (was: {})", old.reason),
                            ..old.clone()
                        };
                        if put_store(client, &place.table, &store, &record, "cannot write").await? {
                            return Ok(Some(old.quarantine()));
                        }
                    }
                })
            })
            .map_err(Error::from)?;
        Ok(crate::kernel::lifted(
            "dynamodb",
            was.as_ref(),
            self.ctx.now_ms(),
        ))
    }

    fn init_new_deployment(&self) -> Result<String, Error> {
        let report = self.init()?;
        let created = self
            .call("new deployment failed", |client, place| {
                Box::pin(async move {
                    let store = read_store(client, &place.table).await?;
                    if store.value.is_some() {
                        return Ok(false);
                    }
                    let record = StoreRecord {
                        table: identity(client, &place.table).await?,
                        quarantines: 1,
                        until_ms: 0,
                        since_ms: 0,
                        reason: "new deployment (operator)".into(),
                    };
                    put_store(client, &place.table, &store, &record, "cannot write").await
                })
            })
            .map_err(Error::from)?;
        Ok(crate::kernel::reports::declared(&report, created, "store"))
    }

    fn fence(&self) -> Result<String, Error> {
        let now_ms = self.ctx.now_ms();
        let hold = self.ctx.hold_ms();
        let until = self
            .call("fence failed", move |client, place| {
                Box::pin(async move {
                    loop {
                        let store = read_store(client, &place.table).await?;
                        let table = match &store.value {
                            Some(s) => s.table.clone(),
                            None => identity(client, &place.table).await?,
                        };
                        let until = store
                            .value
                            .as_ref()
                            .map_or(0, |s| s.until_ms)
                            .max(now_ms + hold);
                        let reason = "fenced by the operator".to_owned();
                        if quarantine(client, place, &store, table, now_ms, hold, reason).await? {
                            return Ok(until);
                        }
                    }
                })
            })
            .map_err(Error::from)?;
        Ok(crate::kernel::reports::fenced(until, &self.ctx.options))
    }

    fn status(&self, namespace: Option<&str>) -> Result<Vec<WorkerStatus>, Error> {
        let pk = namespace.map(ns_pk);
        let items = self
            .call("cannot read", move |client, place| {
                Box::pin(async move {
                    match pk {
                        Some(pk) => query(client, &place.table, &pk, "").await,
                        None => scan(client, &place.table).await,
                    }
                })
            })
            .map_err(Error::from)?;
        let mut layouts = HashMap::new();
        for item in &items {
            if let (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) =
                (item.get("PK"), item.get("SK"))
                && sk == LAYOUT_SK
                && let Some(ns) = pk.strip_prefix("NS#")
            {
                layouts.insert(ns.to_owned(), decode_registered(item)?.layout);
            }
        }
        let mut out = Vec::new();
        for item in &items {
            let (Some(AttributeValue::S(pk)), Some(w)) = (item.get("PK"), worker_of(item)) else {
                continue;
            };
            let Some(ns) = pk.strip_prefix("NS#") else {
                continue;
            };
            let Some(layout) = layouts.get(ns) else {
                continue;
            };
            let rec = WorkerItem::decode(item, layout)?.record;
            out.push(WorkerStatus {
                namespace: ns.to_owned(),
                layout: *layout,
                worker: w,
                holder: rec.holder,
                lease_expiry: rec.lease_expiry,
                high_water: rec.high_water,
                fencing: rec.fencing,
            });
        }
        out.sort_by(|a, b| (&a.namespace, a.worker).cmp(&(&b.namespace, b.worker)));
        Ok(out)
    }
}

/// Every item of the table, read consistently.
async fn scan(client: &Client, table: &str) -> Result<Vec<Item>, GrantError> {
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let out = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| sdk_error("cannot read", e))?;
        items.extend(out.items().iter().cloned());
        match out.last_evaluated_key() {
            Some(k) if !k.is_empty() => start = Some(k.clone()),
            _ => return Ok(items),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout::default()
    }

    #[test]
    fn a_worker_item_reads_back_as_written() {
        let w = WorkerItem {
            record: grantid::WorkerRecord {
                holder: Some(0xdead_beef),
                lease_expiry: 123_456,
                high_water: 200_000,
                fencing: 7,
                used: true,
            },
            last: Some(LastGrant {
                incarnation: 0xdead_beef,
                request_id: 3,
                start: 100_000,
                end: 200_000,
            }),
        };
        let item = w.item("orders", 4, &layout());
        assert_eq!(worker_of(&item), Some(4));
        assert_eq!(item["instance_id"], s("0xdeadbeef"));
        // The service design's names, its lease in Unix ms.
        assert_eq!(item["lease_expiry_ts"], n(layout().unix_ms_of(123_456)));
        assert_eq!(item["fencing_epoch"], n(7));
        assert_eq!(WorkerItem::decode(&item, &layout()).unwrap(), w);
    }

    #[test]
    fn a_malformed_item_is_unavailable() {
        let mut item = WorkerItem {
            record: grantid::WorkerRecord::default(),
            last: None,
        }
        .item("a", 1, &layout());
        item.insert("high_water".into(), s("ten"));
        let e = WorkerItem::decode(&item, &layout()).unwrap_err();
        assert!(
            matches!(&e, GrantError::Unavailable(m) if m.contains("high_water")),
            "{e:?}"
        );
        item.insert("high_water".into(), n(1));
        item.insert("instance_id".into(), s("me"));
        assert!(WorkerItem::decode(&item, &layout()).is_err());
    }

    #[test]
    fn only_failed_conditions_and_conflicts_are_decided_again() {
        use aws_sdk_dynamodb::types::CancellationReason;
        use aws_sdk_dynamodb::types::error::TransactionCanceledException;
        let cancelled = |codes: &[&str]| {
            TransactionCanceledException::builder()
                .set_cancellation_reasons(Some(
                    codes
                        .iter()
                        .map(|c| CancellationReason::builder().code(*c).build())
                        .collect(),
                ))
                .build()
        };
        assert!(conflict_only(Some(&cancelled(&[
            "None",
            "TransactionConflict"
        ]))));
        assert!(conflict_only(Some(&cancelled(&[
            "ConditionalCheckFailed",
            "None"
        ]))));
        assert!(!conflict_only(Some(&cancelled(&[
            "None",
            "ValidationError"
        ]))));
        assert!(!conflict_only(Some(&cancelled(&["ThrottlingError"]))));
        assert!(!conflict_only(Some(&cancelled(&["None"]))));
        assert!(!conflict_only(None));
    }

    #[test]
    fn namespaces_keep_their_own_partition() {
        assert_eq!(ns_pk("a"), "NS#a");
        assert_ne!(ns_pk("a#b"), ns_pk("a"));
        assert!(!STORE_PK.starts_with("NS#"));
    }

    #[test]
    fn from_url_refuses_another_engines_url() {
        let e = DynamoAuthority::from_url("etcd://h:2379", Options::default()).unwrap_err();
        assert!(
            e.message().contains("not a URL of the dynamodb engine"),
            "{e}"
        );
        assert!(DynamoAuthority::from_url("dynamodb://ids", Options::default()).is_ok());
    }
}
