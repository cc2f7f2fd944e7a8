"""The proxy's log lines, as an operator reads them: a timestamp, the level, and the request each
line is about — the id its client sees (``cmpl-…``, ``chatcmpl-…``) and the client — whichever
thread or library wrote it (a question's traces log from a worker thread, the live loop and the
server backend know nothing of requests). The request is a context variable set where the request
is handled and where its question runs (:func:`serving`); a filter on the handler adds it to every
record."""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator

#: (request id, client) of the request being handled in this context
REQUEST: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "mars_serve_request", default=None
)
FORMAT = "%(asctime)s %(levelname)s %(request)s%(name)s: %(message)s"


class RequestContext(logging.Filter):
    """Adds ``request`` to a record: ``[cmpl-… from CLIENT] `` while a request is handled, else
    nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        current = REQUEST.get()
        record.request = f"[{current[0]} from {current[1]}] " if current else ""
        return True


@contextlib.contextmanager
def serving(rid: str, client: str) -> Iterator[None]:
    """Log lines written within the block name the request ``rid`` of ``client``."""
    token = REQUEST.set((rid, client))
    try:
        yield
    finally:
        REQUEST.reset(token)


def configure(level: str = "info") -> logging.Handler:
    """What ``mars serve`` logs, on standard error: its own lines (and the live loop's, the server
    backend's) at ``level``, each with a timestamp and its request (:data:`FORMAT`); httpx's
    per-request lines only at warning and above."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(RequestContext())
    mars = logging.getLogger("mars")
    mars.addHandler(handler)
    mars.setLevel(getattr(logging, level.upper(), logging.INFO))
    mars.propagate = False
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return handler
