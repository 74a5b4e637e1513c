//! What every backend shares and imports: the [`Authority`] trait, the
//! worker record `grantid authority status` shows, and the checks of a
//! request that every store applies before it is sent. Nothing here knows
//! a backend; the registry (`registry.rs`) is the only module that knows
//! them all.

use grantid::{Error, GrantRequest, GrantSource, Layout};

/// One worker record of an authority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerStatus {
    /// The namespace.
    pub namespace: String,
    /// The layout the namespace is registered with.
    pub layout: Layout,
    /// The worker value.
    pub worker: u32,
    /// The incarnation holding the lease, if any.
    pub holder: Option<u64>,
    /// The tick at which the lease expires (0 when never held).
    pub lease_expiry: u64,
    /// The end of every interval ever granted (ticks).
    pub high_water: u64,
    /// The last grant's fencing token (`grant_id`).
    pub fencing: u64,
}

impl WorkerStatus {
    /// True when the lease is held and not expired at `now` (ticks).
    pub fn is_live(&self, now: u64) -> bool {
        self.holder.is_some() && self.lease_expiry > now
    }
}

/// Items only the engines that store grants use (none is built without
/// one of them): their features, listed once.
macro_rules! for_stores {
    ($($item:item)*) => {$(
        #[cfg(any(
            feature = "file",
            feature = "static",
            feature = "postgres",
            feature = "redis",
            feature = "mysql",
            feature = "etcd",
            feature = "dynamodb"
        ))]
        $item
    )*};
}

for_stores! {
    /// The namespace check of the generator's builder
    /// ([`grantid::check_namespace`]), for requests that reach an authority
    /// directly (a host's own grant loop): a name no authority can store is a
    /// permanent refusal, never a retry. (A `grpc://` server checks its own.)
    pub(crate) fn check_namespace(namespace: &str) -> Result<(), grantid::GrantError> {
        grantid::check_namespace(namespace)
            .map_err(|e| grantid::GrantError::Refused(e.message().to_owned()))
    }

    /// The line `lift_quarantine` reports: what was lifted, or that
    /// nothing was.
    pub(crate) fn lifted(
        store: &str,
        was: Option<&grantid::rule::Quarantine>,
        now_ms: u64,
    ) -> String {
        match was {
            Some(q) if q.until_ms > now_ms || q.since_ms > 0 => format!(
                "{store}: quarantine lifted (it ran until Unix ms {}, since Unix ms {}: {}); grants \
                 are made again",
                q.until_ms, q.since_ms, q.reason
            ),
            _ => format!("{store}: no quarantine was running; nothing changed"),
        }
    }
}

/// The lines the server engines' operator commands report, in one
/// wording for every engine.
#[cfg(any(
    feature = "postgres",
    feature = "redis",
    feature = "mysql",
    feature = "etcd",
    feature = "dynamodb"
))]
pub(crate) mod reports {
    /// The line `fence` reports: its quarantine's end, and why it lasts so
    /// long.
    pub(crate) fn fenced(
        until_ms: impl std::fmt::Display,
        options: &crate::url::Options,
    ) -> String {
        format!(
            "quarantine until Unix ms {until_ms} (max_lead_ms {} + clock_skew_ms {}): no grant \
             before every interval granted so far has ended",
            options.max_lead_ms, options.clock_skew_ms
        )
    }

    /// The line `init_new_deployment` reports after `init`'s `report`:
    /// whether the store record was written (`store`: what holds it).
    pub(crate) fn declared(report: &str, written: bool, store: &str) -> String {
        if written {
            format!("{report}; declared a new deployment: no quarantine")
        } else {
            format!("{report}; the {store} already holds grantid state: nothing declared")
        }
    }
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

    /// The record of one worker of `namespace`, if it has one.
    fn worker_status(&self, namespace: &str, worker: u32) -> Result<Option<WorkerStatus>, Error> {
        Ok(self
            .status(Some(namespace))?
            .into_iter()
            .find(|w| w.worker == worker))
    }

