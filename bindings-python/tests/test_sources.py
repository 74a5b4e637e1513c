"""Python callables as grant sources: good, raising, junk, lost."""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, List

import pytest

import grantid

FAST = {"startup_timeout": 0.5, "backoff_min": 0.005, "backoff_max": 0.02}


def good(request: grantid.GrantRequest, worker: int = 3) -> Dict[str, Any]:
    start = max(request.now, request.not_before)
    return {
        "namespace": request.namespace,
        "worker": request.worker if request.worker is not None else worker,
        "incarnation": request.incarnation,
        "grant_id": request.request_id,
        "start": start,
        "end": start + request.duration,
    }


def test_callable_gets_requests_and_dict_grants_work() -> None:
    requests: List[grantid.GrantRequest] = []

    def source(request: grantid.GrantRequest) -> Dict[str, Any]:
        requests.append(request)
        return good(request)

    with grantid.Generator(source, namespace="calls", grant_duration_ms=200, horizon_ms=400) as g:
        d = g.decode(g.next_id())
        assert d.worker == 3
        first = requests[0]
        assert first.worker is None and first.namespace == "calls"
        assert isinstance(first.incarnation, int) and first.incarnation == g.stats()["incarnation"]
        assert first.layout == grantid.Layout() and first.duration == 200
        with pytest.raises(AttributeError):
            first.worker = 1  # type: ignore[misc]
        for _ in range(500):
            if len(requests) >= 2:
                break
            threading.Event().wait(0.01)
    assert any(r.worker == 3 for r in requests[1:]), "renewals name the worker"


def test_grant_objects_and_acquire_release_objects() -> None:
    released: List[grantid.Grant] = []

    class Source:
        def acquire(self, request: grantid.GrantRequest) -> grantid.Grant:
            start = max(request.now, request.not_before)
            return request.grant(worker=5, start=start, end=start + request.duration, grant_id=9)

        def release(self, grant: grantid.Grant) -> None:
            released.append(grant)

    with grantid.Generator(Source(), namespace="objects") as g:
        assert g.decode(g.next_id()).worker == 5
    assert released and released[-1].worker == 5 and released[-1].namespace == "objects"
    assert released[-1].to_dict()["grant_id"] == 9


def test_raising_source_is_unavailable_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    def source(request: grantid.GrantRequest) -> Dict[str, Any]:
        raise RuntimeError("database is down")

    with caplog.at_level(logging.DEBUG, logger="grantid"):
        with pytest.raises(grantid.Unavailable, match="database is down") as info:
            grantid.Generator(source, namespace="down", **FAST)
    assert info.value.code == "UNAVAILABLE"
    records = [r for r in caplog.records if r.name == "grantid"]
    warned = [r for r in records if r.levelno == logging.WARNING]
    assert warned and "RuntimeError: database is down" in warned[0].getMessage()
    assert warned[0].getMessage().startswith("event=grant_uncertain")
    traced = [r for r in records if r.getMessage().startswith("event=source_traceback")]
    assert traced and traced[0].levelno == logging.DEBUG and traced[0].exc_info is not None


def test_source_that_recovers_starts_the_generator(caplog: pytest.LogCaptureFixture) -> None:
    calls = {"n": 0}

    def source(request: grantid.GrantRequest) -> Dict[str, Any]:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise ConnectionError("try again")
        return good(request)

    with caplog.at_level(logging.WARNING, logger="grantid"):
        with grantid.Generator(source, namespace="flaky", **FAST) as g:
            assert g.next_id() > 0
            assert g.stats()["uncertain_retries"] == 2
    # Once per failure at warning and above (the traceback is at debug).
    assert sum("ConnectionError" in r.getMessage() for r in caplog.records) == 2


@pytest.mark.parametrize(
    "answer, needle",
    [
        (None, "NoneType"),
        ("grant", "str"),
        (42, "int"),
        ({}, "'namespace' is missing"),
        ({"namespace": "junk", "worker": 1}, "'incarnation' is missing"),
        ({"namespace": 5}, "'namespace' must be a str"),
        ("START", "'start' must be an int, got str"),
        ("WORKER", "'worker' must be an int, got bool"),
        ("END", "'end' is -1"),
    ],
)
def test_junk_answers_are_invalid_grants(answer: Any, needle: str, caplog: pytest.LogCaptureFixture) -> None:
    def source(request: grantid.GrantRequest) -> Any:
        if answer == "START":
            return {**good(request), "start": "5"}
        if answer == "WORKER":
            return {**good(request), "worker": True}
        if answer == "END":
            return {**good(request), "end": -1}
        return answer

    with caplog.at_level(logging.ERROR, logger="grantid"):
        with pytest.raises(grantid.Unavailable) as info:
            grantid.Generator(source, namespace="junk", **FAST)
    assert needle in str(info.value)
    assert any(needle in r.getMessage() for r in caplog.records)


