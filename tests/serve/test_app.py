"""``mars serve`` (mars/serve) in front of the synthetic engine, with the official ``openai``
client.

The app runs under a real uvicorn on a loopback port (tests/serving.py). The same checks against a
real llama.cpp server are in tests/serve/test_llama_server.py; the scheduler alone is in
tests/serve/test_schedule.py."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
from typer.testing import CliRunner

openai = pytest.importorskip("openai")
pytest.importorskip("starlette")

from serving import serving  # noqa: E402

from mars.cli import app as cli  # noqa: E402
from mars.errors import MarsError  # noqa: E402
from mars.live import replay_run  # noqa: E402
from mars.serve.requests import Defaults  # noqa: E402
from mars.serve.upstreams import Upstreams  # noqa: E402
from mars.store.pool import open_pool  # noqa: E402
from serve.common import fakes  # noqa: E402

FAST = Defaults(traces=16, warmup=4, spacing=2048, max_tokens=16384)
QUESTION = "What is the sum of the first 20 positive integers?"


def client(running, **kw) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=running.url + "/v1", api_key=kw.pop("api_key", "none"), max_retries=0, **kw
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    record = tmp_path_factory.mktemp("record") / "rec"
    with serving(["synthetic"], FAST, record=str(record)) as running:
        yield running, record


def test_a_completion_with_n_is_one_question_solved_and_recorded(served):
    """n > 1: one answer (choice 0) whose text ends with it, usage counting every token (main,
    warmup, probes), the mars object, and a record that `mars replay` re-decides exactly."""
    running, record = served
    c = client(running)
    r = c.completions.create(model="synthetic:qwen3-8b", prompt=QUESTION, n=16, seed=5)
    m = r.model_extra["mars"]
    assert len(r.choices) == 1 and r.choices[0].finish_reason == "stop"
    assert m["answer"] is not None and f"\\boxed{{{m['answer']}}}" in r.choices[0].text
    assert m["traces"] == 16 and m["warmup"] == 4 and m["method"] == "sc-mars-cal"
    t = m["tokens"]
    assert t["paid"] == t["main"] + t["warmup"] + t["probes_generated"] > t["main"]
    assert r.usage.completion_tokens == t["paid"]
    assert m["votes"][0]["answer"] == m["answer"]
    assert m["replay_ok"]
    if m["stopped_by"] != "budget":  # an estimate, its basis stated, under the bound
        assert m["traces_stopped"] > 0 and m["full_budget_basis"].startswith("estimate")
        assert t["main"] < m["full_budget_tokens"] <= m["full_budget_tokens_at_most"]
    full = m["full_budget_tokens"]
    assert m["savings"]["paper"] == round((full - t["main"]) / full, 4)
    assert m["savings"]["paid"] == round((full - t["paid"]) / full, 4) < m["savings"]["paper"]
    # the record: the link answers the live record; the pool replays exactly
    rec = httpx.get(running.url + m["record"]).json()
    assert rec["answer"] == m["answer"] and rec["seed"] == 5
    pool = record / m["record"].split("/")[-2]
    assert all(row["match"] for row in replay_run(pool))
    assert open_pool(pool).manifest["live"]["method"] == "sc-mars-cal"


def test_served_traffic_is_a_pool_that_simulate_reads(served, tmp_path):
    running, record = served
    c = client(running)
    for k in range(3):  # no seed: the server's (one pool per seed, as per method and sizes)
        c.completions.create(model="synthetic:qwen3-8b", prompt=f"{QUESTION} ({k})", n=16)
    pools = [p for p in record.iterdir() if p.name.startswith("sc-mars-cal-n16-w4")]
    (pool,) = [p for p in pools if open_pool(p).manifest["seed"] == 0]
    n = open_pool(pool).manifest["n_questions"]
    assert n >= 3 and sorted(open_pool(pool).qids) == list(range(n))
    res = CliRunner().invoke(
        cli,
        [
            "simulate",
            str(pool),
            "-m",
            "sc,sc-mars-cal",
            "--budget",
            "8",
            "--warmup",
            "4",
            "--iterations",
            "4",
            "--out",
            str(tmp_path / "sim"),
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    assert (tmp_path / "sim" / "sc-mars-cal" / "overall.json").is_file()


def test_without_its_extra_serve_says_what_to_install():
    code = (
        "import sys\nsys.modules['starlette'] = sys.modules['uvicorn'] = None\n"
        "from mars.cli import main\nraise SystemExit(main(['serve', '--upstream', 'synthetic']))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: mars serve needs starlette and uvicorn, which are not installed")
    assert "[serve]" in line  # the extra, however the install hint names the distribution


def test_chat_and_the_same_seed_give_the_same_answer(served):
    running, _ = served
    c = client(running)
    msgs = [{"role": "user", "content": QUESTION}]
    a = c.chat.completions.create(model="synthetic:qwen3-8b", messages=msgs, n=16, seed=11)
    b = c.chat.completions.create(
        model="synthetic:qwen3-8b", messages=msgs, seed=11, extra_body={"mars": {"traces": 16}}
    )
    assert a.object == "chat.completion" and a.choices[0].message.role == "assistant"
    keep = ("answer", "votes", "stopped_by", "stop_position", "stopped_traces", "tokens")
    ma, mb = a.model_extra["mars"], b.model_extra["mars"]
    assert {k: ma[k] for k in keep} == {k: mb[k] for k in keep}
    assert a.choices[0].message.content == b.choices[0].message.content


def test_the_traces_come_back_as_choices_on_request(served):
    running, _ = served
    r = client(running).completions.create(
        model="synthetic:qwen3-8b",
        prompt=QUESTION,
        seed=2,
        extra_body={"mars": {"traces": 8, "warmup": 2, "method": "sc", "return_traces": True}},
    )
    assert len(r.choices) == 9 and [c.index for c in r.choices] == list(range(9))
    m = r.model_extra["mars"]
    assert m["stopped_by"] == "budget" and m["full_budget_tokens"] == m["tokens"]["main"]
    assert m["full_budget_basis"].startswith("exact") and m["savings"]["paper"] == 0.0
    assert sum(c.model_extra["mars"]["tokens"] for c in r.choices[1:]) == m["tokens"]["main"]


def test_streaming_reports_progress_then_the_answer(served):
    """stream: intermediate chunks carry the checkpoint, leader, shares and traces running in a
    ``mars`` field; the answer is the content; usage on request; then [DONE]."""
    running, _ = served
    c = client(running)
    whole = c.completions.create(model="synthetic:qwen3-8b", prompt=QUESTION, n=16, seed=7)
    chunks = list(
        c.completions.create(
            model="synthetic:qwen3-8b",
            prompt=QUESTION,
            n=16,
            seed=7,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    progress = [
        ch.model_extra["mars"]
        for ch in chunks
        if (ch.model_extra or {}).get("mars", {}).get("phase") == "main"
    ]
    assert progress and [p["checkpoint"] for p in progress] == sorted(
        p["checkpoint"] for p in progress
    )
    assert all(set(p) >= {"leader", "shares", "running", "traces"} for p in progress)
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == whole.choices[0].text
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    final = [ch for ch in chunks if ch.choices and ch.choices[0].finish_reason == "stop"]
    assert final[0].model_extra["mars"]["answer"] == whole.model_extra["mars"]["answer"]


def _cli_error(*args: str) -> str:
    res = CliRunner().invoke(
        cli,
        ["solve", "--problems", "aime_2025", "--questions", "0", "--out", "/nonexistent/x", *args],
    )
    assert res.exit_code == 2
    return res.output.strip().removeprefix("error: ")


@pytest.mark.parametrize(
    ("body", "cli_args", "param"),
    [
        ({"mars": {"method": "nope"}}, ["--method", "nope"], "mars.method"),
        ({"mars": {"method": "dco-mars"}}, ["--method", "dco-mars"], "mars.method"),
        ({"n": 4, "mars": {"delta": 2.0}}, ["--delta", "2"], "mars"),
        ({"mars": {"consensus": 0.0}}, ["--consensus", "0"], "mars"),
        ({"mars": {"spacing": 0}}, ["--spacing", "0"], "mars.spacing"),
    ],
)
def test_bad_bodies_are_400_with_the_command_lines_line(served, body, cli_args, param):
    running, _ = served
    r = httpx.post(running.url + "/v1/completions", json={"prompt": QUESTION, **body})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param
    if param != "mars.spacing":  # typer checks --spacing 0 itself, before the command runs
        assert err["message"] == _cli_error(*cli_args)


def test_other_bad_requests_are_openai_errors(served):
    running, _ = served
    url = running.url + "/v1/completions"
    cases = [
        ({"prompt": QUESTION, "n": 5000}, 400, "more traces than this server's --max-traces 1024"),
        ({"prompt": QUESTION, "n": 4, "mars": {"bogus": 1}}, 400, "unknown keys ['bogus']"),
        ({"prompt": QUESTION, "n": 4, "logprobs": 3}, 400, "logprobs: not supported"),
        ({"prompt": QUESTION, "n": 4, "temperature": 0}, 400, "every trace is the same greedy"),
        ({"prompt": QUESTION}, 400, "synthetic upstream answers MARS requests only"),
        ({"prompt": QUESTION, "n": 4, "model": "gpt-9"}, 404, "not served here"),
    ]
    for body, status, words in cases:
        r = httpx.post(url, json=body)
        assert r.status_code == status and words in r.json()["error"]["message"], r.text
    r = httpx.post(url, content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    with pytest.raises(openai.BadRequestError, match="unknown method 'nope'"):
        client(running).completions.create(
            model="synthetic:qwen3-8b", prompt="x", n=2, extra_body={"mars": {"method": "nope"}}
        )


def test_health_models_and_metrics(served):
    running, _ = served
    assert httpx.get(running.url + "/health").json()["status"] == "ok"
    models = client(running).models.list()
    assert [m.id for m in models.data] == ["synthetic:qwen3-8b"]
    assert running.metric("questions", method="sc-mars-cal", stopped_by="margin") >= 0
    text = httpx.get(running.url + "/metrics").text
    for name in (
        "mars_serve_requests_total",
        "mars_serve_traces_started_total",
        "mars_serve_traces_stopped_early_total",
        "mars_serve_tokens_generated_total",
        "mars_serve_probe_tokens_total",
        "mars_serve_tokens_paid_total",
        "mars_serve_full_budget_tokens_estimate_total",
        "mars_serve_upstream_errors_total",
    ):
        assert name in text


def test_an_api_key_is_required_and_never_written(tmp_path, monkeypatch, caplog):
    key = "sk-test-" + "k3y" * 8
    record = tmp_path / "rec"
    with serving(["synthetic"], FAST, api_key=key, record=str(record)) as running:
        r = httpx.post(running.url + "/v1/completions", json={"prompt": QUESTION, "n": 4})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        bad = httpx.get(running.url + "/v1/models", headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401 and key not in bad.text
        with pytest.raises(openai.AuthenticationError):
            client(running, api_key="wrong").models.list()
        out = client(running, api_key=key).completions.create(
            model="synthetic:qwen3-8b", prompt=QUESTION, n=4, seed=1
        )
        assert out.model_extra["mars"]["answer"] is not None
    written = b"".join(p.read_bytes() for p in record.rglob("*") if p.is_file())
    assert key.encode() not in written and key not in caplog.text


def _slow(running, seed: int, results: list) -> threading.Thread:
    def go():
        r = httpx.post(
            running.url + "/v1/completions",
            json={  # sc never stops: every one of the 256 checkpoints runs (seconds)
                "prompt": QUESTION,
                "seed": seed,
                "max_tokens": 16384,
                "mars": {"traces": 64, "spacing": 64, "method": "sc"},
            },
            timeout=120,
        )
        results.append(r.status_code)

    t = threading.Thread(target=go)
    t.start()
    return t


def _wait_for(cond, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_full_queue_answers_429_with_retry_after():
    with serving(["synthetic"], FAST, max_active=1, max_queue=0) as running:
        results: list = []
        t = _slow(running, 1, results)
        _wait_for(lambda: running.state.scheduler.active == 1)
        r = httpx.post(running.url + "/v1/completions", json={"prompt": QUESTION, "n": 4})
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert r.json()["error"]["type"] == "rate_limit_error"
        with pytest.raises(openai.RateLimitError):
            client(running).completions.create(model="synthetic:qwen3-8b", prompt="x", n=2)
        t.join()
        assert results == [200]


def test_a_client_that_goes_away_cancels_its_question():
    """A stream closed after its first progress report, and a whole-answer request whose
    connection drops: both questions end at once (counted as cancelled), the slots free."""
    with serving(["synthetic"], FAST) as running:
        body = {"prompt": QUESTION, "stream": True, "mars": {"traces": 64, "spacing": 128}}
        with httpx.stream("POST", running.url + "/v1/completions", json=body) as r:
            for line in r.iter_lines():
                if '"phase":"main"' in line:
                    break
        _wait_for(lambda: running.metric("cancelled") == 1 and running.state.scheduler.active == 0)
        # a whole-answer request whose connection drops once its question runs
        payload = json.dumps({**body, "stream": False, "mars": {**body["mars"], "method": "sc"}})
        port = int(running.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(
                (
                    f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                    f"application/json\r\nContent-Length: {len(payload)}\r\n\r\n{payload}"
                ).encode()
            )
            _wait_for(lambda: running.state.scheduler.active == 1)
        _wait_for(lambda: running.metric("cancelled") == 2 and running.state.scheduler.active == 0)
        assert running.metric("questions") == 0


def test_the_cli_refuses_bad_defaults_in_one_line():
    res = CliRunner().invoke(cli, ["serve", "--upstream", "synthetic", "--method", "dco"])
    assert res.exit_code == 2 and res.output.startswith("error: method dco")
    res = CliRunner().invoke(
        cli, ["serve", "--upstream", "synthetic", "--traces", "9", "--max-traces", "8"]
    )
    assert (
        res.exit_code == 2
        and "--traces 9 + --warmup 16: more than --max-traces 8 traces" in res.output
    )
    res = CliRunner().invoke(cli, ["serve", "--upstream", "http://127.0.0.1:9", "--port", "1"])
    assert res.exit_code == 2 and "cannot connect to the server at http://127.0.0.1:9" in res.output
    assert json.dumps(res.output).count("\\n") == 1


# ---------------------------------------------------------------------------------------------
# Replicas that fail: the tests' fake vLLM servers (tests/data/servers.py), answering 503 on
# demand, which a real server will not (the real kill is in tests/serve/test_llama_server.py)


@pytest.mark.slow
def test_a_replica_that_fails_every_try_hands_its_traces_to_another_then_502(monkeypatch):
    from mars.serve.upstreams import Upstreams

    # a fails its completions only: asked again (/v1/models) it would come back mid-test
    monkeypatch.setattr("mars.serve.upstreams.REVIVE_S", float("inf"))
    fake = fakes()
    servers = {"a.test": fake.FakeServer("vllm"), "b.test": fake.FakeServer("vllm")}

    async def route(request):
        return await servers[request.url.host].handler(request)

    ups = Upstreams(
        ["http://a.test", "http://b.test"],
        tokenizer=fake.tokenizer(),
        transport=httpx.MockTransport(route),
        retries=1,
    )
    servers["a.test"].fail = [503] * 10_000  # from now on every answer of a is "busy"
    small = Defaults(method="sc", traces=4, warmup=0, spacing=8, max_tokens=32)
    with serving(ups, small) as running:
        c = client(running)
        model = running.state.model
        r = c.completions.create(model=model, prompt="What is 2 + 3?", n=4, seed=1)
        assert r.model_extra["mars"]["stopped_by"] == "budget"
        health = httpx.get(running.url + "/health").json()
        assert [u["up"] for u in health["upstreams"]] == [False, True]
        assert running.metric("upstream_errors", upstream="http://a.test") >= 1
        assert running.metric("upstream_up", upstream="http://a.test") == 0
        servers["b.test"].fail = [503] * 10_000
        t0 = time.monotonic()
        with pytest.raises(openai.APIStatusError) as err:
            c.completions.create(model=model, prompt="What is 2 + 3?", n=4, seed=2)
        assert err.value.status_code == 502 and time.monotonic() - t0 < 30
        e = err.value.response.json()["error"]
        assert e["type"] == "upstream_error" and "http://b.test" in e["message"]
        assert httpx.get(running.url + "/health").status_code == 503
    ups.close()


def test_the_body_lm_evaluation_harness_sends_is_one_question(served):
    """lm-evaluation-harness's ``local-chat-completions`` (``_create_payload``: messages, model,
    max_tokens, temperature, stop (≤ 4 strings), seed 1234, then its ``--gen_kwargs``), with
    ``n=16,temperature=0.6,max_gen_toks=16384``: one answer in ``choices[0].message.content``,
    which is what it reads, cut at its ``until`` strings."""
    running, _ = served
    body = {
        "messages": [{"role": "user", "content": QUESTION}],
        "model": "synthetic:qwen3-8b",
        "max_tokens": 16384,
        "temperature": 0.6,
        "stop": ["<|im_end|>", "Question:"],
        "seed": 1234,
        "n": 16,
    }
    r = httpx.post(running.url + "/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    out = r.json()
    assert [c["index"] for c in out["choices"]] == [0]
    content = out["choices"][0]["message"]["content"]
    assert isinstance(content, str) and "Question:" not in content
    assert out["mars"]["answer"] is None or out["mars"]["answer"] in content


def test_a_malformed_upstream_is_named_as_the_option_it_came_from(tmp_path):
    """`--upstream notaurl` is refused naming --upstream (not another command's --base-url), and
    a malformed second URL before the first is connected to."""
    with pytest.raises(MarsError, match=r"^--upstream 'notaurl': not an http\(s\) URL"):
        Upstreams(["notaurl"])
    t0 = time.monotonic()
    with pytest.raises(MarsError, match=r"^--upstream 'http://127.0.0.1:99999': port out of"):
        Upstreams(["http://10.255.255.1:9", "http://127.0.0.1:99999"], timeout=30)
    assert time.monotonic() - t0 < 5  # the unreachable first one was never tried


def test_a_word_setting_is_taken_from_the_mars_object():
    """`mars.guard: "tokens"` (a setting of named choices, as `--guard`) is a knob like the
    numbers; a wrong word is the command line's line."""
    from mars.serve.requests import COMPLETIONS, BadRequest, read_question, read_request

    def question(body):
        return read_question(read_request(body, COMPLETIONS), COMPLETIONS, FAST)

    q = question({"prompt": "x", "n": 4, "mars": {"guard": "tokens"}})
    assert q.knobs["guard"] == "tokens"
    with pytest.raises(BadRequest, match="--guard x: must be one of first, tokens"):
        question({"prompt": "x", "n": 4, "mars": {"guard": "x"}})


def test_a_warmup_above_n_is_cut_and_said_or_refused_when_asked_for():
    small = Defaults(traces=16, warmup=16, spacing=2048, max_tokens=16384)
    with serving(["synthetic"], small) as other:
        r = httpx.post(
            other.url + "/v1/completions", json={"prompt": QUESTION, "n": 8}, timeout=120
        )
        m = r.json()["mars"]
        assert r.status_code == 200 and m["warmup"] == 8
        assert m["notes"][:1] == [
            "the server's warmup of 16 traces was cut to n = 8 (give mars.warmup to choose it)"
        ]
        bad = httpx.post(
            other.url + "/v1/completions",
            json={"prompt": QUESTION, "n": 8, "mars": {"warmup": 9}},
        )
        err = bad.json()["error"]
        assert bad.status_code == 400 and err["param"] == "mars.warmup"
        assert "more warmup traces than the 8 the answer is made of" in err["message"]


def test_a_server_with_a_calibration_generates_no_warmup_and_records_it(tmp_path):
    """--calibration: no warmup (none generated, none paid), the calibration named in the
    response, kept beside the recorded pool, which replays exactly; a request asking for a
    warmup is refused."""
    from util import write_layout_pool

    from mars.fit.calibrate import calibrate_pools

    cal = calibrate_pools([write_layout_pool(tmp_path / "fitpool", seed=4, n_questions=4)])
    record = tmp_path / "rec"
    defaults = Defaults(
        method="sc-mars2", traces=16, warmup=0, spacing=2048, max_tokens=16384, calibration=cal
    )
    with serving(["synthetic"], defaults, record=str(record)) as running:
        r = client(running).completions.create(
            model="synthetic:qwen3-8b", prompt=QUESTION, n=16, seed=3
        )
        m = r.model_extra["mars"]
        assert m["warmup"] == 0 and m["tokens"]["warmup"] == 0 and m["calibration"] == cal.digest
        assert r.usage.completion_tokens == m["tokens"]["main"] + m["tokens"]["probes_generated"]
        assert any("the synthetic upstream makes its traces up" in n for n in m["notes"])
        bad = httpx.post(
            running.url + "/v1/completions",
            json={"prompt": QUESTION, "n": 16, "mars": {"warmup": 4}},
        )
        assert bad.status_code == 400 and "decides with a calibration" in bad.text
    pool = record / m["record"].split("/")[-2]
    assert (pool / "calibration.json").is_file()
    assert all(row["match"] for row in replay_run(pool))


def test_the_cli_refuses_a_calibration_of_another_model_in_one_line(tmp_path):
    """mars serve --calibration checks the calibration against the model the upstreams serve,
    before it listens."""
    import dataclasses

    from util import write_layout_pool

    from mars.fit.calibrate import calibrate_pools

    c = calibrate_pools([write_layout_pool(tmp_path / "p", seed=1, n_questions=3)])
    c = dataclasses.replace(c, fitted_on=[{**c.fitted_on[0], "model": "synthetic:qwen3-8b"}])
    path = c.save(tmp_path / "cal.json")
    res = CliRunner().invoke(
        cli, ["serve", "--upstream", "synthetic:qwen3-32b", "--calibration", str(path)]
    )
    assert res.exit_code == 2, res.output
    assert res.output.startswith(
        "error: --upstream: serves model 'synthetic:qwen3-32b'; the calibration was fitted on "
        "synthetic:qwen3-8b"
    )
    assert res.output.count("\n") == 1


def test_a_refit_calibration_is_reloaded_without_a_restart(tmp_path):
    """POST /v1/mars/calibration/reload reads the --calibration file again: the next question
    decides with the new one; a file that does not serve is refused (409) and the old one stays."""
    from util import write_layout_pool

    from mars.fit.calibrate import calibrate_pools

    first = calibrate_pools([write_layout_pool(tmp_path / "a", seed=1, n_questions=3)])
    second = calibrate_pools([write_layout_pool(tmp_path / "b", seed=2, n_questions=3)])
    path = first.save(tmp_path / "cal.json")
    defaults = Defaults(
        traces=16,
        warmup=0,
        spacing=2048,
        max_tokens=16384,
        calibration=first,
        method="sc-mars2-launch",
    )
    body = {"prompt": QUESTION, "n": 16, "seed": 4}
    with serving(["synthetic"], defaults, calibration_path=str(path)) as running:
        url = running.url

        def ask():
            return httpx.post(url + "/v1/completions", json=body, timeout=120).json()["mars"]

        assert ask()["calibration"] == first.digest
        second.save(path)
        r = httpx.post(url + "/v1/mars/calibration/reload")
        assert r.status_code == 200 and r.json()["calibration"] == second.digest
        assert ask()["calibration"] == second.digest
        path.write_text("{}")
        r = httpx.post(url + "/v1/mars/calibration/reload")
        err = r.json()["error"]
        assert r.status_code == 409 and "not a calibration" in err["message"]
        assert ask()["calibration"] == second.digest


def test_log_lines_carry_a_timestamp_the_request_id_and_the_client(tmp_path):
    """What mars serve logs (mars.serve.logs): every line of a question — the proxy's, and the
    live loop's from the worker thread — names the id its client saw and the client."""
    import io
    import logging

    from mars.serve import logs

    handler = logs.configure("info")
    buf = io.StringIO()
    handler.setStream(buf)
    try:
        with serving(["synthetic"], FAST) as running:
            r = httpx.post(
                running.url + "/v1/completions",
                json={"prompt": QUESTION, "n": 4, "seed": 2, "user": "team-a"},
                timeout=60,
            )
    finally:
        logging.getLogger("mars").removeHandler(handler)
        logging.getLogger("mars").propagate = True
    rid = r.json()["id"]
    lines = [x for x in buf.getvalue().splitlines() if rid in x]
    assert lines, buf.getvalue()
    assert any(f"[{rid} from team-a] mars.serve: answered completions" in x for x in lines)
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|WARNING) ", x) for x in lines)


def test_pools_are_named_for_what_tells_them_apart():
    from mars.serve.record import Recorder

    base = {
        "method": "sc-mars-cal",
        "n_traces": 8,
        "warmup": 4,
        "spacing": 16,
        "max_tokens": 256,
        "seed": 0,
        "sampling": {"temperature": 0.6, "top_p": 0.95},
    }
    a = Recorder.pool_name(base)
    b = Recorder.pool_name({**base, "seed": 3})
    c = Recorder.pool_name({**base, "sampling": {"temperature": 0.6, "top_p": 0.9}})
    assert a.startswith("sc-mars-cal-n8-w4-s16-t256-seed0-T0.6-p0.95-")
    assert "seed3" in b and "-p0.9-" in c and len({a, b, c}) == 3
