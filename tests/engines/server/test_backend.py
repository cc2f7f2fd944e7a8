"""The server backend (mars/engines/server/) against fake servers (``tests/data/servers.py``: httpx
mock transports that answer as the servers' sources shape their answers; no vLLM or SGLang runs on
these CPU machines): the request each server gets, confidences from top-20 log-probabilities
(vLLM's extra sampled entry, llama.cpp's missing entries), cached tokens per probe, requests
run concurrently and bounded.

The faults are in ``test_faults.py`` and ``test_hostile.py``, the text-only servers in
``test_openai_text.py``, a real llama.cpp server in ``test_llama_server.py``."""

from __future__ import annotations

import json
import logging
import math
import socket

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")

from engines.server.common import (  # noqa: E402
    KINDS,
    Q,
    backend,
    completions,
    fake,
    max_new_of,
    prompt_of,
    seed_of,
)
from mars.engines import server as srv  # noqa: E402
from mars.engines.server import (  # noqa: E402
    ServerError,
    generation_seed,
    probe_seed,
)
from mars.engines.tokens import CONF_TOP_K, token_confidence  # noqa: E402
from mars.errors import MarsError  # noqa: E402
from mars.generate import generate_pool  # noqa: E402
from mars.store import schema  # noqa: E402
from mars.store.pool import open_pool, read_trace_table  # noqa: E402

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
    from mars.generate import probe_pool

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
    from mars.live import plan_for, replay_run, solve_pool

    server = fake.FakeServer("sglang")
    be = backend(server, max_tokens=64)
    rows = solve_pool(
        be,
        [Q],
        tmp_path / "live",
        plan_for(be, "sc-consensus", n_traces=6, warmup=2, seed=0, spacing=8, consensus=0.3),
        progress=False,
    )
    assert rows[0]["replay_ok"] and replay_run(tmp_path / "live")[0]["match"]
    n = len(completions(server))
    solve_pool(
        be,
        [Q],
        tmp_path / "live",
        plan_for(be, "sc-consensus", n_traces=6, warmup=2, seed=0, spacing=8, consensus=0.3),
        progress=False,
    )
    assert len(completions(server)) == n


def test_an_early_launch_through_a_server_advances_its_launches_side_by_side(tmp_path):
    """sc-mars2-early through a server: once the rest are launched, both launches advance at
    each checkpoint, at once (two batches of requests in flight together), and the records
    replay exactly."""
    from mars.live import plan_for, replay_run, solve_pool

    server = fake.FakeServer("vllm", delay=0.02)
    be = backend(server, max_tokens=64)
    assert be.concurrent_batches
    plan = plan_for(be, "sc-mars2-early", n_traces=8, warmup=4, seed=1, spacing=8, wave_size=2)
    rows = solve_pool(be, [Q], tmp_path / "live", plan, progress=False)
    assert rows[0]["launched"] == 8  # the rest were launched
    assert rows[0]["replay_ok"] and replay_run(tmp_path / "live")[0]["match"]


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
