//! The opaque generator handle and its functions.

use std::sync::Arc;

use grantid::{Generator, GrantSource};

use crate::callback::{CSource, UserData, lease_lost};
use crate::guard::{Failure, arg, guard, invalid, out_arg};
use crate::layout::{grantid_decoded, grantid_layout};
use crate::options::grantid_generator_options;
use crate::sized;
use crate::stats::grantid_generator_stats;
use crate::status::grantid_status;

/// A generator: issues IDs inside committed grants. Opaque; made by
/// `grantid_generator_new`, freed by `grantid_generator_free`.
///
/// Thread-safe: every function may be called on one generator from many
/// threads at once, except `grantid_generator_free`, which must be the last
/// call on it.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct grantid_generator {
    inner: Generator,
}

/// Starts a generator whose authority is the `options->grant` callback,
/// blocks until its first valid grant (at most `startup_timeout_ms`), and
/// writes it to `*out`. Without a grant in time: `GRANTID_UNAVAILABLE` (or
/// `GRANTID_LEASE_LOST` if the authority refused), with the authority's
/// reason in `grantid_last_error_message()`.
///
/// Ownership of `options->user_data`: from the moment this is called with
/// non-NULL `options` filled by `grantid_generator_options_default`,
/// `user_data` belongs to the library, also when the call fails. (Options
/// whose `struct_size` is smaller than any version's, such as a zeroed
/// struct, are `GRANTID_INVALID_ARGUMENT` and nothing is taken: the library
/// cannot read such a struct.) `options->free_user_data` (if set) is called exactly once, when no
/// callback can run any more: during `grantid_generator_free`, or before
/// this function returns an error, or, if a grant callback was still blocked
/// at that moment, on the renewal thread once it returns.
///
/// # Safety
///
/// `options` is NULL or points to a valid `grantid_generator_options` whose
/// pointers follow their documentation; `out` is NULL or points to writable
/// memory for one pointer. The callbacks and `user_data` must be usable from
/// any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_generator_new(
    options: *const grantid_generator_options,
    out: *mut *mut grantid_generator,
) -> grantid_status {
    guard(|| {
        // SAFETY: `options` is NULL or valid per the caller's contract.
        let (options, known) = unsafe { grantid_generator_options::from_caller(options) }?;
        let options = &options;
        let make_source = |user| -> Result<Box<dyn GrantSource>, Failure> {
            known?;
            let grant = options.grant.ok_or(Failure::Null("options.grant"))?;
            Ok(Box::new(CSource {
                grant,
                release: options.release,
                user,
            }))
        };
        // SAFETY: `options` and `out` as the caller's contract says.
        unsafe { start(options, out, make_source) }
    })
}

/// Like `grantid_generator_new`, with a reference authority named by `url`
/// instead of the grant callback: `file:PATH` (a flock-guarded state file,
/// one host), `postgres://...`, `redis://...`, `static:N` (see
/// `authority/`). `options->grant` and `options->release` must be NULL;
/// `on_lease_lost`, `user_data` and `free_user_data` work as with
/// `grantid_generator_new`. A malformed URL is `GRANTID_INVALID_ARGUMENT`;
/// an unreachable server is `GRANTID_UNAVAILABLE` after the start-up
/// timeout.
///
/// # Safety
///
/// As `grantid_generator_new`; `url` is NULL or a NUL-terminated string.
#[cfg(feature = "authority")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_generator_new_url(
    options: *const grantid_generator_options,
    url: *const std::ffi::c_char,
    out: *mut *mut grantid_generator,
) -> grantid_status {
    guard(|| {
        // SAFETY: `options` is NULL or valid per the caller's contract.
        let (options, known) = unsafe { grantid_generator_options::from_caller(options) }?;
        let options = &options;
        let make_source = |_user| -> Result<Box<dyn GrantSource>, Failure> {
            known?;
            if url.is_null() {
                return Err(Failure::Null("url"));
            }
            if options.grant.is_some() || options.release.is_some() {
                return Err(invalid(
                    "options.grant and options.release must be NULL with an authority URL",
                ));
            }
            // SAFETY: `url` is non-NULL and NUL-terminated per the contract.
            let url = unsafe { std::ffi::CStr::from_ptr(url) };
            let url = url
                .to_str()
                .map_err(|_| invalid(format!("the authority URL {url:?} is not UTF-8")))?;
            Ok(grantid_authority::from_url(url)?)
        };
        // SAFETY: `options` and `out` as the caller's contract says.
        unsafe { start(options, out, make_source) }
    })
}

