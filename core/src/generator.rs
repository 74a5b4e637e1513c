//! The generator: the public handle, its builder, and the `next_id` path.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::clock::{Clock, Ticks};
use crate::cursor::{Cursor, Shape, Span, Status, Take};
use crate::error::{Error, ErrorKind};
use crate::forksafe::ForkSafeMutex;
use crate::grant::GrantSource;
use crate::layout::{Decoded, Layout};
use crate::lease;
use crate::state::{Config, ForkPolicy, LeaseLostEvent, LeaseView, LostCallback, Shared};
#[cfg(test)]
use crate::state::{Hook, HookPoint};
use crate::stats::{Counters, Stats};

/// Default `max_drift_ms`: how far the cursor may run ahead of the clock
/// (sequence exhausted) or stay ahead of it (clock stepped back) before a
/// call waits. 100 ms absorbs NTP slews and small steps and gives bursts 100
/// ticks of capacity, while IDs stay within 0.1 s of the wall clock.
pub const DEFAULT_MAX_DRIFT_MS: u64 = 100;
/// Default deadline of one call that has to wait (capacity, clock).
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_millis(100);
/// Default largest batch: keeps one call's allocation and wait bounded.
pub const DEFAULT_MAX_BATCH: usize = 100_000;
/// Default length of one grant. 1 s keeps authority load at one
/// transaction per second per process (500 grants/s for a 500-process fleet).
pub const DEFAULT_GRANT_DURATION_MS: u64 = 1_000;
/// Default horizon: the generator keeps up to this much committed time
/// ahead of its clock, renewing when less than `horizon - duration` is left.
/// 5 s rides out authority outages of 4 s at full service; a crash wastes at
/// most 5 s of one worker's timestamp space.
pub const DEFAULT_HORIZON_MS: u64 = 5_000;
/// Default start-up deadline for the first grant.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Default first retry delay after an uncertain authority answer.
pub const DEFAULT_BACKOFF_MIN: Duration = Duration::from_millis(50);
/// Default longest retry delay.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(2);

struct Threads {
    fork_generation: u64,
    ticker: Option<JoinHandle<()>>,
    manager: Option<JoinHandle<()>>,
}

/// Issues IDs inside committed grants. Thread-safe (`Send + Sync`); share it
/// by reference or in an `Arc`. Dropping it closes it.
pub struct Generator {
    shared: Arc<Shared>,
    threads: ForkSafeMutex<Threads>,
}

impl fmt::Debug for Generator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Generator")
            .field("namespace", &self.shared.namespace)
            .field("layout", &self.shared.layout)
            .field("stats", &self.stats())
            .finish()
    }
}

/// Configures and starts a [`Generator`].
pub struct GeneratorBuilder {
    layout: Layout,
    namespace: String,
    source: Arc<dyn GrantSource>,
    clock: Option<Arc<dyn Clock>>,
    max_drift_ms: u64,
    shards: Option<usize>,
    max_wait: Duration,
    max_batch: usize,
    grant_duration_ms: u64,
    horizon_ms: u64,
    startup_timeout: Duration,
    backoff: (Duration, Duration),
    on_lease_lost: Option<LostCallback>,
    fork_policy: ForkPolicy,
    datacenter: Option<u32>,
    #[cfg(test)]
    hook: Option<Hook>,
}

