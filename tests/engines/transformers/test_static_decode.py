"""Decoding over a static KV cache (``--decode static | cuda-graphs``,
mars/engines/static_decode.py): the eager traces and probes, checked before the model loads,
nothing read back to the host in a step."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("accelerate")  # transformers needs it to load GGUF files

from engines.transformers.common import (  # noqa: E402
    Q2,
    REPO,
    SPACING,
    Q,
    assert_probed_like_inline,
    smol_test,
    tiny_backend,
    trace_rows,
    with_settings,
)
from mars.engines.transformers import (  # noqa: E402
    TransformersBackend,
)
from mars.generate import generate_pool  # noqa: E402
from mars.store import schema  # noqa: E402

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
    from mars.generate import probe_pool

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
