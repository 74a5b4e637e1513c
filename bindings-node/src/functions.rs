//! Module-level functions that need no generator.

use napi_derive::napi;

use napi::bindgen_prelude::Unknown;

use crate::convert::{
    DecodedId, DecodedIdBigInt, LayoutInfo, LayoutOptions, decoded_to_js, decoded_to_js_bigint,
    id_from_js, layout_from_js, optional_from_js,
};
use crate::errors::{Result, codes, map_error};

/// The fields of an ID, in `layout` (default: the snowflake layout). A
/// field beyond `Number.MAX_SAFE_INTEGER` is refused: use `decodeBigInt`.
#[napi(ts_args_type = "id: string | bigint, layout?: LayoutOptions")]
pub fn decode(id: Unknown<'_>, layout: Option<Unknown<'_>>) -> Result<DecodedId> {
    let layout = layout_from_js(optional_from_js::<LayoutOptions>(layout)?.as_ref())?;
    decoded_to_js(&layout.decode(id_from_js(&id)?).map_err(map_error)?)
}

/// The fields of an ID as bigints.
#[napi(
    js_name = "decodeBigInt",
    ts_args_type = "id: string | bigint, layout?: LayoutOptions"
)]
pub fn decode_bigint(id: Unknown<'_>, layout: Option<Unknown<'_>>) -> Result<DecodedIdBigInt> {
    let layout = layout_from_js(optional_from_js::<LayoutOptions>(layout)?.as_ref())?;
    Ok(decoded_to_js_bigint(
        &layout.decode(id_from_js(&id)?).map_err(map_error)?,
    ))
}

/// Encodes a (timestamp, worker, sequence) tuple as a decimal ID string,
/// checking each field's width. For tests and tools; generators encode
/// their own IDs.
#[napi(
    ts_args_type = "timestamp: number | bigint, worker: number | bigint, sequence: number | bigint, layout?: LayoutOptions"
)]
pub fn encode(
    timestamp: napi::bindgen_prelude::Either<f64, napi::bindgen_prelude::BigInt>,
    worker: napi::bindgen_prelude::Either<f64, napi::bindgen_prelude::BigInt>,
    sequence: napi::bindgen_prelude::Either<f64, napi::bindgen_prelude::BigInt>,
    layout: Option<LayoutOptions>,
) -> Result<String> {
    use crate::convert::{MAX_SAFE, bigint_to_u64, number_to_u64};
    use napi::bindgen_prelude::Either;
    let field = |v: &Either<f64, napi::bindgen_prelude::BigInt>, name: &str| match v {
        Either::A(n) => number_to_u64(*n, name, MAX_SAFE),
        Either::B(b) => bigint_to_u64(b, name),
    };
    let layout = layout_from_js(layout.as_ref())?;
    layout
        .encode(
            field(&timestamp, "timestamp")?,
            field(&worker, "worker")?,
            field(&sequence, "sequence")?,
        )
        .map(|id| id.to_string())
        .map_err(map_error)
}

/// Parses an ID written as decimal digits or `0x` hex into its canonical
/// decimal string (`INVALID_ARGUMENT` for anything else).
#[napi]
pub fn parse_id(text: String) -> Result<String> {
    grantid::parse_id(&text)
        .map(|id| id.to_string())
        .map_err(map_error)
}

/// A validated layout with defaults filled in.
#[napi(ts_args_type = "options?: LayoutOptions")]
pub fn layout(options: Option<Unknown<'_>>) -> Result<LayoutInfo> {
    let options = optional_from_js::<LayoutOptions>(options)?;
    Ok(LayoutInfo::from(&layout_from_js(options.as_ref())?))
}

/// Every error `code` the addon uses, in the core's order.
#[napi]
pub fn error_codes() -> Vec<&'static str> {
    codes()
}
