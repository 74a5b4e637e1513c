//! `Generator.start` options: read on the JS thread into a [`Plan`], which
//! is turned into a started core generator off the JS thread.

use std::sync::Arc;
use std::time::Duration;

use grantid::{ForkPolicy, GeneratorBuilder, GrantSource, Layout};
use napi::bindgen_prelude::{ClassInstance, Either};
use napi_derive::napi;

use crate::clock::ManualClock;
use crate::convert::{LayoutOptions, MAX_SAFE, layout_from_js, number_to_u64};
use crate::errors::{Result, invalid};
use crate::events::EventFn;
use crate::source::{JsSource, LeaseLost, LostFn, SourceFn, new_source};

/// How long the renewal thread waits for a JS grant source to answer before
/// it counts the call as unavailable and retries. Shorter than the default
/// horizon (5 s) so a stalled event loop is retried while committed time is
/// still left.
pub const DEFAULT_SOURCE_TIMEOUT_MS: u64 = 2_000;

/// Ticks cross into JS as numbers: at most 53 timestamp bits keep them exact.
const MAX_JS_TIMESTAMP_BITS: u8 = 53;

/// Options of `Generator.start`. Durations are milliseconds.
#[napi(object, object_to_js = false)]
pub struct StartOptions<'env> {
    /// An authority URL (`file:PATH`, `postgres://...`, `redis://...`,
    /// `static:N`) or a function `(request) => grant | Promise<grant>`.
    #[napi(ts_type = "string | ((request: GrantRequest) => Grant | Promise<Grant>)")]
    pub grant_source: Either<String, SourceFn>,
    /// The ID format's name (`"orders-v1"`); every grant carries it.
    pub namespace: String,
    /// The bit layout (default 41 / 10 / 12, 1 ms ticks, epoch 2026-01-01).
    pub layout: Option<LayoutOptions>,
    /// How far the cursor may lead the clock (default 100).
    pub max_drift_ms: Option<f64>,
    /// Longest `start` waits for the first grant (default 10000).
    pub startup_timeout_ms: Option<f64>,
    /// Called on the JS thread after a confirmed loss of the worker.
    #[napi(ts_type = "(event: LeaseLost) => void")]
    pub on_lease_lost: Option<LostFn>,
    /// Longest one call waits for the clock or a grant switch (default 100).
    pub max_wait_ms: Option<f64>,
    /// Largest `nextIds` batch (default 100000).
    pub max_batch: Option<f64>,
    /// Length of each requested grant (default 1000).
    pub grant_duration_ms: Option<f64>,
    /// Committed time kept ahead of the clock (default 5000).
    pub horizon_ms: Option<f64>,
    /// First retry delay after an uncertain answer (default 50).
    pub backoff_min_ms: Option<f64>,
    /// Longest retry delay (default 2000).
    pub backoff_max_ms: Option<f64>,
    /// Number of cursor shards (default: the number of CPUs).
    pub shards: Option<f64>,
    /// Longest the renewal thread waits for a JS grant source's answer
    /// (default 2000); a timeout counts as unavailable.
    pub source_timeout_ms: Option<f64>,
    /// What a `fork()` child does: `'reactivate'` (default) or `'close'`.
    #[napi(ts_type = "'reactivate' | 'close'")]
    pub fork_policy: Option<String>,
    /// The datacenter this generator runs in (the layout needs
    /// `datacenterBits`): a grant of another datacenter's worker is
    /// refused, and an authority URL's `datacenter=N` must agree.
    pub datacenter: Option<f64>,
    /// A `ManualClock` instead of the system clock (tests).
    pub clock: Option<ClassInstance<'env, ManualClock>>,
    /// Called on the JS thread with each of the core's events for this
    /// generator's namespace (`grant`, `grant_uncertain`, `lease_lost`,
    /// `closed`, ...), queued without blocking issuance.
    #[napi(ts_type = "(event: GrantIdEvent) => void")]
    pub on_event: Option<EventFn>,
}

/// Where grants come from.
pub enum SourceChoice {
    Url(String),
    Js(JsSource),
}

/// Everything `start` needs, checked, ready to run off the JS thread.
pub struct Plan {
    layout: Layout,
    namespace: String,
    source: SourceChoice,
    settings: Vec<Setting>,
    /// The `onEvent` function.
    pub events: Option<Arc<EventFn>>,
}

enum Setting {
    MaxDrift(u64),
    StartupTimeout(Duration),
    MaxWait(Duration),
    MaxBatch(usize),
    GrantDuration(u64),
    Horizon(u64),
    Backoff(Duration, Duration),
    Shards(usize),
    Fork(ForkPolicy),
    Clock(Arc<grantid::ManualClock>),
    Lost(Arc<LostFn>),
    Datacenter(u32),
}

fn ms(v: Option<f64>, name: &str) -> Result<Option<u64>> {
    v.map(|v| number_to_u64(v, name, MAX_SAFE)).transpose()
}

