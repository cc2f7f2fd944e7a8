"""Statistics of a set of traces (running share, self- and majority-agreement, switches, SC
accuracy) and the stopping statistics of MARS and its baselines on them."""

from __future__ import annotations

import random
import shutil
from functools import lru_cache
from pathlib import Path

import numpy as np

from mars.engines.synthetic import SyntheticBackend
from mars.generate import generate_pool
from mars.store import schema
from mars.store.problems import load_problems

from .common import DATASET_FILES
from .views import QView


def switches(v: QView) -> np.ndarray:
    """Answer switches per trace: changes between consecutive answers at grid points before the
    end (abstentions skipped), then the final answer."""
    run = v.L[:, None] > v.P[None, :]
    X = np.concatenate([np.where(run, v.A, -1), v.F[:, None]], axis=1)
    valid = X >= 0
    m = X.shape[1]
    last = np.where(valid, np.arange(m)[None, :], -1)
    last = np.maximum.accumulate(last, axis=1)
    prev = np.concatenate([np.full((len(X), 1), -1), last[:, :-1]], axis=1)
    prev_val = np.take_along_axis(X, np.maximum(prev, 0), axis=1)
    sw = valid & (prev >= 0) & (X != prev_val)
    return sw.sum(axis=1)


@lru_cache(maxsize=16)
def _shuffles(n: int, n_seeds: int) -> np.ndarray:
    out = np.empty((n_seeds, n), np.int64)
    for s in range(n_seeds):
        idx = list(range(n))
        random.Random(s).shuffle(idx)
        out[s] = idx
    return out


def sc_at_k(v: QView, k: int = 64, n_seeds: int = 100) -> float:
    """Parallel-Probe protocol: ``random.Random(s).shuffle`` of the traces, first k, plain
    majority of final answers ("no answer" is a candidate too; ties go to the answer seen first,
    as ``Counter.most_common``), exact match with the truth."""
    u, dense = np.unique(v.F, return_inverse=True)
    K = len(u)
    sub = dense[_shuffles(len(v.F), n_seeds)[:, :k]]  # [seeds, k]
    rows = np.repeat(np.arange(n_seeds), sub.shape[1])
    counts = np.bincount(rows * K + sub.ravel(), minlength=n_seeds * K).reshape(n_seeds, K)
    first: np.ndarray = np.full(n_seeds * K, k, np.int64)
    np.minimum.at(first, rows * K + sub.ravel(), np.tile(np.arange(sub.shape[1]), n_seeds))
    first = first.reshape(n_seeds, K)
    best = np.where(counts == counts.max(axis=1, keepdims=True), first, k + 1)
    top = u[np.argmin(best, axis=1)]
    return float(np.mean((top == v.gt) & (top >= 0)))


def _majority_curve(v: QView) -> np.ndarray:
    """Per grid point: 1 if the snapshot plurality (running traces: probe answer; finished: final
    answer; abstentions and no-answers skipped; lowest code on ties) equals the final plurality."""
    run = v.L[:, None] > v.P[None, :]
    snap = np.where(run, v.A, v.F[:, None])
    u, dense = np.unique(np.concatenate([snap.ravel(), v.F]), return_inverse=True)
    K = len(u)
    valid_code = u >= 0
    ds = dense[: snap.size].reshape(snap.shape)
    m = snap.shape[1]
    counts = np.bincount((np.arange(m)[None, :] * K + ds).ravel(), minlength=m * K).reshape(m, K)
    counts[:, ~valid_code] = 0
    fcounts = np.bincount(dense[snap.size :], minlength=K)
    fcounts[~valid_code] = 0
    if fcounts.max() == 0:
        return np.zeros(m)
    fmaj = np.argmax(fcounts)
    return ((counts.max(axis=1) > 0) & (np.argmax(counts, axis=1) == fmaj)).astype(float)


#: Early checkpoints (tokens) at which the per-question vote shares are compared.
EARLY = (2048, 4096, 6144)


