#!/usr/bin/env python3
"""Writes conformance/vectors.json: the ID format's vectors, computed here
with plain integer arithmetic as an oracle independent of the Rust code;
and conformance/public_ids.json: the public-ID vectors (docs/PUBLIC_IDS.md),
from this file's own Speck64/128.

Run: python3 conformance/generate.py   (the output is committed; the Rust
conformance test checks the committed file against the core, and every
binding runs the same file)."""
import hashlib
import json
import os

DEFAULT_EPOCH = 1767225600000

LAYOUTS = [
    # name, ts, worker, seq, epoch, tick, datacenter bits (the top of the worker field)
    ("worked-12-3-4", 12, 3, 4, DEFAULT_EPOCH, 1, 0),
    ("default-41-10-12", 41, 10, 12, DEFAULT_EPOCH, 1, 0),
    ("seq-only-1-0-62", 1, 0, 62, DEFAULT_EPOCH, 1, 0),
    ("no-worker-41-0-22", 41, 0, 22, DEFAULT_EPOCH, 1, 0),
    ("coarse-30-8-9-tick-1000", 30, 8, 9, 1_600_000_000_000, 1000, 0),
    ("wide-worker-20-32-11", 20, 32, 11, 0, 7, 0),
    # The Snowflake service layout: 41 timestamp / 5 datacenter / 5 worker / 12 sequence.
    ("snowflake-41-5-5-12", 41, 10, 12, DEFAULT_EPOCH, 1, 5),
    ("all-datacenter-12-3-4", 12, 3, 4, DEFAULT_EPOCH, 1, 3),
    ("wide-datacenter-20-32-11", 20, 32, 11, 0, 7, 7),
]


def encode(ts, w, s, tb, wb, sb):
    return (ts << (wb + sb)) | (w << sb) | s


