//! A clock that moves only when told, for tests and fault injection.

use std::sync::Arc;

use napi_derive::napi;

use crate::convert::{MAX_SAFE, number_to_u64};
use crate::errors::Result;

/// A manual clock (Unix ms) to pass as `clock` to `Generator.start`: time
/// moves only through `set` and `advance`. For tests and fault injection
/// (clock steps back, a paused process); production uses the system clock.
#[napi]
pub struct ManualClock {
    pub(crate) inner: Arc<grantid::ManualClock>,
}

#[napi]
impl ManualClock {
    /// A clock reading `unixMs`.
    #[napi(constructor)]
    pub fn new(unix_ms: f64) -> Result<ManualClock> {
        let ms = number_to_u64(unix_ms, "unixMs", MAX_SAFE)?;
        Ok(ManualClock {
            inner: grantid::ManualClock::new(ms),
        })
    }

    /// Sets the time (it may go back).
    #[napi]
    pub fn set(&self, unix_ms: f64) -> Result<()> {
        self.inner.set(number_to_u64(unix_ms, "unixMs", MAX_SAFE)?);
        Ok(())
    }

    /// Moves the time forward by `ms`.
    #[napi]
    pub fn advance(&self, ms: f64) -> Result<()> {
        self.inner.advance(number_to_u64(ms, "ms", MAX_SAFE)?);
        Ok(())
    }

    /// The current reading in Unix ms.
    #[napi]
    pub fn now(&self) -> f64 {
        use grantid::Clock;
        self.inner.now_ms() as f64
    }
}
