"""``mars serve`` against hostile clients and misbehaving upstreams: every status honest (an OpenAI
error object with the right code, never a plain-text 500, a traceback or a 200 carrying an error),
nothing served that a client should not see, every request admitted before its answer starts.

Upstream faults come from the fake servers of ``tests/data/servers.py`` (a real server will not
fail on demand); the rest runs on the synthetic engine."""

from __future__ import annotations

import base64
import logging
import socket
import threading

import httpx
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("starlette")

from serving import serving  # noqa: E402

from mars.serve.requests import Defaults  # noqa: E402
from serve.common import (  # noqa: E402
    QUESTION,
    SMALL,
    fake_upstreams,
    fakes,
    post_in_thread,
    wait_for,
)

FAST = Defaults(traces=16, warmup=4, spacing=2048, max_tokens=16384)
#: a question that runs for seconds on the synthetic engine: sc never stops, 256 checkpoints
SLOW = {
    "prompt": QUESTION,
    "seed": 1,
    "max_tokens": 16384,
    "mars": {"traces": 64, "spacing": 64, "method": "sc"},
}


def _is_openai_error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json"), r.headers
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and "\n" not in err["message"]
    return err


def test_a_password_in_an_upstream_url_is_never_shown(monkeypatch, caplog):
    """The 502 a client gets when the upstream fails, /health, every /metrics label and the log
    name the upstream with its credentials hidden; the upstream still gets them."""
    monkeypatch.setattr("mars.serve.upstreams.REVIVE_S", float("inf"))
    fake = fakes()
    server = fake.FakeServer("vllm")
    password = "s3cret-Pw"
    token = base64.b64encode(f"admin:{password}".encode()).decode()
    ups = fake_upstreams({f"http://admin:{password}@a.test": server}, retries=0)
    seen_auth: list[str] = []
    handler = server.handler

    async def spy(request):
        seen_auth.append(request.headers.get("authorization", ""))
        return await handler(request)

    server.handler = spy
    with caplog.at_level(logging.INFO), serving(ups, SMALL) as running:
        ok = httpx.post(running.url + "/v1/completions", json={"prompt": "2 + 3?", "n": 4})
        assert ok.status_code == 200, ok.text
        server.fail = [503] * 10_000
        r = httpx.post(running.url + "/v1/completions", json={"prompt": "2 + 3?", "n": 4})
        err = _is_openai_error(r, 502)
        assert "a.test" in err["message"] and "***@" in err["message"]
        health = httpx.get(running.url + "/health")
        metrics = httpx.get(running.url + "/metrics").text
        assert 'upstream="http://***@a.test"' in metrics
    shown = r.text + health.text + metrics + caplog.text
    assert password not in shown and token not in shown and "admin:" not in shown
    assert "upstream http://***@a.test is down" in caplog.text
    assert f"Basic {token}" in seen_auth  # the credentials still reach the upstream
    ups.close()


def test_health_tells_anyone_whether_it_is_up_and_only_a_key_holder_what_is_behind_it():
    with serving(["synthetic"], FAST, api_key="sk-health-key") as running:
        anonymous = httpx.get(running.url + "/health")
        assert anonymous.status_code == 200 and anonymous.json() == {"status": "ok"}
        wrong = httpx.get(running.url + "/health", headers={"Authorization": "Bearer nope"})
        assert wrong.json() == {"status": "ok"}
        full = httpx.get(running.url + "/health", headers=running.headers()).json()
        assert full["status"] == "ok" and "upstreams" in full


def test_a_failing_upstream_is_a_502_in_an_http_clients_words(monkeypatch):
    """Not the command line's 'rerun the same command to resume'."""
    monkeypatch.setattr("mars.serve.upstreams.REVIVE_S", float("inf"))
    fake = fakes()
    server = fake.FakeServer("vllm")
    ups = fake_upstreams({"http://b.test": server}, retries=1)
    with serving(ups, SMALL) as running:
        server.fail = [503] * 10_000
        r = httpx.post(running.url + "/v1/completions", json={"prompt": "2 + 3?", "n": 4})
        err = _is_openai_error(r, 502)
        assert err["type"] == "upstream_error" and "http://b.test" in err["message"]
        assert "rerun" not in err["message"] and "command" not in err["message"]
    ups.close()


