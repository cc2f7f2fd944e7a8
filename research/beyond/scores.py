"""Candidate risk scores for every pool × pipeline × question × iteration × checkpoint, row-aligned
with the exploration dataset (same order as extract.py).

    python research/beyond/scores.py NAME [--seed 1] [--disjoint]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import variants as riskstop  # research copy (survival, tilt, regret)
from common import CACHE, contexts, pools, walk

M = 64


def warm_settled(arr, warm, prior=(1.0, 1.0)):
    """P(a running trace already holds its final answer) at each checkpoint, from the warmup traces
    still running there (Beta prior)."""
    ok = arr.ids[warm] == arr.final_ids[warm][:, None]
    run = arr.lengths[warm][:, None] > arr.grid[None, :]
    a, b = prior
    return (np.sum(ok & run, axis=0) + a) / (np.sum(run, axis=0) + a + b)


SCORERS = {}


def scorer(fn):
    SCORERS[fn.__name__] = fn
    return fn


@scorer
def bayes_q(ctx, pipeline, snaps, **kw):
    """Predictive risk with the per-question learned q (MARS's switch model)."""
    arr = ctx.arr
    th = riskstop.theta_draws(arr.final_ids[ctx.warm], arr.n_answers, **kw)
    return [
        riskstop.predictive_risk(
            s.ids, s.eligible, s.running, s.pending, s.q, s.weights, s.lead, th
        )
        for s in snaps
    ]


@scorer
def bayes_ws(ctx, pipeline, snaps, **kw):
    """Predictive risk, q = 1 − warmup settledness at the checkpoint (same for all running ones)"""
    arr = ctx.arr
    th = riskstop.theta_draws(arr.final_ids[ctx.warm], arr.n_answers, **kw)
    st = warm_settled(arr, ctx.warm)
    out = []
    for k, s in enumerate(snaps):
        q = np.full(s.ids.shape, 1 - st[k], dtype=np.float32)
        out.append(
            riskstop.predictive_risk(
                s.ids, s.eligible, s.running, s.pending, q, s.weights, s.lead, th
            )
        )
    return out


def run(name: str, seed: int = 1, disjoint: bool = False, **kw):
    fn = SCORERS[name]
    rows = []
    for spec in pools(seed):
        t0 = time.time()
        for ctx in contexts(spec, disjoint=disjoint):
            for p in spec.pipelines:
                snaps, *_ = walk(ctx, p)
                sc = np.stack(fn(ctx, p, snaps, **kw), axis=1)
                rows.append(np.concatenate([sc, np.ones((sc.shape[0], M - sc.shape[1]))], axis=1))
        print(f"{spec.name}: {time.time() - t0:.1f} s", flush=True)
    out = np.concatenate(rows).astype(np.float32)
    np.save(CACHE / f"score.{name}.s{seed}{'.disjoint' if disjoint else ''}.npy", out)
    return out


def _dco_survive(s, rho):
    """Crude DeepConf survival: the final vote keeps about rho·B traces; finished eligible ones
    are certain, the running eligible share the rest."""
    B = s.ids.shape[1]
    fin = (s.eligible & ~s.running).sum(axis=1)
    run = (s.eligible & s.running).sum(axis=1) + (
        s.pending.sum(axis=1) if s.pending is not None else 0
    )
    sv = np.clip((rho * B - fin) / np.maximum(run, 1), 0.05, 1.0)
    return np.where(s.running, sv[:, None], 1.0)


def _theta(ctx, pipeline, top=None, **kw):
    arr = ctx.arr
    wf = arr.final_ids[ctx.warm]
    if pipeline == "dco" and top is not None:
        mg = arr.min_group[ctx.warm]
        keep = mg >= np.quantile(mg, 1 - top)
        wf = np.where(keep, wf, -1)
    return riskstop.theta_draws(wf, arr.n_answers, **kw)


def _variant(ctx, pipeline, snaps, rho=None, top=None, qsrc="learned", **kw):
    th = _theta(ctx, pipeline, top, **kw)
    out = []
    for s in snaps:
        sv = _dco_survive(s, rho) if (pipeline == "dco" and rho) else None
        out.append(
            riskstop.predictive_risk(
                s.ids, s.eligible, s.running, s.pending, s.q, s.weights, s.lead, th, sv
            )
        )
    return out


for _rho in (0.14, 0.25):
    for _top in (None, 0.5):

        def _f(ctx, pipeline, snaps, _r=_rho, _t=_top):
            return _variant(ctx, pipeline, snaps, rho=_r, top=_t)

        SCORERS[f"bq_rho{_rho}_top{_top}"] = _f


def _regret(ctx, pipeline, snaps, rho=None, **kw):
    th = _theta(ctx, pipeline, None, **kw)
    risk, reg = [], []
    for s in snaps:
        sv = _dco_survive(s, rho) if (pipeline == "dco" and rho) else None
        a, b = riskstop.predictive_risk(
            s.ids, s.eligible, s.running, s.pending, s.q, s.weights, s.lead, th, sv, regret=True
        )
        risk.append(a)
        reg.append(b)
    return reg


SCORERS["regret_q"] = _regret


def _qvariant(ctx, pipeline, snaps, qfun, **kw):
    th = _theta(ctx, pipeline, None, **kw)
    out = []
    for k, s in enumerate(snaps):
        q = qfun(ctx, k, s).astype(np.float32)
        out.append(
            riskstop.predictive_risk(
                s.ids, s.eligible, s.running, s.pending, q, s.weights, s.lead, th
            )
        )
    return out


SCORERS["bayes_oracleq"] = lambda ctx, p, snaps: _qvariant(
    ctx, p, snaps, lambda c, k, s: c.q_oracle[c.samples, k]
)
SCORERS["bayes_q1"] = lambda ctx, p, snaps: _qvariant(
    ctx, p, snaps, lambda c, k, s: np.ones(s.ids.shape)
)


def _tilted(ctx, pipeline, snaps, beta=1.0, rho=None, qsrc="learned"):
    arr = ctx.arr
    tilt = None
    if pipeline == "dco":
        mg = arr.min_group[ctx.warm].astype(np.float64)
        tilt = np.exp(beta * (mg - mg.max()))
    th = riskstop.theta_draws(arr.final_ids[ctx.warm], arr.n_answers, tilt=tilt)
    out = []
    for k, s in enumerate(snaps):
        sv = _dco_survive(s, rho) if (pipeline == "dco" and rho) else None
        q = s.q if qsrc == "learned" else ctx.q_oracle[ctx.samples, k].astype(np.float32)
        out.append(
            riskstop.predictive_risk(
                s.ids, s.eligible, s.running, s.pending, q, s.weights, s.lead, th, sv
            )
        )
    return out


for _b in (1.0, 2.0):
    for _rho in (None, 0.14, 0.25):
        SCORERS[f"tilt{_b}_rho{_rho}"] = lambda ctx, p, snaps, _b=_b, _r=_rho: _tilted(
            ctx, p, snaps, _b, _r
        )


# pooled survival model, fitted (logistic regression) on half of the development pools
SURV_COEF = np.array([1.306, -0.205, -0.155, -3.141, 1.42, -4.05])
SURV_B = 3.625


def _surv_lr(ctx, k, s):
    arr = ctx.arr
    taus, _trunc, runmin = ctx.dco
    S = ctx.samples
    T = np.broadcast_to(taus[:, None], S.shape)
    re = s.eligible & s.running
    wl = np.median(arr.lengths[ctx.warm])
    f = np.stack(
        [
            s.weights - T,
            runmin[S, k] - T,
            np.full(S.shape, np.log2(arr.grid[k] / 2048)),
            np.broadcast_to(re.mean(1, keepdims=True), S.shape),
            np.full(S.shape, arr.grid[k] / wl),
            s.weights / T,
        ],
        -1,
    )
    sv = 1 / (1 + np.exp(-(f @ SURV_COEF + SURV_B)))
    return np.where(s.running, sv, 1.0)


def _survlr(ctx, pipeline, snaps, beta=None):
    arr = ctx.arr
    tilt = None
    if pipeline == "dco" and beta:
        mg = arr.min_group[ctx.warm].astype(np.float64)
        tilt = np.exp(beta * (mg - mg.max()))
    th = riskstop.theta_draws(arr.final_ids[ctx.warm], arr.n_answers, tilt=tilt)
    out = []
    for k, s in enumerate(snaps):
        sv = _surv_lr(ctx, k, s) if pipeline == "dco" else None
        out.append(
            riskstop.predictive_risk(
                s.ids, s.eligible, s.running, s.pending, s.q, s.weights, s.lead, th, sv
            )
        )
    return out


SCORERS["survlr"] = lambda ctx, p, snaps: _survlr(ctx, p, snaps)
SCORERS["survlr_tilt1"] = lambda ctx, p, snaps: _survlr(ctx, p, snaps, 1.0)


def _guarded(ctx, pipeline, snaps, beta=1.0, rho=None):
    """Plain-warmup predictive risk; DeepConf: the leader must also be the confidence-tilted warmup
    favourite (else risk 1)."""
    arr = ctx.arr
    th = riskstop.theta_draws(arr.final_ids[ctx.warm], arr.n_answers)
    fav = -1
    if pipeline == "dco":
        wf = arr.final_ids[ctx.warm]
        mg = arr.min_group[ctx.warm].astype(np.float64)
        lam = np.exp(beta * (mg - mg.max()))
        ok = wf >= 0
        fav = int(np.argmax(np.bincount(wf[ok], weights=lam[ok], minlength=arr.n_answers)))
    out = []
    for _k, s in enumerate(snaps):
        sv = _dco_survive(s, rho) if (pipeline == "dco" and rho) else None
        r = riskstop.predictive_risk(
            s.ids, s.eligible, s.running, s.pending, s.q, s.weights, s.lead, th, sv
        )
        if fav >= 0:
            r = np.where(s.lead == fav, r, 1.0)
        out.append(r)
    return out


for _b in (1.0, 2.0, 3.0, 5.0):
    for _rho in (None, 0.25):
        SCORERS[f"guard{_b}_rho{_rho}"] = lambda ctx, p, snaps, _b=_b, _r=_rho: _guarded(
            ctx, p, snaps, _b, _r
        )


for _pr, _ot in ((0.5, 1.0), (2.0, 1.0), (1.0, 0.5), (1.0, 2.0), (1.0, 4.0)):
    SCORERS[f"bq_pr{_pr}_ot{_ot}"] = lambda ctx, p, snaps, _a=_pr, _b=_ot: bayes_q(
        ctx, p, snaps, prior=_a, other=_b
    )
SCORERS["bq_d8"] = lambda ctx, p, snaps: bayes_q(ctx, p, snaps, n_draws=8)
SCORERS["bq_d128"] = lambda ctx, p, snaps: bayes_q(ctx, p, snaps, n_draws=128)


def final(ctx, pipeline, snaps):
    """The first version's risk (issue 14's shipped rule), with its DeepConf guard folded in
    (risk 1 where the leader is not the confident favourite): rows identical to the simulator's."""
    import methods2

    rule = methods2.first_version(ctx, pipeline)
    out = []
    for s in snaps:
        r = rule.risk(s)
        if rule.favourite >= 0:
            r = np.where(s.lead == rule.favourite, r, 1.0)
        out.append(np.where(s.has_votes, r, 1.0))
    return out


SCORERS["final"] = final


def analytic(ctx, pipeline, snaps, other=2.0, beta=2.0):
    """Analytic θ (posterior mean + variance) with the first destination model (a re-drawn trace may
    land on its own answer again: P(final = a) = 1 − q + qθ_a); guard β for DeepConf."""
    from mars.method import riskstop as rs

    arr = ctx.arr
    conc = rs.dirichlet_counts(arr.final_ids[ctx.warm], arr.n_answers, other=other)
    fav = -1
    if pipeline == "dco":
        fav = rs.confident_favourite(arr.final_ids[ctx.warm], arr.min_group[ctx.warm], beta)
    out = []
    for s in snaps:
        r = riskstop.predictive_risk(
            s.ids, s.eligible, s.running, s.pending, s.q, s.weights, s.lead, conc
        )
        if fav >= 0:
            r = np.where(s.lead == fav, r, 1.0)
        out.append(np.where(s.has_votes, r, 1.0))
    return out


SCORERS["analytic"] = analytic
SCORERS["analytic_ot1"] = lambda ctx, p, snaps: analytic(ctx, p, snaps, other=1.0)
# the shipped form before the consistent destination (same as analytic_ot1)
SCORERS["final_v1"] = SCORERS["analytic_ot1"]


def tempered(ctx, pipeline, snaps, temper=0.5, other=1.0):
    """The shipped form with a tempered warmup posterior (counts × temper)."""
    import methods2

    from mars.method import riskstop as rs

    rule = methods2.first_version(ctx, pipeline)
    rule.theta = rs.dirichlet_counts(
        ctx.arr.final_ids[ctx.warm], ctx.arr.n_answers, other=other, temper=temper
    )
    out = []
    for s in snaps:
        r = rule.risk(s)
        if rule.favourite >= 0:
            r = np.where(s.lead == rule.favourite, r, 1.0)
        out.append(np.where(s.has_votes, r, 1.0))
    return out


for _t in (0.25, 0.5, 0.75):
    SCORERS[f"temper{_t}"] = lambda ctx, p, snaps, _t=_t: tempered(ctx, p, snaps, _t)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("name")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--disjoint", action="store_true")
    a = ap.parse_args()
    run(a.name, a.seed, a.disjoint)
