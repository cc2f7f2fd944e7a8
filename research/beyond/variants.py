"""Research-only generalisations of mars.method.riskstop used by the settings that were tried and
dropped:
a survival probability per trace (DeepConf's filter), a confidence-tilted warmup posterior, and the
expected-accuracy-regret score. Kept so every row of docs/beyond.md's "settings tried" re-runs."""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr

from mars.method.voting import tally


def theta_draws(warm_final, n_answers, prior=1.0, other=1.0, n_draws=32, seed=0, tilt=None):
    """As mars.method.riskstop.theta_draws, plus ``tilt``: per-warmup-trace weights, counts
    rescaled to
    the weights' effective sample size."""
    ok = warm_final >= 0
    wf = warm_final[ok]
    lam = np.ones(len(wf)) if tilt is None else np.asarray(tilt, dtype=np.float64)[ok]
    c = np.bincount(wf, weights=lam, minlength=n_answers).astype(np.float64)[:n_answers]
    if lam.sum() > 0:
        c *= (lam.sum() ** 2 / np.sum(lam**2)) / lam.sum()
    c = np.where(c > 0, c + prior, 0.0)
    c = np.append(c, other)
    rng = np.random.default_rng(seed)
    g = rng.gamma(np.where(c > 0, c, 1.0), size=(n_draws, len(c))) * (c > 0)
    return g / g.sum(axis=1, keepdims=True)


def predictive_risk(
    ids, eligible, running, pending, q, weights, lead, theta, survive=None, regret=False
):
    """mars.method.riskstop.predictive_risk over all answer columns, plus a survival probability per
    running trace (it still votes at the end with probability ``survive``) and, with ``regret``,
    the expected accuracy loss Σ_c P(F = c)(θ_c − θ_L), correctness popularity-proportional."""
    R, _B = ids.shape
    conc = None
    if theta.ndim == 1:  # analytic form: posterior mean + Var(θ_L − θ_c) times the re-drawn mass
        conc = np.asarray(theta, dtype=np.float64)
        theta = (conc / conc.sum())[None]
    _D, A1 = theta.shape
    w = np.broadcast_to(weights, ids.shape).astype(np.float64)
    s = (
        np.ones(ids.shape)
        if survive is None
        else np.broadcast_to(survive, ids.shape).astype(np.float64)
    )
    run = eligible & running
    pend = pending & ~run
    idx = np.where(run | (eligible & ~running), np.maximum(ids, 0), A1 - 1)
    qq = np.where(pend, 1.0, q.astype(np.float64))
    live = run | pend
    Fx = tally(idx, w, eligible & ~running, A1)
    ws, w2s, w2s2 = w * s, w * w * s, w * w * s * s

    def t(v):
        return tally(idx, v, run, A1), np.where(live, v, 0).sum(axis=1)

    (N, _), (Q, Qt) = t(ws), t(ws * qq)
    (N2, _), (Q2, Q2t) = t(w2s), t(w2s * qq)
    (S0, _), (S1, _), (S2, S2t) = t(w2s2), t(w2s2 * qq), t(w2s2 * qq * qq)
    th = theta[None]
    r = np.arange(R)
    L = np.maximum(lead, 0)
    E = (N - Q)[:, None, :] + th * Qt[:, None, None]
    M2 = (N2 - Q2)[:, None, :] + th * Q2t[:, None, None]

    def at_L(a):
        return a[r, :, L][:, :, None] if a.ndim == 3 else a[r, L][:, None, None]

    dlt = theta[:, L].T[:, :, None] - th
    mu = (at_L(Fx) + at_L(E)) - (Fx[:, None, :] + E)
    sq = (
        at_L(S0)
        - 2 * (1 - dlt) * at_L(S1)
        + (1 - dlt) ** 2 * at_L(S2)
        + S0[:, None, :]
        - 2 * (1 + dlt) * S1[:, None, :]
        + (1 + dlt) ** 2 * S2[:, None, :]
        + dlt**2 * (S2t[:, None, None] - at_L(S2) - S2[:, None, :])
    )
    var = at_L(M2) + M2 - sq
    if conc is not None:
        a0 = conc.sum()
        aL = conc[L][:, None, None]
        var = var + (Qt**2)[:, None, None] * (
            aL * (a0 - aL) + conc[None, None] * (a0 - conc[None, None]) + 2 * aL * conc[None, None]
        ) / (a0 * a0 * (a0 + 1))
    var = np.maximum(var, 1e-12)
    wmin = np.where(live.any(axis=1), np.where(live, w, np.inf).min(axis=1), 1.0)
    p = ndtr((0.5 * wmin[:, None, None] - mu) / np.sqrt(var))
    p[r, :, L] = 0.0
    risk = np.where(lead >= 0, np.minimum(p.sum(axis=2), 1.0).mean(axis=1), 1.0)
    if not regret:
        return risk
    reg = (p * -dlt).sum(axis=2).mean(axis=1)
    return risk, np.where(lead >= 0, reg, 1.0)