def test_an_upstream_event_nested_too_deep_is_a_502():
    """A streamed event nested 50,000 deep (a hostile llama.cpp) is the one-line 502 the JSON
    reader gives, not a RecursionError's 500."""
    fake = fakes()
    deep = b"data: " + b"[" * 50_000 + b"]" * 50_000 + b"\n\n"
    server = fake.FakeServer(  # the streamed requests only: the backend's checks at start pass
        "llama.cpp", mangle=lambda answer, body: deep if body.get("stream") else answer
    )
    ups = fake_upstreams({"http://c.test": server}, retries=0)
    with serving(ups, SMALL) as running:
        r = httpx.post(running.url + "/v1/completions", json={"prompt": "2 + 3?", "n": 4})
        err = _is_openai_error(r, 502)
        assert "a streamed event that is not JSON" in err["message"]
    ups.close()


def test_streamed_requests_beyond_the_queue_are_real_429s(monkeypatch):
    """Admission is decided before a stream starts: while one question holds the only slot, of
    five streamed requests arriving together at --max-queue 1 one waits and is answered whole
    and four are HTTP 429 with Retry-After — no 200 carrying an error event — and /metrics
    counts what was sent. The five prompts are rendered at once (each waits for the others), so
    that all five are past their reading before the first reaches the queue: where the slot were
    taken inside the stream, every one would be admitted. The question holding the slot ends
    when the test says so."""
    from mars.serve import app

    real_prepare, real_run = app.prepare, app.run_question
    release = threading.Event()
    together = threading.Barrier(5)

    def slow_prepare(upstreams, q):
        if q.prompt != "HOLD":
            together.wait(30)
        return real_prepare(upstreams, q)

    def held_run(upstreams, prep, *rest):
        if "HOLD" in prep.text:
            release.wait(60)
        return real_run(upstreams, prep, *rest)

    monkeypatch.setattr(app, "prepare", slow_prepare)
    monkeypatch.setattr(app, "run_question", held_run)
    with serving(["synthetic"], FAST, max_active=1, max_queue=1) as running:
        held: list = []
        holder = post_in_thread(running.url + "/v1/completions", {"prompt": "HOLD", "n": 4}, held)
        wait_for(lambda: running.state.scheduler.active == 1)
        body = {"prompt": QUESTION, "n": 4, "stream": True}
        results: list = []
        barrier = threading.Barrier(5)

        def go(seed: int):
            barrier.wait()
            with httpx.stream(
                "POST", running.url + "/v1/completions", json={**body, "seed": seed}, timeout=120
            ) as r:
                results.append((r, r.read().decode()))

        threads = [threading.Thread(target=go, args=(k,)) for k in range(5)]
        for th in threads:
            th.start()
        wait_for(lambda: len(results) == 4)  # the refused ones, while the slot is held
        release.set()
        for th in threads:
            th.join()
        holder.join()
        assert [s for s, _, _ in held] == [200]
        ok = [text for r, text in results if r.status_code == 200]
        refused = [r for r, _ in results if r.status_code != 200]
        assert len(ok) == 1 and len(refused) == 4, [r.status_code for r, _ in results]
        assert '"error"' not in ok[0] and ok[0].rstrip().endswith("data: [DONE]")
        for r in refused:
            err = _is_openai_error(r, 429)
            assert err["type"] == "rate_limit_error" and int(r.headers["retry-after"]) >= 1
        assert running.metric("requests", route="/v1/completions", status="429") == 4
        assert running.metric("requests", route="/v1/completions", status="200") == 2


