"""Speed of sc-mars2 / dco-mars2: added simulator time, and one live decision at 1,024 traces.

    python research/beyond/bench.py

Pool: the simulator benchmark's (benchmarks/bench_simulate.py: DeepSeek-R1-8B preset, AIME 2025,
10 questions × 1,024 traces, per-token confidences), default settings (budget 512, 64
iterations). Times the 14 reference methods per question in one process (arrays loaded and the
shared q-model / DeepConf state built once per question, as `mars simulate` does), then the two
new methods on the same contexts. Live: a single-iteration decision over 1,024 running traces.
Writes results/bench.md.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import methods2
import numpy as np
from common import walk

from mars.method.arrays import load_arrays
from mars.method.registry import REFERENCE_METHODS, get_method
from mars.method.settings import Settings
from mars.method.walk import QuestionContext, run_method
from mars.store.pool import open_pool

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_simulate import OUT, build_pool  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    pool_path = build_pool(OUT / "pool-10x1024", 10, 1024)
    pool = open_pool(pool_path)
    s = Settings()
    t_ref = t_new = t_load = 0.0
    for qid in pool.qids:
        t0 = time.perf_counter()
        arr = load_arrays(pool.read_question(qid))
        ctx = QuestionContext.sample(arr, s)
        t1 = time.perf_counter()
        for name in REFERENCE_METHODS:
            run_method(ctx, get_method(name))
        t2 = time.perf_counter()
        for m in (methods2.SC_MARS2, methods2.DCO_MARS2):
            run_method(ctx, m)
        t3 = time.perf_counter()
        t_load += t1 - t0
        t_ref += t2 - t1
        t_new += t3 - t2
    # live: one iteration over 1,024 main traces at a mid checkpoint (the simulator's decision path)
    arr = load_arrays(pool.read_question(pool.qids[0]))
    warm = arr.pool_ids()[:16]
    main_ids = np.setdiff1d(np.arange(arr.n_traces), warm)[:1024]
    if len(main_ids) < 1024:
        main_ids = np.resize(main_ids, 1024)
    ctx = QuestionContext(
        arr, Settings(budget=1024, iterations=1), samples=main_ids[None], warm=warm, memo={}
    )
    _ = ctx.q_learned
    rule = methods2.rule_for_question(methods2.SC_MARS2, ctx)
    snap = walk(ctx, "sc")[0][3]
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        methods2.rule_for_question(methods2.SC_MARS2, ctx).check(snap)
    live = (time.perf_counter() - t0) / reps
    total = t_load + t_ref
    lines = [
        "| measure | seconds |",
        "|---|---:|",
        f"| load + arrays + shared state, 10 questions | {t_load:.2f} |",
        f"| 14 reference methods, 10 questions | {t_ref:.2f} |",
        f"| sc-mars2 + dco-mars2, 10 questions | {t_new:.2f} |",
        f"| added time vs load + 14 methods | {100 * t_new / total:.1f} % |",
        f"| added time vs the 14 methods alone | {100 * t_new / t_ref:.1f} % |",
        f"| one live decision (build rule + check), 1,024 traces, {arr.n_answers} answer groups "
        f"| {live:.4f} |",
    ]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    del rule


if __name__ == "__main__":
    main()
