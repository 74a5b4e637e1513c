"""grantid.authorities: the Rust adapters' calls and answer decoders behind
the Python helpers. Every answer kind of the store gets the error it gets in
Rust (authority/src/answer.rs): lost is LeaseLost, wait Unavailable
(retried), refused InvalidArgument (start-up fails at once), anything
malformed an invalid grant; on fakes of redis-py and psycopg, and on the
throwaway Redis and PostgreSQL servers (GRANTID_TEST_REDIS_URL /
GRANTID_TEST_POSTGRES_URL)."""

from __future__ import annotations

import contextlib
import logging
import os
import time
import urllib.parse
import uuid
from typing import Any, Dict, Iterator, List, Optional, Tuple, Type

import pytest

import grantid
from grantid import _grantid, authorities

from conftest import service_url


def fresh_namespace() -> str:
    return "py-helper-" + uuid.uuid4().hex[:12]


def a_request(layout: Optional[grantid.Layout] = None, namespace: str = "ns") -> grantid.GrantRequest:
    """A request as a generator makes it (a first grant: any worker)."""
    seen: List[grantid.GrantRequest] = []

    def source(request: grantid.GrantRequest) -> grantid.Grant:
        seen.append(request)
        return request.grant(worker=0, start=request.not_before, end=request.not_before + request.duration)

    with grantid.Generator(source, namespace=namespace, layout=layout):
        pass
    return seen[0]


# (status, exception class, grant_error): the error kind of each answer in
# Rust (GrantError's kind and name).
KINDS: List[Tuple[str, Type[grantid.GrantIdError], str]] = [
    ("lost", grantid.LeaseLost, "lost"),
    ("wait", grantid.Unavailable, "unavailable"),
    ("refused", grantid.InvalidArgument, "refused"),
    ("maybe", grantid.Unavailable, "invalid"),
]


class FakeRedis:
    """What RedisSource needs of a redis-py client: register_script."""

    def __init__(self, reply: Any) -> None:
        self.reply = reply
        self.scripts: List[str] = []
        self.calls: List[Tuple[List[str], List[Any]]] = []

    def register_script(self, script: str) -> Any:
        self.scripts.append(script)

        def run(keys: List[str], args: List[Any]) -> Any:
            self.calls.append((keys, args))
            return self.reply

        return run


class FakeCursor:
    def __init__(self, row: Any) -> None:
        self.row = row

    def fetchone(self) -> Any:
        return self.row


class FakeConnection:
    """What PostgresSource needs of a psycopg connection, with the schema in
    place and `row` as the answer of every grantid.* call."""

    def __init__(self, row: Any) -> None:
        self.row = row
        self.calls: List[Tuple[str, Any]] = []

    def execute(self, query: str, params: Any = None) -> FakeCursor:
        if "grantid." in query and "schema_version" not in query:
            self.calls.append((query, params))
            return FakeCursor(self.row)
        return FakeCursor((1,))

    def commit(self) -> None:
        pass

    def rollback(self) -> None:
        pass

    def close(self) -> None:
        pass


def redis_source(reply: Any, **options: Any) -> Tuple[authorities.RedisSource, FakeRedis]:
    client = FakeRedis(reply)
    return authorities.redis(client, **options), client


def postgres_source(row: Any) -> Tuple[authorities.PostgresSource, FakeConnection]:
    conn = FakeConnection(row)
    return authorities.postgres(lambda: conn), conn


def test_redis_helper_sends_the_rust_adapters_keys_and_arguments() -> None:
    request = a_request()
    start = request.not_before
    source, client = redis_source([b"granted", 3, b"7", start, str(start + 100).encode()], max_lead_ms=9000)
    grant = source.acquire(request)
    assert (grant.worker, grant.grant_id, grant.start, grant.end) == (3, 7, start, start + 100)
    assert (grant.namespace, grant.incarnation) == (request.namespace, request.incarnation)
    assert client.scripts == [authorities.REDIS_LUA]
    keys, args = client.calls[0]
    assert keys == ["grantid:{ns}", "grantid:store"]
    assert len(args) == 18
    assert args[:4] == ["acquire", str(request.incarnation), str(request.request_id), ""]
    assert args[11] == str(authorities.DEFAULT_LEASE_GRACE_MS)
    assert args[12] == "", "the authority's time is the server's clock"
    assert (args[15], args[16], args[17]) == ("9000", "1000", "0")
    source.release(grant)
    assert client.calls[1] == (["grantid:{ns}"], ["release", str(request.incarnation), "3", ""])


