//! The etcd authority, `etcd://HOST:PORT[,HOST:PORT...]` (feature `etcd`):
//! the allocation rule as optimistic transactions on etcd's keys.
//! `etcds://` is the same over TLS (tonic's rustls): the members'
//! certificates checked against `tls_ca` (else the system's roots) and the
//! endpoint's host name, a client certificate from `tls_cert` and `tls_key`
//! (docs/reference/etcd.md, "Connecting securely").
//!
//! Each grant reads the store record, the namespace's layout and the
//! worker record(s) in one read-only transaction (one revision), checks the
//! store's identity (below), decides by [`grantid::rule::decide`] in the
//! shared read → decide → conditional-write loop (`authority/src/cas.rs`:
//! this file holds no rule and no loop of its own, only the keys, their
//! records, and the transactions), then writes in one transaction that compares the `mod_revision`
//! of every key it decided on (`create_revision == 0` for a key it creates):
//! if any changed meanwhile the write does nothing and the grant is decided
//! again from fresh reads, within `timeout_ms`. A first grant (no worker
//! asked for) also rewrites the layout record, so first grants of a
//! namespace are serialised on it; renewals of different workers do not
//! conflict. Keys (the namespace with `/` written `%2F`):
//!
//! * `grantid/store`: the store-wide state-loss record (cluster id,
//!   quarantine, reason);
//! * `grantid/ns/<ns>/layout`: the layout and `next_unused`;
//! * `grantid/ns/<ns>/w/<worker>`: holder, lease expiry, high-water, fencing
//!   token (the `grant_id`) and the last grant with its (incarnation,
//!   request_id), which answers a retry.
//!
//! Values are JSON. etcd's own history of each worker key (its revisions,
//! until compaction) is the grant log. Authority time is this host's clock
//! (etcd has no clock to read): hosts' clocks must agree within
//! `clock_skew_ms`, which every quarantine adds. Lease expiry is explicit
//! (ticks in the worker record), as in the other authorities; no etcd lease
//! is used, so a grant costs two round trips and no keep-alive traffic.
//!
//! State loss (docs/reference/etcd.md, "State loss"): a missing store record, a
//! cluster id other than the recorded one, or a revision lower than one
//! this process has already seen from the cluster (the data went back: a
//! restore of a snapshot or of a data directory) start a quarantine of
//! `max_lead_ms + clock_skew_ms` before anything is granted.

pub(crate) mod url;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, Identity, KeyValue,
    ResponseHeader, TlsOptions, Txn, TxnOp, TxnOpResponse,
};
use grantid::rule::{self, Registered};
use grantid::{
    Clock, Error, ErrorKind, Grant, GrantError, GrantRequest, GrantSource, Layout, Workers,
};
use serde::{Deserialize, Serialize};

use crate::blocking::{Blocking, Work};
use crate::cas::{self, Seen};
use crate::kernel::{Authority, Sessions, WorkerStatus};
use crate::url::{Options, Target, TlsFiles};

/// The registry's opener of etcd URLs: `n` sessions, a connection each,
/// which share the revision floor and whether the cluster was once
/// connected to.
pub(crate) fn open(
    url: &str,
    target: Target,
    options: Options,
    n: usize,
) -> Result<Sessions, Error> {
    Ok(Sessions::siblings(
        EtcdAuthority::open(url, target, options)?,
        n,
        EtcdAuthority::sibling,
    ))
}

/// The key of the store-wide state-loss record.
pub const STORE_KEY: &str = "grantid/store";
/// The prefix of every namespace's keys.
const NS_PREFIX: &str = "grantid/ns/";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoreRecord {
    cluster_id: u64,
    /// +1 per quarantine (stored as `epoch`, the name older versions read).
    #[serde(rename = "epoch")]
    quarantines: u64,
    quarantine_until_ms: u64,
    reason: String,
    /// When the latest quarantine started (Unix ms): a namespace waits at
    /// least its recorded lead and skew from it.
    #[serde(default)]
    quarantine_since_ms: u64,
}

/// Writes the store record `record` if it is still as `store` read it.
async fn put_store(
    client: &mut Client,
    store: &Read<StoreRecord>,
    record: &StoreRecord,
    what: &str,
) -> Result<etcd_client::TxnResponse, GrantError> {
    let txn = Txn::new()
        .when([store.unchanged(STORE_KEY)])
        .and_then([TxnOp::put(STORE_KEY, encode(record), None)]);
    client.txn(txn).await.map_err(|e| unavailable(what, e))
}

