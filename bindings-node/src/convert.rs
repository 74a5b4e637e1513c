//! Conversions between JavaScript values and the core's integers.
//!
//! IDs and incarnations are 64-bit: they cross as decimal strings or
//! `bigint`s, never as `number`s. Ticks, workers and counters cross as
//! `number`s, checked to be exact (safe) integers.

use grantid::{Decoded, Layout};
use napi::ValueType;
use napi::bindgen_prelude::{BigInt, FromNapiValue, Unknown};
use napi_derive::napi;

use crate::errors::{Result, from_napi, invalid, map_error};

/// Largest integer a JS `number` holds exactly (2^53 - 1).
pub const MAX_SAFE: u64 = (1 << 53) - 1;

/// Converts an argument taken as `Unknown` (so that a value of the wrong
/// type is an `INVALID_ARGUMENT` error, not napi's own status code).
pub fn from_js<T: FromNapiValue>(value: &Unknown<'_>) -> Result<T> {
    // SAFETY: `value` is a live value of the current env; `T`'s conversion
    // checks the value's type and fails cleanly on a mismatch.
    unsafe { value.cast::<T>() }.map_err(from_napi)
}

/// Reads an optional object argument (`undefined` / `null` mean absent).
pub fn optional_from_js<T: FromNapiValue>(value: Option<Unknown<'_>>) -> Result<Option<T>> {
    match value {
        None => Ok(None),
        Some(v) => match v.get_type().map_err(from_napi)? {
            ValueType::Undefined | ValueType::Null => Ok(None),
            ValueType::Object => from_js(&v).map(Some),
            other => Err(invalid(format!("expected an object, got {other}"))),
        },
    }
}

/// Reads an ID argument: a decimal (or `0x` hex) string, or a bigint.
/// Never a number: IDs pass 2^53.
pub fn id_from_js(id: &Unknown<'_>) -> Result<u64> {
    match id.get_type().map_err(from_napi)? {
        ValueType::String => grantid::parse_id(&from_js::<String>(id)?).map_err(map_error),
        ValueType::BigInt => {
            let v = bigint_to_u64(&from_js::<BigInt>(id)?, "id")?;
            if v > i64::MAX as u64 {
                return Err(invalid(format!("{v} is larger than any ID (2^63 - 1)")));
            }
            Ok(v)
        }
        other => Err(invalid(format!(
            "an ID must be a decimal string or a bigint (never a number), got {other}"
        ))),
    }
}

/// Reads a count or duration argument: a non-negative safe integer.
pub fn count_from_js(value: &Unknown<'_>, what: &str) -> Result<u64> {
    match value.get_type().map_err(from_napi)? {
        ValueType::Number => number_to_u64(from_js::<f64>(value)?, what, MAX_SAFE),
        other => Err(invalid(format!("{what} must be a number, got {other}"))),
    }
}

/// A non-negative bigint that fits in 64 bits.
pub fn bigint_to_u64(big: &BigInt, what: &str) -> Result<u64> {
    let (negative, value, lossless) = big.get_u64();
    if negative && value != 0 {
        return Err(invalid(format!("{what} must not be negative")));
    }
    if !lossless {
        return Err(invalid(format!("{what} does not fit in 64 bits")));
    }
    Ok(value)
}

/// A JS number that must be an exact non-negative integer no larger than
/// `max`.
pub fn number_to_u64(value: f64, what: &str, max: u64) -> Result<u64> {
    if !value.is_finite() || value.fract() != 0.0 || value < 0.0 {
        return Err(invalid(format!(
            "{what} must be a non-negative integer, got {value}"
        )));
    }
    if value > max as f64 {
        return Err(invalid(format!("{what} is {value}, at most {max} allowed")));
    }
    Ok(value as u64)
}

/// A u64 as a JS number, refused when a number cannot hold it exactly.
pub fn u64_to_number(value: u64, what: &str) -> Result<f64> {
    if value > MAX_SAFE {
        return Err(invalid(format!(
            "{what} {value} is above Number.MAX_SAFE_INTEGER; use decodeBigInt"
        )));
    }
    Ok(value as f64)
}

/// An ID format: bit widths, epoch (Unix ms) and tick length (ms). Every
/// field is optional on input; a missing one takes the default layout's
/// value (41 / 10 / 12 bits, epoch 2026-01-01T00:00:00Z, 1 ms ticks).
#[napi(object)]
#[derive(Debug, Clone, Default)]
pub struct LayoutOptions {
    pub timestamp_bits: Option<f64>,
    pub worker_bits: Option<f64>,
    pub sequence_bits: Option<f64>,
    pub epoch_ms: Option<f64>,
    pub tick_ms: Option<f64>,
    /// How many top bits of the worker field are a datacenter number
    /// (default 0: none; at most `workerBits`).
    pub datacenter_bits: Option<f64>,
}

/// A validated layout, as the addon reports it.
#[napi(object)]
#[derive(Debug, Clone)]
pub struct LayoutInfo {
    pub timestamp_bits: u32,
    pub worker_bits: u32,
    pub sequence_bits: u32,
    pub epoch_ms: f64,
    pub tick_ms: f64,
    pub datacenter_bits: u32,
}

