"""Sharing the upstreams between many clients: a bounded queue, served fairly.

At most ``max_active`` requests run at once (each a question of N parallel traces, or one
passed-through request); up to ``max_queue`` more wait. Waiting requests are served round-robin
by client (the request's ``user`` field, else the client's address), so one client's burst does
not starve another; within a client, first come first served.

Admission is decided at once, before any byte of an answer (:meth:`Scheduler.admit`): a request
gets a :class:`Ticket` — a slot now, or a place in the queue — or, when the queue is full, is
refused (HTTP 429) with ``Retry-After``: the seconds the queue ahead of it should take, from the
mean time recent requests held a slot. A ticket is then waited on (``async with ticket``); a
request that goes away while it waits leaves the queue, and a ticket released before its turn
passes the slot on. Runs on the server's event loop (not thread-safe).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator

#: Weight of the newest request in the running mean of the time a request holds a slot.
EWMA = 0.2
#: Bounds of Retry-After (seconds).
MIN_RETRY, MAX_RETRY = 1, 600


class QueueFull(Exception):
    """The queue is full: come back after ``retry_after`` seconds."""

    def __init__(self, retry_after: int, queued: int):
        super().__init__(
            f"the server is busy ({queued} requests waiting); retry in {retry_after} s"
        )
        self.retry_after = retry_after


class Ticket:
    """One admitted request's claim: a slot (``active``) or a place in the queue (``queued``),
    until :meth:`release` (``done``). Released exactly once, however the request ends."""

    def __init__(self, scheduler: Scheduler, client: str, turn: asyncio.Future | None):
        self._s, self._client, self._turn = scheduler, client, turn
        self.state = "queued" if turn is not None else "active"
        self._t0 = time.monotonic()

    async def wait(self) -> None:
        """Wait for the slot (at once when it holds one); cancelled, the request leaves the
        queue."""
        if self.state != "queued":
            return
        assert self._turn is not None
        try:
            await self._turn
        except asyncio.CancelledError:
            self.release()
            raise
        self.state, self._t0 = "active", time.monotonic()

    def release(self) -> None:
        """Free the slot (or the place in the queue); a second call does nothing."""
        s, turn = self._s, self._turn
        if self.state == "active":
            held = time.monotonic() - self._t0
            s.mean_s = held if s.mean_s is None else (1 - EWMA) * s.mean_s + EWMA * held
            s._release()
        elif self.state == "queued" and turn is not None:
            if turn.done() and not turn.cancelled():  # the slot was handed over: pass it on
                s._release()
            else:
                turn.cancel()
                s._forget(self._client, turn)
        self.state = "done"

    async def __aenter__(self) -> Ticket:
        await self.wait()
        return self

    async def __aexit__(self, *exc) -> None:
        self.release()


class Scheduler:
    """Admission of requests (see the module docstring)."""

    def __init__(self, max_active: int, max_queue: int):
        if max_active < 1 or max_queue < 0:
            raise ValueError("max_active ≥ 1 and max_queue ≥ 0")
        self.max_active, self.max_queue = int(max_active), int(max_queue)
        self.active = 0
        self._queues: dict[str, deque[asyncio.Future]] = {}
        self._turns: deque[str] = deque()  # clients with waiting requests, in serving order
        self.mean_s: float | None = None  # running mean of the time a request holds a slot

    @property
    def queued(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def retry_after(self) -> int:
        mean = self.mean_s if self.mean_s is not None else 10.0
        ahead = self.queued + 1
        est = math.ceil(mean * ahead / self.max_active)
        return max(MIN_RETRY, min(MAX_RETRY, est))

    def full(self) -> bool:
        """Whether a request arriving now would be refused."""
        return self.active >= self.max_active and self.queued >= self.max_queue

    def admit(self, client: str) -> Ticket:
        """A slot now, or a place in the queue; :class:`QueueFull` when it is full."""
        if self.active < self.max_active and not self._turns:
            self.active += 1
            return Ticket(self, client, None)
        if self.queued >= self.max_queue:
            raise QueueFull(self.retry_after(), self.queued)
        turn: asyncio.Future = asyncio.get_running_loop().create_future()
        if client not in self._queues:
            self._queues[client] = deque()
            self._turns.append(client)
        self._queues[client].append(turn)
        return Ticket(self, client, turn)

    @contextlib.asynccontextmanager
    async def slot(self, client: str) -> AsyncIterator[None]:
        """Hold a slot for the block; wait for one fairly, or :class:`QueueFull`."""
        async with self.admit(client):
            yield

    def _forget(self, client: str, turn: asyncio.Future) -> None:
        q = self._queues.get(client)
        if q is None:
            return
        with contextlib.suppress(ValueError):
            q.remove(turn)
        if not q:
            del self._queues[client]
            with contextlib.suppress(ValueError):
                self._turns.remove(client)

    def _release(self) -> None:
        """Hand the slot to the next waiting request (round-robin by client), else free it."""
        while self._turns:
            client = self._turns.popleft()
            q = self._queues[client]
            turn = q.popleft()
            if q:
                self._turns.append(client)
            else:
                del self._queues[client]
            if not turn.done():
                turn.set_result(None)
                return
        self.active -= 1
