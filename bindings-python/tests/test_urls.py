"""Authority URLs (grantid-authority) and the pure-Python helpers, on the
file authority and on the throwaway PostgreSQL / Redis servers the test
script starts (GRANTID_TEST_POSTGRES_URL / GRANTID_TEST_REDIS_URL)."""

from __future__ import annotations

import multiprocessing
import os
import uuid
from pathlib import Path
from typing import Any, List

import pytest

import grantid
from grantid import authorities

from conftest import service_url


def fresh_namespace() -> str:
    return "py-" + uuid.uuid4().hex[:12]


def check_pair(a: grantid.Generator, b: grantid.Generator) -> None:
    assert a.stats()["worker"] != b.stats()["worker"]
    ids = a.next_ids(2000) + [b.next_id() for _ in range(2000)] + a.next_ids(10)
    assert len(set(ids)) == len(ids)


def test_bad_urls_are_invalid_arguments(tmp_path: Path) -> None:
    with pytest.raises(grantid.InvalidArgument, match="scheme"):
        grantid.Generator("gopher://x", namespace="ns")
    with pytest.raises(grantid.InvalidArgument):
        grantid.Generator(f"file:{tmp_path}/a.json?timeout_ms=0", namespace="ns")


def test_file_url(tmp_path: Path) -> None:
    url = f"file:{tmp_path}/grantid.json"
    with grantid.Generator(url, namespace="files") as a, grantid.Generator(url, namespace="files") as b:
        check_pair(a, b)
    # A restart continues above every interval granted before.
    with grantid.Generator(url, namespace="files") as c:
        assert c.next_id() > max(a.stats()["grant_end"] or 0, 0)


def _child_ids(gen: grantid.Generator, out: Any) -> None:
    try:
        out.put((gen.next_ids(1000), gen.stats()["incarnation"]))
    except grantid.GrantIdError as e:
        out.put(([], repr(e)))


def test_file_url_after_fork(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    with grantid.Generator(f"file:{tmp_path}/grantid.json", namespace="forked", startup_timeout=5.0) as gen:
        mine = gen.next_ids(1000)
        procs = [ctx.Process(target=_child_ids, args=(gen, out)) for _ in range(2)]
        for p in procs:
            p.start()
        results = [out.get(timeout=30) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        mine += gen.next_ids(1000)
        incarnation = gen.stats()["incarnation"]
    assert all(isinstance(inc, int) for _, inc in results), results
    everything: List[int] = mine + [i for ids, _ in results for i in ids]
    assert len(set(everything)) == len(everything) == 4000
    assert len({inc for _, inc in results} | {incarnation}) == 3


def test_postgres_url_and_helper_share_the_rule() -> None:
    url = service_url("POSTGRES")
    psycopg = pytest.importorskip("psycopg")
    ns = fresh_namespace()
    helper = authorities.postgres(lambda: psycopg.connect(url))
    with grantid.Generator(url, namespace=ns) as a, grantid.Generator(helper, namespace=ns) as b:
        check_pair(a, b)
        wb = b.stats()["worker"]
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT worker, holder FROM grantid.workers WHERE namespace = %s ORDER BY worker", (ns,)
        ).fetchall()
    assert [w for w, _ in rows] == [0, 1]
    assert dict(rows)[wb] is None, "the helper's release ended its lease"


def test_postgres_helper_reports_lost() -> None:
    url = service_url("POSTGRES")
    psycopg = pytest.importorskip("psycopg")
    layout = grantid.Layout(timestamp_bits=41, worker_bits=0, sequence_bits=22)
    ns = fresh_namespace()
    with grantid.Generator(url, namespace=ns, layout=layout):
        with pytest.raises(grantid.LeaseLost, match="no free worker"):
            grantid.Generator(
                authorities.postgres(lambda: psycopg.connect(url)), namespace=ns, layout=layout, startup_timeout=0.5
            )


def test_redis_url_and_helper_share_the_rule() -> None:
    url = service_url("REDIS")
    redis = pytest.importorskip("redis")
    ns = fresh_namespace()
    helper = authorities.redis(redis.Redis.from_url(url))
    with grantid.Generator(url, namespace=ns) as a, grantid.Generator(helper, namespace=ns) as b:
        check_pair(a, b)


def test_a_dynamodb_url_gives_two_generators_two_workers() -> None:
    """dynamodb:// from Python: a table of the test's own, made and
    declared new by the command (`grantid authority init`)."""
    import subprocess

    from test_grpc_authority import grantid_bin

    url = service_url("DYNAMODB").replace("grantid_test", "grantid_py_" + uuid.uuid4().hex[:8])
    subprocess.run([grantid_bin(), "authority", "init", "--new-deployment", url],
                   check=True, capture_output=True)
    ns = fresh_namespace()
    with grantid.Generator(url, namespace=ns) as a, grantid.Generator(url, namespace=ns) as b:
        check_pair(a, b)
