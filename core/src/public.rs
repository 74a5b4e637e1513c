//! Public IDs: a keyed, reversible permutation of the valid IDs
//! ([1, 2^63)), for IDs shown in URLs and APIs (docs/PUBLIC_IDS.md).
//!
//! The cipher is Speck64/128 (Beaulieu et al., 2013) from the RustCrypto
//! `speck-cipher` crate, whose conventions are the paper's: the 16 key bytes
//! are the key words (l2, l1, l0, k0) big-endian, left to right, and the
//! 8-byte block is (x, y) big-endian. The block of an ID is therefore its
//! big-endian bytes: x = the high 32 bits, y = the low 32 bits.
//!
//! Cycle walking makes the 64-bit permutation one of [1, 2^63): encrypt,
//! and while the result is 0 or >= 2^63 encrypt the result again. Every
//! value of [1, 2^63) lies on a cycle of the 64-bit permutation; walking
//! along it from an ID reaches the next member of [1, 2^63) on that cycle,
//! so the map is a bijection of [1, 2^63), and decryption walks back.

use speck_cipher::Speck64_128;
use speck_cipher::cipher::{Array, BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};

use crate::error::Error;

/// Key length in bytes: Speck64/128 takes 128 bits.
pub const PUBLIC_ID_KEY_LEN: usize = 16;
/// Length of the text form: 13 Crockford base32 digits carry 65 bits, the
/// fewest that hold 63.
pub const PUBLIC_ID_TEXT_LEN: usize = 13;
/// The text form's digits: Crockford's base32 alphabet (no I, L, O, U), in
/// lower case. Decoding also takes upper case.
pub const PUBLIC_ID_ALPHABET: &str = "0123456789abcdefghjkmnpqrstvwxyz";

/// The first value outside the ID range.
const LIMIT: u64 = 1 << 63;

/// A keyed permutation of the IDs, [1, 2^63), onto themselves, with a short
/// URL-safe text form. One key per namespace of public IDs, kept forever:
/// another key maps every ID elsewhere.
///
/// ```
/// use grantid::PublicIds;
///
/// let ids = PublicIds::from_hex("1b1a1918131211100b0a090803020100")?;
/// let public = ids.encode(20497)?;          // a u64 in [1, 2^63)
/// assert_eq!(ids.decode(public)?, 20497);
/// let text = ids.encode_str(20497)?;        // 13 characters, e.g. for a URL
/// assert_eq!(text.len(), 13);
/// assert_eq!(ids.decode_str(&text)?, 20497);
/// assert_eq!(ids.decode_str(&text.to_uppercase())?, 20497);
/// # Ok::<(), grantid::Error>(())
/// ```
///
/// * **Hides** the ID's fields (time, worker, sequence) and its order: a
///   pseudorandom permutation under a secret key.
/// * **Does not authenticate**: any 13-character text of the alphabet whose
///   value is in range decodes to some ID; look it up and treat a miss as
///   "not found".
/// * **Thread-safe**, no allocation on `encode` / `decode`; the time of a
///   call depends on how many cipher calls the walk took (on average 2).
/// * `Debug` never shows the key.
#[derive(Clone)]
pub struct PublicIds {
    cipher: Speck64_128,
}

impl std::fmt::Debug for PublicIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PublicIds { key: <redacted> }")
    }
}

impl PublicIds {
    /// Keys a permutation with exactly 16 raw bytes; any other length is
    /// `InvalidArgument`.
    pub fn new(key: &[u8]) -> Result<PublicIds, Error> {
        let key: &[u8; PUBLIC_ID_KEY_LEN] = key.try_into().map_err(|_| {
            Error::invalid(format!(
                "a public-ID key is exactly {PUBLIC_ID_KEY_LEN} bytes, not {}",
                key.len()
            ))
        })?;
        Ok(PublicIds {
            cipher: Speck64_128::new(&Array(*key)),
        })
    }

