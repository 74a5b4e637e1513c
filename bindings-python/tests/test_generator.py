"""grantid.Generator with in-process authorities."""

from __future__ import annotations

import array
import json
import threading
from typing import List

import pytest

import grantid


@pytest.fixture
def gen() -> grantid.Generator:
    g = grantid.Generator(grantid.MemoryAuthority(), namespace="orders-v1")
    yield g
    g.close()


def test_ids_increase_and_decode(gen: grantid.Generator) -> None:
    ids = [gen.next_id() for _ in range(10_000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(0 < i < 2**63 for i in ids)
    stats = gen.stats()
    d = gen.decode(ids[-1])
    assert d.worker == stats["worker"]
    assert stats["ids_issued"] >= 10_000
    assert stats["grant_end"] is not None and d.timestamp < stats["grant_end"]
    assert gen.decode(str(ids[0])) == grantid.decode(ids[0])
    assert gen.layout == grantid.Layout() and gen.namespace == "orders-v1"


def test_next_ids(gen: grantid.Generator) -> None:
    first = gen.next_id()
    batch = gen.next_ids(5_000)
    assert len(batch) == 5_000 and batch == sorted(batch) and len(set(batch)) == 5_000
    assert batch[0] > first
    assert gen.next_ids(0) == []
    with pytest.raises(grantid.InvalidArgument, match="max_batch"):
        gen.next_ids(grantid.DEFAULT_MAX_BATCH + 1)
    with pytest.raises(grantid.InvalidArgument, match="negative"):
        gen.next_ids(-1)


def test_next_ids_array(gen: grantid.Generator) -> None:
    first = gen.next_id()
    batch = gen.next_ids_array(5_000)
    assert isinstance(batch, array.array) and batch.typecode == "Q"
    ids = batch.tolist()
    assert len(ids) == 5_000 and ids == sorted(ids) and len(set(ids)) == 5_000
    assert ids[0] > first and gen.next_id() > ids[-1]
    assert all(gen.decode(i).worker == gen.stats()["worker"] for i in ids[:10])
    assert memoryview(batch).format == "Q" and memoryview(batch).nbytes == 40_000
    assert len(gen.next_ids_array(0)) == 0
    with pytest.raises(grantid.InvalidArgument, match="max_batch"):
        gen.next_ids_array(grantid.DEFAULT_MAX_BATCH + 1)
    with pytest.raises(grantid.InvalidArgument, match="negative"):
        gen.next_ids_array(-1)
    gen.close()
    with pytest.raises(grantid.Closed):
        gen.next_ids_array(1)


def test_next_id_str_round_trips_through_json(gen: grantid.Generator) -> None:
    ids = [gen.next_id_str() for _ in range(100)]
    assert all(isinstance(i, str) and i.isdigit() for i in ids)
    text = json.dumps({"ids": ids})
    back = json.loads(text)["ids"]
    assert back == ids
    assert [gen.decode(i).worker for i in back] == [gen.stats()["worker"]] * 100
    assert int(ids[-1]) > 2**53, "ids of the default layout need a string in JSON"


def test_context_manager_closes() -> None:
    with grantid.Generator(grantid.MemoryAuthority(), namespace="ns") as g:
        g.next_id()
        assert not g.closed
    assert g.closed
    with pytest.raises(grantid.Closed):
        g.next_id()
    g.close()  # idempotent


def test_two_generators_share_a_memory_authority() -> None:
    authority = grantid.MemoryAuthority()
    with grantid.Generator(authority, namespace="ns") as a, grantid.Generator(authority, namespace="ns") as b:
        assert a.stats()["worker"] != b.stats()["worker"]
        ids = a.next_ids(1000) + b.next_ids(1000)
        assert len(set(ids)) == 2000
    assert {g.worker for g in authority.grants()} == {0, 1}


def test_threads_get_unique_ids() -> None:
    threads, per_thread = 8, 200_000
    with grantid.Generator(grantid.MemoryAuthority(), namespace="threads") as g:
        results: List[List[int]] = [[] for _ in range(threads)]
        start = threading.Barrier(threads)

        def work(slot: List[int]) -> None:
            start.wait()
            next_id = g.next_id
            slot.extend(next_id() for _ in range(per_thread))

        workers = [threading.Thread(target=work, args=(results[i],)) for i in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        for r in results:
            assert len(r) == per_thread
            assert all(a < b for a, b in zip(r, r[1:])), "IDs of one thread must increase"
        everything = [i for r in results for i in r]
        assert len(set(everything)) == threads * per_thread
        assert g.stats()["ids_issued"] >= threads * per_thread


def test_bad_options_are_invalid_arguments() -> None:
    authority = grantid.MemoryAuthority()
    for kwargs, needle in [
        ({"fork_policy": "sometimes"}, "fork_policy"),
        ({"startup_timeout": -1.0}, "startup_timeout"),
        ({"max_wait": float("nan")}, "max_wait"),
        ({"horizon_ms": 10, "grant_duration_ms": 100}, "horizon_ms"),
        ({"max_batch": 0}, "max_batch"),
        ({"on_lease_lost": 5}, "on_lease_lost"),
    ]:
        with pytest.raises(grantid.InvalidArgument, match=needle):
            grantid.Generator(authority, namespace="ns", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(grantid.InvalidArgument, match="namespace"):
        grantid.Generator(authority, namespace="")
    with pytest.raises(grantid.InvalidArgument, match="grant_source"):
        grantid.Generator(42, namespace="ns")  # type: ignore[arg-type]