/// The quarantine a store record holds.
fn quarantine_of(s: &StoreRecord) -> grantid::rule::Quarantine {
    grantid::rule::Quarantine {
        until_ms: s.quarantine_until_ms,
        since_ms: s.quarantine_since_ms,
        reason: s.reason.clone(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct LayoutRecord {
    timestamp_bits: u8,
    worker_bits: u8,
    sequence_bits: u8,
    epoch_ms: u64,
    tick_ms: u64,
    next_unused: u64,
    /// [`grantid::Layout::split_bits`], registered with the layout.
    #[serde(default)]
    split_bits: u8,
    /// The largest `max_lead_ms` and `clock_skew_ms` any caller used on the
    /// namespace: raised with a grant, never lowered.
    #[serde(default)]
    max_lead_ms: u64,
    #[serde(default)]
    clock_skew_ms: u64,
}

impl LayoutRecord {
    /// The record as the rule reads it.
    fn registered(&self) -> Result<Registered, GrantError> {
        let layout = Layout::registered(
            self.timestamp_bits,
            self.worker_bits,
            self.sequence_bits,
            self.epoch_ms,
            self.tick_ms,
            self.split_bits,
        )
        .map_err(|e| unavailable("malformed record", format!("a namespace's layout: {e}")))?;
        Ok(Registered {
            layout,
            next_unused: self.next_unused,
            max_lead_ms: self.max_lead_ms,
            clock_skew_ms: self.clock_skew_ms,
        })
    }

    /// The record of what the rule registered.
    fn of(r: &Registered) -> LayoutRecord {
        let l = r.layout;
        LayoutRecord {
            timestamp_bits: l.timestamp_bits(),
            worker_bits: l.worker_bits(),
            sequence_bits: l.sequence_bits(),
            epoch_ms: l.epoch_ms(),
            tick_ms: l.tick_ms(),
            next_unused: r.next_unused,
            split_bits: l.split_bits(),
            max_lead_ms: r.max_lead_ms,
            clock_skew_ms: r.clock_skew_ms,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct LastGrant {
    incarnation: u64,
    request_id: u64,
    start: u64,
    end: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct WorkerValue {
    holder: Option<u64>,
    lease_expiry: u64,
    high_water: u64,
    fencing: u64,
    last: Option<LastGrant>,
}

impl WorkerValue {
    /// The record as the rule reads it (a worker with a key was used).
    fn rule_record(&self) -> grantid::WorkerRecord {
        grantid::WorkerRecord {
            holder: self.holder,
            lease_expiry: self.lease_expiry,
            high_water: self.high_water,
            fencing: self.fencing,
            used: true,
        }
    }

    /// The record to store for the rule's `record`, answering a retry with
    /// `last`.
    fn of_rule(record: &grantid::WorkerRecord, last: Option<LastGrant>) -> WorkerValue {
        WorkerValue {
            holder: record.holder,
            lease_expiry: record.lease_expiry,
            high_water: record.high_water,
            fencing: record.fencing,
            last,
        }
    }
}

/// A decoded key with the revision it was read at (0: absent).
struct Read<T> {
    value: Option<T>,
    mod_revision: i64,
}

/// A worker key that was not read: absent.
static ABSENT: Read<WorkerValue> = Read {
    value: None,
    mod_revision: 0,
};

impl<T> Read<T> {
    /// The compare that holds while the key is as read.
    fn unchanged(&self, key: &str) -> Compare {
        if self.value.is_some() {
            Compare::mod_revision(key, CompareOp::Equal, self.mod_revision)
        } else {
            Compare::create_revision(key, CompareOp::Equal, 0)
        }
    }
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> GrantError {
    GrantError::Unavailable(format!("etcd: {what}: {e}"))
}

/// An error with its causes: tonic's transport error says only "transport
/// error", the certificate check that failed is a few causes down.
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let more = cause.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        next = cause.source();
    }
    text
}

/// Builds the TLS settings of an `etcds://` URL from its files (read and
/// checked here, so a missing or malformed one fails the opening).
fn tls_options(url: &str, files: &TlsFiles) -> Result<TlsOptions, Error> {
    use crate::tls;
    let mut options = TlsOptions::new();
    options = match &files.ca {
        Some(path) => {
            tls::roots_from_file(url, "tls_ca", path)?;
            options.ca_certificate(Certificate::from_pem(tls::read_pem(
                url, "tls_ca", path, false,
            )?))
        }
        None => options.trust_anchors(tls::system_roots(url, "tls_ca")?.roots),
    };
    Ok(
        match tls::client_pem(
            url,
            ["tls_cert", "tls_key"],
            files.cert.as_deref(),
            files.key.as_deref(),
        )? {
            Some((cert, key)) => options.identity(Identity::from_pem(cert, key)),
            None => options,
        },
    )
}

fn decode<T: for<'de> Deserialize<'de>>(kv: &KeyValue) -> Result<T, GrantError> {
    serde_json::from_slice(kv.value()).map_err(|e| {
        unavailable(
            "malformed record",
            format!("{}: {e}", String::from_utf8_lossy(kv.key())),
        )
    })
}

fn read_one<T: for<'de> Deserialize<'de>>(kvs: &[KeyValue]) -> Result<Read<T>, GrantError> {
    match kvs.first() {
        Some(kv) => Ok(Read {
            value: Some(decode(kv)?),
            mod_revision: kv.mod_revision(),
        }),
        None => Ok(Read {
            value: None,
            mod_revision: 0,
        }),
    }
}

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

/// `grantid/ns/<ns>/`: the namespace's key prefix (`/` written `%2F`, so
/// one namespace's prefix is never another's).
fn ns_prefix(namespace: &str) -> String {
    format!("{NS_PREFIX}{}/", namespace.replace('/', "%2F"))
}

fn worker_key(prefix: &str, worker: u64) -> String {
    format!("{prefix}w/{worker}")
}

/// What a transaction of reads returned: its header and each get's pairs.
struct Snapshot {
    cluster_id: u64,
    revision: i64,
    gets: Vec<Vec<KeyValue>>,
}

/// The header and get results of a transaction; a malformed answer (a get
/// without its response, which etcd-client would panic on) is `Unavailable`.
fn snapshot(resp: &etcd_client::TxnResponse) -> Result<Snapshot, GrantError> {
    let header: &ResponseHeader = resp
        .header()
        .ok_or_else(|| unavailable("malformed answer", "no header"))?;
    let ops = std::panic::catch_unwind(AssertUnwindSafe(|| resp.op_responses()))
        .map_err(|_| unavailable("malformed answer", "a transaction answer without a result"))?;
    let gets = ops
        .into_iter()
        .map(|op| match op {
            TxnOpResponse::Get(g) => Ok(g.kvs().to_vec()),
            _ => Err(unavailable("malformed answer", "not a get")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Snapshot {
        cluster_id: header.cluster_id(),
        revision: header.revision(),
        gets,
    })
}

/// The etcd authority. See the module docs.
pub struct EtcdAuthority {
    endpoints: Vec<String>,
    /// `etcds://`: the TLS settings (the files read when the URL was
    /// opened), and whether they hold a client certificate.
    tls: Option<(TlsOptions, bool)>,
    ctx: Arc<Ctx>,
    conn: Blocking<Client>,
}

/// What a call needs besides the client (shared with the call's future).
struct Ctx {
    options: Options,
    clock: Option<Arc<dyn Clock>>,
    /// The highest revision seen from the cluster by this process: a lower
    /// one later means the data went back in time.
    seen_revision: AtomicI64,
    /// Whether the cluster was reached: until then a certificate check
    /// that fails is `Refused`, after it `Unavailable`.
    reached: crate::tls::Reached,
}

impl std::fmt::Debug for EtcdAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdAuthority")
            .field("endpoints", &self.endpoints)
            .finish_non_exhaustive()
    }
}

impl EtcdAuthority {
    /// A client of the cluster at `endpoints` (`HOST:PORT` each). Does not
    /// connect.
    pub fn new(endpoints: Vec<String>, options: Options) -> Result<EtcdAuthority, Error> {
        if endpoints.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "authority URL: expected etcd://HOST:PORT[,HOST:PORT...]",
            ));
        }
        Ok(EtcdAuthority {
            endpoints,
            tls: None,
            ctx: Arc::new(Ctx {
                options,
                clock: None,
                seen_revision: AtomicI64::new(0),
                reached: crate::tls::Reached::default(),
            }),
            conn: Blocking::new("etcd"),
        })
    }

    /// The authority of a parsed `etcd://` or `etcds://` URL (`url` names
    /// it in messages); the PEM files of `etcds://` are read here.
    pub(crate) fn open(
        url: &str,
        target: Target,
        options: Options,
    ) -> Result<EtcdAuthority, Error> {
        match target {
            Target::Etcd(endpoints) => EtcdAuthority::new(endpoints, options),
            Target::Etcds(endpoints, files) => {
                let mut authority = EtcdAuthority::new(endpoints, options)?;
                authority.tls = Some((tls_options(url, &files)?, files.cert.is_some()));
                Ok(authority)
            }
            other => Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "authority URL {:?}: not an etcd URL ({})",
                    crate::url::redact(url),
                    match other {
                        Target::File(_) | Target::Static { .. } => "a local one",
                        _ => "another server's",
                    }
                ),
            )),
        }
    }

    /// Parses an `etcd://` URL (without grantid's options, which are taken
    /// from `options`).
    pub fn from_url(url: &str, options: Options) -> Result<EtcdAuthority, Error> {
        let (scheme, rest) = url.split_once(':').unwrap_or(("", url));
        if !matches!(scheme, "etcd" | "etcds") {
            return Err(crate::kernel::not_this_engines(url, "etcd"));
        }
        let mut ignored = Options::default();
        let parts = crate::url::Parts { url, scheme, rest };
        EtcdAuthority::open(url, self::url::parse(&parts, &mut ignored)?, options)
    }

    /// Another session of the same cluster: a connection of its own, and
    /// the same revision floor, so that a store that went back in time is
    /// noticed by every session of this process whichever saw the higher
    /// revision (`crate::registry::open_sessions`).
    pub(crate) fn sibling(&self) -> EtcdAuthority {
        EtcdAuthority {
            endpoints: self.endpoints.clone(),
            tls: self.tls.clone(),
            ctx: Arc::clone(&self.ctx),
            conn: Blocking::new("etcd"),
        }
    }

    /// Replaces this host's clock by `clock`: for tests and fault injection.
    pub fn with_injected_clock(mut self, clock: Arc<dyn Clock>) -> EtcdAuthority {
        self.ctx = Arc::new(Ctx {
            options: self.ctx.options.clone(),
            clock: Some(clock),
            seen_revision: AtomicI64::new(0),
            reached: crate::tls::Reached::default(),
        });
        self
    }

    /// Runs `op` on this process's client (connecting first if needed),
    /// within one deadline of `timeout_ms`.
    fn call<T: Send + 'static>(
        &self,
        what: &str,
        op: impl for<'a> FnOnce(&'a mut Client) -> Work<'a, T> + Send + 'static,
    ) -> Result<T, GrantError> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let endpoints: Vec<String> = self
            .endpoints
            .iter()
            .map(|e| format!("{scheme}://{e}"))
            .collect();
        let tls = self.tls.clone();
        let ctx = Arc::clone(&self.ctx);
        let t = self.ctx.options.timeout;
        let answer = self
            .conn
            .call(t, what, async move |slot: &mut Option<Client>| {
                let client = match slot {
                    Some(c) => c,
                    None => {
                        let mut options = ConnectOptions::new()
                            .with_connect_timeout(t)
                            .with_timeout(t)
                            .with_keep_alive(t, t);
                        let probe = tls.is_some();
                        // Without a client certificate, a server that
                        // wants one closes the connection.
                        let hint = tls.as_ref().is_some_and(|(_, cert)| !cert);
                        if let Some((tls, _)) = tls {
                            options = options.with_tls(tls);
                        }
                        let mut c = Client::connect(endpoints, Some(options))
                            .await
                            .map_err(|e| ctx.connect_error(&e, hint))?;
                        // The channel connects on its first call: with TLS,
                        // one call here, so that a certificate check that
                        // fails is told from a call that fails.
                        if probe {
                            c.status().await.map_err(|e| ctx.connect_error(&e, hint))?;
                        }
                        slot.insert(c)
                    }
                };
                op(client).await
            });
        if answer.is_ok() {
            self.ctx.reached.mark();
        }
        answer
    }
}

