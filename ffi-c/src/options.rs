//! `grantid_generator_options`: the builder options as one C struct.

use std::ffi::{CStr, c_char, c_void};
use std::time::Duration;

use grantid::{ForkPolicy, GeneratorBuilder, Layout};

use crate::callback::{
    grantid_free_fn, grantid_grant_fn, grantid_lease_lost_fn, grantid_release_fn,
};
use crate::guard::{Failure, guard, invalid, out_arg};
use crate::layout::grantid_layout;
use crate::sized::{self, Growable};
use crate::status::grantid_status;

/// `fork_policy`: a `fork()` child re-activates on its first call (fresh
/// incarnation, new worker, new grant; the call waits up to the start-up
/// timeout). The default.
pub const GRANTID_FORK_REACTIVATE: u32 = 0;
/// `fork_policy`: a `fork()` child refuses with `GRANTID_CLOSED`.
pub const GRANTID_FORK_CLOSE: u32 = 1;

/// Options of `grantid_generator_new`. Fill it with
/// `grantid_generator_options_default(&options)` (a macro that passes
/// `sizeof options`), then set `namespace_`, `grant` (and `user_data`, ...)
/// and change what you need.
///
/// The struct grows at its end in later versions; `struct_size` tells the
/// library which version the caller was compiled with, and a field's zero
/// value always means its default.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct grantid_generator_options {
    /// `sizeof(grantid_generator_options)` as the caller compiled it; set by
    /// `grantid_generator_options_default`. Do not change it.
    pub struct_size: usize,
    /// The ID format's name (`"orders-v1"`), NUL-terminated UTF-8, not empty.
    /// Copied by `grantid_generator_new`. Spelled `namespace_` so the header
    /// also compiles as C++.
    pub namespace_: *const c_char,
    /// The ID layout (default: 41 / 10 / 12, 1 ms, epoch 2026-01-01).
    pub layout: grantid_layout,
    /// How far the cursor may lead the clock, in ms (default 100).
    pub max_drift_ms: u64,
    /// Longest one call waits for the clock, in ms (default 100).
    pub max_wait_ms: u64,
    /// Largest `grantid_next_ids` batch (default 100000).
    pub max_batch: usize,
    /// Cursor shards; 0 means the number of CPUs (the default).
    pub shards: usize,
    /// Length of each requested grant, in ms (default 1000).
    pub grant_duration_ms: u64,
    /// Committed time kept ahead of the clock, in ms (default 5000; at least
    /// `grant_duration_ms`).
    pub horizon_ms: u64,
    /// Longest `grantid_generator_new` waits for the first grant, in ms
    /// (default 10000).
    pub startup_timeout_ms: u64,
    /// First retry delay after an uncertain answer, in ms (default 50).
    pub backoff_min_ms: u64,
    /// Longest retry delay, in ms (default 2000).
    pub backoff_max_ms: u64,
    /// `GRANTID_FORK_REACTIVATE` (default) or `GRANTID_FORK_CLOSE`.
    pub fork_policy: u32,
    /// The authority (required for `grantid_generator_new`).
    pub grant: grantid_grant_fn,
    /// Optional: gives the worker back when the generator closes.
    pub release: grantid_release_fn,
    /// Optional: told when the authority refused the worker.
    pub on_lease_lost: grantid_lease_lost_fn,
    /// Passed to every callback.
    pub user_data: *mut c_void,
    /// Optional: frees `user_data`, exactly once.
    pub free_user_data: grantid_free_fn,
    /// True to set the generator's datacenter (the layout needs
    /// `datacenter_bits`): grants outside it are refused, and an authority
    /// URL's `datacenter=N` must agree (docs/AUTHORITIES.md, "Regions").
    pub has_datacenter: bool,
    /// The datacenter, when `has_datacenter`.
    pub datacenter: u32,
}

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

impl Growable for grantid_generator_options {
    /// Version 0.1.0, the first with `struct_size`.
    const FIRST_SIZE: usize = 160;
    const NAME: &'static str = "grantid_generator_options";
    const HOW: &'static str = "fill the struct with grantid_generator_options_default(&options)";
}

