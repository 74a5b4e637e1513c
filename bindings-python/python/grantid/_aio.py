"""asyncio support: Generator.start_async and coroutine grant sources.

The loop rule: a coroutine grant source runs on the event loop that called
``start_async``. The renewal thread schedules each call there
(``asyncio.run_coroutine_threadsafe``) and waits for the answer at most
``source_timeout``; a loop that is blocked (a long synchronous loop of
``next_id`` calls, ``time.sleep``) or closed cannot answer, so the answer
is uncertain and retried, and once the committed grants (``horizon_ms``)
run out, ``next_id`` raises ``Unavailable`` until the loop runs again. The
core never issues past its committed grants, so a blocked loop stalls
issuance, never uniqueness. Close the generator (``await gen.aclose()``)
before the loop ends.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
from typing import Any, Callable, Optional

from . import _grantid


def is_async(source: Any) -> bool:
    """True when the grant source (or its ``acquire``) is a coroutine function."""
    acquire = getattr(source, "acquire", None)
    if callable(acquire):
        return inspect.iscoroutinefunction(acquire)
    return inspect.iscoroutinefunction(source)


class LoopSource:
    """A coroutine grant source made callable from the renewal thread: each
    call runs on ``loop`` and is awaited at most ``timeout`` seconds."""

    def __init__(self, source: Any, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        acquire = getattr(source, "acquire", None)
        self._acquire: Callable[..., Any] = acquire if callable(acquire) else source
        release = getattr(source, "release", None)
        self._release: Optional[Callable[..., Any]] = release if callable(release) else None
        self._loop = loop
        self._timeout = timeout

    def _run(self, fn: Callable[..., Any], arg: Any) -> Any:
        result = fn(arg)
        if not inspect.isawaitable(result):
            return result
        if self._loop.is_closed():
            if inspect.iscoroutine(result):
                result.close()
            raise RuntimeError("the event loop of the async grant source is closed")

        async def awaited() -> Any:
            return await result

        future = asyncio.run_coroutine_threadsafe(awaited(), self._loop)
        try:
            return future.result(self._timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(
                f"the async grant source did not answer within {self._timeout:.3f} s "
                "(is the event loop blocked?)"
            ) from None

    def acquire(self, request: Any) -> Any:
        return self._run(self._acquire, request)

    def release(self, grant: Any) -> None:
        if self._release is not None:
            self._run(self._release, grant)


async def start_async(cls: Any, grant_source: Any, **options: Any) -> Any:
    loop = asyncio.get_running_loop()
    if not isinstance(grant_source, (str, _grantid.MemoryAuthority)) and is_async(grant_source):
        timeout = float(options.get("source_timeout", 2.0))
        grant_source = LoopSource(grant_source, loop, timeout)
    # The constructor waits for the first grant with the GIL released; in a
    # thread, the loop keeps running (and answers an async source).
    return await loop.run_in_executor(None, functools.partial(cls, grant_source, **options))


async def aclose(generator: Any) -> None:
    # close() joins the renewal thread, which may be waiting for this loop.
    await asyncio.get_running_loop().run_in_executor(None, generator.close)
