//! `PublicIds`: public IDs (docs/PUBLIC_IDS.md), the core's `PublicIds`
//! behind a class. IDs and public values cross as decimal strings or
//! bigints, never numbers; the key never reaches a JS property.

use napi::ValueType;
use napi::bindgen_prelude::{BigInt, Uint8Array, Unknown};
use napi_derive::napi;

use crate::convert::{bigint_to_u64, from_js, id_from_js};
use crate::errors::{Result, from_napi, invalid, map_error};

/// A keyed, reversible permutation of the IDs ([1, 2^63)) for URLs and
/// APIs. `key`: a string of 32 hex digits, or 16 bytes (`Buffer` or
/// `Uint8Array`). Methods return decimal strings; the `BigInt` variants
/// return bigints.
#[napi]
pub struct PublicIds {
    inner: grantid::PublicIds,
}

#[napi]
impl PublicIds {
    #[napi(constructor, ts_args_type = "key: string | Uint8Array")]
    pub fn new(key: Unknown<'_>) -> Result<PublicIds> {
        let inner = match key.get_type().map_err(from_napi)? {
            ValueType::String => grantid::PublicIds::from_hex(&from_js::<String>(&key)?),
            ValueType::Object => {
                let bytes = from_js::<Uint8Array>(&key).map_err(|_| {
                    invalid("a public-ID key is 16 bytes (Buffer, Uint8Array) or 32 hex digits")
                })?;
                grantid::PublicIds::new(&bytes)
            }
            other => {
                return Err(invalid(format!(
                    "a public-ID key is 16 bytes (Buffer, Uint8Array) or a string of 32 hex \
                     digits, not {other}"
                )));
            }
        };
        Ok(PublicIds {
            inner: inner.map_err(map_error)?,
        })
    }

    /// A new random key (16 bytes) from the operating system's generator.
    #[napi]
    pub fn generate_key() -> Result<Uint8Array> {
        let key = grantid::PublicIds::generate_key().map_err(map_error)?;
        Ok(Uint8Array::from(key.to_vec()))
    }

    /// The public value of an ID, as a decimal string.
    #[napi(ts_args_type = "id: string | bigint")]
    pub fn encode(&self, id: Unknown<'_>) -> Result<String> {
        self.encode_u64(&id).map(|p| p.to_string())
    }

    /// The public value of an ID, as a bigint.
    #[napi(js_name = "encodeBigInt", ts_args_type = "id: string | bigint")]
    pub fn encode_bigint(&self, id: Unknown<'_>) -> Result<BigInt> {
        self.encode_u64(&id).map(BigInt::from)
    }

    /// The ID whose public value is `publicId`, as a decimal string.
    #[napi(ts_args_type = "publicId: string | bigint")]
    pub fn decode(&self, public_id: Unknown<'_>) -> Result<String> {
        self.decode_u64(&public_id).map(|id| id.to_string())
    }

    /// The ID whose public value is `publicId`, as a bigint.
    #[napi(js_name = "decodeBigInt", ts_args_type = "publicId: string | bigint")]
    pub fn decode_bigint(&self, public_id: Unknown<'_>) -> Result<BigInt> {
        self.decode_u64(&public_id).map(BigInt::from)
    }

    /// The public value of an ID as 13 lower-case Crockford base32 digits.
    #[napi(ts_args_type = "id: string | bigint")]
    pub fn encode_str(&self, id: Unknown<'_>) -> Result<String> {
        self.inner.encode_str(id_from_js(&id)?).map_err(map_error)
    }

    /// The ID of a text made by `encodeStr` (either case), as a decimal
    /// string; anything else throws `INVALID_ARGUMENT`.
    #[napi(ts_args_type = "text: string")]
    pub fn decode_str(&self, text: Unknown<'_>) -> Result<String> {
        self.decode_str_u64(&text).map(|id| id.to_string())
    }

    /// `decodeStr`, as a bigint.
    #[napi(js_name = "decodeStrBigInt", ts_args_type = "text: string")]
    pub fn decode_str_bigint(&self, text: Unknown<'_>) -> Result<BigInt> {
        self.decode_str_u64(&text).map(BigInt::from)
    }

    /// The raw Speck64/128 encryption of a 64-bit block, without the walk
    /// (for checking implementations against each other).
    #[napi]
    pub fn cipher_encrypt(&self, block: BigInt) -> Result<BigInt> {
        Ok(BigInt::from(
            self.inner.cipher_encrypt(bigint_to_u64(&block, "block")?),
        ))
    }

    /// The inverse of `cipherEncrypt`.
    #[napi]
    pub fn cipher_decrypt(&self, block: BigInt) -> Result<BigInt> {
        Ok(BigInt::from(
            self.inner.cipher_decrypt(bigint_to_u64(&block, "block")?),
        ))
    }

    /// `'PublicIds { key: <redacted> }'`.
    #[napi(js_name = "toString")]
    pub fn to_js_string(&self) -> String {
        format!("{:?}", self.inner)
    }
}

impl PublicIds {
    fn encode_u64(&self, id: &Unknown<'_>) -> Result<u64> {
        self.inner.encode(id_from_js(id)?).map_err(map_error)
    }

    fn decode_u64(&self, public_id: &Unknown<'_>) -> Result<u64> {
        self.inner.decode(id_from_js(public_id)?).map_err(map_error)
    }

    fn decode_str_u64(&self, text: &Unknown<'_>) -> Result<u64> {
        if text.get_type().map_err(from_napi)? != ValueType::String {
            return Err(invalid("a public ID's text form is a string"));
        }
        self.inner
            .decode_str(&from_js::<String>(text)?)
            .map_err(map_error)
    }
}