impl fmt::Debug for GeneratorBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GeneratorBuilder")
            .field("layout", &self.layout)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl GeneratorBuilder {
    /// Uses `clock` instead of the system clock. It is called on every
    /// `next_id`; keep it cheap.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }
    /// How far, in ms, the cursor may lead the clock (default
    /// [`DEFAULT_MAX_DRIFT_MS`]). 0 means never ahead: a used-up tick waits.
    /// Must be below the layout's timestamp span, as must the grant
    /// duration and the horizon.
    pub fn max_drift_ms(mut self, ms: u64) -> Self {
        self.max_drift_ms = ms;
        self
    }
    /// Number of cursor shards (default: the number of CPUs). Rounded up to
    /// a power of two, at most 64; 0 is invalid.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }
    /// Longest a call waits for the clock before it gives up (default
    /// [`DEFAULT_MAX_WAIT`]).
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }
    /// Largest batch for `next_ids` / `fill` (default [`DEFAULT_MAX_BATCH`]).
    pub fn max_batch(mut self, n: usize) -> Self {
        self.max_batch = n;
        self
    }
    /// Length of each requested grant in ms (default
    /// [`DEFAULT_GRANT_DURATION_MS`]).
    pub fn grant_duration_ms(mut self, ms: u64) -> Self {
        self.grant_duration_ms = ms;
        self
    }
    /// Committed time kept ahead of the clock, in ms (default
    /// [`DEFAULT_HORIZON_MS`]; at least the grant duration).
    pub fn horizon_ms(mut self, ms: u64) -> Self {
        self.horizon_ms = ms;
        self
    }
    /// Longest `start()` waits for the first grant (default
    /// [`DEFAULT_STARTUP_TIMEOUT`]).
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }
    /// First and longest delay between retries of an uncertain authority
    /// (exponential, with jitter).
    pub fn backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff = (min, max);
        self
    }
    /// Called on the renewal thread once per confirmed loss, after issuing
    /// from the lost worker has stopped. A panic inside it is caught.
    pub fn on_lease_lost(mut self, f: impl Fn(&LeaseLostEvent) + Send + Sync + 'static) -> Self {
        self.on_lease_lost = Some(Arc::new(f));
        self
    }
    /// What a `fork()` child does (default [`ForkPolicy::Reactivate`]).
    pub fn fork_policy(mut self, policy: ForkPolicy) -> Self {
        self.fork_policy = policy;
        self
    }

    /// The datacenter this generator runs in (the layout needs
    /// datacenter bits, [`Layout::with_datacenter_bits`]): every grant whose
    /// worker lies outside it is refused as invalid, so a misconfigured
    /// authority cannot make this region issue another region's IDs. When
    /// the source reports a datacenter ([`GrantSource::datacenter`], an
    /// authority URL with `datacenter=N`), the two must agree; without this
    /// option the source's is used. A datacenter that does not fit, or a
    /// disagreement, fails `start()` with `InvalidArgument`.
    pub fn datacenter(mut self, datacenter: u32) -> Self {
        self.datacenter = Some(datacenter);
        self
    }

    #[cfg(test)]
    pub(crate) fn hook(mut self, hook: impl Fn(HookPoint) + Send + Sync + 'static) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// Validates the options, starts the renewal thread and blocks until the
    /// first valid grant, or fails with `Unavailable` / `LeaseLost` (and the
    /// authority's reason) after the start-up timeout. No ID before a proven
    /// grant.
    pub fn start(self) -> Result<Generator, Error> {
        let layout = self.layout;
        crate::grant::check_namespace(&self.namespace)?;
        let tick = layout.tick_ms();
        let grant_ticks = self.grant_duration_ms.div_ceil(tick);
        let horizon_ticks = self.horizon_ms.div_ceil(tick);
        if grant_ticks == 0 {
            return Err(Error::invalid("grant_duration_ms must be at least 1"));
        }
        if horizon_ticks < grant_ticks {
            return Err(Error::invalid(format!(
                "horizon_ms ({}) must be at least grant_duration_ms ({})",
                self.horizon_ms, self.grant_duration_ms
            )));
        }
        // The authority's bounded lead caps how far ahead a grant may end
        // (in whole ticks: grants round up, the cap rounds down): a horizon
        // past it could never be filled.
        if let Some(lead) = self.source.max_lead_ms()
            && horizon_ticks.saturating_add(grant_ticks) > lead / tick
        {
            return Err(Error::invalid(format!(
                "horizon_ms ({}) + grant_duration_ms ({}), in whole ticks of {tick} ms, is more \
                 than the authority's max_lead_ms ({lead}): no grant may end that far ahead of \
                 its clock; lower the horizon or raise max_lead_ms (docs/AUTHORITIES.md, \
                 \"State loss\")",
                self.horizon_ms, self.grant_duration_ms
            )));
        }
        if self.max_batch == 0 {
            return Err(Error::invalid("max_batch must be at least 1"));
        }
        if self.backoff.0.is_zero() || self.backoff.0 > self.backoff.1 {
            return Err(Error::invalid("backoff needs 0 < min <= max"));
        }
        // Every tick count stays inside the timestamp field, so no sum of
        // ticks overflows.
        let span_ms = layout.timestamp_limit().saturating_mul(tick);
        for (name, ms) in [
            ("max_drift_ms", self.max_drift_ms),
            ("grant_duration_ms", self.grant_duration_ms),
            ("horizon_ms", self.horizon_ms),
        ] {
            if ms >= span_ms {
                return Err(Error::invalid(format!(
                    "{name} ({ms}) must be below the layout's timestamp span ({span_ms} ms)"
                )));
            }
        }
        let datacenter = check_datacenter(&layout, self.datacenter, self.source.datacenter())?;
        let shards = self
            .shards
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let shape = Shape::new(&layout, shards, self.max_drift_ms / tick)?;
        let clock_tick = layout.tick_at(match &self.clock {
            Some(c) => c.now_ms(),
            None => crate::clock::SystemClock.now_ms(),
        });
        if clock_tick >= layout.timestamp_limit() {
            return Err(Error::new(
                ErrorKind::GrantExhausted,
                format!(
                    "the layout's timestamp field ended at Unix ms {} (2^{} ticks after the epoch); use a new namespace with a later epoch or more timestamp bits",
                    layout.unix_ms_of(layout.timestamp_limit()),
                    layout.timestamp_bits()
                ),
            ));
        }
        grantid_fork::register();
        let shared = Arc::new(Shared {
            layout,
            namespace: self.namespace,
            cursor: Cursor::new(shape),
            ticks: Arc::new(Ticks::new(layout.epoch_ms(), tick, self.clock)),
            config: Config {
                max_wait: self.max_wait,
                max_batch: self.max_batch,
                grant_ticks,
                horizon_ticks,
                startup_timeout: self.startup_timeout,
                backoff_min: self.backoff.0,
                backoff_max: self.backoff.1,
                fork_policy: self.fork_policy,
                datacenter,
            },
            source: self.source,
            on_lease_lost: self.on_lease_lost,
            counters: Counters::default(),
            lease: LeaseView::default(),
            closed: AtomicBool::new(false),
            fork_generation: AtomicU64::new(grantid_fork::generation()),
            reactivating: AtomicBool::new(false),
            #[cfg(test)]
            hook: self.hook,
        });
        let generator = Generator {
            threads: ForkSafeMutex::new(Threads {
                fork_generation: grantid_fork::generation(),
                ticker: None,
                manager: None,
            }),
            shared,
        };
        generator.activate()?;
        Ok(generator)
    }
}

