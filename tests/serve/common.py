"""What the tests of ``mars serve`` share: the fake servers of ``tests/data/servers.py`` as
upstreams, for faults a real server will not produce on demand, and a request in a thread."""

from __future__ import annotations

import importlib.util
import threading
import time
from pathlib import Path

import httpx

from mars.serve.requests import Defaults
from mars.serve.upstreams import Upstreams

QUESTION = "What is the sum of the first 20 positive integers?"
#: a MARS question on a fake server: four short traces, a checkpoint every 8 tokens
SMALL = Defaults(method="sc", traces=4, warmup=0, spacing=8, max_tokens=32)


def fakes():
    """``tests/data/servers.py`` (not a package module: loaded from its file)."""
    path = Path(__file__).resolve().parents[1] / "data" / "servers.py"
    spec = importlib.util.spec_from_file_location("fake_servers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_upstreams(servers: dict, **options) -> Upstreams:
    """``mars serve``'s upstreams on fake servers, ``{url: FakeServer}`` (each URL's host names
    its server)."""
    from urllib.parse import urlsplit

    fake = fakes()
    by_host = {urlsplit(url).hostname: s for url, s in servers.items()}

    async def route(request: httpx.Request) -> httpx.Response:
        return await by_host[request.url.host].handler(request)

    options.setdefault("tokenizer", fake.tokenizer())
    return Upstreams(list(servers), transport=httpx.MockTransport(route), **options)


def wait_for(cond, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def post_in_thread(url: str, body: dict, results: list, timeout: float = 120) -> threading.Thread:
    """POST ``body`` from a thread; its status (and JSON error, if any) is appended to
    ``results``."""

    def go():
        r = httpx.post(url, json=body, timeout=timeout)
        results.append((r.status_code, r.headers.get("retry-after"), r.text))

    t = threading.Thread(target=go)
    t.start()
    return t