def test_postgres_helper_sends_the_rust_adapters_statement() -> None:
    request = a_request()
    start = request.not_before
    source, conn = postgres_source(("granted", 3, 7, start, start + 100, None))
    grant = source.acquire(request)
    assert (grant.worker, grant.grant_id, grant.start, grant.end) == (3, 7, start, start + 100)
    text, params = conn.calls[0]
    assert text.startswith("SELECT status, worker, grant_id, start_tick, end_tick, message FROM grantid.acquire(")
    assert len(params) == 16 and text.count("%s") == 16
    assert params[0] == "ns" and params[3] is None and params[12] is None and params[13] == 0
    # max_lead_ms and clock_skew_ms: the defaults.
    assert params[14:] == [7000, 1000]
    source.release(grant)
    assert conn.calls[1] == (
        "SELECT grantid.release(%s, %s, %s, %s)",
        ["ns", 3, request.incarnation - 2**64 if request.incarnation >= 2**63 else request.incarnation, None],
    )


@pytest.mark.parametrize("status, error, name", KINDS)
def test_every_redis_answer_has_its_rust_kind(status: str, error: Type[grantid.GrantIdError], name: str) -> None:
    source, _ = redis_source([status.encode(), b"why"])
    with pytest.raises(error, match="why" if name != "invalid" else "malformed") as e:
        source.acquire(a_request())
    assert getattr(e.value, "grant_error") == name


@pytest.mark.parametrize("status, error, name", KINDS)
def test_every_postgres_answer_has_its_rust_kind(status: str, error: Type[grantid.GrantIdError], name: str) -> None:
    source, _ = postgres_source((status, None, None, None, None, "why"))
    with pytest.raises(error, match="why" if name != "invalid" else "malformed") as e:
        source.acquire(a_request())
    assert getattr(e.value, "grant_error") == name


def test_malformed_answers_are_invalid_grants() -> None:
    request = a_request()
    start = request.not_before
    for reply in (
        [b"granted", 3],
        [b"granted", 3, b"7", -1, start + 100],
        [b"granted", 3, b"7", start, 2**41 + 1],  # past the timestamp limit
        [b"granted", 3, b"7", start + 100, start],  # ends before it starts
        [b"granted", -3, b"7", start, start + 100],
        [b"granted", 3, b"x", start, start + 100],
        [],
        None,
        b"granted",
    ):
        source, _ = redis_source(reply)
        with pytest.raises(grantid.Unavailable, match="invalid grant") as e:
            source.acquire(request)
        assert getattr(e.value, "grant_error") == "invalid", reply
    rows: List[Any] = [
        None,
        ("granted", None, 7, start, start + 100, None),
        ("granted", 3, 7, start, start + 2**70, None),
        ("granted", True, 7, start, start + 100, None),
        (None, None, None, None, None, None),
        {"status": "granted", "worker": 3},
    ]
    for row in rows:
        pg, _ = postgres_source(row)
        with pytest.raises(grantid.Unavailable, match="invalid grant") as e:
            pg.acquire(request)
        assert getattr(e.value, "grant_error") == "invalid", row


def test_a_postgres_row_may_be_a_mapping() -> None:
    request = a_request()
    start = request.not_before
    row: Dict[str, Any] = {
        "status": "granted",
        "worker": 3,
        "grant_id": 7,
        "start_tick": start,
        "end_tick": start + 100,
        "message": None,
    }
    source, _ = postgres_source(row)
    assert source.acquire(request).worker == 3


def test_a_layout_the_script_cannot_serve_is_refused() -> None:
    request = a_request(grantid.Layout(timestamp_bits=53, worker_bits=4, sequence_bits=6))
    source, client = redis_source([b"granted", 0, 1, 0, 1])
    with pytest.raises(grantid.InvalidArgument, match="52 timestamp bits") as e:
        source.acquire(request)
    assert getattr(e.value, "grant_error") == "refused"
    assert client.calls == [], "nothing is sent"


