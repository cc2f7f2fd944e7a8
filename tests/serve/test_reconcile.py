"""``mars serve``'s token counts reconciled with the engines' own counters (their ``/metrics``),
against a real llama.cpp ``llama-server`` (``--metrics``) and vLLM's CPU build: a question that
stops early, one that runs every trace to its end (and a plain request passed through), and one
whose client leaves mid-question.

Each case runs alone on an idle engine; the engine's counters are read before and after it, and
so are mars's (``mars_serve_tokens_total{kind, state}`` and its siblings). What holds:

* generated tokens: the engine's growth equals what mars counted of its finished requests,
  exactly, wherever no request was stopped in flight. A request mars stops in flight (a client
  that leaves) was generated on by the engine until it noticed, and both engines count those
  tokens (vLLM in ``vllm:generation_tokens_total``, llama.cpp in
  ``llamacpp:tokens_predicted_total``, as the request is released). mars counts, of a stopped
  request, what its stream had brought: llama.cpp's requests are streamed, vLLM's are not (mars
  receives nothing of a vLLM request it cancels). The engine's growth is then mars's count plus
  between 0 and what the stopped requests asked for less what they brought — the bound that always
  holds, asserted for both. Measured here (SmolLM2-135M on 2 CPU cores, 4 traces stopped
  mid-generation): llama.cpp generated 4 to 7 tokens mars never saw over 4 stopped requests (the
  token whose event was written into the closed connection, and the one whose write failed, which
  is how llama.cpp notices: at most 2 a request, also asserted); vLLM 34 to 53 over 3 to 4
  requests (all it generated for them, read by mars in no answer);
* prompt tokens: the engine's growth (every prompt token, cached or not) equals the prompt
  tokens the engine reported in its answers, exactly, and so do the cached ones (vLLM's
  ``vllm:prompt_tokens_cached_total``, llama.cpp's ``llamacpp:prompt_tokens_cached_total``);
  the prefix cache's own hits (vLLM ``vllm:prefix_cache_hits_total``) are within one cache block
  of them per request. A stopped request's prompt counts in the engine's totals once prefilled
  (vLLM: "counts an aborted request's prompt in its totals and in no per-request metric"): mars
  knows it as sent, so the engine's growth lies between the finished requests' and that plus the
  stopped ones'.

docs/serve.md, "Reconcile with your engine's dashboard", says the same for an operator.
"""

from __future__ import annotations

import time

import httpx
import pytest

pytest.importorskip("openai")
pytest.importorskip("starlette")

from serving import serving

import serve.test_llama_server as live
from mars.engines.server import PROTOCOLS
from mars.serve.engine_metrics import EngineCounters, parse, samples
from mars.serve.reconcile import KINDS, STATES
from mars.serve.upstreams import STREAMED

# the real servers, as the other tests of mars serve in front of them have them
llama_upstream, vllm_upstream, upstream = live.llama_upstream, live.vllm_upstream, live.upstream
SMALL, client, question, wait_busy = live.SMALL, live.client, live.question, live.wait_busy

pytestmark = pytest.mark.slow

#: vLLM's prefix cache block in tests/vllm_server.py (--block-size 32); llama.cpp caches tokens
BLOCK = {"vllm": 32, "llama.cpp": 1}


def engine(up) -> EngineCounters:
    return parse(PROTOCOLS[up.kind], httpx.get(up.url + "/metrics", timeout=10).text)


def steps(up) -> float:
    """How far the engine has generated, as it goes: vLLM's tokens (counted as generated),
    llama.cpp's decode steps (its token counts grow only as a request ends)."""
    got = samples(httpx.get(up.url + "/metrics", timeout=10).text)
    return got[
        "llamacpp:n_decode_total" if up.kind == "llama.cpp" else "vllm:generation_tokens_total"
    ]


def settled(up, within: float = 30.0) -> EngineCounters:
    """The engine's counters once it runs nothing (its counters of a request that ended are
    updated as the request is released)."""
    deadline = time.monotonic() + within
    while True:
        c = engine(up)
        if c.running == 0 and c.waiting == 0:
            time.sleep(0.3)
            again = engine(up)
            if again == c:
                return c
        assert time.monotonic() < deadline, "the engine never went idle"
        time.sleep(0.05)


