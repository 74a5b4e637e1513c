//! Fuzz harnesses for the C ABI: layout and parse entry points called with
//! arbitrary struct contents and strings. Every call answers a status (never
//! `GRANTID_PANIC`), writes its output only on `GRANTID_OK`, and agrees with
//! the Rust API it wraps.

use std::ffi::CString;

use grantid::{Layout, PublicIds, parse_id};
use grantid_ffi::{
    grantid_decoded, grantid_layout, grantid_layout_decode, grantid_layout_encode,
    grantid_layout_new, grantid_parse_id, grantid_public_ids, grantid_public_ids_decode_str,
    grantid_public_ids_free, grantid_public_ids_new, grantid_public_ids_new_hex, grantid_status,
};

const OK: grantid_status = grantid_status::GRANTID_OK;
const INVALID: grantid_status = grantid_status::GRANTID_INVALID_ARGUMENT;

/// A C string of the bytes up to the first NUL.
fn c_string(bytes: &[u8]) -> CString {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    CString::new(&bytes[..end]).unwrap()
}

#[test]
fn ffi_layout_struct() {
    bolero::check!()
        .with_type::<(u8, u8, u8, u64, u64, u64, u64, u64, u64)>()
        .for_each(|&(t, w, s, epoch_ms, tick_ms, ts, worker, seq, id)| {
            // A struct filled by hand, as a C caller would.
            let layout = grantid_layout {
                timestamp_bits: t,
                worker_bits: w,
                sequence_bits: s,
                datacenter_bits: 0,
                epoch_ms,
                tick_ms,
            };
            let core = Layout::with_all(t, w, s, epoch_ms, tick_ms).ok();
            let mut out_id = u64::MAX;
            // SAFETY: valid pointers to live locals.
            let status = unsafe { grantid_layout_encode(&layout, ts, worker, seq, &mut out_id) };
            match core.map(|l| l.encode(ts, worker, seq)) {
                Some(Ok(id)) => assert_eq!((status, out_id), (OK, id)),
                _ => assert_eq!((status, out_id), (INVALID, u64::MAX)),
            }
            let mut out = grantid_decoded {
                timestamp: 1,
                worker: 2,
                sequence: 3,
                unix_ms: 4,
                datacenter: 5,
                datacenter_worker: 6,
            };
            // SAFETY: valid pointers to live locals.
            let status = unsafe { grantid_layout_decode(&layout, id, &mut out) };
            match core.map(|l| l.decode(id)) {
                Some(Ok(d)) => {
                    assert_eq!(status, OK);
                    assert_eq!(
                        (out.timestamp, out.worker, out.sequence),
                        (d.timestamp, d.worker, d.sequence)
                    );
                }
                _ => {
                    assert_eq!(status, INVALID);
                    assert_eq!(
                        (out.timestamp, out.worker, out.sequence, out.unix_ms),
                        (1, 2, 3, 4)
                    );
                }
            }
            // A width past u8 from C must be refused, not truncated.
            let wide_bits = u32::from(t) + if ts % 2 == 1 { 256 } else { 0 };
            let expect = u8::try_from(wide_bits)
                .ok()
                .and_then(|t| Layout::with_all(t, w, s, epoch_ms, tick_ms).ok());
            let mut made = grantid_layout {
                timestamp_bits: 0,
                ..layout
            };
            // SAFETY: a valid pointer to a live local.
            let status = unsafe {
                grantid_layout_new(
                    wide_bits,
                    u32::from(w),
                    u32::from(s),
                    epoch_ms,
                    tick_ms,
                    &mut made,
                )
            };
            match expect {
                Some(l) => assert_eq!((status, made.timestamp_bits), (OK, l.timestamp_bits())),
                None => assert_eq!((status, made.timestamp_bits), (INVALID, 0)),
            }
        });
}

#[test]
fn ffi_parse_id() {
    bolero::check!().for_each(|bytes: &[u8]| {
        let text = c_string(bytes);
        let mut out = u64::MAX;
        // SAFETY: a NUL-terminated string and a live local.
        let status = unsafe { grantid_parse_id(text.as_ptr(), &mut out) };
        match text.to_str().ok().map(parse_id) {
            Some(Ok(id)) => assert_eq!((status, out), (OK, id)),
            _ => assert_eq!((status, out), (INVALID, u64::MAX)),
        }
    });
}

#[test]
fn ffi_public_ids() {
    bolero::check!()
        .with_type::<(Vec<u8>, Vec<u8>, Vec<u8>)>()
        .for_each(|(key, hex, text)| {
            let mut ids: *mut grantid_public_ids = std::ptr::null_mut();
            // SAFETY: `key` is readable for its length; `ids` is a live local.
            let status = unsafe { grantid_public_ids_new(key.as_ptr(), key.len(), &mut ids) };
            assert_eq!(status == OK, key.len() == 16);
            assert_eq!(ids.is_null(), status != OK);
            let hex = c_string(hex);
            let mut from_hex: *mut grantid_public_ids = std::ptr::null_mut();
            // SAFETY: a NUL-terminated string and a live local.
            let status = unsafe { grantid_public_ids_new_hex(hex.as_ptr(), &mut from_hex) };
            let expect = hex.to_str().ok().map(PublicIds::from_hex);
            assert_eq!(status == OK, matches!(expect, Some(Ok(_))));
            if !ids.is_null() {
                let text = c_string(text);
                let mut out = u64::MAX;
                // SAFETY: a live handle, a NUL-terminated string, a live local.
                let status = unsafe { grantid_public_ids_decode_str(ids, text.as_ptr(), &mut out) };
                let core = PublicIds::new(key).unwrap();
                match text.to_str().ok().map(|t| core.decode_str(t)) {
                    Some(Ok(id)) => assert_eq!((status, out), (OK, id)),
                    _ => assert_eq!((status, out), (INVALID, u64::MAX)),
                }
            }
            // SAFETY: handles made above (or NULL), freed once.
            unsafe {
                grantid_public_ids_free(ids);
                grantid_public_ids_free(from_hex);
            }
        });
}
