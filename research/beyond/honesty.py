"""Is the leaving-rate posterior of sc-mars2 honest, and what would a population prior change?
(issue 23)

    python research/beyond/honesty.py             # → results/honesty.md, results/honesty.json
    python research/beyond/honesty.py --heldout   # → results/honesty.heldout.md
    python research/beyond/honesty.py --dco       # → results/honesty.dco.md

1. **The population of leaving rates.** Every (question, checkpoint, answer) cell of the warmup
   has h_ka running holders, d_ka of whom end elsewhere. A beta-binomial fitted by maximum marginal
   likelihood to the cells of the development pools (seed 1) is the empirical-Bayes prior of a
   rate: the one that is right for a *typical* question of those pools.
2. **Coverage.** The main sample is drawn from the whole pool, so what the rule must predict is
   how the pool's other traces in the same cell behave. For every cell that the warmup saw and at
   least ``MIN_REST`` of the other 112 traces hold, the number of them that leave is compared with
   its posterior predictive from the 16 warmup traces, BetaBinomial(H, κm + d, κ(1 − m) + h − d)
   (randomized PIT): the share of cells (weighted by the other traces' holders, i.e. by how many
   main traces the cell decides) inside the central 90 % interval, and above its 95 % quantile (the
   dangerous side: leaving under-estimated). For the rule's symmetric prior (κ = 4, m = ½), weaker
   ones, and the fitted population prior; regular development pools, contested development pools,
   and — as a check only, never for choosing — the real AIME 2024 pool.
3. **Risk calibration.** The rule's risk against how often the leader is not the full-budget answer,
   over every run and checkpoint, and at the stops (the first checkpoint with risk ≤ α).
   ``--heldout``: the same for the shipped and the population prior on the held-out pools (seed 3,
   regular and contested) and the real AIME 2024 pool, after the fact (nothing chosen on them).
   ``--dco``: dco-mars2's risk at its stops, alone and with its confident-favourite guard.
4. **Stopping.** The same priors inside the rule, and a two-component prior (the population's
   U-shaped Beta and the rule's, weighted by their evidence: thick cells follow the population,
   thin ones stay pessimistic), on the development pools at every α of tune.py's grid, with
   tune.py's selection (every development pool within 0.5 pp at α and at the next α,
   Learn-then-Test).
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import tune
from common import (
    contested_pools,
    contexts,
    pool_effect,
    pools,
    question_arrays,
    regular_and_contested,
    walk,
    walked,
)
from scipy.optimize import minimize
from scipy.special import betaln
from scipy.stats import betabinom

from mars.method import riskstop
from mars.method.riskstop import Transitions, learn_then_test

OUT = Path(__file__).resolve().parent / "results"
WARMUP = 16
MIN_REST = 8
#: the population prior (κ, m) that main() fits on the development pools (results/honesty.md)
POPULATION = (0.11, 0.62)
ALPHAS = tune.ALPHAS[:-1]  # 0.4 is unsafe for every prior (tune.sc.md)


class MixtureTransitions(Transitions):
    """Leaving rates from a two-component prior: with weight 1 − π the population's U-shaped
    Beta (settled or transient cells), with weight π the rule's Beta(κm, κ(1 − m)) (contested cells,
    intermediate rates); the posterior weights follow each component's beta-binomial evidence."""

    population: tuple[float, float] = (0.11, 0.62)
    pi: float = 0.5

    def leaving(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        A1 = self.n_answers + 1
        h, d = np.zeros(A1), np.zeros(A1)
        cols, sl = self._at(self.keys, k)
        h[cols], d[cols] = self.held[sl], self.left[sl]
        kp, mp = self.population
        comps = [
            (kp * mp, kp * (1 - mp), 1 - self.pi),
            (self.kappa * self.rate_mean, self.kappa * (1 - self.rate_mean), self.pi),
        ]
        logw, mus, vs = [], [], []
        for a, b, w in comps:
            logw.append(np.log(w) + betaln(a + d, b + h - d) - betaln(a, b))
            mu = (a + d) / (a + b + h)
            mus.append(mu)
            vs.append(mu * (1 - mu) / (a + b + h + 1))
        lw = np.array(logw)
        w = np.exp(lw - lw.max(axis=0))
        w /= w.sum(axis=0)
        mean = (w * np.array(mus)).sum(axis=0)
        var = (w * (np.array(vs) + np.array(mus) ** 2)).sum(axis=0) - mean**2
        return mean, np.maximum(var, 0.0)


def with_prior(rl, prior: tuple[float, float, float], population: tuple[float, float]):
    """The rule with the leaving-rate prior (κ, m, π): π = 0 a Beta(κm, κ(1 − m)); π > 0 the
    mixture of :class:`MixtureTransitions`."""
    kappa, m, pi = prior
    t = rl.transitions
    assert t is not None
    if pi > 0:
        t = MixtureTransitions(
            t.n_answers, t.keys, t.held, t.left, t.dest_keys, t.dest_counts, kappa, t.tau, m
        )
        t.population, t.pi = population, pi
    t.kappa, t.rate_mean = kappa, m
    rl.transitions = t
    return rl


def cell_counts(arr) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per (checkpoint, answer) cell the warmup saw: its holders h and leavers d there; the pool's
    other traces' holders H and leavers D in the same cell."""
    pool = arr.pool_ids()

    def fit(ix):
        running = arr.run_lengths[ix][:, None] > arr.grid[None, :]
        return Transitions.fit(arr.ids[ix], running, arr.final_ids[ix], arr.n_answers)

    w, r = fit(pool[:WARMUP]), fit(pool[WARMUP:])
    H, D = np.zeros(len(w.keys)), np.zeros(len(w.keys))
    if len(r.keys):
        pos = np.minimum(np.searchsorted(r.keys, w.keys), len(r.keys) - 1)
        hit = r.keys[pos] == w.keys
        H, D = np.where(hit, r.held[pos], 0.0), np.where(hit, r.left[pos], 0.0)
    return w.held, w.left.astype(np.float64), H, D


def cells(specs) -> np.ndarray:
    """[n, 4] rows (h, d, H, D) over every question of the pools."""
    rows = [np.stack(cell_counts(arr), axis=1) for s in specs for arr in question_arrays(s)]
    return np.concatenate(rows)


def fit_population(c: np.ndarray) -> tuple[float, float]:
    """Beta(κm, κ(1 − m)) of the rates by maximum beta-binomial marginal likelihood of (h, d)."""
    h, d = c[:, 0], c[:, 1]

    def nll(p):
        m, k = 1 / (1 + np.exp(-p[0])), np.exp(p[1])
        return -np.sum(betaln(d + k * m, h - d + k * (1 - m)) - betaln(k * m, k * (1 - m)))

    x = minimize(nll, [0.0, 0.0], method="Nelder-Mead").x
    return float(1 / (1 + np.exp(-x[0]))), float(np.exp(x[1]))


def coverage(c: np.ndarray, kappa: float, m: float, seed: int = 0) -> dict:
    """Where the other traces' leavers D fall in the posterior predictive BetaBinomial(H, κm + d,
    κ(1 − m) + h − d): randomized PIT (uniform if the posterior is honest; counts are discrete)."""
    h, d, H, D = c.T
    ok = H >= MIN_REST
    h, d, H, D = h[ok], d[ok], H[ok], D[ok]
    pred = betabinom(H.astype(np.int64), kappa * m + d, kappa * (1 - m) + h - d)
    below = np.where(D > 0, pred.cdf(D - 1), 0.0)
    pit = below + np.random.default_rng(seed).random(len(D)) * pred.pmf(D)
    w = H / H.sum()
    return {
        "cells": int(ok.sum()),
        "in90": float(np.sum(w * ((pit >= 0.05) & (pit <= 0.95)))),
        "above95": float(np.sum(w * (pit > 0.95))),
        "below5": float(np.sum(w * (pit < 0.05))),
    }


BINS = [0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0]
FIRST = [0.005, 0.02, 0.1]


def risk_calibration(specs, priors, population, pipeline: str = "sc") -> dict:
    """Per prior: for every run and checkpoint with votes, the rule's risk against whether the
    leader there differs from the full-budget vote (binned), and the same at the first checkpoint
    whose risk ≤ α (the stops). DeepConf: each prior twice, the risk alone and with the guard
    (risk 1 where the leader is not the confident favourite), keyed (κ, m, π, guard)."""
    keys = priors if pipeline == "sc" else [(*p, g) for p in priors for g in (False, True)]
    out = {
        p: {"bins": np.zeros((len(BINS) - 1, 2)), "first": np.zeros((len(FIRST), 3))} for p in keys
    }
    for spec in specs:
        for ctx in contexts(spec):
            if pipeline == "dco" and not ctx.arr.has_confs:
                continue
            snaps, final, _tokens, _base = walk(ctx, pipeline)
            lead = np.stack([s.lead for s in snaps], axis=1)
            wrong = lead != final[:, None]
            votes = np.stack([s.has_votes for s in snaps], axis=1)
            r = np.arange(len(final))
            for prior in keys:
                rl = with_prior(tune.rule(ctx, pipeline, 1.0, riskstop.TAU), prior[:3], population)
                risk = np.stack([rl.risk(s) for s in snaps], axis=1)
                if len(prior) == 4 and prior[3]:
                    risk = np.where(lead == rl.favourite, risk, 1.0)
                risk = np.where(votes, risk, 1.0)
                b = np.clip(np.digitize(risk, BINS) - 1, 0, len(BINS) - 2)
                for i in range(len(BINS) - 1):
                    sel = (b == i) & votes
                    out[prior]["bins"][i] += [sel.sum(), (sel & wrong).sum()]
                for i, a in enumerate(FIRST):
                    stop = risk <= a
                    k = np.argmax(stop, axis=1)
                    hit = stop.any(axis=1)
                    out[prior]["first"][i] += [
                        hit.sum(),
                        (hit & wrong[r, k]).sum(),
                        np.where(hit, risk[r, k], 0.0).sum(),
                    ]
        print(spec.name, flush=True)
    return out


def calibration_table(name: str, cal: dict) -> list[str]:
    lines = [
        f"\n{name}: share of runs and checkpoints whose leader is not the full-budget answer, by "
        "the rule's risk there; and among the stops at α (the first checkpoint with risk ≤ α): "
        "that share / the mean risk at those stops (an honest risk: the two agree).\n",
        "| κ | m | π | "
        + " | ".join(f"risk {lo:g}–{hi:g}" for lo, hi in itertools.pairwise(BINS))
        + " | "
        + " | ".join(f"stops at α = {a:g}" for a in FIRST)
        + " |",
        "|---:|---:|---:|" + "---:|" * (len(BINS) - 1 + len(FIRST)),
    ]
    for key, v in cal.items():
        kappa, m, pi = key[:3]
        cells = [f"{100 * w / n:.1f} %" if n else "–" for n, w in v["bins"]]
        cells += [
            f"{100 * w / n:.2f} / {100 * x / n:.2f} %" if n else "–" for n, w, x in v["first"]
        ]
        guard = "" if len(key) == 3 else (" (+ guard)" if key[3] else " (risk alone)")
        lines.append(f"| {kappa:g} | {m:.2f} | {pi:g}{guard} | " + " | ".join(cells) + " |")
    return lines


def stopping(specs, priors: list[tuple[float, float, float]], population) -> dict:
    """tune.py's offline outcomes, for each prior (κ, m) at τ = riskstop.TAU."""
    res: dict = {}
    for spec in specs:
        res[spec.name] = {}
        for ctx in contexts(spec):
            w = walked(ctx, "sc")
            out = w.baseline()
            for prior in priors:
                rl = with_prior(tune.rule(ctx, "sc", 1.0, riskstop.TAU), prior, population)
                risk = np.ones(w.lead.shape)
                for s in w.snaps:
                    risk[:, s.k] = np.where(s.has_votes, rl.risk(s), 1.0)
                for a in ALPHAS:
                    out[f"{prior}/{a}"] = w.stop_at(risk, a)
            res[spec.name][str(ctx.arr.qid)] = out
        print(spec.name, flush=True)
    return res


def stopping_table(res: dict, priors) -> list[str]:
    lines = [
        "| κ | m | π | α | regular share (worst) | worst regular Δacc | contested Δacc | "
        "contested share | all within 0.5 pp, and at the next α | LTT |",
        "|---:|---:|---:|---:|---:|---:|---|---|:---:|:---:|",
    ]
    for prior in priors:
        kappa, m, pi = prior
        key = str(prior)
        losses = np.stack(
            [[q[f"{key}/{a}"][2] for qs in res.values() for q in qs.values()] for a in ALPHAS]
        )
        cert, _ = learn_then_test(np.array(ALPHAS), losses, tune.EPS, tune.DELTA)
        feas = []
        rows = []
        for a in ALPHAS:
            per = {pool: pool_effect(list(qs.values()), f"{key}/{a}") for pool, qs in res.items()}
            reg, con = regular_and_contested(per)
            feas.append(all(v[0] >= -0.5 for v in per.values()))
            rows.append((a, reg, con))
        for i, (a, reg, con) in enumerate(rows):
            margin = feas[i] and i + 1 < len(feas) and feas[i + 1]
            lines.append(
                f"| {kappa:g} | {m:.2f} | {pi:g} | {a:g} | {np.mean([v[1] for v in reg]):.1f} "
                f"({min(v[1] for v in reg):.1f}) | {min(v[0] for v in reg):+.2f} | "
                + " / ".join(f"{v[0]:+.2f}" for v in con)
                + " | "
                + " / ".join(f"{v[1]:.0f}" for v in con)
                + f" | {'yes' if margin else 'no'} | "
                f"{'yes' if cert is not None and a <= cert else 'no'} |"
            )
    return lines


def main() -> str:
    dev, con = pools(1, real=False), contested_pools(1)
    real = pools(1, real=True)[:1]
    c_dev, c_con, c_real = cells(dev), cells(con), cells(real)
    m_fit, k_fit = fit_population(c_dev)
    population = (round(k_fit, 2), round(m_fit, 2))
    assert population == POPULATION, "update POPULATION: the fit changed"
    priors = [
        (riskstop.KAPPA, riskstop.RATE_MEAN, 0.0),
        (2.0, 0.5, 0.0),
        (1.0, 0.5, 0.0),
        (2.0, population[1], 0.0),
        (0.5, population[1], 0.0),
        (*population, 0.0),
        (riskstop.KAPPA, riskstop.RATE_MEAN, 0.3),
        (riskstop.KAPPA, riskstop.RATE_MEAN, 0.6),
    ]
    plain = [p for p in priors if p[2] == 0]
    lines = [
        "Leaving-rate posteriors of sc-mars2 (`research/beyond/honesty.py`).\n",
        f"Population prior fitted on the {len(c_dev)} warmup cells of the 12 development pools "
        f"(beta-binomial, maximum marginal likelihood): m = {m_fit:.2f}, κ = {k_fit:.2f} — a "
        "U-shaped Beta: a typical cell's rate is near 0 or near 1. (Contested development pools "
        f"alone: m = {fit_population(c_con)[0]:.2f}, κ = {fit_population(c_con)[1]:.2f}.)\n",
        f"Coverage: cells the warmup saw and ≥ {MIN_REST} of the pool's other 112 traces held, "
        "weighted by those holders; the other traces' leavers against their posterior predictive "
        "from the 16 warmup traces (randomized PIT; honest: 90 % inside, 5 % above, 5 % below).\n",
        "| κ | m | set | cells | inside 90 % | above 95 % (leaving under-estimated) | below 5 % |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    cov = {}
    for kappa, m, _pi in plain:
        sets = (("regular dev", c_dev), ("contested dev", c_con), ("real AIME 2024", c_real))
        for name, c in sets:
            v = coverage(c, kappa, m)
            cov[f"{kappa:g}/{m:g}/{name}"] = v
            lines.append(
                f"| {kappa:g} | {m:.2f} | {name} | {v['cells']} | {100 * v['in90']:.1f} % | "
                f"{100 * v['above95']:.1f} % | {100 * v['below5']:.1f} % |"
            )
    cal = [priors[0], (0.5, population[1], 0.0), (*population, 0.0), priors[-1]]
    lines += calibration_table("Regular development pools", risk_calibration(dev, cal, population))
    lines += calibration_table(
        "Contested development pools", risk_calibration(con, cal, population)
    )
    lines.append(
        "\nStopping with each prior (development pools, τ = 4; tune.py's offline evaluation): "
        "mean share of oracle-first's savings over the 12 regular pools (worst pool), the worst "
        "regular pool's Δacc, contested aime / hmmt / flat Δacc (pp) and share (%), tune.py's "
        "margin criterion and Learn-then-Test certificate. π > 0: the two-component prior of "
        "MixtureTransitions (weight π on the rule's Beta(κm, κ(1 − m)), 1 − π on the "
        "population's).\n"
    )
    res = stopping(dev + con, priors, population)
    lines += stopping_table(res, priors)
    md = "\n".join(lines)
    OUT.mkdir(exist_ok=True)
    (OUT / "honesty.md").write_text(md + "\n")
    (OUT / "honesty.json").write_text(json.dumps({"fit": [m_fit, k_fit], "coverage": cov}))
    return md


def heldout() -> str:
    population = POPULATION
    cal = [(riskstop.KAPPA, riskstop.RATE_MEAN, 0.0), (*population, 0.0)]
    lines = [
        "Risk calibration of sc-mars2 out of sample (`research/beyond/honesty.py --heldout`): the "
        f"shipped prior and the development pools' population prior (κ = {population[0]:g}, "
        f"m = {population[1]:g}), after the fact."
    ]
    sets = (
        ("Regular held-out pools (seed 3)", pools(3, real=False)),
        ("Contested held-out pools (seed 3)", contested_pools(3)),
        ("Real AIME 2024", pools(1, real=True)[:1]),
    )
    for name, specs in sets:
        lines += calibration_table(name, risk_calibration(specs, cal, population))
    md = "\n".join(lines)
    (OUT / "honesty.heldout.md").write_text(md + "\n")
    return md


def deepconf() -> str:
    """dco-mars2's risk at its stops, alone and with the confident-favourite guard."""
    cal = [(riskstop.KAPPA, riskstop.RATE_MEAN, 0.0)]
    lines = [
        "DeepConf (`research/beyond/honesty.py --dco`): dco-mars2's risk against DeepConf's "
        "full-budget vote, the risk alone and with the confident-favourite guard (as shipped)."
    ]
    sets = (
        ("Regular development pools, DeepConf", pools(1, real=False)),
        ("Contested development pools, DeepConf", contested_pools(1)),
        ("Regular held-out pools (seed 3), DeepConf", pools(3, real=False)),
    )
    for name, specs in sets:
        lines += calibration_table(name, risk_calibration(specs, cal, POPULATION, "dco"))
    md = "\n".join(lines)
    (OUT / "honesty.dco.md").write_text(md + "\n")
    return md


if __name__ == "__main__":
    if "--heldout" in sys.argv:
        print(heldout())
    elif "--dco" in sys.argv:
        print(deepconf())
    else:
        print(main())