    /// The high-water a claim in the renewal `request` is weighed against:
    /// its `not_before` beyond it claims that the store lost a grant.
    /// `Ok(None)` when `request` renews nothing. Fails closed: a record in
    /// another layout than the request's (the store refuses the request)
    /// or no record at all answers `Some(0)`, beyond which every claim
    /// lies. A wrapper that maps workers or layouts answers in the
    /// request's terms (`datacenter=N`).
    fn renewal_high_water(&self, request: &GrantRequest) -> Result<Option<u64>, Error> {
        let Some(worker) = request.worker else {
            return Ok(None);
        };
        // The fields every store's record shows (not all show the split,
        // which the store checks itself before it weighs a claim).
        let fields = |l: &Layout| {
            let bits = (l.timestamp_bits(), l.worker_bits(), l.sequence_bits());
            (bits, l.epoch_ms(), l.tick_ms())
        };
        Ok(Some(
            match self.worker_status(&request.namespace, worker)? {
                Some(r) if fields(&r.layout) == fields(&request.layout) => r.high_water,
                _ => 0,
            },
        ))
    }

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

    /// The store's quarantine as it records it (its end, when the latest
    /// one started, why), or `None` when it records none. A namespace used
    /// with a longer lead or skew waits until
    /// [`Quarantine::until_for`](grantid::rule::Quarantine::until_for).
    fn quarantine(&self) -> Result<Option<grantid::rule::Quarantine>, Error> {
        Ok(None)
    }

    /// Ends the store's quarantine now (`grantid authority lift-quarantine`):
    /// grants are made again at once. Only for an operator who has checked
    /// that no process still issues from a grant made before what started
    /// it (docs/AUTHORITIES.md, "Lifting a quarantine"): a live holder whose
    /// grants the store forgot would share IDs with the next grant of its
    /// worker. Returns a one-line description, with the quarantine lifted.
    fn lift_quarantine(&self) -> Result<String, Error> {
        Err(Error::new(
            grantid::ErrorKind::InvalidArgument,
            "this authority has no quarantine to lift (see docs/AUTHORITIES.md, \"State loss\")",
        ))
    }

    /// What this store's state-loss detection cannot check as configured,
    /// one sentence each for the operator (`grantid authority init` and
    /// `status` print them): e.g. a PostgreSQL role that may not read
    /// `pg_control_system()`. The default: nothing.
    fn caveats(&self) -> Result<Vec<String>, Error> {
        Ok(Vec::new())
    }
}

/// The sessions an engine opened for one URL (`registry::open_sessions`):
/// at least one.
pub(crate) struct Sessions {
    /// The first session.
    pub first: Box<dyn Authority>,
    /// The others.
    pub more: Vec<Box<dyn Authority>>,
}

// Unused only in a build without any engine.
#[allow(dead_code)]
impl Sessions {
    /// One session, whatever number was asked for: an engine whose calls
    /// all wait on one lock (`file:`, `static:`).
    pub fn one(first: impl Authority + 'static) -> Sessions {
        Sessions {
            first: Box::new(first),
            more: Vec::new(),
        }
    }

    /// `n` sessions (at least one), each made by `make`: each has its own
    /// connection and shares nothing with the others.
    pub fn each<A: Authority + 'static>(
        n: usize,
        mut make: impl FnMut() -> Result<A, Error>,
    ) -> Result<Sessions, Error> {
        let mut sessions = Sessions::one(make()?);
        for _ in 1..n {
            sessions.more.push(Box::new(make()?));
        }
        Ok(sessions)
    }

    /// `first` and `n - 1` more sessions made by `sibling` (at least one in
    /// all), which share what `first` remembers of the store.
    pub fn siblings<A: Authority + 'static>(first: A, n: usize, sibling: fn(&A) -> A) -> Sessions {
        let more = (1..n)
            .map(|_| Box::new(sibling(&first)) as Box<dyn Authority>)
            .collect();
        Sessions {
            first: Box::new(first),
            more,
        }
    }

    /// Every session, the first first.
    pub fn all(self) -> Vec<Box<dyn Authority>> {
        let mut all = vec![self.first];
        all.extend(self.more);
        all
    }
}

/// The error of an engine's opener given another engine's target: the
/// registry pairs each grammar with its own opener, so this names a
/// mistake in the table of engines.
#[allow(dead_code)]
pub(crate) fn not_this_engines(url: &str, engine: &str) -> Error {
    Error::new(
        grantid::ErrorKind::InvalidArgument,
        format!(
            "authority URL {:?}: not a URL of the {engine} engine",
            crate::url::redact(url)
        ),
    )
}

/// The host's clock, Unix ms.
#[cfg(any(feature = "postgres", feature = "redis", feature = "mysql"))]
pub(crate) fn system_ms() -> u64 {
    grantid::Clock::now_ms(&grantid::SystemClock)
}
