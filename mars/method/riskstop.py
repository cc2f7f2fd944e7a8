"""Predictive-risk stopping (``sc-mars2``, ``dco-mars2``): stop once P(final vote ≠ leader) ≤ α.

MARS bounds the future vote adversarially: every switching trace is assumed to land on the worst
challenger. This rule estimates the future vote instead, from the warmup traces — run to
completion before the main sample, so they show, checkpoint by checkpoint, which of the traces
in each state later left their answer and where they ended:

* a finished trace's vote is fixed; a running trace holding answer a at checkpoint k leaves it
  with the rate ρ_ka of the warmup traces that held a at k (Beta posterior, one unknown shared by
  all of a's holders), and then lands on x ≠ a in proportion to D_k, where the warmup traces that
  were still to switch at k ended (Dirichlet posterior, shrunk towards the warmup's final answers
  θ); a running trace whose probe abstained lands as D_k (:class:`Transitions`);
* for every challenger c the final margin T_L − T_c is approximately normal: independent per-trace
  terms at the posterior means, plus the shared uncertainties — of each ρ_ka times the square of
  its holders' weight, and of D_L − D_c times the square of the switching mass; P(T_L − T_c ≤ 0)
  by the normal tail with a half-vote continuity correction (ties count as losses); the risk is
  the union bound over challengers (answers held, answers the warmup gave, one unseen answer);
* stop when the risk ≤ ``alpha``. DeepConf (``dco-mars2``): the final vote keeps only a few
  confident traces, whose answer can differ from the plain warmup majority, so the leader must
  also be the warmup's favourite when each warmup answer is weighted by exp(``tilt`` · its lowest
  group confidence) (:func:`confident_favourite`).

The first version (issue 14; kept, without ``Transitions``, for comparison) took the leaving rate
from the answer-blind learned q and the landing from θ, which counts the traces that stayed: on a
question whose early attractor is later overtaken it was sure of the attractor
(research/beyond/results/writeup.md).

No cross-question artifact is needed: per question the rule reads the warmup traces' answers at
every checkpoint, whether they were still running there, their final answers (and, for DeepConf,
their lowest group confidence); α per pipeline and the priors κ, τ are fixed in code, chosen on
synthetic development pools (research/beyond/results/writeup.md, "Parameters"). Everything is
vectorised over iterations × sampled traces.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import ndtr

from .learned import Calibration, answer_shares, landing
from .stopping import Rule, Snapshot
from .voting import tally

#: risk levels and priors, fixed (research/beyond/tune.py on the development pools; the table of
#: them: research/beyond/results/writeup.md, "Parameters")
ALPHA_SC = 0.1
ALPHA_DCO = 0.02
PRIOR = 1.0  # pseudo-count added to every answer the warmup gave
OTHER = 1.0  # pseudo-count of "an answer the warmup never gave"
N_DRAWS = 32  # posterior draws of θ (Monte Carlo form only; the rule uses the analytic form)
TILT = 2.0  # DeepConf guard: warmup weight exp(TILT · lowest group confidence)
KAPPA = 4.0  # prior strength (traces) of an answer's leaving rate at a checkpoint, mean 1/2
TAU = 4.0  # prior strength (traces) of the whole warmup's finals in where switchers land
RATE_MEAN = 0.5  # prior mean of a leaving rate (not the population's: see Transitions)
SEED = 0
#: with a calibration, a stop needs this many traces that ended on the leader: the running
#: traces' answers are what a calibration learned across questions cannot vouch for on this one
#: (development pools: without it the rule stopped on a consensus of running traces that later
#: left it, 2.4 to 4 points below SC; research/calibration/results/README.md)
ENDED_MIN = 4


def dirichlet_counts(
    warm_final: np.ndarray,
    n_answers: int,
    prior: float = PRIOR,
    other: float = OTHER,
    temper: float = 1.0,
) -> np.ndarray:
    """Dirichlet parameters of the final-answer posterior [n_answers + 1]: warmup count + ``prior``
    for every answer the warmup gave, 0 for the others, ``other`` on the last slot ("an answer the
    warmup never gave", standing for all of them at once, which is conservative)."""
    wf = np.asarray(warm_final)
    wf = wf[wf >= 0]
    c = temper * np.bincount(wf, minlength=n_answers).astype(np.float64)[:n_answers]
    return np.append(np.where(c > 0, c + prior, 0.0), other)


def mass(conc: np.ndarray) -> float:
    """The sum of Dirichlet parameters, over the nonzero ones: the same bits however many answers
    with no mass sit among them (a plain sum's pairwise order moves with the array's length)."""
    return float(conc[conc != 0].sum())


def theta_draws(
    warm_final: np.ndarray,
    n_answers: int,
    prior: float = PRIOR,
    other: float = OTHER,
    n_draws: int = N_DRAWS,
    seed: int = SEED,
) -> np.ndarray:
    """Seeded posterior draws of θ [n_draws, n_answers + 1], for the Monte Carlo form of the risk.

    Random streams go to answers by decreasing count, not by id (ids are arrival order), so the
    draws do not depend on how answers are numbered (ties in count keep id order).
    """
    c = dirichlet_counts(warm_final, n_answers, prior, other)
    order = np.argsort(-c, kind="stable")
    rng = np.random.default_rng(seed)
    g = np.empty((n_draws, len(c)))
    g[:, order] = rng.gamma(np.where(c[order] > 0, c[order], 1.0), size=(n_draws, len(c))) * (
        c[order] > 0
    )
    return g / g.sum(axis=1, keepdims=True)


def confident_favourite(
    warm_final: np.ndarray, warm_min_group: np.ndarray, tilt: float = TILT
) -> int:
    """The warmup's favourite answer when each trace weighs exp(tilt · lowest group confidence),
    i.e. leaning towards the traces DeepConf's filter would keep; -1 without a warmup answer."""
    wf = np.asarray(warm_final)
    ok = wf >= 0
    if not ok.any():
        return -1
    mg = np.asarray(warm_min_group, dtype=np.float64)[ok]
    lam = np.exp(tilt * (mg - mg.max()))
    return int(np.argmax(np.bincount(wf[ok], weights=lam)))


def predictive_risk(
    ids, eligible, running, pending, q, weights, lead, theta, shared=None, per_row=False
) -> np.ndarray:
    """P(the full-budget vote ≠ the current leader) per row ([R, B] inputs).

    ``shared`` (optional): (dq [R, B], var [A+1]) — each answer's holders share one unknown
    parameter of their switch probabilities (:class:`Transitions`), with posterior variance var[a];
    dq is ∂q_j/∂(its answer's parameter). A shared unknown adds (Σ_{j on a} w_j ∂g_j)² · var[a] to
    the margins: it grows with the square of the number of holders, not with their number.

    ``theta``: posterior draws [D, A+1] (Monte Carlo over θ), or the Dirichlet parameters [A+1]
    (analytic: θ at its posterior mean, and the posterior variance of θ_L − θ_c, times the
    switching mass, added to each margin's variance — deterministic and D times cheaper).
    Only answers a row holds, answers of θ's support and the unseen slot are challengers (others
    cannot win), so the work is O(R · D · answers present), whatever the total answer count.
    ``per_row``: ``theta`` [R, A+1] is each row's own Dirichlet parameters (analytic), as a
    calibration learned across questions gives them (:mod:`mars.method.learned`).
    """
    R, _B = ids.shape
    if per_row:
        return _row_risk(ids, eligible, running, pending, q, weights, lead, theta, shared)
    analytic = theta.ndim == 1
    conc = None
    if analytic:
        conc = np.asarray(theta, dtype=np.float64)
        theta = (conc / mass(conc))[None]
    A1 = theta.shape[1]
    if R == 0:
        return np.zeros(0)
    pending = np.zeros_like(eligible) if pending is None else pending
    run = eligible & running
    fin = eligible & ~running
    pend = pending & ~eligible
    present = np.zeros(A1, dtype=bool)
    present[ids[eligible]] = True
    present |= theta.max(axis=0) > 0
    present[-1] = True
    cols = np.flatnonzero(present)
    remap = np.full(A1, -1, dtype=np.int64)
    remap[cols] = np.arange(len(cols))
    C = len(cols)
    th = theta[:, cols]  # [D, C]
    idx = np.where(eligible, remap[np.maximum(ids, 0)], C - 1)
    w = np.broadcast_to(weights, ids.shape).astype(np.float64)
    # q is P(final ≠ current answer a); a switching trace lands on θ restricted to the other
    # answers, i.e. it is re-drawn from θ with probability g = q / (1 − θ_a) (capped at 1)
    mean_th = th.mean(axis=0) if not analytic else th[0]
    stay = np.maximum(1.0 - mean_th[idx], 1e-12)
    qq = np.minimum(q.astype(np.float64) / stay, 1.0)
    w2 = w * w
    live = run | pend
    qq = np.where(pend, 1.0, qq)

    def per_answer(v):  # sums over running traces that hold an answer [R, C]
        return tally(idx, v, run, C)

    def total(v):  # sums over every live trace (pending ones included) [R]
        return np.where(live, v, 0.0).sum(axis=1)

    Fx = tally(idx, w, fin, C)
    N, Q = per_answer(w), per_answer(w * qq)
    N2, Q2, S2 = per_answer(w2), per_answer(w2 * qq), per_answer(w2 * qq * qq)
    Qt, Q2t, S2t = total(w * qq), total(w2 * qq), total(w2 * qq * qq)
    r = np.arange(R)
    L = remap[np.maximum(lead, 0)]
    L = np.maximum(L, 0)
    # expected final weighted votes of running traces per answer, and their second moments
    E = (N - Q)[:, None, :] + th[None] * Qt[:, None, None]  # [R, D, C]
    M2 = (N2 - Q2)[:, None, :] + th[None] * Q2t[:, None, None]

    def at_L(a):
        return a[r, :, L][:, :, None] if a.ndim == 3 else a[r, L][:, None, None]

    dlt = th[:, L].T[:, :, None] - th[None]  # θ_L − θ_c  [R, D, C]
    mu = (at_L(Fx) + at_L(E)) - (Fx[:, None, :] + E)
    # Σ_j w_j² (p_jL − p_jc)², split by the answer trace j holds now (L, c, or another one)
    sq = (
        at_L(N2)
        - 2 * (1 - dlt) * at_L(Q2)
        + (1 - dlt) ** 2 * at_L(S2)
        + N2[:, None, :]
        - 2 * (1 + dlt) * Q2[:, None, :]
        + (1 + dlt) ** 2 * S2[:, None, :]
        + dlt**2 * (S2t[:, None, None] - at_L(S2) - S2[:, None, :])
    )
    var = at_L(M2) + M2 - sq
    if conc is not None:  # + Qt² · Var(θ_L − θ_c) under the Dirichlet posterior (re-drawn mass)
        a = conc[cols]
        a0 = mass(conc)
        aL = a[L][:, None, None]
        vd = (
            aL * (a0 - aL) + a[None, None, :] * (a0 - a[None, None, :]) + 2 * aL * a[None, None, :]
        ) / (a0 * a0 * (a0 + 1))
        var = var + (Qt**2)[:, None, None] * vd
    if shared is not None:
        # ∂E[D_c]/∂g_j = (θ_L − θ_c) − [a_j = L] + [a_j = c], ∂g_j = ∂q_j/(1 − θ_a) while g is
        # not capped; so Var_c = Σ_a X_a (dlt − [a = L] + [a = c])², expanded below
        dq, answer_var = shared
        qf = q.astype(np.float64)
        slope = np.where(qf < stay, w * dq / stay, 0.0)
        X = per_answer(slope) ** 2 * np.asarray(answer_var, dtype=np.float64)[cols][None]
        XL = at_L(X)
        var = var + dlt**2 * X.sum(axis=1)[:, None, None] - 2 * dlt * (XL - X[:, None, :])
        var = var + XL + X[:, None, :]
    var = np.maximum(var, 1e-12)
    wmin = np.where(live.any(axis=1), np.where(live, w, np.inf).min(axis=1), 1.0)
    p = ndtr((0.5 * wmin[:, None, None] - mu) / np.sqrt(var))
    # challengers of a row: answers it holds, answers of the posterior's support, the unseen slot
    mine = (tally(idx, np.ones(1), eligible, C) > 0) | (th.max(axis=0) > 0)[None]
    mine[:, -1] = True
    p = np.where(mine[:, None, :], p, 0.0)
    p[r, :, L] = 0.0
    risk = np.minimum(p.sum(axis=2), 1.0).mean(axis=1)
    return np.where(lead >= 0, risk, 1.0)


def _row_risk(ids, eligible, running, pending, q, weights, lead, conc, shared) -> np.ndarray:
    """:func:`predictive_risk` with a landing posterior per row: ``conc`` [R, A+1] Dirichlet
    parameters (analytic form); ``shared`` (dq [R, B], var [A+1]) as there."""
    R, _B = ids.shape
    if R == 0:
        return np.zeros(0)
    conc = np.asarray(conc, dtype=np.float64)
    A1 = conc.shape[1]
    pending = np.zeros_like(eligible) if pending is None else pending
    run = eligible & running
    fin = eligible & ~running
    pend = pending & ~eligible
    present = np.zeros(A1, dtype=bool)
    present[ids[eligible]] = True
    present |= conc.max(axis=0) > 0
    present[-1] = True
    cols = np.flatnonzero(present)
    remap = np.full(A1, -1, dtype=np.int64)
    remap[cols] = np.arange(len(cols))
    C = len(cols)
    a = conc[:, cols]  # [R, C]
    a0 = a.sum(axis=1)
    th = a / a0[:, None]
    idx = np.where(eligible, remap[np.maximum(ids, 0)], C - 1)
    w = np.broadcast_to(weights, ids.shape).astype(np.float64)
    stay = np.maximum(1.0 - np.take_along_axis(th, idx, axis=1), 1e-12)
    qq = np.minimum(q.astype(np.float64) / stay, 1.0)
    w2 = w * w
    live = run | pend
    qq = np.where(pend, 1.0, qq)

    def per_answer(v):
        return tally(idx, v, run, C)

    def total(v):
        return np.where(live, v, 0.0).sum(axis=1)

    Fx = tally(idx, w, fin, C)
    N, Q = per_answer(w), per_answer(w * qq)
    N2, Q2, S2 = per_answer(w2), per_answer(w2 * qq), per_answer(w2 * qq * qq)
    Qt, Q2t, S2t = total(w * qq), total(w2 * qq), total(w2 * qq * qq)
    r = np.arange(R)
    L = np.maximum(remap[np.maximum(lead, 0)], 0)
    E = (N - Q) + th * Qt[:, None]  # [R, C]
    M2 = (N2 - Q2) + th * Q2t[:, None]
    dlt = th[r, L][:, None] - th
    mu = (Fx[r, L] + E[r, L])[:, None] - (Fx + E)
    N2L, Q2L, S2L = N2[r, L][:, None], Q2[r, L][:, None], S2[r, L][:, None]
    sq = (
        N2L
        - 2 * (1 - dlt) * Q2L
        + (1 - dlt) ** 2 * S2L
        + N2
        - 2 * (1 + dlt) * Q2
        + (1 + dlt) ** 2 * S2
        + dlt**2 * (S2t[:, None] - S2L - S2)
    )
    var = M2[r, L][:, None] + M2 - sq
    aL = a[r, L][:, None]
    vd = (aL * (a0[:, None] - aL) + a * (a0[:, None] - a) + 2 * aL * a) / (
        a0[:, None] ** 2 * (a0[:, None] + 1)
    )
    var = var + (Qt**2)[:, None] * vd
    if shared is not None:
        dq, answer_var = shared
        qf = q.astype(np.float64)
        slope = np.where(qf < stay, w * dq / stay, 0.0)
        X = per_answer(slope) ** 2 * np.asarray(answer_var, dtype=np.float64)[cols][None]
        XL = X[r, L][:, None]
        var = var + dlt**2 * X.sum(axis=1)[:, None] - 2 * dlt * (XL - X) + XL + X
    var = np.maximum(var, 1e-12)
    wmin = np.where(live.any(axis=1), np.where(live, w, np.inf).min(axis=1), 1.0)
    p = ndtr((0.5 * wmin[:, None] - mu) / np.sqrt(var))
    mine = (tally(idx, np.ones(1), eligible, C) > 0) | (a > 0)
    mine[:, -1] = True
    p = np.where(mine, p, 0.0)
    p[r, L] = 0.0
    risk = np.minimum(p.sum(axis=1), 1.0)
    return np.where(lead >= 0, risk, 1.0)


@dataclass
class Transitions:
    """What the warmup says about switching at each checkpoint: who leaves, and where they land.

    The first version of the rule took both from elsewhere: who leaves from the learned q (answer-
    blind, fitted in-sample on these 16 traces) and where they land from θ, the warmup's final
    answers. On a contested question both are wrong in the same direction. θ counts the traces
    that *stay* — every trace that ends on an early attractor held it all along — so traces still
    to switch were sent to the attractor in proportion to its final share; and q saw attractor
    holders with long streaks as settled although the warmup shows many of them leaving. Here both
    come from the warmup traces in the same state at the same checkpoint k, which are exchangeable
    with the main traces there:

    * **leaving**: the holders of answer a at k leave it (end elsewhere) at one unknown rate ρ_ka
      shared by all of them, posterior Beta(κm + d_ka, κ(1 − m) + h_ka − d_ka): h_ka warmup traces
      running at k held a, d_ka of them ended elsewhere (an answer no warmup trace held at k keeps
      the prior, mean m = 1/2). The prior is symmetric on purpose: centring it on a rate estimated
      from the same 16 traces (the q-model's, or all answers' pooled) counts them twice and makes
      the posterior surest exactly where the warmup is thinnest, late in the run. It is also not
      the population's prior: across development questions the rates are near 0 or near 1 (a
      beta-binomial fit gives κ ≈ 0.1), and with that prior the risk is calibrated — but a
      calibrated risk stops wrongly in α of its stops, and on a contested question every such stop
      is an accuracy loss. κ = 4 at m = 1/2 is a deliberate pessimism where the warmup is thin
      (research/beyond/results/honesty.md);
    * **landing**: a trace that leaves lands on x ≠ a in proportion to D_k,x, D_k ~ Dirichlet(τ·θ̄ +
      c_k): c_k,x warmup traces running at k on another answer (or none) ended on x; θ̄ is the
      mean of the final-answer posterior, the prior for checkpoints where few warmup traces still
      have to switch.
    """

    n_answers: int
    keys: np.ndarray  # sorted k·(A+1) + a of the (checkpoint, answer) pairs the warmup held
    held: np.ndarray  # h_ka of those pairs
    left: np.ndarray  # d_ka of those pairs
    dest_keys: np.ndarray  # sorted k·(A+1) + x of the switchers' (checkpoint, final) pairs
    dest_counts: np.ndarray  # c_kx of those pairs
    kappa: float = KAPPA
    tau: float = TAU
    rate_mean: float = RATE_MEAN

    @classmethod
    def fit(
        cls,
        warm_ids: np.ndarray,
        warm_running: np.ndarray,
        warm_final: np.ndarray,
        n_answers: int,
        kappa: float = KAPPA,
        tau: float = TAU,
    ) -> Transitions:
        """From the warmup traces' answer ids [W, m] (-1: none), running mask [W, m] and final
        answer ids [W]."""
        ids = np.asarray(warm_ids)
        final = np.asarray(warm_final)[:, None]
        running = np.asarray(warm_running, dtype=bool) & (final >= 0)
        A1 = n_answers + 1
        k = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
        hold = running & (ids >= 0)
        gone = ids != final
        keys, g = np.unique(k[hold] * A1 + ids[hold], return_inverse=True)
        held = np.bincount(g, minlength=len(keys)).astype(np.float64)
        left = np.bincount(g, gone[hold], minlength=len(keys))
        switch = running & gone
        fk = (k * A1 + np.broadcast_to(final, ids.shape))[switch]
        dest_keys, dest_counts = np.unique(fk, return_counts=True)
        return cls(
            n_answers,
            keys,
            held,
            left,
            dest_keys,
            dest_counts.astype(np.float64),
            kappa,
            tau,
        )

    def _at(self, keys: np.ndarray, k: int) -> tuple[np.ndarray, slice]:
        A1 = self.n_answers + 1
        lo, hi = np.searchsorted(keys, [k * A1, (k + 1) * A1])
        return keys[lo:hi] - k * A1, slice(lo, hi)

    def leaving(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance of ρ_ka for every answer at checkpoint k ([A+1] each)."""
        a = np.full(self.n_answers + 1, self.kappa * self.rate_mean)
        b = np.full(self.n_answers + 1, self.kappa * (1 - self.rate_mean))
        cols, sl = self._at(self.keys, k)
        a[cols] += self.left[sl]
        b[cols] += self.held[sl] - self.left[sl]
        mean = a / (a + b)
        return mean, mean * (1 - mean) / (a + b + 1)

    def landing(self, k: int, theta: np.ndarray) -> np.ndarray:
        """Dirichlet parameters of D_k [A+1], given the final-answer posterior's parameters."""
        out = self.tau * theta / mass(theta)
        cols, sl = self._at(self.dest_keys, k)
        out[cols] += self.dest_counts[sl]
        return out


@dataclass
class RiskStop(Rule):
    """Stop when the predictive risk of the leader is at most ``alpha`` (see module docstring).

    With ``transitions`` (what the package builds) who leaves and where they land come from the
    warmup traces in the same state (:class:`Transitions`); without them, the first version of
    the rule: a running trace leaves with its learned q and lands as θ (kept for comparison)."""

    #: Dirichlet parameters of the final answers [A+1] (or posterior draws [D, A+1])
    theta: np.ndarray | None = field(default=None, repr=False)
    alpha: float = ALPHA_SC
    favourite: int = -1  # DeepConf: the leader must be this answer (-1: no such guard)
    transitions: Transitions | None = field(default=None, repr=False)
    #: a calibration learned across questions (:mod:`mars.method.learned`): who leaves and where
    #: they land from it and the sample's own traces, no warmup
    learned: Calibration | None = field(default=None, repr=False)
    label: str = "risk"
    needs_q: bool = True
    #: answers no trace holds and the warmup never ended on are no challengers
    #: (:func:`predictive_risk`): room for answers still to come changes nothing
    counts_answers = False

    @classmethod
    def for_question(
        cls,
        warm_final: np.ndarray,
        n_answers: int,
        deepconf: bool = False,
        warm_min_group: np.ndarray | None = None,
        alpha: float | None = None,
        warm_ids: np.ndarray | None = None,
        warm_running: np.ndarray | None = None,
    ) -> RiskStop:
        """The rule of one question from its warmup traces: their final answer ids; their answer
        ids and running mask at every checkpoint [W, m] (without them, the first version); DeepConf:
        their lowest group confidence."""
        fav = -1
        if deepconf:
            if warm_min_group is None:  # a caller's bug: DeepConf arrays always have it
                raise ValueError("dco-mars2 needs the warmup traces' lowest group confidence")
            fav = confident_favourite(warm_final, warm_min_group)
        if alpha is None:
            alpha = ALPHA_DCO if deepconf else ALPHA_SC
        transitions = None
        if warm_ids is not None:
            if warm_running is None:  # a caller's bug
                raise ValueError("the warmup's transitions need its running mask")
            transitions = Transitions.fit(warm_ids, warm_running, warm_final, n_answers)
        return cls(
            theta=dirichlet_counts(warm_final, n_answers),
            alpha=alpha,
            favourite=fav,
            transitions=transitions,
            needs_q=transitions is None,
        )

    @classmethod
    def calibrated(cls, calibration: Calibration, alpha: float | None = None) -> RiskStop:
        """The rule without a warmup: leaving rates from ``calibration``, landing from each
        sample's own traces (:func:`mars.method.learned.landing`)."""
        return cls(alpha=ALPHA_SC if alpha is None else alpha, learned=calibration, needs_q=False)

    def _learned_risk(self, snap: Snapshot) -> np.ndarray:
        cal = self.learned
        assert cal is not None
        ids = np.where(snap.eligible, snap.ids, -1)
        share, _ = answer_shares(ids, snap.n_answers)
        held = np.maximum(ids, 0)
        mine = np.take_along_axis(share, held, axis=1)
        rate, sd = cal.leaving(snap.position, mine, snap.ids == snap.lead[:, None])
        conc = landing(snap.ids, snap.eligible, snap.running, 1.0 - rate, snap.n_answers)
        shared = (sd, np.ones(snap.n_answers + 1))
        return predictive_risk(
            snap.ids,
            snap.eligible,
            snap.running,
            snap.pending,
            rate,
            snap.weights,
            snap.lead,
            conc,
            shared,
            per_row=True,
        )

    def risk(self, snap: Snapshot) -> np.ndarray:
        if self.learned is not None:
            return self._learned_risk(snap)
        theta, shared = self.theta, None
        tr = self.transitions
        if tr is not None and theta is not None and theta.ndim == 1:
            rate, var = tr.leaving(snap.k)
            q = rate[np.maximum(snap.ids, 0)]
            shared = (np.ones(q.shape), var)
            theta = tr.landing(snap.k, theta)
        else:
            q = snap.q if snap.q is not None else np.ones(snap.ids.shape, dtype=np.float32)
        return predictive_risk(
            snap.ids,
            snap.eligible,
            snap.running,
            snap.pending,
            q,
            snap.weights,
            snap.lead,
            theta,
            shared,
        )

    def check(self, snap: Snapshot) -> np.ndarray:
        ok = snap.has_votes & (self.risk(snap) <= self.alpha)
        if self.favourite >= 0:
            ok &= snap.lead == self.favourite
        if self.learned is not None:
            ended = snap.eligible & ~snap.running & (snap.ids == snap.lead[:, None])
            ok &= ended.sum(axis=1) >= ENDED_MIN
        return ok


# -- choosing alpha across questions (Learn-then-Test) -----------------------------------------


def _h1(a: float, b: float) -> float:
    a = min(max(a, 1e-12), 1 - 1e-12)
    return a * np.log(a / b) + (1 - a) * np.log((1 - a) / (1 - b))


def hb_pvalue(risk_hat: float, eps: float, n: int) -> float:
    """Hoeffding–Bentkus p-value of H0: mean risk > eps, from the mean ``risk_hat`` of n
    independent [0, 1] losses (Bates et al., distribution-free risk control)."""
    from scipy.stats import binom

    hoeffding = np.exp(-n * _h1(min(risk_hat, eps), eps))
    bentkus = np.e * binom.cdf(np.ceil(n * risk_hat), n, eps)
    return float(min(hoeffding, bentkus, 1.0))


def learn_then_test(
    alphas: np.ndarray, losses: np.ndarray, eps: float, delta: float
) -> tuple[float | None, np.ndarray]:
    """The largest risk level whose expected per-question loss is certified ≤ ``eps``.

    ``losses`` [n_alphas, n_questions]: each question's loss (e.g. the share of runs whose answer
    differs from the full-budget vote) when the rule runs at ``alphas[i]``. Fixed-sequence testing
    from the most conservative level up: each level is accepted while its Hoeffding–Bentkus p-value
    is ≤ ``delta``, which controls the family-wise error, so with probability ≥ 1 − delta over the
    calibration questions the chosen level's risk on a new exchangeable question is ≤ eps.
    Returns (alpha or None, p-values).
    """
    order = np.argsort(alphas)
    n = losses.shape[1]
    pvals = np.array([hb_pvalue(float(losses[i].mean()), eps, n) for i in range(len(alphas))])
    chosen = None
    for i in order:
        if pvals[i] > delta:
            break
        chosen = float(alphas[i])
    return chosen, pvals
