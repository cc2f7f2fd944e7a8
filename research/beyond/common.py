"""Shared plumbing of the research drivers: the pools, cached arrays, snapshots, baselines.

Pools (128 traces per question, budget 64, 64 iterations, warmup 16, seed 42 — the setting of the
real AIME 2024 traces): the real Qwen3-8B AIME 2024 pool and synthetic pools of every preset ×
dataset, generation seed 1 (development), 2 (held out for the first version, issue 14) and 3 (held
out for the second, issue 23); and the contested stress tests of ``presets/`` (seeds 1 and 3).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mars.method import protocol
from mars.method.arrays import load_arrays
from mars.method.registry import get_method
from mars.method.settings import Settings
from mars.method.walk import MethodRun, QuestionContext, run_method
from mars.store.pool import open_pool

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
REAL_POOL = (
    HERE.parents[1].parent / "shared" / "fixtures" / "reference-sim" / "pp-aime24" / "pool.parquet"
)
PRESETS = ["qwen3-8b", "deepseek-r1-0528-qwen3-8b", "qwen3-32b", "qwen3-next-80b-a3b-thinking"]
SHORT = {
    "qwen3-8b": "q8b",
    "deepseek-r1-0528-qwen3-8b": "ds8b",
    "qwen3-32b": "q32b",
    "qwen3-next-80b-a3b-thinking": "qnext",
    "contested": "contested",
    "contested-flat": "contested-flat",
}
DATASETS = ["aime_2025", "hmmt_feb_2025", "brumo_2025"]
#: issue 23's stress tests (presets/*.json): two answers with close final shares, with and without
#: an early attractor that the correct answer overtakes late
CONTESTED = [
    ("contested", "aime_2025"),
    ("contested", "hmmt_feb_2025"),
    ("contested-flat", "aime_2025"),
]
PRESET_DIR = HERE / "presets"
SETTINGS = Settings(budget=64, iterations=64, warmup=16, seed=42)
N_TRACES = 128


@dataclass(frozen=True)
class PoolSpec:
    name: str  # e.g. "real/aime24", "q8b/aime_2025/s1"
    path: Path
    model: str  # preset or "qwen3-8b-real"
    dataset: str
    confs: bool

    @property
    def pipelines(self) -> list[str]:
        return ["sc", "dco"] if self.confs else ["sc"]


def ensure_pool(preset: str, dataset: str, seed: int) -> Path:
    """Generate a synthetic pool once (deterministic in preset, dataset, seed)."""
    out = CACHE / "pools" / f"{preset}.{dataset}.s{seed}"
    if not (out / "pool.json").exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "mars.cli",
                "generate",
                "--backend",
                "synthetic",
                "--preset",
                str(PRESET_DIR / f"{preset}.json")
                if (PRESET_DIR / f"{preset}.json").exists()
                else preset,
                "--problems",
                dataset,
                "--traces",
                str(N_TRACES),
                "--seed",
                str(seed),
                "--out",
                str(out),
                "-q",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return out


def pools(seed: int = 1, real: bool = True) -> list[PoolSpec]:
    out = []
    if real:
        out.append(PoolSpec("real/aime24", REAL_POOL, "qwen3-8b-real", "aime_2024", False))
    out.extend(
        PoolSpec(f"{SHORT[p]}/{d}/s{seed}", ensure_pool(p, d, seed), p, d, True)
        for p in PRESETS
        for d in DATASETS
    )
    return out


def contested_pools(seed: int = 1) -> list[PoolSpec]:
    """The contested stress-test pools (seed 1: development, 3: held out)."""
    return [PoolSpec(f"{p}/{d}/s{seed}", ensure_pool(p, d, seed), p, d, True) for p, d in CONTESTED]


def question_arrays(spec: PoolSpec):
    """All questions' arrays of a pool (cached on disk by content)."""
    pool = open_pool(spec.path)
    return [load_arrays(pool.read_question(q), CACHE / "arrays") for q in pool.qids]


def contexts(spec: PoolSpec, settings: Settings = SETTINGS, disjoint: bool = False):
    """One QuestionContext per question. ``disjoint``: bootstrap only from non-warmup traces (check
    that nothing comes from the warmup traces reappearing inside the sample)."""
    out = []
    for arr in question_arrays(spec):
        ctx = QuestionContext.sample(arr, settings)
        if disjoint:
            pool_ids = arr.pool_ids()
            rest = pool_ids[settings.warmup :]
            S = np.empty((settings.iterations, settings.budget), dtype=np.int64)
            for i in range(settings.iterations):
                rng = np.random.default_rng(settings.seed + 10000 * arr.qid + i)
                S[i] = rest[rng.choice(len(rest), size=settings.budget, replace=True)]
            ctx = QuestionContext(arr, settings, S, protocol.warmup(arr, settings))
        out.append(ctx)
    return out


