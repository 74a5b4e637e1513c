//! The `onEvent` option: the core's `log` events (target `grantid`,
//! messages `event=NAME ...`) delivered to JS as `{ event, level, message }`.
//!
//! A process has one `log` logger: the first `Generator.start` with
//! `onEvent` installs this module's, which hands each event to the
//! `onEvent` functions of the open generators whose namespace the event
//! names (`namespace=NS`); an event naming no namespace goes to every one.
//! Two generators of one namespace in one process see each other's events.
//! If something else installed a `log` logger first (another native addon
//! built on Rust's `log`), `start` still works but `onEvent` receives
//! nothing; `eventsInstalled()` says which.
//!
//! Delivery: the emitting thread (a renewal thread, never the `nextId`
//! path) formats the event and queues it on a non-blocking, weak
//! `ThreadsafeFunction`; the JS function runs later on the JS thread.
//! Issuance never waits for JS.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Once, RwLock};

use log::{Level, LevelFilter, Log, Metadata, Record};
use napi::Status;
use napi::bindgen_prelude::Unknown;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi_derive::napi;

/// What `onEvent` is told.
#[napi(object, object_from_js = false)]
pub struct GrantIdEvent {
    /// The event's name (`grant`, `grant_uncertain`, `lease_lost`, ...).
    pub event: String,
    /// `'error' | 'warn' | 'info' | 'debug' | 'trace'`.
    #[napi(ts_type = "'error' | 'warn' | 'info' | 'debug' | 'trace'")]
    pub level: String,
    /// The whole line, `event=NAME key=value ...`.
    pub message: String,
}

/// The `onEvent` callback, held weakly (never keeps the process alive).
pub type EventFn =
    ThreadsafeFunction<GrantIdEvent, Unknown<'static>, GrantIdEvent, Status, false, true>;

struct Sink {
    id: u64,
    namespace: String,
    f: Arc<EventFn>,
}

static SINKS: RwLock<Vec<Sink>> = RwLock::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static INSTALL: Once = Once::new();
static OURS: AtomicBool = AtomicBool::new(false);

struct NodeLogger;

static LOGGER: NodeLogger = NodeLogger;

impl Log for NodeLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= Level::Debug && metadata.target() == "grantid"
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let Ok(sinks) = SINKS.read() else { return };
        if sinks.is_empty() {
            return;
        }
        let message = record.args().to_string();
        let event = message
            .strip_prefix("event=")
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or("")
            .to_owned();
        let named = message
            .split(' ')
            .find_map(|kv| kv.strip_prefix("namespace="));
        let level = match record.level() {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
            Level::Trace => "trace",
        };
        for sink in sinks
            .iter()
            .filter(|s| named.is_none_or(|n| n == s.namespace))
        {
            let _ = sink.f.call(
                GrantIdEvent {
                    event: event.clone(),
                    level: level.to_owned(),
                    message: message.clone(),
                },
                ThreadsafeFunctionCallMode::NonBlocking,
            );
        }
    }

    fn flush(&self) {}
}

/// Adds `f` for events of `namespace`; returns its key for [`unregister`].
pub fn register(namespace: &str, f: Arc<EventFn>) -> u64 {
    INSTALL.call_once(|| {
        if log::set_logger(&LOGGER).is_ok() {
            OURS.store(true, Ordering::SeqCst);
            log::set_max_level(LevelFilter::Debug);
        }
    });
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    SINKS.write().unwrap_or_else(|p| p.into_inner()).push(Sink {
        id,
        namespace: namespace.to_owned(),
        f,
    });
    id
}

/// Removes the sink `id` (idempotent).
pub fn unregister(id: u64) {
    SINKS
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|s| s.id != id);
}

/// True when this addon's bridge is the process's `log` logger (set by the
/// first `Generator.start` with `onEvent`).
#[napi]
pub fn events_installed() -> bool {
    OURS.load(Ordering::SeqCst)
}
