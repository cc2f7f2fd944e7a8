"""Trace-level quantities for the figures: vote shares, the MARS slack, learned vs oracle q.

These need the trace pool (not only the simulate outputs). They rebuild exactly what the simulator
saw: the same :class:`~mars.arrays.QuestionArrays`, the same :class:`~mars.simulate.QuestionContext`
(bootstrap samples, warmup, q-models, calibrated γ) from the run's settings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..arrays import QuestionArrays, load_arrays
from ..methods import METHODS
from ..pool import open_pool
from ..simulate import QuestionContext, Settings
from ..stopping import margin_test
from ..voting import leader, tally

_POOLS: dict = {}
UNSEEN = -2  # binding challenger id of the synthetic unseen answer


def pool_of(path) -> object:
    key = str(path)
    if key not in _POOLS:
        _POOLS[key] = open_pool(path)
    return _POOLS[key]


_ARRAYS: dict = {}


def load_question(pool_path, qid: int, settings: Settings, cache_dir=None) -> QuestionArrays:
    """A question's arrays, memoised per process (figures share them) and cached on disk if asked."""
    key = (str(pool_path), int(qid), settings.spacing, settings.window)
    if key not in _ARRAYS:
        if len(_ARRAYS) > 64:
            _ARRAYS.clear()
        q = pool_of(pool_path).read_question(int(qid))
        _ARRAYS[key] = load_arrays(q, cache_dir, spacing=settings.spacing, window=settings.window)
    return _ARRAYS[key]


def mars_slack(
    votes: np.ndarray,
    lead: int,
    ids: np.ndarray,
    weights: np.ndarray,
    eligible: np.ndarray,
    q: np.ndarray,
    gamma: float,
) -> tuple[float, int]:
    """Minimum slack (margin − threshold) over the unseen and every voted challenger, and which binds.

    The cost formula is :func:`mars.stopping.margin_test`'s (γ·2w for leader voters, −w for the
    challenger's own voters, γ·w otherwise, times eligibility); the rule fires when every slack is
    positive. Returns (slack, binding challenger id; ``UNSEEN`` for the unseen answer).
    """
    w = np.broadcast_to(weights, ids.shape).astype(np.float64)
    base = gamma * w
    is_lead = ids == lead
    v_lead = votes[lead] if lead >= 0 else 0.0
    thr_unseen = np.sum(q * (np.where(is_lead, base * 2, base) * eligible))
    best, binding = v_lead - thr_unseen, UNSEEN
    for c in np.flatnonzero(votes > 0):
        if c == lead:
            continue
        cost = np.where(is_lead, base * 2, np.where(ids == c, -w, base)) * eligible
        s = (v_lead - votes[c]) - np.sum(q * cost)
        if s < best:
            best, binding = s, int(c)
    return float(best), binding


@dataclass
class Trajectory:
    """One bootstrap iteration of one question under self-consistency voting."""

    qid: int
    iteration: int
    positions: np.ndarray  # [m] checkpoint positions (tokens)
    shares: np.ndarray  # [m, n_answers] vote share of each answer
    lead: np.ndarray  # [m] leader id (-1 none)
    slack: np.ndarray  # [m] minimum slack of the MARS test
    binding: np.ndarray  # [m] binding challenger (UNSEEN = the unseen answer)
    fires: np.ndarray  # [m] the simulator's rule fires here (margin test and probe-0 guard)
    gamma: float
    final_answer: int  # full-budget vote of the sample
    representatives: list
    correct: np.ndarray  # [n_answers]

    @property
    def stop_k(self) -> int:
        """First checkpoint where the rule fires; len(positions) when it never does."""
        hit = np.flatnonzero(self.fires)
        return int(hit[0]) if len(hit) else len(self.positions)

    def frame(self) -> pd.DataFrame:
        rows = []
        for k, p in enumerate(self.positions):
            for a in np.flatnonzero(self.shares[k] > 0):
                rows.append(
                    {
                        "qid": self.qid,
                        "iteration": self.iteration,
                        "checkpoint": k,
                        "position": int(p),
                        "answer": self.representatives[a],
                        "correct": bool(self.correct[a]),
                        "share": float(self.shares[k, a]),
                        "leader": self.representatives[self.lead[k]] if self.lead[k] >= 0 else "",
                        "slack": float(self.slack[k]),
                        "fires": bool(self.fires[k]),
                    }
                )
        return pd.DataFrame(rows)


