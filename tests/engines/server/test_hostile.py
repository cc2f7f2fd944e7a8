"""Hostile answers of a server (mars/engines/server/): log-probabilities that are not
log-probabilities, ids outside the vocabulary, answers of any size, URLs no client can use, keys
no header can carry, credentials and escape sequences that must not be shown."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")

from engines.server.common import (  # noqa: E402
    KINDS,
    Q,
    backend,
    fake,
)
from mars.engines import server as srv  # noqa: E402
from mars.engines.server import (  # noqa: E402
    ServerBackend,
    ServerError,
    generation_seed,
)
from mars.generate import generate_pool  # noqa: E402
from mars.store import schema  # noqa: E402
from mars.store.pool import open_pool, read_trace_table  # noqa: E402
from mars.store.problems import Problem  # noqa: E402

# ---------------------------------------------------------------------------------------------
# Hostile answers: log-probabilities that are not log-probabilities, ids outside the vocabulary,
# answers of any size, URLs no client can use, keys no header can carry, credentials and
# escape sequences that must not be shown


def after_trial(fn):
    """A ``mangle`` of the fake server that spares the connect-time trial (its first completion)
    and changes every later answer with ``fn(answer, body)``."""
    seen: list[int] = []

    def mangle(out, body):
        seen.append(1)
        return out if len(seen) == 1 else fn(out, body)

    return mangle


def top_values(kind: str, out: dict) -> list:
    """Each token's top log-probability containers of an answer, as the server shapes them
    (none for a probe's answer)."""
    if kind == "llama.cpp":
        return [e["top_logprobs"] for e in out.get("completion_probabilities", [])]
    if kind == "vllm":
        return (out["choices"][0]["logprobs"] or {}).get("top_logprobs", [])
    return out["meta_info"].get("output_top_logprobs", [])


def set_logprob(kind: str, container, value) -> None:
    """Make every top log-probability of one token ``value``."""
    if kind == "llama.cpp":
        for e in container:
            e["logprob"] = value
    elif kind == "vllm":
        for k in container:
            container[k] = value
    else:
        for e in container:
            e[0] = value


def set_at(kind: str, positions, value):
    """An answer change: the tokens at ``positions`` carry ``value`` as every top
    log-probability."""

    def fn(out, body):
        tops = top_values(kind, out)
        for p in positions:
            if p < len(tops):
                set_logprob(kind, tops[p], value)
        return out

    return fn


def nan_at(kind: str, positions, value=float("nan"), once: bool = False):
    """:func:`set_at` on every answer after the trial (``once``: the first only)."""
    change = set_at(kind, positions, value)
    done: list[int] = []

    def fn(out, body):
        if once and done:
            return out
        done.append(1)
        return change(out, body)

    return after_trial(fn)


def one_line_refusal(fn, *needles) -> str:
    with pytest.raises(ServerError) as exc:
        fn()
    msg = str(exc.value)
    assert "\n" not in msg, msg
    for n in needles:
        assert n in msg, msg
    return msg


@pytest.mark.parametrize("kind", [*KINDS, "llama.cpp without entries"])
def test_nan_log_probabilities_everywhere_are_refused_naming_the_server(kind, tmp_path):
    """A server that sends NaN for every log-probability (or llama.cpp leaving out the entries
    of tokens after which the text is whole: no character it is inside) is refused in one line
    naming it and the share, not written as a pool of made-up confidences."""
    if kind == "llama.cpp without entries":
        server = fake.FakeServer("llama.cpp", split_chars=set(range(64)))
    else:
        server = fake.FakeServer(kind, mangle=nan_at(kind, range(64)))
    be = backend(server, max_tokens=24)
    one_line_refusal(
        lambda: generate_pool(be, [Q], 3, 0, tmp_path / "pool", spacing=8, progress=False),
        "the server at http://toy:8000 sent no usable log-probabilities for",
        "more than 5 %",
    )
    assert not (tmp_path / "pool" / "pool.json").exists()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", [float("nan"), None], ids=["nan", "null"])
def test_a_few_missing_log_probabilities_are_stood_in_and_counted_in_the_pool(
    kind, value, tmp_path
):
    """A token whose log-probabilities are NaN or null takes the confidence before it; the
    count goes into the pool's provenance (pool.json ``stood_in_confs``)."""
    server = fake.FakeServer(kind, mangle=nan_at(kind, [1], value, once=True))
    be = backend(server, max_tokens=24)
    out = generate_pool(be, [Q], 3, 0, tmp_path / "pool", spacing=8, progress=False)
    assert open_pool(out).manifest["stood_in_confs"] == 1
    rows = read_trace_table(out / "traces/q000003.parquet").to_pylist()
    assert all(np.isfinite(r["confs"]).all() for r in rows)
    clean = generate_pool(
        backend(fake.FakeServer(kind), max_tokens=24), [Q], 3, 0, tmp_path / "clean",
        spacing=8, progress=False,
    )  # fmt: skip
    assert "stood_in_confs" not in open_pool(clean).manifest  # a clean pool's manifest as before


def test_the_stood_in_count_survives_a_resumed_run_and_a_live_solve(tmp_path):
    from mars.live import plan_for, solve_pool

    q2 = Problem(qid=4, question="What is 2 + 4?", answer="6", dataset="toy")
    server = fake.FakeServer("vllm", mangle=nan_at("vllm", [1], once=True))
    out = generate_pool(
        backend(server, max_tokens=24), [Q, q2], 3, 0, tmp_path / "pool", spacing=8,
        progress=False,
    )  # fmt: skip
    assert open_pool(out).manifest["stood_in_confs"] == 1
    (out / "pool.json").unlink()  # as if stopped before its last question
    (out / schema.trace_file_name(q2.qid)).unlink()
    out = generate_pool(
        backend(fake.FakeServer("vllm"), max_tokens=24), [Q, q2], 3, 0, out, spacing=8,
        progress=False,
    )  # fmt: skip
    assert open_pool(out).manifest["stood_in_confs"] == 1  # the first question's, kept
    server = fake.FakeServer("vllm", mangle=nan_at("vllm", [1, 2], once=True))
    live = tmp_path / "live"
    be = backend(server, max_tokens=32)
    plan = plan_for(be, "sc-consensus", n_traces=4, warmup=2, seed=0, spacing=8, consensus=0.3)
    solve_pool(be, [Q], live, plan, progress=False)
    assert open_pool(live).manifest["stood_in_confs"] == 2  # the warmup's
    target = generation_seed(0, Q.qid, 2, 0)  # main trace 2's first request: stopped early
    change = set_at("vllm", [1], float("nan"))
    server = fake.FakeServer(
        "vllm", mangle=lambda out, b: change(out, b) if b.get("seed") == target else out
    )
    be = backend(server, max_tokens=64)
    plan = plan_for(be, "sc-consensus", n_traces=4, warmup=2, seed=0, spacing=8, consensus=0.3)
    rows = solve_pool(be, [Q], tmp_path / "live2", plan, progress=False)
    assert 2 in rows[0]["stopped_traces"]
    assert open_pool(tmp_path / "live2").manifest["stood_in_confs"] == 1


def test_generate_and_solve_show_the_stood_in_count(tmp_path, monkeypatch):
    kind = "sglang"
    problems = tmp_path / "q.jsonl"
    problems.write_text(json.dumps({"question": Q.question, "answer": Q.answer}) + "\n")
    for command, extra in (
        ("generate", ["--traces", "3", "--spacing", "8"]),
        ("solve", ["--traces", "4", "--warmup", "2", "--spacing", "8", "-m", "sc-consensus"]),
    ):
        server = fake.FakeServer(kind, mangle=nan_at(kind, [1], once=True))
        out = str(tmp_path / command)
        args = [command, "--problems", str(problems), "--max-tokens", "24", "--out", out]
        res = run_cli_with(monkeypatch, server, *args, *extra)
        assert res.exit_code == 0, res.output
        assert "1 token confidence was stood in" in " ".join(res.output.split()), res.output


def run_cli_with(monkeypatch, server, *args):
    """``mars ARGS --backend server`` talking to the fake ``server`` (its transport and the toy
    tokenizer put in place of the network and the model's)."""
    from typer.testing import CliRunner

    from mars.cli import app

    real_init = srv.Http.__init__

    def init(self, *a, **kw):
        real_init(self, *a, **kw)
        self.transport = server.transport()

    monkeypatch.setattr(srv.Http, "__init__", init)
    monkeypatch.setattr(srv.connect, "load_tokenizer", lambda source: fake.tokenizer())
    return CliRunner().invoke(app, [*args, "--backend", "server", "--base-url", "http://toy:8000"])


def _llama_entry(value):
    def fn(out, body):
        out["completion_probabilities"][0]["top_logprobs"][0] = value
        return out

    return fn


@pytest.mark.parametrize(
    ("kind", "fn", "needle"),
    [
        ("llama.cpp", set_at("llama.cpp", [0], float("inf")), "above 0"),
        ("vllm", set_at("vllm", [0], float("inf")), "above 0"),
        ("sglang", set_at("sglang", [0], float("inf")), "above 0"),
        ("vllm", set_at("vllm", [0], 3.5), "3.5"),
        ("llama.cpp", set_at("llama.cpp", [0], "-1.5"), "not a number"),
        ("vllm", set_at("vllm", [0], "x"), "not a number"),
        ("sglang", set_at("sglang", [0], True), "not a number"),
        ("llama.cpp", _llama_entry({"id": 1}), "not an object with a logprob"),
        ("llama.cpp", _llama_entry(7), "not an object with a logprob"),
        ("vllm", lambda out, b: top_values("vllm", out).__setitem__(0, [1, 2]) or out, "dict"),
        ("sglang", lambda out, b: top_values("sglang", out)[0].__setitem__(0, 5) or out, "list"),
    ],
)
def test_log_probabilities_that_are_not_log_probabilities_are_one_line(kind, fn, needle):
    """+inf (a confidence of -inf, a pool `simulate` refuses after the whole generation), a
    positive value, a string, a bool, an entry of another shape: one line naming the server."""
    server = fake.FakeServer(kind, mangle=after_trial(fn))
    be = backend(server, max_tokens=8)
    one_line_refusal(lambda: be.start(Q, 2, 0).advance(8), "log-probabilit", needle)


def _ids(kind: str, value: int):
    def fn(out, body):
        if kind == "llama.cpp":
            out["tokens"][0] = value
            if out.get("completion_probabilities"):
                out["completion_probabilities"][0]["id"] = value
        elif kind == "vllm":
            out["choices"][0]["token_ids"][0] = value
        else:
            out["output_ids"][0] = value
            for key in ("output_token_logprobs",):
                if key in out["meta_info"]:
                    out["meta_info"][key][0][1] = value
        return out

    return after_trial(fn)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", [2**31, -1, 10**9, len(fake.VOCAB), 2**70])
def test_token_ids_outside_the_vocabulary_are_one_line(kind, value):
    """An id the tokenizer does not have (negative, the vocabulary's size, 10^9, past int32 or
    int64) is refused naming the server, not stored for the probe stage to crash on."""
    server = fake.FakeServer(kind, mangle=_ids(kind, value))
    be = backend(server, max_tokens=8)
    one_line_refusal(
        lambda: be.start(Q, 2, 0).advance(8),
        f"token id {value}",
        f"outside the vocabulary of the tokenizer (0..{len(fake.VOCAB) - 1})",
    )


def test_an_answer_far_larger_than_the_request_asked_for_is_refused():
    """A valid answer padded to 40 MB for an 8-token request is refused in one line (its size
    is bounded by what the request asked for), not read whole."""
    pad = "x" * (40 << 20)
    server = fake.FakeServer("vllm", mangle=after_trial(lambda out, b: {**out, "pad": pad}))
    be = backend(server, max_tokens=8)
    one_line_refusal(
        lambda: be.start(Q, 1, 0).advance(8),
        "the server at http://toy:8000 sent more than",
        "for a request of 8 tokens",
    )
    assert be.http.stats["retries"] == 0


def test_an_endless_answer_is_cut_off_at_its_bound():
    """A server that streams an answer without end: the read stops at the request's bound."""
    pulled = []

    async def endless():
        yield b'{"choices": [{"text": "'
        while True:
            pulled.append(1)
            yield b"a" * (1 << 20)

    server = fake.FakeServer("vllm")
    inner = server.transport()
    calls = []

    async def handler(request):
        if request.url.path == "/v1/completions":
            calls.append(1)
            if len(calls) > 1:
                return httpx.Response(200, content=endless())
        return await inner.handle_async_request(request)

    be = ServerBackend(
        base_url="http://toy:8000",
        transport=httpx.MockTransport(handler),
        tokenizer=fake.tokenizer(),
        max_tokens=8,
    )
    one_line_refusal(lambda: be.start(Q, 1, 0).advance(8), "sent more than")
    assert len(pulled) < 24  # MiB read, for a bound of a few


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:99999", "http://[::1", "http://127.0.0.1:abc", "http://127.0.0.1:0"],
)
def test_the_cli_refuses_a_url_no_client_could_use_in_one_line(url, tmp_path):
    """The URLs the workflow's config check refuses, refused by the command line in the same
    words (one check), exit 2, nothing written."""
    from typer.testing import CliRunner

    from mars.cli import app
    from mars.workflow import ConfigError, _check_servers

    args = ["--backend", "server", "--base-url", url, "--problems", "aime_2025"]
    res = CliRunner().invoke(app, ["generate", *args, "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    (line,) = res.output.strip().splitlines()
    assert line.startswith(f"error: --base-url '{url}': ") and "expected http://HOST:PORT" in line
    assert not (tmp_path / "out").exists()
    config = {"models": {"m": {"backend": "server", "base_url": url}}, "probe": {}}
    with pytest.raises(ConfigError) as exc:
        _check_servers(config)
    assert str(exc.value) == line.removeprefix("error: ").replace(
        "--base-url", "models.m.base_url", 1
    )


def test_a_key_with_a_line_break_is_refused_before_any_request(monkeypatch):
    """An API key read from a two-line file is one line naming the variable, never the key,
    before any request; a key with only a final newline is the key."""
    server = fake.FakeServer("vllm", api_key="s3cret")
    monkeypatch.setenv("MARS_API_KEY", "s3cret\nsecond-line")
    msg = one_line_refusal(lambda: backend(server), "$MARS_API_KEY: the API key holds a line")
    assert "s3cret" not in msg and "second" not in msg and server.requests == []
    monkeypatch.setenv("MARS_API_KEY", "clé")
    msg = one_line_refusal(lambda: backend(server), "a non-ASCII character")
    assert "clé" not in msg and server.requests == []
    monkeypatch.setenv("MARS_API_KEY", "s3cret\n")
    assert backend(server).model == "toy/Toy-Reasoner"


def test_no_error_of_the_http_client_shows_the_key(monkeypatch):
    """Whatever an HTTP client error quotes (h11 quotes a header it refuses), the key is hidden."""

    def handler(request):
        auth = request.headers.get("authorization")
        raise httpx.LocalProtocolError(f"Illegal header value {auth!r} in {request.url}")

    for url, key, secret in (
        ("http://toy:8000", "s3cret", "s3cret"),
        ("http://u:pw-s3cret@toy:8000", "", "pw-s3cret"),
        ("http://u:pw-s3cret@toy:8000", "", "dTpwdy1zM2NyZXQ="),  # its basic authentication
    ):
        monkeypatch.setenv("MARS_API_KEY", key)
        msg = one_line_refusal(
            lambda url=url: ServerBackend(
                base_url=url, transport=httpx.MockTransport(handler), tokenizer=fake.tokenizer()
            ),
            "Illegal header value",
        )
        assert secret not in msg


def test_credentials_in_the_url_are_sent_and_never_shown(monkeypatch):
    """``http://user:pass@host``: sent as basic authentication, shown as ``http://***@host``
    in every message (a dead port, a wrong URL, an error answer)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        msg = one_line_refusal(
            lambda: ServerBackend(
                base_url=f"http://alice:s3cret@127.0.0.1:{port}", tokenizer=fake.tokenizer()
            ),
            f"cannot connect to the server at http://***@127.0.0.1:{port}",
        )
    assert "s3cret" not in msg and "alice" not in msg
    server = fake.FakeServer("vllm")
    auth: list[str | None] = []
    inner = server.transport()

    async def handler(request):
        auth.append(request.headers.get("authorization"))
        return await inner.handle_async_request(request)

    be = ServerBackend(
        base_url="http://alice:s3cret@toy:8000",
        transport=httpx.MockTransport(handler),
        tokenizer=fake.tokenizer(),
        max_tokens=8,
    )
    assert auth and set(auth) == {"Basic YWxpY2U6czNjcmV0"}
    server.fail = [400]
    msg = one_line_refusal(lambda: be.start(Q, 1, 0).advance(8), "http://***@toy:8000")
    assert "s3cret" not in msg
    monkeypatch.setenv("MARS_API_KEY", "k3y")  # one Authorization header: not both
    msg = one_line_refusal(
        lambda: ServerBackend(
            base_url="http://alice:s3cret@toy:8000",
            transport=server.transport(),
            tokenizer=fake.tokenizer(),
        ),
        "holds credentials and $MARS_API_KEY a key",
    )
    assert "s3cret" not in msg and "k3y" not in msg
    monkeypatch.delenv("MARS_API_KEY")

    def other_api(request):
        return httpx.Response(404, json={"detail": "Not Found"})

    msg = one_line_refusal(
        lambda: ServerBackend(
            base_url="http://alice:s3cret@x:1",
            transport=httpx.MockTransport(other_api),
            tokenizer=fake.tokenizer(),
        ),
        "http://***@x:1/v1/models: HTTP 404",
    )
    assert "s3cret" not in msg


ESCAPES = "\x1b[2J\x1b]0;pwned\x07bad \x1b[31mred\x1b[0m \u202eevil"


def test_a_server_s_text_is_shown_printable_only(tmp_path):
    """A hostile server's error text and model names reach no terminal as escape sequences."""
    server = fake.FakeServer("vllm")
    be = backend(server, max_tokens=8)

    def answer(request):
        return httpx.Response(400, json={"error": {"message": ESCAPES}})

    be.http.transport = httpx.MockTransport(answer)
    be.http._client = None
    msg = one_line_refusal(lambda: be.start(Q, 1, 0).advance(8), "HTTP 400: bad red evil")
    assert "\x1b" not in msg and "\x07" not in msg and "\u202e" not in msg
    evil = fake.FakeServer("vllm", models=[ESCAPES, "b"])
    msg = one_line_refusal(lambda: backend(evil, model="x"), "is not served")
    assert "\x1b" not in msg and "\u202e" not in msg


def test_the_command_line_prints_an_error_as_printable_text(tmp_path, monkeypatch):
    """Whatever a message holds, the error line the command line prints is printable."""
    server = fake.FakeServer("vllm", models=[ESCAPES, "other"])
    res = run_cli_with(monkeypatch, server, "generate", "--problems", "aime_2025", "--model",
                       "x", "--out", str(tmp_path / "out"))  # fmt: skip
    assert res.exit_code == 2 and "is not served" in res.output
    assert "\x1b" not in res.output and "\u202e" not in res.output


def test_https_to_a_plain_http_server_says_so():
    """TLS spoken to a plain-HTTP server: the cause named, not "operation not permitted"."""
    import http.server
    import threading

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        port = httpd.server_address[1]
        msg = one_line_refusal(
            lambda: ServerBackend(base_url=f"https://127.0.0.1:{port}", tokenizer=fake.tokenizer()),
            "TLS",
            f"http://127.0.0.1:{port}",
        )
    finally:
        httpd.shutdown()
    assert "operation not permitted" not in msg


def test_an_unknown_host_is_named_so():
    msg = one_line_refusal(
        lambda: ServerBackend(
            base_url="http://no-such-host.invalid:8080", tokenizer=fake.tokenizer()
        ),
        "unknown host no-such-host.invalid",
    )
    assert "unknown error" not in msg


def test_a_connect_timeout_names_the_timeout_that_fired():
    """No connection within the connect timeout (at most --timeout): said with that timeout, at
    once (at connect no retry: a server that cannot be reached)."""

    def handler(request):
        raise httpx.ConnectTimeout("timed out")

    calls = []

    def counted(request):
        calls.append(1)
        return handler(request)

    msg = one_line_refusal(
        lambda: ServerBackend(
            base_url="http://toy:8000",
            transport=httpx.MockTransport(counted),
            tokenizer=fake.tokenizer(),
            timeout=2,
        ),
        "no connection within 2 s",
    )
    assert "30 s" not in msg and len(calls) == 1
