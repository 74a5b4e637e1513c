//! `grantid.PublicIds`: public IDs (docs/PUBLIC_IDS.md), the core's
//! `PublicIds` behind a frozen class. The key is never shown (`repr`) and
//! the object cannot be pickled (a pickle would carry the key).

use grantid::PublicIds;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyString};

use crate::errors::{invalid, to_pyerr};
use crate::layout::id_arg;

/// A keyed, reversible permutation of the IDs ([1, 2^63)) for URLs and
/// APIs. `key` is 16 bytes (`bytes` or `bytearray`) or a `str` of 32 hex
/// digits. Thread-safe; immutable.
#[pyclass(frozen, module = "grantid", name = "PublicIds")]
#[derive(Debug)]
pub struct PyPublicIds(PublicIds);

#[pymethods]
impl PyPublicIds {
    #[new]
    fn new(key: &Bound<'_, PyAny>) -> PyResult<PyPublicIds> {
        let made = if let Ok(hex) = key.cast::<PyString>() {
            PublicIds::from_hex(&hex.to_cow()?)
        } else if let Ok(bytes) = key.cast::<PyBytes>() {
            PublicIds::new(bytes.as_bytes())
        } else if let Ok(array) = key.cast::<PyByteArray>() {
            PublicIds::new(&array.to_vec())
        } else {
            return Err(invalid(format!(
                "a public-ID key is 16 bytes or a str of 32 hex digits, not {}",
                key.get_type().name()?
            )));
        };
        made.map(PyPublicIds).map_err(to_pyerr)
    }

    /// A new random key (16 bytes) from the operating system's generator.
    #[staticmethod]
    fn generate_key<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let key = PublicIds::generate_key().map_err(to_pyerr)?;
        Ok(PyBytes::new(py, &key))
    }

    /// The public value of an ID (an `int`, or a `str` of decimal digits or
    /// `0x` hex): an `int` in [1, 2^63).
    fn encode(&self, id: &Bound<'_, PyAny>) -> PyResult<u64> {
        self.0.encode(id_arg(id)?).map_err(to_pyerr)
    }

    /// The ID whose public value is `public_id`.
    fn decode(&self, public_id: &Bound<'_, PyAny>) -> PyResult<u64> {
        self.0.decode(id_arg(public_id)?).map_err(to_pyerr)
    }

    /// The public value of an ID as 13 lower-case Crockford base32 digits.
    fn encode_str(&self, id: &Bound<'_, PyAny>) -> PyResult<String> {
        self.0.encode_str(id_arg(id)?).map_err(to_pyerr)
    }

    /// The ID of a text made by `encode_str` (either case); anything else
    /// raises `InvalidArgument`.
    fn decode_str(&self, text: &str) -> PyResult<u64> {
        self.0.decode_str(text).map_err(to_pyerr)
    }

    /// The raw Speck64/128 encryption of a 64-bit block, without the walk
    /// (for checking implementations against each other).
    fn cipher_encrypt(&self, block: u64) -> u64 {
        self.0.cipher_encrypt(block)
    }

    /// The inverse of `cipher_encrypt`.
    fn cipher_decrypt(&self, block: u64) -> u64 {
        self.0.cipher_decrypt(block)
    }

    fn __repr__(&self) -> &'static str {
        "PublicIds(key=<redacted>)"
    }

    fn __reduce__(&self) -> PyResult<()> {
        Err(pyo3::exceptions::PyTypeError::new_err(
            "PublicIds is not picklable: a pickle would carry its key",
        ))
    }
}
