"""DeepConf-online emulation (mars.method.deepconf, reference-protocol §8) on records written by
hand: the threshold, the running-minimum filter and the truncation points."""

from __future__ import annotations

import numpy as np
import pytest

from mars.method import deepconf
from mars.method.arrays import QuestionArrays

W = 10


def arrays(min_group=None, records=None, lengths=None, conf=None):
    """Arrays of traces whose group-confidence records are given as [(window index, value), ...]
    per trace (strictly decreasing values)."""
    n = len(records) if records is not None else len(min_group)
    lengths = np.full(n, 1000) if lengths is None else np.array(lengths)
    kw = {}
    if records is not None:
        kw["rec_offsets"] = np.concatenate([[0], np.cumsum([len(r) for r in records])]).astype(
            np.int64
        )
        kw["rec_index"] = np.array([i for r in records for i, _ in r], dtype=np.int64)
        kw["rec_value"] = np.array([v for r in records for _, v in r], dtype=np.float32)
        if min_group is None:
            min_group = [r[-1][1] for r in records]
    return QuestionArrays(
        qid=0,
        ground_truth="1",
        grid=np.array([2048]),
        lengths=lengths.astype(np.int64),
        final_ids=np.zeros(n, dtype=np.int32),
        ids=np.zeros((n, 1), dtype=np.int32),
        representatives=["1"],
        correct=np.array([True]),
        conf_at_pos=None if conf is None else np.array(conf, dtype=np.float32),
        min_group=np.array(min_group, dtype=np.float32),
        window=W,
        **kw,
    )


def test_threshold_is_the_linear_90th_percentile_of_the_warmup():
    arr = arrays(min_group=np.arange(1, 21, dtype=np.float32))
    # traces 0..9 hold 1..10: the 90th percentile lies 0.1 of the way from 9 to 10
    assert deepconf.threshold(arr, np.arange(10)) == pytest.approx(9.1)
    # sixteen values: the mean of the 2nd and 3rd largest
    warm = np.arange(4, 20)
    assert deepconf.threshold(arr, warm) == pytest.approx((18 + 19) / 2)
    # only the warmup traces count, duplicates included: (1, 1, 1, 20), position 0.9·3 = 2.7
    assert deepconf.threshold(arr, np.array([0, 0, 0, 19])) == pytest.approx(1 + 0.7 * 19)
    assert isinstance(deepconf.threshold(arr, warm), np.float32)


def test_running_min_conf_never_recovers():
    conf = [[3.0, 2.0, 2.5, 1.0, 4.0], [1.0, 1.0, 1.0, 1.0, 1.0]]
    arr = arrays(min_group=[0, 0], conf=conf)
    assert deepconf.running_min_conf(arr).tolist() == [[3, 2, 2, 1, 1], [1, 1, 1, 1, 1]]


RECORDS = [
    [(0, 5.0), (30, 4.0), (70, 2.0)],
    [(0, 3.0)],
    [(0, 6.0), (5, 1.0)],
]


def test_truncation_is_the_first_record_below_tau_plus_the_window():
    arr = arrays(records=RECORDS, lengths=[1000, 800, 600])
    assert arr.truncation(np.float32(4.5)).tolist() == [30 + W, 0 + W, 5 + W]
    assert arr.truncation(np.float32(4.0)).tolist() == [70 + W, 0 + W, 5 + W]  # 4 is not below
    assert arr.truncation(np.float32(2.5)).tolist() == [70 + W, 800, 5 + W]
    assert arr.truncation(np.float32(1.0)).tolist() == [1000, 800, 600]


def test_truncations_of_many_iterations_take_each_its_own_threshold():
    arr = arrays(records=RECORDS, lengths=[1000, 800, 600])
    taus = [np.float32(4.5), np.float32(1.0), np.float32(2.5)]
    samples = np.array([[0, 1, 2, 2], [2, 0, 1, 0], [1, 1, 0, 2]])
    got = deepconf.truncations(arr, taus, samples)
    assert got.tolist() == [
        [30 + W, 0 + W, 5 + W, 5 + W],
        [600, 1000, 800, 1000],
        [800, 800, 70 + W, 5 + W],
    ]
    # a threshold of another type takes the one-at-a-time path, to the same points
    assert np.array_equal(deepconf.truncations(arr, [float(t) for t in taus], samples), got)


def test_iteration_state_thresholds_come_from_each_sample_s_first_columns():
    arr = arrays(records=RECORDS, lengths=[1000, 800, 600])  # min_group (2, 3, 1)
    samples = np.array([[0, 0, 1, 2], [2, 2, 2, 0]])
    taus, trunc = deepconf.iteration_state(arr, samples, n_warmup=2)
    assert taus == [np.float32(2.0), np.float32(1.0)]
    assert trunc.tolist() == [
        [1000, 1000, 800, 5 + W],  # τ = 2: records at 2 or above are not below it
        [600, 600, 600, 1000],  # τ = 1: nothing below
    ]
