"""What ``mars serve`` asked its upstreams for, request by request, so its counts reconcile with
the engines' own (docs/serve.md, "Reconcile with your engine's dashboard").

Every upstream request of a question — a main trace's or a warmup trace's continuation, a probe,
an audit's request, a passed-through request — goes through one :class:`Ledger`, the question's,
which

* names it: ``X-Request-Id: <the question's id>-<kind>-<trace>-<n>`` (:meth:`Ledger.request_id`),
  so an engine's logs join with mars's records (vLLM takes the header as its request id);
* counts it once it ends, by kind (:data:`KINDS`) and how it ended (:data:`STATES`): *finished*,
  answered whole (the tokens it generated and the prompt tokens it computed and found cached, as
  the upstream reported them), or *stopped*, cancelled in flight by mars (a client that left, an
  audit pre-empted: what it asked for and its prompt's length are known, and the tokens a streamed
  request had brought — llama.cpp's; what the engine generated before it noticed lies between
  those and what was asked);
* adds the counts to the server's Prometheus counters as they come
  (``mars_serve_tokens_total{kind, state}``, :class:`mars.serve.metrics.Metrics`), so a
  question cancelled half-way is counted as well as one answered.

A request that failed at a replica (its tries spent, then sent to another) is not counted: what
the failed replica did with it is unknown.

After a stop, :class:`DrainWatch` reads the engine's running count (off the request path: the
answer never waits for it) and times how long the engine takes to drop what mars stopped
(:mod:`mars.serve.engine_metrics` reads the engines' counters).
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .engine_metrics import EngineMetricsUnavailable, read_engine

if TYPE_CHECKING:
    from ..engines.server import Completion
    from .metrics import Metrics

log = logging.getLogger("mars.serve")


class Replica(Protocol):
    """What the drain watch reads of an upstream (:class:`mars.serve.upstreams.Upstream`, which
    imports this module): its backend (whose engine counters are read), its URL as shown, and
    the requests mars has in flight there."""

    backend: Any
    url: str
    in_flight: int


#: What an upstream request was for: a main trace's continuation, a warmup trace's, a probe, a
#: request of the live audit (traces run on and their probes), a request passed through as it came.
KINDS = ("main", "warmup", "probe", "audit", "pass-through")
PASS_THROUGH = "pass-through"
#: How it ended: answered whole, or cancelled in flight by mars.
STATES = ("finished", "stopped")
#: The header every upstream request carries its id in.
REQUEST_ID_HEADER = "X-Request-Id"


@dataclass
class Tally:
    """Requests of one kind that ended one way, and their tokens."""

    requests: int = 0
    #: tokens asked for (max_tokens of each request)
    asked: int = 0
    #: tokens generated, as the upstream reported them (stopped requests: those their stream had
    #: brought, 0 when not streamed)
    generated: int = 0
    #: prompt tokens: as the upstream reported them (finished), as sent (stopped; token-id prompts)
    prompt: int = 0
    #: prompt tokens the upstream said it found in its prefix cache (finished requests)
    cached: int = 0


class Ledger:
    """One question's upstream requests (see the module docstring): ``rid`` its id, ``warmup``
    its warmup traces (the traces of index below it), ``kind``: a kind every request of this
    ledger has (``audit``), else each request's own; ``metrics``: the server's counters."""

    def __init__(
        self,
        rid: str,
        warmup: int = 0,
        metrics: Metrics | None = None,
        kind: str | None = None,
    ):
        self.rid = rid
        self.warmup = int(warmup)
        self.metrics = metrics
        self.kind = kind
        self.tallies: dict[tuple[str, str], Tally] = {}
        #: replica index -> requests stopped in flight there (what a :class:`DrainWatch` waits on)
        self.stopped_at: dict[int, int] = {}
        #: when the first request was stopped (time.monotonic; None: none was)
        self.stopped_time: float | None = None
        self._seq = 0
        self._lock = threading.Lock()

    def kind_of(self, trace: int | None, probe: bool) -> str:
        if self.kind is not None:
            return self.kind
        if probe:
            return "probe"
        return "warmup" if trace is not None and trace < self.warmup else "main"

    def request_id(self, kind: str, trace: int | None = None) -> str:
        """A new request's id: the question's, the request's kind, its trace, a number."""
        with self._lock:
            self._seq += 1
            n = self._seq
        where = "" if trace is None else f"-t{int(trace)}"
        return f"{self.rid}-{kind}{where}-{n}"

    def _add(
        self, kind: str, state: str, asked: int, generated: int, prompt: int, cached: int
    ) -> None:
        with self._lock:
            t = self.tallies.setdefault((kind, state), Tally())
            t.requests += 1
            t.asked += int(asked)
            t.generated += int(generated)
            t.prompt += int(prompt)
            t.cached += int(cached)
        if self.metrics is not None:
            self.metrics.upstream_request(kind, state, asked, generated, prompt, cached)

    def finished(self, kind: str, asked: int, c: Completion) -> None:
        """A request answered whole: its counts as the upstream reported them (a text-prompt
        server's own count of its tokens where it gives one)."""
        generated = c.server_tokens if c.server_tokens is not None else c.completion_tokens
        self._add(kind, "finished", asked, generated, c.prompt_tokens or 0, c.cached_tokens or 0)

    def answered(self, kind: str, asked: int, usage: Any) -> None:
        """A request answered whole whose answer is an OpenAI ``usage`` (passed through)."""
        u = usage if isinstance(usage, dict) else {}
        details = u.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        self._add(
            kind,
            "finished",
            asked,
            _count(u.get("completion_tokens")),
            _count(u.get("prompt_tokens")),
            _count(cached),
        )

    def stopped(
        self, kind: str, asked: int, prompt: int, replica: int | None = None, received: int = 0
    ) -> None:
        """A request cancelled in flight: what it asked for, its prompt as sent, and the tokens
        its stream had brought (``received``: a streamed request's)."""
        self._add(kind, "stopped", asked, received, prompt, 0)
        with self._lock:
            if self.stopped_time is None:
                self.stopped_time = time.monotonic()
            if replica is not None:
                self.stopped_at[replica] = self.stopped_at.get(replica, 0) + 1

    def totals(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{kind: {state: {requests, asked, generated, prompt, cached}}}`` of what ended."""
        with self._lock:
            out: dict[str, dict[str, dict[str, int]]] = {}
            for (kind, state), t in sorted(self.tallies.items()):
                out.setdefault(kind, {})[state] = asdict(t)
            return out

    def view(self) -> dict:
        """The response's ``mars.upstream``: the request ids' stem and the counts by kind."""
        return {"request_id": self.rid, "header": REQUEST_ID_HEADER, "requests": self.totals()}


class Relayed:
    """A passed-through request's counts, read off its answer as it is relayed: a whole answer's
    ``usage``, or a stream's last ``usage`` (a client that asked for it:
    ``stream_options.include_usage``); a stream that ends before its end is counted stopped."""

    def __init__(self, ledger: Ledger, body: dict):
        self.ledger = ledger
        asked = body.get("max_tokens", body.get("max_completion_tokens", body.get("n_predict")))
        self.asked = _count(asked) * max(_count(body.get("n")) or 1, 1)
        prompt = body.get("prompt")
        self.prompt = (
            len(prompt)
            if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)
            else 0
        )
        self._buffer = b""
        self._usage: Any = None
        self._done = False

    def whole(self, content: bytes) -> None:
        try:
            answer = json.loads(content)
        except (ValueError, RecursionError):
            return
        if isinstance(answer, dict):
            self._finish(answer.get("usage"))

    def part(self, data: bytes) -> None:
        """A relayed piece of a stream: its complete lines read for a ``usage``."""
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if not line.startswith(b"data:") or b'"usage"' not in line:
                continue
            with contextlib.suppress(ValueError, RecursionError):
                event = json.loads(line[5:])
                if isinstance(event, dict) and isinstance(event.get("usage"), dict):
                    self._usage = event["usage"]

    def end(self) -> None:
        self.part(b"\n")
        self._finish(self._usage)

    def stop(self) -> None:
        """The relay ended however it ended: one not finished was stopped."""
        if not self._done:
            self._done = True
            self.ledger.stopped(PASS_THROUGH, self.asked, self.prompt)

    def _finish(self, usage: Any) -> None:
        if not self._done:
            self._done = True
            self.ledger.answered(PASS_THROUGH, self.asked, usage)


def stream_events(data: bytes) -> list:
    """The JSON events of the whole lines of a stream cut short (``data: {...}``)."""
    events = []
    for line in data.split(b"\n")[:-1]:  # the last line may be cut
        if not line.startswith(b"data:"):
            continue
        with contextlib.suppress(ValueError, RecursionError):
            events.append(json.loads(line[5:]))
    return events


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


#: How long a watch waits for the engine to drop what was stopped, and how often it asks.
DRAIN_TIMEOUT_S = 10.0
DRAIN_POLL_S = 0.05


class DrainWatch:
    """After a stop, one background thread reads each replica's running count (its ``/metrics``)
    until the engine runs no more requests than mars has in flight there: the first count read
    (``mars_serve_engine_running_after_stop``) and the seconds from the stop to then
    (``mars_serve_engine_drain_seconds``; ``..._drain_timeouts_total`` past
    :data:`DRAIN_TIMEOUT_S`). A replica whose metrics cannot be read (llama.cpp without
    ``--metrics``) is said once and not asked again. Watches queue behind each other (at most
    one per replica waiting); the answers never wait for them."""

    def __init__(
        self,
        metrics: Metrics,
        upstreams: Sequence[Replica],
        timeout: float = DRAIN_TIMEOUT_S,
        poll: float = DRAIN_POLL_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.metrics = metrics
        self.upstreams = upstreams
        self.timeout = float(timeout)
        self.poll = float(poll)
        self.clock = clock
        self._queue: queue.Queue = queue.Queue()
        self._waiting: set[int] = set()
        self._off: set[int] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def stopped(self, replicas: dict[int, int] | list[int], at: float | None = None) -> None:
        """Requests were stopped at ``replicas`` (indexes) at ``at`` (now if None)."""
        at = self.clock() if at is None else at
        with self._lock:
            if self._closed:
                return
            for i in replicas:
                if i in self._off or i in self._waiting or not 0 <= i < len(self.upstreams):
                    continue
                self._waiting.add(i)
                self._queue.put((i, at))
            if self._thread is None and not self._queue.empty():
                self._thread = threading.Thread(
                    target=self._loop, daemon=True, name="mars-drain-watch"
                )
                self._thread.start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._queue.put(None)

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            i, at = item
            with self._lock:
                self._waiting.discard(i)
            try:
                self._watch(i, at)
            except Exception as exc:  # a bug: said, the server goes on
                log.error("the engine's running count could not be watched", exc_info=exc)

    def _watch(self, i: int, at: float) -> None:
        u = self.upstreams[i]
        first = True
        while True:
            try:
                running = read_engine(u.backend).running
            except EngineMetricsUnavailable as exc:
                with self._lock:
                    self._off.add(i)
                log.warning(
                    "upstream %s: its counters cannot be read (%s); the time a stop takes there "
                    "is not measured",
                    u.url,
                    exc,
                )
                return
            now = self.clock()
            if first:
                self.metrics.engine_running_after_stop.labels(u.url).set(running)
                first = False
            if running <= u.in_flight:
                self.metrics.engine_drain_seconds.labels(u.url).observe(max(now - at, 0.0))
                return
            if now - at > self.timeout:
                self.metrics.engine_drain_timeouts.labels(u.url).inc()
                return
            time.sleep(self.poll)