/// The generator's datacenter from its own option and its source's report
/// (docs/AUTHORITIES.md, "Regions"): they must agree, and it must fit the
/// layout's datacenter bits.
fn check_datacenter(
    layout: &Layout,
    own: Option<u32>,
    source: Option<u32>,
) -> Result<Option<u32>, Error> {
    if let (Some(own), Some(source)) = (own, source)
        && own != source
    {
        return Err(Error::invalid(format!(
            "the generator is in datacenter {own}, but its authority grants the workers of datacenter {source}"
        )));
    }
    let Some(dc) = own.or(source) else {
        return Ok(None);
    };
    if layout.datacenter_bits() == 0 {
        return Err(Error::invalid(format!(
            "datacenter {dc} is set, but the layout has no datacenter bits (set datacenter_bits)"
        )));
    }
    if u64::from(dc) >= layout.datacenter_count() {
        return Err(Error::invalid(format!(
            "datacenter {dc} does not fit in {} datacenter bits",
            layout.datacenter_bits()
        )));
    }
    Ok(Some(dc))
}

thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

/// The calling thread's shard number (round-robin on first use).
#[inline]
fn thread_shard() -> usize {
    SHARD.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT_SHARD.fetch_add(1, Ordering::Relaxed);
        s.set(v);
        v
    })
}

impl Generator {
    /// Starts configuring a generator for `namespace` in `layout`, with
    /// `source` as its authority.
    pub fn builder(
        layout: Layout,
        namespace: impl Into<String>,
        source: impl GrantSource,
    ) -> GeneratorBuilder {
        GeneratorBuilder {
            layout,
            namespace: namespace.into(),
            source: Arc::new(source),
            clock: None,
            max_drift_ms: DEFAULT_MAX_DRIFT_MS,
            shards: None,
            max_wait: DEFAULT_MAX_WAIT,
            max_batch: DEFAULT_MAX_BATCH,
            grant_duration_ms: DEFAULT_GRANT_DURATION_MS,
            horizon_ms: DEFAULT_HORIZON_MS,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            backoff: (DEFAULT_BACKOFF_MIN, DEFAULT_BACKOFF_MAX),
            on_lease_lost: None,
            fork_policy: ForkPolicy::Reactivate,
            datacenter: None,
            #[cfg(test)]
            hook: None,
        }
    }

