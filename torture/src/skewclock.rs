//! A clock for fault injection inside the worker binary only: the system
//! clock plus an offset that a schedule moves back and forward.
//!
//! Every few seconds the offset jumps back by 50-500 ms (the generator must
//! keep its cursor, then wait or answer `ClockRollback`) or forward by
//! 50-300 ms (the cursor runs ahead of the committed grant, then the clock
//! comes back). A while later it returns to 0. Each jump is counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use grantid::{Clock, SystemClock};

/// The system clock plus a moving offset.
#[derive(Debug, Default)]
pub struct SkewClock {
    offset_ms: AtomicI64,
    /// Jumps that moved the clock back.
    pub steps_back: AtomicU64,
    /// Jumps that moved the clock forward.
    pub steps_forward: AtomicU64,
}

impl Clock for SkewClock {
    fn now_ms(&self) -> u64 {
        let now = SystemClock.now_ms() as i64;
        now.saturating_add(self.offset_ms.load(Ordering::Relaxed))
            .max(0) as u64
    }
}

impl SkewClock {
    /// A clock with no offset.
    pub fn new() -> Arc<SkewClock> {
        Arc::new(SkewClock::default())
    }

    /// Sets the offset, counting the jump's direction.
    pub fn set_offset(&self, ms: i64) {
        let old = self.offset_ms.swap(ms, Ordering::SeqCst);
        if ms < old {
            self.steps_back.fetch_add(1, Ordering::Relaxed);
        } else if ms > old {
            self.steps_forward.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The current offset in ms.
    pub fn offset(&self) -> i64 {
        self.offset_ms.load(Ordering::Relaxed)
    }

    /// Runs the schedule until `stop`: wait 1.5-4 s, jump (back 50-500 ms
    /// two times in three, else forward 50-300 ms), hold 0.2-1.5 s, jump
    /// back to no offset.
    pub fn run_schedule(&self, stop: &AtomicBool) {
        let nap = |ms: u64| {
            let mut left = ms;
            while left > 0 && !stop.load(Ordering::Relaxed) {
                let step = left.min(50);
                std::thread::sleep(Duration::from_millis(step));
                left -= step;
            }
        };
        while !stop.load(Ordering::Relaxed) {
            nap(fastrand::u64(1_500..4_000));
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let jump = if fastrand::u8(..3) < 2 {
                -(fastrand::i64(50..=500))
            } else {
                fastrand::i64(50..=300)
            };
            self.set_offset(jump);
            nap(fastrand::u64(200..1_500));
            self.set_offset(0);
        }
        self.set_offset(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_move_the_clock_and_are_counted() {
        let c = SkewClock::new();
        let before = c.now_ms();
        c.set_offset(-400);
        let back = c.now_ms();
        assert!(
            back + 300 < before + 50,
            "{back} is not ~400 ms before {before}"
        );
        c.set_offset(0);
        c.set_offset(250);
        assert!(c.now_ms() >= before + 250);
        assert_eq!(c.steps_back.load(Ordering::Relaxed), 1);
        assert_eq!(c.steps_forward.load(Ordering::Relaxed), 2);
        assert_eq!(c.offset(), 250);
    }
}