/// Whether a failed connection's text says the peer ended it: an alert,
/// a close read, or a write into a closed connection.
fn closed_by_peer(text: &str) -> bool {
    [
        "connection closed",
        "fatal alert",
        "broken pipe",
        "connection reset",
    ]
    .iter()
    .any(|signal| text.contains(signal))
}

impl Ctx {
    /// A failed connection as an answer: a certificate check that failed
    /// as [`crate::tls::Reached`] says, anything else `Unavailable`.
    /// `no_client_cert`: TLS without a client certificate (the message
    /// says what a server that requires one does).
    fn connect_error(&self, e: &etcd_client::Error, no_client_cert: bool) -> GrantError {
        // etcd-client's error names no cause: start from what it wraps.
        let inner: &(dyn std::error::Error + 'static) = match e {
            etcd_client::Error::GRpcStatus(status) => status,
            etcd_client::Error::TransportError(transport) => transport,
            etcd_client::Error::IoError(io) => io,
            other => other,
        };
        let text = causes(inner);
        match crate::tls::certificate_failure(inner) {
            Some(why) => self.reached.setting_failed("etcd", format!("TLS: {why}")),
            // The member's alert arrives after the handshake (TLS 1.3):
            // read as such, or as the close that follows it (seen by a
            // read, or by a write as a broken pipe or a reset).
            None if no_client_cert && closed_by_peer(&text) => unavailable(
                "cannot connect",
                format!(
                    "{text} (an etcd with --client-cert-auth closes a connection without a \
                     client certificate: give tls_cert and tls_key)"
                ),
            ),
            None => unavailable("cannot connect", text),
        }
    }

