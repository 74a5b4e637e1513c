//! `grantid_set_log_callback`: the core's events (`log` facade, target
//! `grantid`, messages `event=NAME key=value ...`) delivered to a C
//! function.
//!
//! Threading: the callback runs on the thread that emits the event, most
//! often a generator's renewal thread ("grantid-lease"), also the thread
//! that closes or frees a generator (`event=closed`) and the first caller
//! in a `fork()` child (`event=fork_reactivate`); never on the
//! `grantid_next_id` path. Several threads may call it at once.
//! `grantid_set_log_callback` waits for calls in flight, so once it returns
//! the previous callback and `user_data` are no longer used. A callback
//! must not call `grantid_set_log_callback` itself (that call fails with
//! `GRANTID_INVALID_ARGUMENT`); it may call any other function.
//!
//! A process has one `log` logger: the first call installs this library's
//! (and keeps it for the life of the process). If the host program (Rust
//! code linked into the same process) installed another logger first, the
//! call fails with `GRANTID_INVALID_ARGUMENT` and the events go to the
//! host's logger.

use std::cell::Cell;
use std::ffi::{c_char, c_void};
use std::sync::{Once, RwLock};

use log::{Level, LevelFilter, Log, Metadata, Record};

use crate::guard::{c_string, guard, invalid};
use crate::status::grantid_status;

/// Level of an event: unrecoverable for a generator (a lost lease).
pub const GRANTID_LOG_ERROR: i32 = 1;
/// Level of an event: a condition retried (an uncertain grant).
pub const GRANTID_LOG_WARN: i32 = 2;
/// Level of an event: a state change (closed, fork re-activation).
pub const GRANTID_LOG_INFO: i32 = 3;
/// Level of an event: routine (each grant).
pub const GRANTID_LOG_DEBUG: i32 = 4;
/// Level of an event: the most detailed.
pub const GRANTID_LOG_TRACE: i32 = 5;

/// Receives one event: its level (`GRANTID_LOG_*`), its target (the Rust
/// module path, `"grantid"` for the core's events), its message (starting
/// with `event=NAME`) and the `user_data` given to
/// `grantid_set_log_callback`. Both strings are NUL-terminated and valid
/// only during the call.
#[allow(non_camel_case_types)]
pub type grantid_log_fn = Option<
    unsafe extern "C" fn(
        level: i32,
        target: *const c_char,
        message: *const c_char,
        user_data: *mut c_void,
    ),
>;

#[derive(Clone, Copy)]
struct Sink {
    callback: unsafe extern "C" fn(i32, *const c_char, *const c_char, *mut c_void),
    min_level: Level,
    user_data: *mut c_void,
}

// SAFETY: the caller of `grantid_set_log_callback` promises `user_data` is
// usable from any thread (documented); the function pointer is plain code.
unsafe impl Send for Sink {}
// SAFETY: as for Send: the sink is only read, and `user_data` is usable from
// any thread by the caller's promise.
unsafe impl Sync for Sink {}

static SINK: RwLock<Option<Sink>> = RwLock::new(None);
static INSTALL: Once = Once::new();
static OURS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

thread_local! {
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

struct CLogger;

static LOGGER: CLogger = CLogger;

impl Log for CLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        SINK.read()
            .map(|s| s.is_some_and(|s| metadata.level() <= s.min_level))
            .unwrap_or(false)
    }

    fn log(&self, record: &Record<'_>) {
        let Ok(sink) = SINK.read() else { return };
        let Some(s) = *sink else { return };
        if record.level() > s.min_level {
            return;
        }
        let target = c_string(record.target());
        let message = c_string(&record.args().to_string());
        let level = record.level() as i32;
        IN_CALLBACK.with(|f| f.set(true));
        // SAFETY: a function pointer given by the caller, with strings alive
        // for the call; the read lock keeps the sink current until it returns.
        unsafe { (s.callback)(level, target.as_ptr(), message.as_ptr(), s.user_data) };
        IN_CALLBACK.with(|f| f.set(false));
    }

    fn flush(&self) {}
}

fn level_of(n: i32) -> Option<Level> {
    Some(match n {
        GRANTID_LOG_ERROR => Level::Error,
        GRANTID_LOG_WARN => Level::Warn,
        GRANTID_LOG_INFO => Level::Info,
        GRANTID_LOG_DEBUG => Level::Debug,
        GRANTID_LOG_TRACE => Level::Trace,
        _ => return None,
    })
}

/// Sends the library's events to `callback`, process-wide, for every event
/// at `min_level` or more severe (`GRANTID_LOG_WARN` delivers warnings and
/// errors). `callback` NULL stops delivery (`min_level` is then ignored).
/// Replaces any earlier callback; returns once no call to the earlier one
/// is in flight. See the module text for threading: `callback` runs on
/// grantid's threads and `user_data` must be usable from any thread.
///
/// `GRANTID_INVALID_ARGUMENT`: `min_level` outside 1..=5, a call from inside
/// the callback, or another `log` logger installed in the process first.
#[unsafe(no_mangle)]
pub extern "C" fn grantid_set_log_callback(
    callback: grantid_log_fn,
    min_level: i32,
    user_data: *mut c_void,
) -> grantid_status {
    guard(|| {
        if IN_CALLBACK.with(Cell::get) {
            return Err(invalid(
                "grantid_set_log_callback was called from inside the log callback",
            ));
        }
        let sink = match callback {
            None => None,
            Some(callback) => Some(Sink {
                callback,
                min_level: level_of(min_level).ok_or_else(|| {
                    invalid(format!(
                        "min_level is {min_level}, expected GRANTID_LOG_ERROR (1) to GRANTID_LOG_TRACE (5)"
                    ))
                })?,
                user_data,
            }),
        };
        INSTALL.call_once(|| {
            if log::set_logger(&LOGGER).is_ok() {
                OURS.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        });
        if !OURS.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(invalid(
                "another log logger is installed in this process: grantid's events go to it",
            ));
        }
        let filter = sink.map_or(LevelFilter::Off, |s| s.min_level.to_level_filter());
        // The write lock waits for calls in flight to the earlier callback.
        *SINK.write().unwrap_or_else(|p| p.into_inner()) = sink;
        log::set_max_level(filter);
        Ok(())
    })
}
