//! The `Generator` class: `await Generator.start(options)`, then `nextId()`
//! and friends, all synchronous and lock-free in the core.

use std::sync::Arc;
use std::time::{Duration, Instant};

use napi::bindgen_prelude::{AsyncTask, BigInt, ToNapiValue, Unknown};
use napi::{Env, Task};
use napi_derive::napi;

use crate::convert::{
    DecodedId, DecodedIdBigInt, LayoutInfo, MAX_SAFE, count_from_js, decoded_to_js,
    decoded_to_js_bigint, from_js, id_from_js, number_to_u64,
};
use crate::errors::{Result, map_error, rejection};
use crate::events;
use crate::hot::{self, RawValue};
use crate::options::{Plan, StartOptions};

/// Issues IDs inside grants reserved by an authority. IDs are decimal
/// strings (`nextId`) or bigints (`nextIdBigInt`), never numbers.
///
/// The generator's threads and its grant source never keep the process
/// alive by themselves: a script whose only pending work is an open
/// generator exits. Call `close()` to release the worker at once (the
/// authority then frees it without waiting for the lease to expire).
#[napi]
pub struct Generator {
    inner: Arc<grantid::Generator>,
    /// The `onEvent` registration, removed on close.
    events: Option<u64>,
}

impl Drop for Generator {
    fn drop(&mut self) {
        if let Some(id) = self.events {
            events::unregister(id);
        }
    }
}

/// Starts a generator off the JS thread, so a JS grant source can answer
/// the first request while `start` waits for it.
pub struct StartTask {
    plan: Option<Plan>,
    events: Option<u64>,
}

impl Task for StartTask {
    type Output = std::result::Result<grantid::Generator, grantid::Error>;
    type JsValue = RawValue;

    fn compute(&mut self) -> napi::Result<Self::Output> {
        let Some(plan) = self.plan.take() else {
            return Ok(Err(grantid::Error::new(
                grantid::ErrorKind::Closed,
                "start ran twice",
            )));
        };
        // Registered before the first grant, so start-up events
        // (`grant_uncertain`, ...) reach `onEvent` too.
        if let Some(f) = &plan.events {
            self.events = Some(events::register(plan.namespace(), Arc::clone(f)));
        }
        Ok(plan.into_builder().and_then(|b| b.start()))
    }

    fn resolve(&mut self, env: Env, output: Self::Output) -> napi::Result<RawValue> {
        match output {
            Ok(inner) => {
                let inner = Arc::new(inner);
                let generator = Generator {
                    inner: Arc::clone(&inner),
                    events: self.events.take(),
                };
                // SAFETY: `env` is the live env of this resolve callback, on
                // the JS thread; the class is registered (the module loaded).
                let instance = unsafe { Generator::to_napi_value(env.raw(), generator) }?;
                // The instance's own nextId / nextIdBigInt skip napi-rs's
                // per-call method machinery (see hot.rs).
                hot::install(&env, instance, &inner)?;
                Ok(RawValue(instance))
            }
            Err(e) => {
                if let Some(id) = self.events.take() {
                    events::unregister(id);
                }
                Err(rejection(&env, e))
            }
        }
    }
}

/// `nextIdsAsync`: a batch taken off the JS thread, waiting out a grant
/// switch or a renewal (which may need the JS thread for a JS grant
/// source) up to a deadline.
pub struct NextIdsTask {
    inner: Arc<grantid::Generator>,
    n: usize,
    timeout: Duration,
}

impl Task for NextIdsTask {
    type Output = std::result::Result<Vec<u64>, grantid::Error>;
    type JsValue = Vec<String>;

    fn compute(&mut self) -> napi::Result<Self::Output> {
        let deadline = Instant::now() + self.timeout;
        let mut pause = Duration::from_millis(1);
        loop {
            match self.inner.next_ids(self.n) {
                Err(e) if waitable(e.kind()) && Instant::now() + pause < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                other => return Ok(other),
            }
        }
    }

    fn resolve(&mut self, env: Env, output: Self::Output) -> napi::Result<Vec<String>> {
        match output {
            Ok(ids) => Ok(ids.iter().map(u64::to_string).collect()),
            Err(e) => Err(rejection(&env, e)),
        }
    }
}

/// Errors a renewal can end: waited out by `nextIdsAsync`. `LEASE_LOST`,
/// `CLOSED`, `CLOCK_ROLLBACK` and `INVALID_ARGUMENT` reject at once.
fn waitable(kind: grantid::ErrorKind) -> bool {
    matches!(
        kind,
        grantid::ErrorKind::GrantExhausted
            | grantid::ErrorKind::Unavailable
            | grantid::ErrorKind::NotYetValid
            | grantid::ErrorKind::CapacityExhausted
    )
}

/// The default bound of `nextIdsAsync` (ms).
const DEFAULT_ASYNC_TIMEOUT_MS: u64 = 10_000;

/// A snapshot of a generator's counters and lease.
#[napi(object)]
pub struct Stats {
    pub ids_issued: f64,
    pub waits: f64,
    pub clock_rollbacks: f64,
    pub clock_steps_back: f64,
    pub grants_acquired: f64,
    pub renewals: f64,
    pub uncertain_retries: f64,
    pub invalid_grants: f64,
    pub lease_losses: f64,
    /// The worker in use, or `null` when no grant is installed.
    pub worker: Option<u32>,
    /// End (exclusive, ticks) of the committed grants, or `null`.
    pub grant_end: Option<f64>,
    pub remaining_ticks: f64,
    pub incarnation: BigInt,
    pub fork_reactivations: f64,
}