    fn now_ms(&self) -> u64 {
        cas::now_ms(self.clock.as_ref())
    }

    /// The floor a read is checked against: the highest revision seen
    /// before the read is sent. A linearizable read sent after another
    /// answer arrived is at that answer's revision or later; one sent
    /// before it may be earlier (sessions of one process run calls at
    /// once), which is no loss.
    fn floor(&self) -> i64 {
        self.seen_revision.load(Ordering::Acquire)
    }

    /// Checks the revision of a read sent when the floor was `floor`, and
    /// raises the floor; returns why the data went back, if it did.
    fn revision_went_back(&self, floor: i64, revision: i64) -> Option<String> {
        self.seen_revision.fetch_max(revision, Ordering::AcqRel);
        (revision < floor).then(|| {
            format!(
                "the cluster's revision went back from {floor} to {revision} (a restore of a \
                 snapshot or a data directory)"
            )
        })
    }

    /// The quarantine a store needs, if any: a missing record, another
    /// cluster id, or a revision that went back.
    fn loss(&self, store: &Read<StoreRecord>, snap: &Snapshot, floor: i64) -> Option<String> {
        let back = self.revision_went_back(floor, snap.revision);
        match &store.value {
            None => Some("the store had no grantid state (never used, or lost)".into()),
            Some(s) if s.cluster_id != snap.cluster_id => Some(format!(
                "the cluster id changed from {:x} to {:x} (another cluster, or one rebuilt)",
                s.cluster_id, snap.cluster_id
            )),
            Some(_) => back,
        }
    }

