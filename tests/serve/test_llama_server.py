"""``mars serve`` in front of real servers, driven by the official ``openai`` client: llama.cpp's
``llama-server`` and vLLM's CPU build (SmolLM2-135M on CPU, ``tests/vllm_server.py``). Completions
and chat with an early stop that leaves the server idle, streaming, a client that goes away, an
upstream killed mid-request, a full queue, a recorded pool replayed exactly, plain requests passed
through, and the server's own tokenizer (when the default one cannot load).

Every test takes an ``upstream``: the kind of server, its URL, how to tell whether it is still
generating, and how to start another replica. A server joins by adding its name to :data:`KINDS`
(with the marker its live tests carry) and a fixture ``<name>_upstream`` returning an
:class:`Upstream`. Each test runs once per kind, marked ``llama_server`` or ``vllm_server``, so
that CI runs each kind's tests beside the other tests of that server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("starlette")

from conftest import vllm_module  # noqa: E402
from engines.server.common import FEW_SHOT, LlamaServer, need_llama_server  # noqa: E402
from serving import serving  # noqa: E402

from mars.engines.server import ServerBackend, answer_limit  # noqa: E402
from mars.live import replay_run  # noqa: E402
from mars.serve.requests import Defaults  # noqa: E402
from mars.serve.upstreams import STREAMED, Upstreams  # noqa: E402

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
#: the servers the tests run against (a fixture ``<name>_upstream`` each): the kind of server
#: (``ServerBackend.protocol.kind``) and the marker of its live tests
KINDS = {
    "llama": ("llama.cpp", pytest.mark.llama_server),
    "vllm": ("vllm", pytest.mark.vllm_server),
}


def kinds(only: Callable[[str], bool] = lambda kind: True) -> list:
    """The fixture parameters of the servers whose kind ``only`` takes, each with its marker."""
    return [
        pytest.param(name, marks=mark, id=name)
        for name, (kind, mark) in KINDS.items()
        if only(kind)
    ]


#: small and quick on 2 CPU cores: 6 traces of at most 96 tokens, a checkpoint every 16
SMALL = Defaults(
    method="sc-consensus", traces=6, warmup=2, spacing=16, max_tokens=96, knobs={"consensus": 0.5}
)


@dataclass
class Upstream:
    """A real server for the proxy to front (see the module docstring)."""

    kind: str
    url: str
    busy: Callable[[], int]  # requests it is generating now
    replica: Callable[[Path], Upstream]  # another server of the same model (stop() it after)
    kill: Callable[[], None]  # SIGKILL, as a crash
    stop: Callable[[], None]
    restart: Callable[[], object]  # start it again at the same URL
    start_s: float  # the longest a start may take
    #: a seed whose 6 traces agree early at this server (the same seed gives other traces at
    #: llama.cpp, 4-bit, than at vLLM, bfloat16)
    seed: int
    #: a module whose absence stops the default tokenizer from loading (a GGUF's needs torch, a
    #: model folder's transformers)
    tokenizer_needs: str


def _llama(server: LlamaServer) -> Upstream:
    def replica(log: Path) -> Upstream:
        return _llama(LlamaServer(log).start())

    return Upstream(
        "llama.cpp",
        server.url,
        server.busy_slots,
        replica,
        server.kill,
        server.stop,
        lambda: server.start(port=server.port),
        60.0,
        3,
        "torch",
    )


def _vllm(server) -> Upstream:
    """A vLLM server (``tests/vllm_server.py``'s handle; a replica: one more started here, each
    with its own 1 GiB of KV cache and about 3.5 GB of memory)."""
    vs = vllm_module()

    def replica(log: Path) -> Upstream:
        return _vllm(vs.VLLMServer(server.folder, log.with_suffix("")).start())

    def kill() -> None:
        assert server.proc is not None, "a server started elsewhere is not killed here"
        os.killpg(server.proc.pid, signal.SIGKILL)  # the API server and its engine processes
        server.proc.wait(30)

    return Upstream(
        "vllm",
        server.url,
        lambda: int(server.metrics().get("vllm:num_requests_running", 0)),
        replica,
        kill,
        server.stop,
        lambda: server.start(port=server.port),
        vs.READY_TIMEOUT,
        9,
        "transformers",
    )


@pytest.fixture(scope="module")
def llama_upstream(tmp_path_factory):
    need_llama_server()
    server = LlamaServer(tmp_path_factory.mktemp("llama") / "server.log").start()
    yield _llama(server)
    server.stop()


@pytest.fixture(scope="module")
def vllm_upstream(vllm_server):
    return _vllm(vllm_server)


@pytest.fixture(scope="module", params=kinds())
def upstream(request) -> Upstream:
    return request.getfixturevalue(f"{request.param}_upstream")


@pytest.fixture(scope="module", params=kinds(lambda kind: kind in STREAMED))
def streamed_upstream(request) -> Upstream:
    """The servers the proxy streams its requests to (:data:`mars.serve.upstreams.STREAMED`)."""
    return request.getfixturevalue(f"{request.param}_upstream")


def question(text: str = "What is 2 + 3?") -> list[dict]:
    """A user message after which SmolLM2-135M often writes a boxed answer."""
    return [{"role": "user", "content": FEW_SHOT.format(question=text)}]


def client(running) -> openai.OpenAI:
    return openai.OpenAI(base_url=running.url + "/v1", api_key="none", max_retries=0, timeout=300)


def idle(up: Upstream, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while up.busy():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def wait_busy(up: Upstream, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not up.busy():
        assert time.monotonic() < deadline, "the upstream never got busy"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def served(upstream, tmp_path_factory):
    record = tmp_path_factory.mktemp("record") / "rec"
    with serving([upstream.url], SMALL, record=str(record)) as running:
        yield running, record


def test_chat_and_completions_stop_early_leave_the_server_idle_and_replay(upstream, served):
    running, record = served
    c = client(running)
    model = running.state.model
    chat = c.chat.completions.create(model=model, messages=question(), n=6, seed=upstream.seed)
    m = chat.model_extra["mars"]
    assert m["stopped_by"] == "consensus" and m["stop_position"] < 96, m
    assert m["traces_stopped"] > 0 and m["full_budget_tokens_at_most"] > m["tokens"]["main"]
    assert m["tokens"]["main"] < m["full_budget_tokens"] <= m["full_budget_tokens_at_most"]
    assert f"\\boxed{{{m['answer']}}}" in chat.choices[0].message.content
    t = m["tokens"]
    assert chat.usage.completion_tokens == t["main"] + t["warmup"] + t["probes_generated"]
    assert t["probe_prompts_uncached"] is not None  # llama.cpp reports its cached tokens
    assert idle(upstream, within=1.0)  # the stop left no request running upstream
    # the same question as a completion of the chat template's text: the same prompt (llama.cpp
    # does not repeat a run bit for bit across batch compositions, so the traces may differ)
    text = running.state.upstreams.render("chat", None, question())
    done = c.completions.create(model=model, prompt=text, n=6, seed=upstream.seed)
    assert done.object == "text_completion" and done.usage.prompt_tokens == chat.usage.prompt_tokens
    assert done.model_extra["mars"]["answer"] is not None and idle(upstream, within=1.0)
    # both recorded in one pool, which `mars replay` re-decides exactly
    pool = record / m["record"].split("/")[-2]
    rows = replay_run(pool)
    assert len(rows) == 2 and all(r["match"] for r in rows)
    res = subprocess.run(
        [sys.executable, "-m", "mars.cli", "replay", str(pool)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert res.returncode == 0 and "2/2 questions replay exactly" in res.stdout


def test_an_audit_runs_the_stopped_traces_on_upstream_and_leaves_nothing_running(
    upstream, tmp_path
):
    """--audit-rate 1: once the client has its answer, the question's stopped traces are taken
    back from their token ids and run on at the server to their end (each the very prefix it was
    stopped at, then more); the full-budget vote is compared with the answer, counted apart from
    the client's usage, and the completed question is kept beside its pool, which `mars audit`
    reads into the live counts. The server is idle afterwards."""
    from mars.live.audit import AUDITED_DIR, audit_paths
    from mars.serve.audit import AuditOptions
    from mars.store.pool import open_pool

    record = tmp_path / "rec"
    with serving([upstream.url], SMALL, record=str(record), audit=AuditOptions(rate=1.0)) as run:
        chat = client(run).chat.completions.create(
            model=run.state.model, messages=question(), n=6, seed=upstream.seed
        )
        m = chat.model_extra["mars"]
        assert m["traces_stopped"] > 0, m
        deadline = time.monotonic() + 300
        while not (v := httpx.get(run.url + "/v1/mars/audit").json())["pools"]:
            assert not v["dropped"] and time.monotonic() < deadline, v
            time.sleep(0.2)
        assert idle(upstream, within=1.0)  # the audit left no request running upstream
        ((name, pool),) = v["pools"].items()
        assert pool["audits"] == 1 and v["tokens"]["traces"] > 0
        assert run.metric("audit_tokens", phase="traces") == v["tokens"]["traces"]
        t = m["tokens"]
        assert chat.usage.completion_tokens == t["main"] + t["warmup"] + t["probes_generated"]
    qid = int(m["record"].split("/")[-1])
    served = {r["trace_idx"]: r for r in _rows(record / name, qid)}
    full = {r["trace_idx"]: r for r in _rows(record / name / AUDITED_DIR, qid)}
    assert open_pool(record / name / AUDITED_DIR).qids == [qid]
    for trace in m["stopped_traces"]:
        was, now = served[trace], full[trace]
        assert list(now["token_ids"][: was["length"]]) == list(was["token_ids"])
        assert now["length"] > was["length"] and (now["finished"] or now["length"] == 96)
    live = audit_paths([record]).summary()["pools"][name]
    assert {k: live[k] for k in ("audits", "disagreements", "upper")} == {
        k: pool[k] for k in ("audits", "disagreements", "upper")
    }


def _rows(pool, qid: int) -> list[dict]:
    from mars.store import schema
    from mars.store.pool import read_trace_table

    return read_trace_table(pool / schema.trace_file_name(qid)).to_pylist()


def test_streaming_reports_each_checkpoint(upstream, served):
    running, _ = served
    chunks = list(
        client(running).chat.completions.create(
            model=running.state.model, messages=question(), n=6, seed=upstream.seed, stream=True
        )
    )
    progress = [
        ch.model_extra["mars"]
        for ch in chunks
        if (ch.model_extra or {}).get("mars", {}).get("phase") == "main"
    ]
    assert progress and progress[-1]["stop"] and progress[-1]["leader"] is not None
    assert [p["checkpoint"] for p in progress] == list(range(16, 16 * len(progress) + 1, 16))
    content = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert "\\boxed{" in content


def test_plain_requests_pass_through_and_a_question_too_long_is_400(served):
    running, _ = served
    r = client(running).chat.completions.create(
        model=running.state.model, messages=question(), max_tokens=8, temperature=0
    )
    assert r.choices[0].message.content and "mars" not in (r.model_extra or {})
    assert r.usage.completion_tokens <= 8
    with pytest.raises(openai.BadRequestError, match=r"max_tokens 4000: .* ask for \d+ or less"):
        client(running).chat.completions.create(
            model=running.state.model, messages=question(), n=4, max_tokens=4000
        )


def test_a_client_that_goes_away_stops_its_traces_upstream(upstream):
    slow = Defaults(method="sc", traces=4, warmup=0, spacing=512, max_tokens=1024)
    with serving([upstream.url], slow) as running:
        body = {"messages": question(), "n": 4, "stream": True, "seed": 1}
        with httpx.stream("POST", running.url + "/v1/chat/completions", json=body) as r:
            for _ in r.iter_lines():
                wait_busy(upstream)
                break
        assert idle(upstream, within=3.0)  # cancelled in flight, not at the next checkpoint
        deadline = time.monotonic() + 10
        while running.metric("cancelled") < 1:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_a_full_queue_answers_429(upstream):
    slow = Defaults(method="sc", traces=4, warmup=0, spacing=256, max_tokens=512)
    with serving([upstream.url], slow, max_active=1, max_queue=0) as running:
        c = client(running)
        results: list = []
        t = threading.Thread(
            target=lambda: results.append(
                c.chat.completions.create(
                    model=running.state.model, messages=question(), n=4, seed=2
                )
            )
        )
        t.start()
        wait_busy(upstream)
        with pytest.raises(openai.RateLimitError) as err:
            c.chat.completions.create(model=running.state.model, messages=question(), n=4)
        assert int(err.value.response.headers["retry-after"]) >= 1
        t.join()
        assert len(results) == 1 and results[0].model_extra["mars"]["method"] == "sc"


def test_an_upstream_killed_mid_request_moves_its_traces_then_fails_in_one_line(upstream, tmp_path):
    """Two replicas: one killed while the question runs, its traces go on on the other and the
    answer comes back; the other killed too, the next question fails at once with a 502 error
    object naming the upstreams, not a hang."""
    with ThreadPoolExecutor(2) as pool:  # started side by side
        started = [pool.submit(upstream.replica, tmp_path / f"{x}.log") for x in "ab"]
    if not all(f.exception() is None for f in started):
        for f in started:
            if f.exception() is None:
                f.result().stop()
        raise next(f.exception() for f in started if f.exception() is not None)
    a, b = (f.result() for f in started)
    try:
        ups = Upstreams([a.url, b.url], retries=1)
        slow = Defaults(method="sc", traces=4, warmup=0, spacing=128, max_tokens=512)
        with serving(ups, slow) as running:
            c = client(running)
            results: list = []
            t = threading.Thread(
                target=lambda: results.append(
                    c.chat.completions.create(
                        model=running.state.model, messages=question(), n=4, seed=4
                    )
                )
            )
            t.start()
            wait_busy(a)
            a.kill()
            t.join(300 + upstream.start_s)
            assert results, "the question did not finish on the other replica"
            m = results[0].model_extra["mars"]
            assert m["stopped_by"] == "budget" and m["tokens"]["main"] > 0
            health = httpx.get(running.url + "/health").json()
            assert [u["up"] for u in health["upstreams"]] == [False, True]
            assert running.metric("upstream_errors", upstream=a.url) >= 1
            a.restart()  # back at its URL: asked again within seconds, and taken back
            deadline = time.monotonic() + upstream.start_s
            while not all(u["up"] for u in httpx.get(running.url + "/health").json()["upstreams"]):
                assert time.monotonic() < deadline, "the restarted upstream was not taken back"
                time.sleep(0.5)
            a.kill()
            b.kill()
            t0 = time.monotonic()
            with pytest.raises(openai.APIStatusError) as err:
                c.chat.completions.create(model=running.state.model, messages=question(), n=4)
            assert time.monotonic() - t0 < 30
            assert err.value.status_code == 502
            body = err.value.response.json()["error"]
            assert body["type"] == "upstream_error" and "\n" not in body["message"]
            assert a.url in body["message"] and b.url in body["message"]
        ups.close()
    finally:
        a.stop()
        b.stop()


def test_the_servers_own_tokenizer_when_the_default_one_cannot_load(upstream, monkeypatch, caplog):
    """Without what the default tokenizer needs (torch for llama.cpp's GGUF: a llama.cpp user's
    install; transformers for vLLM's model folder), it gives way to the server's own
    (/tokenize, /detokenize, the chat template), in one log line; it gives the same prompt,
    suffix and trace text as the default tokenizer, and `mars serve --tokenizer server` serves
    with it."""
    gguf = ServerBackend(base_url=upstream.url)
    monkeypatch.setitem(sys.modules, upstream.tokenizer_needs, None)
    with caplog.at_level("INFO", logger="mars.engines.server"):
        srv = ServerBackend(base_url=upstream.url)
    assert srv.tokenizer_source == "server" and gguf.tokenizer_source != "server"
    assert "the tokenizer is the server's own" in caplog.text
    assert upstream.tokenizer_needs in caplog.text
    q = FEW_SHOT.format(question="What is 7 - 2?")
    assert srv.prompt_ids(q) == gguf.prompt_ids(q) and srv.suffix_ids == gguf.suffix_ids
    ids = gguf.tokenizer.encode("Le café coûte \\boxed{5} 元.", add_special_tokens=False)
    ids.append(gguf.tokenizer.eos_token_id)
    assert srv.tokenizer.decode(ids, skip_special_tokens=True) == gguf.tokenizer.decode(
        ids, skip_special_tokens=True
    )
    msgs = question()
    assert srv.tokenizer.apply_chat_template(msgs) == gguf.tokenizer.apply_chat_template(
        msgs, add_generation_prompt=True, tokenize=False
    )
    with pytest.raises(Exception, match=r"needs gguf|needs torch|needs transformers"):
        ServerBackend(base_url=upstream.url, tokenizer=str(gguf.tokenizer_source))
    gguf.close()
    srv.close()
    ups = Upstreams([upstream.url], tokenizer="server")
    with serving(ups, SMALL) as running:
        r = client(running).chat.completions.create(
            model=running.state.model, messages=question(), n=6, seed=upstream.seed
        )
        assert r.model_extra["mars"]["answer"] is not None
    ups.close()
    assert json.dumps(ups.primary.describe()["tokenizer"]) == '"server"'


def test_a_streamed_request_reads_back_as_the_unstreamed_answer(streamed_upstream):
    """The proxy streams its requests to llama.cpp (which stops a request only when its stream
    closes): the stream read back is the answer the same request gives unstreamed."""
    upstream = streamed_upstream
    be = ServerBackend(base_url=upstream.url)
    p = be.protocol
    body = p.body(be.prompt_ids("What is 2 + 3?"), 24, be.sampling, 7, logprobs=True)
    bound = (answer_limit(24, True, body["prompt"]), "24 tokens")

    def post(b: dict, sse: bool = False):
        return be.http.run(lambda: be.http.post(p.path, b, *bound, sse=sse))

    post(body)  # the prompt into the server's cache
    plain = p.parse(post(body), 24, True)
    events = post({**body, "stream": True}, sse=True)
    streamed = p.parse(STREAMED[upstream.kind](events), 24, True)
    keys = ("ids", "confs", "finished", "text", "prompt_tokens", "completion_tokens")
    assert {k: getattr(plain, k) for k in keys} == {k: getattr(streamed, k) for k in keys}
    assert len(events) > 2 and streamed.cached_tokens is not None
    be.close()
