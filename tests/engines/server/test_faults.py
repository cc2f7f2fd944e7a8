"""Faults of a server (mars/engines/server/): one line for every fault before any generation (dead
port, wrong URL, wrong model, missing key, too few log-probabilities, a tokenizer that
disagrees), bounded retries and timeouts, against the fake servers of ``tests/data/servers.py``."""

from __future__ import annotations

import dataclasses
import json
import socket
import time

import pytest

httpx = pytest.importorskip("httpx")

from engines.server.common import (  # noqa: E402
    TEXT_KIND,
    Q,
    backend,
    completions,
    fake,
)
from mars.engines.server import (  # noqa: E402
    ServerBackend,
    ServerError,
)

# ---------------------------------------------------------------------------------------------
# Faults: one line before any generation, bounded retries, no hang


def test_connect_faults_are_one_line_before_any_generation(monkeypatch):
    def refused(**kw):
        return pytest.raises(ServerError, **kw)

    with refused(match="'toy/Other' is not served .*served: toy/Toy-Reasoner"):
        backend(fake.FakeServer("vllm"), model="toy/Other")
    with refused(match="serves \\['a', 'b'\\]: pass --model NAME"):
        backend(fake.FakeServer("vllm", models=["a", "b"]))
    server = fake.FakeServer("vllm", api_key="s3cret")
    with refused(match="refused the API key \\(HTTP 401\\): set MARS_API_KEY"):
        backend(server)
    monkeypatch.setenv("MARS_API_KEY", "s3cret")
    assert backend(server).model == "toy/Toy-Reasoner"  # the key goes as a bearer token
    assert "s3cret" not in json.dumps(backend(server).describe())

    def not_a_server(request):
        return httpx.Response(200, text="<html>hello</html>")

    with refused(match="not JSON .*base URL"):
        ServerBackend(
            base_url="http://x:1",
            transport=httpx.MockTransport(not_a_server),
            tokenizer=fake.tokenizer(),
        )

    def other_api(request):
        return httpx.Response(404, json={"detail": "Not Found"})

    with refused(match="HTTP 404 .*not an OpenAI-compatible server"):
        ServerBackend(
            base_url="http://x:1/v1/",
            transport=httpx.MockTransport(other_api),
            tokenizer=fake.tokenizer(),
        )
    wrong = fake.FakeServer("vllm")
    wrong.tok = fake.Tokenizer([*fake.VOCAB[:-6], "中文", "≤", "—", "ï", "中", "文", "é"], fake.EOS)
    with refused(match="does not tokenize like the server's model 'toy/Toy-Reasoner'"):
        backend(wrong)
    assert completions(wrong) == []


def test_text_server_refusals_are_one_line_before_any_generation():
    """A server of unknown kind that takes token ids (its kind decides how ids are read back),
    a text server with fewer than 20 top log-probabilities, one that refuses text too, and a
    tokenizer that does not give back the text it encodes: one line each, at connect.  A busy
    answer to the token-id prompt is tried again, not taken for a refusal of token ids."""

    def one_line(server, match, **kw):
        with pytest.raises(ServerError, match=match) as exc:
            backend(server, **kw)
        assert len(str(exc.value).splitlines()) == 1
        return exc.value

    one_line(
        fake.FakeServer("vllm", owned_by="acme"),
        r"\(owned_by 'acme'\) takes token-id prompts but does not say which server it is: pass "
        "server=vllm, sglang or llama.cpp .* or server=openai to send text prompts",
    )
    one_line(fake.FakeServer(TEXT_KIND, top_n=5), "5 top log-probabilities for a token, not 20")
    one_line(
        fake.FakeServer(TEXT_KIND, fail=[500, 400]),
        r"refused a token-id prompt \(HTTP 500: busy \(500\)\) and a text prompt with 20 top "
        r"log-probabilities \(HTTP 400: busy \(400\)\)",
    )

    class Spacey(fake.Tokenizer):  # decodes as a SentencePiece tokenizer: no leading space
        def decode(self, ids, skip_special_tokens=False):
            return super().decode(ids, skip_special_tokens).removeprefix(" ")

    err = one_line(
        fake.FakeServer(TEXT_KIND),
        "does not give back the text it encodes when cut at token",
        tokenizer=Spacey(fake.VOCAB, fake.EOS),
    )
    assert "text prompts" in str(err)
    wrong = fake.Tokenizer([*fake.VOCAB, " step by step"], fake.EOS)  # fewer prompt tokens
    one_line(  # no tokenize route: the trial prompt's token count is the check
        fake.FakeServer(TEXT_KIND, tokenize_route=False),
        r"counts \d+ tokens in a prompt the server counts \d+: pass tokenizer=PATH",
        tokenizer=wrong,
    )
    assert not backend(fake.FakeServer(TEXT_KIND, tokenize_route=False)).tokenizer_checked
    server = fake.FakeServer(TEXT_KIND, fail=[503])
    be = backend(server, retries=2)
    assert be.protocol.prompt_mode == "text" and be.http.stats["retries"] == 1


def test_a_dead_port_is_one_line_at_once():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        t0 = time.perf_counter()
        with pytest.raises(
            ServerError,
            match=f"cannot connect to the server at http://127.0.0.1:{port}: connection refused",
        ):
            ServerBackend(base_url=f"http://127.0.0.1:{port}", tokenizer=fake.tokenizer())
    assert time.perf_counter() - t0 < 5


def test_busy_answers_are_retried_with_backoff_then_one_line():
    server = fake.FakeServer("sglang")
    be = backend(server, max_tokens=8, retries=3)
    be.http.retry = dataclasses.replace(be.http.retry, backoff=0.01)
    server.fail = [503, 429, 500]
    batch = be.start(Q, 2, 0)
    batch.advance(8)  # 3 failures, then answers: within the 3 retries
    assert batch.lengths.min() > 0 and be.http.stats["retries"] == 3
    server.fail = [503] * 10
    with pytest.raises(
        ServerError, match="failed 4 times on /generate: HTTP 503 \\(busy \\(503\\)\\); rerun"
    ):
        be.start(Q, 1, 1).advance(8)


def test_a_slow_server_times_out_instead_of_hanging():
    server = fake.FakeServer("llama.cpp")
    be = backend(server, max_tokens=8, retries=1, timeout=0.2)
    be.http.retry = dataclasses.replace(be.http.retry, backoff=0.01)
    server.delay = 1.0
    t0 = time.perf_counter()
    with pytest.raises(
        ServerError, match=r"failed 2 times on /completion: no answer within 0\.2 s"
    ):
        be.start(Q, 3, 0).advance(8)
    assert time.perf_counter() - t0 < 3


def test_an_error_answer_is_not_retried():
    server = fake.FakeServer("vllm")
    be = backend(server, max_tokens=8)
    server.fail = [400]
    with pytest.raises(ServerError, match="/v1/completions: HTTP 400: busy \\(400\\)"):
        be.start(Q, 1, 0).advance(8)
    assert be.http.stats["retries"] == 0


def test_the_cli_refuses_a_dead_server_before_writing_anything(tmp_path):
    from typer.testing import CliRunner

    from mars.cli import app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        res = CliRunner().invoke(
            app,
            [
                "generate",
                "--backend",
                "server",
                "--base-url",
                f"http://127.0.0.1:{port}",
                "--problems",
                "aime_2025",
                "--traces",
                "2",
                "--out",
                str(tmp_path / "out"),
            ],
        )
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        f"error: cannot connect to the server at http://127.0.0.1:{port}: connection refused "
        "(is it running?)"
    ]
    assert not (tmp_path / "out").exists()