    /// Writes a quarantine until `now + hold_ms` (extending any longer
    /// one). Returns false when the record changed meanwhile. The
    /// store's history starts again from the revision of this write: the
    /// quarantine covers whatever the revisions seen before stood for.
    async fn quarantine(
        &self,
        client: &mut Client,
        store: &Read<StoreRecord>,
        cluster_id: u64,
        now_ms: u64,
        hold_ms: u64,
        reason: String,
    ) -> Result<bool, GrantError> {
        let old = store
            .value
            .as_ref()
            .map(|s| (s.quarantines, s.quarantine_until_ms, s.quarantine_since_ms));
        let (quarantines, quarantine_until_ms, quarantine_since_ms) =
            cas::extended(old, now_ms, hold_ms);
        let record = StoreRecord {
            cluster_id,
            quarantines,
            quarantine_until_ms,
            reason,
            quarantine_since_ms,
        };
        let resp = put_store(client, store, &record, "cannot write the quarantine").await?;
        if resp.succeeded()
            && let Some(h) = resp.header()
        {
            self.seen_revision.store(h.revision(), Ordering::Release);
        }
        Ok(resp.succeeded())
    }

    fn hold_ms(&self) -> u64 {
        cas::hold_ms(&self.options)
    }

    /// Reads the store record (with the cluster id and revision).
    async fn read_store(client: &mut Client) -> Result<(Read<StoreRecord>, Snapshot), GrantError> {
        let resp = client
            .txn(Txn::new().and_then([TxnOp::get(STORE_KEY, None)]))
            .await
            .map_err(|e| unavailable("cannot read", e))?;
        let snap = snapshot(&resp)?;
        let store = read_one(snap.gets.first().map_or(&[][..], |v| &v[..]))?;
        Ok((store, snap))
    }
}

/// The versions of one read of a namespace: the store record, the
/// namespace's record and the worker records read, each with its revision.
struct At {
    cluster_id: u64,
    prefix: String,
    layout_key: String,
    store: Read<StoreRecord>,
    layout: Read<LayoutRecord>,
    workers: Vec<(u32, Read<WorkerValue>)>,
}

/// The rule's reads and conditional writes as etcd transactions.
struct Txns<'a> {
    ctx: &'a Ctx,
    client: &'a mut Client,
}

impl Txns<'_> {
    /// Sends `txn`, raises the revision floor; whether its compares held.
    async fn write(&mut self, txn: Txn, what: &str) -> Result<bool, GrantError> {
        let resp = self
            .client
            .txn(txn)
            .await
            .map_err(|e| unavailable(what, e))?;
        if let Some(h) = resp.header() {
            self.ctx
                .seen_revision
                .fetch_max(h.revision(), Ordering::AcqRel);
        }
        Ok(resp.succeeded())
    }
}

