"""Generation speed and size on disk of the synthetic backend.

    python benchmarks/bench_generate.py [--preset qwen3-8b] [--problems aime_2025] [--traces 512]
                                        [--questions 0-29] [--workers 1] [--no-confs] [--keep DIR]

Generates a pool (default: 30 questions x 512 traces with per-token confidences, the issue's
target: under a minute on 2 cores) into a temporary folder through
``mars.generate.generate_pool``
-- the same path as ``mars generate`` -- and prints one line of JSON: wall time, CPU time (this
process and its workers), the 1-minute load average at the end (other jobs on the machine inflate
wall time), traces, tokens, throughput and MB on disk (trace files / whole pool).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars.engines.synthetic import SyntheticBackend
from mars.generate import generate_pool
from mars.store.pool import open_pool
from mars.store.problems import load_problems
from mars.store.problems import parse_question_spec as parse_qids


def _cpu() -> float:
    """CPU seconds (user + system) of this process and its finished children (workers)."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="qwen3-8b")
    ap.add_argument("--problems", default="aime_2025")
    ap.add_argument("--traces", type=int, default=512)
    ap.add_argument("--questions", default=None, help="e.g. 0-9 (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2, help="processes (the target is 2 cores)")
    ap.add_argument("--no-confs", action="store_true")
    ap.add_argument("--keep", default=None, help="write the pool here and keep it")
    a = ap.parse_args(argv)
    problems = load_problems(a.problems)
    backend = SyntheticBackend(a.preset, with_confs=not a.no_confs)
    tmp = Path(tempfile.mkdtemp(prefix="mars-bench-"))
    out = Path(a.keep) if a.keep else tmp / "pool"
    if out.exists():
        shutil.rmtree(out)
    try:
        t0 = time.perf_counter()
        cpu0 = _cpu()
        generate_pool(
            backend,
            problems,
            a.traces,
            a.seed,
            out,
            questions=parse_qids(a.questions),
            workers=a.workers,
        )
        wall = time.perf_counter() - t0
        cpu = _cpu() - cpu0
        pool = open_pool(out)
        tokens = traces = 0
        t1 = time.perf_counter()
        for q in pool.questions():
            tokens += int(q.lengths.sum())
            traces += q.n_traces
        read = time.perf_counter() - t1
        trace_bytes = sum(f.stat().st_size for f in (out / "traces").iterdir())
        total_bytes = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
        print(
            json.dumps(
                {
                    "preset": a.preset,
                    "problems": a.problems,
                    "questions": len(pool.qids),
                    "traces": traces,
                    "confs": not a.no_confs,
                    "workers": a.workers,
                    "tokens": tokens,
                    "wall_s": round(wall, 2),
                    "cpu_s": round(cpu, 2),
                    "load_avg_1min": round(os.getloadavg()[0], 2),
                    "traces_per_s": round(traces / wall),
                    "mtokens_per_s": round(tokens / wall / 1e6, 2),
                    "trace_files_mb": round(trace_bytes / 1e6, 1),
                    "pool_mb": round(total_bytes / 1e6, 1),
                    "bytes_per_token": round(trace_bytes / max(1, tokens), 3),
                    "read_back_s": round(read, 2),
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                }
            )
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
