"""Grant sources for programs that keep their own database connections.

Both helpers are thin: the allocation rule runs inside the server, as the
PostgreSQL function ``grantid.acquire`` or the Redis Lua script shipped by
the authority crate (``authority/src/engines/postgres/v1.sql``, ``authority/src/engines/redis/v1.lua``,
built into this package; see ``POSTGRES_SQL`` and ``REDIS_LUA``). The calls
and the reading of the answers are the Rust adapters' own (the extension's
``postgres_acquire_call`` / ``grant_from_postgres_row`` and
``redis_acquire_call`` / ``grant_from_redis_reply``); the helpers only do the
I/O. Every answer has the kind it has in Rust: ``lost`` raises
``LeaseLost``, ``wait`` ``Unavailable`` (retried), ``refused``
``InvalidArgument`` (start-up fails at once), a malformed answer
``Unavailable`` as an invalid grant; each of these carries ``grant_error``
(``"lost"``, ``"unavailable"``, ``"refused"``, ``"invalid"``), and the
generator takes it as exactly that answer. Any other failure (a lost
connection) propagates and counts as *unavailable*.

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
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

from . import _after_fork_in_child, _grantid
from ._grantid import Grant, GrantRequest

POSTGRES_SQL: str = _grantid.POSTGRES_SQL
POSTGRES_SCHEMA_VERSION: int = _grantid.POSTGRES_SCHEMA_VERSION
POSTGRES_SCHEMA_CHECKS: List[str] = _grantid.POSTGRES_SCHEMA_CHECKS
REDIS_LUA: str = _grantid.REDIS_LUA
DEFAULT_LEASE_GRACE_MS: int = _grantid.DEFAULT_LEASE_GRACE_MS

__all__ = ["POSTGRES_SQL", "REDIS_LUA", "DEFAULT_LEASE_GRACE_MS", "PostgresSource", "RedisSource", "postgres", "redis"]

# PostgreSQL's SQLSTATE undefined_function.
_UNDEFINED_FUNCTION = "42883"


class PostgresSource:
    """Calls ``grantid.acquire`` through psycopg, one transaction per grant.

    ``connect`` is a function returning a new psycopg (3) connection; it is
    called lazily, again after a failure, and in a ``fork()`` child. The
    schema is applied when the Rust adapter's checks
    (``POSTGRES_SCHEMA_CHECKS``) say it is missing or older, or when the
    database lacks the function the call names, as ``POSTGRES_SQL`` under
    the same advisory lock as the Rust adapter. ``lease_grace_ms``,
    ``max_lead_ms`` and ``clock_skew_ms`` are the URL options of the same
    names (``None``: their defaults)."""

    def __init__(
        self,
        connect: Callable[[], Any],
        *,
        lease_grace_ms: int = DEFAULT_LEASE_GRACE_MS,
        max_lead_ms: Optional[int] = None,
        clock_skew_ms: Optional[int] = None,
    ) -> None:
        self._connect = connect
        self._lease_grace_ms = lease_grace_ms
        self._max_lead_ms = max_lead_ms
        self._clock_skew_ms = clock_skew_ms
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

    @staticmethod
    def _apply_schema(conn: Any) -> None:
        with conn.transaction():
            conn.execute(_grantid.POSTGRES_SCHEMA_LOCK)
            conn.execute(POSTGRES_SQL)

    def _connection(self) -> Any:
        if self._conn is None or self._pid != os.getpid():
            conn = self._connect()
            try:
                ready = all(conn.execute(check).fetchone() is not None for check in POSTGRES_SCHEMA_CHECKS)
                conn.commit()
                if not ready:
                    self._apply_schema(conn)
            except BaseException:
                try:
                    conn.close()
                except Exception:
                    pass
                raise
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def _run(self, call: Tuple[str, List[Union[str, int, None]]]) -> Any:
        text, params = call
        with self._lock:
            try:
                conn = self._connection()
                try:
                    row = conn.execute(text, params).fetchone()
                except Exception as e:
                    if getattr(e, "sqlstate", None) != _UNDEFINED_FUNCTION:
                        raise
                    conn.rollback()
                    self._apply_schema(conn)
                    row = conn.execute(text, params).fetchone()
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
        call = _grantid.postgres_acquire_call(
            request,
            lease_grace_ms=self._lease_grace_ms,
            max_lead_ms=self._max_lead_ms,
            clock_skew_ms=self._clock_skew_ms,
        )
        return _grantid.grant_from_postgres_row(request, self._run(call))

    def release(self, grant: Grant) -> None:
        self._run(_grantid.postgres_release_call(grant))


class RedisSource:
    """Runs the grantid Lua script through redis-py (``EVALSHA``, loading
    the script when the server does not have it), with the keys and
    arguments of the Rust adapter: the namespace's key and the store's
    state-loss record, the layout and its datacenter split, the lease
    grace, ``log_max``, ``max_lead_ms`` and ``clock_skew_ms`` (a missing
    one takes the URL authority's default). The authority's time is the
    server's clock. ``client`` is a ``redis.Redis``; redis-py reconnects by
    itself after ``fork()``."""

    def __init__(
        self,
        client: Any,
        *,
        lease_grace_ms: int = DEFAULT_LEASE_GRACE_MS,
        log_max: Optional[int] = None,
        max_lead_ms: Optional[int] = None,
        clock_skew_ms: Optional[int] = None,
    ) -> None:
        self._script = client.register_script(REDIS_LUA)
        self._lease_grace_ms = lease_grace_ms
        self._log_max = log_max
        self._max_lead_ms = max_lead_ms
        self._clock_skew_ms = clock_skew_ms

    def _eval(self, call: Tuple[List[str], List[str]]) -> Sequence[Any]:
        keys, args = call
        reply: Sequence[Any] = self._script(keys=keys, args=args)
        return reply

    def acquire(self, request: GrantRequest) -> Grant:
        call = _grantid.redis_acquire_call(
            request,
            lease_grace_ms=self._lease_grace_ms,
            log_max=self._log_max,
            max_lead_ms=self._max_lead_ms,
            clock_skew_ms=self._clock_skew_ms,
        )
        return _grantid.grant_from_redis_reply(request, self._eval(call))

    def release(self, grant: Grant) -> None:
        self._eval(_grantid.redis_release_call(grant))


def postgres(
    connect: Callable[[], Any],
    *,
    lease_grace_ms: int = DEFAULT_LEASE_GRACE_MS,
    max_lead_ms: Optional[int] = None,
    clock_skew_ms: Optional[int] = None,
) -> PostgresSource:
    """A grant source calling ``grantid.acquire`` via psycopg; ``connect()``
    returns a new connection."""
    return PostgresSource(connect, lease_grace_ms=lease_grace_ms, max_lead_ms=max_lead_ms, clock_skew_ms=clock_skew_ms)


def redis(
    client: Any,
    *,
    lease_grace_ms: int = DEFAULT_LEASE_GRACE_MS,
    log_max: Optional[int] = None,
    max_lead_ms: Optional[int] = None,
    clock_skew_ms: Optional[int] = None,
) -> RedisSource:
    """A grant source running the grantid Lua script via a redis-py client."""
    return RedisSource(
        client, lease_grace_ms=lease_grace_ms, log_max=log_max, max_lead_ms=max_lead_ms, clock_skew_ms=clock_skew_ms
    )