    /// Starts the ticker and the renewal thread for a fresh incarnation and
    /// waits for the first grant.
    fn activate(&self) -> Result<(), Error> {
        let shared = &self.shared;
        let incarnation = lease::new_incarnation();
        shared.lease.reset(incarnation);
        let ticker = shared.ticks.spawn();
        let manager = lease::spawn(Arc::clone(shared), incarnation, std::thread::current())
            .map_err(|e| {
                Error::new(
                    ErrorKind::Unavailable,
                    format!("cannot start the renewal thread: {e}"),
                )
            })?;
        {
            let mut threads = self.threads.lock();
            threads.fork_generation = grantid_fork::generation();
            threads.ticker = ticker;
            threads.manager = Some(manager);
        }
        let deadline = deadline_after(shared.config.startup_timeout);
        loop {
            if shared.lease.installed() {
                // Only now: until the grant exists, the other threads of a
                // fork() child must keep waiting in `after_fork`.
                shared
                    .fork_generation
                    .store(grantid_fork::generation(), Ordering::SeqCst);
                return Ok(());
            }
            if shared.lease.renewal_stopped() {
                let (_, why) = shared.lease.last_failure();
                self.close();
                return Err(Error::new(ErrorKind::Unavailable, why));
            }
            if shared.closed.load(Ordering::SeqCst) {
                return Err(Error::new(
                    ErrorKind::Closed,
                    "the generator was closed during start-up",
                ));
            }
            let now = Instant::now();
            let (kind, why) = shared.lease.last_failure();
            if kind == ErrorKind::InvalidArgument {
                self.close();
                return Err(Error::new(kind, why));
            }
            if now >= deadline {
                let kind = if kind == ErrorKind::LeaseLost {
                    kind
                } else {
                    ErrorKind::Unavailable
                };
                let message = format!(
                    "no valid grant within the start-up timeout of {:?}: {why}",
                    shared.config.startup_timeout
                );
                self.close();
                return Err(Error::new(kind, message));
            }
            std::thread::park_timeout((deadline - now).min(Duration::from_millis(5)));
        }
    }

    /// The next ID. Lock-free: one load of the cached tick and one CAS on
    /// this thread's shard line in the common case; at a new tick, one more
    /// CAS to claim a chunk. Waits (up to `max_wait`) only when the clock
    /// must move first.
    #[inline]
    pub fn next_id(&self) -> Result<u64, Error> {
        let shared = &*self.shared;
        if grantid_fork::generation() != shared.fork_generation.load(Ordering::Relaxed) {
            self.after_fork()?;
        }
        let shard = thread_shard();
        let cursor = &shared.cursor;
        let t = shared.ticks.cached();
        if let Some(id) = cursor.try_next(shard, t) {
            return Ok(id);
        }
        // A new tick (the common case below one call per tick per thread):
        // claim a chunk at the published tick, as the fast path would issue
        // at it. Anything but a span goes to the slow path, which reads the
        // clock itself before deciding.
        if let Take::Span(s) = cursor.take(shard, 1, t) {
            return Ok(cursor.shape().compose(s.tick, s.worker, s.seq));
        }
        self.next_id_slow(shard)
    }

    /// The next ID if one is ready without waiting: the fast path, then one
    /// attempt to claim a chunk. `None` when the call would wait, fail, or
    /// re-activate after `fork()`; call [`Generator::next_id`] then. Bindings
    /// use it to stay on the caller's thread (holding the GIL, say) in the
    /// common case and only hand the waiting case to a blocking call.
    #[inline]
    pub fn try_next_id(&self) -> Option<u64> {
        let shared = &*self.shared;
        if grantid_fork::generation() != shared.fork_generation.load(Ordering::Relaxed) {
            return None;
        }
        let shard = thread_shard();
        let cursor = &shared.cursor;
        if let Some(id) = cursor.try_next(shard, shared.ticks.cached()) {
            return Some(id);
        }
        match cursor.take(shard, 1, shared.ticks.fresh()) {
            Take::Span(s) => Some(cursor.shape().compose(s.tick, s.worker, s.seq)),
            _ => None,
        }
    }

    #[cold]
    fn next_id_slow(&self, shard: usize) -> Result<u64, Error> {
        let span = self.reserve(shard, 1, &mut Waiter::new(self.shared.config.max_wait))?;
        Ok(self
            .shared
            .cursor
            .shape()
            .compose(span.tick, span.worker, span.seq))
    }