impl Plan {
    /// Reads and checks the options (on the JS thread).
    pub fn from_options(o: StartOptions<'_>) -> Result<Plan> {
        let layout = layout_from_js(o.layout.as_ref())?;
        if layout.timestamp_bits() > MAX_JS_TIMESTAMP_BITS {
            return Err(invalid(format!(
                "timestampBits is {}; a Node generator takes at most {MAX_JS_TIMESTAMP_BITS} so ticks stay exact JS numbers",
                layout.timestamp_bits()
            )));
        }
        let source_timeout =
            ms(o.source_timeout_ms, "sourceTimeoutMs")?.unwrap_or(DEFAULT_SOURCE_TIMEOUT_MS);
        if source_timeout == 0 {
            return Err(invalid("sourceTimeoutMs must be at least 1"));
        }
        let source = match o.grant_source {
            Either::A(url) => SourceChoice::Url(url),
            Either::B(f) => SourceChoice::Js(new_source(f, Duration::from_millis(source_timeout))),
        };
        let mut settings = Vec::new();
        if let Some(v) = ms(o.max_drift_ms, "maxDriftMs")? {
            settings.push(Setting::MaxDrift(v));
        }
        if let Some(v) = ms(o.startup_timeout_ms, "startupTimeoutMs")? {
            settings.push(Setting::StartupTimeout(Duration::from_millis(v)));
        }
        if let Some(v) = ms(o.max_wait_ms, "maxWaitMs")? {
            settings.push(Setting::MaxWait(Duration::from_millis(v)));
        }
        if let Some(v) = ms(o.max_batch, "maxBatch")? {
            settings.push(Setting::MaxBatch(v as usize));
        }
        if let Some(v) = ms(o.grant_duration_ms, "grantDurationMs")? {
            settings.push(Setting::GrantDuration(v));
        }
        if let Some(v) = ms(o.horizon_ms, "horizonMs")? {
            settings.push(Setting::Horizon(v));
        }
        let b_min = ms(o.backoff_min_ms, "backoffMinMs")?;
        let b_max = ms(o.backoff_max_ms, "backoffMaxMs")?;
        if b_min.is_some() || b_max.is_some() {
            let min = b_min.map_or(grantid::DEFAULT_BACKOFF_MIN, Duration::from_millis);
            let max = b_max.map_or(grantid::DEFAULT_BACKOFF_MAX.max(min), Duration::from_millis);
            settings.push(Setting::Backoff(min, max));
        }
        if let Some(v) = ms(o.shards, "shards")? {
            settings.push(Setting::Shards(v as usize));
        }
        match o.fork_policy.as_deref() {
            None | Some("reactivate") => {}
            Some("close") => settings.push(Setting::Fork(ForkPolicy::Close)),
            Some(other) => {
                return Err(invalid(format!(
                    "forkPolicy must be 'reactivate' or 'close', got {other:?}"
                )));
            }
        }
        if let Some(clock) = &o.clock {
            settings.push(Setting::Clock(Arc::clone(&clock.inner)));
        }
        if let Some(v) = o.datacenter {
            let dc = number_to_u64(v, "datacenter", u64::from(u32::MAX))?;
            // Fits: bounded by u32::MAX above.
            settings.push(Setting::Datacenter(dc as u32));
        }
        if let Some(f) = o.on_lease_lost {
            settings.push(Setting::Lost(Arc::new(f)));
        }
        Ok(Plan {
            layout,
            namespace: o.namespace,
            source,
            settings,
            events: o.on_event.map(Arc::new),
        })
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Resolves the source and configures the core builder (off the JS
    /// thread: opening a URL authority may block).
    pub fn into_builder(self) -> std::result::Result<GeneratorBuilder, grantid::Error> {
        let source: Box<dyn GrantSource> = match self.source {
            SourceChoice::Js(js) => Box::new(js),
            SourceChoice::Url(url) => crate::url::open(&url)?,
        };
        let mut b = grantid::Generator::builder(self.layout, self.namespace, source);
        for s in self.settings {
            b = match s {
                Setting::MaxDrift(v) => b.max_drift_ms(v),
                Setting::StartupTimeout(d) => b.startup_timeout(d),
                Setting::MaxWait(d) => b.max_wait(d),
                Setting::MaxBatch(n) => b.max_batch(n),
                Setting::GrantDuration(v) => b.grant_duration_ms(v),
                Setting::Horizon(v) => b.horizon_ms(v),
                Setting::Backoff(min, max) => b.backoff(min, max),
                Setting::Shards(n) => b.shards(n),
                Setting::Fork(p) => b.fork_policy(p),
                Setting::Clock(c) => b.clock(c),
                Setting::Datacenter(dc) => b.datacenter(dc),
                Setting::Lost(f) => b.on_lease_lost(move |event| {
                    let _ = f.call(
                        LeaseLost {
                            worker: event.worker,
                            reason: event.reason.clone(),
                        },
                        napi::threadsafe_function::ThreadsafeFunctionCallMode::NonBlocking,
                    );
                }),
            };
        }
        Ok(b)
    }
}