impl Default for grantid_generator_options {
    /// Default layout and timings, no namespace, no callbacks, `user_data`
    /// NULL, `struct_size` this version's size.
    fn default() -> grantid_generator_options {
        grantid_generator_options {
            struct_size: std::mem::size_of::<grantid_generator_options>(),
            namespace_: std::ptr::null(),
            layout: Layout::default().into(),
            max_drift_ms: grantid::DEFAULT_MAX_DRIFT_MS,
            max_wait_ms: grantid::DEFAULT_MAX_WAIT.as_millis() as u64,
            max_batch: grantid::DEFAULT_MAX_BATCH,
            shards: 0,
            grant_duration_ms: grantid::DEFAULT_GRANT_DURATION_MS,
            horizon_ms: grantid::DEFAULT_HORIZON_MS,
            startup_timeout_ms: grantid::DEFAULT_STARTUP_TIMEOUT.as_millis() as u64,
            backoff_min_ms: grantid::DEFAULT_BACKOFF_MIN.as_millis() as u64,
            backoff_max_ms: grantid::DEFAULT_BACKOFF_MAX.as_millis() as u64,
            fork_policy: GRANTID_FORK_REACTIVATE,
            grant: None,
            release: None,
            on_lease_lost: None,
            user_data: std::ptr::null_mut(),
            free_user_data: None,
            has_datacenter: false,
            datacenter: 0,
        }
    }
}

/// Writes the default options to the caller's `size` bytes at `out`
/// (default layout and timings, no namespace, no callbacks, `user_data`
/// NULL; fields past this library's struct are zeroed) and sets
/// `out->struct_size` to `size`. Call it through the header's
/// `grantid_generator_options_default(out)` macro, which passes
/// `sizeof *(out)`.
///
/// # Safety
///
/// `out` is NULL or points to `size` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_generator_options_init(
    out: *mut grantid_generator_options,
    size: usize,
) -> grantid_status {
    guard(|| {
        let out = out_arg(out, "out")?;
        sized::check_size::<grantid_generator_options>(size)?;
        let options = grantid_generator_options {
            struct_size: size,
            ..Default::default()
        };
        // SAFETY: `out` is non-NULL with `size` writable bytes per the
        // caller's contract.
        unsafe { sized::write(out.cast::<u8>(), size, &options) };
        Ok(())
    })
}

impl grantid_generator_options {
    /// The caller's options as this library's struct: its `struct_size`
    /// bytes over the defaults (see `sized.rs`), and whether the caller set
    /// fields past what this library knows (an error to report once
    /// `user_data` is owned).
    ///
    /// # Safety
    ///
    /// `ptr` is NULL or points to options filled by
    /// `grantid_generator_options_init` (`struct_size` readable bytes).
    pub(crate) unsafe fn from_caller(
        ptr: *const grantid_generator_options,
    ) -> Result<(grantid_generator_options, Result<(), Failure>), Failure> {
        if ptr.is_null() {
            return Err(Failure::Null("options"));
        }
        // SAFETY: non-NULL; every version starts with `struct_size`.
        let size = unsafe { ptr.cast::<usize>().read_unaligned() };
        let src = ptr.cast::<u8>();
        // SAFETY: `size` bytes are readable per the caller's contract.
        let options = unsafe { sized::read(src, size, grantid_generator_options::default()) }?;
        // SAFETY: as above.
        let known = unsafe { sized::check_tail::<grantid_generator_options>(src, size) };
        Ok((options, known))
    }

    /// The namespace as a string.
    ///
    /// # Safety
    ///
    /// `self.namespace` is NULL or a NUL-terminated string.
    pub(crate) unsafe fn namespace(&self) -> Result<String, Failure> {
        if self.namespace_.is_null() {
            return Err(Failure::Null("options.namespace_"));
        }
        // SAFETY: non-NULL and NUL-terminated per the caller's contract.
        let ns = unsafe { CStr::from_ptr(self.namespace_) };
        ns.to_str()
            .map(str::to_owned)
            .map_err(|_| invalid(format!("options.namespace_ {ns:?} is not UTF-8")))
    }

    /// Applies every option except the callbacks to `builder`.
    pub(crate) fn apply(&self, builder: GeneratorBuilder) -> Result<GeneratorBuilder, Failure> {
        let fork_policy = match self.fork_policy {
            GRANTID_FORK_REACTIVATE => ForkPolicy::Reactivate,
            GRANTID_FORK_CLOSE => ForkPolicy::Close,
            other => {
                return Err(invalid(format!(
                    "options.fork_policy is {other}, not GRANTID_FORK_REACTIVATE (0) or GRANTID_FORK_CLOSE (1)"
                )));
            }
        };
        let mut builder = builder
            .max_drift_ms(self.max_drift_ms)
            .max_wait(ms(self.max_wait_ms))
            .max_batch(self.max_batch)
            .grant_duration_ms(self.grant_duration_ms)
            .horizon_ms(self.horizon_ms)
            .startup_timeout(ms(self.startup_timeout_ms))
            .backoff(ms(self.backoff_min_ms), ms(self.backoff_max_ms))
            .fork_policy(fork_policy);
        if self.shards != 0 {
            builder = builder.shards(self.shards);
        }
        if self.has_datacenter {
            builder = builder.datacenter(self.datacenter);
        }
        Ok(builder)
    }
}
