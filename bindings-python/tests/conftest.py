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
    lives in a JSON file, guarded by flock on a lock file (released when a
    process dies mid-call; the package's fork guard keeps fork() from
    copying a held lock into a child) and replaced atomically on every
    write (a process may exit while its renewal thread is mid-call). It
    follows the design's rule in its simplest form (no lease expiry: a
    worker once held stays held)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = path.with_suffix(".lock")
        self.calls = 0

    def __call__(self, request: grantid.GrantRequest) -> Dict[str, Any]:
        self.calls += 1
        with open(self.lock, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            text = self.path.read_text() if self.path.exists() else ""
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
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(state))
            os.replace(tmp, self.path)
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


REQUIRED = os.environ.get("GRANTID_REQUIRE_SERVICES") == "1"


def service_url(name: str) -> str:
    """The throwaway server's URL (`GRANTID_TEST_<NAME>_URL`, set by the
    test tier); a test without it fails when the tier requires the
    servers, and is skipped otherwise."""
    url = os.environ.get(f"GRANTID_TEST_{name}_URL")
    if not url:
        if REQUIRED:
            pytest.fail(f"GRANTID_TEST_{name}_URL is not set and GRANTID_REQUIRE_SERVICES=1")
        pytest.skip(f"GRANTID_TEST_{name}_URL is not set")
    return url
