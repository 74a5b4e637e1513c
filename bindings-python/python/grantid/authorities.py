"""Grant sources for programs that keep their own database connections.

Both helpers are thin: the allocation rule runs inside the server, as the
PostgreSQL function ``grantid.acquire`` or the Redis Lua script shipped by
the authority crate (``authority/sql/v1.sql``, ``authority/lua/v1.lua``,
built into this package; see ``POSTGRES_SQL`` and ``REDIS_LUA``). The
helpers only pass a request in and turn the answer into a ``Grant`` or a
``LeaseLost``; any other failure propagates and counts as *unavailable*.

    import psycopg, redis, grantid
    from grantid import authorities

    gen = grantid.Generator(authorities.postgres(lambda: psycopg.connect(DSN)), namespace="orders-v1")
    gen = grantid.Generator(authorities.redis(redis.Redis()), namespace="orders-v1")

The generator calls them from its renewal thread; they are safe to share
between generators. After ``fork()`` the PostgreSQL helper opens a new
connection in the child and never touches its parent's.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Optional

from . import _after_fork_in_child, _grantid
from ._grantid import Grant, GrantRequest, LeaseLost

POSTGRES_SQL: str = _grantid.POSTGRES_SQL
REDIS_LUA: str = _grantid.REDIS_LUA
DEFAULT_LEASE_GRACE_MS: int = _grantid.DEFAULT_LEASE_GRACE_MS

__all__ = ["POSTGRES_SQL", "REDIS_LUA", "DEFAULT_LEASE_GRACE_MS", "PostgresSource", "RedisSource", "postgres", "redis"]


def _signed64(value: int) -> int:
    """A 64-bit unsigned value as the bigint with the same bits."""
    return value - 2**64 if value >= 2**63 else value


def _grace_ticks(lease_grace_ms: int, tick_ms: int) -> int:
    return min(-(-lease_grace_ms // tick_ms), 2**62)


class PostgresSource:
    """Calls ``grantid.acquire`` through psycopg, one transaction per grant.

    ``connect`` is a function returning a new psycopg (3) connection; it is
    called lazily, again after a failure, and in a ``fork()`` child. The
    schema is applied when missing (``POSTGRES_SQL``, under the same
    advisory lock as the Rust adapter)."""

    def __init__(self, connect: Callable[[], Any], *, lease_grace_ms: int = DEFAULT_LEASE_GRACE_MS) -> None:
        self._connect = connect
        self._lease_grace_ms = lease_grace_ms
        self._lock = threading.Lock()
        self._conn: Any = None
        self._pid = os.getpid()
        _after_fork_in_child.append(self._forget_parent_connection)

    def _forget_parent_connection(self) -> None:
        # The parent's socket is shared with the child: never use or close
        # it here, just drop the reference.
        self._lock = threading.Lock()
        self._conn = None
        self._pid = os.getpid()

    def _connection(self) -> Any:
        if self._conn is None or self._pid != os.getpid():
            conn = self._connect()
            ready = conn.execute(
                "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = 'grantid' AND tablename = 'schema_version'"
            ).fetchone()
            if ready is not None:
                ready = conn.execute("SELECT 1 FROM grantid.schema_version WHERE version >= 1").fetchone()
            conn.commit()
            if ready is None:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext('grantid schema'))")
                    conn.execute(POSTGRES_SQL)
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def _run(self, query: str, params: tuple) -> Any:  # type: ignore[type-arg]
        with self._lock:
            try:
                conn = self._connection()
                row = conn.execute(query, params).fetchone()
                conn.commit()
                return row
            except BaseException:
                conn, self._conn = self._conn, None
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:
                        pass
                raise

    def acquire(self, request: GrantRequest) -> Grant:
        layout = request.layout
        row = self._run(
            "SELECT status, worker, grant_id, start_tick, end_tick, message FROM grantid.acquire("
            "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                request.namespace,
                _signed64(request.incarnation),
                _signed64(request.request_id),
                request.worker,
                min(request.not_before, layout.timestamp_limit),
                min(max(request.duration, 1), layout.timestamp_limit),
                layout.timestamp_bits,
                layout.worker_bits,
                layout.sequence_bits,
                layout.epoch_ms,
                layout.tick_ms,
                _grace_ticks(self._lease_grace_ms, layout.tick_ms),
                None,
            ),
        )
        status, worker, grant_id, start, end, message = row
        if status == "lost":
            raise LeaseLost(f"namespace {request.namespace!r}: {message}")
        if status != "granted":
            raise RuntimeError(f"grantid.acquire answered {row!r}")
        return request.grant(worker=worker, start=start, end=end, grant_id=grant_id)

    def release(self, grant: Grant) -> None:
        self._run(
            "SELECT grantid.release(%s, %s, %s, %s)",
            (grant.namespace, grant.worker, _signed64(grant.incarnation), None),
        )


class RedisSource:
    """Runs the grantid Lua script through redis-py (``EVALSHA``, loading
    the script when the server does not have it). ``client`` is a
    ``redis.Redis``; redis-py reconnects by itself after ``fork()``."""

    def __init__(
        self,
        client: Any,
        *,
        lease_grace_ms: int = DEFAULT_LEASE_GRACE_MS,
        log_max: int = 1_000_000,
        now_ms: Optional[Callable[[], int]] = None,
    ) -> None:
        self._script = client.register_script(REDIS_LUA)
        self._lease_grace_ms = lease_grace_ms
        self._log_max = log_max
        self._now_ms = now_ms

    def _now_arg(self) -> str:
        return "" if self._now_ms is None else str(self._now_ms())

    @staticmethod
    def _key(namespace: str) -> str:
        return "grantid:{" + namespace + "}"

    def acquire(self, request: GrantRequest) -> Grant:
        layout = request.layout
        if layout.timestamp_bits > 52:
            raise LeaseLost(
                f"namespace {request.namespace!r}: the Redis authority needs at most 52 timestamp "
                "bits and epoch/tick below 2^53 ms"
            )
        reply = self._script(
            keys=[self._key(request.namespace)],
            args=[
                "acquire",
                str(request.incarnation),
                str(request.request_id),
                "" if request.worker is None else str(request.worker),
                min(request.not_before, layout.timestamp_limit),
                min(max(request.duration, 1), layout.timestamp_limit),
                layout.timestamp_bits,
                layout.worker_bits,
                layout.sequence_bits,
                layout.epoch_ms,
                layout.tick_ms,
                min(-(-self._lease_grace_ms // layout.tick_ms), 1 << 40),
                self._now_arg(),
                self._log_max,
            ],
        )
        answer = [x.decode() if isinstance(x, bytes) else str(x) for x in reply]
        if answer and answer[0] == "lost":
            raise LeaseLost(f"namespace {request.namespace!r}: {answer[1] if len(answer) > 1 else ''}")
        if len(answer) != 5 or answer[0] != "granted":
            raise RuntimeError(f"the grantid script answered {answer!r}")
        return request.grant(worker=int(answer[1]), grant_id=int(answer[2]), start=int(answer[3]), end=int(answer[4]))

    def release(self, grant: Grant) -> None:
        self._script(
            keys=[self._key(grant.namespace)],
            args=["release", str(grant.incarnation), str(grant.worker), self._now_arg()],
        )


def postgres(connect: Callable[[], Any], *, lease_grace_ms: int = DEFAULT_LEASE_GRACE_MS) -> PostgresSource:
    """A grant source calling ``grantid.acquire`` via psycopg; ``connect()``
    returns a new connection."""
    return PostgresSource(connect, lease_grace_ms=lease_grace_ms)


def redis(client: Any, *, lease_grace_ms: int = DEFAULT_LEASE_GRACE_MS) -> RedisSource:
    """A grant source running the grantid Lua script via a redis-py client."""
    return RedisSource(client, lease_grace_ms=lease_grace_ms)
