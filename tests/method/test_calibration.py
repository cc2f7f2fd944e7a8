"""γ calibration on the warmup traces (mars.method.calibration, reference-protocol §7), on warmups
built by hand whose MARS replay is worked out in the comments."""

from __future__ import annotations

import numpy as np
import pytest

from mars.method.calibration import GAMMA_GRID, MIN_WARMUP, _replay, calibrate_gamma


def warmup(ids, q, eligible=None, weights=None):
    """Warmup arrays [n, m] from per-checkpoint columns (lists of n values, one per checkpoint)."""
    ids = np.array(ids, dtype=np.int64).T
    q = np.array(q, dtype=np.float32).T
    eligible = ids >= 0 if eligible is None else np.array(eligible, dtype=bool).T & (ids >= 0)
    weights = np.ones(ids.shape) if weights is None else np.array(weights, dtype=np.float64).T
    return ids, weights, eligible, q


def three_regimes():
    """Four warmup traces, three checkpoints, final answer 0 for all:

    * k = 0: ids (0, 0, 1, 1), q (1, 1, 1/16, 1/16). A 2-2 tie, leader 0. Q_0 = 2, Q_1 = 1/8.
      Challenger 1: 0 > γ(Q + Q_0 − Q_1) − Q_1 = 4γ − 1/8 holds at γ = 0 only.
    * k = 1: ids (1, 1, 1, 1), q 1. Unseen: 4 > γ·2·4 holds for γ < 0.5 (0.1 … 0.4).
    * k = 2: ids (0, 0, 0, 0), q 0: passes at every γ.

    So γ = 0 answers 0 (k = 0), γ = 0.1 … 0.4 answer 1 (k = 1), γ = 0.5 … 1 answer 0 (k = 2).
    """
    return warmup(
        ids=[[0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0]],
        q=[[1, 1, 1 / 16, 1 / 16], [1, 1, 1, 1], [0, 0, 0, 0]],
    )


def test_the_grid_is_eleven_steps_of_a_tenth():
    assert len(GAMMA_GRID) == 11
    assert GAMMA_GRID[0] == 0.0
    assert np.allclose(GAMMA_GRID, np.linspace(0, 1, 11))


def test_replay_returns_the_first_passing_checkpoint_and_its_leader():
    ids, w, el, q = three_regimes()
    assert _replay(ids, w, el, q, 0.0, 2, fallback=7) == (0, 0)
    for g in GAMMA_GRID[1:5]:
        assert _replay(ids, w, el, q, g, 2, fallback=7) == (1, 1)
    for g in GAMMA_GRID[5:]:
        assert _replay(ids, w, el, q, g, 2, fallback=7) == (0, 2)


def test_replay_falls_back_when_nothing_passes_and_skips_checkpoints_without_voters():
    # q = 1 everywhere at γ = 1: a unanimous 4 against 8 never passes
    ids, w, el, q = warmup(ids=[[0, 0, 0, 0], [0, 0, 0, 0]], q=[[1] * 4, [1] * 4])
    assert _replay(ids, w, el, q, 1.0, 1, fallback=5) == (5, 1)
    # checkpoint 0 has no eligible voter: skipped, not a failure or a pass
    ids, w, el, q = warmup(
        ids=[[1, 1, 1, 1], [0, 0, 0, 0]], q=[[0] * 4, [0] * 4], eligible=[[False] * 4, [True] * 4]
    )
    assert _replay(ids, w, el, q, 1.0, 2, fallback=5) == (0, 1)


def test_smallest_gamma_of_the_contiguous_run_below_one():
    # γ = 0 answers as γ = 1 does, but γ = 0.4 does not: the walk down stops at 0.5
    ids, w, el, q = three_regimes()
    final = np.zeros(4, dtype=np.int64)
    assert calibrate_gamma(ids, final, w, el, q, 2, ucb_z=0.0, gamma_min=0.0) == 0.5


def test_a_question_decided_from_the_start_calibrates_to_zero():
    # every trace holds its final answer throughout and oracle q is 0: every γ stops at once
    ids, w, el, q = warmup(ids=[[2, 2, 2, 2, 0]] * 3, q=[[0] * 5] * 3)
    final = np.array([2, 2, 2, 2, 0])
    assert calibrate_gamma(ids, final, w, el, q, 3, ucb_z=0.0, gamma_min=0.0) == 0.0


