//! Clocks: where the generator reads the time.
//!
//! The `next_id` path does not call the system clock. With [`SystemClock`]
//! (the default) a ticker thread per generator sleeps to each tick boundary
//! and publishes the current tick in one atomic; `next_id` loads it. Under
//! normal scheduling the published tick trails the wall clock by the thread's
//! wake-up latency (tens of microseconds), so it is at most one tick stale.
//! Whenever that staleness could cost something — the sequence of a tick is
//! used up, the cursor looks ahead of the clock, a wait is due — the generator
//! reads the clock itself before deciding. Staleness never affects
//! uniqueness: that rests on grants and the cursor, not on the clock.
//!
//! Any other [`Clock`] is called directly on each `next_id`; keep it cheap.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::Thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_utils::CachePadded;

use crate::forksafe::ForkSafeMutex;

/// A source of Unix time in milliseconds.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    fn now_ms(&self) -> u64;
}

/// The system's real-time clock (`CLOCK_REALTIME`). It can step back: the
/// generator's `max_drift` policy handles that.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl SystemClock {
    /// Unix time in nanoseconds (0 before 1970).
    pub fn now_ns() -> u128 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        (SystemClock::now_ns() / 1_000_000) as u64
    }
}

/// A clock that moves only when told: for tests and fault injection.
#[derive(Debug, Default)]
pub struct ManualClock {
    ms: AtomicU64,
}

impl ManualClock {
    /// A clock reading `unix_ms`.
    pub fn new(unix_ms: u64) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            ms: AtomicU64::new(unix_ms),
        })
    }

    /// Sets the time (may go back).
    pub fn set(&self, unix_ms: u64) {
        self.ms.store(unix_ms, Ordering::SeqCst);
    }

    /// Moves the time forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.ms.load(Ordering::SeqCst)
    }
}

/// The generator's view of time in ticks of its layout.
pub(crate) struct Ticks {
    epoch_ms: u64,
    tick_ms: u64,
    source: TickSource,
    /// The thread to wake when the clock jumps forward (the renewal thread,
    /// which sleeps until its next renewal is due by the clock it last
    /// read).
    on_jump: ForkSafeMutex<Option<Thread>>,
}

enum TickSource {
    /// A ticker thread publishes the tick; `fresh` reads the system clock.
    System(CachePadded<Ticker>),
    /// A user clock, read on every call.
    Custom(Arc<dyn Clock>),
}

pub(crate) struct Ticker {
    tick: AtomicU64,
    stop: AtomicBool,
    steps_back: AtomicU64,
}

impl fmt::Debug for Ticks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticks")
            .field("epoch_ms", &self.epoch_ms)
            .field("tick_ms", &self.tick_ms)
            .field("system", &matches!(self.source, TickSource::System(_)))
            .finish()
    }
}

impl Ticks {
    pub(crate) fn new(epoch_ms: u64, tick_ms: u64, clock: Option<Arc<dyn Clock>>) -> Ticks {
        let source = match clock {
            Some(c) => TickSource::Custom(c),
            None => TickSource::System(CachePadded::new(Ticker {
                tick: AtomicU64::new(0),
                stop: AtomicBool::new(false),
                steps_back: AtomicU64::new(0),
            })),
        };
        let ticks = Ticks {
            epoch_ms,
            tick_ms,
            source,
            on_jump: ForkSafeMutex::new(None),
        };
        if let TickSource::System(t) = &ticks.source {
            t.tick.store(ticks.fresh(), Ordering::Relaxed);
        }
        ticks
    }

    #[inline]
    fn to_tick(&self, unix_ms: u64) -> u64 {
        let since = unix_ms.saturating_sub(self.epoch_ms);
        if self.tick_ms == 1 {
            since
        } else {
            since / self.tick_ms
        }
    }

    /// The tick for the hot path: an atomic load with the system clock.
    #[inline]
    pub(crate) fn cached(&self) -> u64 {
        match &self.source {
            TickSource::System(t) => t.tick.load(Ordering::Relaxed),
            TickSource::Custom(c) => self.to_tick(c.now_ms()),
        }
    }

    /// The tick read from the clock now.
    pub(crate) fn fresh(&self) -> u64 {
        match &self.source {
            TickSource::System(_) => self.to_tick(SystemClock.now_ms()),
            TickSource::Custom(c) => self.to_tick(c.now_ms()),
        }
    }

    /// How long to sleep before `tick` can have begun, if that can be known
    /// (system clock); `None` for a user clock, which may move at any time.
    pub(crate) fn time_until(&self, tick: u64) -> Option<Duration> {
        match &self.source {
            TickSource::System(_) => {
                let target_ns = u128::from(
                    tick.saturating_mul(self.tick_ms)
                        .saturating_add(self.epoch_ms),
                ) * 1_000_000;
                let now = SystemClock::now_ns();
                Some(Duration::from_nanos(
                    target_ns.saturating_sub(now).min(u128::from(u64::MAX)) as u64,
                ))
            }
            TickSource::Custom(_) => None,
        }
    }