def test_a_whole_answer_request_that_loses_its_client_in_the_queue_leaves_it():
    """It never starts: the queue empties at once, the question that held the slot goes on."""
    with serving(["synthetic"], FAST, max_active=1, max_queue=4) as running:
        results: list = []
        t = post_in_thread(running.url + "/v1/completions", SLOW, results)
        wait_for(lambda: running.state.scheduler.active == 1)
        payload = httpx.Request("POST", "http://x/v1/completions", json={**SLOW, "seed": 2})
        port = int(running.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as sock:
            head = (
                f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload.content)}\r\n\r\n"
            )
            sock.sendall(head.encode() + payload.content)
            wait_for(lambda: running.state.scheduler.queued == 1)
        wait_for(lambda: running.state.scheduler.queued == 0, timeout=10)
        assert running.state.scheduler.active == 1 and t.is_alive()
        assert running.metric("left_queue") == 1
        t.join()
        assert [s for s, _, _ in results] == [200]
        assert running.metric("questions") == 1 and running.metric("cancelled") == 0


def test_pass_through_requests_go_through_the_queue(caplog):
    """Eight plain requests at --max-active 1 --max-queue 2: one runs, two wait, five are 429
    with Retry-After; never two at the upstream at once, every answer whole, nothing in the log
    above a warning, and the replica's load counts them while they run. The upstream answers
    only once the five refusals are in, so no request ends before the last one arrives."""
    import asyncio

    fake = fakes()
    server = fake.FakeServer("vllm")
    gate = threading.Event()
    answer = server.handler

    async def held(request):
        if request.url.path == "/v1/completions" and not request.content.count(b'"logprobs"'):
            server.in_flight += 1
            server.most_in_flight = max(server.most_in_flight, server.in_flight)
            try:
                while not gate.is_set():
                    await asyncio.sleep(0.01)
            finally:
                server.in_flight -= 1
        return await answer(request)

    server.handler = held
    ups = fake_upstreams({"http://d.test": server})
    with (
        caplog.at_level(logging.WARNING),
        serving(ups, SMALL, max_active=1, max_queue=2) as running,
    ):
        model = running.state.model
        body = {"model": model, "prompt": "2 + 3?", "max_tokens": 8, "seed": 1}
        results: list = []
        barrier = threading.Barrier(8)

        def go():
            barrier.wait()
            r = httpx.post(running.url + "/v1/completions", json=body, timeout=60)
            results.append(r)

        threads = [threading.Thread(target=go) for _ in range(8)]
        for th in threads:
            th.start()
        wait_for(lambda: len(results) == 5)  # the refusals, while the first request is held
        gate.set()
        for th in threads:
            th.join()
        statuses = sorted(r.status_code for r in results)
        assert statuses == [200] * 3 + [429] * 5, statuses
        for r in results:
            if r.status_code == 200:
                assert r.json()["choices"][0]["text"]
            else:
                _is_openai_error(r, 429)
                assert int(r.headers["retry-after"]) >= 1
        assert server.most_in_flight == 1
        assert running.metric("requests", route="/v1/completions", status="200") == 3
        assert running.metric("requests", route="/v1/completions", status="429") == 5
        assert ups.list[0].in_flight == 0 and running.state.scheduler.active == 0
    assert not [r for r in caplog.records if r.levelno > logging.WARNING]
    ups.close()


def test_a_streamed_pass_through_holds_its_slot_while_it_runs():
    fake = fakes()
    server = fake.FakeServer("vllm", delay=1.0)
    ups = fake_upstreams({"http://e.test": server})
    with serving(ups, SMALL, max_active=1, max_queue=0) as running:
        body = {"prompt": "2 + 3?", "max_tokens": 8, "seed": 1, "stream": True}
        results: list = []
        t = post_in_thread(running.url + "/v1/completions", body, results)
        wait_for(lambda: server.in_flight == 1)
        assert running.state.scheduler.active == 1 and ups.list[0].in_flight == 1
        busy = httpx.post(running.url + "/v1/completions", json={**body, "stream": False})
        _is_openai_error(busy, 429)
        t.join()
        assert results[0][0] == 200
        wait_for(lambda: running.state.scheduler.active == 0 and ups.list[0].in_flight == 0)
    ups.close()