/// Builds a core layout (validated by the core) from JS options.
pub fn layout_from_js(options: Option<&LayoutOptions>) -> Result<Layout> {
    let d = Layout::default();
    let Some(o) = options else { return Ok(d) };
    let bits = |v: Option<f64>, name: &str, default: u8| -> Result<u8> {
        match v {
            None => Ok(default),
            Some(v) => number_to_u64(v, name, 255).map(|b| b as u8),
        }
    };
    let ms = |v: Option<f64>, name: &str, default: u64| -> Result<u64> {
        match v {
            None => Ok(default),
            Some(v) => number_to_u64(v, name, MAX_SAFE),
        }
    };
    let datacenter_bits = bits(o.datacenter_bits, "datacenterBits", 0)?;
    Layout::with_all(
        bits(o.timestamp_bits, "timestampBits", d.timestamp_bits())?,
        bits(o.worker_bits, "workerBits", d.worker_bits())?,
        bits(o.sequence_bits, "sequenceBits", d.sequence_bits())?,
        ms(o.epoch_ms, "epochMs", d.epoch_ms())?,
        ms(o.tick_ms, "tickMs", d.tick_ms())?,
    )
    .and_then(|l| l.with_datacenter_bits(datacenter_bits))
    .map_err(map_error)
}

impl From<&Layout> for LayoutInfo {
    fn from(l: &Layout) -> LayoutInfo {
        LayoutInfo {
            timestamp_bits: l.timestamp_bits().into(),
            worker_bits: l.worker_bits().into(),
            sequence_bits: l.sequence_bits().into(),
            // Exact: layouts built from JS take safe integers only.
            epoch_ms: l.epoch_ms() as f64,
            tick_ms: l.tick_ms() as f64,
            datacenter_bits: l.datacenter_bits().into(),
        }
    }
}

/// The fields of an ID, as numbers.
#[napi(object)]
#[derive(Debug, Clone)]
pub struct DecodedId {
    /// Ticks since the layout's epoch.
    pub timestamp: f64,
    pub worker: f64,
    pub sequence: f64,
    /// Unix ms at which the encoded tick starts (a diagnostic, not a commit
    /// time).
    pub unix_ms: f64,
    /// The datacenter: the top `datacenterBits` of the worker field (0
    /// without a split).
    pub datacenter: f64,
    /// The worker within its datacenter (the whole worker field without a
    /// split).
    pub datacenter_worker: f64,
}

/// The fields of an ID, as bigints (for layouts whose fields pass 2^53).
#[napi(object)]
#[derive(Debug, Clone)]
pub struct DecodedIdBigInt {
    pub timestamp: BigInt,
    pub worker: BigInt,
    pub sequence: BigInt,
    pub unix_ms: BigInt,
    pub datacenter: BigInt,
    pub datacenter_worker: BigInt,
}

pub fn decoded_to_js(d: &Decoded) -> Result<DecodedId> {
    Ok(DecodedId {
        timestamp: u64_to_number(d.timestamp, "timestamp")?,
        worker: u64_to_number(d.worker, "worker")?,
        sequence: u64_to_number(d.sequence, "sequence")?,
        unix_ms: u64_to_number(d.unix_ms, "unixMs")?,
        datacenter: u64_to_number(d.datacenter, "datacenter")?,
        datacenter_worker: u64_to_number(d.datacenter_worker, "datacenterWorker")?,
    })
}

pub fn decoded_to_js_bigint(d: &Decoded) -> DecodedIdBigInt {
    DecodedIdBigInt {
        timestamp: BigInt::from(d.timestamp),
        worker: BigInt::from(d.worker),
        sequence: BigInt::from(d.sequence),
        unix_ms: BigInt::from(d.unix_ms),
        datacenter: BigInt::from(d.datacenter),
        datacenter_worker: BigInt::from(d.datacenter_worker),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_must_be_exact_non_negative_integers() {
        assert_eq!(number_to_u64(5.0, "n", 10).unwrap(), 5);
        for bad in [-1.0, 1.5, f64::NAN, f64::INFINITY, 11.0] {
            let e = number_to_u64(bad, "n", 10).unwrap_err();
            assert_eq!(e.status, "INVALID_ARGUMENT");
            assert!(e.reason.contains('n'), "{}", e.reason);
        }
        assert_eq!(u64_to_number(MAX_SAFE, "x").unwrap(), MAX_SAFE as f64);
        assert!(
            u64_to_number(MAX_SAFE + 1, "x")
                .unwrap_err()
                .reason
                .contains("decodeBigInt")
        );
    }

    #[test]
    fn bigints_must_fit_in_u64() {
        assert_eq!(
            bigint_to_u64(&BigInt::from(u64::MAX), "v").unwrap(),
            u64::MAX
        );
        let negative = BigInt {
            sign_bit: true,
            words: vec![1],
        };
        assert!(bigint_to_u64(&negative, "v").is_err());
        let wide = BigInt {
            sign_bit: false,
            words: vec![0, 1],
        };
        assert!(bigint_to_u64(&wide, "v").is_err());
    }

    #[test]
    fn layouts_fill_defaults_and_report_fields() {
        let l = layout_from_js(Some(&LayoutOptions {
            timestamp_bits: Some(12.0),
            worker_bits: Some(3.0),
            sequence_bits: Some(4.0),
            ..LayoutOptions::default()
        }))
        .unwrap();
        assert_eq!(l.encode(160, 1, 1).unwrap(), 20497);
        assert_eq!(l.epoch_ms(), grantid::DEFAULT_EPOCH_MS);
        let e = layout_from_js(Some(&LayoutOptions {
            tick_ms: Some(0.0),
            ..LayoutOptions::default()
        }))
        .unwrap_err();
        assert_eq!(e.status, "INVALID_ARGUMENT");
        assert!(e.reason.contains("tick_ms"));
    }
}
