"""grantid.Layout, grantid.decode and ID arguments."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

import grantid


def test_default_layout() -> None:
    layout = grantid.Layout()
    assert (layout.timestamp_bits, layout.worker_bits, layout.sequence_bits) == (41, 10, 12)
    assert layout.epoch_ms == 1767225600000 == grantid.DEFAULT_EPOCH_MS
    assert layout.tick_ms == 1
    assert (layout.worker_count, layout.sequence_count) == (1024, 4096)
    assert layout.encode(2**41 - 1, 1023, 4095) == 2**63 - 1


def test_worked_vectors() -> None:
    layout = grantid.Layout(12, 3, 4)
    assert [layout.encode(160, 1, 1), layout.encode(160, 1, 2), layout.encode(161, 1, 0)] == [20497, 20498, 20624]
    d = layout.decode(20497)
    assert (d.timestamp, d.worker, d.sequence, d.unix_ms) == (160, 1, 1, grantid.DEFAULT_EPOCH_MS + 160)
    assert d.to_dict() == {"timestamp": 160, "unix_ms": grantid.DEFAULT_EPOCH_MS + 160, "worker": 1, "sequence": 1,
                           "datacenter": 0, "datacenter_worker": 1}


def test_datacenter_split() -> None:
    layout = grantid.Layout(41, 10, 12, datacenter_bits=5)
    assert layout.datacenter_bits == 5
    assert layout != grantid.Layout(41, 10, 12)
    d = layout.decode(layout.encode(1000, 17 * 32 + 3, 9))
    assert (d.worker, d.datacenter, d.datacenter_worker) == (547, 17, 3)
    assert "datacenter_bits=5" in repr(layout)
    assert pickle.loads(pickle.dumps(layout)) == layout
    with pytest.raises(grantid.InvalidArgument, match="datacenter_bits is 11"):
        grantid.Layout(41, 10, 12, datacenter_bits=11)


def test_generator_datacenter(tmp_path: Any) -> None:
    layout = grantid.Layout(41, 10, 12, datacenter_bits=5)
    url = f"file:{tmp_path}/a.json?datacenter=2"
    with grantid.Generator(url, namespace="py-regions", layout=layout, datacenter=2) as g:
        assert g.datacenter == 2
        assert {g.decode(i).datacenter for i in g.next_ids(100)} == {2}
    with pytest.raises(grantid.InvalidArgument, match="authority grants the workers of datacenter 2"):
        grantid.Generator(url, namespace="py-regions", layout=layout, datacenter=1)


def test_layout_is_frozen_hashable_and_picklable() -> None:
    layout = grantid.Layout(30, 8, 9, epoch_ms=0, tick_ms=1000)
    with pytest.raises(AttributeError):
        layout.tick_ms = 5  # type: ignore[misc]
    assert layout == grantid.Layout(30, 8, 9, 0, 1000)
    assert layout != grantid.Layout()
    assert len({layout, grantid.Layout(30, 8, 9, 0, 1000)}) == 1
    assert pickle.loads(pickle.dumps(layout)) == layout
    assert "tick_ms=1000" in repr(layout)


def test_encode_refuses_overflow_and_zero() -> None:
    layout = grantid.Layout(12, 3, 4)
    for args, field in [((4096, 0, 0), "timestamp"), ((1, 8, 0), "worker"), ((1, 0, 16), "sequence"), ((-1, 0, 0), "timestamp")]:
        with pytest.raises(grantid.InvalidArgument, match=field):
            layout.encode(*args)
    with pytest.raises(grantid.InvalidArgument, match="reserved"):
        layout.encode(0, 0, 0)


def test_bad_layout_fields_are_named() -> None:
    for kwargs, field in [
        ({"timestamp_bits": 0}, "timestamp_bits"),
        ({"sequence_bits": 0}, "sequence_bits"),
        ({"worker_bits": -1}, "worker_bits"),
        ({"worker_bits": 11}, "63"),
        ({"tick_ms": 0}, "tick_ms"),
        ({"epoch_ms": -5}, "epoch_ms"),
    ]:
        with pytest.raises(grantid.InvalidArgument, match=field):
            grantid.Layout(**kwargs)
        with pytest.raises(ValueError):
            grantid.Layout(**kwargs)


def test_decode_takes_int_or_str_only() -> None:
    assert grantid.decode("0x5011", grantid.Layout(12, 3, 4)).timestamp == 160
    assert grantid.decode(1).sequence == 1
    for junk in [0, -1, 2**63, 2**64, "", "1.0", " 1"]:
        with pytest.raises(grantid.InvalidArgument):
            grantid.decode(junk)
    for wrong_type in [1.0, None, b"1", True]:
        with pytest.raises(grantid.InvalidArgument, match="int or a str"):
            grantid.decode(wrong_type)  # type: ignore[arg-type]
