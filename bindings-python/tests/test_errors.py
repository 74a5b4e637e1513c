"""Every error kind is reachable from Python, with the right class and code."""

from __future__ import annotations

from typing import Any, Dict

import pytest

import grantid

E = grantid.DEFAULT_EPOCH_MS
T0 = 1_000_000  # ticks after the epoch where the manual clocks start
QUICK = {"max_wait": 0.01, "startup_timeout": 0.5, "backoff_min": 0.005, "backoff_max": 0.02}

CODES = {
    "NotYetValid": "NOT_YET_VALID",
    "GrantExhausted": "GRANT_EXHAUSTED",
    "Unavailable": "UNAVAILABLE",
    "CapacityExhausted": "CAPACITY_EXHAUSTED",
    "ClockRollback": "CLOCK_ROLLBACK",
    "LeaseLost": "LEASE_LOST",
    "InvalidArgument": "INVALID_ARGUMENT",
    "Closed": "CLOSED",
}


def test_classes_and_codes() -> None:
    assert dict(grantid._grantid.ERROR_CODES) == CODES
    for name, code in CODES.items():
        cls = getattr(grantid, name)
        assert issubclass(cls, grantid.GrantIdError) and cls.__module__ == "grantid"
        assert cls.code == code
    assert issubclass(grantid.InvalidArgument, ValueError)
    assert not issubclass(grantid.Unavailable, ValueError)
    assert issubclass(grantid.GrantIdError, Exception)


def test_docstrings_are_the_core_descriptions() -> None:
    # Each class's docstring is the core's ErrorKind::description(), the
    # sentence of the Rust docs and of the C header (grantid.h).
    for name in CODES:
        doc = getattr(grantid, name).__doc__
        assert doc and doc[0].isupper() and doc.endswith("."), name
    assert grantid.GrantExhausted.__doc__ == (
        "The timestamp field is used up: move to a new namespace."
    )
    assert grantid.Closed.__doc__ == "The generator was closed (or forked and not re-activated)."


def interval(start: int, end: int):  # type: ignore[no-untyped-def]
    def source(request: grantid.GrantRequest) -> Dict[str, Any]:
        if request.worker is not None:
            raise RuntimeError("no renewal in this test")
        return request.grant(worker=1, start=start, end=end).to_dict()

    return source


def expect(error: type, call: Any) -> grantid.GrantIdError:
    with pytest.raises(error) as info:
        call()
    assert info.value.code == CODES[error.__name__]
    return info.value


def test_not_yet_valid() -> None:
    clock = grantid.ManualClock(E + T0)
    with grantid.Generator(interval(T0 + 10_000, T0 + 20_000), namespace="nyv", clock=clock, **QUICK) as g:
        expect(grantid.NotYetValid, g.next_id)
        clock.set(E + T0 + 10_000)
        assert g.decode(g.next_id()).timestamp == T0 + 10_000


def test_grant_exhausted_at_the_end_of_the_timestamp_field() -> None:
    layout = grantid.Layout(timestamp_bits=21, worker_bits=3, sequence_bits=4)
    limit = layout.timestamp_limit
    clock = grantid.ManualClock(E + limit - 50)
    with grantid.Generator(interval(limit - 50, limit), namespace="ge", layout=layout, clock=clock, **QUICK) as g:
        g.next_id()
        clock.set(E + limit + 5)
        err = expect(grantid.GrantExhausted, g.next_id)
        assert "new namespace" in str(err)


def test_unavailable() -> None:
    def source(request: grantid.GrantRequest) -> Dict[str, Any]:
        raise TimeoutError("authority timed out")

    expect(grantid.Unavailable, lambda: grantid.Generator(source, namespace="un", **QUICK))


def test_capacity_exhausted() -> None:
    clock = grantid.ManualClock(E + T0)
    layout = grantid.Layout(timestamp_bits=41, worker_bits=10, sequence_bits=1)
    with grantid.Generator(
        interval(T0, T0 + 1000), namespace="cap", layout=layout, clock=clock, max_drift_ms=0, shards=1, **QUICK
    ) as g:
        g.next_id()
        g.next_id()
        expect(grantid.CapacityExhausted, g.next_id)
        clock.advance(1)
        g.next_id()


def test_clock_rollback() -> None:
    clock = grantid.ManualClock(E + T0)
    with grantid.Generator(interval(T0 - 5000, T0 + 5000), namespace="rb", clock=clock, max_drift_ms=10, **QUICK) as g:
        g.next_id()
        clock.set(E + T0 - 1000)
        expect(grantid.ClockRollback, g.next_id)
        assert g.stats()["clock_rollbacks"] >= 1
        clock.set(E + T0 - 5)
        g.next_id()  # within max_drift: issues from the cursor


def test_lease_lost() -> None:
    def source(request: grantid.GrantRequest) -> Dict[str, Any]:
        raise grantid.LeaseLost("taken")

    expect(grantid.LeaseLost, lambda: grantid.Generator(source, namespace="ll", **QUICK))


def test_invalid_argument() -> None:
    err = expect(grantid.InvalidArgument, lambda: grantid.decode(0))
    assert isinstance(err, ValueError)
    expect(grantid.InvalidArgument, lambda: grantid.Layout(timestamp_bits=0))


def test_closed() -> None:
    g = grantid.Generator(grantid.MemoryAuthority(), namespace="cl")
    g.close()
    expect(grantid.Closed, g.next_id)
    expect(grantid.Closed, lambda: g.next_ids(3))