def test_a_refusal_fails_start_up_at_once() -> None:
    for source in (
        redis_source([b"refused", b"namespace is registered with another layout"])[0],
        postgres_source(("refused", None, None, None, None, "namespace is registered with another layout"))[0],
    ):
        t0 = time.monotonic()
        with pytest.raises(grantid.InvalidArgument, match="another layout"):
            grantid.Generator(source, namespace="refused", startup_timeout=5.0)
        assert time.monotonic() - t0 < 4.0, "a refusal is not retried"


def test_a_wait_is_retried_until_the_startup_timeout() -> None:
    source, client = redis_source([b"wait", b"every free worker's high-water is ahead of the clock"])
    t0 = time.monotonic()
    with pytest.raises(grantid.Unavailable, match="ahead of the clock"):
        grantid.Generator(source, namespace="waiting", startup_timeout=0.5, backoff_min=0.01, backoff_max=0.05)
    assert time.monotonic() - t0 >= 0.45
    assert len(client.calls) > 1


def test_a_malformed_answer_is_logged_as_an_invalid_grant(caplog: pytest.LogCaptureFixture) -> None:
    source, _ = redis_source([b"granted", 3])
    with caplog.at_level(logging.WARNING, logger="grantid"):
        with pytest.raises(grantid.Unavailable, match="invalid grant"):
            grantid.Generator(source, namespace="malformed", startup_timeout=0.3)
    messages = [r.getMessage() for r in caplog.records if r.name == "grantid"]
    invalid = [m for m in messages if m.startswith("event=grant_invalid ")]
    assert invalid, messages
    assert "invalid grant: invalid grant" not in " ".join(messages)


def test_a_source_may_raise_a_named_answer() -> None:
    class Refusing:
        def acquire(self, request: grantid.GrantRequest) -> grantid.Grant:
            e = grantid.InvalidArgument("the store cannot serve this layout")
            setattr(e, "grant_error", "refused")
            raise e

    with pytest.raises(grantid.InvalidArgument, match="cannot serve"):
        grantid.Generator(Refusing(), namespace="named", startup_timeout=5.0)


# On the throwaway servers.


def _other_layout() -> grantid.Layout:
    return grantid.Layout(timestamp_bits=41, worker_bits=9, sequence_bits=13)


def test_redis_refusal_of_another_layout_fails_start_up_at_once() -> None:
    url = service_url("REDIS")
    redis = pytest.importorskip("redis")
    ns = fresh_namespace()
    with grantid.Generator(url, namespace=ns):
        helper = authorities.redis(redis.Redis.from_url(url))
        t0 = time.monotonic()
        with pytest.raises(grantid.InvalidArgument, match="another layout"):
            grantid.Generator(helper, namespace=ns, layout=_other_layout(), startup_timeout=5.0)
        assert time.monotonic() - t0 < 4.0


def test_postgres_refusal_of_another_layout_fails_start_up_at_once() -> None:
    url = service_url("POSTGRES")
    psycopg = pytest.importorskip("psycopg")
    ns = fresh_namespace()
    with grantid.Generator(url, namespace=ns):
        helper = authorities.postgres(lambda: psycopg.connect(url))
        t0 = time.monotonic()
        with pytest.raises(grantid.InvalidArgument, match="another layout"):
            grantid.Generator(helper, namespace=ns, layout=_other_layout(), startup_timeout=5.0)
        assert time.monotonic() - t0 < 4.0


def test_redis_wait_is_unavailable() -> None:
    url = service_url("REDIS")
    redis = pytest.importorskip("redis")
    # Ticks of 10 ms and a lead of 5 ms: no grant can end within the lead.
    request = a_request(grantid.Layout(tick_ms=10), namespace=fresh_namespace())
    helper = authorities.redis(redis.Redis.from_url(url), max_lead_ms=5)
    with pytest.raises(grantid.Unavailable) as e:
        helper.acquire(request)
    assert getattr(e.value, "grant_error") == "unavailable", str(e.value)


