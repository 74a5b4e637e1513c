"""grantid.PublicIds: the shared vectors (conformance/public_ids.json), key
handling, refusals, and a few properties on random samples."""

from __future__ import annotations

import json
import pickle
import random
import threading
from pathlib import Path
from typing import Any, Dict, List

import pytest

import grantid

REPO = Path(__file__).resolve().parents[2]
LIMIT = 1 << 63
PAPER_KEY = "1b1a1918131211100b0a090803020100"


@pytest.fixture(scope="module")
def pv() -> Dict[str, Any]:
    with open(REPO / "conformance" / "public_ids.json") as f:
        data: Dict[str, Any] = json.load(f)
    return data


def test_raw_cipher_vectors(pv: Dict[str, Any]) -> None:
    assert pv["cipher"][0]["key"] == PAPER_KEY
    for v in pv["cipher"]:
        for ids in (grantid.PublicIds(v["key"]), grantid.PublicIds(bytes.fromhex(v["key"]))):
            assert ids.cipher_encrypt(int(v["plaintext"], 16)) == int(v["ciphertext"], 16)
            assert ids.cipher_decrypt(int(v["ciphertext"], 16)) == int(v["plaintext"], 16)


def test_permutation_vectors(pv: Dict[str, Any]) -> None:
    walks: List[int] = []
    seen = set()
    for ns in pv["namespaces"]:
        ids = grantid.PublicIds(ns["key"])
        for v in ns["vectors"]:
            i, p = int(v["id"]), int(v["public"])
            assert ids.encode(i) == p
            assert ids.encode(v["id"]) == p
            assert ids.decode(p) == i
            assert ids.encode_str(i) == v["text"]
            assert ids.decode_str(v["text"]) == i
            assert ids.decode_str(v["text"].upper()) == i
            walks.append(v["walks"])
            seen.add(i)
    assert max(walks) >= 7
    assert {1, LIMIT - 1} <= seen


def test_text_and_invalid_vectors(pv: Dict[str, Any]) -> None:
    ids = grantid.PublicIds(pv["namespaces"][0]["key"])
    for v in pv["text"] + pv["text_valid"]:
        assert ids.decode_str(v["text"]) == ids.decode(int(v["public"]))
    for text in pv["text_invalid"]:
        with pytest.raises(grantid.InvalidArgument):
            ids.decode_str(text)
    for bad in pv["id_invalid"]:
        for call in (ids.encode, ids.decode, ids.encode_str):
            with pytest.raises(grantid.InvalidArgument) as info:
                call(int(bad))
            assert info.value.code == "INVALID_ARGUMENT"
    for k in pv["key_valid"]:
        assert grantid.PublicIds(k["hex"]).encode(77) == grantid.PublicIds(k["same_as"]).encode(77)
    for k in pv["key_invalid_hex"]:
        with pytest.raises(grantid.InvalidArgument) as info:
            grantid.PublicIds(k)
        if len(k) >= 12:
            assert k[:12] not in str(info.value)
    for n in pv["key_invalid_lengths"]:
        with pytest.raises(ValueError):
            grantid.PublicIds(bytes(n))
        with pytest.raises(ValueError):
            grantid.PublicIds(bytearray(n))


def test_keys_of_other_types_and_values_of_other_types_are_refused() -> None:
    for key in (None, 5, [0] * 16, PAPER_KEY.encode()):  # 32 bytes of hex text are not 16 bytes
        with pytest.raises(grantid.InvalidArgument):
            grantid.PublicIds(key)  # type: ignore[arg-type]
    ids = grantid.PublicIds(PAPER_KEY)
    for bad in (True, 1.0, -1, 1 << 64, "abc", None):
        with pytest.raises(grantid.InvalidArgument):
            ids.encode(bad)  # type: ignore[arg-type]


def test_repr_and_pickle_never_show_the_key() -> None:
    key = bytes(range(16))
    ids = grantid.PublicIds(key)
    shown = repr(ids) + str(ids)
    assert "redacted" in shown and key.hex()[:8] not in shown
    with pytest.raises(TypeError):
        pickle.dumps(ids)


def test_properties_on_random_samples() -> None:
    rng = random.Random(15)
    key_a, key_b = grantid.PublicIds.generate_key(), grantid.PublicIds.generate_key()
    assert len(key_a) == 16 and key_a != key_b
    a, b = grantid.PublicIds(key_a), grantid.PublicIds(key_b)
    samples = [rng.randrange(1, LIMIT) for _ in range(20_000)] + list(range(1, 2_001)) + list(range(LIMIT - 2_000, LIMIT))
    outputs = set()
    for i in samples:
        p = a.encode(i)
        assert 1 <= p < LIMIT
        assert a.decode(p) == i
        outputs.add(p)
        text = a.encode_str(i)
        assert len(text) == 13 and a.decode_str(text) == i
    assert len(outputs) == len(set(samples))
    # Another key, another mapping.
    assert sum(a.encode(i) == b.encode(i) for i in samples[:2_000]) == 0


def test_one_object_from_many_threads() -> None:
    ids = grantid.PublicIds(PAPER_KEY)
    errors: List[int] = []

    def work(base: int) -> None:
        for i in range(base, base + 5_000):
            if ids.decode_str(ids.encode_str(i)) != i:
                errors.append(i)

    threads = [threading.Thread(target=work, args=(1 + t * 5_000,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
