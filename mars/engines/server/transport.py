"""HTTP to one server from synchronous code: a private event loop, bounded concurrency, a deadline
per request, answers read up to a bound of bytes, failures retried as a
:class:`~.retry.RetryPolicy` says and ended in a typed :mod:`~.errors` error.  Kept apart from the
wire protocols so that what is sent and how it travels change independently; nothing here shows a
key, a header or a password."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable, Coroutine, Sequence, Sized
from typing import Any
from urllib.parse import urlsplit

from ...errors import MarsError
from .. import cancel
from ..endpoint import check_base_url, hide_credentials_in_logs, redact
from .errors import (
    RESUME,
    ServerBusy,
    ServerConnectionError,
    ServerError,
    ServerStatusError,
    ServerTimeout,
    ServerUnavailable,
)
from .protocol import one_line
from .retry import RetryPolicy

hide_credentials_in_logs("httpx", "httpcore")
log = logging.getLogger(__name__)

#: The most bytes an answer may take: a frame (an error page, the answer's fields), per token
#: (or character) of the prompt (a server may echo it: vLLM its ids, llama.cpp its text), then
#: per token asked for — its id and text, and with log-probabilities 20 entries each up to a
#: long token's text (a llama.cpp entry spells its bytes too).  Far above any real answer; a
#: larger one is refused as it streams in, never read whole.
ANSWER_FRAME_BYTES = 1 << 20
ANSWER_PROMPT_BYTES = 64
ANSWER_TOKEN_BYTES = 2 << 10
ANSWER_LOGPROB_TOKEN_BYTES = 32 << 10
#: The most bytes a connect-time answer (models, server report, tokenizer check) may take.
INFO_ANSWER_BYTES = 16 << 20


def answer_limit(max_new: int, logprobs: bool, prompt: Sized = ()) -> int:
    """The most bytes an answer of ``max_new`` tokens after ``prompt`` (token ids or text) may
    take (:data:`ANSWER_FRAME_BYTES`)."""
    per = ANSWER_LOGPROB_TOKEN_BYTES if logprobs else ANSWER_TOKEN_BYTES
    return ANSWER_FRAME_BYTES + len(prompt) * ANSWER_PROMPT_BYTES + int(max_new) * per


class Http:
    """Requests to one server from synchronous code: a private event loop on a daemon thread
    (so it works inside a running loop too), at most ``concurrency`` requests in flight, each
    tried again as its :class:`~.retry.RetryPolicy` says (a log line per retry), each answer read
    up to a bound of bytes.  Messages name the server with its URL's credentials hidden
    (:attr:`shown`) and never quote ``secrets`` (a key) or those credentials, in any
    spelling."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: dict | None = None,
        timeout: float = 600.0,
        connect_timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        concurrency: int = 32,
        transport: Any = None,
        secrets: Sequence[str] = (),
    ):
        self.base_url = base_url
        self.shown = redact(base_url)
        self.headers = dict(headers or {})
        self.timeout = float(timeout)
        # a connection is part of a request: it never waits longer than the request may
        self.connect_timeout = min(float(connect_timeout), self.timeout)
        self.retry = retry or RetryPolicy()
        self.concurrency = int(concurrency)
        self.transport = transport
        # what a message must never show: the key, and the URL's credentials in every spelling
        self.secrets = [s for s in (*secrets, *url_secrets(base_url)) if s]
        self.stats = {"requests": 0, "retries": 0}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid: int | None = None
        self._client: Any = None
        self._sem: asyncio.Semaphore | None = None

    # -- the loop ----------------------------------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None or self._pid != os.getpid():  # a forked child starts its own
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, daemon=True, name="mars-http").start()
            self._loop, self._pid, self._client, self._sem = loop, os.getpid(), None, None
        return self._loop

    def submit(self, make: Callable[[], Coroutine[Any, Any, Any]]) -> concurrent.futures.Future:
        """Start the coroutine ``make()`` on the loop; its future (cancelling it cancels the
        coroutine, and the requests it has in flight)."""
        return asyncio.run_coroutine_threadsafe(make(), self._ensure_loop())

    def run(self, make: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        """Run the coroutine ``make()`` on the loop and wait for it (Ctrl-C, or the cancelled
        scope of the caller (:mod:`mars.engines.cancel`), cancels it)."""
        fut = self.submit(make)
        scope = cancel.current()
        if scope is not None:
            scope.attach(fut)
        try:
            return fut.result()
        except concurrent.futures.CancelledError:
            if scope is not None and scope.cancelled:
                raise cancel.Cancelled("cancelled") from None
            raise
        except BaseException:
            fut.cancel()
            raise
        finally:
            if scope is not None:
                scope.detach(fut)

    def limit(self, concurrency: int) -> None:
        """At most ``concurrency`` requests in flight from now on."""
        self.concurrency = int(concurrency)
        if self._sem is not None:
            self._sem = asyncio.Semaphore(self.concurrency)

    def close(self) -> None:
        loop, client = self._loop, self._client
        if loop is None or self._pid != os.getpid():
            return
        if client is not None:
            asyncio.run_coroutine_threadsafe(client.aclose(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        self._loop = self._client = self._sem = None

    def _get_client(self):
        import httpx

        if self._client is None:
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                headers=self.headers,
                timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
                transport=self.transport,
                limits=httpx.Limits(max_connections=None),  # the semaphore bounds them
            )
            self._sem = asyncio.Semaphore(self.concurrency)
        return self._client

    def hide(self, text: object, limit: int = 200) -> str:
        """``text`` as one printable line, credentials and secrets hidden."""
        s = str(text)
        for secret in self.secrets:
            s = s.replace(secret, "***")
        return one_line(s, limit)

    def message(self, out: Any) -> str:
        """The error message of a server's JSON error answer, as it may be shown (a server may
        echo what it was sent)."""
        return self.hide(_message(out)) or "no message"

    def json(self, status: int, data: bytes, url: str) -> Any:
        """The JSON of an answer; an answer of 200 that is none is one line, an error answer
        that is none becomes ``{"error": its text}``."""
        try:
            return json.loads(data)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            text = data[:4096].decode("utf-8", "replace")
            if status == 200:
                raise ServerError(
                    f"{url}: the answer is not JSON ({self.hide(text, 80)!r}): is this the "
                    "server's base URL?"
                ) from None
            return {"error": self.hide(text) or f"HTTP {status}"}

    # -- requests ----------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        *,
        retry_connect: bool = True,
        timeout: float | None = None,
        retry_status: frozenset[int] | None = None,
        limit: int = INFO_ANSWER_BYTES,
        asked: str = "",
        sse: bool = False,
        headers: dict[str, str] | None = None,
        progress: list[bytes] | None = None,
    ) -> tuple[int, Any]:
        """(status, JSON) of ``method path``; 200 and 4xx answers come back, retryable failures
        are tried again as :attr:`retry` says, then one line (a :class:`ServerUnavailable`).
        ``retry_connect=False``: a connection refused or not made in time is one line at once (at
        connect time, a server that is not there).  ``timeout``: this request's deadline instead
        of :attr:`timeout`.  ``retry_status``: the HTTP statuses tried again (default the
        policy's; the others come back).  ``limit``: the most bytes the answer may take
        (``asked``: what the request asked for, for the message); a larger answer is one line,
        read no further.  ``sse``: a successful answer is a stream of server-sent events, read
        whole (a list of their JSON objects): a streamed request is one a server stops working on
        as soon as it is cancelled (llama.cpp does not notice a non-streamed request go).
        ``headers``: this request's own, beside the client's (``mars serve``'s affinity key).
        ``progress``: the answer's bytes of the try under way are kept there as they come (what
        a request cancelled mid-stream had received)."""
        deadline = self.timeout if timeout is None else float(timeout)
        import httpx

        client = self._get_client()
        assert self._sem is not None
        url = self.shown + path
        policy = self.retry
        statuses = policy.statuses if retry_status is None else retry_status
        why, status = "", 0
        failed: type[ServerUnavailable] = ServerUnavailable
        async with self._sem:
            for attempt in range(policy.tries):
                after = None
                try:
                    self.stats["requests"] += 1
                    if progress is not None:
                        progress.clear()
                    async with asyncio.timeout(deadline):  # the whole answer, not per byte
                        status, data, answered = await self._exchange(
                            client,
                            method,
                            path,
                            body,
                            limit,
                            asked or f"{method} {path}",
                            headers,
                            progress,
                        )
                except httpx.ConnectTimeout:
                    why, failed = (
                        f"no connection within {self.connect_timeout:g} s",
                        ServerConnectionError,
                    )
                    if not retry_connect:
                        raise ServerConnectionError(
                            f"cannot connect to the server at {self.shown}: {why} (is it "
                            "running, and reachable from here?)"
                        ) from None
                except (httpx.TimeoutException, TimeoutError):
                    why, failed = f"no answer within {deadline:g} s", ServerTimeout
                except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
                    why, failed = f"connection failed ({self._cause(exc)})", ServerConnectionError
                    if not retry_connect and isinstance(exc, httpx.ConnectError):
                        raise ServerConnectionError(
                            f"cannot connect to the server at {self.shown}: {self._cause(exc)} "
                            "(is it running?)"
                        ) from None
                except (httpx.HTTPError, httpx.InvalidURL) as exc:
                    raise ServerError(f"{url}: {self.hide(exc)}") from None
                else:
                    if sse and status == 200:
                        return status, _parse_sse(data, url)
                    if status not in statuses:
                        return status, self.json(status, data, url)
                    why = f"HTTP {status} ({self.message(self.json(status, data, url))})"
                    failed, after = ServerBusy, answered.get("retry-after")
                if attempt < policy.retries:
                    self.stats["retries"] += 1
                    wait = policy.wait(attempt, after)
                    log.info(  # INFO: a command's stderr keeps its one line; a library sees it
                        "the server at %s: %s on %s %s; trying again in %.2g s (try %d of %d)",
                        self.shown,
                        why,
                        method,
                        path,
                        wait,
                        attempt + 2,
                        policy.tries,
                    )
                    await asyncio.sleep(wait)
        message = (
            f"the server at {self.shown} failed {policy.tries} times on {path}: {why}; {RESUME}"
        )
        err = ServerBusy(message, status=status) if failed is ServerBusy else failed(message)
        err.hint = RESUME
        raise err

    async def _exchange(
        self,
        client,
        method: str,
        path: str,
        body: dict | None,
        limit: int,
        asked: str,
        headers: dict[str, str] | None = None,
        progress: list[bytes] | None = None,
    ) -> tuple[int, bytes, Any]:
        """(status, the answer's bytes, headers), read as they stream in and refused past
        ``limit`` bytes (after decompression: the bytes held); ``progress``: the list they are
        read into."""
        chunks: list[bytes] = [] if progress is None else progress
        size = 0
        async with client.stream(method, path, json=body, headers=headers) as r:
            async for chunk in r.aiter_bytes():
                size += len(chunk)
                if size > limit:
                    raise ServerError(
                        f"the server at {self.shown} sent more than {_size(limit)} for {asked} "
                        f"({method} {path}): refused, read no further (no answer to it is that "
                        "large)"
                    )
                chunks.append(chunk)
            return r.status_code, b"".join(chunks), r.headers

    async def post(
        self,
        path: str,
        body: dict,
        limit: int,
        asked: str,
        sse: bool = False,
        headers: dict[str, str] | None = None,
        progress: list[bytes] | None = None,
    ) -> Any:
        """The JSON of a successful POST (``sse``: of each event of its stream; ``headers``: the
        request's own; ``progress``: :meth:`request`'s); an error answer is one line."""
        status, out = await self.request(
            "POST",
            path,
            body,
            limit=limit,
            asked=asked,
            sse=sse,
            headers=headers,
            progress=progress,
        )
        if status != 200:
            raise ServerStatusError(
                f"{self.shown}{path}: HTTP {status}: {self.message(out)}", status=status
            )
        return out

    def get_text(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        """(status, text) of ``GET path``, tried once, outside the bound on requests in flight
        (an engine's ``/metrics``, read while its generation requests wait); an answer past
        :data:`INFO_ANSWER_BYTES` or any failure is an :class:`OSError`."""
        import httpx

        async def go() -> tuple[int, str]:
            client = self._get_client()
            try:
                async with asyncio.timeout(timeout):
                    status, data, _ = await self._exchange(
                        client, "GET", path, None, INFO_ANSWER_BYTES, f"GET {path}"
                    )
            except (httpx.HTTPError, TimeoutError, ServerError) as exc:
                why = self.hide(exc) or type(exc).__name__
                raise OSError(f"{self.shown}{path}: {why}") from None
            return status, data.decode("utf-8", "replace")

        return asyncio.run_coroutine_threadsafe(go(), self._ensure_loop()).result(timeout + 5)

    def post_all(self, path: str, bodies: Sequence[dict], limits: Sequence[tuple[int, str]]):
        """POST every body concurrently (bounded; ``limits``: each answer's bound and what its
        request asked for); answers in order.  The first failure cancels the rest and is
        raised."""

        async def go():
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(self.post(path, b, *lim)) for b, lim in zip(bodies, limits)]
            return [t.result() for t in tasks]

        try:
            return self.run(go)
        except ExceptionGroup as eg:
            raise first_error(eg) from None

    def _cause(self, exc: BaseException) -> str:
        """What went wrong underneath an HTTP client error, in the words that name it: TLS spoken
        to a plain-HTTP server, a host name that does not resolve, the operating system's words
        ("connection refused"), else the error's own."""
        e: BaseException | None = exc
        while e is not None:
            if isinstance(e, ssl.SSLError):
                reason = getattr(e, "reason", None) or type(e).__name__
                hint = ""
                if isinstance(e, ssl.SSLCertVerificationError):
                    hint = f": its certificate is not trusted ({self.hide(e.verify_message, 80)})"
                elif self.shown.startswith("https://"):
                    hint = (
                        "; if the server speaks plain HTTP, use "
                        f"http://{self.shown.removeprefix('https://')}"
                    )
                return f"TLS handshake failed ({reason}){hint}"
            if isinstance(e, socket.gaierror):
                host = urlsplit(self.shown).hostname or "?"
                return f"unknown host {host} ({self.hide(e.strerror or e, 80).lower()})"
            if isinstance(e, OSError) and e.errno is not None and e.errno > 0:
                return os.strerror(e.errno).lower()
            e = e.__cause__ or e.__context__
        return self.hide(exc) or type(exc).__name__


def _parse_sse(data: bytes, url: str) -> list:
    """The JSON objects of a stream of server-sent events (``data: {...}`` lines; ``[DONE]``
    ends it)."""
    events = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        try:
            events.append(json.loads(payload))
        except (ValueError, RecursionError):  # as Http.json: a nesting too deep is not JSON here
            raise ServerError(f"{url}: a streamed event that is not JSON") from None
    return events


def url_secrets(url: str) -> list[str]:
    """What of a URL's credentials a message must never show: the password as written, as the
    client decodes it, and the basic-authentication header made of them (base64)."""
    import base64
    from urllib.parse import unquote

    parts = urlsplit(url)
    if parts.username is None:
        return []
    user, password = unquote(parts.username), unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return [s for s in (parts.password, password, token) if s]


def asked_for(max_new: int) -> str:
    return f"a request of {max_new} token{'s' if max_new != 1 else ''}"


def _size(n: int) -> str:
    return f"{n / (1 << 20):.4g} MiB" if n >= 1 << 20 else f"{n / 1024:.4g} KiB"


def first_error(eg: BaseExceptionGroup) -> BaseException:
    exc: BaseException = eg
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def _message(out: Any) -> str:
    """The error message of a server's JSON error answer (OpenAI, FastAPI and llama.cpp forms)."""
    if isinstance(out, dict):
        err = out.get("error", out.get("detail", out.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            return one_line(err) or "no message"
    return one_line(out) or "no message"


def normalise_base_url(url: str) -> str:
    """``http://host:port`` from what a user types (a trailing ``/`` or ``/v1`` dropped);
    anything a client could not connect to is one line (:func:`~.endpoint.check_base_url`)."""
    try:
        return check_base_url(url)
    except MarsError as exc:
        raise ServerError(str(exc)) from None
