"""The shared conformance vectors (conformance/vectors.json)."""

from __future__ import annotations

from typing import Any, Dict

import pytest

import grantid


def layout_of(spec: Dict[str, Any]) -> grantid.Layout:
    return grantid.Layout(
        timestamp_bits=spec["timestamp_bits"],
        worker_bits=spec["worker_bits"],
        sequence_bits=spec["sequence_bits"],
        epoch_ms=spec["epoch_ms"],
        tick_ms=spec["tick_ms"],
        datacenter_bits=spec["datacenter_bits"],
    )


def test_vectors_are_there(vectors: Dict[str, Any]) -> None:
    assert vectors["layouts"], "no layouts in the vectors"
    assert all(spec["encode"] for spec in vectors["layouts"])


def test_encode_and_decode(vectors: Dict[str, Any]) -> None:
    checked = 0
    for spec in vectors["layouts"]:
        layout = layout_of(spec)
        for v in spec["encode"]:
            want = int(v["id"])
            assert layout.encode(v["timestamp"], v["worker"], v["sequence"]) == want, (spec["name"], v)
            for form in (want, v["id"]):
                d = layout.decode(form)
                assert (d.timestamp, d.worker, d.sequence) == (v["timestamp"], v["worker"], v["sequence"])
                assert (d.datacenter, d.datacenter_worker) == (v["datacenter"], v["datacenter_worker"])
                if "unix_ms" in v:
                    assert d.unix_ms == v["unix_ms"]
            assert grantid.decode(v["id"], layout) == layout.decode(want)
            checked += 1
    assert checked > 0
    assert any(spec["datacenter_bits"] == 5 and spec["worker_bits"] == 10 for spec in vectors["layouts"])


def test_decode_invalid(vectors: Dict[str, Any]) -> None:
    for spec in vectors["layouts"]:
        layout = layout_of(spec)
        for v in spec.get("decode_invalid", []):
            error = getattr(grantid, v["kind"])
            for form in (int(v["id"]), v["id"]):
                with pytest.raises(error):
                    layout.decode(form)


def test_invalid_layouts(vectors: Dict[str, Any]) -> None:
    assert vectors["invalid_layouts"]
    for spec in vectors["invalid_layouts"]:
        with pytest.raises(getattr(grantid, spec["kind"])) as info:
            layout_of(spec)
        if "field" in spec:
            assert spec["field"] in str(info.value), (spec, str(info.value))


def test_parse(vectors: Dict[str, Any]) -> None:
    for v in vectors.get("parse_valid", []):
        assert grantid.parse_id(v["text"]) == int(v["id"])
    assert vectors["parse_invalid"]
    for text in vectors["parse_invalid"]:
        with pytest.raises(grantid.InvalidArgument):
            grantid.parse_id(text)
        with pytest.raises(grantid.InvalidArgument):
            grantid.decode(text)
