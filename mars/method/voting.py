"""Vote snapshots: weighted tallies per answer and the leader, for many iterations at once; and
how a trace's vote weighs (:class:`Voting`: uniform or by confidence), a part of a method."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

if TYPE_CHECKING:
    from .arrays import QuestionArrays


def tally(ids: np.ndarray, weights: np.ndarray, eligible: np.ndarray, n_answers: int) -> np.ndarray:
    """Votes float64 [I, n_answers] from ids/weights/eligibility [I, B].

    Sums run in sample order per answer (``np.bincount``), the same order and precision as the
    reference's ``np.add.at`` into a float64 vector, so conf-weighted ties break identically.
    """
    I = ids.shape[0]
    A = max(n_answers, 1)
    flat = (np.arange(I, dtype=np.int64)[:, None] * A + ids)[eligible]
    w = np.broadcast_to(weights, ids.shape)[eligible]
    return np.bincount(flat, weights=w, minlength=I * A).reshape(I, A)


def leader(
    votes: np.ndarray,
    ids: np.ndarray | None = None,
    eligible: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Leader per row (-1 without votes) and whether the row has votes.

    Ties go to the lowest answer id (the MARS reference's ``argmax``), or, given the voters'
    ``ids`` and ``eligible`` [R, B] in sample order, to the tied answer held by the earliest voter
    (Parallel-Probe's ``Counter.most_common``, which keeps first-seen order).
    """
    has_votes = votes.sum(axis=1) > 0
    if ids is None or votes.shape[0] == 0:
        lead = np.where(has_votes, np.argmax(votes, axis=1), -1)
        return lead, has_votes
    assert eligible is not None
    top = votes == votes.max(axis=1, keepdims=True)
    rows = np.arange(votes.shape[0])[:, None]
    tied = eligible & top[rows, np.maximum(ids, 0)] & (ids >= 0)
    first = np.argmax(tied, axis=1)
    lead = np.where(has_votes, ids[rows[:, 0], first], -1)
    return lead.astype(np.int64), has_votes


class Voting:
    """How much each trace's vote weighs: a part of a method (:class:`mars.method.registry.Method`).

    :meth:`weights` gives the weights of ``traces`` at checkpoint ``k`` (every checkpoint where
    ``k`` is None), shaped like ``traces`` (and the checkpoints)."""

    name: ClassVar[str] = "voting"
    needs_confs: ClassVar[bool] = False

    def weights(self, arr: QuestionArrays, traces: np.ndarray, k: int | None = None) -> np.ndarray:
        raise NotImplementedError


@dataclass(frozen=True)
class Uniform(Voting):
    """One vote per trace (self-consistency)."""

    name: ClassVar[str] = "uniform"

    def weights(self, arr: QuestionArrays, traces: np.ndarray, k: int | None = None) -> np.ndarray:
        return np.ones(traces.shape if k is not None else (*traces.shape, len(arr.grid)))


@dataclass(frozen=True)
class ByConfidence(Voting):
    """A trace's vote weighs its checkpoint confidence (DeepConf's weighted vote)."""

    name: ClassVar[str] = "confidence"
    needs_confs: ClassVar[bool] = True

    def weights(self, arr: QuestionArrays, traces: np.ndarray, k: int | None = None) -> np.ndarray:
        assert arr.conf_at_pos is not None  # needs_confs: refused before the walk
        return arr.conf_at_pos[traces] if k is None else arr.conf_at_pos[traces, k]


UNIFORM: Voting = Uniform()
CONFIDENCE: Voting = ByConfidence()
