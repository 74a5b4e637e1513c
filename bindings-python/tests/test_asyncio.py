"""asyncio: start_async keeps the loop running, coroutine grant sources run
on that loop, and a blocked loop stalls renewal (never uniqueness)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, List

import pytest

import grantid
from test_sources import good as grant_for

FAST = {"backoff_min": 0.005, "backoff_max": 0.02}


def test_start_async_does_not_block_the_loop() -> None:
    release = threading.Event()
    ticks: List[float] = []

    def slow_source(request: grantid.GrantRequest) -> Dict[str, Any]:
        release.wait(5)
        return grant_for(request)

    async def main() -> int:
        async def ticker() -> None:
            for _ in range(20):
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)
            release.set()

        task = asyncio.ensure_future(ticker())
        gen = await grantid.Generator.start_async(slow_source, namespace="aio-slow", **FAST)
        await task
        try:
            return gen.next_id()
        finally:
            await gen.aclose()

    assert asyncio.run(main()) > 0
    # The loop ran its ticker while start_async waited for the first grant.
    assert len(ticks) == 20


def test_coroutine_source_runs_on_the_loop() -> None:
    seen_threads: List[int] = []
    calls: List[grantid.GrantRequest] = []

    async def source(request: grantid.GrantRequest) -> Dict[str, Any]:
        seen_threads.append(threading.get_ident())
        calls.append(request)
        await asyncio.sleep(0.001)
        return grant_for(request)

    async def main() -> None:
        loop_thread = threading.get_ident()
        async with await grantid.Generator.start_async(
            source, namespace="aio-coro", grant_duration_ms=50, horizon_ms=100, **FAST
        ) as gen:
            ids = []
            for _ in range(30):
                ids.extend(gen.next_ids(100))
                await asyncio.sleep(0.01)  # renewals need the loop
            assert ids == sorted(ids) and len(set(ids)) == len(ids)
            assert gen.stats()["renewals"] >= 1
            assert gen.decode(ids[-1]).worker == 3
        assert gen.closed
        assert seen_threads and all(t == loop_thread for t in seen_threads)

    asyncio.run(main())
    assert len(calls) >= 2


def test_coroutine_acquire_and_release_methods() -> None:
    released: List[grantid.Grant] = []

    class Source:
        async def acquire(self, request: grantid.GrantRequest) -> Dict[str, Any]:
            return grant_for(request, worker=7)

        async def release(self, grant: grantid.Grant) -> None:
            released.append(grant)

    async def main() -> None:
        gen = await grantid.Generator.start_async(Source(), namespace="aio-obj")
        assert gen.decode(gen.next_id()).worker == 7
        await gen.aclose()

    asyncio.run(main())
    assert released and released[-1].worker == 7


def test_raising_coroutine_is_unavailable() -> None:
    async def source(request: grantid.GrantRequest) -> Dict[str, Any]:
        raise ConnectionError("database is down")

    async def main() -> None:
        with pytest.raises(grantid.Unavailable, match="database is down"):
            await grantid.Generator.start_async(source, namespace="aio-down", startup_timeout=0.3, **FAST)

    asyncio.run(main())


def test_blocked_loop_makes_renewal_uncertain_not_unsafe() -> None:
    async def source(request: grantid.GrantRequest) -> Dict[str, Any]:
        return grant_for(request)

    async def main() -> None:
        gen = await grantid.Generator.start_async(
            source,
            namespace="aio-blocked",
            grant_duration_ms=20,
            horizon_ms=40,
            source_timeout=0.05,
            max_wait=0.01,
            **FAST,
        )
        try:
            # Block the loop: the source cannot run, the grants run out.
            deadline = time.monotonic() + 2
            error = None
            while time.monotonic() < deadline:
                try:
                    gen.next_id()
                except (grantid.Unavailable, grantid.GrantExhausted) as e:
                    error = e
                    break
            assert error is not None, "issued past the committed grants"
            # Still blocked past source_timeout: the renewal is uncertain.
            time.sleep(0.3)
            assert gen.stats()["uncertain_retries"] >= 1
            # Once the loop runs again, renewal recovers.
            for _ in range(200):
                await asyncio.sleep(0.01)
                try:
                    gen.next_id()
                    break
                except (grantid.Unavailable, grantid.GrantExhausted):
                    pass
            assert gen.next_id() > 0
        finally:
            await gen.aclose()

    asyncio.run(main())


def test_sync_constructor_refuses_a_coroutine_source() -> None:
    async def source(request: grantid.GrantRequest) -> Dict[str, Any]:
        return grant_for(request)

    with pytest.raises(grantid.InvalidArgument, match="start_async"):
        grantid.Generator(source, namespace="aio-sync")


def test_start_async_with_a_url_and_memory_authority(tmp_path: Any) -> None:
    async def main() -> None:
        async with await grantid.Generator.start_async(
            "file:" + str(tmp_path / "state.json"), namespace="aio-file"
        ) as gen:
            assert gen.next_id() > 0
        with pytest.raises(grantid.InvalidArgument):
            await grantid.Generator.start_async(grantid.MemoryAuthority(), namespace="")

    asyncio.run(main())
