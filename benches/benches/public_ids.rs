//! Public IDs (docs/PUBLIC_IDS.md) beside what users reach for instead, in
//! one run on one machine:
//!
//! ```text
//! cargo bench -p grantid-benches --bench public_ids
//! ```
//!
//! Each bench maps one ID per iteration, cycling through 4,096 IDs spread
//! over the default layout's range (so the walk lengths vary as in use):
//!
//! * `public/encode`, `public/decode`: `PublicIds` on u64 values (Speck64/128
//!   plus the cycle walk onto [1, 2^63); about two cipher calls per ID).
//! * `public/encode_str`, `public/decode_str`: the same plus the 13-digit
//!   Crockford base32 text.
//! * `public/speck_block`: one raw Speck64/128 block, the floor.
//! * `sqids/encode`, `sqids/decode`: `sqids` 0.4 with its default alphabet
//!   and blocklist (an encoding, not encryption).
//! * `hashids/encode`, `hashids/decode`: `harsh` 0.2 (hashids) with a salt
//!   (not encryption either).
//! * `ff1/encode`, `ff1/decode`: `fpe` 0.7 FF1 over AES-128, radix 2 on 64
//!   bits, cycle-walked onto [1, 2^63) like `PublicIds`: the NIST
//!   format-preserving alternative.
//!
//! Target (issue 15): at most 100 ns per `public/encode` and `public/decode`.
//!
//! After criterion, a fixed run times 31 rounds of 100 passes over the same
//! 4,096 IDs for `encode` and for `decode` and prints the fastest and the
//! median round, in ns per call: on a shared machine the fastest round is the
//! closest to the cost on a core of one's own.

use std::hint::black_box;

use aes::Aes128;
use criterion::Criterion;
use fpe::ff1::{BinaryNumeralString, FF1};
use grantid::PublicIds;

const KEY: [u8; 16] = *b"public-ids-bench";
const N: usize = 4_096;

/// IDs like a generator's: spread over [2^40, 2^63).
fn ids() -> Vec<u64> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..N)
        .map(|_| {
            // SplitMix64.
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) >> 1).max(1 << 40)
        })
        .collect()
}

/// Runs `f` on the inputs in turn, one per iteration.
fn cycle<T, R>(c: &mut Criterion, name: &str, inputs: &[T], f: impl Fn(&T) -> R) {
    c.bench_function(name, |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % inputs.len();
            black_box(f(black_box(&inputs[i])))
        })
    });
}

struct Ff1 {
    ff1: FF1<Aes128>,
}

impl Ff1 {
    fn walk(&self, mut v: u64, encrypt: bool) -> u64 {
        loop {
            let ns = BinaryNumeralString::from_bytes_le(&v.to_le_bytes());
            let out = if encrypt {
                self.ff1.encrypt(&[], &ns)
            } else {
                self.ff1.decrypt(&[], &ns)
            }
            .expect("FF1 on 64 bits");
            v = u64::from_le_bytes(out.to_bytes_le().try_into().expect("8 bytes"));
            if v != 0 && v < 1 << 63 {
                return v;
            }
        }
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let ids = ids();

    let public = PublicIds::new(&KEY).unwrap();
    let encoded: Vec<u64> = ids.iter().map(|&id| public.encode(id).unwrap()).collect();
    let texts: Vec<String> = ids
        .iter()
        .map(|&id| public.encode_str(id).unwrap())
        .collect();
    cycle(&mut c, "public/encode", &ids, |&id| {
        public.encode(id).unwrap()
    });
    cycle(&mut c, "public/decode", &encoded, |&p| {
        public.decode(p).unwrap()
    });
    cycle(&mut c, "public/encode_str", &ids, |&id| {
        public.encode_str(id).unwrap()
    });
    cycle(&mut c, "public/decode_str", &texts, |t| {
        public.decode_str(t).unwrap()
    });
    cycle(&mut c, "public/speck_block", &ids, |&id| {
        public.cipher_encrypt(id)
    });

    let sqids = sqids::Sqids::default();
    let sq: Vec<String> = ids.iter().map(|&id| sqids.encode(&[id]).unwrap()).collect();
    cycle(&mut c, "sqids/encode", &ids, |&id| {
        sqids.encode(&[id]).unwrap()
    });
    cycle(&mut c, "sqids/decode", &sq, |t| sqids.decode(t));

    let harsh = harsh::Harsh::builder()
        .salt("public-ids-bench")
        .build()
        .unwrap();
    let hs: Vec<String> = ids.iter().map(|&id| harsh.encode(&[id])).collect();
    cycle(&mut c, "hashids/encode", &ids, |&id| harsh.encode(&[id]));
    cycle(&mut c, "hashids/decode", &hs, |t| harsh.decode(t).unwrap());

    let ff1 = Ff1 {
        ff1: FF1::<Aes128>::new(&KEY, 2).unwrap(),
    };
    let fe: Vec<u64> = ids.iter().map(|&id| ff1.walk(id, true)).collect();
    assert!(
        ids.iter()
            .zip(&fe)
            .all(|(&id, &e)| ff1.walk(e, false) == id)
    );
    cycle(&mut c, "ff1/encode", &ids, |&id| ff1.walk(id, true));
    cycle(&mut c, "ff1/decode", &fe, |&e| ff1.walk(e, false));

    c.final_summary();

    type Map<'a> = &'a dyn Fn(u64) -> Result<u64, grantid::Error>;
    let (enc, dec): (Map, Map) = (&|v| public.encode(v), &|v| public.decode(v));
    for (name, inputs, f) in [("encode", &ids, enc), ("decode", &encoded, dec)] {
        let (best, median) = rounds(inputs, |v| f(v).unwrap());
        println!(
            "public {name}, fixed run: fastest round {best:.1} ns, median round {median:.1} ns per call"
        );
    }
}

/// 31 rounds of 100 passes over `inputs`: the fastest and the median round
/// in ns per call.
fn rounds(inputs: &[u64], f: impl Fn(u64) -> u64) -> (f64, f64) {
    let mut per_call: Vec<f64> = (0..31)
        .map(|_| {
            let started = std::time::Instant::now();
            for _ in 0..100 {
                for &v in inputs {
                    black_box(f(black_box(v)));
                }
            }
            started.elapsed().as_nanos() as f64 / (100 * inputs.len()) as f64
        })
        .collect();
    per_call.sort_by(f64::total_cmp);
    (per_call[0], per_call[per_call.len() / 2])
}