    /// Keys a permutation with 32 hex digits (either case, nothing else: no
    /// prefix, no spaces), the key bytes left to right, i.e. the paper's
    /// key words (l2, l1, l0, k0).
    pub fn from_hex(hex: &str) -> Result<PublicIds, Error> {
        let digits = hex.as_bytes();
        let bad = || {
            // The message never repeats the text: it may be a key.
            Error::invalid(format!(
                "a public-ID key in hex is exactly {} hex digits (got {} characters{})",
                2 * PUBLIC_ID_KEY_LEN,
                hex.chars().count(),
                if hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    ""
                } else {
                    ", some not hex digits"
                }
            ))
        };
        if digits.len() != 2 * PUBLIC_ID_KEY_LEN {
            return Err(bad());
        }
        let mut key = [0u8; PUBLIC_ID_KEY_LEN];
        for (byte, pair) in key.iter_mut().zip(digits.chunks_exact(2)) {
            let high = hex_value(pair[0]).ok_or_else(bad)?;
            let low = hex_value(pair[1]).ok_or_else(bad)?;
            *byte = (high << 4) | low;
        }
        PublicIds::new(&key)
    }

    /// A new random key from the operating system's generator, for a new
    /// namespace of public IDs. Store it (32 hex digits) and keep it: a
    /// lost key cannot be recovered, and another key maps every ID
    /// elsewhere. `Unavailable` if the system generator fails.
    pub fn generate_key() -> Result<[u8; PUBLIC_ID_KEY_LEN], Error> {
        let mut key = [0u8; PUBLIC_ID_KEY_LEN];
        getrandom::fill(&mut key).map_err(|e| {
            Error::new(
                crate::ErrorKind::Unavailable,
                format!("the system random generator failed: {e}"),
            )
        })?;
        Ok(key)
    }

    /// The public value of `id`: a u64 in [1, 2^63). An `id` outside
    /// [1, 2^63) is `InvalidArgument`.
    pub fn encode(&self, id: u64) -> Result<u64, Error> {
        check_range(id, "ID")?;
        Ok(self.walk(id, |b| self.cipher_encrypt(b)))
    }

    /// The ID whose public value is `public`. A value outside [1, 2^63) is
    /// `InvalidArgument`; every value inside is the public value of exactly
    /// one ID.
    pub fn decode(&self, public: u64) -> Result<u64, Error> {
        check_range(public, "public ID")?;
        Ok(self.walk(public, |b| self.cipher_decrypt(b)))
    }

    /// `encode`, written as 13 lower-case Crockford base32 digits.
    pub fn encode_str(&self, id: u64) -> Result<String, Error> {
        self.encode(id).map(to_text)
    }

    /// The ID of a text made by `encode_str`, in either case. Anything but
    /// exactly 13 digits of the alphabet, with a value in [1, 2^63), is
    /// `InvalidArgument`.
    pub fn decode_str(&self, text: &str) -> Result<u64, Error> {
        self.decode(parse_text(text)?)
    }

    /// The raw Speck64/128 encryption of a 64-bit block (x = high 32 bits),
    /// without the walk: for checking another implementation against the
    /// paper and against this one. IDs go through [`PublicIds::encode`].
    pub fn cipher_encrypt(&self, block: u64) -> u64 {
        let mut b = Array(block.to_be_bytes());
        self.cipher.encrypt_block(&mut b);
        u64::from_be_bytes(b.0)
    }

    /// The inverse of [`PublicIds::cipher_encrypt`].
    pub fn cipher_decrypt(&self, block: u64) -> u64 {
        let mut b = Array(block.to_be_bytes());
        self.cipher.decrypt_block(&mut b);
        u64::from_be_bytes(b.0)
    }

    /// Applies `step` until the value is back in [1, 2^63). Ends: `value`
    /// is on a finite cycle of the 64-bit permutation and is itself in range.
    #[inline]
    fn walk(&self, mut value: u64, step: impl Fn(u64) -> u64) -> u64 {
        loop {
            value = step(value);
            if value.wrapping_sub(1) < LIMIT - 1 {
                return value;
            }
        }
    }
}

