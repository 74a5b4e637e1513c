//! Layouts, encode / decode, and ID parsing, converted to and from the core.

use std::ffi::{CStr, c_char};

use grantid::{Decoded, Layout};

use crate::guard::{Failure, arg, guard, invalid, out_arg};
use crate::status::grantid_status;

/// The bit widths, epoch and tick of an ID format (see docs/DESIGN.md section 1):
/// `id = (timestamp << (worker_bits + sequence_bits)) | (worker << sequence_bits) | sequence`.
///
/// Make one with `grantid_layout_default` or `grantid_layout_new`. Every
/// function that takes a layout validates it again, so a struct filled by
/// hand is checked too.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct grantid_layout {
    /// Width of the timestamp field (>= 1).
    pub timestamp_bits: u8,
    /// Width of the worker field (0..=32).
    pub worker_bits: u8,
    /// Width of the sequence field (>= 1); the three widths sum to <= 63.
    pub sequence_bits: u8,
    /// How many top bits of the worker field are a datacenter number (0:
    /// none; at most `worker_bits`). Set it with
    /// `grantid_layout_set_datacenter_bits`. It takes what was padding in
    /// version 0.1.0: a struct filled field by field must zero it.
    pub datacenter_bits: u8,
    /// Unix milliseconds of timestamp 0.
    pub epoch_ms: u64,
    /// Milliseconds per tick (>= 1).
    pub tick_ms: u64,
}

/// The fields of a decoded ID. `unix_ms` is the start of the encoded tick: a
/// diagnostic, not a commit time.
///
/// The struct grows at its end in later versions (`datacenter` and
/// `datacenter_worker` came after version 0.1.0): the header's
/// `grantid_layout_decode` and `grantid_decode` macros pass the caller's
/// `sizeof`, and only that many bytes are written.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct grantid_decoded {
    /// Ticks since the layout's epoch.
    pub timestamp: u64,
    /// The worker field.
    pub worker: u64,
    /// The sequence field.
    pub sequence: u64,
    /// `epoch_ms + timestamp * tick_ms`.
    pub unix_ms: u64,
    /// The datacenter: the top `datacenter_bits` of the worker field (0
    /// without a split).
    pub datacenter: u64,
    /// The worker within its datacenter (the whole worker field without a
    /// split).
    pub datacenter_worker: u64,
}

/// The size of version 0.1.0's `grantid_decoded` (its first four fields).
const DECODED_V1_SIZE: usize = std::mem::offset_of!(grantid_decoded, datacenter);

/// Writes `decoded` to the caller's `size` bytes at `out`: the fields that
/// fit (at least version 0.1.0's).
///
/// # Safety
///
/// `out` is non-NULL and points to `size` writable bytes.
pub(crate) unsafe fn write_decoded(
    out: *mut grantid_decoded,
    size: usize,
    decoded: Decoded,
) -> Result<(), Failure> {
    if size < DECODED_V1_SIZE {
        return Err(invalid(format!(
            "grantid_decoded size is {size}, less than the first version's {DECODED_V1_SIZE} bytes: \
             call the grantid_layout_decode / grantid_decode macros, which pass sizeof"
        )));
    }
    let value = grantid_decoded::from(decoded);
    let n = size.min(std::mem::size_of::<grantid_decoded>());
    // SAFETY: `out` has `size >= n` writable bytes per the caller's contract;
    // `value` is a local of at least `n` bytes with no padding (u64 fields);
    // the two do not overlap.
    unsafe { std::ptr::copy_nonoverlapping((&raw const value).cast::<u8>(), out.cast::<u8>(), n) };
    Ok(())
}

impl From<Layout> for grantid_layout {
    fn from(l: Layout) -> grantid_layout {
        grantid_layout {
            timestamp_bits: l.timestamp_bits(),
            worker_bits: l.worker_bits(),
            sequence_bits: l.sequence_bits(),
            datacenter_bits: l.datacenter_bits(),
            epoch_ms: l.epoch_ms(),
            tick_ms: l.tick_ms(),
        }
    }
}

impl From<Decoded> for grantid_decoded {
    fn from(d: Decoded) -> grantid_decoded {
        grantid_decoded {
            timestamp: d.timestamp,
            worker: d.worker,
            sequence: d.sequence,
            unix_ms: d.unix_ms,
            datacenter: d.datacenter,
            datacenter_worker: d.datacenter_worker,
        }
    }
}

impl grantid_layout {
    /// The core layout, validated by the core.
    pub(crate) fn to_core(self) -> Result<Layout, Failure> {
        Ok(Layout::with_all(
            self.timestamp_bits,
            self.worker_bits,
            self.sequence_bits,
            self.epoch_ms,
            self.tick_ms,
        )?
        .with_datacenter_bits(self.datacenter_bits)?)
    }
}

fn bits(name: &str, value: u32) -> Result<u8, Failure> {
    u8::try_from(value).map_err(|_| invalid(format!("{name} is {value}, more than 63")))
}

/// Writes the default "snowflake" layout (41 / 10 / 12 bits, 1 ms ticks,
/// epoch 2026-01-01T00:00:00Z = 1767225600000 ms) to `*out`.
///
/// # Safety
///
/// `out` is NULL or points to writable memory for one `grantid_layout`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_layout_default(out: *mut grantid_layout) -> grantid_status {
    guard(|| {
        let out = out_arg(out, "out")?;
        // SAFETY: `out` is non-NULL and writable per the caller's contract.
        unsafe { out.write(Layout::default().into()) };
        Ok(())
    })
}