    /// `n` IDs, all or none, in increasing order. `n` is at most
    /// `max_batch` (else `InvalidArgument`, as is a batch that cannot be
    /// allocated).
    pub fn next_ids(&self, n: usize) -> Result<Vec<u64>, Error> {
        self.check_batch(n)?;
        let mut out = Vec::new();
        out.try_reserve_exact(n)
            .map_err(|e| Error::invalid(format!("a batch of {n} IDs cannot be allocated: {e}")))?;
        out.resize(n, 0);
        self.fill(&mut out)?;
        Ok(out)
    }

    /// Fills `out` with fresh IDs in increasing order, reserving whole spans
    /// per CAS. All or error: on error `out` is left as it was.
    pub fn fill(&self, out: &mut [u64]) -> Result<(), Error> {
        let shared = &*self.shared;
        self.check_batch(out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        if grantid_fork::generation() != shared.fork_generation.load(Ordering::Relaxed) {
            self.after_fork()?;
        }
        let shard = thread_shard();
        let mut waiter = Waiter::new(shared.config.max_wait);
        let mut spans: Vec<Span> = Vec::new();
        let mut got: u64 = 0;
        let want = out.len() as u64;
        while got < want {
            match self.reserve(shard, want - got, &mut waiter) {
                Ok(span) => {
                    got += span.count;
                    spans.push(span);
                }
                Err(e) => {
                    shared.cursor.add_dropped(shard, got);
                    return Err(e);
                }
            }
        }
        let shape = shared.cursor.shape();
        let mut slots = out.iter_mut();
        for span in spans {
            let first = shape.compose(span.tick, span.worker, span.seq);
            for (i, slot) in (0..span.count).zip(slots.by_ref()) {
                *slot = first + i;
            }
        }
        Ok(())
    }

    fn check_batch(&self, n: usize) -> Result<(), Error> {
        let max = self.shared.config.max_batch;
        if n > max {
            return Err(Error::invalid(format!(
                "batch of {n} is larger than max_batch {max}"
            )));
        }
        Ok(())
    }

    /// Reserves up to `want` IDs at one tick, waiting as the rules allow:
    /// read the clock, take from the cursor, then act on what the cursor
    /// said ([`Generator::next_step`]).
    fn reserve(&self, shard: usize, want: u64, waiter: &mut Waiter) -> Result<Span, Error> {
        let shared = &*self.shared;
        let mut rollback_counted = false;
        loop {
            let t = shared.ticks.fresh();
            let take = shared.cursor.take(shard, want, t);
            match self.next_step(take, t, &mut rollback_counted) {
                Next::Reserved(span) => return Ok(span),
                Next::Again => {}
                Next::WaitForTick { until, error } => {
                    if !waiter.wait_for_tick(shared, until) {
                        return Err(error);
                    }
                }
                Next::Pause(error) => {
                    if !waiter.pause(shared) {
                        return Err(error);
                    }
                }
                Next::Reactivate => self.after_fork()?,
                Next::Fail(error) => return Err(error),
            }
        }
    }

    /// What to do with one outcome of the cursor, read at clock tick `t`.
    fn next_step(&self, take: Take, t: u64, rollback_counted: &mut bool) -> Next {
        let shared = &*self.shared;
        let drift = shared.cursor.shape().drift();
        match take {
            Take::Span(span) => Next::Reserved(span),
            Take::NotYetValid { start } => Next::WaitForTick {
                until: start.saturating_sub(drift),
                error: Error::new(
                    ErrorKind::NotYetValid,
                    format!("the clock (tick {t}) is before the grant's start (tick {start})"),
                ),
            },
            Take::Behind { cursor } => {
                // Another thread may have read the clock a moment later than
                // this one: look again before calling it a rollback.
                if shared.ticks.fresh().saturating_add(drift) >= cursor {
                    return Next::Again;
                }
                if !*rollback_counted {
                    *rollback_counted = true;
                    Counters::bump(&shared.counters.clock_rollbacks);
                }
                Next::WaitForTick {
                    until: cursor - drift,
                    error: Error::new(
                        ErrorKind::ClockRollback,
                        format!(
                            "the clock (tick {t}) is {} ticks behind the cursor (tick {cursor}), more than max_drift ({drift})",
                            cursor - t
                        ),
                    ),
                }
            }
            Take::Full { until } => Next::WaitForTick {
                until,
                error: Error::new(
                    ErrorKind::CapacityExhausted,
                    format!(
                        "every sequence number up to tick {} is used",
                        until + drift - 1
                    ),
                ),
            },
            Take::End { end } => {
                // The clock may have jumped past the committed end: wake the
                // renewal thread rather than leave it asleep, and wait for it
                // unless it is known to be failing.
                let lease = &shared.lease;
                if end < shared.layout.timestamp_limit()
                    && !lease.renewal_stopped()
                    && (lease.switch_pending() || !lease.renewal_uncertain())
                {
                    shared.ticks.wake_on_jump();
                    Next::Pause(self.end_error(end))
                } else {
                    Next::Fail(self.end_error(end))
                }
            }
            Take::Sealed(Status::Switching | Status::Active) => Next::Pause(Error::new(
                ErrorKind::Unavailable,
                "a grant switch did not finish within max_wait",
            )),
            Take::Sealed(Status::Closed) => {
                Next::Fail(Error::new(ErrorKind::Closed, "the generator is closed"))
            }
            Take::Sealed(Status::Forked) => Next::Reactivate,
            Take::Sealed(Status::LeaseLost) => Next::Fail(Error::new(
                ErrorKind::LeaseLost,
                format!(
                    "the worker was lost and no new grant is committed yet: {}",
                    shared.lease.last_failure().1
                ),
            )),
            Take::Sealed(Status::Unavailable) => Next::Fail(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "no committed grant and the authority is uncertain: {}",
                    shared.lease.last_failure().1
                ),
            )),
        }
    }

    /// Why no tick is left: `GrantExhausted` only when no grant can ever
    /// come (the timestamp field is used up); otherwise a renewal is due and
    /// uncertain, which is `Unavailable`, with what the renewal is waiting on.
    fn end_error(&self, end: u64) -> Error {
        let shared = &*self.shared;
        if end >= shared.layout.timestamp_limit() {
            return Error::new(
                ErrorKind::GrantExhausted,
                format!("the timestamp field is used up (tick {end}); move to a new namespace"),
            );
        }
        let lease = &shared.lease;
        let why = if lease.renewal_stopped() {
            lease.last_failure().1
        } else if lease.renewal_uncertain() {
            format!("renewal has not succeeded: {}", lease.last_failure().1)
        } else if lease.in_flight() {
            "a renewal is waiting for the authority's answer".to_owned()
        } else {
            "the renewal thread has not renewed yet (late, or not scheduled)".to_owned()
        };
        Error::new(
            ErrorKind::Unavailable,
            format!("the committed grants end at tick {end}; {why}"),
        )
    }

    /// Runs in a `fork()` child on its first call: re-activates (or closes)
    /// per the fork policy. Other threads of the child wait for the one that
    /// re-activates.
    #[cold]
    fn after_fork(&self) -> Result<(), Error> {
        let shared = &*self.shared;
        if shared.closed.load(Ordering::SeqCst) {
            return Err(Error::new(ErrorKind::Closed, "the generator is closed"));
        }
        if shared.config.fork_policy == ForkPolicy::Close {
            shared.cursor.seal(Status::Closed);
            shared.closed.store(true, Ordering::SeqCst);
            return Err(Error::new(
                ErrorKind::Closed,
                "the generator was closed in this fork() child (ForkPolicy::Close)",
            ));
        }
        if shared
            .reactivating
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            let result =
                if grantid_fork::generation() != shared.fork_generation.load(Ordering::SeqCst) {
                    self.reactivate_in_child()
                } else {
                    Ok(())
                };
            shared.reactivating.store(false, Ordering::SeqCst);
            return result;
        }
        let deadline = deadline_after(shared.config.startup_timeout);
        while shared.reactivating.load(Ordering::SeqCst) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
        if grantid_fork::generation() == shared.fork_generation.load(Ordering::SeqCst) {
            Ok(())
        } else if shared.closed.load(Ordering::SeqCst) {
            Err(Error::new(
                ErrorKind::Closed,
                "the generator closed: re-activation after fork() failed",
            ))
        } else {
            Err(Error::new(
                ErrorKind::Unavailable,
                "re-activation after fork() did not finish",
            ))
        }
    }

    fn reactivate_in_child(&self) -> Result<(), Error> {
        let shared = &*self.shared;
        let sealed = shared.cursor.seal(Status::Forked);
        if let Some(reached) = sealed.reached {
            shared.lease.note_reached(reached);
        }
        shared.cursor.set_status(Status::Unavailable);
        {
            // The parent's threads do not exist here: forget their handles
            // (joining or detaching them would act on threads of another
            // process).
            let mut threads = self.threads.lock();
            std::mem::forget(threads.ticker.take());
            std::mem::forget(threads.manager.take());
        }
        Counters::bump(&shared.counters.fork_reactivations);
        log::info!(target: "grantid", "event=fork_reactivate namespace={}", shared.namespace);
        self.activate()
    }

    /// Decodes an ID of this generator's layout.
    pub fn decode(&self, id: u64) -> Result<Decoded, Error> {
        self.shared.layout.decode(id)
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.shared.layout
    }

    /// The datacenter this generator issues in, if it has one (its own
    /// option or its source's).
    pub fn datacenter(&self) -> Option<u32> {
        self.shared.config.datacenter
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.shared.namespace
    }

    /// A snapshot of the counters and the lease.
    pub fn stats(&self) -> Stats {
        let shared = &*self.shared;
        let c = &shared.counters;
        let worker = shared.lease.worker();
        let grant_end = shared.lease.committed_end();
        let now = shared.ticks.fresh();
        Stats {
            ids_issued: shared.cursor.issued(),
            waits: Counters::get(&c.waits),
            clock_rollbacks: Counters::get(&c.clock_rollbacks),
            clock_steps_back: shared.ticks.steps_back(),
            grants_acquired: Counters::get(&c.grants_acquired),
            renewals: Counters::get(&c.renewals),
            uncertain_retries: Counters::get(&c.uncertain_retries),
            invalid_grants: Counters::get(&c.invalid_grants),
            lease_losses: Counters::get(&c.lease_losses),
            worker,
            grant_end,
            remaining_ticks: grant_end.map_or(0, |e| e.saturating_sub(now)),
            incarnation: shared.lease.incarnation(),
            fork_reactivations: Counters::get(&c.fork_reactivations),
        }
    }

    /// Stops issuing (`Closed` from then on), stops the threads, and releases
    /// the worker (best effort). Idempotent; `Drop` calls it.
    pub fn close(&self) {
        let shared = &*self.shared;
        if shared.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        shared.cursor.seal(Status::Closed);
        shared.ticks.stop();
        let same_process =
            grantid_fork::generation() == shared.fork_generation.load(Ordering::SeqCst);
        let (ticker, manager) = {
            let mut threads = self.threads.lock();
            let handles = (threads.ticker.take(), threads.manager.take());
            if threads.fork_generation != grantid_fork::generation() {
                std::mem::forget(handles);
                (None, None)
            } else {
                handles
            }
        };
        if let Some(m) = &manager {
            m.thread().unpark();
        }
        if let Some(t) = ticker {
            let _ = t.join();
        }
        if let Some(m) = manager {
            // The renewal thread may be blocked inside the source; wait a
            // little, then leave it detached (it exits when the call returns).
            let deadline = Instant::now() + Duration::from_millis(200);
            while !m.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            if m.is_finished() {
                let _ = m.join();
            } else {
                // Before the release below: a grant the call still brings
                // is then released by the renewal thread (lease.rs).
                shared.lease.abandoned.store(true, Ordering::SeqCst);
            }
        }
        if same_process && let Some(last) = shared.lease.last_grant() {
            let source = Arc::clone(&shared.source);
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| source.release(&last)))
                .is_err()
            {
                log::warn!(target: "grantid", "event=release_panicked worker={}", last.worker);
            }
        }
        log::info!(target: "grantid", "event=closed namespace={}", shared.namespace);
    }

    /// True once `close()` ran.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::SeqCst)
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        self.close();
    }
}