#[napi]
impl Generator {
    /// Starts a generator: resolves once the first valid grant is committed,
    /// rejects with `UNAVAILABLE` / `LEASE_LOST` after `startupTimeoutMs`, or
    /// with `INVALID_ARGUMENT` for bad options.
    #[napi(
        ts_args_type = "options: StartOptions",
        ts_return_type = "Promise<Generator>"
    )]
    pub fn start(options: Unknown<'_>) -> Result<AsyncTask<StartTask>> {
        let plan = Plan::from_options(from_js::<StartOptions<'_>>(&options)?)?;
        Ok(AsyncTask::new(StartTask {
            plan: Some(plan),
            events: None,
        }))
    }

    /// The next ID, as a decimal string.
    #[napi]
    pub fn next_id(&self) -> Result<String> {
        self.inner
            .next_id()
            .map(|id| id.to_string())
            .map_err(map_error)
    }

    /// The next ID, as a bigint.
    #[napi(js_name = "nextIdBigInt")]
    pub fn next_id_bigint(&self) -> Result<BigInt> {
        self.inner.next_id().map(BigInt::from).map_err(map_error)
    }

    /// `n` IDs in increasing order, all or none (`n <= maxBatch`).
    #[napi(ts_args_type = "n: number")]
    pub fn next_ids(&self, n: Unknown<'_>) -> Result<Vec<String>> {
        let n = count_from_js(&n, "n")?;
        let ids = self.inner.next_ids(n as usize).map_err(map_error)?;
        Ok(ids.iter().map(u64::to_string).collect())
    }

    /// `n` IDs in increasing order, all or none (`n <= maxBatch`), taken
    /// off the JS thread: resolves once the batch is issued, waiting for a
    /// grant switch or a renewal (a JS grant source runs meanwhile) up to
    /// `timeoutMs` (default 10000); then rejects with the last error.
    /// `LEASE_LOST`, `CLOSED`, `CLOCK_ROLLBACK` and `INVALID_ARGUMENT`
    /// reject at once.
    #[napi(
        ts_args_type = "n: number, timeoutMs?: number",
        ts_return_type = "Promise<Array<string>>"
    )]
    pub fn next_ids_async(
        &self,
        n: Unknown<'_>,
        timeout_ms: Option<f64>,
    ) -> Result<AsyncTask<NextIdsTask>> {
        let n = count_from_js(&n, "n")?;
        let timeout = match timeout_ms {
            None => DEFAULT_ASYNC_TIMEOUT_MS,
            Some(v) => number_to_u64(v, "timeoutMs", MAX_SAFE)?,
        };
        Ok(AsyncTask::new(NextIdsTask {
            inner: Arc::clone(&self.inner),
            n: n as usize,
            timeout: Duration::from_millis(timeout),
        }))
    }

    /// The fields of an ID of this generator's layout.
    #[napi(ts_args_type = "id: string | bigint")]
    pub fn decode(&self, id: Unknown<'_>) -> Result<DecodedId> {
        let id = id_from_js(&id)?;
        decoded_to_js(&self.inner.decode(id).map_err(map_error)?)
    }

    /// The fields of an ID as bigints.
    #[napi(js_name = "decodeBigInt", ts_args_type = "id: string | bigint")]
    pub fn decode_bigint(&self, id: Unknown<'_>) -> Result<DecodedIdBigInt> {
        let id = id_from_js(&id)?;
        Ok(decoded_to_js_bigint(
            &self.inner.decode(id).map_err(map_error)?,
        ))
    }

    /// Counters and lease state.
    #[napi]
    pub fn stats(&self) -> Stats {
        let s = self.inner.stats();
        Stats {
            ids_issued: s.ids_issued as f64,
            waits: s.waits as f64,
            clock_rollbacks: s.clock_rollbacks as f64,
            clock_steps_back: s.clock_steps_back as f64,
            grants_acquired: s.grants_acquired as f64,
            renewals: s.renewals as f64,
            uncertain_retries: s.uncertain_retries as f64,
            invalid_grants: s.invalid_grants as f64,
            lease_losses: s.lease_losses as f64,
            worker: s.worker,
            grant_end: s.grant_end.map(|e| e as f64),
            remaining_ticks: s.remaining_ticks as f64,
            incarnation: BigInt::from(s.incarnation),
            fork_reactivations: s.fork_reactivations as f64,
        }
    }

    /// Stops issuing (`CLOSED` from then on), stops the generator's threads
    /// and releases the worker. Idempotent; also run when the object is
    /// garbage-collected.
    #[napi]
    pub fn close(&self) {
        self.inner.close();
        // The `closed` event is queued by now; later events are not this
        // generator's.
        if let Some(id) = self.events {
            events::unregister(id);
        }
    }

    /// True once `close()` ran.
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// The namespace.
    #[napi(getter)]
    pub fn namespace(&self) -> String {
        self.inner.namespace().to_string()
    }

    /// The layout.
    #[napi(getter)]
    pub fn layout(&self) -> LayoutInfo {
        LayoutInfo::from(self.inner.layout())
    }

    /// The datacenter this generator issues in (its `datacenter` option or
    /// its authority URL's `datacenter=N`), or `null`.
    #[napi(getter)]
    pub fn datacenter(&self) -> Option<u32> {
        self.inner.datacenter()
    }
}
