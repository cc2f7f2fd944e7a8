"""Vote snapshots: weighted tallies per answer and the leader, for many iterations at once."""

from __future__ import annotations

import numpy as np


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