/// What [`Generator::reserve`] does next with one outcome of the cursor.
enum Next {
    /// Reserved: return it.
    Reserved(Span),
    /// Read the clock and take again at once.
    Again,
    /// Wait for the clock to reach `until`, or fail with `error` when it
    /// cannot before the deadline.
    WaitForTick { until: u64, error: Error },
    /// A switch or renewal is under way: pause briefly, or fail with `error`
    /// at the deadline.
    Pause(Error),
    /// This is a `fork()` child: re-activate first.
    Reactivate,
    /// Fail now.
    Fail(Error),
}

/// `now + wait`; a wait too long for an `Instant` (`Duration::MAX`) is a
/// century, which is for ever.
pub(crate) fn deadline_after(wait: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 86_400);
    let now = Instant::now();
    now.checked_add(wait.min(CENTURY)).unwrap_or(now)
}

/// The deadline of one call and how it waits.
struct Waiter {
    max_wait: Duration,
    deadline: Option<Instant>,
    counted: bool,
}

impl Waiter {
    fn new(max_wait: Duration) -> Waiter {
        Waiter {
            max_wait,
            deadline: None,
            counted: false,
        }
    }

    fn deadline(&mut self) -> Instant {
        *self
            .deadline
            .get_or_insert_with(|| deadline_after(self.max_wait))
    }

