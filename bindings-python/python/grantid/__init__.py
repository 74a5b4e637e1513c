"""grantid: unique, roughly time-sorted, positive 63-bit IDs.

IDs are issued inside this process, without a network round trip per ID,
inside *grants*: intervals of ticks that an authority reserved durably for
one worker value, never twice.

    import grantid

    with grantid.Generator("file:/var/lib/myapp/grantid.json", namespace="orders-v1") as gen:
        order_id = gen.next_id()

* Thread-safe: share one generator between threads; ``next_id`` releases
  the GIL.
* ``fork()``-safe: a child (multiprocessing, gunicorn pre-fork) gets a fresh
  incarnation, a new worker and a new grant before its first ID.
* Errors are subclasses of ``GrantIdError`` with a stable ``code``.
* asyncio: ``await Generator.start_async(source, namespace=...)``; an
  ``async def`` grant source runs on that loop (see ``grantid._aio``).
* Logging: the core's events (``event=grant``, ``event=grant_uncertain``,
  ``event=lease_lost``, ...) go to ``logging.getLogger("grantid")`` at the
  core's levels; like any library, the package adds only a ``NullHandler``.
"""

from __future__ import annotations

import atexit
import logging
import os
from typing import Callable, List

from . import _grantid
from . import _forkguard
from ._forkguard import GUARD as _FORK_GUARD
from ._grantid import (
    DEFAULT_EPOCH_MS,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_DRIFT_MS,
    Closed,
    CapacityExhausted,
    ClockRollback,
    Decoded,
    Generator,
    Grant,
    GrantExhausted,
    GrantIdError,
    GrantRequest,
    InvalidArgument,
    LeaseLost,
    LeaseLostEvent,
    Layout,
    ManualClock,
    MemoryAuthority,
    NotYetValid,
    PublicIds,
    Unavailable,
    decode,
    log_bridge_installed,
    parse_id,
)

__all__ = [
    "DEFAULT_EPOCH_MS",
    "DEFAULT_MAX_BATCH",
    "DEFAULT_MAX_DRIFT_MS",
    "CapacityExhausted",
    "ClockRollback",
    "Closed",
    "Decoded",
    "Generator",
    "Grant",
    "GrantExhausted",
    "GrantIdError",
    "GrantRequest",
    "InvalidArgument",
    "Layout",
    "LeaseLost",
    "LeaseLostEvent",
    "ManualClock",
    "MemoryAuthority",
    "NotYetValid",
    "PublicIds",
    "Unavailable",
    "decode",
    "log_bridge_installed",
    "parse_id",
]

# A library's logger: records propagate to the application's handlers, and
# nothing is printed when the application configured none.
logging.getLogger("grantid").addHandler(logging.NullHandler())

__version__: str = _grantid.__version__

# Functions run in a fork() child before anything else: the helpers in
# grantid.authorities drop connections inherited from the parent here.
_after_fork_in_child: List[Callable[[], None]] = []


def _run_after_fork_in_child() -> None:
    _FORK_GUARD.after_fork_in_child()
    # The generators themselves need nothing here: the core sees the fork
    # (pthread_atfork) and, on a generator's first call in the child, makes
    # a fresh incarnation and acquires a new worker and grant through the
    # same grant source, which runs in the child's own renewal thread.
    for hook in list(_after_fork_in_child):
        hook()


if hasattr(os, "register_at_fork"):
    # before: wait until no Python grant source is running (see _forkguard).
    os.register_at_fork(
        before=_FORK_GUARD.before_fork,
        after_in_parent=_FORK_GUARD.after_fork_in_parent,
        after_in_child=_run_after_fork_in_child,
    )


def _shutdown() -> None:
    # Close open generators (releasing their workers) while the interpreter
    # can still run their Python grant sources; no new source call starts
    # after this, and a call still running gets a few seconds to return.
    _grantid._shutdown()
    _FORK_GUARD.wait_idle(_forkguard.FORK_WAIT)


atexit.register(_shutdown)
