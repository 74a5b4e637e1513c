//! Public IDs: conformance/public_ids.json (the vectors every binding runs
//! too, computed by the independent Python code of conformance/generate.py)
//! and property tests of the permutation and its text form.

use std::collections::HashSet;

use grantid::{ErrorKind, PUBLIC_ID_ALPHABET, PUBLIC_ID_TEXT_LEN, PublicIds};
use proptest::prelude::*;
use serde_json::Value;

const LIMIT: u64 = 1 << 63;

fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../conformance/public_ids.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("read public_ids.json"))
        .expect("parse public_ids.json")
}

fn dec(v: &Value) -> u64 {
    v.as_str().expect("a decimal string").parse().unwrap()
}

fn hex64(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().expect("16 hex digits"), 16).unwrap()
}

fn keyed(v: &Value) -> PublicIds {
    PublicIds::from_hex(v["key"].as_str().unwrap()).unwrap()
}

#[test]
fn raw_cipher_vectors() {
    let doc = vectors();
    let cipher = doc["cipher"].as_array().unwrap();
    assert!(cipher.len() >= 5);
    assert_eq!(cipher[0]["key"], "1b1a1918131211100b0a090803020100");
    for v in cipher {
        let ids = keyed(v);
        let (p, c) = (hex64(&v["plaintext"]), hex64(&v["ciphertext"]));
        assert_eq!(ids.cipher_encrypt(p), c, "{v}");
        assert_eq!(ids.cipher_decrypt(c), p, "{v}");
    }
}

#[test]
fn permutation_vectors() {
    let doc = vectors();
    assert_eq!(doc["alphabet"], PUBLIC_ID_ALPHABET);
    assert_eq!(doc["text_length"], PUBLIC_ID_TEXT_LEN);
    let mut max_walks = 0;
    let mut ends = HashSet::new();
    for ns in doc["namespaces"].as_array().unwrap() {
        let ids = keyed(ns);
        for v in ns["vectors"].as_array().unwrap() {
            let (id, public) = (dec(&v["id"]), dec(&v["public"]));
            let text = v["text"].as_str().unwrap();
            assert_eq!(ids.encode(id).unwrap(), public, "{v}");
            assert_eq!(ids.decode(public).unwrap(), id, "{v}");
            assert_eq!(ids.encode_str(id).unwrap(), text, "{v}");
            assert_eq!(ids.decode_str(text).unwrap(), id, "{v}");
            max_walks = max_walks.max(v["walks"].as_u64().unwrap());
            if id == 1 || id == LIMIT - 1 {
                ends.insert(id);
            }
        }
    }
    assert!(max_walks >= 7, "the vectors include long walks");
    assert_eq!(ends.len(), 2, "the vectors include both ends");
}

