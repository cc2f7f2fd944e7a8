"""docs/backends.md's "Add a server" recipe, run: its code block, written as a module and given
its entry in :data:`~mars.engines.server.PROTOCOLS`, drives a fake server of that flavour through
the backend (the server named, its report read, its default concurrency, a pool generated and
read exactly, its counters read by ``mars serve``); without the entry the same server is
refused.  Nothing in ``mars/`` names the flavour: the module and the entry are all a new server
takes."""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")

from engines.server.common import REPO, Q, backend, completions, fake  # noqa: E402
from mars.engines.server import (  # noqa: E402
    PROTOCOLS,
    Protocol,
    ServerBackend,
    ServerError,
    generation_seed,
)
from mars.engines.tokens import CONF_TOP_K, token_confidence  # noqa: E402
from mars.generate import generate_pool  # noqa: E402
from mars.store import schema  # noqa: E402
from mars.store.pool import read_trace_table  # noqa: E402

DOC = REPO / "docs" / "backends.md"
#: what the fake server reports at the recipe's report path
LIMITS = {"max_running": 3, "max_context": 2048, "version": "acme-1.2"}
#: its counters, in the series the recipe names
METRICS = """\
# TYPE acme_generated_tokens_total counter
acme_generated_tokens_total{model="m"} 50.0
# TYPE acme_prompt_tokens_total counter
acme_prompt_tokens_total{model="m"} 143.0
# TYPE acme_prompt_tokens_cached_total counter
acme_prompt_tokens_cached_total{model="m"} 70.0
# TYPE acme_requests_running gauge
acme_requests_running{model="m"} 2.0
# TYPE acme_requests_queued gauge
acme_requests_queued{model="m"} 1.0
"""


def recipe() -> str:
    """The one Python block of the "Add a server" section."""
    text = DOC.read_text()
    section = text.split("\n### Add a server\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
    return block


@pytest.fixture
def flavour(tmp_path) -> type[Protocol]:
    """The recipe's module, written and imported; its protocol class."""
    path = tmp_path / "acme.py"
    path.write_text(recipe())
    spec = importlib.util.spec_from_file_location("acme_recipe", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (cls,) = [
        c
        for c in vars(module).values()
        if inspect.isclass(c) and issubclass(c, Protocol) and c.__module__ == module.__name__
    ]
    return cls


@pytest.fixture
def registered(flavour, monkeypatch) -> type[Protocol]:
    """The recipe's registry entry."""
    monkeypatch.setitem(PROTOCOLS, flavour.kind, flavour)
    return flavour


class FakeAcme(fake.FakeServer):
    """A server of the recipe's flavour: vLLM's answers, ``owned_by: "acme"``, its limits at
    ``/acme/limits`` and no ``/version``."""

    def __init__(self, **knobs):
        super().__init__("vllm", owned_by="acme", **knobs)

    def info(self) -> dict:
        return {"/acme/limits": dict(LIMITS)}

    async def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=METRICS)
        return await super().handler(request)


def test_the_recipe_is_a_module_of_its_own_flavour(flavour):
    assert flavour.kind == "acme" and flavour.owned_by == ("acme",)
    assert "metrics_reading" in vars(flavour)  # its own counters, not vLLM's
    assert flavour.kind not in PROTOCOLS  # not registered until its entry is added
    package = Path(inspect.getfile(Protocol)).parents[2]  # mars/
    naming = [p for p in package.rglob("*.py") if "acme" in p.read_text().lower()]
    assert naming == []  # nothing else names it


def test_without_its_entry_the_server_is_refused(flavour):
    with pytest.raises(ServerError, match="takes token-id prompts but does not say which server"):
        backend(FakeAcme())


def test_with_its_entry_the_backend_drives_it(registered, tmp_path):
    server = FakeAcme(delay=0.01)
    be = backend(server, max_tokens=24)
    assert type(be.protocol) is registered and be.protocol.kind == "acme"
    assert be.context_len == LIMITS["max_context"]
    assert be.http.concurrency == LIMITS["max_running"]  # its default_concurrency
    described = be.describe()["server"]
    assert described["kind"] == "acme" and described["version"] == LIMITS["version"]
    assert ("/acme/limits", None) in server.requests
    out = generate_pool(be, [Q], 6, 5, tmp_path / "pool", spacing=8, progress=False)
    rows = read_trace_table(out / schema.trace_file_name(Q.qid)).to_pylist()
    assert len(rows) == 6 and 0 < server.most_in_flight <= LIMITS["max_running"]
    prompt = be.prompt_ids(Q.question)
    bodies = completions(server)[1:]  # the first is the connect-time trial
    for row in rows:  # each trace's first request: its confidences the top 20 sent
        seed = generation_seed(5, Q.qid, row["trace_idx"], 0)
        (first,) = [b for b in bodies if b["prompt"] == prompt and b["seed"] == seed]
        tops = server.truth[(tuple(prompt), seed)]
        want = [token_confidence([lp for lp, _ in t[:CONF_TOP_K]]) for t in tops]
        assert first["max_tokens"] == 8
        assert row["confs"][: len(tops)] == [float(np.float16(w)) for w in want]
    be.close()


def test_mars_serve_reads_its_counters_where_it_says(registered):
    pytest.importorskip("prometheus_client")
    from mars.serve.engine_metrics import read_engine

    be = backend(FakeAcme())
    c = read_engine(be)
    assert (c.generated, c.prompt, c.cached, c.computed, c.hits) == (50, 143, 70, 73, 70)
    assert (c.running, c.waiting) == (2, 1)
    be.close()


def test_named_and_given_a_concurrency(registered):
    be = ServerBackend(
        base_url="http://toy:8000",
        server="acme",
        concurrency=5,
        transport=FakeAcme().transport(),
        tokenizer=fake.tokenizer(),
    )
    assert be.protocol.kind == "acme" and be.http.concurrency == 5
    be.close()