fn check_range(value: u64, what: &str) -> Result<(), Error> {
    if value == 0 || value >= LIMIT {
        return Err(Error::invalid(format!(
            "{value} is not a {what} (they are 1 ..= 2^63 - 1)"
        )));
    }
    Ok(())
}

fn hex_value(digit: u8) -> Option<u8> {
    (digit as char).to_digit(16).map(|d| d as u8)
}

/// Writes a value below 2^65 as 13 base32 digits, most significant first.
fn to_text(value: u64) -> String {
    let alphabet = PUBLIC_ID_ALPHABET.as_bytes();
    (0..PUBLIC_ID_TEXT_LEN)
        .map(|i| {
            let shift = 5 * (PUBLIC_ID_TEXT_LEN - 1 - i);
            // The top digit holds bits 60..64: u64 has bits up to 63 only.
            let digit = value.checked_shr(shift as u32).unwrap_or(0) & 31;
            alphabet[digit as usize] as char
        })
        .collect()
}

/// The value of each byte as a digit of the text form, either case; 0xff
/// for every other byte (I, L, O, U included: they are not digits here).
const DIGIT_VALUES: [u8; 256] = {
    let alphabet = PUBLIC_ID_ALPHABET.as_bytes();
    let mut table = [0xff; 256];
    let mut i = 0;
    while i < alphabet.len() {
        table[alphabet[i] as usize] = i as u8;
        table[alphabet[i].to_ascii_uppercase() as usize] = i as u8;
        i += 1;
    }
    table
};

