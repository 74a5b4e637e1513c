//! Caller-allocated structs that can grow: each starts with `struct_size`,
//! the `sizeof` the caller compiled against. Fields are only ever appended,
//! and a field's zero value means its default, so
//!
//! * an older caller (smaller struct) gets the defaults for fields it does
//!   not know, and only its own bytes are written;
//! * a newer caller (larger struct) works with an older library as long as
//!   it leaves the fields this library does not know at zero (their
//!   default); a non-zero unknown field is refused, never ignored.
//!
//! The header's `grantid_generator_options_default(out)` and
//! `grantid_stats(gen, out)` macros pass `sizeof *(out)` for the caller.

use std::mem::size_of;

use crate::guard::{Failure, invalid};

/// The smallest `struct_size` accepted for `T`: the size of its first
/// version, which had `struct_size` (this one: fields are appended after).
pub(crate) trait Growable: Copy {
    const FIRST_SIZE: usize;
    const NAME: &'static str;
    /// How a caller fills in the size (for the error message).
    const HOW: &'static str;
}

/// Checks a caller's size for `T`: at least the first version's.
pub(crate) fn check_size<T: Growable>(size: usize) -> Result<(), Failure> {
    if size < T::FIRST_SIZE {
        return Err(invalid(format!(
            "{} struct_size is {size}, less than the first version's {} bytes: {}",
            T::NAME,
            T::FIRST_SIZE,
            T::HOW
        )));
    }
    Ok(())
}

/// Reads a `T` of `size` bytes at `src` over `base`: the first
/// `min(size, size_of::<T>())` bytes come from the caller, the rest keep
/// `base`'s values. Check the bytes past `size_of::<T>()` with
/// [`check_tail`].
///
/// # Safety
///
/// `src` points to `size` readable bytes whose first `size_of::<T>()` (or
/// fewer) bytes are a valid prefix of a `T`.
pub(crate) unsafe fn read<T: Growable>(
    src: *const u8,
    size: usize,
    mut base: T,
) -> Result<T, Failure> {
    check_size::<T>(size)?;
    let n = size.min(size_of::<T>());
    // SAFETY: `src` has at least `n` readable bytes, `base` is a `T` of at
    // least `n` bytes, the two do not overlap (`base` is our local), and
    // the bytes copied are a valid prefix of a `T` per the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, (&raw mut base).cast::<u8>(), n) };
    Ok(base)
}

/// Refuses a newer caller's struct that sets a field this library does not
/// know: every byte past `size_of::<T>()` must be zero (the field's
/// default).
///
/// # Safety
///
/// `src` points to `size` readable bytes.
pub(crate) unsafe fn check_tail<T: Growable>(src: *const u8, size: usize) -> Result<(), Failure> {
    let ours = size_of::<T>();
    if size <= ours {
        return Ok(());
    }
    // SAFETY: `src` has `size > ours` readable bytes per the caller's contract.
    let tail = unsafe { std::slice::from_raw_parts(src.add(ours), size - ours) };
    match tail.iter().position(|b| *b != 0) {
        None => Ok(()),
        Some(at) => Err(invalid(format!(
            "{} sets byte {} of {size}, past the {ours} bytes this library version ({}) \
             knows: a field of a newer header; leave it zero or use a newer library",
            T::NAME,
            ours + at,
            env!("CARGO_PKG_VERSION")
        ))),
    }
}

/// Writes `value` to a caller's `T` of `size` bytes at `dst`: the first
/// `min(size, size_of::<T>())` bytes of `value`, then zeros up to `size`.
///
/// # Safety
///
/// `dst` points to `size` writable bytes.
pub(crate) unsafe fn write<T: Growable>(dst: *mut u8, size: usize, value: &T) {
    let ours = size_of::<T>();
    let n = size.min(ours);
    // SAFETY: `value` has `ours >= n` readable bytes, `dst` has `size >= n`
    // writable bytes, and they do not overlap (`value` is ours).
    unsafe { std::ptr::copy_nonoverlapping((value as *const T).cast::<u8>(), dst, n) };
    if size > ours {
        // SAFETY: `dst` has `size` writable bytes per the caller's contract.
        unsafe { dst.add(ours).write_bytes(0, size - ours) };
    }
}
