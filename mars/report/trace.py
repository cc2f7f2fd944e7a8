"""Trace-level quantities for the figures: vote shares, the MARS slack, learned vs oracle q.

These need the trace pool (not only the simulate outputs). They rebuild exactly what the simulator
saw: the same :class:`~mars.method.arrays.QuestionArrays`, the same
:class:`~mars.simulate.QuestionContext`
(bootstrap samples, warmup, q-models, calibrated γ) from the run's settings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..method.arrays import QuestionArrays, load_arrays
from ..method.registry import CALIBRATED_MARS, METHODS, SELF_CONSISTENCY
from ..method.stopping import UNSEEN, Mars
from ..simulate import MethodRun, QuestionContext, Settings, pool_settings
from ..store.pool import Pool, open_pool

_POOLS: dict[str, Pool] = {}


def pool_of(path) -> Pool:
    key = str(path)
    if key not in _POOLS:
        _POOLS[key] = open_pool(path)
    return _POOLS[key]


_ARRAYS: dict = {}


def load_question(pool_path, qid: int, settings: Settings, cache_dir=None) -> QuestionArrays:
    """A question's arrays, memoised per process (figures share them)
    and cached on disk if asked."""
    pool = pool_of(pool_path)
    spacing = pool_settings(pool, settings).spacing
    assert spacing is not None  # pool_settings fills it in
    key = (str(pool_path), int(qid), spacing, settings.window)
    if key not in _ARRAYS:
        if len(_ARRAYS) > 64:
            _ARRAYS.clear()
        q = pool.read_question(int(qid))
        _ARRAYS[key] = load_arrays(q, cache_dir, spacing=spacing, window=settings.window)
    return _ARRAYS[key]


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
        rows: list[dict] = []
        for k, p in enumerate(self.positions):
            rows.extend(
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
                for a in np.flatnonzero(self.shares[k] > 0)
            )
        return pd.DataFrame(rows)


def sc_trajectory(
    arr: QuestionArrays,
    ctx: QuestionContext,
    iteration: int,
    method: str = CALIBRATED_MARS.of(SELF_CONSISTENCY),
) -> Trajectory:
    """Vote shares and the MARS slack at every checkpoint of one bootstrap sample.

    The snapshots and the decision are the simulator's own (:class:`~mars.simulate.MethodRun`,
    :meth:`~mars.method.stopping.Mars.explain`), so the figure shows exactly the rule the tables
    report.
    """
    run = MethodRun(ctx, METHODS[method])
    rows = np.array([iteration])
    m, A = arr.n_checkpoints, arr.n_answers
    shares = np.zeros((m, A))
    lead = np.full(m, -1, dtype=np.int64)
    slack = np.full(m, np.nan)
    binding = np.full(m, UNSEEN, dtype=np.int64)
    fires = np.zeros(m, dtype=bool)
    for k in range(m):
        snap = run.snapshot(k, rows)
        tot = snap.votes[0].sum()
        if tot > 0:
            shares[k] = snap.votes[0] / tot
        lead[k] = snap.lead[0]
        if isinstance(run.rule, Mars):
            out = run.rule.explain(snap)
            assert out.slack is not None and out.binding is not None
            slack[k], binding[k], fires[k] = out.slack[0], out.binding[0], out.passed[0]
        else:
            fires[k] = run.rule.check(snap)[0]
    return Trajectory(
        qid=arr.qid,
        iteration=iteration,
        positions=arr.grid.copy(),
        shares=shares,
        lead=lead,
        slack=slack,
        binding=binding,
        fires=fires,
        gamma=float(run.gamma),
        final_answer=int(run.full_budget_vote(rows)[0]),
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