def ours(running) -> dict[tuple[str, str, str], float]:
    """mars serve's upstream counters: (what, kind, state) → value."""
    text = httpx.get(running.url + "/metrics", timeout=10).text
    out: dict[tuple[str, str, str], float] = {}
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if "kind" in s.labels:
                key = (s.name, s.labels["kind"], s.labels.get("state", "finished"))
                out[key] = out.get(key, 0.0) + s.value
    return out


def grew(before: dict, after: dict, what: str, state: str, kind: str | None = None) -> float:
    kinds = KINDS if kind is None else (kind,)
    return sum(after.get((what, k, state), 0.0) - before.get((what, k, state), 0.0) for k in kinds)


def compare(up, running, run) -> dict:
    """Run ``run()`` alone on the idle engine: the engine's growth, mars's, and what ``run``
    returned."""
    e0, m0 = settled(up), ours(running)
    got = run()
    e1 = settled(up)
    time.sleep(0.2)  # mars counts a stopped request as its worker unwinds
    m1 = ours(running)
    d = e1.minus(e0)
    mars = {
        state: {
            "requests": grew(m0, m1, "mars_serve_upstream_requests_total", state),
            "asked": grew(m0, m1, "mars_serve_tokens_asked_total", state),
            "generated": grew(m0, m1, "mars_serve_tokens_total", state),
            "prompt": grew(m0, m1, "mars_serve_prompt_tokens_total", state),
        }
        for state in STATES
    }
    mars["finished"]["cached"] = grew(m0, m1, "mars_serve_prompt_tokens_cached_total", "finished")
    print(f"\n{up.kind}: engine {d}\n{up.kind}: mars {mars}")
    return {"engine": d, "mars": mars, "got": got}


def exact(up, r: dict) -> None:
    """No request was stopped in flight: every count agrees."""
    e, f = r["engine"], r["mars"]["finished"]
    assert r["mars"]["stopped"]["requests"] == 0
    assert f["requests"] > 0
    assert e["generated"] == f["generated"], r
    assert e["prompt"] == f["prompt"], r
    assert e["cached"] == f["cached"], r
    # the prefix cache's own hits: block by block, within a block of each request's
    assert abs(e["hits"] - f["cached"]) <= (BLOCK[up.kind] - 1) * f["requests"], r


def agree(view: dict, r: dict) -> None:
    """The response's ``mars.upstream`` says what the counters say."""
    totals: dict[str, float] = {}
    for states in view["requests"].values():
        for state, t in states.items():
            assert state == "finished"
            for k, v in t.items():
                totals[k] = totals.get(k, 0) + v
    f = r["mars"]["finished"]
    assert {k: totals[k] for k in ("requests", "generated", "prompt", "cached")} == {
        k: f[k] for k in ("requests", "generated", "prompt", "cached")
    }


@pytest.fixture(scope="module")
def running(upstream):
    with serving([upstream.url], SMALL) as running:
        yield running


def test_a_question_that_stops_early_counts_as_the_engine(upstream, running):
    c = client(running)

    def ask():
        return c.chat.completions.create(
            model=running.state.model, messages=question(), n=6, seed=upstream.seed
        )

    r = compare(upstream, running, ask)
    m = r["got"].model_extra["mars"]
    assert m["traces_stopped"] > 0, m  # it stopped early: between checkpoints, nothing aborted
    exact(upstream, r)
    agree(m["upstream"], r)
    assert set(m["upstream"]["requests"]) == {"main", "warmup", "probe"}
    assert m["upstream"]["request_id"] == r["got"].id
    # what the client is told it used is what the engine generated
    assert r["got"].usage.completion_tokens == r["engine"]["generated"]
    # the engine's running count was read after the stop
    deadline = time.monotonic() + 15
    while running.metric("engine_drain_seconds_count") < 1:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_an_audited_question_counts_its_audit_as_the_engine(upstream, running):
    """The live audit runs the stopped traces on once the client has its answer: its requests
    are counted as kind ``audit``, and the engine's growth is the question's and the audit's."""
    c = client(running)
    audits = running.metric("audits") + running.metric("audits_dropped")

    def ask():
        got = c.chat.completions.create(
            model=running.state.model,
            messages=question(),
            n=6,
            seed=upstream.seed,
            extra_body={"mars": {"audit": True}},
        )
        deadline = time.monotonic() + 120
        while running.metric("audits") + running.metric("audits_dropped") <= audits:
            assert time.monotonic() < deadline, "the audit never ended"
            time.sleep(0.1)
        return got

    r = compare(upstream, running, ask)
    m = r["got"].model_extra["mars"]
    assert m["traces_stopped"] > 0 and running.metric("audits_dropped") == 0, m
    exact(upstream, r)
    audit = running.metric("tokens", kind="audit", state="finished")
    assert audit > 0
    assert r["got"].usage.completion_tokens + audit == r["engine"]["generated"]