#[test]
fn text_and_invalid_vectors() {
    let doc = vectors();
    let ids = keyed(&doc["namespaces"][0]);
    for v in doc["text"].as_array().unwrap() {
        // decode_str(text) = decode(public): the text is the value's.
        let text = v["text"].as_str().unwrap();
        let public = dec(&v["public"]);
        assert_eq!(ids.decode_str(text).unwrap(), ids.decode(public).unwrap());
        assert_eq!(ids.encode_str(ids.decode(public).unwrap()).unwrap(), text);
    }
    for v in doc["text_valid"].as_array().unwrap() {
        let public = dec(&v["public"]);
        assert_eq!(
            ids.decode_str(v["text"].as_str().unwrap()).unwrap(),
            ids.decode(public).unwrap(),
            "{v}"
        );
    }
    for t in doc["text_invalid"].as_array().unwrap() {
        let e = ids.decode_str(t.as_str().unwrap()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{t}");
    }
    for v in doc["id_invalid"].as_array().unwrap() {
        let n = dec(v);
        assert_eq!(
            ids.encode(n).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            ids.decode(n).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert!(ids.encode_str(n).is_err());
    }
    for v in doc["key_valid"].as_array().unwrap() {
        let a = PublicIds::from_hex(v["hex"].as_str().unwrap()).unwrap();
        let b = PublicIds::from_hex(v["same_as"].as_str().unwrap()).unwrap();
        assert_eq!(a.encode(12345).unwrap(), b.encode(12345).unwrap());
    }
    for k in doc["key_invalid_hex"].as_array().unwrap() {
        let e = PublicIds::from_hex(k.as_str().unwrap()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{k}");
    }
    for n in doc["key_invalid_lengths"].as_array().unwrap() {
        let len = n.as_u64().unwrap() as usize;
        let e = PublicIds::new(&vec![1u8; len]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }
}

/// Distinct IDs give distinct public IDs, on a million consecutive IDs from
/// each end and around 2^62, and every one decodes back.
#[test]
fn a_million_ids_map_one_to_one() {
    let ids = PublicIds::new(&[0x5a; 16]).unwrap();
    let mut seen = HashSet::with_capacity(1_050_000);
    let ranges = [
        1..350_001,
        (1 << 62) - 175_000..(1 << 62) + 175_000,
        LIMIT - 350_000..LIMIT,
    ];
    for range in ranges {
        for id in range {
            let p = ids.encode(id).unwrap();
            assert!((1..LIMIT).contains(&p));
            assert!(seen.insert(p), "{id} maps to {p}, already taken");
            assert_eq!(ids.decode(p).unwrap(), id);
        }
    }
    assert_eq!(seen.len(), 1_050_000);
}

fn any_id() -> impl Strategy<Value = u64> {
    prop_oneof![1..LIMIT, 1u64..1000, LIMIT - 1000..LIMIT]
}

proptest! {
    #[test]
    fn round_trips_and_stays_in_range(key in any::<[u8; 16]>(), id in any_id()) {
        let ids = PublicIds::new(&key).unwrap();
        let p = ids.encode(id).unwrap();
        prop_assert!((1..LIMIT).contains(&p));
        prop_assert_eq!(ids.decode(p).unwrap(), id);
        // decode is onto: every in-range value is some ID's public value.
        let back = ids.decode(id).unwrap();
        prop_assert!((1..LIMIT).contains(&back));
        prop_assert_eq!(ids.encode(back).unwrap(), id);
        let text = ids.encode_str(id).unwrap();
        prop_assert_eq!(text.len(), PUBLIC_ID_TEXT_LEN);
        prop_assert!(text.bytes().all(|c| PUBLIC_ID_ALPHABET.as_bytes().contains(&c)));
        prop_assert_eq!(ids.decode_str(&text).unwrap(), id);
        prop_assert_eq!(ids.decode_str(&text.to_uppercase()).unwrap(), id);
    }

    #[test]
    fn another_key_is_another_mapping(a in any::<[u8; 16]>(), b in any::<[u8; 16]>(), start in 1..LIMIT - 64) {
        prop_assume!(a != b);
        let (x, y) = (PublicIds::new(&a).unwrap(), PublicIds::new(&b).unwrap());
        // Two independent permutations agree on a given point with
        // probability about 2^-63: out of 64 IDs, none should.
        let same = (start..start + 64).filter(|&id| x.encode(id).unwrap() == y.encode(id).unwrap()).count();
        prop_assert_eq!(same, 0);
    }

    #[test]
    fn any_text_decodes_or_is_refused(text in "\\PC{0,16}|[0-9a-zA-Z]{13}") {
        let ids = PublicIds::new(&[9; 16]).unwrap();
        match ids.decode_str(&text) {
            Ok(id) => {
                prop_assert!((1..LIMIT).contains(&id));
                prop_assert_eq!(ids.encode_str(id).unwrap(), text.to_lowercase());
            }
            Err(e) => prop_assert_eq!(e.kind(), ErrorKind::InvalidArgument),
        }
    }
}

/// The long form (scripts/public-ids-long.sh): `GRANTID_PUBLIC_LONG_N`
/// (default 10^8) round trips through `encode`/`decode` and
/// `encode_str`/`decode_str`, on every core: a quarter consecutive IDs from
/// 1, a quarter down from 2^63 - 1, half spread by SplitMix64. A round trip
/// also proves the sample's outputs distinct: encode(x) = encode(y) would
/// give x = decode(encode(x)) = decode(encode(y)) = y.
#[test]
#[ignore = "long: run by scripts/public-ids-long.sh"]
fn long_round_trips() {
    let n: u64 = std::env::var("GRANTID_PUBLIC_LONG_N")
        .map(|v| v.parse().expect("GRANTID_PUBLIC_LONG_N is a count"))
        .unwrap_or(100_000_000);
    let threads = std::thread::available_parallelism().map_or(2, |p| p.get()) as u64;
    let key = PublicIds::generate_key().unwrap();
    let ids = PublicIds::new(&key).unwrap();
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let ids = &ids;
            s.spawn(move || {
                for i in (t..n).step_by(threads as usize) {
                    let id = match i % 4 {
                        0 => 1 + i / 4,
                        1 => LIMIT - 1 - i / 4,
                        _ => {
                            let mut z = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                            ((z ^ (z >> 31)) >> 1).max(1)
                        }
                    };
                    let p = ids.encode(id).unwrap();
                    assert!((1..LIMIT).contains(&p), "{id} -> {p}");
                    assert_eq!(ids.decode(p).unwrap(), id, "{id} -> {p}");
                    let text = ids.encode_str(id).unwrap();
                    assert_eq!(ids.decode_str(&text).unwrap(), id, "{id} -> {text}");
                }
            });
        }
    });
    println!(
        "{n} round trips (numeric and text) on {threads} threads in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
