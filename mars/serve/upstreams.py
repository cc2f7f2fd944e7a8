"""The upstream servers: replicas of one model that the traces of every question share.

``mars serve --upstream URL`` (repeatable) connects to each replica with the server backend
(:class:`mars.engines.server.ServerBackend`: kind of server, model, tokenizer, top-20
log-probabilities, all checked once at start) and routes every generation and probe request of a
question through :class:`Router`:

* every request of a trace — each checkpoint's continuation and each probe — goes to the replica
  that holds the trace's prefix in its cache (``--routing``,
  :data:`mars.serve.options.ROUTINGS`; default
  ``trace``): a question's traces are dealt to the replicas in turn from a place drawn from the
  question's seed and prompt (:meth:`Router.home`), so a question's traces are spread evenly
  and the placement is the same for the same replicas and seed, on every proxy; ``question``
  puts all of a question's traces on one replica, ``load`` sends each request to the least
  loaded (no affinity). benchmarks/README.md ("Trace-affine routing") has the measurements;
* a passed-through request (of no trace) goes to the live replica with the fewest requests in
  flight, which counts every request the router sent there, of a trace or not (each replica
  bounds its own in-flight requests, ``--concurrency``, default its slots); the tokenizer's
  requests go to the first live replica;
* a request a replica fails every try of (no connection, timeouts, 429/5xx: the backend's bounded
  retries, :class:`~mars.engines.server.ServerUnavailable`) marks the replica down (one log line)
  and its traces move to the others, dealt in turn over the replicas still up, where they stay
  for the rest of their question: a trace is token ids on our side and its request carries its
  own seed, so any replica continues it. With no replica left the question fails with one line
  (HTTP 502), never a hang; a replica marked down is asked again (``GET /v1/models``,
  :data:`ALIVE`) every :data:`REVIVE_S` seconds, and new traces are placed on it once it is back;
* ``--affinity-header NAME``: every trace request carries its trace's key in that header
  (:func:`affinity_key`), for a router of its own in front of the replicas (llm-d, Dynamo, …):
  docs/serve.md, "Deployment";
* a request the client no longer wants (:mod:`mars.engines.cancel`) is cancelled in flight, so
  the server stops generating it.

``--upstream synthetic`` (or ``synthetic:PRESET``) serves the synthetic engine instead: no server,
for trying the proxy and for its fast tests.

Each question gets a *view* of the upstreams (:meth:`Upstreams.backend`): the first replica's
backend with the question's own prompt (the client's text or chat template, not the problem
template), token cap and sampling, whose requests the router sends.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import functools
import hashlib
import logging
import re
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engines import cancel
from ..engines.base import Backend
from ..engines.endpoint import check_base_url, redact
from ..engines.server import (
    PROTOCOLS,
    Completion,
    Sampling,
    ServerBackend,
    ServerError,
    ServerUnavailable,
    TraceKey,
    answer_limit,
    normalise_base_url,
)
from ..errors import MarsError, UsageError
from ..method.answers import extract_with, normalize_answer
from .options import SERVE, UPSTREAM_TIMEOUT_S
from .reconcile import REQUEST_ID_HEADER, Ledger, stream_events

log = logging.getLogger(__name__)

#: Seconds between two health checks of a replica marked down.
REVIVE_S = 5.0
#: What a replica marked down is asked: every OpenAI-compatible server answers it with JSON once
#: it serves (llama.cpp: 503 while its model loads). Not ``/health``: vLLM's and SGLang's answer
#: 200 with no body, which is not JSON (a restarted vLLM replica was never taken back).
ALIVE = "/v1/models"
#: What ``--upstream`` takes for the synthetic engine.
SYNTHETIC = "synthetic"
#: How a question's trace requests are placed on the replicas (``--routing``): ``trace`` (each
#: trace kept on one replica, a question's traces spread over them), ``question`` (all of a
#: question's traces on one replica), ``load`` (each request to the least loaded).
#: Headers the affinity key may not be sent in (the request's own).
RESERVED_HEADERS = frozenset(
    {"authorization", "content-type", "content-length", "host", "connection", "transfer-encoding",
     "accept", "accept-encoding", "user-agent", "cookie"}
)  # fmt: skip
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def question_key(seed: int, qid: int) -> int:
    """A question's place among the replicas: 64 bits drawn from its seed and its id (the id of
    its prompt), the same in every process."""
    digest = hashlib.blake2b(f"{int(seed)}:{int(qid)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def affinity_key(key: TraceKey) -> str:
    """What ``--affinity-header`` sends for a request of trace ``key``: the question's key in
    hex, a dash, the trace's index (``9f3c0a2e41b7d605-12``). The whole value names the trace;
    the part before the dash, the question."""
    seed, qid, trace = key
    return f"{question_key(seed, qid):016x}-{int(trace)}"


def check_header_name(name: str) -> str:
    """An HTTP header name the affinity key may go in (one line otherwise)."""
    if not _TOKEN.match(name or "") or name.lower() in RESERVED_HEADERS:
        raise UsageError(
            f"--affinity-header {name!r}: not a header name of its own (letters, digits, "
            "'-'; not one a request already sends)"
        )
    return name


class NoUpstream(ServerError):
    """Every replica is down (HTTP 502)."""


@dataclass
class Upstream:
    """One replica and what the router knows of it. ``url`` is how it is shown — in messages,
    logs, ``/health`` and metric labels — with any credentials of its URL hidden (the backend
    keeps the URL it connects to)."""

    url: str
    backend: ServerBackend
    up: bool = True
    in_flight: int = 0
    errors: int = 0
    last_error: str = ""
    down_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class Router:
    """Requests of every question across the replicas (see the module docstring)."""

    def __init__(
        self,
        upstreams: Sequence[Upstream],
        on_error=None,
        routing: str = SERVE["routing"].default,
        affinity_header: str | None = None,
    ):
        SERVE["routing"].check(routing)
        self.upstreams = list(upstreams)
        self.on_error = on_error  # called with (upstream, message) when a request fails there
        self.routing = routing
        self.affinity_header = (
            None if affinity_header is None else check_header_name(affinity_header)
        )
        # the replicas in the order traces are dealt to: by URL, whatever the order given
        self._ring = sorted(range(len(self.upstreams)), key=lambda i: self.upstreams[i].url)
        self._lock = threading.Lock()

    def live(self) -> list[Upstream]:
        return [u for u in self.upstreams if u.up]

    def _slot(self, key: TraceKey) -> int:
        seed, qid, trace = key
        q = question_key(seed, qid)
        return q if self.routing == "question" else q + int(trace)

    def home(self, key: TraceKey) -> int:
        """The replica (its index) trace ``key`` is placed on while every replica is up: the
        question's key picks where its traces start, the trace's index deals them on in turn
        (``question``: every trace at the start)."""
        return self._ring[self._slot(key) % len(self._ring)]

    def _pick(
        self,
        avoid: set[int],
        key: TraceKey | None = None,
        placed: dict[TraceKey, int] | None = None,
    ) -> Upstream:
        """The replica of a request (counted in its load until :meth:`_done`): a trace's where it
        was placed, else its home, else (its home down) dealt over the live replicas; any other
        request, or ``load`` routing: the least loaded. ``avoid``: replicas this request failed
        at (taken only when no other is live); ``placed``: where the traces of the request's
        question went, kept up to date."""
        with self._lock:
            ok = [i for i, u in enumerate(self.upstreams) if u.up and i not in avoid]
            if not ok:
                ok = [i for i, u in enumerate(self.upstreams) if u.up]
            if not ok:
                why = "; ".join(f"{u.url}: {u.last_error}" for u in self.upstreams)
                raise NoUpstream(f"no upstream server is reachable ({why})")
            if key is None or self.routing == "load":
                i = min(ok, key=lambda i: self.upstreams[i].in_flight)
            else:
                i = -1 if placed is None else placed.get(key, -1)
                if i not in ok:
                    i = self.home(key)
                    if i not in ok:
                        ring = [j for j in self._ring if j in ok]
                        i = ring[self._slot(key) % len(ring)]
                    if placed is not None:
                        placed[key] = i
            u = self.upstreams[i]
            u.in_flight += 1
            return u

    def _done(self, u: Upstream) -> None:
        with self._lock:
            u.in_flight -= 1

    def take(self, avoid: frozenset[int] = frozenset()) -> tuple[int, Upstream]:
        """A replica (and its index) for a request made outside the router (a passed-through
        one), the least loaded not in ``avoid`` (else any live one), counted in its load until
        :meth:`give_back`; :class:`NoUpstream` when none is live."""
        u = self._pick(set(avoid))
        return self.upstreams.index(u), u

    def give_back(self, u: Upstream) -> None:
        self._done(u)

    def mark_down(self, u: Upstream, why: str) -> None:
        """Take ``u`` out (one log line, however many traces it held): its traces go on on the
        other replicas, from their token ids."""
        with self._lock:
            if u.up:
                moved = (
                    "; its traces go on on the other replicas, continued from their token ids"
                    if len(self.upstreams) > 1
                    else ""
                )
                log.warning("upstream %s is down: %s%s", u.url, why, moved)
            u.up, u.last_error, u.down_at = False, why, time.monotonic()

    def post_all(
        self,
        path: str,
        bodies: Sequence[dict],
        limits: Sequence[tuple[int, str]],
        merge: Callable[[list], Any] | None = None,
        keys: Sequence[TraceKey] | None = None,
        placed: dict[TraceKey, int] | None = None,
        request_ids: Sequence[str] | None = None,
        on_answer: Callable[[int, Any], Any] | None = None,
        on_stopped: Callable[[int, int, bytes], None] | None = None,
    ) -> list[Any]:
        """POST every body (each to a replica), answers in order; a replica that fails a
        request every try is marked down and the request goes to another. ``limits``: each
        answer's bound in bytes and what its request asked for (:meth:`Http.request`);
        ``merge``: the requests are streamed, and ``merge`` makes each one's events its
        answer; ``keys``: the trace of each request (placed as :meth:`_pick` says, and sent in
        :attr:`affinity_header`), ``placed`` where its question's traces are; ``request_ids``: each
        request's id, sent in ``X-Request-Id`` (:mod:`mars.serve.reconcile`); ``on_answer(i,
        answer)``: called as each answer comes, what it returns the answer kept;
        ``on_stopped(i, replica, received)``: called for each request cancelled in flight (its
        replica's index, and the bytes of its stream received by then: ``merge`` only)."""
        scope = cancel.current()
        outs: list[Any] = [None] * len(bodies)
        pending: dict[concurrent.futures.Future, tuple[int, int, Upstream]] = {}
        tried: dict[int, set[int]] = {}
        # a streamed request's bytes as they come (what one stopped in flight had received)
        received: dict[int, list[bytes]] = {}

        header = self.affinity_header if keys is not None else None

        def send(i: int) -> None:
            key = None if keys is None else keys[i]
            u = self._pick(tried.setdefault(i, set()), key, placed)
            idx = self.upstreams.index(u)
            tried[i].add(idx)
            http, body, (limit, asked) = u.backend.http, bodies[i], limits[i]
            own = {} if header is None or key is None else {header: affinity_key(key)}
            if request_ids is not None:
                own[REQUEST_ID_HEADER] = request_ids[i]
            got: list[bytes] | None = None
            if merge is not None and on_stopped is not None:
                got = received[i] = []
            fut = http.submit(
                lambda: http.post(
                    path,
                    body,
                    limit,
                    asked,
                    sse=merge is not None,
                    headers=own or None,
                    progress=got,
                )
            )
            if scope is not None:
                scope.attach(fut)
            pending[fut] = (i, idx, u)

        try:
            for i in range(len(bodies)):
                send(i)
            while pending:
                done, _ = concurrent.futures.wait(
                    pending, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for fut in done:
                    i, idx, u = pending.pop(fut)
                    self._done(u)
                    if scope is not None:
                        scope.detach(fut)
                    if fut.cancelled():
                        if on_stopped is not None:
                            on_stopped(i, idx, b"".join(received.get(i) or ()))
                        raise cancel.Cancelled("cancelled")
                    exc = fut.exception()
                    if exc is None:
                        outs[i] = fut.result() if merge is None else merge(fut.result())
                        if on_answer is not None:
                            outs[i] = on_answer(i, outs[i])
                        continue
                    u.errors += 1
                    why = exc.without_hint() if isinstance(exc, ServerError) else str(exc)
                    if self.on_error is not None:
                        self.on_error(u, why)
                    if not isinstance(exc, ServerUnavailable):
                        raise exc
                    self.mark_down(u, why)
                    send(i)  # NoUpstream when none is left
        finally:
            for fut, (i, idx, u) in pending.items():
                stopped = fut.cancel()
                self._done(u)
                if scope is not None:
                    scope.detach(fut)
                if stopped and on_stopped is not None:
                    on_stopped(i, idx, b"".join(received.get(i) or ()))
                elif not stopped and on_answer is not None and fut.exception() is None:
                    with contextlib.suppress(Exception):  # answered, then left: still counted
                        on_answer(i, fut.result() if merge is None else merge(fut.result()))
        return outs

    def request(self, path: str, body: dict) -> tuple[int, Any]:
        """(status, JSON) of ``POST path`` from the first live replica that answers (the
        tokenizer's questions)."""
        last: ServerUnavailable | None = None
        for u in self.live() or self.upstreams:
            http = u.backend.http
            try:
                return http.run(functools.partial(http.request, "POST", path, body, timeout=30.0))
            except ServerUnavailable as exc:
                self.mark_down(u, exc.without_hint())
                last = exc
        raise NoUpstream(
            f"no upstream server is reachable ({last.without_hint() if last else 'none given'})"
        )

    def revive(self) -> None:
        """Ask every replica marked down for :data:`ALIVE` (at most every :data:`REVIVE_S` s)."""
        now = time.monotonic()
        for u in self.upstreams:
            if u.up or now - u.down_at < REVIVE_S:
                continue
            u.down_at = now
            http = u.backend.http
            try:
                status, _ = http.run(
                    functools.partial(http.request, "GET", ALIVE, retry_connect=False, timeout=5.0)
                )
            except (ServerError, OSError):
                continue
            if status == 200:
                log.warning("upstream %s is back", u.url)
                u.up = True


class ServedBackend(ServerBackend):
    """One question's view of the replicas: the first replica's backend (tokenizer, protocol,
    context) with the question's prompt, token cap and sampling, its requests sent by the
    router. Made by :meth:`Upstreams.backend`; no connection of its own."""

    def __init__(
        self,
        base: ServerBackend,
        router: Router,
        prompt: str,
        prompt_ids: list[int],
        max_tokens: int,
        sampling: Sampling,
        answer_pattern: re.Pattern[str] | None = None,
    ):  # a shallow copy: the replicas' HTTP clients and stats are shared
        self.__dict__.update(copy.copy(base.__dict__))
        self.router = router
        self._prompt, self._prompt_ids = prompt, list(prompt_ids)
        self.max_tokens = int(max_tokens)
        self.sampling = sampling
        self.answer_pattern = answer_pattern
        #: where the router placed each trace of the question (a trace moved off a replica that
        #: failed stays where it went, with its prefix, for the rest of the question)
        self.placed: dict[TraceKey, int] = {}
        #: the question's upstream requests, named and counted (None: neither)
        self.ledger: Ledger | None = None

    def final_answer(self, text: str | None) -> str | None:
        """The question's answer format: its pattern's last match, else the last boxed."""
        if self.answer_pattern is None:
            return super().final_answer(text)
        return normalize_answer(extract_with(self.answer_pattern, text))

    def prompt_ids(self, question: str) -> list[int]:
        if question != self._prompt:
            raise RuntimeError("a served question's view asked for another prompt")
        return list(self._prompt_ids)

    def prompt_text(self, question: str) -> str:
        """A text-prompt server's prompt: the question's text as the client gave it (or its
        chat template)."""
        if question != self._prompt:
            raise RuntimeError("a served question's view asked for another prompt")
        return question

    def complete(
        self,
        requests: Sequence[tuple[list[int] | str, int, int | None]],
        logprobs: bool,
        traces: Sequence[TraceKey] | None = None,
    ) -> list[Completion]:
        """The requests through the router, each of a trace to the replica that holds the trace
        (``traces``: the trace of each); streamed to a server that stops a request only when
        its stream is closed (:attr:`~mars.engines.server.Protocol.streamed`: llama.cpp), so a
        cancelled question stops there at once."""
        p = self.protocol
        bodies = [p.body(ids, m, self.sampling, s, logprobs) for ids, m, s in requests]
        limits = [
            (answer_limit(m, logprobs, prompt), f"a request of {m} tokens")
            for prompt, m, _ in requests
        ]
        merge = p.merge_stream if p.streamed else None
        if merge is not None:
            bodies = [{**b, "stream": True} for b in bodies]
        ledger = self.ledger
        if ledger is None:
            outs = self.router.post_all(p.path, bodies, limits, merge, traces, self.placed)
            return [self.read(o, m, logprobs) for o, (_, m, _) in zip(outs, requests)]
        # each request named, and counted as it ends (mars.serve.reconcile)
        kinds = [
            ledger.kind_of(None if traces is None else int(traces[i][2]), not logprobs)
            for i in range(len(requests))
        ]
        ids = [
            ledger.request_id(k, None if traces is None else int(traces[i][2]))
            for i, k in enumerate(kinds)
        ]

        def answered(i: int, out: Any) -> Completion:
            c = self.read(out, requests[i][1], logprobs)
            ledger.finished(kinds[i], requests[i][1], c)
            return c

        def stopped(i: int, replica: int, got: bytes) -> None:
            prompt = requests[i][0]
            ledger.stopped(
                kinds[i],
                requests[i][1],
                len(prompt) if isinstance(prompt, list) else 0,
                replica,
                p.streamed_tokens(stream_events(got)) if got else 0,
            )

        return self.router.post_all(
            p.path, bodies, limits, merge, traces, self.placed, ids, answered, stopped
        )

    def close(self) -> None:  # the replicas outlive the question
        pass


class _Streamed(Mapping[str, Callable[[list], Any]]):
    """The servers the proxy streams its requests to (:attr:`Protocol.streamed
    <mars.engines.server.Protocol.streamed>`), by kind, and how each one's stream reads back into
    its answer: a view of :data:`~mars.engines.server.PROTOCOLS` as it is now."""

    def _of(self) -> dict[str, Callable[[list], Any]]:
        return {kind: p.merge_stream for kind, p in PROTOCOLS.items() if p.streamed}

    def __getitem__(self, kind: str) -> Callable[[list], Any]:
        return self._of()[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(self._of())

    def __len__(self) -> int:
        return len(self._of())


#: Servers the proxy streams its requests to, and how a stream reads back into an answer.
STREAMED: Mapping[str, Callable[[list], Any]] = _Streamed()


def synthetic_truth(prompt: str) -> str:
    """The answer the synthetic engine's traces tend to for ``prompt``: the answer of the bundled
    problem whose text the prompt holds (a first try of the proxy shows a right answer for a
    right question), else a number drawn from the prompt's text."""
    for text, answer in _bundled():
        if text in prompt:
            return answer
    return str(zlib.crc32(prompt.encode()) % 1000)


@functools.cache
def _bundled() -> tuple[tuple[str, str], ...]:
    """(question text, answer) of every bundled problem, the longest texts first."""
    from ..store.problems import bundled_problem_sets, load_problems

    found = [
        (p.question.strip(), str(p.answer))
        for name in bundled_problem_sets()
        for p in load_problems(name)
        if p.question.strip() and p.answer is not None
    ]
    return tuple(sorted(found, key=lambda qa: -len(qa[0])))


class Upstreams:
    """The replicas ``mars serve`` fronts (or the synthetic engine), connected and checked."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        model: str | None = None,
        api_key_env: str = "MARS_API_KEY",
        concurrency: int | None = None,
        timeout: float = UPSTREAM_TIMEOUT_S,
        retries: int = SERVE["retries"].default,
        tokenizer: str | None = None,
        on_error=None,
        routing: str = SERVE["routing"].default,
        affinity_header: str | None = None,
        **options: Any,
    ):
        """``options``: further :class:`~mars.engines.server.ServerBackend` keyword arguments
        (sampling, ``probe_max_new_tokens``, ...); ``routing``, ``affinity_header``: the
        router's (:class:`Router`)."""
        if not urls:
            raise UsageError("--upstream: give at least one (a server URL, or synthetic)")
        Router([], routing=routing, affinity_header=affinity_header)  # checked before connecting
        self.synthetic: Backend | None = None
        self.list: list[Upstream] = []
        if len(urls) == 1 and str(urls[0]).split(":", 1)[0] == SYNTHETIC:
            from ..engines.factory import make_backend

            preset = str(urls[0]).partition(":")[2] or None
            self.synthetic = make_backend(SYNTHETIC, preset=preset)
            self.model = model or self.synthetic.model
            self.router = Router([])
            return
        if any(str(u).split(":", 1)[0] == SYNTHETIC for u in urls):
            raise UsageError("--upstream synthetic serves alone (no server URL beside it)")
        for url in urls:  # every URL is well formed before the first is connected to
            check_base_url(url, "--upstream")
        seen = set()
        try:
            for url in urls:
                norm = normalise_base_url(url)
                if redact(norm) in seen:
                    raise UsageError(f"--upstream {redact(url)}: given twice")
                seen.add(redact(norm))
                be = ServerBackend(
                    model,
                    base_url=norm,
                    api_key_env=api_key_env,
                    concurrency=concurrency,
                    timeout=timeout,
                    retries=retries,
                    tokenizer=tokenizer,
                    **options,
                )
                self.list.append(Upstream(redact(norm), be))
                model = model or be.model
                first = self.list[0].backend
                if (
                    be.protocol.kind != first.protocol.kind
                    or be.vocab_digest() != first.vocab_digest()
                ):
                    raise UsageError(
                        f"--upstream {redact(url)}: a {be.protocol.kind} server of another "
                        f"tokenizer than {first.base_url}'s: the upstreams must be replicas of one "
                        "model"
                    )
        except BaseException:
            self.close()
            raise
        self.model = self.list[0].backend.model
        self.router = Router(self.list, on_error, routing, affinity_header)
        tok = self.primary.tokenizer
        if getattr(tok, "_request", None) is not None:  # the server's tokenizer: any replica
            tok._request = self.router.request

    @property
    def primary(self) -> ServerBackend:
        return self.list[0].backend

    def context(self) -> int | None:
        """The smallest context length of the replicas (None: not known)."""
        lens = [u.backend.context_len for u in self.list if u.backend.context_len]
        return min(lens) if lens else None

    def describe(self) -> list[dict]:
        """The replicas for ``/health``: where, up or down, requests in flight, errors."""
        return [
            {
                "url": u.url,
                "up": u.up,
                "in_flight": u.in_flight,
                "errors": u.errors,
                "kind": u.backend.protocol.kind,
            }
            for u in self.list
        ]

    def any_up(self) -> bool:
        return self.synthetic is not None or any(u.up for u in self.list)

    def render(self, kind: str, prompt: str | None, messages: list[dict] | None) -> str:
        """The prompt text the model continues: the client's completion prompt as it is, or its
        conversation through the model's chat template (generation prompt added)."""
        if prompt is not None:
            return prompt
        assert messages is not None
        if self.synthetic is not None:
            return "".join(f"{m['role']}: {m['content']}\n" for m in messages)
        tok = self.primary.tokenizer
        if not getattr(tok, "chat_template", None):
            raise MarsError(
                "the model's tokenizer has no chat template: use /v1/completions with the "
                "prompt's text"
            )
        msgs = [{"role": m["role"], "content": m["content"]} for m in messages]
        return str(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False))

    def tokenize(self, kind: str, text: str) -> list[int] | None:
        """The prompt's token ids (a completion prompt with the model's own special tokens, as a
        server adds them to a text prompt; a chat template's text holds them already)."""
        if self.synthetic is not None:
            return None
        tok = self.primary.tokenizer
        return [int(i) for i in tok(text, add_special_tokens=kind != "chat")["input_ids"]]

    def default_max_tokens(self, prompt_len: int) -> int | None:
        """The most tokens a trace can have after a prompt of ``prompt_len`` tokens (probe
        included) within the smallest context; None: no limit known."""
        ctx = self.context()
        if ctx is None:
            return None
        be = self.primary
        return ctx - prompt_len - len(be.suffix_ids) - int(be.probe_max_new_tokens)

    def backend(
        self,
        prompt: str,
        prompt_ids: list[int] | None,
        max_tokens: int,
        temperature: float | None,
        top_p: float | None,
        answer_pattern: re.Pattern[str] | None = None,
    ) -> Backend:
        """The view of one question (synthetic: the engine itself, which keeps no state between
        batches, and whose answers are not read from text)."""
        if self.synthetic is not None:
            return self.synthetic
        be = self.primary
        s = be.sampling
        sampling = Sampling(
            s.temperature if temperature is None else float(temperature),
            s.top_p if top_p is None else float(top_p),
            s.top_k,
            s.min_p,
        )
        assert prompt_ids is not None
        return ServedBackend(
            be, self.router, prompt, prompt_ids, max_tokens, sampling, answer_pattern
        )

    def close(self) -> None:
        for u in self.list:
            u.backend.close()