impl cas::Store for Txns<'_> {
    type At = At;

    /// One transaction of reads: the store record, the namespace's record
    /// and the worker (or every worker of a first grant). The store's
    /// identity and revision are checked here.
    async fn read(&mut self, request: &GrantRequest) -> Result<Seen<At>, GrantError> {
        let prefix = ns_prefix(&request.namespace);
        let layout_key = format!("{prefix}layout");
        let worker_get = match request.worker {
            Some(w) => TxnOp::get(worker_key(&prefix, u64::from(w)), None),
            None => TxnOp::get(format!("{prefix}w/"), Some(GetOptions::new().with_prefix())),
        };
        let reads = Txn::new().and_then([
            TxnOp::get(STORE_KEY, None),
            TxnOp::get(layout_key.as_str(), None),
            worker_get,
        ]);
        let floor = self.ctx.floor();
        let resp = self
            .client
            .txn(reads)
            .await
            .map_err(|e| unavailable("cannot read", e))?;
        let snap = snapshot(&resp)?;
        let [store_kvs, layout_kvs, worker_kvs] = &snap.gets[..] else {
            return Err(unavailable("malformed answer", "expected three results"));
        };
        let store: Read<StoreRecord> = read_one(store_kvs)?;
        let layout: Read<LayoutRecord> = read_one(layout_kvs)?;
        let registered = layout
            .value
            .as_ref()
            .map(LayoutRecord::registered)
            .transpose()?;
        let loss = self.ctx.loss(&store, &snap, floor);
        let mut reads: Vec<(u32, Read<WorkerValue>)> = Vec::new();
        // Over a loss nothing of the workers is read: the quarantine is
        // written first, whatever their records hold.
        for kv in worker_kvs.iter().filter(|_| loss.is_none()) {
            let key = String::from_utf8_lossy(kv.key());
            let Some(n) = key.rsplit('/').next().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            reads.push((
                n,
                Read {
                    value: Some(decode(kv)?),
                    mod_revision: kv.mod_revision(),
                },
            ));
        }
        let mut workers = Workers::default();
        let mut answer = None;
        for (n, r) in &reads {
            let Some(rec) = &r.value else { continue };
            *workers.record(*n) = rec.rule_record();
            if let Some(last) = rec.last
                && last.incarnation == request.incarnation
                && last.request_id == request.request_id
            {
                answer = Some(Grant {
                    namespace: request.namespace.clone(),
                    worker: *n,
                    incarnation: request.incarnation,
                    grant_id: rec.fencing,
                    start: last.start,
                    end: last.end,
                });
            }
        }
        Ok(Seen {
            registered,
            workers,
            answer,
            quarantine: store.value.as_ref().map(quarantine_of),
            loss,
            at: At {
                cluster_id: snap.cluster_id,
                prefix,
                layout_key,
                store,
                layout,
                workers: reads,
            },
        })
    }

    async fn quarantine(
        &mut self,
        at: &At,
        now_ms: u64,
        hold_ms: u64,
        reason: String,
    ) -> Result<bool, GrantError> {
        self.ctx
            .quarantine(
                self.client,
                &at.store,
                at.cluster_id,
                now_ms,
                hold_ms,
                reason,
            )
            .await
    }

    async fn put_namespace(&mut self, at: &At, namespace: &Registered) -> Result<bool, GrantError> {
        let txn = Txn::new()
            .when(vec![at.layout.unchanged(&at.layout_key)])
            .and_then(vec![TxnOp::put(
                at.layout_key.as_str(),
                encode(&LayoutRecord::of(namespace)),
                None,
            )]);
        self.write(txn, "cannot register the namespace").await
    }

    async fn put_grant(
        &mut self,
        at: &At,
        request: &GrantRequest,
        grant: &Grant,
        record: &grantid::WorkerRecord,
        namespace: Option<&Registered>,
    ) -> Result<bool, GrantError> {
        let wkey = worker_key(&at.prefix, u64::from(grant.worker));
        let current = at
            .workers
            .iter()
            .find(|(n, _)| *n == grant.worker)
            .map_or(&ABSENT, |(_, r)| r);
        let next = WorkerValue::of_rule(
            record,
            Some(LastGrant {
                incarnation: request.incarnation,
                request_id: request.request_id,
                start: grant.start,
                end: grant.end,
            }),
        );
        let mut compares = vec![at.store.unchanged(STORE_KEY), current.unchanged(&wkey)];
        let mut puts = vec![TxnOp::put(wkey.as_str(), encode(&next), None)];
        if let Some(namespace) = namespace {
            compares.push(at.layout.unchanged(&at.layout_key));
            puts.push(TxnOp::put(
                at.layout_key.as_str(),
                encode(&LayoutRecord::of(namespace)),
                None,
            ));
        }
        self.write(
            Txn::new().when(compares).and_then(puts),
            "cannot write the grant",
        )
        .await
    }
}

impl GrantSource for EtcdAuthority {
    fn max_lead_ms(&self) -> Option<u64> {
        Some(self.ctx.options.max_lead_ms)
    }

    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        self.ctx.reached.renewing(request);
        crate::kernel::check_namespace(&request.namespace)?;
        let l = request.layout;
        if l.timestamp_bits() > 62 {
            return Err(GrantError::Refused(
                "the etcd authority supports at most 62 timestamp bits".into(),
            ));
        }
        let ctx = Arc::clone(&self.ctx);
        let request = request.clone();
        self.call("acquire failed", move |c| {
            Box::pin(async move {
                let mut txns = Txns {
                    ctx: &ctx,
                    client: c,
                };
                cas::grant(&mut txns, &request, &ctx.options, || ctx.now_ms()).await
            })
        })?
    }

    fn release(&self, last: &Grant) {
        let prefix = ns_prefix(&last.namespace);
        let key = worker_key(&prefix, u64::from(last.worker));
        let layout_key = format!("{prefix}layout");
        let incarnation = last.incarnation;
        let now_ms = self.ctx.now_ms();
        let _ = self.call("release failed", move |c| {
            Box::pin(async move {
                for _ in 0..8 {
                    let resp = c
                        .txn(Txn::new().and_then([
                            TxnOp::get(key.as_str(), None),
                            TxnOp::get(layout_key.as_str(), None),
                        ]))
                        .await
                        .map_err(|e| unavailable("cannot read", e))?;
                    let snap = snapshot(&resp)?;
                    let [w, lay] = &snap.gets[..] else {
                        return Err(unavailable("malformed answer", "expected two results"));
                    };
                    let current: Read<WorkerValue> = read_one(w)?;
                    let layout: Read<LayoutRecord> = read_one(lay)?;
                    let (Some(rec), Some(lay)) = (&current.value, layout.value) else {
                        return Ok(());
                    };
                    let now = now_ms.saturating_sub(lay.epoch_ms) / lay.tick_ms.max(1);
                    let Some(released) = rule::release(&rec.rule_record(), incarnation, now) else {
                        return Ok(());
                    };
                    let rec = WorkerValue::of_rule(&released, rec.last);
                    let resp = c
                        .txn(
                            Txn::new()
                                .when([current.unchanged(&key)])
                                .and_then([TxnOp::put(key.as_str(), encode(&rec), None)]),
                        )
                        .await
                        .map_err(|e| unavailable("cannot write", e))?;
                    if resp.succeeded() {
                        return Ok(());
                    }
                }
                Ok(())
            })
        });
    }
}