def sc_trajectory(
    arr: QuestionArrays, ctx: QuestionContext, iteration: int, method: str = "sc-mars-cal"
) -> Trajectory:
    """Vote shares and the MARS slack at every checkpoint of one bootstrap sample (SC votes)."""
    m_ = METHODS[method]
    S = ctx.samples[iteration]
    gamma = ctx.gamma_for(m_)
    qm = ctx.q_oracle if m_.q == "oracle" else ctx.q_learned
    m, A = arr.n_checkpoints, arr.n_answers
    shares = np.zeros((m, A))
    lead = np.full(m, -1, dtype=np.int64)
    slack = np.full(m, np.nan)
    binding = np.full(m, UNSEEN, dtype=np.int64)
    fires = np.zeros(m, dtype=bool)
    w = np.ones(len(S))
    for k in range(m):
        ids = arr.ids[S, k]
        e = ids >= 0
        votes = tally(ids[None], w[None], e[None], A)
        ld, has = leader(votes)
        tot = votes[0].sum()
        if tot > 0:
            shares[k] = votes[0] / tot
        lead[k] = ld[0]
        q = qm[S, k]
        if has[0]:
            slack[k], binding[k] = mars_slack(votes[0], int(ld[0]), ids, w, e, q, gamma)
        ok = margin_test(votes, ld, has, ids[None], w[None], e[None], q[None], gamma)[0]
        if k == 0 and ctx.warm_ref >= 0 and not m_.certified:
            ok &= ld[0] == ctx.warm_ref
        fires[k] = ok
    fv, _ = leader(tally(arr.final_ids[S][None], w[None], (arr.final_ids[S] >= 0)[None], A))
    return Trajectory(
        qid=arr.qid,
        iteration=iteration,
        positions=arr.grid.copy(),
        shares=shares,
        lead=lead,
        slack=slack,
        binding=binding,
        fires=fires,
        gamma=float(gamma),
        final_answer=int(fv[0]),
        representatives=list(arr.representatives),
        correct=np.asarray(arr.correct, dtype=bool),
    )


def context(arr: QuestionArrays, settings: Settings) -> QuestionContext:
    return QuestionContext(arr, settings)


# -- learned vs oracle q --------------------------------------------------------------------------
@dataclass
class QCalibration:
    bins: pd.DataFrame  # reliability diagram rows
    checkpoints: pd.DataFrame  # per checkpoint mean learned q vs oracle switch rate


def q_calibration(
    pool_path, settings: Settings, qids: list[int], cache_dir=None, n_bins: int = 10
) -> QCalibration:
    """Learned q against the oracle switch indicator on held-out (non-warmup) running traces."""
    edges = np.linspace(0, 1, n_bins + 1)
    ql_all, qo_all, rows = [], [], []
    for qid in qids:
        arr = load_question(pool_path, qid, settings, cache_dir)
        ctx = QuestionContext(arr, settings)
        ql, qo = ctx.q_learned, ctx.q_oracle
        held = np.ones(arr.n_traces, dtype=bool)
        held[ctx.warm] = False
        mask = held[:, None] & (arr.grid[None, :] < arr.lengths[:, None]) & (arr.ids >= 0)
        ql_all.append(ql[mask].astype(np.float64))
        qo_all.append(qo[mask].astype(np.float64))
        for k, p in enumerate(arr.grid):
            mk = mask[:, k]
            if mk.any():
                rows.append(
                    {
                        "qid": qid,
                        "checkpoint": k,
                        "position": int(p),
                        "n": int(mk.sum()),
                        "q_learned_mean": float(ql[mk, k].mean()),
                        "q_oracle_rate": float(qo[mk, k].mean()),
                    }
                )
    ql = np.concatenate(ql_all) if ql_all else np.zeros(0)
    qo = np.concatenate(qo_all) if qo_all else np.zeros(0)
    b = np.clip(np.digitize(ql, edges[1:-1]), 0, n_bins - 1)
    bins = []
    for i in range(n_bins):
        sel = b == i
        bins.append(
            {
                "bin": i,
                "lo": edges[i],
                "hi": edges[i + 1],
                "n": int(sel.sum()),
                "q_learned_mean": float(ql[sel].mean()) if sel.any() else np.nan,
                "q_oracle_rate": float(qo[sel].mean()) if sel.any() else np.nan,
            }
        )
    per_q = pd.DataFrame(
        rows, columns=["qid", "checkpoint", "position", "n", "q_learned_mean", "q_oracle_rate"]
    )
    if len(per_q):
        # pool the questions per checkpoint position (weighted by the number of running traces)
        g = per_q.assign(l=per_q.q_learned_mean * per_q.n, o=per_q.q_oracle_rate * per_q.n).groupby(
            "position"
        )
        cps = pd.DataFrame(
            {
                "n": g.n.sum(),
                "q_learned_mean": g.l.sum() / g.n.sum(),
                "q_oracle_rate": g.o.sum() / g.n.sum(),
            }
        ).reset_index()
    else:
        cps = pd.DataFrame(columns=["position", "n", "q_learned_mean", "q_oracle_rate"])
    return QCalibration(bins=pd.DataFrame(bins), checkpoints=cps)