def test_grant_failing_validation_is_refused_then_a_good_one_used() -> None:
    calls = {"n": 0}

    def source(request: grantid.GrantRequest) -> Dict[str, Any]:
        calls["n"] += 1
        grant = good(request)
        if calls["n"] == 1:
            grant["namespace"] = "someone-else"
        return grant

    with grantid.Generator(source, namespace="validated", **FAST) as g:
        g.next_id()
        assert g.stats()["invalid_grants"] == 1


def test_lease_lost_raised_by_the_source() -> None:
    def source(request: grantid.GrantRequest) -> Dict[str, Any]:
        raise grantid.LeaseLost("worker 3 belongs to another process")

    with pytest.raises(grantid.LeaseLost, match="another process") as info:
        grantid.Generator(source, namespace="lost", **FAST)
    assert info.value.code == "LEASE_LOST"


def test_lost_worker_calls_on_lease_lost_and_moves_to_a_new_worker() -> None:
    authority = grantid.MemoryAuthority()
    events: List[grantid.LeaseLostEvent] = []
    seen = threading.Event()

    def on_lost(event: grantid.LeaseLostEvent) -> None:
        events.append(event)
        seen.set()
        raise ValueError("a failing callback is logged, never fatal")

    with grantid.Generator(
        authority, namespace="steal", grant_duration_ms=20, horizon_ms=40, on_lease_lost=on_lost, **FAST
    ) as g:
        worker = g.stats()["worker"]
        assert worker is not None
        authority.steal("steal", worker, 12345, 2**40)
        assert seen.wait(5), "on_lease_lost was not called"
        assert events[0].worker == worker and "12345" in events[0].reason or events[0].reason
        new_id = None
        for _ in range(500):
            try:
                new_id = g.next_id()
                break
            except (grantid.LeaseLost, grantid.Unavailable):
                threading.Event().wait(0.01)
        assert new_id is not None
        assert g.decode(new_id).worker != worker
        assert g.stats()["lease_losses"] >= 1


def test_a_source_that_never_returns_is_bounded_by_source_timeout() -> None:
    release = threading.Event()
    calls: List[int] = []

    def stuck(request: grantid.GrantRequest) -> Dict[str, Any]:
        calls.append(request.request_id)
        release.wait(30)
        return good(request)

    outcome: Dict[str, Any] = {}

    def start() -> None:
        try:
            grantid.Generator(stuck, namespace="stuck", source_timeout=0.2, **FAST)
        except grantid.GrantIdError as e:
            outcome["error"] = e

    t = threading.Thread(target=start, daemon=True)
    t.start()
    t.join(5)
    try:
        assert not t.is_alive(), "start-up stayed blocked in the grant source"
        assert isinstance(outcome.get("error"), grantid.Unavailable), outcome
        assert "source_timeout" in str(outcome["error"])
        assert len(calls) == 1, "a new call was made while the first had not returned"
    finally:
        release.set()


def test_a_slow_answer_serves_the_retry_of_its_request() -> None:
    def slow(request: grantid.GrantRequest) -> Dict[str, Any]:
        if request.request_id == 1:
            threading.Event().wait(0.5)
        return good(request)

    with grantid.Generator(slow, namespace="slow", source_timeout=0.1, startup_timeout=5.0) as g:
        g.next_id()
        assert g.stats()["uncertain_retries"] >= 1


def test_a_release_that_blocks_is_bounded_by_source_timeout(caplog: pytest.LogCaptureFixture) -> None:
    unblock = threading.Event()
    released: List[grantid.Grant] = []

    class Source:
        def acquire(self, request: grantid.GrantRequest) -> Dict[str, Any]:
            return good(request)

        def release(self, grant: grantid.Grant) -> None:
            released.append(grant)
            unblock.wait(10)

    g = grantid.Generator(Source(), namespace="slow-release", source_timeout=0.2, **FAST)
    g.next_id()
    outcome: Dict[str, Any] = {}

    def close() -> None:
        g.close()
        outcome["closed"] = True

    t = threading.Thread(target=close, daemon=True)
    try:
        with caplog.at_level(logging.WARNING, logger="grantid"):
            t.start()
            t.join(5)
            assert not t.is_alive(), "close() stayed blocked in the grant source's release"
        assert outcome.get("closed") and released
        assert any("release_failed" in r.getMessage() and "source_timeout" in r.getMessage() for r in caplog.records)
    finally:
        unblock.set()