#: the simulator's method whose snapshots a pipeline's walk reads (its vote: weights and the
#: DeepConf filter; q is set below), at the --gamma setting so that no γ is calibrated
WALK_METHOD = {"sc": "sc-mars", "dco": "dco-mars-oracle"}


def walk(ctx: QuestionContext, pipeline: str, q_matrix: np.ndarray | None = None):
    """Snapshots of every iteration at every checkpoint (no stopping), the simulator's own
    (``MethodRun.snapshot``); plus the full-budget answer per iteration and the tokens of a stop
    at each checkpoint."""
    run = MethodRun(ctx, get_method(WALK_METHOD[pipeline]))
    run.q_matrix = ctx.q_learned if q_matrix is None else q_matrix
    rows = np.arange(len(ctx.samples))
    snaps = [run.snapshot(k, rows) for k in range(len(ctx.arr.grid))]
    final = run.full_budget_vote(rows)
    tokens = np.stack([np.minimum(run.cap, g).sum(axis=1) for g in ctx.arr.grid], axis=1)
    return snaps, final, tokens, run.cap.sum(axis=1)


@dataclass
class Walked:
    """One question walked (:func:`walk`) with what every offline stopping study reads of it:
    the leader of every iteration at every checkpoint and the full budget's answer."""

    snaps: list
    lead: np.ndarray  # [iterations, checkpoints]
    final: np.ndarray  # the full-budget answer per iteration
    tokens: np.ndarray  # the tokens of a stop at each checkpoint
    base: np.ndarray  # the full budget's tokens
    correct: np.ndarray  # the correct answer ids

    def baseline(self) -> dict:
        """The full budget's accuracy and oracle-first's savings (first checkpoint whose leader
        is the full-budget answer)."""
        r = np.arange(len(self.final))
        orc = self.lead == self.final[:, None]
        ko = np.argmax(orc, axis=1)
        tok = np.where(orc.any(1), self.tokens[r, ko], self.base)
        return {
            "full": float(np.isin(self.final, self.correct).mean()),
            "oracle": float(np.mean(1 - tok / self.base)),
        }

    def stop_at(self, risk: np.ndarray, alpha: float) -> tuple[float, float, float]:
        """Stopping at the first checkpoint with ``risk`` ≤ ``alpha``: accuracy, savings and the
        share of iterations whose answer differs from the full budget's."""
        r = np.arange(len(self.final))
        stop = risk <= alpha
        k = np.argmax(stop, axis=1)
        ans = np.where(stop.any(1), self.lead[r, k], self.final)
        tok = np.where(stop.any(1), self.tokens[r, k], self.base)
        return (
            float(np.isin(ans, self.correct).mean()),
            float(np.mean(1 - tok / self.base)),
            float(np.mean(ans != self.final)),
        )


def walked(ctx: QuestionContext, pipeline: str) -> Walked:
    snaps, final, tokens, base = walk(ctx, pipeline)
    lead = np.stack([s.lead for s in snaps], axis=1)
    return Walked(snaps, lead, final, tokens, base, np.flatnonzero(ctx.arr.correct))


def pool_effect(outcomes: list[dict], key: str) -> tuple[float, float]:
    """A pool's accuracy against the full budget (pp) and share of oracle-first's savings (%),
    from its questions' outcomes (:meth:`Walked.baseline`, and :meth:`Walked.stop_at` under
    ``key``)."""
    full = np.mean([q["full"] for q in outcomes])
    orc = np.mean([q["oracle"] for q in outcomes])
    acc = np.mean([q[key][0] for q in outcomes])
    sav = np.mean([q[key][1] for q in outcomes])
    return 100 * (acc - full), (100 * sav / orc if orc else np.nan)


def regular_and_contested(per_pool: dict) -> tuple[list, list]:
    """The values of the regular pools and of the contested stress tests."""
    reg = [v for p, v in per_pool.items() if not p.startswith("contested")]
    return reg, [v for p, v in per_pool.items() if p.startswith("contested")]


BASELINES = {
    "sc": ["sc", "sc-mars", "sc-mars-cal", "sc-mars-cert", "sc-pp", "oracle-first"],
    "dco": ["dco", "dco-mars-cal", "oracle-dco-first"],
}


def method_summary(res) -> dict:
    """Per-question accuracy, savings, probe-inclusive savings (as the simulator's summary does)."""
    sav = 100 * np.mean(1 - res.tokens / res.baseline)
    sav_p = 100 * np.mean(1 - (res.tokens + res.probe_tokens) / res.baseline)
    pos = np.mean(res.position)
    return {"acc": 100 * res.correct.mean(), "sav": sav, "sav_p": sav_p, "pos": pos}


def baselines(ctx: QuestionContext, pipeline: str) -> dict:
    return {name: method_summary(run_method(ctx, get_method(name))) for name in BASELINES[pipeline]}