impl Authority for EtcdAuthority {
    fn init(&self) -> Result<String, Error> {
        let (version, cluster_id, revision, store) = self
            .call("init failed", |c| {
                Box::pin(async move {
                    let status = c
                        .status()
                        .await
                        .map_err(|e| unavailable("cannot read the member status", e))?;
                    let (store, snap) = Ctx::read_store(c).await?;
                    Ok((
                        status.version().to_owned(),
                        snap.cluster_id,
                        snap.revision,
                        store.value,
                    ))
                })
            })
            .map_err(Error::from)?;
        Ok(format!(
            "etcd {version}, cluster id {cluster_id:x}, revision {revision}: nothing to create \
             (keys under grantid/ are written on first use); store record {}",
            match store {
                Some(s) => format!(
                    "present (quarantine {}, until Unix ms {})",
                    s.quarantines, s.quarantine_until_ms
                ),
                None => "missing: the first grant starts a quarantine".into(),
            }
        ))
    }

    fn quarantine(&self) -> Result<Option<grantid::rule::Quarantine>, Error> {
        let store = self
            .call("cannot read the store record", |c| {
                Box::pin(async move { Ok(Ctx::read_store(c).await?.0.value) })
            })
            .map_err(Error::from)?;
        Ok(store.as_ref().map(quarantine_of))
    }

    fn lift_quarantine(&self) -> Result<String, Error> {
        let was = self
            .call("cannot lift the quarantine", |c| {
                Box::pin(async move {
                    loop {
                        let (store, _) = Ctx::read_store(c).await?;
                        let Some(old) = store.value.clone() else {
                            return Ok(None);
                        };
                        let record = StoreRecord {
                            quarantine_until_ms: 0,
                            quarantine_since_ms: 0,
                            reason: format!("lifted by the operator (was: {})", old.reason),
                            ..old.clone()
                        };
                        let resp =
                            put_store(c, &store, &record, "cannot write the store record").await?;
                        if resp.succeeded() {
                            return Ok(Some(quarantine_of(&old)));
                        }
                    }
                })
            })
            .map_err(Error::from)?;
        Ok(crate::kernel::lifted(
            "etcd",
            was.as_ref(),
            self.ctx.now_ms(),
        ))
    }

    fn init_new_deployment(&self) -> Result<String, Error> {
        let report = self.init()?;
        let created = self
            .call("new deployment failed", |c| {
                Box::pin(async move {
                    let (store, snap) = Ctx::read_store(c).await?;
                    if store.value.is_some() {
                        return Ok(false);
                    }
                    let record = StoreRecord {
                        cluster_id: snap.cluster_id,
                        quarantines: 1,
                        quarantine_until_ms: 0,
                        reason: "new deployment (operator)".into(),
                        quarantine_since_ms: 0,
                    };
                    Ok(put_store(c, &store, &record, "cannot write")
                        .await?
                        .succeeded())
                })
            })
            .map_err(Error::from)?;
        Ok(crate::kernel::reports::declared(&report, created, "store"))
    }

    fn fence(&self) -> Result<String, Error> {
        let now_ms = self.ctx.now_ms();
        let hold = self.ctx.hold_ms();
        let ctx = Arc::clone(&self.ctx);
        let until = self
            .call("fence failed", move |c| {
                Box::pin(async move {
                    loop {
                        let (store, snap) = Ctx::read_store(c).await?;
                        let cluster = store
                            .value
                            .as_ref()
                            .map_or(snap.cluster_id, |s| s.cluster_id);
                        let until = store
                            .value
                            .as_ref()
                            .map_or(0, |s| s.quarantine_until_ms)
                            .max(now_ms + hold);
                        if ctx
                            .quarantine(
                                c,
                                &store,
                                cluster,
                                now_ms,
                                hold,
                                "fenced by the operator".into(),
                            )
                            .await?
                        {
                            return Ok(until);
                        }
                    }
                })
            })
            .map_err(Error::from)?;
        Ok(crate::kernel::reports::fenced(until, &self.ctx.options))
    }

