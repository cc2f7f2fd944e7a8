"""Switch-model features for every (trace, checkpoint) of a question (reference-protocol §6).

Five columns: checkpoint position, checkpoint confidence, flips so far, current streak length and
confidence trend. Computed for every trace and checkpoint (finished or not) from the per-question
arrays, so training rows (warmup traces) and prediction rows come from one function.
"""

from __future__ import annotations

import numpy as np

from ..store.schema import SWITCH_FEATURES
from .arrays import QuestionArrays

#: the columns, in order (declared with the fit stage's models.parquet, whose ``coef`` they name)
FEATURE_NAMES = SWITCH_FEATURES


def flips_and_streaks(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Number of answer changes up to each checkpoint, and the run length ending there."""
    n, m = ids.shape
    change = np.zeros((n, m), dtype=bool)
    change[:, 1:] = ids[:, 1:] != ids[:, :-1]
    flips = np.cumsum(change, axis=1)
    # streak: checkpoints since the last change (inclusive)
    k = np.broadcast_to(np.arange(m), (n, m))
    last_change = np.maximum.accumulate(np.where(change, k, 0), axis=1)
    streaks = k - last_change + 1
    return flips.astype(np.int64), streaks.astype(np.int64)


def question_features(arr: QuestionArrays, traces: np.ndarray | None = None) -> np.ndarray:
    """Feature tensor float64 [n_traces, n_checkpoints, 5] (of ``traces`` only, if given)."""
    ids = arr.ids if traces is None else arr.ids[traces]
    n, m = ids.shape
    flips, streaks = flips_and_streaks(ids)
    if arr.conf_at_pos is not None:
        conf = arr.conf_at_pos if traces is None else arr.conf_at_pos[traces]
    else:
        conf = np.zeros(
            (n, m), dtype=np.float32
        )  # no confidences: a constant column, coefficient 0
    trend = np.zeros((n, m), dtype=np.float64)
    trend[:, 1:] = conf[:, 1:].astype(np.float64) - conf[:, :-1].astype(np.float64)
    X = np.empty((n, m, 5), dtype=np.float64)
    X[..., 0] = arr.grid[None, :]
    X[..., 1] = conf
    X[..., 2] = flips
    X[..., 3] = streaks
    X[..., 4] = trend
    return X


def switch_labels(arr: QuestionArrays, traces: np.ndarray | None = None) -> np.ndarray:
    """1 where the trace's answer at a checkpoint differs from its final answer (oracle q)."""
    ids = arr.ids if traces is None else arr.ids[traces]
    final = arr.final_ids if traces is None else arr.final_ids[traces]
    return (ids != final[:, None]).astype(np.float32)


class RunningFeatures:
    """:func:`question_features`, one checkpoint at a time (what a live stopper has): fed each
    checkpoint's position and the ``n`` traces' answer ids and confidences there, it gives their
    features [n, 5], the batch's column at that checkpoint to the bit."""

    def __init__(self, n: int):
        self.n = n
        self.k = 0  # checkpoints fed
        self.flips = np.zeros(n, dtype=np.int64)
        self.streak = np.zeros(n, dtype=np.int64)
        self.ids: np.ndarray | None = None  # at the previous checkpoint
        self.conf: np.ndarray | None = None

    def next(self, position: int, ids: np.ndarray, conf: np.ndarray | None = None) -> np.ndarray:
        """The features float64 [n, 5] at the next checkpoint (``position`` tokens), where the
        traces hold answer ids ``ids`` [n] and confidences ``conf`` float32 [n] (None: none,
        a constant column as in the batch)."""
        if conf is None:
            conf = np.zeros(self.n, dtype=np.float32)
        if self.ids is None:
            self.streak = np.ones(self.n, dtype=np.int64)
            trend: np.ndarray | float = 0.0
        else:
            changed = ids != self.ids
            self.flips = self.flips + changed
            self.streak = np.where(changed, 1, self.streak + 1)
            assert self.conf is not None
            trend = conf.astype(np.float64) - self.conf.astype(np.float64)
        X = np.empty((self.n, 5), dtype=np.float64)
        X[:, 0] = position
        X[:, 1] = conf
        X[:, 2] = self.flips
        X[:, 3] = self.streak
        X[:, 4] = trend
        self.ids, self.conf = np.array(ids, copy=True), np.array(conf, copy=True)
        self.k += 1
        return X
