"""fork(): children never reuse their parent's grant (multiprocessing)."""

from __future__ import annotations

import multiprocessing
import os
import sys
from typing import Any, Dict, List

import pytest

import grantid

from conftest import LockedFileSource

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

CHILDREN = 4
PER_PROCESS = 20_000


def child(gen: grantid.Generator, source: LockedFileSource, out: Any) -> None:
    try:
        ids = gen.next_ids(PER_PROCESS // 2) + [gen.next_id() for _ in range(PER_PROCESS // 2)]
        stats = gen.stats()
        out.put({"pid": os.getpid(), "ids": ids, "stats": stats, "calls": source.calls})
    except BaseException as e:  # report instead of hanging the parent
        out.put({"pid": os.getpid(), "error": repr(e)})
        raise


def test_children_get_new_incarnations_workers_and_unique_ids(file_source: LockedFileSource) -> None:
    ctx = multiprocessing.get_context("fork")
    gen = grantid.Generator(file_source, namespace="fork", startup_timeout=10.0)
    try:
        parent_ids: List[int] = gen.next_ids(PER_PROCESS)
        parent = gen.stats()
        calls_before = file_source.calls
        out = ctx.Queue()
        procs = [ctx.Process(target=child, args=(gen, file_source, out)) for _ in range(CHILDREN)]
        for p in procs:
            p.start()
        results: List[Dict[str, Any]] = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=30)
            assert p.exitcode == 0
        parent_ids += [gen.next_id() for _ in range(PER_PROCESS)]
        after = gen.stats()
    finally:
        gen.close()

    errors = [r["error"] for r in results if "error" in r]
    assert not errors, errors
    incarnations = {r["stats"]["incarnation"] for r in results}
    assert len(incarnations) == CHILDREN, "each child needs its own incarnation"
    assert parent["incarnation"] not in incarnations
    workers = {r["stats"]["worker"] for r in results}
    detail = [(r["stats"], sorted({gen.decode(i).worker for i in r["ids"]})) for r in results]
    assert len(workers) == CHILDREN and parent["worker"] not in workers, (parent, detail, file_source.path.read_text())
    for r in results:
        assert r["stats"]["fork_reactivations"] == 1
        assert r["calls"] > calls_before, "the child's own renewal thread called the Python source"
        assert len(r["ids"]) == PER_PROCESS
    everything = parent_ids + [i for r in results for i in r["ids"]]
    assert len(everything) == (CHILDREN + 2) * PER_PROCESS
    assert len(set(everything)) == len(everything), "an ID was issued twice"
    # The parent goes on with its own incarnation and worker.
    assert after["incarnation"] == parent["incarnation"] and after["worker"] == parent["worker"]


def test_fork_policy_close_refuses_in_the_child() -> None:
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()

    def run(gen: grantid.Generator) -> None:
        try:
            gen.next_id()
            out.put("issued")
        except grantid.Closed:
            out.put("closed")

    with grantid.Generator(grantid.MemoryAuthority(), namespace="fc", fork_policy="close") as gen:
        gen.next_id()
        p = ctx.Process(target=run, args=(gen,))
        p.start()
        assert out.get(timeout=30) == "closed"
        p.join(timeout=30)
        gen.next_id()  # the parent is unaffected


def test_os_fork_child_reactivates(file_source: LockedFileSource) -> None:
    with grantid.Generator(file_source, namespace="osfork") as gen:
        parent_id = gen.next_id()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                os.close(r)
                ids = gen.next_ids(100)
                os.write(w, (" ".join(map(str, ids)) + "\n").encode())
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        with os.fdopen(r) as f:
            child_ids = [int(x) for x in f.read().split()]
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0 if sys.version_info >= (3, 9) else status == 0
        more = gen.next_ids(100)
    assert len(child_ids) == 100
    assert not set(child_ids) & set(more + [parent_id])
    assert gen.decode(child_ids[0]).worker != gen.decode(parent_id).worker