/// Takes ownership of `user_data`, makes the source, applies the options,
/// starts the generator and writes its handle to `*out`.
///
/// # Safety
///
/// `options` follows its documentation; `out` is NULL or writable for one
/// pointer.
unsafe fn start(
    options: &grantid_generator_options,
    out: *mut *mut grantid_generator,
    source: impl FnOnce(Arc<UserData>) -> Result<Box<dyn GrantSource>, Failure>,
) -> Result<(), Failure> {
    // From here `user_data` is ours: every early return frees it.
    let user = UserData::new(options.user_data, options.free_user_data);
    let out = out_arg(out, "out")?;
    let source = source(Arc::clone(&user))?;
    // SAFETY: `options.namespace_` is NULL or NUL-terminated per the contract.
    let namespace = unsafe { options.namespace() }?;
    let layout = options.layout.to_core()?;
    let mut builder = options.apply(Generator::builder(layout, namespace, source))?;
    if let Some(callback) = options.on_lease_lost {
        builder = builder.on_lease_lost(lease_lost(callback, Arc::clone(&user)));
    }
    drop(user);
    let generator = builder.start()?;
    let handle = Box::into_raw(Box::new(grantid_generator { inner: generator }));
    // SAFETY: `out` is non-NULL and writable per the caller's contract.
    unsafe { out.write(handle) };
    Ok(())
}

/// Borrows the generator behind a handle.
///
/// # Safety
///
/// `generator` is NULL or a live handle from `grantid_generator_new`.
unsafe fn handle<'a>(generator: *const grantid_generator) -> Result<&'a Generator, Failure> {
    // SAFETY: forwarded from the caller's contract.
    Ok(&unsafe { arg(generator, "generator") }?.inner)
}

/// Writes the next ID to `*out_id`. Lock-free; waits (up to `max_wait_ms`)
/// only when the clock must move first. Errors: `GRANTID_NOT_YET_VALID`,
/// `GRANTID_GRANT_EXHAUSTED`, `GRANTID_UNAVAILABLE`,
/// `GRANTID_CAPACITY_EXHAUSTED`, `GRANTID_CLOCK_ROLLBACK`,
/// `GRANTID_LEASE_LOST`, `GRANTID_CLOSED`. In a `fork()` child the first
/// call re-activates the generator (new incarnation and grant) first.
///
/// # Safety
///
/// `generator` is NULL or a live handle; `out_id` is NULL or points to
/// writable memory for one `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_next_id(
    generator: *const grantid_generator,
    out_id: *mut u64,
) -> grantid_status {
    guard(|| {
        // SAFETY: `generator` is NULL or live per the caller's contract.
        let generator = unsafe { handle(generator) }?;
        let out_id = out_arg(out_id, "out_id")?;
        let id = generator.next_id()?;
        // SAFETY: `out_id` is non-NULL and writable per the caller's contract.
        unsafe { out_id.write(id) };
        Ok(())
    })
}

/// Writes `n` fresh IDs, in increasing order, to `out[0..n]`: all or none
/// (on failure `out` is left untouched). `n` is at most `max_batch`, else
/// `GRANTID_INVALID_ARGUMENT`; `n == 0` succeeds and writes nothing.
///
/// # Safety
///
/// `generator` is NULL or a live handle; `out` is NULL or points to
/// writable memory for `n` `uint64_t`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_next_ids(
    generator: *const grantid_generator,
    out: *mut u64,
    n: usize,
) -> grantid_status {
    guard(|| {
        // SAFETY: `generator` is NULL or live per the caller's contract.
        let generator = unsafe { handle(generator) }?;
        let out = out_arg(out, "out")?;
        if n > isize::MAX as usize / size_of::<u64>() {
            return Err(invalid(format!("n is {n}, larger than any array")));
        }
        // SAFETY: `out` is non-NULL, aligned and writable for `n` u64s per the
        // caller's contract, and `n * 8` fits in isize (checked above).
        let slice = unsafe { std::slice::from_raw_parts_mut(out, n) };
        generator.fill(slice)?;
        Ok(())
    })
}

