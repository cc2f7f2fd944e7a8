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

from mars.arrays import load_arrays
from mars.methods import get_method
from mars.pool import open_pool
from mars.simulate import QuestionContext, Settings, run_method
from mars.stopping import Snapshot
from mars.voting import leader, tally

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
        ctx = QuestionContext(arr, settings)
        if disjoint:
            pool_ids = arr.pool_ids()
            rest = pool_ids[settings.warmup :]
            S = np.empty((settings.iterations, settings.budget), dtype=np.int64)
            for i in range(settings.iterations):
                rng = np.random.default_rng(settings.seed + 10000 * arr.qid + i)
                S[i] = rest[rng.choice(len(rest), size=settings.budget, replace=True)]
            ctx = QuestionContext(arr, settings, samples=S)
        out.append(ctx)
    return out


def walk(ctx: QuestionContext, pipeline: str, q_matrix: np.ndarray | None = None):
    """Snapshots of every iteration at every checkpoint (no stopping), exactly as run_method builds
    them; plus the full-budget answer per iteration and the tokens of a stop at each checkpoint."""
    arr, S = ctx.arr, ctx.samples
    I, _B = S.shape
    grid = arr.grid
    m = len(grid)
    dco = pipeline == "dco"
    lens = arr.lengths[S]
    run_lens = arr.run_lengths[S]
    if dco:
        taus, trunc, runmin = ctx.dco
    else:
        taus, trunc, runmin = None, lens, None
    truncated = trunc < lens
    cap = np.minimum(lens, trunc)
    baseline = cap.sum(axis=1)
    if q_matrix is None:
        q_matrix = ctx.q_learned
    rows = np.arange(I)
    snaps = []
    for k in range(m):
        ids = arr.ids[S, k]
        kept = np.ones(ids.shape, dtype=bool)
        if dco:
            kept &= runmin[S, k] >= taus[:, None]
            kept &= ~(truncated & (grid[k] >= trunc))
        e = kept & (ids >= 0)
        running = run_lens > grid[k]
        w = arr.conf_at_pos[S, k] if dco else np.ones(ids.shape)
        votes = tally(ids, w, e, arr.n_answers)
        lead, has = leader(votes)
        snaps.append(
            Snapshot(
                k=k,
                position=int(grid[k]),
                rows=rows,
                ids=ids,
                eligible=e,
                weights=w,
                votes=votes,
                lead=lead,
                has_votes=has,
                running=running,
                n_answers=arr.n_answers,
                q=q_matrix[S, k],
                pending=kept & running & (ids < 0),
            )
        )
    e_f = arr.final_ids[S] >= 0
    if dco:
        e_f &= runmin[S, m - 1] >= taus[:, None]
        e_f &= ~(truncated & (trunc <= grid[-1]))
    w_f = arr.conf_at_pos[S, m - 1] if dco else np.ones(S.shape)
    final, _ = leader(tally(arr.final_ids[S], w_f, e_f, arr.n_answers))
    tokens = np.stack([np.minimum(cap, g).sum(axis=1) for g in grid], axis=1)  # [I, m]
    return snaps, final, tokens, baseline


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
