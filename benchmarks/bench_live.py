"""Live MARS (`mars solve`): tokens and wall time against running every trace to completion.

    python benchmarks/bench_live.py [--backend synthetic|transformers] [--model PATH]
                                    [--preset qwen3-8b] [--problems aime_2025] [--questions 0-29]
                                    [--traces 64] [--warmup 16] [--method sc-mars-cal]
                                    [--spacing 2048] [--max-tokens N] [--overhead]
                                    [--per-checkpoint] [--new-answers]

Per question: the live run (warmup, then N traces stopped when the method fires) and the same N
traces run to completion (``compare_full``). Prints one line of JSON: accuracy of both, tokens
(main traces; warmup apart), token savings, wall time of the main phase live vs to completion, and
the decision overhead (time spent deciding, per checkpoint). ``--overhead`` instead measures the
decision overhead alone on the synthetic engine for N = 64, 256, 1,024 and 4,096 traces
(``--overhead-method``: whose decisions; the default ``sc`` never fires, so every checkpoint is
decided). ``--per-checkpoint`` measures the decision time at checkpoints 1, 8 and 32 of one
question at 1,024 traces (``--spacing`` 512 keeps 32 checkpoints inside the synthetic traces): a
decision is one step of the walk, so it should not grow with the checkpoint index.
``--new-answers`` times ``mars.Stopper`` alone over a question of 512 traces and 64 checkpoints,
with no new answer and with a new answer at every checkpoint (``--new-answers-methods``).

With ``--backend transformers`` (a directory or .gguf file; CUDA when available) the wall times
are those of real generation; on the synthetic engine generation is nearly free, so there only the
tokens and the decision overhead mean something.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars.engines.synthetic import SyntheticBackend
from mars.live import plan_for, solve
from mars.store.problems import load_problems
from mars.store.problems import parse_question_spec as parse_qids


def _backend(a):
    if a.backend == "synthetic":
        return SyntheticBackend(a.preset, max_tokens=a.max_tokens)
    import torch

    from mars.engines.transformers import TransformersBackend

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return TransformersBackend(
        a.model, device=device, max_tokens=a.max_tokens or 4096, batch_size=a.batch_size
    )


def overhead(a) -> dict:
    """Decision time per checkpoint vs N on the synthetic engine
    (generation there costs ~nothing)."""
    be = SyntheticBackend(a.preset)
    problem = load_problems(a.problems)[a.overhead_question]
    out = {}
    for n in (64, 256, 1024, 4096):
        run = solve(
            be,
            problem,
            plan_for(
                be, a.overhead_method, n_traces=n, warmup=a.warmup, seed=a.seed, spacing=a.spacing
            ),
        )
        out[n] = {
            "checkpoints": run.checkpoints,
            "decide_s": run.wall_s["decide"],
            "per_checkpoint_s": round(run.wall_s["decide"] / max(run.checkpoints, 1), 4),
            "main_s": run.wall_s["main"],
            "tokens": run.tokens,
        }
        print(n, out[n], file=sys.stderr)
    return {
        "bench": "live-overhead",
        "preset": a.preset,
        "method": a.overhead_method,
        "question": a.overhead_question,
        "by_traces": out,
    }


def per_checkpoint(a) -> dict:
    """Seconds of each checkpoint's decision (the live hook: answers, confidences, the step)."""
    from mars.live import loop as live

    times: list[float] = []
    call = live._Controller.__call__

    def timed(self, p, batch, probes):
        t0 = time.perf_counter()
        try:
            return call(self, p, batch, probes)
        finally:
            times.append(time.perf_counter() - t0)

    steps: list[float] = []
    stepper = getattr(live, "Stopper", None)  # the decision alone (absent before mars.Stopper)
    step = stepper.step if stepper else None

    def timed_step(self, *args):
        t0 = time.perf_counter()
        try:
            return step(self, *args)
        finally:
            steps.append(time.perf_counter() - t0)

    live._Controller.__call__ = timed
    if stepper:
        stepper.step = timed_step
    try:
        problem = load_problems(a.problems)[a.overhead_question]
        t0 = time.perf_counter()
        be = SyntheticBackend(a.preset)
        plan = plan_for(
            be, a.overhead_method, n_traces=1024, warmup=a.warmup, seed=a.seed, spacing=a.spacing
        )
        run = solve(be, problem, plan)
        total = time.perf_counter() - t0
    finally:
        live._Controller.__call__ = call
        if stepper:
            stepper.step = step

    def at(ts):
        return {k: round(ts[k - 1] * 1e3, 2) for k in (1, 8, 32) if k <= len(ts)} or None

    return {
        "bench": "live-per-checkpoint",
        "method": a.overhead_method,
        "traces": 1024,
        "spacing": a.spacing,
        "checkpoints": len(times),
        "decide_ms_at_checkpoint": at(times),  # the live hook: answers, confidences, decision
        "step_ms_at_checkpoint": at(steps),  # the decision alone (Stopper.step)
        "decide_ms_median": round(float(sorted(times)[len(times) // 2]) * 1e3, 2)
        if times
        else None,
        "solve_s": round(total, 2),
        "replay_ok": run.replay_ok,
        "load_avg_1min": round(os.getloadavg()[0], 2),
    }


def new_answers(a) -> dict:
    """Seconds of a whole question's decisions (``mars.Stopper`` alone: 512 traces, 64
    checkpoints, 16 warmup traces, a split vote that never stops) with no new answer after the
    first checkpoints and with a new answer at every checkpoint (a chatty model's probes): a
    rule whose decision depends on how many answers exist replays its walk at each new one."""
    import numpy as np

    import mars

    N, m, W = 512, 64, 16
    grid = [a.spacing * (k + 1) for k in range(m)]
    rng = np.random.default_rng(a.seed)
    rows = [[str(rng.integers(1, 4)) if k > 2 else None for k in range(m)] for _ in range(W)]
    warm = mars.Warmup(rows, [r[-1] for r in rows], [a.spacing * m] * W)
    out: dict = {}
    for method in a.new_answers_methods.split(","):
        for fresh in (False, True):
            best = float("inf")
            for _ in range(3):  # the best of 3 (parsed answers are cached after the first)
                stopper = mars.Stopper(method, n_traces=N, grid=grid, warmup=warm)
                t0 = time.perf_counter()
                for k in range(m):
                    ans = [str(1 + i % 3) if k > 1 else None for i in range(N)]
                    if fresh:
                        ans[k] = f"new {k}"
                    if stopper.step(ans, [True] * N).stop:
                        break
                best = min(best, time.perf_counter() - t0)
            what = "new answer each checkpoint" if fresh else "no new answers"
            out[f"{method} {what}"] = round(best, 3)
    return {
        "bench": "stopper-new-answers",
        "traces": N,
        "checkpoints": m,
        "question_s": out,
        "load_avg_1min": round(os.getloadavg()[0], 2),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="synthetic", choices=["synthetic", "transformers"])
    ap.add_argument("--model", default=None)
    ap.add_argument("--preset", default="qwen3-8b")
    ap.add_argument("--problems", default="aime_2025")
    ap.add_argument("--questions", default="0-29")
    ap.add_argument("--traces", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=16)
    ap.add_argument("--method", default="sc-mars-cal")
    ap.add_argument("--spacing", type=int, default=2048)
    ap.add_argument("--max-tokens", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--overhead", action="store_true")
    ap.add_argument("--per-checkpoint", action="store_true")
    ap.add_argument("--new-answers", action="store_true")
    ap.add_argument("--new-answers-methods", default="sc-mars2,sc-mars-cal")
    ap.add_argument("--overhead-question", type=int, default=8)
    ap.add_argument(
        "--overhead-method",
        default="sc",
        help="method whose decisions are timed (sc never fires: every checkpoint is decided)",
    )
    a = ap.parse_args(argv)
    if a.overhead:
        print(json.dumps(overhead(a)))
        return 0
    if a.per_checkpoint:
        print(json.dumps(per_checkpoint(a)))
        return 0
    if a.new_answers:
        print(json.dumps(new_answers(a)))
        return 0
    be = _backend(a)
    problems = load_problems(a.problems)
    by_qid = {p.qid: p for p in problems}
    qids = parse_qids(a.questions) or sorted(by_qid)
    runs = []
    t0 = time.perf_counter()
    for q in qids:
        run = solve(
            be,
            by_qid[q],
            plan_for(
                be, a.method, n_traces=a.traces, warmup=a.warmup, seed=a.seed, spacing=a.spacing
            ),
            compare_full=True,
        )
        runs.append(run)
        print(
            f"q{q}: {run.stopped_by} at {run.stop_position}, {run.tokens} vs {run.full['tokens']} "
            f"tokens, {run.wall_s['main']:.2f} vs {run.full['wall_s']:.2f} s, "
            f"replay_ok={run.replay_ok}",
            file=sys.stderr,
        )
    n = len(runs)
    tok, full_tok = sum(r.tokens for r in runs), sum(r.full["tokens"] for r in runs)
    wall, full_wall = sum(r.wall_s["main"] for r in runs), sum(r.full["wall_s"] for r in runs)
    checkpoints = sum(r.checkpoints for r in runs)
    print(
        json.dumps(
            {
                "bench": "live",
                "backend": a.backend,
                "model": a.model or a.preset,
                "method": a.method,
                "problems": a.problems,
                "questions": n,
                "traces": a.traces,
                "warmup": a.warmup,
                "spacing": a.spacing,
                "accuracy_live": round(sum(r.correct for r in runs) / n, 4),
                "accuracy_full": round(sum(r.full["correct"] for r in runs) / n, 4),
                "same_answer": sum(r.answer == r.full["answer"] for r in runs),
                "tokens_live": tok,
                "tokens_full": full_tok,
                "token_savings": round(1 - tok / full_tok, 4),
                "warmup_tokens": sum(r.warmup_tokens for r in runs),
                "wall_main_live_s": round(wall, 2),
                "wall_full_s": round(full_wall, 2),
                "wall_savings": round(1 - wall / full_wall, 4) if full_wall else None,
                "decide_s": round(sum(r.wall_s["decide"] for r in runs), 2),
                "decide_per_checkpoint_s": round(
                    sum(r.wall_s["decide"] for r in runs) / max(checkpoints, 1), 4
                ),
                "replay_ok": all(r.replay_ok for r in runs),
                "total_s": round(time.perf_counter() - t0, 1),
                "load_avg_1min": round(os.getloadavg()[0], 2),
                "machine": platform.machine(),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