def test_ucb_bump_counts_the_eligible_traces_where_gamma_one_stopped():
    ids, w, el, q = three_regimes()
    final = np.zeros(4, dtype=np.int64)
    # the γ = 1 run stops at k = 2 with 4 eligible traces: 0.5 + 0.5/√4 = 0.75
    assert calibrate_gamma(ids, final, w, el, q, 2, ucb_z=0.5, gamma_min=0.0) == 0.75
    # one trace not eligible at k = 2 (it still passes there, 3 > 0): 0.5 + 0.5/√3 → 0.79
    el3 = el.copy()
    el3[3, 2] = False
    assert calibrate_gamma(ids, final, w, el3, q, 2, ucb_z=0.5, gamma_min=0.0) == 0.79
    assert round(0.5 + 0.5 / np.sqrt(3), 2) == 0.79
    # the bump is capped at 1
    assert calibrate_gamma(ids, final, w, el, q, 2, ucb_z=5.0, gamma_min=0.0) == 1


def test_floor_applies_after_the_bump():
    ids, w, el, q = warmup(ids=[[2, 2, 2, 2, 0]] * 3, q=[[0] * 5] * 3)
    final = np.array([2, 2, 2, 2, 0])
    assert calibrate_gamma(ids, final, w, el, q, 3, ucb_z=0.0, gamma_min=0.5) == 0.5
    # 0 + 1/√5 = 0.447 is below the floor; 0 + 2/√5 = 0.894 is not
    assert calibrate_gamma(ids, final, w, el, q, 3, ucb_z=1.0, gamma_min=0.5) == 0.5
    assert calibrate_gamma(ids, final, w, el, q, 3, ucb_z=2.0, gamma_min=0.5) == 0.89


def test_the_returned_type_follows_the_reference_arithmetic():
    ids, w, el, q = warmup(ids=[[2, 2, 2, 2, 0]] * 3, q=[[0] * 5] * 3)
    final = np.array([2, 2, 2, 2, 0])
    floor = calibrate_gamma(ids, final, w, el, q, 3, ucb_z=1.0, gamma_min=0.5)
    assert type(floor) is float
    bumped = calibrate_gamma(ids, final, w, el, q, 3, ucb_z=2.0, gamma_min=0.5)
    assert isinstance(bumped, np.float64)
    cap = calibrate_gamma(ids, final, w, el, q, 3, ucb_z=5.0, gamma_min=0.5)
    assert type(cap) is int and cap == 1


@pytest.mark.parametrize("n", range(MIN_WARMUP))
def test_too_few_warmup_traces_give_gamma_one(n):
    ids, w, el, q = warmup(ids=[[0] * n] * 2, q=[[0.0] * n] * 2)
    assert calibrate_gamma(ids, np.zeros(n, np.int64), w, el, q, 1) == 1.0


def test_the_reference_answer_is_the_weighted_final_vote():
    """Five traces, ids (0, 0, 0, 1, 1) at both checkpoints, q = 1 everywhere.

    k = 0, unit weights: V = (3, 2), Q_0 = 3, Q_1 = 2: unseen 3 > 8γ and challenger 1 > 6γ − 2
    pass for γ ≤ 0.3, answer 0. Where nothing passes, the answer is the fallback: the vote of the
    final answers weighted by the last checkpoint's weights.

    * Unit weights: k = 1 is k = 0 again; γ ≥ 0.4 fall back to 0, so every γ answers 0 → γ = 0.
    * Answer 1's voters weigh 4 at the last checkpoint: V = (3, 8) there, so the fallback is 1;
      k = 1 passes for γ = 0.4 (8 > 19γ, 5 > 16γ − 3) with answer 1. γ = 0.4 … 1 answer 1,
      γ = 0.3 answers 0 → γ = 0.4.
    """
    ids, w, el, q = warmup(ids=[[0, 0, 0, 1, 1]] * 2, q=[[1] * 5] * 2)
    final = np.array([0, 0, 0, 1, 1])
    assert calibrate_gamma(ids, final, w, el, q, 2, ucb_z=0.0, gamma_min=0.0) == 0.0
    heavy = w.copy()
    heavy[3:, -1] = 4.0
    assert _replay(ids, heavy, el, q, 0.4, 2, fallback=9) == (1, 1)
    assert _replay(ids, heavy, el, q, 0.5, 2, fallback=9) == (9, 1)
    assert calibrate_gamma(ids, final, heavy, el, q, 2, ucb_z=0.0, gamma_min=0.0) == 0.4
