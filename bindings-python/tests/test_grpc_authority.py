"""The `grpc://HOST:PORT` authority from Python: grants from a `grantid
serve` process (docs/SERVICE.md), with no Python code of its own: the URL
goes to grantid-authority like any other. The server binary is
`GRANTID_BIN`, else `target/debug/grantid` (built with cargo when missing)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

import grantid

REPO = Path(__file__).resolve().parents[2]


def grantid_bin() -> str:
    env = os.environ.get("GRANTID_BIN")
    if env:
        return env
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    if not target.is_absolute():
        target = REPO / target
    path = target / "debug" / "grantid"
    if not path.exists():
        subprocess.run(["cargo", "build", "-q", "-p", "grantid-cli"], cwd=REPO, check=True)
    return str(path)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [grantid_bin(), "serve", "--listen", f"127.0.0.1:{port}",
         "--authority", f"file:{tmp_path / 'state.json'}", "--namespace", "server-own"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None, "grantid serve exited"
            assert time.monotonic() < deadline, "grantid serve did not listen"
            time.sleep(0.02)
    yield port
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0


def test_ids_from_grants_of_a_server(server: int) -> None:
    url = f"grpc://127.0.0.1:{server}?timeout_ms=500"
    with grantid.Generator(url, namespace="py-grpc") as a, \
            grantid.Generator(url, namespace="py-grpc") as b:
        ids = a.next_ids(1000) + b.next_ids(1000) + [a.next_id(), b.next_id()]
        assert len(set(ids)) == len(ids)
        assert a.stats()["worker"] != b.stats()["worker"]


def test_no_server_is_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(grantid.Unavailable) as e:
        grantid.Generator(f"grpc://127.0.0.1:{port}?timeout_ms=100", namespace="py-grpc",
                          startup_timeout=0.5)
    assert "grpc://" in str(e.value)


def test_a_malformed_grpc_url_is_invalid() -> None:
    with pytest.raises(grantid.InvalidArgument):
        grantid.Generator("grpc://no-port", namespace="py-grpc")