    /// Counts the call as one that waited (once).
    fn count(&mut self, shared: &Shared) {
        if !self.counted {
            self.counted = true;
            Counters::bump(&shared.counters.waits);
        }
    }

    /// Waits until the clock reaches `tick`; false, at once, if it cannot
    /// get there before the deadline even running at full speed (a clock an
    /// hour behind fails now, not after `max_wait`), or once the deadline
    /// passed.
    fn wait_for_tick(&mut self, shared: &Shared, tick: u64) -> bool {
        let deadline = self.deadline();
        loop {
            let now_tick = shared.ticks.fresh();
            if now_tick >= tick {
                return true;
            }
            let now = Instant::now();
            let left = deadline.saturating_duration_since(now);
            if left.is_zero()
                || shared.closed.load(Ordering::Relaxed)
                || shared.ticks.least_time_until(now_tick, tick) > left
            {
                return false;
            }
            self.count(shared);
            let nap = shared
                .ticks
                .time_until(tick)
                .unwrap_or(Duration::from_micros(100))
                .min(left);
            if nap < Duration::from_micros(20) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(nap);
            }
        }
    }

    /// A short pause while a switch completes; false if the deadline passed.
    fn pause(&mut self, shared: &Shared) -> bool {
        let deadline = self.deadline();
        if Instant::now() >= deadline || shared.closed.load(Ordering::Relaxed) {
            return false;
        }
        self.count(shared);
        std::thread::sleep(Duration::from_micros(50));
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::mpsc;

    use super::*;
    use crate::grant::{Grant, GrantRequest, source_fn};

    /// Grants that leave a one-tick gap after the committed end, so every
    /// renewal is installed through a grant switch.
    fn gapped() -> impl GrantSource {
        source_fn(|r: &GrantRequest| {
            let start = r.now.max(r.not_before) + u64::from(r.worker.is_some());
            Ok(Grant {
                namespace: r.namespace.clone(),
                worker: 3,
                incarnation: r.incarnation,
                grant_id: r.request_id,
                start,
                end: start + r.duration,
            })
        })
    }

    /// A `close()` that lands between a switch's check and its install (the
    /// renewal thread stalled there) stays final: the install does not
    /// reopen the cursor, and no ID is issued after `close()` returned.
    #[test]
    fn close_during_a_stalled_switch_stays_final() {
        let (to_test, at_point) = mpsc::channel::<HookPoint>();
        let (to_hook, go) = mpsc::channel::<()>();
        let go = Mutex::new(go);
        let installs = AtomicUsize::new(0);
        let g = Generator::builder(Layout::default(), "close-race", gapped())
            .grant_duration_ms(1_000)
            .horizon_ms(1_000)
            .max_drift_ms(0)
            .hook(move |point| {
                // The first install is the start-up grant; stop at the second.
                if point == HookPoint::BeforeInstall && installs.fetch_add(1, Ordering::SeqCst) != 1
                {
                    return;
                }
                if installs.load(Ordering::SeqCst) == 2 {
                    to_test.send(point).unwrap();
                    go.lock().unwrap().recv().unwrap();
                }
            })
            .start()
            .unwrap();
        assert!(g.next_id().is_ok());
        assert_eq!(at_point.recv().unwrap(), HookPoint::BeforeInstall);
        g.close();
        to_hook.send(()).unwrap();
        assert_eq!(at_point.recv().unwrap(), HookPoint::AfterInstall);
        // The new grant starts a tick after the old one ends, and `close()`
        // waited 200 ms for the renewal thread: the clock is inside the new
        // grant, so only the close can refuse the call.
        let after = g.next_id();
        to_hook.send(()).unwrap();
        assert_eq!(
            after.clone().map_err(|e| e.kind()),
            Err(ErrorKind::Closed),
            "an ID was issued after close() returned: {after:?}"
        );
    }
}