/// Validates a layout and writes it to `*out`. A bad layout is
/// `GRANTID_INVALID_ARGUMENT`, with the offending field named in
/// `grantid_last_error_message()`.
///
/// # Safety
///
/// `out` is NULL or points to writable memory for one `grantid_layout`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_layout_new(
    timestamp_bits: u32,
    worker_bits: u32,
    sequence_bits: u32,
    epoch_ms: u64,
    tick_ms: u64,
    out: *mut grantid_layout,
) -> grantid_status {
    guard(|| {
        let out = out_arg(out, "out")?;
        let layout = Layout::with_all(
            bits("timestamp_bits", timestamp_bits)?,
            bits("worker_bits", worker_bits)?,
            bits("sequence_bits", sequence_bits)?,
            epoch_ms,
            tick_ms,
        )?;
        // SAFETY: `out` is non-NULL and writable per the caller's contract.
        unsafe { out.write(layout.into()) };
        Ok(())
    })
}

/// Reads the top `datacenter_bits` bits of the worker field of `*layout`
/// as a datacenter number (0 to `worker_bits`; the encoding does not
/// change). A bad layout or width is `GRANTID_INVALID_ARGUMENT` and
/// `*layout` is left as it was.
///
/// # Safety
///
/// `layout` is NULL or points to a valid, writable `grantid_layout`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_layout_set_datacenter_bits(
    layout: *mut grantid_layout,
    datacenter_bits: u32,
) -> grantid_status {
    guard(|| {
        let out = out_arg(layout, "layout")?;
        // SAFETY: `layout` is non-NULL and valid per the caller's contract.
        let current = unsafe { out.read() }.to_core()?;
        let changed = current.with_datacenter_bits(bits("datacenter_bits", datacenter_bits)?)?;
        // SAFETY: `layout` is non-NULL and writable per the caller's contract.
        unsafe { out.write(changed.into()) };
        Ok(())
    })
}

/// Encodes a (timestamp, worker, sequence) tuple in `*layout`. A field wider
/// than its width, or the reserved tuple (0, 0, 0), is
/// `GRANTID_INVALID_ARGUMENT`.
///
/// # Safety
///
/// `layout` is NULL or points to a valid `grantid_layout`; `out_id` is NULL
/// or points to writable memory for one `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_layout_encode(
    layout: *const grantid_layout,
    timestamp: u64,
    worker: u64,
    sequence: u64,
    out_id: *mut u64,
) -> grantid_status {
    guard(|| {
        // SAFETY: `layout` is NULL or valid per the caller's contract.
        let layout = unsafe { arg(layout, "layout") }?.to_core()?;
        let out_id = out_arg(out_id, "out_id")?;
        let id = layout.encode(timestamp, worker, sequence)?;
        // SAFETY: `out_id` is non-NULL and writable per the caller's contract.
        unsafe { out_id.write(id) };
        Ok(())
    })
}

/// Decodes `id` in `*layout` into version 0.1.0's fields of `*out`
/// (timestamp, worker, sequence, unix_ms), for programs built against that
/// header. The header's `grantid_layout_decode` macro calls
/// `grantid_layout_decode_sized` instead.
///
/// # Safety
///
/// `layout` is NULL or points to a valid `grantid_layout`; `out` is NULL or
/// points to writable memory for version 0.1.0's `grantid_decoded`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_layout_decode(
    layout: *const grantid_layout,
    id: u64,
    out: *mut grantid_decoded,
) -> grantid_status {
    // SAFETY: as the caller's contract says, with version 0.1.0's size.
    unsafe { grantid_layout_decode_sized(layout, id, out, DECODED_V1_SIZE) }
}

/// Decodes `id` in `*layout` into the caller's `size` bytes at `out`.
/// 0, a value with the sign bit, or bits above the layout's width are
/// `GRANTID_INVALID_ARGUMENT`. Call it through the header's
/// `grantid_layout_decode(layout, id, out)` macro, which passes
/// `sizeof *out`.
///
/// # Safety
///
/// `layout` is NULL or points to a valid `grantid_layout`; `out` is NULL or
/// points to `size` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_layout_decode_sized(
    layout: *const grantid_layout,
    id: u64,
    out: *mut grantid_decoded,
    size: usize,
) -> grantid_status {
    guard(|| {
        // SAFETY: `layout` is NULL or valid per the caller's contract.
        let layout = unsafe { arg(layout, "layout") }?.to_core()?;
        let out = out_arg(out, "out")?;
        let decoded = layout.decode(id)?;
        // SAFETY: `out` is non-NULL with `size` writable bytes per the
        // caller's contract.
        unsafe { write_decoded(out, size, decoded) }
    })
}

/// Parses an ID written in decimal or as `0x`-prefixed hexadecimal (no
/// whitespace, no sign, at most 2^63 - 1). Anything else is
/// `GRANTID_INVALID_ARGUMENT`.
///
/// # Safety
///
/// `text` is NULL or points to a NUL-terminated string; `out_id` is NULL or
/// points to writable memory for one `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn grantid_parse_id(text: *const c_char, out_id: *mut u64) -> grantid_status {
    guard(|| {
        if text.is_null() {
            return Err(Failure::Null("text"));
        }
        let out_id = out_arg(out_id, "out_id")?;
        // SAFETY: `text` is non-NULL and NUL-terminated per the caller's contract.
        let text = unsafe { CStr::from_ptr(text) };
        let text = text
            .to_str()
            .map_err(|_| invalid(format!("{text:?} is not an ID (not UTF-8)")))?;
        let id = grantid::parse_id(text)?;
        // SAFETY: `out_id` is non-NULL and writable per the caller's contract.
        unsafe { out_id.write(id) };
        Ok(())
    })
}