def test_redis_helper_registers_its_lead_and_skew() -> None:
    url = service_url("REDIS")
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(url)
    ns = fresh_namespace()
    helper = authorities.redis(client, max_lead_ms=8000, clock_skew_ms=1500)
    # startup_timeout: a store new to grantid is quarantined for a lead.
    with grantid.Generator(helper, namespace=ns, startup_timeout=15.0) as g:
        g.next_id()
    recorded = client.hmget(f"grantid:{{{ns}}}:layout", "max_lead_ms", "clock_skew_ms", "split_bits")
    assert recorded == [b"8000", b"1500", b"0"]


@contextlib.contextmanager
def scratch_database() -> Iterator[Tuple[Any, str]]:
    """A PostgreSQL database of the test's own (dropped at the end): psycopg
    and the database's URL."""
    url = service_url("POSTGRES")
    psycopg = pytest.importorskip("psycopg")
    name = "grantid_helper_" + uuid.uuid4().hex[:12]
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield psycopg, urllib.parse.urlsplit(url)._replace(path="/" + name).geturl()
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_postgres_helper_applies_the_schema_when_the_call_finds_no_function() -> None:
    with scratch_database() as (psycopg, db_url):
        # A schema older than the statement: no function of its arguments.
        with psycopg.connect(db_url) as conn:
            conn.execute(authorities.POSTGRES_SQL)
            conn.execute("SELECT grantid.declare_new_deployment()")
            # The form the helper's statement names (its number of arguments).
            _, params = _grantid.postgres_acquire_call(a_request(grantid.Layout()))
            (args,) = conn.execute(
                "SELECT pg_get_function_identity_arguments(p.oid) FROM pg_proc p "
                "WHERE p.pronamespace = 'grantid'::regnamespace AND p.proname = 'acquire' "
                "AND p.pronargs = %s",
                [len(params)],
            ).fetchone()
            conn.execute(f"DROP FUNCTION grantid.acquire({args})")
        helper = authorities.postgres(lambda: psycopg.connect(db_url))
        with grantid.Generator(helper, namespace=fresh_namespace()) as g:
            g.next_id()


def test_postgres_helper_registers_its_lead_and_skew() -> None:
    """max_lead_ms and clock_skew_ms reach the database as the URL's options
    do: the namespace records them."""
    with scratch_database() as (psycopg, db_url):
        with psycopg.connect(db_url) as conn:
            conn.execute(authorities.POSTGRES_SQL)
            conn.execute("SELECT grantid.declare_new_deployment()")
        ns = fresh_namespace()
        helper = authorities.postgres(lambda: psycopg.connect(db_url), max_lead_ms=8000, clock_skew_ms=1500)
        with grantid.Generator(helper, namespace=ns) as g:
            g.next_id()
        with psycopg.connect(db_url) as conn:
            recorded = conn.execute(
                "SELECT max_lead_ms, clock_skew_ms FROM grantid.namespaces WHERE namespace = %s", [ns]
            ).fetchone()
        assert recorded == (8000, 1500)


def test_postgres_helper_refuses_a_zero_lead() -> None:
    with pytest.raises(grantid.InvalidArgument, match="max_lead_ms must be at least 1"):
        _grantid.postgres_acquire_call(a_request(grantid.Layout()), max_lead_ms=0)


def test_postgres_helper_upgrades_an_older_schema() -> None:
    """A database whose newest schema version is older than the Rust
    adapter's is given the script again before the helper's first call,
    as the adapter does (the new version's rule comes with it)."""
    newest = "SELECT max(version) FROM grantid.schema_version"
    with scratch_database() as (psycopg, db_url):
        with psycopg.connect(db_url) as conn:
            conn.execute(authorities.POSTGRES_SQL)
            conn.execute("SELECT grantid.declare_new_deployment()")
            conn.execute("DELETE FROM grantid.schema_version WHERE version >= %s", [authorities.POSTGRES_SCHEMA_VERSION])
            assert conn.execute(newest).fetchone()[0] < authorities.POSTGRES_SCHEMA_VERSION
        helper = authorities.postgres(lambda: psycopg.connect(db_url))
        with grantid.Generator(helper, namespace=fresh_namespace()) as g:
            g.next_id()
        with psycopg.connect(db_url) as conn:
            assert conn.execute(newest).fetchone()[0] == authorities.POSTGRES_SCHEMA_VERSION
