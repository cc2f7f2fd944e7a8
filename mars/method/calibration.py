"""γ calibration on the warmup traces (reference-protocol §7).

Replay the MARS test on the warmup traces for γ = 0.0, 0.1, …, 1.0; keep the smallest γ of the
contiguous run (walking down from 1) whose answer equals the γ = 1 answer; add the UCB bump
z/√n_elig; floor at ``gamma_min``; round to 2 decimals.

The returned value keeps the Python/numpy type the reference's arithmetic produces (a numpy
float64 after the UCB step, a Python float at the floor, the int 1 at the cap): with confidence
weights that type decides whether stopping thresholds are summed in float32 or float64.
"""

from __future__ import annotations

import numpy as np

from .stopping import margin_test
from .voting import leader, tally

GAMMA_GRID = np.arange(0, 1.05, 0.1)
MIN_WARMUP = 4


def _replay(ids, weights, eligible, q, gamma, n_answers, fallback):
    """(answer, checkpoint index) where the MARS test first passes on the warmup, else fallback."""
    m = ids.shape[1]
    for k in range(m):
        e = eligible[:, k]
        if not e.any():
            continue
        votes = tally(ids[None, :, k], weights[None, :, k], e[None, :], n_answers)
        lead, has = leader(votes)
        if margin_test(
            votes, lead, has, ids[None, :, k], weights[None, :, k], e[None, :], q[None, :, k], gamma
        )[0]:
            return int(lead[0]), k
    return fallback, m - 1


def calibrate_gamma(
    ids: np.ndarray,
    final_ids: np.ndarray,
    weights: np.ndarray,
    eligible: np.ndarray,
    q: np.ndarray,
    n_answers: int,
    ucb_z: float = 1.0,
    gamma_min: float = 0.5,
):
    """Calibrated γ from warmup arrays [n_warm, m] (ids, weights, eligibility, q)."""
    n_warm, _m = ids.shape
    if n_warm < MIN_WARMUP:
        return 1.0
    final_votes = tally(
        final_ids[None, :], weights[None, :, -1], np.ones((1, n_warm), bool), n_answers
    )
    ref_final = int(np.argmax(final_votes[0]))
    outcome = {}
    for g in GAMMA_GRID:
        outcome[round(g, 2)] = (_replay(ids, weights, eligible, q, g, n_answers, ref_final), g)
    keys = sorted(outcome, reverse=True)
    (ref_answer, stop_k), _ = outcome[keys[0]]
    gamma = keys[0]
    for key in keys:
        if outcome[key][0][0] != ref_answer:
            break
        gamma = key
    if ucb_z > 0:
        n_elig = max(int(eligible[:, stop_k].sum()), 1)
        gamma = min(1, gamma + ucb_z / np.sqrt(n_elig))
    gamma = max(gamma, gamma_min)
    return round(gamma, 2)
