"""The core's events on logging.getLogger("grantid"), at the core's levels."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading

import pytest

import grantid


def test_bridge_is_installed() -> None:
    assert grantid.log_bridge_installed()
    handlers = logging.getLogger("grantid").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)


def test_grant_and_closed_events_at_their_levels(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="grantid"):
        with grantid.Generator(grantid.MemoryAuthority(), namespace="logged") as g:
            g.next_id()
    records = [r for r in caplog.records if r.name == "grantid"]
    grants = [r for r in records if r.getMessage().startswith("event=grant ")]
    assert grants and grants[0].levelno == logging.DEBUG
    assert "namespace=logged" in grants[0].getMessage()
    closed = [r for r in records if r.getMessage().startswith("event=closed ")]
    assert closed and closed[0].levelno == logging.INFO


def test_level_changes_take_effect_without_a_reset(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="grantid"):
        with grantid.Generator(grantid.MemoryAuthority(), namespace="quiet") as g:
            g.next_id()
    messages = [r.getMessage() for r in caplog.records if r.name == "grantid"]
    assert not any(m.startswith("event=grant ") for m in messages)
    assert any(m.startswith("event=closed ") for m in messages)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="grantid"):
        with grantid.Generator(grantid.MemoryAuthority(), namespace="loud") as g:
            g.next_id()
    assert any(r.getMessage().startswith("event=grant ") for r in caplog.records)


def test_lease_lost_is_an_error(caplog: pytest.LogCaptureFixture) -> None:
    authority = grantid.MemoryAuthority()
    seen = threading.Event()
    with caplog.at_level(logging.WARNING, logger="grantid"):
        with grantid.Generator(
            authority,
            namespace="lost-log",
            grant_duration_ms=20,
            horizon_ms=40,
            backoff_min=0.005,
            backoff_max=0.02,
            on_lease_lost=lambda e: seen.set(),
        ) as g:
            worker = g.stats()["worker"]
            assert worker is not None
            authority.steal("lost-log", worker, 12345, 2**40)
            assert seen.wait(5)
    lost = [r for r in caplog.records if r.getMessage().startswith("event=lease_lost ")]
    assert lost and lost[0].levelno == logging.ERROR


def test_a_raising_source_prints_nothing_to_stderr() -> None:
    # A fresh interpreter with logging left unconfigured: Python's
    # last-resort handler would print warnings to stderr without the
    # package's NullHandler.
    code = textwrap.dedent(
        """
        import grantid
        calls = []
        def source(request):
            calls.append(1)
            if len(calls) <= 3:
                raise ConnectionError("database is down")
            start = max(request.now, request.not_before)
            return request.grant(worker=1, start=start, end=start + request.duration, grant_id=1)
        with grantid.Generator(source, namespace="q", backoff_min=0.005, backoff_max=0.02) as g:
            print(g.next_id() > 0, g.stats()["uncertain_retries"])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "3"]
    assert out.stderr == ""
