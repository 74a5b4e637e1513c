"""Shared fixtures: a cross-process grant source kept in a locked file, and
the conformance vectors."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any, Dict

import pytest

import grantid

REPO = Path(__file__).resolve().parents[2]


class LockedFileSource:
    """A grant source for tests that must work across fork(): the state
    lives in a JSON file guarded by a POSIX record lock (lockf: owned by the
    process, so a child never inherits a lock its parent's renewal thread
    held at fork time, as it would with flock), so a parent and its children
    never get the same worker or overlapping intervals. It follows the
    design's rule in its simplest form (no lease expiry: a worker once
    held stays held)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.calls = 0

    def __call__(self, request: grantid.GrantRequest) -> Dict[str, Any]:
        self.calls += 1
        with open(self.path, "a+") as f:
            fcntl.lockf(f, fcntl.LOCK_EX)
            f.seek(0)
            text = f.read()
            state = json.loads(text) if text else {"workers": {}}
            workers = state["workers"]
            if request.worker is None:
                worker = len(workers)
                if worker >= request.layout.worker_count:
                    raise grantid.LeaseLost("no free worker")
                workers[str(worker)] = {"holder": request.incarnation, "high_water": 0}
            else:
                worker = request.worker
                record = workers[str(worker)]
                if record["holder"] != request.incarnation:
                    raise grantid.LeaseLost(f"worker {worker} is held by someone else")
            record = workers[str(worker)]
            start = max(record["high_water"], request.now, request.not_before)
            end = start + request.duration
            record["high_water"] = end
            f.seek(0)
            f.truncate()
            f.write(json.dumps(state))
            f.flush()
            os.fsync(f.fileno())
        return {
            "namespace": request.namespace,
            "worker": worker,
            "incarnation": request.incarnation,
            "grant_id": end,
            "start": start,
            "end": end,
        }


@pytest.fixture
def file_source(tmp_path: Path) -> LockedFileSource:
    return LockedFileSource(tmp_path / "grants.json")


@pytest.fixture(scope="session")
def vectors() -> Dict[str, Any]:
    path = Path(os.environ.get("GRANTID_CONFORMANCE", REPO / "conformance" / "vectors.json"))
    with open(path) as f:
        data: Dict[str, Any] = json.load(f)
    return data
