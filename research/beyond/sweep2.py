"""Every model of the warmup tried for issue 23, on the development pools (seed 1, 12 regular + 3
contested), at every α of tune.py's grid.

    python research/beyond/sweep2.py sc      # → results/sweep2.sc.md

The variants change what a running trace's leaving probability and landing distribution are; all
share mars.method.riskstop.predictive_risk (the ``shared`` argument carries a shared parameter's
uncertainty) and the offline evaluation of tune.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import methods2
import numpy as np
from common import contested_pools, contexts, pools, walked
from tune import ALPHAS

from mars.method.riskstop import Transitions, predictive_risk

OUT = Path(__file__).resolve().parent / "results"


def _logit(q):
    q = np.clip(np.asarray(q, dtype=np.float64), 1e-9, 1 - 1e-9)
    return np.log(q) - np.log1p(-q)


def answer_effects(ctx, sigma=1.0):
    """Per (checkpoint, answer): a random effect on the logit of the learned q of its holders,
    prior N(0, σ²), posterior by Laplace from the warmup holders' outcomes (in-sample q)."""
    arr, warm = ctx.arr, ctx.warm
    ids = arr.ids[warm]
    hold = (arr.run_lengths[warm][:, None] > arr.grid[None, :]) & (ids >= 0)
    A1 = arr.n_answers + 1
    k = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
    keys, g = np.unique(k[hold] * A1 + ids[hold], return_inverse=True)
    left = (ids != arr.final_ids[warm][:, None])[hold].astype(np.float64)
    z = _logit(ctx.q_learned[warm][hold])
    eff, prec = np.zeros(len(keys)), 1 / sigma**2
    for _ in range(25):
        p = 1 / (1 + np.exp(-(z + eff[g])))
        grad = np.bincount(g, left - p, minlength=len(keys)) - prec * eff
        hess = np.bincount(g, p * (1 - p), minlength=len(keys)) + prec
        eff += grad / hess
    return keys, eff, 1 / hess, A1


def risk_matrix(ctx, pipeline, variant, snaps):
    arr, warm = ctx.arr, ctx.warm
    v1 = methods2.first_version(ctx, pipeline)
    tr = Transitions.fit(
        arr.ids[warm],
        arr.run_lengths[warm][:, None] > arr.grid[None, :],
        arr.final_ids[warm],
        arr.n_answers,
    )
    fx = answer_effects(ctx) if variant == "q + answer effect, switchers' landing" else None
    out = np.ones((len(snaps[0].lead), len(snaps)))
    for s in snaps:
        theta, shared, q = v1.theta, None, s.q
        if variant != "first version":
            theta = tr.landing(s.k, v1.theta)
        if fx is not None:
            keys, eff, var, A1 = fx
            key = s.k * A1 + np.maximum(s.ids, 0)
            pos = np.minimum(np.searchsorted(keys, key), len(keys) - 1)
            hit = (keys[pos] == key) & (s.ids >= 0)
            q = np.where(hit, 1 / (1 + np.exp(-(_logit(s.q) + np.where(hit, eff[pos], 0)))), s.q)
            av = np.ones(A1)
            lo, hi = np.searchsorted(keys, [s.k * A1, (s.k + 1) * A1])
            av[keys[lo:hi] - s.k * A1] = var[lo:hi]
            shared = (q * (1 - q), av)
        if variant.startswith("rates"):
            if "pooled" in variant:  # prior centred on all answers' pooled rate at k
                hold = (arr.run_lengths[warm] > arr.grid[s.k]) & (arr.ids[warm, s.k] >= 0)
                gone = hold & (arr.ids[warm, s.k] != arr.final_ids[warm])
                pi = (gone.sum() + 1) / (hold.sum() + 2)
                a = np.full(arr.n_answers + 1, tr.kappa * pi)
                b = np.full(arr.n_answers + 1, tr.kappa * (1 - pi))
                cols, sl = tr._at(tr.keys, s.k)
                a[cols] += tr.left[sl]
                b[cols] += tr.held[sl] - tr.left[sl]
                rate, rv = a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
            else:
                rate, rv = tr.leaving(s.k)
            q = rate[np.maximum(s.ids, 0)]
            shared = (np.ones(q.shape), rv)
        x = predictive_risk(
            s.ids, s.eligible, s.running, s.pending, q, s.weights, s.lead, theta, shared
        )
        if v1.favourite >= 0:
            x = np.where(s.lead == v1.favourite, x, 1.0)
        out[:, s.k] = np.where(s.has_votes, x, 1.0)
    return out


VARIANTS = [
    "first version",
    "q, switchers' landing",
    "q + answer effect, switchers' landing",
    "rates (prior: pooled rate), switchers' landing",
    "rates (prior: flat), switchers' landing",
]


def main(pipeline: str) -> str:
    res = {}
    for spec in pools(1, real=False) + contested_pools(1):
        per = {v: [] for v in VARIANTS}
        for ctx in contexts(spec):
            w = walked(ctx, pipeline)
            b = w.baseline()
            for v in VARIANTS:
                risk = risk_matrix(ctx, pipeline, v, w.snaps)
                row = []
                for a in ALPHAS:
                    acc, sav, _ = w.stop_at(risk, a)
                    row.append((acc - b["full"], sav))
                per[v].append((row, b["oracle"]))
        res[spec.name] = per
        print(spec.name, flush=True)
    lines = [
        f"Pipeline {pipeline}; development pools (seed 1). Per α: regular pools' mean share of "
        "oracle-first's savings (%), worst regular Δacc (pp), contested aime / hmmt / flat Δacc "
        "(pp); ✓ = every pool within 0.5 pp.\n",
        "| variant | " + " | ".join(f"α = {a:g}" for a in ALPHAS) + " |",
        "|---|" + "---|" * len(ALPHAS),
    ]
    for v in VARIANTS:
        cells = []
        for i, _a in enumerate(ALPHAS):
            reg, con = [], []
            for pool, per in res.items():
                d = 100 * np.mean([row[i][0] for row, _ in per[v]])
                sh = (
                    100
                    * np.mean([row[i][1] for row, _ in per[v]])
                    / np.mean([o for _, o in per[v]])
                )
                (con if pool.startswith("contested") else reg).append((d, sh))
            ok = all(d >= -0.5 for d, _ in reg + con)
            cells.append(
                f"{np.mean([s for _, s in reg]):.1f} / {min(d for d, _ in reg):+.2f} / "
                + " ".join(f"{d:+.1f}" for d, _ in con)
                + (" ✓" if ok else "")
            )
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    md = "\n".join(lines)
    OUT.mkdir(exist_ok=True)
    (OUT / f"sweep2.{pipeline}.md").write_text(md + "\n")
    return md


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("pipeline", choices=["sc", "dco"])
    print(main(ap.parse_args().pipeline))
