"""What ``mars serve`` counts of its upstream requests (:mod:`mars.serve.reconcile`), on fake
servers: every request named after its question, counted by kind as the upstream reported it, in
the response and in ``/metrics``; the engines' counters read (:mod:`mars.serve.engine_metrics`);
the watch of a stop's drain. tests/serve/test_reconcile.py reconciles the same counts with real
engines."""

from __future__ import annotations

import json
import re
from collections import Counter
from types import SimpleNamespace

import httpx
import pytest

pytest.importorskip("starlette")

from serving import serving

from mars.engines.server import LlamaCppProtocol, OpenAITextProtocol, VLLMProtocol
from mars.serve.engine_metrics import EngineMetricsUnavailable, parse
from mars.serve.metrics import Metrics
from mars.serve.reconcile import REQUEST_ID_HEADER, DrainWatch, Ledger, Relayed
from mars.serve.requests import Defaults
from serve.common import fake_upstreams, fakes

FOUR = Defaults(method="sc", traces=4, warmup=2, spacing=8, max_tokens=24)

VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 64.0
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 143.0
# TYPE vllm:prompt_tokens_cached counter
vllm:prompt_tokens_cached_total{engine="0",model_name="m"} 70.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 50.0
"""
LLAMA_METRICS = """\
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 13
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 3
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 62
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
"""


def test_the_engines_counters_are_read_as_each_engine_means_them():
    v = parse(VLLMProtocol, VLLM_METRICS)
    assert (v.generated, v.prompt, v.cached, v.computed, v.hits) == (50, 143, 70, 73, 64)
    assert (v.running, v.waiting) == (2, 1)
    # llama.cpp counts the computed prompt tokens, "excluding cached tokens"
    lc = parse(LlamaCppProtocol, LLAMA_METRICS)
    assert (lc.generated, lc.prompt, lc.cached, lc.computed, lc.running) == (62, 16, 3, 13, 1)
    before = parse(LlamaCppProtocol, LLAMA_METRICS.replace(" 62", " 60"))
    assert lc.minus(before)["generated"] == 2
    for protocol, text in (
        (VLLMProtocol, LLAMA_METRICS),
        (OpenAITextProtocol, VLLM_METRICS),  # a server whose counters are not known
        (VLLMProtocol, "{"),
    ):
        with pytest.raises(EngineMetricsUnavailable):
            parse(protocol, text)


def test_every_upstream_request_is_named_after_its_question_and_counted_by_kind(tmp_path):
    servers = {"http://r0.test": fakes().FakeServer("vllm")}
    seen: list[tuple[str | None, dict]] = []
    server = servers["http://r0.test"]
    handler = server.handler

    async def spy(request):
        if request.url.path == "/v1/completions":
            seen.append((request.headers.get(REQUEST_ID_HEADER), json.loads(request.content)))
        return await handler(request)

    ups = fake_upstreams(servers)
    server.handler = spy
    with serving(ups, FOUR, engine_watch=False, record=str(tmp_path / "rec")) as running:
        r = httpx.post(
            running.url + "/v1/completions", json={"prompt": "What is 2 + 3?", "n": 4}, timeout=60
        )
        assert r.status_code == 200, r.text
        answer = r.json()
        up = answer["mars"]["upstream"]
        # the record keeps the ids' stem and the counts: engine logs join with it
        record = httpx.get(running.url + answer["mars"]["record"], timeout=10).json()
        assert record["upstream"] == up
        plain = httpx.post(
            running.url + "/v1/completions",
            json={"prompt": "1, 2,", "max_tokens": 5},
            timeout=60,
        )
        assert plain.status_code == 200, plain.text
        metric = running.metric
        counted = {
            k: metric("tokens", kind=k, state="finished")
            for k in ("main", "warmup", "probe", "pass-through")
        }
        requests = metric("upstream_requests")
    ups.close()
    ids = [rid for rid, _ in seen]
    assert all(ids) and len(set(ids)) == len(ids)  # one id each
    rid = answer["id"]
    assert up["request_id"] == rid and up["header"] == REQUEST_ID_HEADER
    mars_ids = [i for i in ids if i.startswith(rid + "-")]
    kinds = Counter(
        re.match(rf"{re.escape(rid)}-([a-z-]+?)(-t\d+)?-\d+$", i).group(1) for i in mars_ids
    )
    assert set(kinds) == {"main", "warmup", "probe"}
    t = up["requests"]
    assert {k: t[k]["finished"]["requests"] for k in t} == dict(kinds)
    # what the response says is what /metrics counted, and the fake's answers' own counts
    assert {k: t[k]["finished"]["generated"] for k in t} == {
        k: counted[k] for k in ("main", "warmup", "probe")
    }
    assert counted["pass-through"] == plain.json()["usage"]["completion_tokens"] > 0
    assert requests == len(seen) == len(mars_ids) + 1
    asked = sum(b["max_tokens"] for i, b in seen if i in mars_ids)
    assert sum(s["finished"]["asked"] for s in t.values()) == asked
    usage = answer["usage"]["completion_tokens"]
    assert usage == sum(s["finished"]["generated"] for s in t.values())


def test_a_stopped_request_counts_what_it_asked_and_its_prompt():
    m = Metrics()
    ledger = Ledger("q1", warmup=1, metrics=m)
    assert ledger.kind_of(0, False) == "warmup" and ledger.kind_of(3, False) == "main"
    assert ledger.kind_of(3, True) == "probe"
    assert ledger.request_id("main", 3) == "q1-main-t3-1"
    ledger.stopped("main", 64, 100, replica=0)
    ledger.stopped("probe", 50, 120, replica=0)
    assert ledger.stopped_at == {0: 2} and ledger.stopped_time is not None
    t = ledger.totals()
    assert t["main"]["stopped"] == {
        "requests": 1, "asked": 64, "generated": 0, "prompt": 100, "cached": 0
    }  # fmt: skip
    text = m.render().decode()
    assert 'mars_serve_tokens_asked_total{kind="probe",state="stopped"} 50.0' in text
    assert 'mars_serve_upstream_requests_total{kind="main",state="stopped"} 1.0' in text


def test_a_passed_through_stream_is_counted_from_its_usage_or_stopped():
    m = Metrics()
    ledger = Ledger("p", metrics=m, kind="pass-through")
    r = Relayed(ledger, {"prompt": [1, 2, 3], "max_tokens": 9, "stream": True})
    r.part(b'data: {"choices": []}\n\ndata: {"choices": [], "usa')
    r.part(b'ge": {"completion_tokens": 7, "prompt_tokens": 3}}\n\ndata: [DONE]\n\n')
    r.end()
    r.stop()  # the relay's end: already counted
    t = ledger.totals()["pass-through"]
    assert set(t) == {"finished"} and t["finished"]["generated"] == 7
    cut = Relayed(ledger, {"prompt": [1, 2, 3], "max_tokens": 9, "stream": True})
    cut.part(b'data: {"choices": []}\n\n')
    cut.stop()
    assert ledger.totals()["pass-through"]["stopped"]["prompt"] == 3


class _Http:
    def __init__(self, texts):
        self.texts = list(texts)

    def get_text(self, path, timeout=5.0):
        assert path == "/metrics"
        text = self.texts.pop(0) if len(self.texts) > 1 else self.texts[0]
        if text is None:
            raise OSError("no answer")
        return (200, text) if isinstance(text, str) else text


def _replica(texts, in_flight=0):
    backend = SimpleNamespace(http=_Http(texts), protocol=LlamaCppProtocol("m"))
    return SimpleNamespace(url="http://e.test", backend=backend, in_flight=in_flight)


def test_a_stop_is_timed_until_the_engine_runs_no_more_than_mars_has_there():
    m = Metrics()
    running = [LLAMA_METRICS.replace("requests_processing 1", f"requests_processing {n}")
               for n in (3, 2, 0)]  # fmt: skip
    watch = DrainWatch(m, [_replica(running)], poll=0.01)
    watch.stopped([0])
    watch.close()
    assert watch._thread is not None
    watch._thread.join(10)
    text = m.render().decode()
    assert 'mars_serve_engine_running_after_stop{upstream="http://e.test"} 3.0' in text
    assert 'mars_serve_engine_drain_seconds_count{upstream="http://e.test"} 1.0' in text


def test_an_engine_without_metrics_is_said_once_and_not_asked_again(caplog):
    m = Metrics()
    watch = DrainWatch(m, [_replica([(501, "")])], poll=0.01)
    watch.stopped([0])
    watch.close()
    assert watch._thread is not None
    watch._thread.join(10)
    assert "--metrics" in caplog.text and 0 in watch._off
    watch.stopped([0])  # not queued again
    assert watch._queue.empty()


def test_a_client_that_leaves_counts_its_requests_in_flight_as_stopped(caplog):
    from serve.common import SMALL, wait_for

    server = fakes().FakeServer("vllm", delay=5.0)
    ups = fake_upstreams({"http://e.test": server})
    with serving(ups, SMALL) as running:
        body = {"prompt": "What is 2 + 3?", "n": 4, "stream": True}
        with httpx.stream("POST", running.url + "/v1/completions", json=body) as r:
            for _ in r.iter_lines():
                wait_for(lambda: server.in_flight == 4)
                break
        wait_for(lambda: running.metric("upstream_requests", kind="main", state="stopped") == 4)
        assert running.metric("tokens_asked", kind="main", state="stopped") == 4 * SMALL.spacing
        assert running.metric("tokens", kind="main", state="stopped") == 0  # vLLM: not streamed
        assert running.metric("upstream_requests", kind="main", state="finished") == 0
        # the fake has no /metrics: said once, the stop not timed
        wait_for(lambda: "its counters cannot be read" in caplog.text)
        assert running.metric("engine_drain_seconds_count") == 0
    ups.close()