def _early_shares(v: QView, positions=EARLY) -> tuple[np.ndarray, np.ndarray]:
    """Snapshot vote shares (over all traces; running traces vote their probe, finished ones their
    final answer) of the final majority and of the snapshot leader at ``positions``."""
    fin = v.F[v.F >= 0]
    if fin.size == 0:
        return np.zeros(len(positions)), np.zeros(len(positions))
    u, c = np.unique(fin, return_counts=True)
    fmaj = u[np.argmax(c)]
    fs, ls = [], []
    for p in positions:
        snap = (
            np.where(v.L > p, v.A[:, p // v.P[0] - 1] if p <= v.P[-1] else -1, v.F)
            if len(v.P)
            else v.F
        )
        ok = snap[snap >= 0]
        fs.append(float(np.mean(snap == fmaj)))
        ls.append(float(np.unique(ok, return_counts=True)[1].max() / len(snap)) if ok.size else 0.0)
    return np.array(fs), np.array(ls)


def compute_stats(
    views: list[QView],
    spacing: int,
    t_step: int = 500,
    t_max: int | None = None,
    with_sc: bool = True,
) -> dict:
    """All comparison statistics of a set of questions (see the module docstring)."""
    allL = np.concatenate([v.L for v in views])
    t_max = t_max or int(allL.max()) + t_step
    t = np.arange(0, t_max + 1, t_step)
    surv = (allL[None, :] > t[:, None]).mean(axis=1)
    m = max(len(v.P) for v in views)
    P = spacing * np.arange(1, m + 1)
    num = np.zeros(m)
    den = np.zeros(m)
    none = np.zeros(m)
    run_n = np.zeros(m)
    maj = np.ones((len(views), m))
    sw, ent, acc, distinct, sc, early_f, early_l = [], [], [], [], [], [], []
    for qi, v in enumerate(views):
        if spacing == schema.CHECKPOINT_SPACING:
            f_, l_ = _early_shares(v)
            early_f.append(f_)
            early_l.append(l_)
        mq = len(v.P)
        run = v.L[:, None] > v.P[None, :]
        ok = run & (v.A >= 0) & (v.F[:, None] >= 0)
        num[:mq] += (ok & (v.A == v.F[:, None])).sum(axis=0)
        den[:mq] += ok.sum(axis=0)
        none[:mq] += (run & (v.A < 0)).sum(axis=0)
        run_n[:mq] += run.sum(axis=0)
        maj[qi, :mq] = _majority_curve(v)
        sw.append(switches(v))
        f = v.F[v.F >= 0]
        if f.size:
            c = np.unique(f, return_counts=True)[1] / f.size
            ent.append(float(-(c * np.log2(c)).sum()))
        else:
            ent.append(0.0)
        distinct.append(len(np.unique(f)))
        acc.append(float((v.F == v.gt).mean()))
        sc.append(sc_at_k(v) if with_sc else np.nan)
    sw_flat = np.concatenate(sw)
    with np.errstate(invalid="ignore", divide="ignore"):
        pf = num / den
        pn = none / run_n
    return {
        "spacing": spacing,
        "n_questions": len(views),
        "n_traces": int(allL.size),
        "t": t,
        "running": surv,
        "P": P,
        "probe_final": pf,
        "probe_final_n": den,
        "probe_none": pn,
        "running_n": run_n,
        "majority": maj.mean(axis=0),
        "early_final": np.array(early_f),
        "early_leader": np.array(early_l),
        "switches": sw_flat,
        "entropy": np.array(ent),
        "acc_q": np.array(acc),
        "distinct": np.array(distinct),
        "sc64_q": np.array(sc),
        "sc64": float(np.mean(sc)),
        "mean_len": float(allL.mean()),
        "median_len": float(np.median(allL)),
        "capped": float(np.concatenate([v.capped for v in views]).mean()),
        "no_final": float(np.mean(np.concatenate([v.F < 0 for v in views]))),
        "acc": float(np.mean(acc)),
        "probe_none_all": float(none.sum() / max(1, run_n.sum())),
    }


#: Stopping methods whose accuracy and savings the calibration compares (and fits).
MARS_METHODS = ("sc", "sc-mars", "sc-mars-cal", "sc-pp")


MARS_BUDGET = 64


def view_arrays(v: QView, qid: int = 0):
    """A view as the simulator's :class:`~mars.method.arrays.QuestionArrays` (uniform weights, no
    confidences): a finished trace votes its final answer, a running one its probe."""
    from mars.method.arrays import QuestionArrays

    run = v.L[:, None] > v.P[None, :]
    raw = np.where(run, v.A, v.F[:, None])
    u, inv = np.unique(np.concatenate([raw.ravel(), v.F]), return_inverse=True)
    valid = u >= 0
    dense = np.where(valid, np.cumsum(valid) - 1, -1).astype(np.int32)[inv]
    names = u[valid]
    return QuestionArrays(
        qid=qid,
        ground_truth=str(v.gt),
        grid=v.P.copy(),
        lengths=v.L.copy(),
        final_ids=dense[raw.size :],
        ids=dense[: raw.size].reshape(raw.shape),
        representatives=[str(x) for x in names],
        correct=names == v.gt,
    )


def mars_stats(
    views: list[QView],
    methods=MARS_METHODS,
    budget: int = MARS_BUDGET,
    iterations: int = 32,
    seed: int = 42,
) -> dict:
    """Accuracy and token savings (%) of stopping methods simulated on views: the MARS bootstrap
    (``iterations`` samples of ``budget`` answered traces per question, warmup 16, the reference
    settings otherwise), means over questions, as ``mars simulate`` reports them."""
    from mars.method.registry import get_method
    from mars.method.settings import Settings
    from mars.simulate.driver import simulate_question

    ms = [get_method(m) for m in methods]
    s = Settings(budget=budget, iterations=iterations, seed=seed)
    acc: dict[str, list[float]] = {m: [] for m in methods}
    sav: dict[str, list[float]] = {m: [] for m in methods}
    for qid, v in enumerate(views):
        arr = view_arrays(v, qid)
        if len(arr.pool_ids()) == 0:
            continue
        res = simulate_question(arr, ms, s)
        for m in methods:
            r = res.methods[m]
            acc[m].append(float(r.correct.mean()))
            sav[m].append(float(np.mean(1.0 - r.tokens / np.maximum(r.baseline, 1))))
    return {
        m: {"acc": 100 * float(np.mean(acc[m])), "savings": 100 * float(np.mean(sav[m]))}
        for m in methods
    }


def pool_mars_stats(
    pool_path, methods=MARS_METHODS, budget: int = MARS_BUDGET, iterations: int = 64
) -> dict:
    """:func:`mars_stats` through the real path:
    ``mars simulate``'s :func:`~mars.simulate.driver.simulate_pool`
    on a pool directory (answers grouped as the simulator groups them)."""
    from mars.method.registry import get_method
    from mars.method.settings import Settings
    from mars.simulate.driver import simulate_pool

    ms = [get_method(m) for m in methods]
    results = simulate_pool(pool_path, ms, Settings(budget=budget, iterations=iterations))
    out = {}
    for m in methods:
        rs = [r.methods[m] for r in results]
        out[m] = {
            "acc": 100 * float(np.mean([r.correct.mean() for r in rs])),
            "savings": 100
            * float(np.mean([np.mean(1.0 - r.tokens / np.maximum(r.baseline, 1)) for r in rs])),
        }
    return out


#: (preset, traces per question, budget) of the generated stopping-method table.
MARS_SETTINGS = [
    ("qwen3-8b", 128, 64),
    ("deepseek-r1-0528-qwen3-8b", 256, 128),
    ("qwen3-32b", 256, 128),
    ("qwen3-next-80b-a3b-thinking", 256, 128),
]


MARS_SEEDS = (1, 2)


def mars_rows(real_path, tmp: Path, seeds=MARS_SEEDS, log=print) -> list[str]:
    """Markdown table: SC, MARS (γ = 1, calibrated) and Parallel-Probe on the real Qwen3-8B traces
    and on generated pools of every preset and dataset (mean over ``seeds``)."""
    from mars.store.published import import_parallel_probe

    def cells(st):
        d = st["sc-mars-cal"]["acc"] - st["sc"]["acc"]
        return [
            f"{st['sc']['acc']:.1f} %",
            f"{st['sc-mars']['acc']:.1f} % / {st['sc-mars']['savings']:.1f} %",
            f"{st['sc-mars-cal']['acc']:.1f} % / {st['sc-mars-cal']['savings']:.1f} %",
            f"{d:+.1f}",
            f"{st['sc-pp']['acc']:.1f} % / {st['sc-pp']['savings']:.1f} %",
        ]

    lines = [
        "| traces | questions × traces, budget | `sc` accuracy | "
        "`sc-mars` (γ = 1): accuracy / savings | `sc-mars-cal`: accuracy / savings | "
        "`sc-mars-cal` − `sc` (points) | `sc-pp` (u = 3): accuracy / savings |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    real = import_parallel_probe(real_path, tmp / "real-pool")
    lines.append(
        "| real Qwen3-8B, AIME 2024 | 30 × 128, 64 | "
        + " | ".join(cells(pool_mars_stats(real)))
        + " |"
    )
    for name, n, budget in MARS_SETTINGS:
        for ds in DATASET_FILES.values():
            runs = []
            for seed in seeds:
                pool = generate_pool(
                    SyntheticBackend(name, with_confs=False),
                    load_problems(ds),
                    n,
                    seed,
                    tmp / f"mars-{name}-{ds}-{seed}",
                )
                runs.append(pool_mars_stats(pool, budget=budget))
                shutil.rmtree(pool, ignore_errors=True)
            st = {
                m: {k: float(np.mean([r[m][k] for r in runs])) for k in ("acc", "savings")}
                for m in MARS_METHODS
            }
            log(
                f"mars table: {name} {ds}: "
                + ", ".join(f"{m} {st[m]['acc']:.1f}/{st[m]['savings']:.1f}" for m in st)
            )
            lines.append(f"| `{name}`, {ds} | 30 × {n}, {budget} | " + " | ".join(cells(st)) + " |")
    return lines


def interp_curve(stats: dict, key: str, xs, xkey: str = "P") -> np.ndarray:
    x, y = stats[xkey], stats[key]
    out = []
    for p in np.atleast_1d(xs):
        i = np.searchsorted(x, p)
        out.append(
            y[i]
            if i < len(x) and x[i] == p
            else (y[-1] if key == "majority" and p > x[-1] else np.nan)
        )
    return np.array(out, float)
