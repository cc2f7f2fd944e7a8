"""Vote snapshots (mars.method.voting): weighted tallies in sample order, the leader and its two
tie rules."""

from __future__ import annotations

import numpy as np

from mars.method.voting import leader, tally


def test_tally_sums_the_weights_of_eligible_voters_per_answer():
    ids = np.array([[0, 1, 1, 2], [2, 2, 0, 1]])
    weights = np.array([[1.0, 2.0, 3.0, 4.0], [0.5, 0.25, 1.0, 8.0]])
    eligible = np.array([[True, True, False, True], [True, True, True, False]])
    votes = tally(ids, weights, eligible, 3)
    assert votes.dtype == np.float64
    assert votes.shape == (2, 3)
    # row 0: the third voter (answer 1, weight 3) is not eligible
    assert votes[0].tolist() == [1.0, 2.0, 4.0]
    # row 1: the last voter (answer 1) is not eligible
    assert votes[1].tolist() == [1.0, 0.0, 0.75]


def test_tally_broadcasts_a_uniform_weight_and_counts_heads():
    ids = np.array([[0, 0, 1, 0, 1]])
    votes = tally(ids, np.ones(1), np.ones_like(ids, dtype=bool), 3)
    assert votes.tolist() == [[3.0, 2.0, 0.0]]


def test_tally_without_answers_has_one_empty_column_per_row():
    ids = np.zeros((2, 3), dtype=np.int64)
    votes = tally(ids, np.ones(1), np.zeros((2, 3), dtype=bool), 0)
    assert votes.shape == (2, 1)
    assert not votes.any()


def test_tally_adds_in_sample_order_in_float64():
    # 0.1 + 0.2 != 0.3 in float64: answer 1 (0.1, then 0.2) beats answer 0 (0.3) by one ulp, as a
    # sequential float64 sum in sample order gives it
    ids = np.array([[1, 0, 1]])
    weights = np.array([[0.1, 0.3, 0.2]])
    votes = tally(ids, weights, np.ones((1, 3), dtype=bool), 2)
    assert votes[0, 1] == 0.1 + 0.2
    assert votes[0, 0] == 0.3
    assert leader(votes)[0].tolist() == [1]


def test_leader_is_the_argmax_and_rows_without_votes_have_none():
    votes = np.array([[1.0, 3.0, 2.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.5]])
    lead, has = leader(votes)
    assert lead.tolist() == [1, -1, 2]
    assert has.tolist() == [True, False, True]


def test_ties_go_to_the_lowest_answer_id_by_default():
    votes = np.array([[0.0, 2.0, 2.0, 1.0], [3.0, 1.0, 3.0, 0.0]])
    assert leader(votes)[0].tolist() == [1, 0]


def test_first_seen_ties_go_to_the_tied_answer_of_the_earliest_voter():
    # answers 1 and 2 tie at two votes each; the first voter holds 0 (not tied), the second 2
    ids = np.array([[0, 2, 1, 1, 2]])
    eligible = np.ones_like(ids, dtype=bool)
    votes = tally(ids, np.ones(1), eligible, 3)
    assert leader(votes)[0].tolist() == [1]  # lowest id
    assert leader(votes, ids, eligible)[0].tolist() == [2]  # first seen


def test_first_seen_ignores_voters_that_are_not_eligible_or_abstain():
    # 0 and 1 tie at two votes; trace 0 holds 1 but is not eligible, trace 1 abstained (-1), so
    # the earliest voter is trace 2, holding 0
    ids = np.array([[1, -1, 0, 1, 0, 1]])
    eligible = np.array([[False, True, True, True, True, True]]) & (ids >= 0)
    votes = tally(ids, np.ones(1), eligible, 2)
    assert votes.tolist() == [[2.0, 2.0]]
    assert leader(votes, ids, eligible)[0].tolist() == [0]
    # with trace 0 eligible, 1 leads outright: no tie to break
    eligible[0, 0] = True
    votes = tally(ids, np.ones(1), eligible, 2)
    assert leader(votes, ids, eligible)[0].tolist() == [1]


def test_first_seen_leader_of_rows_without_votes_is_minus_one():
    ids = np.array([[0, 1], [1, 0]])
    eligible = np.array([[False, False], [True, True]])
    votes = tally(ids, np.ones(1), eligible, 2)
    lead, has = leader(votes, ids, eligible)
    assert lead.tolist() == [-1, 1]
    assert has.tolist() == [False, True]
    assert lead.dtype == np.int64


def test_first_seen_with_weights_picks_among_the_heaviest_only():
    # answer 0 is seen first but weighs less: the heavier answer leads whatever the order
    ids = np.array([[0, 1, 2]])
    weights = np.array([[1.0, 2.0, 2.0]])
    eligible = np.ones_like(ids, dtype=bool)
    votes = tally(ids, weights, eligible, 3)
    assert leader(votes, ids, eligible)[0].tolist() == [1]
    assert leader(votes)[0].tolist() == [1]
