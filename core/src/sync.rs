//! Every atomic of the cursor, from `std` or, under `cfg(grantid_loom)`,
//! from `loom` so the models in `loom-tests/` explore its interleavings.

#[cfg(grantid_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(grantid_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

/// A pause inside a retry loop: a spin hint, or a yield under loom so the
/// model lets the other threads run.
#[inline]
pub(crate) fn spin() {
    #[cfg(grantid_loom)]
    loom::thread::yield_now();
    #[cfg(not(grantid_loom))]
    std::hint::spin_loop();
}
