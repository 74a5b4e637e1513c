//! Public IDs (docs/PUBLIC_IDS.md): the core's `PublicIds` behind an
//! opaque handle.

use std::ffi::{CStr, c_char};

use grantid::PublicIds;

use crate::guard::{Failure, arg, guard, invalid, out_arg};
use crate::status::grantid_status;

/// Length of a public-ID key in bytes (Speck64/128: 128 bits).
pub const GRANTID_PUBLIC_ID_KEY_LEN: usize = 16;
/// Length of the text form of a public ID: 13 Crockford base32 digits.
pub const GRANTID_PUBLIC_ID_TEXT_LEN: usize = 13;

/// A keyed, reversible permutation of the IDs ([1, 2^63)) for URLs and
/// APIs. Opaque; made by `grantid_public_ids_new` or
/// `grantid_public_ids_new_hex`, freed by `grantid_public_ids_free`.
/// Thread-safe: every function but `grantid_public_ids_free` may be called
/// on one handle from many threads at once. The key never appears in a
/// message.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct grantid_public_ids {
    inner: PublicIds,
}

/// Boxes a new handle and writes it to `*out`.
///
/// # Safety
///
/// `out` is non-NULL and writable for one pointer.
unsafe fn boxed(
    made: Result<PublicIds, grantid::Error>,
    out: *mut *mut grantid_public_ids,
) -> Result<(), Failure> {
    let handle = Box::new(grantid_public_ids { inner: made? });
    // SAFETY: `out` is non-NULL and writable per this function's contract.
    unsafe { out.write(Box::into_raw(handle)) };
    Ok(())
}

/// Keys a permutation with `key_len` raw bytes at `key`; `key_len` must be
/// `GRANTID_PUBLIC_ID_KEY_LEN` (16), anything else is
/// `GRANTID_INVALID_ARGUMENT`. The library keeps its own copy (the round
/// keys), wiped when the handle is freed.
///
/// # Safety
///
/// `key` is NULL or readable for `key_len` bytes; `out` is NULL or writable
/// for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_public_ids_new(
    key: *const u8,
    key_len: usize,
    out: *mut *mut grantid_public_ids,
) -> grantid_status {
    guard(|| {
        if key.is_null() {
            return Err(Failure::Null("key"));
        }
        let out = out_arg(out, "out")?;
        // SAFETY: `key` is non-NULL and readable for `key_len` bytes per the
        // caller's contract.
        let key = unsafe { std::slice::from_raw_parts(key, key_len) };
        // SAFETY: `out` is non-NULL and writable per the caller's contract.
        unsafe { boxed(PublicIds::new(key), out) }
    })
}

/// Keys a permutation with a NUL-terminated string of exactly 32 hex digits
/// (either case; the key bytes left to right). Anything else is
/// `GRANTID_INVALID_ARGUMENT`.
///
/// # Safety
///
/// `hex` is NULL or a NUL-terminated string; `out` is NULL or writable for
/// one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_public_ids_new_hex(
    hex: *const c_char,
    out: *mut *mut grantid_public_ids,
) -> grantid_status {
    guard(|| {
        // SAFETY: `hex` is NULL or NUL-terminated per the caller's contract.
        let hex = unsafe { c_text(hex, "hex") }?;
        let out = out_arg(out, "out")?;
        // SAFETY: `out` is non-NULL and writable per the caller's contract.
        unsafe { boxed(PublicIds::from_hex(hex), out) }
    })
}

/// Frees a handle. NULL is a no-op. Must be the last call on the handle.
///
/// # Safety
///
/// `ids` is NULL or a live handle that was not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_public_ids_free(ids: *mut grantid_public_ids) {
    if ids.is_null() {
        return;
    }
    let _ = guard(|| {
        // SAFETY: `ids` came from Box::into_raw in grantid_public_ids_new*
        // and is freed once, per the caller's contract.
        drop(unsafe { Box::from_raw(ids) });
        Ok(())
    });
}

/// Reads a NUL-terminated UTF-8 string argument.
///
/// # Safety
///
/// `text` is NULL or a NUL-terminated string valid for `'a`.
unsafe fn c_text<'a>(text: *const c_char, name: &'static str) -> Result<&'a str, Failure> {
    if text.is_null() {
        return Err(Failure::Null(name));
    }
    // SAFETY: `text` is non-NULL and NUL-terminated per the caller's contract.
    let text = unsafe { CStr::from_ptr(text) };
    text.to_str()
        .map_err(|_| invalid(format!("{name} is not UTF-8")))
}

/// Applies `f` to the handle and writes its result to `*out`.
///
/// # Safety
///
/// `ids` is NULL or a live handle; `out` is NULL or writable for one `u64`.
unsafe fn map_u64(
    ids: *const grantid_public_ids,
    out: *mut u64,
    out_name: &'static str,
    f: impl FnOnce(&PublicIds) -> Result<u64, Failure>,
) -> grantid_status {
    guard(|| {
        // SAFETY: `ids` is NULL or a live handle per the caller's contract.
        let ids = unsafe { arg(ids, "ids") }?;
        let out = out_arg(out, out_name)?;
        let value = f(&ids.inner)?;
        // SAFETY: `out` is non-NULL and writable per the caller's contract.
        unsafe { out.write(value) };
        Ok(())
    })
}

