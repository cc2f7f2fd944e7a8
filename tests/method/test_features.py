"""Switch-model features and labels (mars.method.features, reference-protocol §6) on arrays
built by hand."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mars.method.arrays import QuestionArrays
from mars.method.features import (
    FEATURE_NAMES,
    RunningFeatures,
    flips_and_streaks,
    question_features,
    switch_labels,
)


def arrays(ids, final_ids, conf=None, grid=None):
    ids = np.array(ids, dtype=np.int32)
    n, m = ids.shape
    return QuestionArrays(
        qid=0,
        ground_truth="1",
        grid=np.arange(1, m + 1, dtype=np.int64) * 2048 if grid is None else np.array(grid),
        lengths=np.full(n, 2048 * (m + 1), dtype=np.int64),
        final_ids=np.array(final_ids, dtype=np.int32),
        ids=ids,
        representatives=["0", "1", "2"],
        correct=np.array([False, True, False]),
        conf_at_pos=None if conf is None else np.array(conf, dtype=np.float32),
    )


def test_flips_count_changes_and_streaks_the_run_so_far():
    ids = np.array([[0, 0, 1, 1, 1, -1, -1, 0], [2, 2, 2, 2, 2, 2, 2, 2]])
    flips, streaks = flips_and_streaks(ids)
    # changes to and from -1 count; -1 followed by -1 is a run
    assert flips.tolist() == [[0, 0, 1, 1, 1, 2, 2, 3], [0] * 8]
    assert streaks.tolist() == [[1, 2, 1, 2, 3, 1, 2, 1], [1, 2, 3, 4, 5, 6, 7, 8]]
    assert flips.dtype == np.int64 and streaks.dtype == np.int64


def test_a_change_back_is_a_new_streak():
    flips, streaks = flips_and_streaks(np.array([[1, 0, 1, 0]]))
    assert flips.tolist() == [[0, 1, 2, 3]]
    assert streaks.tolist() == [[1, 1, 1, 1]]


def test_feature_columns():
    conf = [[1.0, 0.5, 0.75], [2.0, 2.0, 1.0]]
    arr = arrays([[0, 1, 1], [2, 2, 0]], [1, 0], conf=conf)
    X = question_features(arr)
    assert FEATURE_NAMES == ("position", "confidence", "flips", "streak", "conf_trend")
    assert X.shape == (2, 3, 5) and X.dtype == np.float64
    assert X[..., 0].tolist() == [[2048, 4096, 6144]] * 2
    assert X[..., 1].tolist() == conf
    assert X[..., 2].tolist() == [[0, 1, 1], [0, 0, 1]]
    assert X[..., 3].tolist() == [[1, 1, 2], [1, 2, 1]]
    # the confidence change from the checkpoint before, 0 at the first
    assert X[..., 4].tolist() == [[0.0, -0.5, 0.25], [0.0, 0.0, -1.0]]


def test_trend_is_taken_in_float64_from_the_float32_values():
    conf = np.array([[0.1, 0.3]], dtype=np.float32)
    X = question_features(arrays([[0, 0]], [0], conf=conf))
    assert X[0, 1, 4] == np.float64(conf[0, 1]) - np.float64(conf[0, 0])
    assert X[0, 1, 4] != 0.3 - 0.1


def test_without_confidences_the_confidence_columns_are_zero():
    X = question_features(arrays([[0, 1], [1, 1]], [1, 1]))
    assert not X[..., 1].any() and not X[..., 4].any()
    assert X[..., 2].tolist() == [[0, 1], [0, 0]]


def test_features_of_selected_traces_are_their_rows():
    conf = [[1.0, 0.5], [2.0, 2.0], [0.25, 0.5]]
    arr = arrays([[0, 1], [2, 2], [1, 0]], [1, 2, 0], conf=conf)
    every = question_features(arr)
    some = question_features(arr, np.array([2, 0]))
    assert np.array_equal(some, every[[2, 0]])
    assert np.array_equal(switch_labels(arr, np.array([2, 0])), switch_labels(arr)[[2, 0]])


def test_switch_labels_mark_answers_other_than_the_final():
    arr = arrays([[0, 1, 1], [2, -1, 0], [-1, -1, -1]], [1, 0, -1])
    y = switch_labels(arr)
    assert y.dtype == np.float32
    # an abstention differs from a final answer; no answer at all matches a missing final
    assert y.tolist() == [[1, 0, 0], [1, 1, 0], [0, 0, 0]]


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda n: st.integers(1, 8).flatmap(
            lambda m: st.tuples(
                st.lists(
                    st.lists(st.integers(-1, 3), min_size=m, max_size=m), min_size=n, max_size=n
                ),
                st.none()
                | st.lists(
                    st.lists(st.floats(0, 20, width=32), min_size=m, max_size=m),
                    min_size=n,
                    max_size=n,
                ),
            )
        )
    )
)
def test_running_features_are_the_batch_column_at_each_checkpoint(case):
    """The live twin (RunningFeatures), fed one checkpoint at a time, gives the batch's
    (question_features) column there to the bit, with or without confidences."""
    ids, conf = case
    arr = arrays(ids, [0] * len(ids), conf)
    batch = question_features(arr)
    running = RunningFeatures(len(ids))
    for k, p in enumerate(arr.grid):
        column = None if arr.conf_at_pos is None else arr.conf_at_pos[:, k]
        X = running.next(int(p), arr.ids[:, k], column)
        assert X.dtype == batch.dtype and np.array_equal(X, batch[:, k])
