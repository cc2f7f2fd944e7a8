"""``mars serve`` run in the test process: the real app under a real uvicorn on a free loopback
port (a thread), so the official ``openai`` client talks HTTP to it as to any server."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import uvicorn

from mars.serve.app import MarsServer, ServeOptions, create_app
from mars.serve.requests import Defaults
from mars.serve.upstreams import Upstreams


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Running:
    url: str  # http://127.0.0.1:PORT (the OpenAI base URL is url + "/v1")
    state: MarsServer

    def metric(self, name: str, **labels) -> float:
        """A counter's or gauge's value from ``/metrics`` (0 when absent): of the series with
        exactly these labels, or with no labels given, summed over all its series."""
        text = httpx.get(self.url + "/metrics", headers=self.headers(), timeout=10).text
        want = "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""
        total = 0.0
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            series, _, labelled = key.partition("{")
            if series not in (f"mars_serve_{name}", f"mars_serve_{name}_total"):
                continue
            if not labels or "{" + labelled == want:  # no labels asked: every series summed
                total += float(value)
        return total

    def headers(self) -> dict:
        key = self.state.options.api_key
        return {"Authorization": f"Bearer {key}"} if key else {}


@contextlib.contextmanager
def serving(
    upstreams: list[str] | Upstreams,
    defaults: Defaults | None = None,
    **options,
) -> Iterator[Running]:
    """``mars serve`` in front of ``upstreams`` until the block ends."""
    ups = upstreams if isinstance(upstreams, Upstreams) else Upstreams(upstreams)
    app, state = create_app(ups, ServeOptions(defaults or Defaults(), **options))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 300  # the first start pays the live loop's one-off costs
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("mars serve did not start")
        time.sleep(0.05)
    try:
        yield Running(f"http://127.0.0.1:{port}", state)
    finally:
        server.should_exit = True
        thread.join(30)
        if not isinstance(upstreams, Upstreams):
            ups.close()