/// Decodes `id` in the generator's layout into version 0.1.0's fields of
/// `*out`, for programs built against that header. The header's
/// `grantid_decode` macro calls `grantid_decode_sized` instead.
///
/// # Safety
///
/// `generator` is NULL or a live handle; `out` is NULL or points to
/// writable memory for version 0.1.0's `grantid_decoded`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_decode(
    generator: *const grantid_generator,
    id: u64,
    out: *mut grantid_decoded,
) -> grantid_status {
    let v1 = std::mem::offset_of!(grantid_decoded, datacenter);
    // SAFETY: as the caller's contract says, with version 0.1.0's size.
    unsafe { grantid_decode_sized(generator, id, out, v1) }
}

/// Decodes `id` in the generator's layout into the caller's `size` bytes
/// at `out`. Call it through the header's `grantid_decode(generator, id,
/// out)` macro, which passes `sizeof *out`.
///
/// # Safety
///
/// `generator` is NULL or a live handle; `out` is NULL or points to `size`
/// writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_decode_sized(
    generator: *const grantid_generator,
    id: u64,
    out: *mut grantid_decoded,
    size: usize,
) -> grantid_status {
    guard(|| {
        // SAFETY: `generator` is NULL or live per the caller's contract.
        let generator = unsafe { handle(generator) }?;
        let out = out_arg(out, "out")?;
        let decoded = generator.decode(id)?;
        // SAFETY: `out` is non-NULL with `size` writable bytes per the
        // caller's contract.
        unsafe { crate::layout::write_decoded(out, size, decoded) }
    })
}

/// Writes the generator's layout to `*out`.
///
/// # Safety
///
/// `generator` is NULL or a live handle; `out` is NULL or points to
/// writable memory for one `grantid_layout`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_generator_layout(
    generator: *const grantid_generator,
    out: *mut grantid_layout,
) -> grantid_status {
    guard(|| {
        // SAFETY: `generator` is NULL or live per the caller's contract.
        let generator = unsafe { handle(generator) }?;
        let out = out_arg(out, "out")?;
        // SAFETY: `out` is non-NULL and writable per the caller's contract.
        unsafe { out.write((*generator.layout()).into()) };
        Ok(())
    })
}

/// Writes a snapshot of the generator's counters and lease to the caller's
/// `size` bytes at `out` (`out->struct_size` says how many bytes were
/// filled; bytes past this library's struct are zeroed). Call it through
/// the header's `grantid_stats(gen, out)` macro, which passes
/// `sizeof *(out)`.
///
/// # Safety
///
/// `generator` is NULL or a live handle; `out` is NULL or points to `size`
/// writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_stats_sized(
    generator: *const grantid_generator,
    out: *mut grantid_generator_stats,
    size: usize,
) -> grantid_status {
    guard(|| {
        // SAFETY: `generator` is NULL or live per the caller's contract.
        let generator = unsafe { handle(generator) }?;
        let out = out_arg(out, "out")?;
        sized::check_size::<grantid_generator_stats>(size)?;
        let mut stats = grantid_generator_stats::from(generator.stats());
        stats.struct_size = size.min(std::mem::size_of::<grantid_generator_stats>());
        // SAFETY: `out` is non-NULL with `size` writable bytes per the
        // caller's contract.
        unsafe { sized::write(out.cast::<u8>(), size, &stats) };
        Ok(())
    })
}

/// Stops issuing (`GRANTID_CLOSED` from then on), stops the generator's
/// threads and releases the worker (the `release` callback, on this
/// thread). Idempotent: closing twice is `GRANTID_OK`. The handle stays
/// valid until `grantid_generator_free`.
///
/// # Safety
///
/// `generator` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_generator_close(
    generator: *const grantid_generator,
) -> grantid_status {
    guard(|| {
        // SAFETY: `generator` is NULL or live per the caller's contract.
        unsafe { handle(generator) }?.close();
        Ok(())
    })
}

/// Closes the generator if needed and frees it. NULL is a no-op. Must be
/// the last call on the handle, with no other thread still using it.
///
/// # Safety
///
/// `generator` is NULL or a live handle from `grantid_generator_new` that
/// was not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_generator_free(generator: *mut grantid_generator) {
    if generator.is_null() {
        return;
    }
    // A panic while closing is caught: it cannot unwind into C.
    let _ = guard(|| {
        // SAFETY: `generator` came from Box::into_raw in grantid_generator_new
        // and is freed once, per the caller's contract.
        drop(unsafe { Box::from_raw(generator) });
        Ok(())
    });
}
