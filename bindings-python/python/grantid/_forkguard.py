"""Keeps fork() out of grant-source calls.

A grant source written in Python may hold a file lock, a connection in the
middle of a request, or a threading.Lock while the generator's renewal thread
runs it. If the process forks at that moment, the child inherits that state
half-done (a lock nobody will release, a socket mid-protocol). The binding
enters this guard around every call of a Python grant source, and the
``os.register_at_fork`` hooks of the package make fork() wait until no such
call is running (at most ``FORK_WAIT`` seconds, so a hung source cannot hang
fork()).
"""

from __future__ import annotations

import threading

FORK_WAIT = 5.0


class ForkGuard:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._calls = 0
        self._forking = False

    def enter(self) -> None:
        with self._cond:
            while self._forking:
                self._cond.wait()
            self._calls += 1

    def exit(self) -> None:
        with self._cond:
            self._calls -= 1
            if self._calls == 0:
                self._cond.notify_all()

    def before_fork(self) -> None:
        with self._cond:
            self._forking = True
            self._cond.wait_for(lambda: self._calls == 0, timeout=FORK_WAIT)

    def wait_idle(self, timeout: float) -> bool:
        """Waits until no grant-source call runs (at interpreter exit: a
        thread still inside Python code when the interpreter finalizes would
        take the process down)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._calls == 0, timeout=timeout)

    def after_fork_in_parent(self) -> None:
        with self._cond:
            self._forking = False
            self._cond.notify_all()

    def after_fork_in_child(self) -> None:
        # The calling thread is the only one left; start afresh.
        self._cond = threading.Condition()
        self._calls = 0
        self._forking = False


GUARD = ForkGuard()