    /// The least real time before the clock, now at `now`, can reach
    /// `tick`: exact for the system clock; for a user clock, the whole
    /// ticks in between at real speed.
    pub(crate) fn least_time_until(&self, now: u64, tick: u64) -> Duration {
        self.time_until(tick).unwrap_or_else(|| {
            let ticks = tick.saturating_sub(now).saturating_sub(1);
            Duration::from_millis(ticks.saturating_mul(self.tick_ms))
        })
    }

    /// Sets the thread [`Ticks::wake_on_jump`] wakes.
    pub(crate) fn set_on_jump(&self, thread: Option<Thread>) {
        *self.on_jump.lock() = thread;
    }

    /// Wakes the thread set with [`Ticks::set_on_jump`]: the clock jumped
    /// forward, or a call found the committed grants used up.
    pub(crate) fn wake_on_jump(&self) {
        if let Some(t) = &*self.on_jump.lock() {
            t.unpark();
        }
    }

    /// Backward steps the ticker observed.
    pub(crate) fn steps_back(&self) -> u64 {
        match &self.source {
            TickSource::System(t) => t.steps_back.load(Ordering::Relaxed),
            TickSource::Custom(_) => 0,
        }
    }

    /// Starts the ticker thread (system clock only). It stops when
    /// [`Ticks::stop`] is called.
    pub(crate) fn spawn(self: &Arc<Self>) -> Option<std::thread::JoinHandle<()>> {
        let TickSource::System(ticker) = &self.source else {
            return None;
        };
        ticker.stop.store(false, Ordering::SeqCst);
        let ticks = Arc::clone(self);
        std::thread::Builder::new()
            .name("grantid-ticker".into())
            .spawn(move || ticks.run_ticker())
            .ok()
    }

    pub(crate) fn stop(&self) {
        if let TickSource::System(t) = &self.source {
            t.stop.store(true, Ordering::SeqCst);
        }
    }

    fn run_ticker(&self) {
        let TickSource::System(ticker) = &self.source else {
            return;
        };
        let tick_ns = u128::from(self.tick_ms) * 1_000_000;
        let epoch_ns = u128::from(self.epoch_ms) * 1_000_000;
        // Wake a little after each boundary so the read lands inside the new tick.
        const LATE_NS: u128 = 20_000;
        while !ticker.stop.load(Ordering::Relaxed) {
            let now = SystemClock::now_ns();
            let tick = self.to_tick((now / 1_000_000) as u64);
            let prev = ticker.tick.swap(tick, Ordering::Relaxed);
            if tick < prev {
                ticker.steps_back.fetch_add(1, Ordering::Relaxed);
            } else if tick > prev + 2 {
                // A step forward (or a ticker that was not scheduled for a
                // while): a renewal may be due earlier than planned.
                self.wake_on_jump();
            }
            let since_epoch = now.saturating_sub(epoch_ns);
            let next_boundary = (since_epoch / tick_ns + 1) * tick_ns;
            let wait = (next_boundary - since_epoch + LATE_NS).min(50_000_000);
            std::thread::sleep(Duration::from_nanos(wait as u64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_when_told() {
        let c = ManualClock::new(1_000);
        assert_eq!(c.now_ms(), 1_000);
        c.advance(5);
        assert_eq!(c.now_ms(), 1_005);
        c.set(10);
        assert_eq!(c.now_ms(), 10);
    }

    #[test]
    fn ticks_of_a_custom_clock_follow_it() {
        let c = ManualClock::new(1_000 + 3 * 10 + 7);
        let t = Ticks::new(1_000, 10, Some(c.clone()));
        assert_eq!(t.cached(), 3);
        assert_eq!(t.fresh(), 3);
        c.set(500);
        assert_eq!(t.fresh(), 0, "before the epoch saturates to 0");
        assert_eq!(t.time_until(100), None);
    }

    /// The ticker wakes the renewal thread when the clock steps forward (a
    /// published tick far behind the clock looks the same to it). Without
    /// the wake, the parked thread would sleep its whole 10 s.
    #[test]
    fn the_ticker_wakes_the_renewal_thread_after_a_forward_step() {
        let t = Arc::new(Ticks::new(crate::layout::DEFAULT_EPOCH_MS, 1, None));
        let TickSource::System(ticker) = &t.source else {
            unreachable!()
        };
        ticker.tick.store(0, Ordering::Relaxed);
        let (parked, woken) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            parked.send(std::thread::current()).unwrap();
            let t0 = std::time::Instant::now();
            std::thread::park_timeout(Duration::from_secs(10));
            t0.elapsed()
        });
        t.set_on_jump(Some(woken.recv().unwrap()));
        let handle = t.spawn().unwrap();
        let slept = sleeper.join().unwrap();
        t.stop();
        handle.join().unwrap();
        assert!(slept < Duration::from_secs(5), "slept {slept:?}");
    }

    #[test]
    fn the_ticker_publishes_the_system_tick() {
        let t = Arc::new(Ticks::new(crate::layout::DEFAULT_EPOCH_MS, 1, None));
        let handle = t.spawn().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let fresh = t.fresh();
        let cached = t.cached();
        t.stop();
        handle.join().unwrap();
        // A loaded machine may delay the ticker; it must have moved and be
        // close to the clock, never ahead of it.
        assert!(cached <= fresh, "cached {cached} ahead of fresh {fresh}");
        assert!(
            fresh - cached < 1_000,
            "cached {cached} far behind fresh {fresh}"
        );
    }
}
