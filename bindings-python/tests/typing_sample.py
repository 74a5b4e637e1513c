"""A program using the public API, type-checked with `mypy --strict` by
scripts/test.d/50-python.sh (and run by test_typing.py): the stubs must
accept every call below and give the types the asserts rely on."""

from __future__ import annotations

import array
import asyncio
import json
from typing import Any, Dict, List, Optional

import grantid
from grantid import authorities


def source(request: grantid.GrantRequest) -> Dict[str, Any]:
    start: int = max(request.now, request.not_before)
    worker: Optional[int] = request.worker
    return request.grant(worker=worker or 0, start=start, end=start + request.duration).to_dict()


def lost(event: grantid.LeaseLostEvent) -> None:
    print(event.worker, event.reason)


async def async_source(request: grantid.GrantRequest) -> Dict[str, Any]:
    await asyncio.sleep(0)
    return source(request)


async def use_async() -> None:
    async with await grantid.Generator.start_async(async_source, namespace="typed-async") as gen:
        first: int = gen.next_id()
        assert first > 0
    g = await grantid.Generator.start_async(grantid.MemoryAuthority(), namespace="typed-async2", max_wait=0.1)
    await g.aclose()


def main() -> None:
    layout = grantid.Layout(timestamp_bits=41, worker_bits=10, sequence_bits=12, epoch_ms=grantid.DEFAULT_EPOCH_MS, tick_ms=1)
    assert layout.encode(1, 2, 3) > 0
    with grantid.Generator(source, namespace="typed", layout=layout, max_drift_ms=50, startup_timeout=5.0, on_lease_lost=lost) as gen:
        one: int = gen.next_id()
        text: str = gen.next_id_str()
        many: List[int] = gen.next_ids(10)
        buf: array.array[int] = gen.next_ids_array(10)
        assert len(buf) == 10
        fields: grantid.Decoded = gen.decode(one)
        again: grantid.Decoded = gen.decode(text)
        stats = gen.stats()
        issued: int = stats["ids_issued"]
        worker: Optional[int] = stats["worker"]
        assert fields.worker == worker and again.timestamp >= fields.timestamp
        assert issued >= 12 and len(many) == 10
        assert json.loads(json.dumps(text)) == text
    memory = grantid.MemoryAuthority()
    with grantid.Generator(memory, namespace="typed", fork_policy="close", clock=grantid.ManualClock(grantid.DEFAULT_EPOCH_MS + 10_000)) as g2:
        g2.next_id()
    grants: List[grantid.Grant] = memory.grants()
    assert grants[0].end > grants[0].start
    decoded: grantid.Decoded = grantid.decode("20497", grantid.Layout(12, 3, 4))
    assert decoded.to_dict()["timestamp"] == 160
    try:
        grantid.decode(0)
    except grantid.InvalidArgument as e:
        code: Optional[str] = e.code
        assert code == "INVALID_ARGUMENT"
    except grantid.GrantIdError:
        raise
    public = grantid.PublicIds(grantid.PublicIds.generate_key())
    slug: str = public.encode_str(one)
    back: int = public.decode_str(slug)
    assert back == one and public.decode(public.encode("20497")) == 20497
    asyncio.run(use_async())
    assert isinstance(grantid.log_bridge_installed(), bool)
    helper: authorities.PostgresSource = authorities.postgres(lambda: None)
    assert callable(helper.acquire) and authorities.POSTGRES_SQL


if __name__ == "__main__":
    main()