    fn status(&self, namespace: Option<&str>) -> Result<Vec<WorkerStatus>, Error> {
        let prefix = namespace.map_or_else(|| NS_PREFIX.to_owned(), ns_prefix);
        let kvs = self
            .call("cannot read", move |c| {
                Box::pin(async move {
                    let resp = c
                        .get(prefix, Some(GetOptions::new().with_prefix()))
                        .await
                        .map_err(|e| unavailable("cannot read", e))?;
                    Ok(resp.kvs().to_vec())
                })
            })
            .map_err(Error::from)?;
        let mut layouts = std::collections::BTreeMap::new();
        let mut workers = Vec::new();
        for kv in &kvs {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let Some((ns, rest)) = key.strip_prefix(NS_PREFIX).and_then(|k| k.split_once('/'))
            else {
                continue;
            };
            let ns = ns.replace("%2F", "/");
            if rest == "layout" {
                let rec: LayoutRecord = decode(kv)?;
                let layout = Layout::with_all(
                    rec.timestamp_bits,
                    rec.worker_bits,
                    rec.sequence_bits,
                    rec.epoch_ms,
                    rec.tick_ms,
                )?;
                layouts.insert(ns, layout);
            } else if let Some(n) = rest.strip_prefix("w/").and_then(|n| n.parse::<u32>().ok()) {
                let rec: WorkerValue = decode(kv)?;
                workers.push((ns, n, rec));
            }
        }
        let mut out: Vec<WorkerStatus> = workers
            .into_iter()
            .filter_map(|(ns, worker, rec)| {
                let layout = *layouts.get(&ns)?;
                Some(WorkerStatus {
                    namespace: ns,
                    layout,
                    worker,
                    holder: rec.holder,
                    lease_expiry: rec.lease_expiry,
                    high_water: rec.high_water,
                    fencing: rec.fencing,
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.namespace, a.worker).cmp(&(&b.namespace, b.worker)));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sessions a server forwards on share one revision floor: a
    /// revision one of them saw is the floor of every other.
    #[test]
    fn sessions_share_the_revision_floor() {
        let a = EtcdAuthority::new(vec!["127.0.0.1:1".into()], Options::default()).unwrap();
        let b = a.sibling();
        a.ctx.seen_revision.fetch_max(41, Ordering::AcqRel);
        assert_eq!(b.ctx.seen_revision.load(Ordering::Acquire), 41);
        assert!(Arc::ptr_eq(&a.ctx, &b.ctx));
    }

    /// A member that requires a client certificate ends the connection
    /// after the handshake; a write that meets the close is a broken pipe
    /// (the text a clean-clone run saw), and is read as that close too.
    /// `from_url` opens etcd URLs only.
    #[test]
    fn from_url_refuses_another_engines_url() {
        let e = EtcdAuthority::from_url("redis://h:6379", Options::default()).unwrap_err();
        assert!(e.message().contains("not a URL of the etcd engine"), "{e}");
        assert!(EtcdAuthority::from_url("etcd://h:2379", Options::default()).is_ok());
    }

    #[test]
    fn a_close_seen_by_a_write_is_the_peers_close() {
        let write = "transport error: hyper::Error(Io, Custom { kind: BrokenPipe, error: \
                     \"stream closed because of a broken pipe\" }): connection error";
        assert!(closed_by_peer(write));
        assert!(closed_by_peer("received fatal alert: CertificateRequired"));
        assert!(!closed_by_peer(
            "tcp connect error: Connection refused (os error 111)"
        ));
    }

    #[test]
    fn namespace_prefixes_never_nest() {
        assert_eq!(ns_prefix("a"), "grantid/ns/a/");
        assert_eq!(ns_prefix("a/w"), "grantid/ns/a%2Fw/");
        // Namespace "a"'s worker prefix is not a prefix of "a/w"'s keys.
        assert!(!worker_key(&ns_prefix("a/w"), 1).starts_with(&format!("{}w/", ns_prefix("a"))));
    }

    #[test]
    fn a_revision_that_goes_back_is_a_loss() {
        let a = EtcdAuthority::new(vec!["127.0.0.1:1".into()], Options::default()).unwrap();
        assert_eq!(a.ctx.revision_went_back(a.ctx.floor(), 10), None);
        assert_eq!(a.ctx.revision_went_back(a.ctx.floor(), 12), None);
        let why = a.ctx.revision_went_back(a.ctx.floor(), 11).unwrap();
        assert!(why.contains("from 12 to 11"), "{why}");
        // A read sent before the answer at 12 arrived (another session's
        // call in flight at the same time) may be earlier: no loss.
        assert_eq!(a.ctx.revision_went_back(10, 11), None);
        assert_eq!(a.ctx.floor(), 12);
    }
}
