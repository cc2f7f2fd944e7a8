"""The HTTP server: OpenAI-compatible routes in front of the upstreams (Starlette, under uvicorn).

Routes: ``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions``, ``GET
/health``, ``GET /metrics`` (Prometheus), ``GET /v1/mars/records/{pool}/{qid}`` (a recorded
question's live record, what a response's ``mars.record`` links to), ``POST
/v1/mars/calibration/reload`` and ``GET /v1/mars/audit`` (the live audit's counts:
:mod:`mars.serve.audit`, which a question answered is offered to once its client has it).

A MARS request (:func:`mars.serve.requests.is_mars_request`) is read and checked (HTTP 400 with the
command line's one-line message), its prompt rendered and fitted to the model's context, admitted
by the scheduler (HTTP 429 with ``Retry-After`` when the queue is full), then solved in a worker
thread (:func:`mars.serve.solve.run_question`). A client that goes away — a closed stream, or a
dropped connection while it waits for a whole answer — cancels the question and every request it
has upstream. Any other request passes through to an upstream unchanged (streamed if asked).

Every request, MARS or passed through, is admitted by the scheduler before any byte of its answer
(a full queue is a real 429, streamed or not) and holds its slot until its answer is sent. Errors
are OpenAI error objects — 400 for a bad body, 429 when full, 502 naming the upstream when it
fails, never a hang, a plain-text 500 or a traceback to the client. The client API key
(``--api-key`` or its environment variable) is compared in constant time and never logged, stored
or echoed; so is the upstream key, and an upstream is shown (502s, ``/health``, metric labels,
logs) with its URL's credentials hidden. ``/health`` tells anyone whether the server is up, and
only a caller with the key which upstreams it has. docs/reliability.md lists what holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import inspect
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..engines import cancel
from ..engines.endpoint import shown
from ..engines.server import ServerError
from ..errors import MarsError, first_line
from . import logs
from .audit import AuditOptions, Auditor
from .bodies import refusal
from .metrics import CONTENT_TYPE, Metrics
from .options import SERVE
from .reconcile import PASS_THROUGH, REQUEST_ID_HEADER, DrainWatch, Ledger, Relayed
from .record import Recorder
from .requests import (
    CHAT,
    COMPLETIONS,
    BadRequest,
    Defaults,
    is_mars_request,
    read_body,
    read_question,
    read_request,
)
from .responses import chunk, completion, error_body, new_id, sse
from .schedule import QueueFull, Scheduler, Ticket
from .solve import (
    Outcome,
    Prepared,
    mars_object,
    prepare,
    run_question,
    saved_any,
    usage,
    warm_up,
)
from .upstreams import REVIVE_S, NoUpstream, Upstream, Upstreams

log = logging.getLogger("mars.serve")

#: Seconds of silence after which a stream sends a comment, so proxies keep it open.
KEEPALIVE_S = 15.0
ROUTES = {COMPLETIONS: "/v1/completions", CHAT: "/v1/chat/completions"}


@dataclass
class ServeOptions:
    """How the server admits and solves requests (``mars serve``'s options)."""

    defaults: Defaults
    max_active: int = SERVE["max_active"].default
    max_queue: int = SERVE["max_queue"].default
    api_key: str | None = None
    served_model: str | None = None  # the name /v1/models lists (default: the upstream's)
    record: str | None = None
    #: the --calibration file, read again by POST /v1/mars/calibration/reload
    calibration_path: str | None = None
    #: the live audit (--audit-rate and its options: mars.serve.audit)
    audit: AuditOptions = field(default_factory=AuditOptions)
    #: after a stop, read the upstreams' running counts until they fall (mars.serve.reconcile)
    engine_watch: bool = SERVE["engine_watch"].default

    def check(self) -> ServeOptions:
        """The admission sizes against their declarations (one line naming the option)."""
        for name in ("max_active", "max_queue", "engine_watch"):
            SERVE[name].check(getattr(self, name))
        self.audit.check()
        return self


def _error(status: int, message: str, code: str, param: str | None = None, **headers) -> Response:
    return JSONResponse(
        error_body(status, message, code, param), status_code=status, headers=headers
    )


class MarsServer:
    """The application state: upstreams, scheduler, recorder, metrics, worker threads."""

    def __init__(self, upstreams: Upstreams, options: ServeOptions):
        self.upstreams = upstreams
        self.options = options
        self.defaults = options.defaults
        self.model = options.served_model or upstreams.model
        self.metrics = Metrics()
        self.scheduler = Scheduler(options.max_active, options.max_queue)
        self.recorder = Recorder(options.record) if options.record else None
        self.workers = ThreadPoolExecutor(options.max_active, thread_name_prefix="mars-question")
        self.auditor = Auditor(options.audit, upstreams, self.metrics, self.recorder)
        self.drain = (
            DrainWatch(self.metrics, upstreams.list)
            if options.engine_watch and upstreams.list
            else None
        )
        self.created = int(time.time())
        self._clients: dict[str, httpx.AsyncClient] = {}
        self._revive: asyncio.Task | None = None
        for u in upstreams.list:
            self.metrics.upstream_up.labels(u.url).set(1)
        upstreams.router.on_error = lambda u, why: self.metrics.upstream_errors.labels(u.url).inc()

    # -- the app -----------------------------------------------------------------------------

    def app(self) -> Starlette:
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.prometheus, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/mars/records/{pool}/{qid:int}", self.record, methods=["GET"]),
            Route("/v1/mars/calibration/reload", self.reload, methods=["POST"]),
            Route("/v1/mars/audit", self.audit, methods=["GET"]),
        ]
        handlers = {
            Exception: self._crash,
            BadRequest: self._refused,
            ValidationError: self._invalid,
        }
        return Starlette(routes=routes, lifespan=self._lifespan, exception_handlers=handlers)

    async def _refused(self, request: Request, exc: Exception) -> Response:
        """A body the server refuses: HTTP 400 with its one line, naming the field."""
        assert isinstance(exc, BadRequest)
        return self._counted(request, _error(400, str(exc), exc.code, exc.param))

    async def _invalid(self, request: Request, exc: Exception) -> Response:
        """A body that does not fit its type (:mod:`mars.serve.bodies`): HTTP 400 with the line
        the command line would say, naming the field."""
        assert isinstance(exc, ValidationError)
        message, param = refusal(exc, list(self.defaults.answer_formats))
        return self._counted(request, _error(400, message, "invalid_request", param))

    def _counted(self, request: Request, response: Response) -> Response:
        route = request.url.path
        return self._count(route, response) if route in ROUTES.values() else response

    async def _crash(self, request: Request, exc: Exception) -> Response:
        """A bug: an OpenAI error object for the client (the traceback goes to the log only)."""
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return _error(500, f"internal error ({type(exc).__name__})", "internal_error")

    @contextlib.asynccontextmanager
    async def _lifespan(self, app) -> AsyncIterator[None]:
        await asyncio.to_thread(warm_up)
        self._revive = asyncio.create_task(self._revive_loop())
        try:
            yield
        finally:
            self._revive.cancel()
            await asyncio.to_thread(self.auditor.close)  # nothing of theirs left upstream
            if self.drain is not None:
                self.drain.close()
            for client in self._clients.values():
                await client.aclose()
            self.workers.shutdown(wait=False, cancel_futures=True)

    async def _revive_loop(self) -> None:
        while True:
            await asyncio.sleep(REVIVE_S)
            if any(not u.up for u in self.upstreams.list):
                await asyncio.to_thread(self.upstreams.router.revive)

    def _denied(self, request: Request) -> Response | None:
        key = self.options.api_key
        if not key:
            return None
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), key.encode()
        ):
            return _error(
                401, "invalid or missing API key (Authorization: Bearer)", "invalid_api_key"
            )
        return None

    def _count(self, route: str, response: Response) -> Response:
        self.metrics.requests.labels(route, str(response.status_code)).inc()
        return response

    # -- small routes ------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        """Up or down for anyone (a load balancer's probe); the replicas, their load and errors
        only for a caller with the key, where the server has one."""
        up = self.upstreams.any_up()
        body: dict = {"status": "ok" if up else "down"}
        if self._denied(request) is None:
            body["upstreams"] = self.upstreams.describe()
        return JSONResponse(body, status_code=200 if up else 503)

    async def prometheus(self, request: Request) -> Response:
        if denied := self._denied(request):
            return denied
        m = self.metrics
        m.active.set(self.scheduler.active)
        m.queued.set(self.scheduler.queued)
        for u in self.upstreams.list:
            m.upstream_up.labels(u.url).set(int(u.up))
        return Response(m.render(), media_type=CONTENT_TYPE)

    async def models(self, request: Request) -> Response:
        if denied := self._denied(request):
            return denied
        card = {"id": self.model, "object": "model", "created": self.created, "owned_by": "mars"}
        return JSONResponse({"object": "list", "data": [card]})

    async def record(self, request: Request) -> Response:
        if denied := self._denied(request):
            return denied
        path = None
        if self.recorder is not None:
            path = self.recorder.record_path(
                request.path_params["pool"], request.path_params["qid"]
            )
        if path is None:
            return _error(404, "no such record", "record_not_found")
        return Response(path.read_bytes(), media_type="application/json")

    async def audit(self, request: Request) -> Response:
        """The live audit: per method and per record pool, audits, disagreements, the rate, its
        bounds against the method's target, and the alarm (docs/serve.md, "The audit")."""
        if denied := self._denied(request):
            return denied
        return JSONResponse(self.auditor.view())

    async def reload(self, request: Request) -> Response:
        """Read the --calibration file again (a refit on recorded traffic: `mars calibrate`):
        checked as at start, it serves the questions that start from now on; a file that does
        not serve keeps the calibration in use (HTTP 409, the reason in one line)."""
        if denied := self._denied(request):
            return denied
        path = self.options.calibration_path
        if path is None:
            return _error(404, "this server has no --calibration to reload", "not_found")
        from ..method.learned import Calibration

        try:
            cal = Calibration.load(path)
            cal.check_for(
                {"model": self.upstreams.model, "spacing": self.defaults.spacing},
                "--upstream",
                what="serves",
            )
        except MarsError as exc:
            return _error(409, first_line(exc), "calibration_refused")
        before = self.defaults.calibration
        self.defaults = dataclasses.replace(self.defaults, calibration=cal)
        log.warning(
            "calibration reloaded: %s (was %s)",
            cal.digest,
            None if before is None else before.digest,
        )
        return JSONResponse({"calibration": cal.digest, "fitted_on": cal.fitted_on})

    # -- completions -------------------------------------------------------------------------

    async def completions(self, request: Request) -> Response:
        return self._count(ROUTES[COMPLETIONS], await self._handle(request, COMPLETIONS))

    async def chat(self, request: Request) -> Response:
        return self._count(ROUTES[CHAT], await self._handle(request, CHAT))

    async def _handle(self, request: Request, kind: str) -> Response:
        if denied := self._denied(request):
            return denied
        body = read_body(await request.body())  # a bad body: BadRequest, answered by _refused
        model = body.get("model")
        if model is not None and model not in (self.model, self.upstreams.model):
            return _error(
                404,
                f"model {shown(model, 80)} is not served here (served: {self.model})",
                "model_not_found",
            )
        client = body.get("user") if isinstance(body.get("user"), str) else None
        client = client or (request.client.host if request.client else "-")
        if not is_mars_request(body, self.defaults.mars_for):
            return await self._passthrough(request, body, kind, client)
        try:
            q = read_question(read_request(body, kind), kind, self.defaults)
            self._admissible()
            prep = await asyncio.to_thread(prepare, self.upstreams, q)
            ticket = self.scheduler.admit(client)  # a slot or a place in the queue, or 429
            self._waits(ticket)
        except QueueFull as exc:
            return self._busy(exc)
        except ServerError as exc:
            return _error(502, exc.without_hint(), "upstream_error")
        except BadRequest:
            raise  # _refused's
        except MarsError as exc:
            return _error(400, first_line(exc), "invalid_request")
        rid = new_id(kind)
        if q.stream:
            return Held(
                self._stream(prep, rid, ticket, client),
                ticket.release,
                media_type="text/event-stream",
            )
        with logs.serving(rid, client):
            return await self._whole(request, prep, rid, ticket, client)

    def _admissible(self) -> None:
        """Refuse a request the queue cannot take before any work is done for it."""
        s = self.scheduler
        if s.full():
            raise QueueFull(s.retry_after(), s.queued)

    def _waits(self, ticket: Ticket) -> None:
        """A request that must wait for a slot takes the upstream capacity audits hold back."""
        if ticket.state == "queued":
            self.auditor.preempt()

    def _audit(self, prep: Prepared, rid: str, client: str, outcome: Outcome) -> None:
        """The client has its answer: the question may be audited (:mod:`mars.serve.audit`)."""
        self.auditor.offer(prep, outcome, rid, client, self.scheduler.queued)

    def _busy(self, exc: QueueFull) -> Response:
        return _error(429, str(exc), "queue_full", None, **{"Retry-After": str(exc.retry_after)})

    def _start(
        self, prep: Prepared, scope: cancel.CancelScope, rid: str, client: str, emit=None
    ) -> asyncio.Future:
        ledger = Ledger(rid, prep.question.warmup, self.metrics)

        def run() -> Outcome:  # in a worker thread, its log lines naming the request
            outcome = None
            with logs.serving(rid, client):
                try:
                    outcome = run_question(self.upstreams, prep, scope, emit, self.recorder, ledger)
                    return outcome
                finally:
                    self._stopped(ledger, outcome)

        job = asyncio.get_running_loop().run_in_executor(self.workers, run)
        # a question whose client went away ends with Cancelled that no one reads
        job.add_done_callback(lambda f: f.cancelled() or f.exception())
        return job

    def _stopped(self, ledger: Ledger, o: Outcome | None) -> None:
        """A question ended: where it stopped requests in flight, or stopped its traces early,
        the engines' running counts are watched (off the request path)."""
        if self.drain is None:
            return
        replicas = set(ledger.stopped_at)
        if o is not None and saved_any(o.run):
            replicas |= set(range(len(self.upstreams.list)))
        if replicas:
            self.drain.stopped(sorted(replicas), ledger.stopped_time)

    def _respond(self, prep: Prepared, rid: str, o: Outcome) -> dict:
        q = prep.question
        url = None if o.record is None else f"/v1/mars/records/{o.record.pool}/{o.record.qid}"
        mars = mars_object(o, prep, url)
        log.info(
            "answered %s with %s: %s after %s traces, stopped by %s at %s tokens; %s tokens paid, "
            "%.1f s",
            q.kind,
            mars["method"],
            shown(mars["answer"], 40),
            mars["traces_started"] or mars["traces"],
            mars["stopped_by"],
            mars["stop_position"],
            mars["tokens"]["paid"],
            o.wall_s,
        )
        self.metrics.question(o.run.summary(), o.probe_generated, o.budget, o.wall_s)
        if o.record_error is not None:
            self.metrics.record_failures.inc()
        if o.run.answer is None:
            self.metrics.unanswered.labels(q.answer_format).inc()
        return completion(
            q.kind, rid, self.model, o.content, o.finish_reason, usage(o), mars, o.traces
        )

    @staticmethod
    def _failure(exc: BaseException) -> tuple[int, str, str]:
        """(status, message, code) of a question that failed."""
        if isinstance(exc, ServerError):
            return 502, exc.without_hint(), "upstream_error"
        if isinstance(exc, MarsError):
            return 400, first_line(exc), "invalid_request"
        log.error("a question failed", exc_info=exc)
        return 500, f"internal error ({type(exc).__name__})", "internal_error"

    async def _admitted(self, request: Request, ticket: Ticket) -> bool:
        """Wait for the ticket's slot; False (the ticket released) when the client goes away
        first: a request that loses its client leaves the queue."""
        if ticket.state == "active":
            return True
        waiting = asyncio.ensure_future(ticket.wait())
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({waiting, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if waiting.done():
            waiting.result()
            return True
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        ticket.release()
        self.metrics.left_queue.inc()
        return False

    async def _whole(
        self, request: Request, prep: Prepared, rid: str, ticket: Ticket, client: str
    ) -> Response:
        try:
            if not await self._admitted(request, ticket):
                return _error(499, "the client closed the connection", "cancelled")
            scope = cancel.CancelScope()
            job = self._start(prep, scope, rid, client)
            gone = asyncio.ensure_future(_disconnected(request))
            try:
                await asyncio.wait({job, gone}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                gone.cancel()
            if not job.done():  # the client went away: stop its traces upstream
                scope.cancel()
                self.metrics.cancelled.inc()
                with contextlib.suppress(BaseException):
                    await job
                return _error(499, "the client closed the connection", "cancelled")
            try:
                outcome = job.result()
            except BaseException as exc:
                status, message, code = self._failure(exc)
                return _error(status, message, code)
        finally:
            ticket.release()
        return JSONResponse(
            self._respond(prep, rid, outcome),
            background=BackgroundTask(self._audit, prep, rid, client, outcome),
        )

    async def _stream(
        self, prep: Prepared, rid: str, ticket: Ticket, client: str
    ) -> AsyncIterator[bytes]:
        """The answer streamed (:meth:`_events`), its log lines naming the request."""
        with logs.serving(rid, client):
            async with contextlib.aclosing(self._events(prep, rid, ticket, client)) as events:
                async for part in events:
                    yield part

    async def _events(
        self, prep: Prepared, rid: str, ticket: Ticket, client: str
    ) -> AsyncGenerator[bytes, None]:
        q, kind, model = prep.question, prep.question.kind, self.model
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        scope = cancel.CancelScope()
        job: asyncio.Future | None = None
        try:
            yield sse(chunk(kind, rid, model, role=True, text="" if kind == CHAT else None,
                            mars={"phase": "queued"}))  # fmt: skip
            async with ticket:
                job = self._start(
                    prep,
                    scope,
                    rid,
                    client,
                    lambda ev: loop.call_soon_threadsafe(events.put_nowait, ev),
                )
                while True:
                    get = asyncio.ensure_future(events.get())
                    done, _ = await asyncio.wait(
                        {get, job}, timeout=KEEPALIVE_S, return_when=asyncio.FIRST_COMPLETED
                    )
                    if get in done:
                        yield sse(chunk(kind, rid, model, mars=get.result()))
                        continue
                    get.cancel()
                    if job in done:
                        break
                    yield b": keep-alive\n\n"
            while not events.empty():
                yield sse(chunk(kind, rid, model, mars=events.get_nowait()))
            try:
                outcome = job.result()
            except BaseException as exc:
                status, message, code = self._failure(exc)
                yield sse(error_body(status, message, code))
                yield sse("[DONE]")
                return
            whole = self._respond(prep, rid, outcome)
            yield sse(chunk(kind, rid, model, text=outcome.content))
            yield sse(chunk(kind, rid, model, finish_reason="stop", mars=whole["mars"]))
            if q.include_usage:
                yield sse(chunk(kind, rid, model, usage=whole["usage"], no_choices=True))
            yield sse("[DONE]")
            ticket.release()
            self._audit(prep, rid, client, outcome)
        finally:
            if job is not None and not job.done():  # the client went away
                scope.cancel()
                self.metrics.cancelled.inc()
            elif job is None and ticket.state != "active":
                self.metrics.left_queue.inc()
            ticket.release()

    # -- pass-through ------------------------------------------------------------------------

    def _client(self, u: Upstream) -> httpx.AsyncClient:
        """The pass-through client of a replica: the backend's URL, headers (the upstream key)
        and transport, on the server's event loop."""
        http = u.backend.http
        if u.url not in self._clients:
            self._clients[u.url] = httpx.AsyncClient(
                base_url=http.base_url,
                headers=http.headers,
                timeout=httpx.Timeout(http.timeout, connect=http.connect_timeout),
                transport=http.transport,
            )
        return self._clients[u.url]

    async def _passthrough(self, request: Request, body: dict, kind: str, client: str) -> Response:
        """A plain request: through the same queue as MARS requests, to the least busy live
        replica (counted in its load), unchanged but for the model name. An answer that is not
        streamed is read whole first, so a replica that fails is a 502; a stream is relayed as it
        comes, and cut (one log line) if the replica drops it."""
        if self.upstreams.synthetic is not None:
            return _error(
                400,
                "the synthetic upstream answers MARS requests only (n > 1 or a mars object)",
                "invalid_request",
            )
        try:
            ticket = self.scheduler.admit(client)
        except QueueFull as exc:
            return self._busy(exc)
        self._waits(ticket)
        held: list = [ticket.release]  # what the answer holds until it is sent, last first
        ledger = Ledger(new_id(kind), metrics=self.metrics, kind=PASS_THROUGH)
        tally = Relayed(ledger, body)
        try:
            if not await self._admitted(request, ticket):
                return _error(499, "the client closed the connection", "cancelled")
            try:
                u, upstream = await self._send(body, kind, ledger.request_id(PASS_THROUGH))
            except NoUpstream as exc:
                return _error(502, exc.without_hint(), "upstream_error")
            held.append(lambda: self.upstreams.router.give_back(u))
            held.append(upstream.aclose)
            headers = {
                k: v
                for k, v in upstream.headers.items()
                if k.lower() in ("content-type", "retry-after")
            }
            if not body.get("stream"):
                try:
                    content = await upstream.aread()
                except httpx.HTTPError as exc:
                    self.metrics.upstream_errors.labels(u.url).inc()
                    return _error(
                        502,
                        f"the server at {u.url} failed mid-answer ({type(exc).__name__})",
                        "upstream_error",
                    )
                if upstream.status_code == 200:
                    tally.whole(content)
                return Response(content, status_code=upstream.status_code, headers=headers)

            async def relay() -> AsyncIterator[bytes]:
                try:  # decoded: the content-encoding header is not relayed
                    async for part in upstream.aiter_bytes():
                        tally.part(part)
                        yield part
                    tally.end()
                except httpx.HTTPError as exc:
                    self.metrics.upstream_errors.labels(u.url).inc()
                    log.warning(
                        "a passed-through stream from %s was cut (%s)", u.url, type(exc).__name__
                    )

            if upstream.status_code == 200:  # a stream that ends before its end was stopped
                held.insert(1, tally.stop)
            release, held[:] = held[::-1], []
            return Held(relay(), *release, status_code=upstream.status_code, headers=headers)
        finally:
            for step in held[::-1]:
                await _call(step)

    async def _send(
        self, body: dict, kind: str, request_id: str | None = None
    ) -> tuple[Upstream, httpx.Response]:
        """Send a passed-through request to the least busy live replica (a replica that cannot be
        connected to is marked down and the next tried); its answer's head, and the replica,
        counted in its load until given back."""
        router = self.upstreams.router
        body = {**body, "model": self.upstreams.model}
        tried: set[int] = set()
        while True:
            live = {i for i, u in enumerate(router.upstreams) if u.up} - tried
            if not live:
                raise NoUpstream("no upstream server is reachable")
            i, u = router.take(frozenset(tried))
            tried.add(i)
            http = self._client(u)
            try:
                own = None if request_id is None else {REQUEST_ID_HEADER: request_id}
                request = http.build_request("POST", ROUTES[kind], json=body, headers=own)
                return u, await http.send(request, stream=True)
            except httpx.TransportError as exc:
                router.give_back(u)
                router.mark_down(u, f"connection failed ({type(exc).__name__})")
                self.metrics.upstream_errors.labels(u.url).inc()


class Held(StreamingResponse):
    """A streamed answer that holds what its request took — a slot, a replica, an upstream
    stream — until it ends, however it ends (sent, the client gone, or never started: a
    generator that never ran runs no ``finally``)."""

    def __init__(self, content: AsyncIterator[bytes], *release: Callable, **kwargs):
        super().__init__(content, **kwargs)
        self._release = release

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            for step in self._release:
                await _call(step)


async def _call(step: Callable) -> None:
    """Run a release step, sync or async."""
    out = step()
    if inspect.isawaitable(out):
        await out


async def _disconnected(request: Request) -> None:
    """Return when the client has closed the connection."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def create_app(upstreams: Upstreams, options: ServeOptions) -> tuple[Starlette, MarsServer]:
    """The ASGI app (and its state) of ``mars serve``."""
    options.defaults.check()
    server = MarsServer(upstreams, options)
    return server.app(), server