/// Parses the text form strictly: exactly 13 digits, value in [1, 2^63).
fn parse_text(text: &str) -> Result<u64, Error> {
    if text.len() != PUBLIC_ID_TEXT_LEN {
        return Err(Error::invalid(format!(
            "{text:?} is not a public ID: it has {} bytes, a public ID has {PUBLIC_ID_TEXT_LEN} \
             characters of {PUBLIC_ID_ALPHABET}",
            text.len()
        )));
    }
    let mut value: u64 = 0;
    for (i, c) in text.bytes().enumerate() {
        let d = u64::from(DIGIT_VALUES[c as usize]);
        if d >= 32 {
            return Err(Error::invalid(format!(
                "{text:?} is not a public ID: character {} is not one of {PUBLIC_ID_ALPHABET} \
                 (either case)",
                i + 1
            )));
        }
        // The first digit may carry at most 3 bits (63 = 3 + 12 * 5).
        if i == 0 && d >= 8 {
            return Err(Error::invalid(format!(
                "{text:?} is not a public ID: its value is 2^63 or more"
            )));
        }
        value = (value << 5) | d;
    }
    if value == 0 {
        return Err(Error::invalid(format!(
            "{text:?} is not a public ID: its value is 0"
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    const PAPER_KEY: &str = "1b1a1918131211100b0a090803020100";

    fn paper() -> PublicIds {
        PublicIds::from_hex(PAPER_KEY).unwrap()
    }

    #[test]
    fn raw_cipher_matches_the_paper() {
        let ids = paper();
        assert_eq!(
            ids.cipher_encrypt(0x3b72_6574_7475_432d),
            0x8c6f_a548_454e_028b
        );
        assert_eq!(
            ids.cipher_decrypt(0x8c6f_a548_454e_028b),
            0x3b72_6574_7475_432d
        );
        let raw = PublicIds::new(&[
            0x1b, 0x1a, 0x19, 0x18, 0x13, 0x12, 0x11, 0x10, 0x0b, 0x0a, 0x09, 0x08, 0x03, 0x02,
            0x01, 0x00,
        ])
        .unwrap();
        assert_eq!(
            raw.cipher_encrypt(0x3b72_6574_7475_432d),
            0x8c6f_a548_454e_028b
        );
    }

    #[test]
    fn walks_until_the_value_is_an_id() {
        let ids = paper();
        // The paper's block is an ID whose first encryption has the top bit
        // set, so its public value comes from further along the cycle.
        let id = 0x3b72_6574_7475_432d;
        let public = ids.encode(id).unwrap();
        assert_ne!(public, 0x8c6f_a548_454e_028b);
        let mut v = ids.cipher_encrypt(0x8c6f_a548_454e_028b);
        while v == 0 || v >= LIMIT {
            v = ids.cipher_encrypt(v);
        }
        assert_eq!(public, v);
        assert_eq!(ids.decode(public).unwrap(), id);
    }

    #[test]
    fn ends_and_out_of_range_values() {
        let ids = paper();
        for id in [1, LIMIT - 1] {
            let p = ids.encode(id).unwrap();
            assert!((1..LIMIT).contains(&p));
            assert_eq!(ids.decode(p).unwrap(), id);
        }
        for bad in [0, LIMIT, u64::MAX] {
            assert_eq!(
                ids.encode(bad).unwrap_err().kind(),
                ErrorKind::InvalidArgument
            );
            assert_eq!(
                ids.decode(bad).unwrap_err().kind(),
                ErrorKind::InvalidArgument
            );
        }
    }

    #[test]
    fn keys_are_exactly_16_bytes_or_32_hex_digits() {
        for len in [0, 15, 17, 32] {
            let e = PublicIds::new(&vec![7u8; len]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.message().contains(&len.to_string()), "{e}");
        }
        assert_eq!(
            PublicIds::from_hex(&PAPER_KEY.to_uppercase())
                .unwrap()
                .encode(5)
                .unwrap(),
            paper().encode(5).unwrap()
        );
        for bad in [
            "",
            &PAPER_KEY[1..],
            &format!("{PAPER_KEY}0"),
            &format!("0x{}", &PAPER_KEY[2..]),
            &format!("{}g", &PAPER_KEY[1..]),
            "\u{e9}b1a1918131211100b0a0908030201",
        ] {
            let e = PublicIds::from_hex(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad:?}");
        }
        // The message never repeats a key that was refused.
        let secret = format!("{}z", &PAPER_KEY[1..]);
        let e = PublicIds::from_hex(&secret).unwrap_err();
        assert!(!e.to_string().contains(&secret[..8]), "{e}");
    }

    #[test]
    fn generated_keys_differ_and_work() {
        let (a, b) = (
            PublicIds::generate_key().unwrap(),
            PublicIds::generate_key().unwrap(),
        );
        assert_ne!(a, b);
        let ids = PublicIds::new(&a).unwrap();
        assert_eq!(ids.decode(ids.encode(42).unwrap()).unwrap(), 42);
    }

    #[test]
    fn debug_never_shows_the_key() {
        let shown = format!("{:?} {:#?}", paper(), paper());
        assert!(shown.contains("redacted"));
        for needle in ["1b1a", "1b, 1a", "27, 26", "k:", "Speck"] {
            assert!(!shown.contains(needle), "{shown}");
        }
    }

    #[test]
    fn digit_table_is_the_alphabet_in_either_case() {
        for byte in 0..=255u8 {
            let want = PUBLIC_ID_ALPHABET
                .bytes()
                .position(|d| d == byte.to_ascii_lowercase())
                .map_or(0xff, |p| p as u8);
            assert_eq!(DIGIT_VALUES[byte as usize], want, "byte {byte}");
        }
    }

    #[test]
    fn text_form_is_13_crockford_digits() {
        assert_eq!(to_text(1), "0000000000001");
        assert_eq!(to_text(32), "0000000000010");
        assert_eq!(to_text(LIMIT - 1), "7zzzzzzzzzzzz");
        assert_eq!(parse_text("7ZZZZZZZZZZZZ").unwrap(), LIMIT - 1);
        assert_eq!(parse_text("0000000000001").unwrap(), 1);
        for bad in [
            "",
            "000000000001",
            "00000000000001",
            "0000000000000",
            "8000000000000",
            "000000000000i",
            "000000000000L",
            "000000000000o",
            "000000000000U",
            "00000000000\u{e9}",
            "0000000000-01",
        ] {
            let e = parse_text(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad:?}");
        }
    }
}