def test_a_question_run_to_its_end_and_a_plain_request_count_as_the_engine(upstream, running):
    c = client(running)

    def ask():
        whole = c.chat.completions.create(
            model=running.state.model,
            messages=question(),
            n=3,
            max_tokens=48,
            seed=upstream.seed,
            extra_body={"mars": {"method": "sc", "warmup": 0}},
        )
        plain = c.completions.create(
            model=running.state.model, prompt="1, 2, 3,", max_tokens=12, seed=1
        )
        return whole, plain

    r = compare(upstream, running, ask)
    whole, plain = r["got"]
    m = whole.model_extra["mars"]
    assert m["traces_stopped"] == 0 and m["stopped_by"] == "budget", m
    exact(upstream, r)
    assert grew({}, ours(running), "mars_serve_tokens_total", "finished", "pass-through") > 0
    assert plain.usage.completion_tokens + whole.usage.completion_tokens == r["engine"]["generated"]


def test_a_question_whose_client_leaves_counts_within_what_was_stopped(upstream, running):
    drains = running.metric("engine_drain_seconds_count")

    def leave():
        body = {  # a long answer: the traces are mid-generation when the client leaves
            "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
            "n": 4,
            "stream": True,
            "seed": 1,
            "max_tokens": 1024,
            "mars": {"method": "sc", "warmup": 0, "spacing": 512},
        }
        start = steps(upstream)
        with httpx.stream("POST", running.url + "/v1/chat/completions", json=body) as r:
            for _ in r.iter_lines():
                wait_busy(upstream)
                deadline = time.monotonic() + 60
                while steps(upstream) < start + 12:  # mid-generation
                    assert time.monotonic() < deadline
                    time.sleep(0.02)
                break
        deadline = time.monotonic() + 15
        while running.metric("cancelled") < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)

    r = compare(upstream, running, leave)
    e, f, s = r["engine"], r["mars"]["finished"], r["mars"]["stopped"]
    # the traces still running when the client left were stopped (one that ended first was not)
    assert 1 <= s["requests"] <= 4 and s["asked"] == 512 * s["requests"], r
    if upstream.kind not in STREAMED:
        assert s["generated"] == 0  # a request not streamed brings nothing until its end
    # the engine generated what mars counted, and of what it stopped what mars received and
    # some more, never more than was asked
    unseen = e["generated"] - f["generated"] - s["generated"]
    assert 0 <= unseen <= s["asked"] - s["generated"], r
    if upstream.kind in STREAMED:  # llama.cpp: measured 1 to 2 a request (the module docstring)
        assert unseen <= 2 * s["requests"], r
    # each stopped prompt is in the engine's totals once prefilled (never more than sent)
    assert f["prompt"] <= e["prompt"] <= f["prompt"] + s["prompt"], r
    print(f"{upstream.kind}: the engine generated {unseen:g} tokens of the stopped requests unseen")
    deadline = time.monotonic() + 15
    while running.metric("engine_drain_seconds_count") <= drains:
        assert time.monotonic() < deadline, "the stop's drain was never measured"
        time.sleep(0.1)
    assert running.metric("engine_drain_timeouts") == 0
    n, total = (
        running.metric("engine_drain_seconds_count"),
        running.metric("engine_drain_seconds_sum"),
    )
    print(
        f"{upstream.kind}: running after the stops {running.metric('engine_running_after_stop')}, "
        f"{total / n:.3f} s a drain on average over {n:g}"
    )
