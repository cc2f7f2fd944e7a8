"""How many traces width-adaptive MARS2 launches first, planned from the warmup (sc-mars2-launch).

MARS2 in waves (``sc-mars2-waves``) launches ``wave_size`` traces and the next wave only once a
wave has ended without a stop; to the risk, every trace not yet launched is an answer still to be
drawn from the warmup's posterior. Where one wave decides the question, that spends a fraction of
the budget at the latency of one round; where it does not, every further wave adds its longest
trace to what the user waits for — on AIME 2024 the four questions whose warmup is dispersed run
two to four rounds of sixteen traces, three quarters of the waves' latency, for a fifth of their
tokens (docs/baselines.md). The wave size is then a constant where it should be a decision.

What a live run knows before it launches is its warmup, run to completion. So the plan asks the
rule itself, before launching: had a first wave of ``size`` traces ended with the warmup's final
answers in the warmup's proportions, every other trace of the budget still to be drawn, would its
risk be at most α (:func:`first_wave_risk`)? The first launch is the smallest size of ``wave``,
2 ``wave``, 4 ``wave``, … for which it would — doubling, so that a question needing more traces
costs at most one size too many — and the whole budget where none below it would: then no wave
can be expected to decide, and every trace starts at once, MARS2 at its own latency. A first
wave that ends without a stop after all launches every other trace at once: two rounds, never
more. Nothing is fitted: the risk is the rule's (:func:`mars.method.riskstop.predictive_risk`, at
the rule's level α, with the landing it gives traces not launched once every warmup trace has
ended), ``wave`` the ``wave_size`` setting (16, the warmup's size).
"""

from __future__ import annotations

import numpy as np

from .riskstop import ALPHA_SC, TAU, dirichlet_counts, predictive_risk


def first_wave_risk(warm_final: np.ndarray, n_answers: int, size: int, budget: int) -> float:
    """The rule's risk once a first wave of ``size`` traces has ended with the warmup's final
    answers in the warmup's proportions and the other ``budget - size`` traces are still to be
    drawn (1 where the warmup gave no answer)."""
    wf = np.asarray(warm_final, dtype=np.int64)
    given = wf[wf >= 0]
    if len(given) == 0:
        return 1.0
    n = len(given)
    ids = np.concatenate([given, np.full(max(budget - size, 0), -1, dtype=np.int64)])[None]
    ended = np.zeros(ids.shape, dtype=bool)
    ended[0, :n] = True
    drawn = ~ended  # still to be drawn: re-drawn from the landing distribution
    weights = np.where(ended, size / n, 1.0)  # the warmup's proportions, ``size`` traces' worth
    theta = dirichlet_counts(wf, n_answers)
    landing = TAU * theta / theta.sum()  # the rule's landing once no warmup trace runs
    lead = np.array([np.bincount(given).argmax()])
    q = np.ones(ids.shape, dtype=np.float32)
    return float(predictive_risk(ids, ended, drawn, drawn, q, weights, lead, landing)[0])


def first_wave(
    warm_final: np.ndarray, n_answers: int, wave: int, budget: int, alpha: float = ALPHA_SC
) -> int:
    """The size of the first launch: the smallest of ``wave``, 2 ``wave``, 4 ``wave``, … below
    the budget whose end could decide (:func:`first_wave_risk` ≤ ``alpha``), else the budget."""
    size = max(1, wave)
    while size < budget:
        if first_wave_risk(warm_final, n_answers, size, budget) <= alpha:
            return size
        size *= 2
    return budget


def plan(
    warm_final: np.ndarray, n_answers: int, wave: int, budget: int, alpha: float = ALPHA_SC
) -> list[tuple[int, int]]:
    """The launches, as (first, last + 1) sample positions: the first wave
    (:func:`first_wave`), then, should it end without a stop, every other trace at once."""
    size = first_wave(warm_final, n_answers, wave, budget, alpha)
    return [(0, size)] if size >= budget else [(0, size), (size, budget)]