def vectors(tb, wb, sb, epoch, tick, db):
    tmax, wmax, smax = (1 << tb) - 1, (1 << wb) - 1, (1 << sb) - 1
    lb = wb - db  # the worker within a datacenter
    dmax, lmax = (1 << db) - 1, (1 << lb) - 1
    tuples = {
        (0, 0, 1),
        (1, 0, 0),
        (tmax, wmax, smax),
        (tmax, 0, 0),
        (0, wmax, 0),
        (0, 0, smax),
        (tmax // 3, wmax // 2, smax // 5),
        (min(160, tmax), min(1, wmax), min(1, smax)),
        (min(160, tmax), min(1, wmax), min(2, smax)),
        (min(161, tmax), min(1, wmax), 0),
    }
    if db:
        # Worker w of datacenter d is the worker value d * 2^lb + w.
        for d, w in [(dmax, 0), (0, lmax), (dmax, lmax), (min(17, dmax), min(3, lmax)),
                     (min(1, dmax), min(1, lmax)), (dmax // 2, lmax // 3)]:
            tuples.add((tmax // 7, d * (1 << lb) + w, smax // 3))
    tuples.discard((0, 0, 0))
    out = []
    for ts, w, s in sorted(tuples):
        out.append({
            "timestamp": ts,
            "worker": w,
            "sequence": s,
            "id": str(encode(ts, w, s, tb, wb, sb)),
            "unix_ms": epoch + ts * tick,
            "datacenter": w // (1 << lb),
            "datacenter_worker": w % (1 << lb),
        })
    return out


def main():
    layouts = []
    for name, tb, wb, sb, epoch, tick, db in LAYOUTS:
        total = tb + wb + sb
        enc_invalid = [
            {"timestamp": 1 << tb, "worker": 0, "sequence": 0, "kind": "InvalidArgument"},
            {"timestamp": 0, "worker": 0, "sequence": 1 << sb, "kind": "InvalidArgument"},
            {"timestamp": 0, "worker": 0, "sequence": 0, "kind": "InvalidArgument"},
        ]
        if wb < 32:
            enc_invalid.append({"timestamp": 0, "worker": 1 << wb, "sequence": 0, "kind": "InvalidArgument"})
        dec_invalid = [{"id": "0", "kind": "InvalidArgument"}]
        if total < 63:
            dec_invalid.append({"id": str(1 << total), "kind": "InvalidArgument"})
        layouts.append({
            "name": name,
            "timestamp_bits": tb,
            "worker_bits": wb,
            "sequence_bits": sb,
            "datacenter_bits": db,
            "epoch_ms": epoch,
            "tick_ms": tick,
            "encode": vectors(tb, wb, sb, epoch, tick, db),
            "encode_invalid": enc_invalid,
            "decode_invalid": dec_invalid,
        })
    # The worked example of docs/DESIGN.md, spelled out.
    worked = {(e["timestamp"], e["worker"], e["sequence"]): e["id"] for e in layouts[0]["encode"]}
    assert worked[(160, 1, 1)] == "20497"
    assert worked[(160, 1, 2)] == "20498"
    assert worked[(161, 1, 0)] == "20624"
    assert layouts[1]["encode"][-1]["id"] == str(2**63 - 1) or any(
        e["id"] == str(2**63 - 1) for e in layouts[1]["encode"])
    # The split does not change the encoding: the same tuple, the same ID.
    snowflake = {(e["timestamp"], e["worker"], e["sequence"]): e for e in layouts[6]["encode"]}
    for e in layouts[1]["encode"]:
        assert snowflake.get((e["timestamp"], e["worker"], e["sequence"]), e)["id"] == e["id"]
    assert any((e["datacenter"], e["datacenter_worker"]) == (17, 3) for e in snowflake.values())

    invalid_layouts = [
        {"timestamp_bits": 41, "worker_bits": 10, "sequence_bits": 12, "datacenter_bits": 11, "epoch_ms": DEFAULT_EPOCH, "tick_ms": 1, "kind": "InvalidArgument", "field": "datacenter_bits"},
        {"timestamp_bits": 12, "worker_bits": 0, "sequence_bits": 4, "datacenter_bits": 1, "epoch_ms": DEFAULT_EPOCH, "tick_ms": 1, "kind": "InvalidArgument", "field": "datacenter_bits"},
        {"timestamp_bits": 0, "worker_bits": 10, "sequence_bits": 12, "epoch_ms": DEFAULT_EPOCH, "tick_ms": 1, "kind": "InvalidArgument", "field": "timestamp_bits"},
        {"timestamp_bits": 41, "worker_bits": 10, "sequence_bits": 0, "epoch_ms": DEFAULT_EPOCH, "tick_ms": 1, "kind": "InvalidArgument", "field": "sequence_bits"},
        {"timestamp_bits": 41, "worker_bits": 11, "sequence_bits": 12, "epoch_ms": DEFAULT_EPOCH, "tick_ms": 1, "kind": "InvalidArgument", "field": "63"},
        {"timestamp_bits": 62, "worker_bits": 1, "sequence_bits": 1, "epoch_ms": DEFAULT_EPOCH, "tick_ms": 1, "kind": "InvalidArgument", "field": "63"},
        {"timestamp_bits": 41, "worker_bits": 10, "sequence_bits": 12, "epoch_ms": DEFAULT_EPOCH, "tick_ms": 0, "kind": "InvalidArgument", "field": "tick_ms"},
        {"timestamp_bits": 62, "worker_bits": 0, "sequence_bits": 1, "epoch_ms": DEFAULT_EPOCH, "tick_ms": 4, "kind": "InvalidArgument", "field": "overflows"},
    ]
    for v in invalid_layouts:
        v.setdefault("datacenter_bits", 0)
    parse_valid = [
        {"text": "20497", "id": "20497"},
        {"text": "0x5011", "id": "20497"},
        {"text": "0X5011", "id": "20497"},
        {"text": "9223372036854775807", "id": "9223372036854775807"},
        {"text": "0x7fffffffffffffff", "id": "9223372036854775807"},
    ]
    parse_invalid = ["", " ", "-1", "+1", " 1", "1 ", "1.0", "1e3", "0x", "0xg", "abc",
                     "9223372036854775808", "18446744073709551616", "99999999999999999999999"]
    doc = {
        "about": "grantid conformance vectors; ids are decimal strings (2^53 < 2^63). "
                 "Generated by conformance/generate.py.",
        "layouts": layouts,
        "invalid_layouts": invalid_layouts,
        "parse_valid": parse_valid,
        "parse_invalid": parse_invalid,
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vectors.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    write_public_ids()


# --- Public IDs (docs/PUBLIC_IDS.md): Speck64/128 by cycle walking --------
#
# Written from the cipher's paper (Beaulieu et al., "The SIMON and SPECK
# Families of Lightweight Block Ciphers", 2013): 32-bit words, 27 rounds,
# rotations alpha = 8 and beta = 3, key words (l2, l1, l0, k0) as the key's
# 32 hex digits read left to right. Shares no code with the Rust side.

MASK32 = (1 << 32) - 1
ID_LIMIT = 1 << 63
ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case
TEXT_LEN = 13  # 13 * 5 = 65 bits >= 63


def ror(v, r):
    return ((v >> r) | (v << (32 - r))) & MASK32


def rol(v, r):
    return ((v << r) | (v >> (32 - r))) & MASK32


def speck_round_keys(key_hex):
    words = [int(key_hex[i:i + 8], 16) for i in range(0, 32, 8)]  # l2, l1, l0, k0
    k = [words[3]]
    l = [words[2], words[1], words[0]]  # l0, l1, l2
    for i in range(26):
        l.append(((k[i] + ror(l[i], 8)) & MASK32) ^ i)
        k.append(rol(k[i], 3) ^ l[i + 3])
    return k


def speck_encrypt(keys, block):
    x, y = block >> 32, block & MASK32
    for k in keys:
        x = ((ror(x, 8) + y) & MASK32) ^ k
        y = rol(y, 3) ^ x
    return (x << 32) | y


def speck_decrypt(keys, block):
    x, y = block >> 32, block & MASK32
    for k in reversed(keys):
        y = ror(y ^ x, 3)
        x = rol(((x ^ k) - y) & MASK32, 8)
    return (x << 32) | y


def permute(keys, value, step):
    """Cycle walking: apply `step` until the value is in [1, 2^63); returns
    the value and how many times the cipher ran."""
    walks = 0
    while True:
        value = step(keys, value)
        walks += 1
        if 0 < value < ID_LIMIT:
            return value, walks


def to_text(value):
    return "".join(ALPHABET[(value >> (5 * (TEXT_LEN - 1 - i))) & 31] for i in range(TEXT_LEN))


def from_text(text):
    value = 0
    for c in text:
        value = (value << 5) | ALPHABET.index(c)
    return value


def parse_text(text):
    """The strict parser: 13 digits of the alphabet, either case, value in
    [1, 2^63); None for anything else."""
    if len(text) != TEXT_LEN or any(c.lower() not in ALPHABET for c in text):
        return None
    value = from_text(text.lower())
    return value if 0 < value < ID_LIMIT else None


def derived_hex(label, nbytes):
    return hashlib.sha256(label.encode()).hexdigest()[:2 * nbytes]


def write_public_ids():
    paper_key = "1b1a1918131211100b0a090803020100"
    keys = speck_round_keys(paper_key)
    assert speck_encrypt(keys, 0x3B7265747475432D) == 0x8C6FA548454E028B
    assert speck_decrypt(keys, 0x8C6FA548454E028B) == 0x3B7265747475432D

    cipher = [{"key": paper_key, "plaintext": "3b7265747475432d", "ciphertext": "8c6fa548454e028b",
               "note": "the paper's test vector"}]
    for n in range(6):
        key = derived_hex(f"cipher-key-{n}", 16)
        block = int(derived_hex(f"cipher-block-{n}", 8), 16)
        ct = speck_encrypt(speck_round_keys(key), block)
        assert speck_decrypt(speck_round_keys(key), ct) == block
        cipher.append({"key": key, "plaintext": f"{block:016x}", "ciphertext": f"{ct:016x}"})
    cipher.append({"key": "0" * 32, "plaintext": "0" * 16,
                   "ciphertext": f"{speck_encrypt(speck_round_keys('0' * 32), 0):016x}"})

    namespaces = []
    for name, key in [("paper-key", paper_key), ("derived-a", derived_hex("namespace-a", 16)),
                      ("derived-b", derived_hex("namespace-b", 16)), ("all-ones", "f" * 32)]:
        rk = speck_round_keys(key)
        ids = {1, 2, 3, ID_LIMIT - 1, ID_LIMIT - 2, 1 << 62, 20497, 0x3B7265747475432D}
        ids |= {int(derived_hex(f"{name}-id-{n}", 8), 16) % (ID_LIMIT - 1) + 1 for n in range(12)}
        # Values whose first encryptions land outside [1, 2^63): the first
        # small IDs needing 3, 4, 5, 6 and 7 encryptions.
        wanted = {3, 4, 5, 6, 7}
        candidate = 1
        while wanted and candidate < 100_000:
            _, walks = permute(rk, candidate, speck_encrypt)
            if walks in wanted:
                wanted.discard(walks)
                ids.add(candidate)
            candidate += 1
        assert not wanted, f"{name}: no ID needing {wanted} encryptions below {candidate}"
        vectors = []
        for i in sorted(ids):
            public, walks = permute(rk, i, speck_encrypt)
            back, back_walks = permute(rk, public, speck_decrypt)
            assert back == i and back_walks == walks
            vectors.append({"id": str(i), "public": str(public), "text": to_text(public), "walks": walks})
        assert max(v["walks"] for v in vectors) >= 7
        namespaces.append({"name": name, "key": key, "vectors": vectors})

    text = [{"public": str(v), "text": to_text(v)} for v in
            (1, 31, 32, ID_LIMIT - 1, 0x3B7265747475432D)]
    text_valid = [  # decoding is case-insensitive
        {"text": to_text(0x3B7265747475432D).upper(), "public": str(0x3B7265747475432D)},
        {"text": "7ZZZZZZZZZZZZ", "public": str(ID_LIMIT - 1)},
        {"text": "0000000000001", "public": "1"},
        {"text": "0ABCDEFGHJKMN", "public": str(from_text("0abcdefghjkmn"))},
        {"text": "7zZzZzZzZzZzZ", "public": str(ID_LIMIT - 1)},
    ]
    text_invalid = [
        "", "000000000001", "00000000000001", "0000000000000", "8000000000000", "zzzzzzzzzzzzz",
        "000000000000i", "000000000000l", "000000000000o", "000000000000u", "000000000000-",
        "000000000000 ", " 000000000001", "00000000000\u00e91", "00000000000_1", "+000000000001", "000000000000\u0000",
    ]
    for t in text_invalid:
        assert parse_text(t) is None, t
    for v in text_valid:
        assert parse_text(v["text"]) == int(v["public"]), v
    doc = {
        "about": "grantid public IDs (docs/PUBLIC_IDS.md): Speck64/128 and its cycle walk onto "
                 "[1, 2^63), computed by the independent Python code of conformance/generate.py. "
                 "Keys are 32 hex digits in the paper's order (l2, l1, l0, k0); blocks are 16 hex "
                 "digits, x = high 32 bits; ids and public values are decimal strings; walks = how "
                 "many times the cipher ran.",
        "alphabet": ALPHABET,
        "text_length": TEXT_LEN,
        "cipher": cipher,
        "namespaces": namespaces,
        "text": text,
        "text_valid": text_valid,
        "text_invalid": text_invalid,
        "id_invalid": ["0", str(ID_LIMIT), str((1 << 64) - 1)],
        "key_valid": [{"hex": paper_key.upper(), "same_as": paper_key}],
        "key_invalid_hex": ["", "1b1a1918131211100b0a09080302010", "1b1a1918131211100b0a0908030201000",
                            "1b1a1918131211100b0a09080302010g", "0x1b1a1918131211100b0a09080302010",
                            " 1b1a1918131211100b0a0908030201", "1b1a1918 131211100b0a0908030201"],
        "key_invalid_lengths": [0, 8, 15, 17, 32],
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "public_ids.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