HOSTILE = [
    # (body, status, param, words in the message)
    ({"prompt": "x", "n": 4, "mars": {"method": 5}}, 400, "mars.method", "a method's name"),
    ({"prompt": "x", "n": 4, "mars": {"method": ["sc"]}}, 400, "mars.method", "not a list"),
    ({"prompt": "x", "n": 4, "mars": {"method": {}}}, 400, "mars.method", "not an object"),
    ({"prompt": "x", "n": 4, "mars": {"return_traces": "no"}}, 400, "mars.return_traces", ""),
    ({"prompt": "x", "n": 4, "mars": {"return_traces": []}}, 400, "mars.return_traces", ""),
    ({"prompt": "\ud800", "n": 4}, 400, "prompt", "lone surrogate (\\ud800)"),
    ({"messages": [{"role": "user", "content": "a\udfff"}], "n": 4}, 400, "messages", "surrogate"),
    (
        {"prompt": "x", "n": 4, "response_format": {"type": "json_object"}},
        400,
        "response_format",
        "not supported in a MARS request",
    ),
    ({"prompt": "x", "n": 4, "tool_choice": "auto"}, 400, "tool_choice", "not supported"),
    ({"prompt": "x", "n": 4, "logit_bias": {"50256": -100}}, 400, "logit_bias", "not supported"),
    ({"prompt": "x", "n": 4, "presence_penalty": 0.5}, 400, "presence_penalty", "not supported"),
    ({"prompt": "x", "n": 4, "frequency_penalty": 1}, 400, "frequency_penalty", "not supported"),
    (
        {"prompt": "x", "n": 60, "mars": {"warmup": 10}},
        400,
        "mars.warmup",
        "n 60 + mars.warmup 10: more traces than this server's --max-traces 64",
    ),
    ({"prompt": "x", "n": ["a"] * 10_000, "mars": {}}, 400, "n", "n a list: must be a whole"),
    # the live settings' bound, refused before a streamed answer starts (not an error event)
    ({"prompt": "x", "n": 2, "seed": 2**32, "stream": True}, 400, "seed", "at most 4,294,967,295"),
]


@pytest.fixture(scope="module")
def hostile_server():
    with serving(["synthetic"], Defaults(traces=16, warmup=4, max_traces=64)) as running:
        yield running


@pytest.mark.parametrize(("body", "status", "param", "words"), HOSTILE)
def test_hostile_bodies_are_400_openai_errors(hostile_server, body, status, param, words):
    import json

    raw = json.dumps(body).encode()  # lone surrogates as \ud800 escapes, as a client sends them
    r = httpx.post(
        hostile_server.url + "/v1/completions",
        content=raw,
        headers={"Content-Type": "application/json"},
    )
    err = _is_openai_error(r, status)
    assert err["param"] == param and words in err["message"], err


def test_neutral_values_of_unsupported_fields_are_accepted(hostile_server):
    """What a harness sends by default (penalties 0, no logit bias, text format) asks for
    nothing a MARS request cannot do."""
    body = {
        "prompt": QUESTION,
        "n": 4,
        "presence_penalty": 0,
        "frequency_penalty": 0.0,
        "logit_bias": {},
        "response_format": {"type": "text"},
        "tool_choice": "none",
    }
    r = httpx.post(hostile_server.url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        b'{"prompt": "x", "n": 2, "mars": ' + b"[" * 70 + b"]" * 70 + b"}",
    ],
    ids=["list", "object", "shallow-but-over-64"],
)
def test_a_body_nested_too_deep_is_one_line(hostile_server, raw):
    r = httpx.post(hostile_server.url + "/v1/chat/completions", content=raw)
    err = _is_openai_error(r, 400)
    assert "nested more than 64 deep" in err["message"]