/// Writes the public value of `id` (in [1, 2^63)) to `*out_public`. An `id`
/// outside [1, 2^63) is `GRANTID_INVALID_ARGUMENT`.
///
/// # Safety
///
/// `ids` is NULL or a live handle; `out_public` is NULL or writable for one
/// `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_public_ids_encode(
    ids: *const grantid_public_ids,
    id: u64,
    out_public: *mut u64,
) -> grantid_status {
    // SAFETY: forwarded from the caller's contract.
    unsafe { map_u64(ids, out_public, "out_public", |p| Ok(p.encode(id)?)) }
}

/// Writes the ID whose public value is `public_id` to `*out_id`. A value
/// outside [1, 2^63) is `GRANTID_INVALID_ARGUMENT`.
///
/// # Safety
///
/// As `grantid_public_ids_encode`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_public_ids_decode(
    ids: *const grantid_public_ids,
    public_id: u64,
    out_id: *mut u64,
) -> grantid_status {
    // SAFETY: forwarded from the caller's contract.
    unsafe { map_u64(ids, out_id, "out_id", |p| Ok(p.decode(public_id)?)) }
}

/// Writes the text form of `id`'s public value (13 lower-case Crockford
/// base32 digits and a NUL) to `buf`. `buf_len` below
/// `GRANTID_PUBLIC_ID_TEXT_LEN + 1` or a bad `id` is
/// `GRANTID_INVALID_ARGUMENT`, and nothing is written.
///
/// # Safety
///
/// `ids` is NULL or a live handle; `buf` is NULL or writable for `buf_len`
/// bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_public_ids_encode_str(
    ids: *const grantid_public_ids,
    id: u64,
    buf: *mut c_char,
    buf_len: usize,
) -> grantid_status {
    guard(|| {
        // SAFETY: `ids` is NULL or a live handle per the caller's contract.
        let ids = unsafe { arg(ids, "ids") }?;
        let buf = out_arg(buf, "buf")?;
        if buf_len < GRANTID_PUBLIC_ID_TEXT_LEN + 1 {
            return Err(invalid(format!(
                "buf_len is {buf_len}: the text needs {} bytes with its NUL",
                GRANTID_PUBLIC_ID_TEXT_LEN + 1
            )));
        }
        let text = ids.inner.encode_str(id)?;
        debug_assert_eq!(text.len(), GRANTID_PUBLIC_ID_TEXT_LEN);
        // SAFETY: `buf` is writable for buf_len >= text.len() + 1 bytes per
        // the caller's contract; the text is ASCII without NUL.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buf, text.len());
            buf.add(text.len()).write(0);
        }
        Ok(())
    })
}

/// Writes the ID of a public ID's text form (13 digits, either case) to
/// `*out_id`. Anything else (wrong length, a character outside the
/// alphabet, a value of 0 or >= 2^63) is `GRANTID_INVALID_ARGUMENT`.
///
/// # Safety
///
/// `ids` is NULL or a live handle; `text` is NULL or a NUL-terminated
/// string; `out_id` is NULL or writable for one `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_public_ids_decode_str(
    ids: *const grantid_public_ids,
    text: *const c_char,
    out_id: *mut u64,
) -> grantid_status {
    // SAFETY: forwarded from the caller's contract.
    unsafe {
        map_u64(ids, out_id, "out_id", |p| {
            let text = c_text(text, "text")?;
            Ok(p.decode_str(text)?)
        })
    }
}

/// The raw Speck64/128 encryption of a 64-bit block (x = the high 32 bits),
/// without the walk: for checking an implementation against the paper's
/// vectors. IDs go through `grantid_public_ids_encode`.
///
/// # Safety
///
/// As `grantid_public_ids_encode`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_public_ids_cipher_encrypt(
    ids: *const grantid_public_ids,
    block: u64,
    out_block: *mut u64,
) -> grantid_status {
    // SAFETY: forwarded from the caller's contract.
    unsafe { map_u64(ids, out_block, "out_block", |p| Ok(p.cipher_encrypt(block))) }
}

/// The inverse of `grantid_public_ids_cipher_encrypt`.
///
/// # Safety
///
/// As `grantid_public_ids_encode`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_public_ids_cipher_decrypt(
    ids: *const grantid_public_ids,
    block: u64,
    out_block: *mut u64,
) -> grantid_status {
    // SAFETY: forwarded from the caller's contract.
    unsafe { map_u64(ids, out_block, "out_block", |p| Ok(p.cipher_decrypt(block))) }
}

/// Writes a new random key (from the operating system's generator) to
/// `out_key`, which must hold `GRANTID_PUBLIC_ID_KEY_LEN` bytes. Store it
/// and keep it: another key maps every ID elsewhere.
///
/// # Safety
///
/// `out_key` is NULL or writable for 16 bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_public_ids_generate_key(out_key: *mut u8) -> grantid_status {
    guard(|| {
        let out = out_arg(out_key, "out_key")?;
        let key = PublicIds::generate_key()?;
        // SAFETY: `out` is writable for 16 bytes per the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(key.as_ptr(), out, key.len()) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_match_the_core() {
        assert_eq!(GRANTID_PUBLIC_ID_KEY_LEN, grantid::PUBLIC_ID_KEY_LEN);
        assert_eq!(GRANTID_PUBLIC_ID_TEXT_LEN, grantid::PUBLIC_ID_TEXT_LEN);
    }
}
