"""Cancelling an engine's work from another thread: a client that went away.

A caller that runs a generation in a worker thread (``mars serve`` runs each question in one)
opens a :class:`CancelScope` around it (:func:`scope`); from any thread, :meth:`CancelScope.cancel`
then

* fails the batch driver at its next checkpoint (:func:`check`, called by
  :func:`mars.engines.generate.run_batch`), and
* cancels every request the scope's engine calls have in flight (:meth:`CancelScope.attach`: the
  server backend's requests), so the server stops generating for it at once.

Either way the worker's call raises :class:`Cancelled` and its ``finally`` blocks close the batch.
Code that opens no scope is unaffected (:func:`check` is a no-op).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar


class Cancelled(Exception):
    """The work was cancelled by its scope (not a user error: the caller asked for it)."""


class CancelScope:
    """A cancellation flag and the in-flight futures it cancels (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._futures: set[concurrent.futures.Future] = set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """Cancel now and from now on (idempotent)."""
        with self._lock:
            self._cancelled = True
            futures = list(self._futures)
        for fut in futures:
            fut.cancel()

    def check(self) -> None:
        if self._cancelled:
            raise Cancelled("cancelled")

    def attach(self, fut: concurrent.futures.Future) -> None:
        """Cancel ``fut`` with the scope (at once if the scope is already cancelled)."""
        with self._lock:
            if not self._cancelled:
                self._futures.add(fut)
                return
        fut.cancel()

    def detach(self, fut: concurrent.futures.Future) -> None:
        with self._lock:
            self._futures.discard(fut)


_current: ContextVar[CancelScope | None] = ContextVar("mars_cancel_scope", default=None)


def current() -> CancelScope | None:
    """The scope the calling code runs in (None: none)."""
    return _current.get()


def check() -> None:
    """Raise :class:`Cancelled` if the calling code's scope was cancelled."""
    s = _current.get()
    if s is not None:
        s.check()


@contextlib.contextmanager
def scope(s: CancelScope) -> Iterator[CancelScope]:
    """Run the block in ``s``."""
    token = _current.set(s)
    try:
        yield s
    finally:
        _current.reset(token)