def test_a_question_no_trace_answers_is_never_an_empty_200():
    """Traces that write no answer in the question's format: the longest trace's text, a note
    saying so, mars.answered false, counted by format; a server's own format (NAME=REGEX) reads
    the same traces' answers; an unknown format is a 400."""
    import re as _re

    fake = fakes()
    server = fake.FakeServer("vllm")
    ups = fake_upstreams({"http://f.test": server})
    formats = {"boxed": None, "gsm8k": r"^####\s*(.+?)\s*$", "boxnum": r"boxed\{(\d+)\}"}
    defaults = Defaults(
        method="sc", traces=4, warmup=0, spacing=8, max_tokens=64, answer_formats=formats
    )
    with serving(ups, defaults) as running:
        url = running.url + "/v1/completions"
        body = {"prompt": "What is 2 + 3?", "n": 4, "seed": 3}
        r = httpx.post(url, json={**body, "mars": {"answer_format": "gsm8k"}}, timeout=60)
        out = r.json()
        m = out["mars"]
        assert r.status_code == 200 and m["answer"] is None and m["answered"] is False
        assert out["choices"][0]["text"].strip(), out  # a trace's text, never empty
        assert any("no trace wrote an answer in the gsm8k format" in n for n in m["notes"])
        assert running.metric("unanswered", format="gsm8k") == 1
        r = httpx.post(url, json={**body, "mars": {"answer_format": "boxnum"}}, timeout=60)
        m = r.json()["mars"]
        assert m["answered"] and _re.fullmatch(r"\d+", m["answer"]), m
        bad = httpx.post(url, json={**body, "mars": {"answer_format": "nope"}})
        err = _is_openai_error(bad, 400)
        assert err["param"] == "mars.answer_format" and "boxed, gsm8k, boxnum" in err["message"]
    ups.close()


def test_mars_for_object_lets_plain_n_through():
    """--mars-for object: a plain n > 1 request passes through to the upstream unchanged; one
    with a mars object is a question."""
    fake = fakes()
    server = fake.FakeServer("vllm")
    ups = fake_upstreams({"http://g.test": server})
    defaults = Defaults(
        method="sc", traces=4, warmup=0, spacing=8, max_tokens=32, mars_for="object"
    )
    with serving(ups, defaults) as running:
        url = running.url + "/v1/completions"
        plain = httpx.post(url, json={"prompt": "2 + 3?", "n": 2, "max_tokens": 8}, timeout=60)
        assert plain.status_code == 200 and "mars" not in plain.json()
        question = httpx.post(url, json={"prompt": "2 + 3?", "n": 4, "mars": {}}, timeout=60)
        assert question.status_code == 200 and question.json()["mars"]["traces"] == 4
    ups.close()


def test_the_servers_defaults_fit_the_request_and_a_refusal_names_its_fields():
    """The server's spacing (2,048) on a request capped at 1,024 tokens: a checkpoint every 256
    (said in mars.notes), not a 400 in the command line's words; a spacing the client asks for
    that leaves no checkpoint, or a cap past the model's context, is a 400 naming the request's
    fields."""
    fake = fakes()
    server = fake.FakeServer("vllm")  # a 4,096-token context
    ups = fake_upstreams({"http://h.test": server})
    with serving(ups, Defaults(method="sc", traces=4, warmup=0)) as running:
        url = running.url + "/v1/completions"
        body = {"prompt": "What is 2 + 3?", "n": 4, "seed": 1}
        ok = httpx.post(url, json={**body, "max_tokens": 1024}, timeout=60)
        m = ok.json()["mars"]
        assert ok.status_code == 200 and m["spacing"] == 256, ok.text
        assert any("a checkpoint every 256 tokens" in n for n in m["notes"])
        bad = httpx.post(url, json={**body, "max_tokens": 1024, "mars": {"spacing": 2048}})
        err = _is_openai_error(bad, 400)
        assert err["param"] == "mars.spacing"
        assert err["message"].startswith("mars.spacing 2048: no checkpoint within max_tokens 1024")
        assert "--" not in err["message"]
        big = httpx.post(url, json={**body, "max_tokens": 8192})
        err = _is_openai_error(big, 400)
        assert err["param"] == "max_tokens" and err["message"].startswith("max_tokens 8192: ")
        assert "ask for" in err["message"] and "--" not in err["message"]
    ups.close()
