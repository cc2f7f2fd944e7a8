"""Per-question arrays (mars.method.arrays) of a question built by hand: the checkpoint grid,
answer ids per trace and checkpoint, lengths, confidences, DeepConf's truncation points, answer
order, validation and the on-disk cache."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mars.method import arrays as arrays_module
from mars.method.arrays import (
    QuestionArrays,
    RunningConfidence,
    arrays_path,
    build_arrays,
    cache_key,
    checkpoint_answers,
    checkpoint_confidences,
    digest_arrays,
    load_arrays,
    read_cached,
)
from mars.store.pool import PoolError, QuestionData

W = 4  # confidence window of these tests (tokens)
LENGTHS = [3000, 5000, 1500, 4096]


def confs():
    """Per-token confidences: 1 everywhere but trace 0's token 2048 (5) and trace 1's tokens
    100-103 (0.5)."""
    per = [np.ones(n, dtype=np.float16) for n in LENGTHS]
    per[0][2048] = 5.0
    per[1][100:104] = 0.5
    return per


def question(gt="7", with_confs=True, drop_probe=False, probe_cost=True):
    """Four traces on the 2048-token grid.

    * 0: 3000 tokens, final "7"; probes "8" at 2048, "7" at 3000 (its end: not on the grid);
    * 1: 5000 tokens, final "7"; probes "7" at 2048, abstained at 4096;
    * 2: 1500 tokens, no final answer, no probe (finished before the first checkpoint);
    * 3: 4096 tokens, final "8"; probe "8" at 2048 (finished at 4096: p == length).
    """
    positions = [2048, 3000, 2048, 4096, 2048]
    codes = [0, 1, 1, -1, 0]  # into ("8", "7"); -1 abstained
    offsets = [0, 2, 4, 4, 5]
    cost = [[100, 80, 6], [0, 0, 0], [50, 60, 5], [-1, 0, 3], [10, 10, 2]]
    if drop_probe:  # trace 1 loses its probe at 4096, where it still runs
        positions, codes, cost = (
            positions[:3] + positions[4:],
            codes[:3] + codes[4:],
            cost[:3] + cost[4:],
        )
        offsets = [0, 2, 3, 3, 4]
    c = confs()
    return QuestionData(
        qid=3,
        ground_truth=gt,
        trace_idx=np.arange(4, dtype=np.int64),
        lengths=np.array(LENGTHS, dtype=np.int64),
        final_answers=["7", "7", None, "8"],
        probe_offsets=np.array(offsets, dtype=np.int64),
        probe_positions=np.array(positions, dtype=np.int64),
        probe_codes=np.array(codes, dtype=np.int32),
        probe_strings=["8", "7"],
        conf_offsets=np.concatenate([[0], np.cumsum(LENGTHS)]).astype(np.int64)
        if with_confs
        else None,
        conf_values=np.concatenate(c) if with_confs else None,
        probe_cost=np.array(cost, dtype=np.int64) if probe_cost else None,
    )


@pytest.fixture(scope="module")
def arr():
    return build_arrays(question(), window=W)


def test_grid_is_the_probe_positions_on_the_spacing(arr):
    assert arr.grid.tolist() == [2048, 4096]
    assert arr.n_checkpoints == 2
    assert arr.grid.dtype == np.int64


def test_answer_groups_follow_first_appearance_finals_first(arr):
    assert arr.representatives == ["7", "8"]
    assert arr.n_answers == 2
    assert arr.correct.tolist() == [True, False]
    assert build_arrays(question(gt="8"), window=W).correct.tolist() == [False, True]


def test_ids_are_probes_while_running_and_finals_once_finished(arr):
    assert arr.ids.tolist() == [
        [1, 0],  # probe "8"; finished at 3000 ≤ 4096: final "7"
        [0, -1],  # probe "7"; abstained at 4096 while running
        [-1, -1],  # finished without a final answer
        [1, 1],  # probe "8"; 4096 == its length: finished, final "8"
    ]
    assert arr.final_ids.tolist() == [0, 0, -1, 1]
    assert arr.ids.dtype == np.int32 and arr.final_ids.dtype == np.int32


def test_lengths_pool_and_warmup(arr):
    assert arr.lengths.tolist() == LENGTHS
    assert arr.n_traces == 4
    assert arr.pool_ids().tolist() == [0, 1, 3]  # trace 2 has no final answer
    assert arr.warmup_ids(2).tolist() == [0, 1]
    assert arr.warmup_ids(10).tolist() == [0, 1, 3]
    # a trace runs at checkpoint k while grid[k] < its length
    assert arr.run_checkpoints.tolist() == [1, 2, 0, 1]


def test_a_trace_stopped_live_runs_one_token_longer(arr):
    stopped = QuestionArrays(**{**arr.__dict__, "stopped": np.array([False, False, False, True])})
    assert stopped.run_lengths.tolist() == [3000, 5000, 1500, 4097]
    assert stopped.run_checkpoints.tolist() == [1, 2, 0, 2]
    assert arr.run_lengths.tolist() == LENGTHS


def test_probe_tokens_are_generated_plus_uncached_prompt(arr):
    assert arr.probe_tokens.tolist() == [
        [6 + 20, -1],  # no probe of trace 0 on the grid at 4096
        [5 + 0, -1],  # more cached than prompt counts 0; an unknown count is -1
        [-1, -1],
        [2, -1],
    ]
    assert build_arrays(question(probe_cost=False), window=W).probe_tokens is None


def test_a_running_trace_without_a_probe_is_refused():
    # without that probe no trace is probed at 4096, so the grid stops at 2048 ...
    assert build_arrays(question(drop_probe=True), window=W).grid.tolist() == [2048]
    # ... but on a given grid trace 1 runs at 4096 with no answer there
    with pytest.raises(PoolError, match=r"trace 1: .*no probe at checkpoint 4096"):
        build_arrays(question(drop_probe=True), window=W, grid=np.array([2048, 4096]))


def test_checkpoint_confidence_is_the_window_ending_at_the_probe(arr):
    # trace 0 at 2048: tokens 2045..2048 = (1, 1, 1, 5) → 2; finished at 4096: its whole mean
    assert arr.conf_at_pos.dtype == np.float32
    assert arr.conf_at_pos[0, 0] == 2.0
    assert arr.conf_at_pos[0, 1] == np.float32((2999 + 5) / 3000)
    # trace 1 runs at both checkpoints, its dip at tokens 100-103 in neither window
    assert arr.conf_at_pos[1].tolist() == [1.0, 1.0]
    # trace 3: a window of ones at 2048, the mean of its ones once finished at 4096
    assert arr.conf_at_pos[3].tolist() == [1.0, 1.0]


def test_live_confidence_is_the_window_before_the_probe():
    live = build_arrays(question(), window=W, conf_window="before", group_stats=False)
    assert live.conf_at_pos[0, 0] == 1.0  # tokens 2044..2047
    assert live.min_group is None and live.rec_value is None
    with pytest.raises(ValueError, match="conf_window"):
        build_arrays(question(), window=W, conf_window="after")


def test_group_confidence_records_and_truncation(arr):
    # trace 1's windows of 4 tokens starting at 97, 98, 99, 100 hold 1, 2, 3, 4 tokens of 0.5
    assert arr.min_group.tolist() == [1.0, 0.5, 1.0, 1.0]
    lo, hi = arr.rec_offsets[1], arr.rec_offsets[2]
    assert arr.rec_index[lo:hi].tolist() == [0, 97, 98, 99, 100]
    assert arr.rec_value[lo:hi].tolist() == [1.0, 0.875, 0.75, 0.625, 0.5]
    # the first window below τ, plus W; no window below τ: the whole trace
    assert arr.truncation(np.float32(0.9)).tolist() == [3000, 97 + W, 1500, 4096]
    assert arr.truncation(np.float32(0.7)).tolist() == [3000, 99 + W, 1500, 4096]
    assert arr.truncation(np.float32(0.5)).tolist() == LENGTHS  # strictly below
    assert arr.truncation(np.float32(1.5)).tolist() == [0 + W] * 4


def test_without_confidences():
    plain = build_arrays(question(with_confs=False), window=W)
    assert not plain.has_confs
    assert plain.conf_at_pos is None and plain.min_group is None
    assert plain.ids.tolist() == build_arrays(question(), window=W).ids.tolist()


def test_checkpoint_answers_are_strings(arr):
    got = checkpoint_answers(question(), arr.grid)
    assert got.tolist() == [["8", "7"], ["7", None], [None, None], ["8", "8"]]


def test_with_answer_order_relabels_groups_and_keeps_no_answer(arr):
    swapped = arr.with_answer_order([1, 0])
    assert swapped.representatives == ["8", "7"]
    assert swapped.correct.tolist() == [False, True]
    assert swapped.ids.tolist() == [[0, 1], [1, -1], [-1, -1], [0, 0]]
    assert swapped.final_ids.tolist() == [1, 1, -1, 0]
    assert arr.ids.tolist()[0] == [1, 0]  # the original is untouched
    with pytest.raises(ValueError, match="permutation"):
        arr.with_answer_order([0, 0])


def test_check_accepts_built_arrays_and_refuses_misfits(arr):
    arr.check()
    bad_id = arr.with_answer_order([0, 1])
    bad_id.ids = bad_id.ids.copy()
    bad_id.ids[0, 0] = 2
    with pytest.raises(ValueError, match=r"ids outside -1\.\.1"):
        bad_id.check()
    bad_grid = arr.with_answer_order([0, 1])
    bad_grid.grid = np.array([4096, 2048])
    with pytest.raises(ValueError, match="grid not increasing"):
        bad_grid.check()
    bad_shape = arr.with_answer_order([0, 1])
    bad_shape.conf_at_pos = arr.conf_at_pos[:, :1]
    with pytest.raises(ValueError, match="conf_at_pos"):
        bad_shape.check()


def test_save_and_load_round_trip_under_a_key(arr, tmp_path):
    path = tmp_path / "q.npz"
    arr.save(path, key="abc")
    back = QuestionArrays.load(path, key="abc")
    for name in ("grid", "lengths", "final_ids", "ids", "correct", "conf_at_pos", "rec_value"):
        assert np.array_equal(getattr(back, name), getattr(arr, name)), name
    assert back.representatives == arr.representatives
    assert back.window == W and back.qid == 3
    with pytest.raises(ValueError, match="other traces or settings"):
        QuestionArrays.load(path, key="other")
    assert read_cached(path, "other") is None
    assert read_cached(tmp_path / "missing.npz", "abc") is None
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    assert read_cached(tmp_path / "junk.npz", "abc") is None


def test_load_arrays_caches_by_content_and_settings(tmp_path, monkeypatch):
    q = question()
    first = load_arrays(q, tmp_path, window=W)
    path = arrays_path(tmp_path, q, 2048, W)
    assert path.exists()

    def no_build(*a, **k):
        raise AssertionError("rebuilt a cached question")

    monkeypatch.setattr(arrays_module, "build_arrays", no_build)
    again = load_arrays(q, tmp_path, window=W)
    assert np.array_equal(again.ids, first.ids)
    # another ground truth is another question's content: not served from the cache
    with pytest.raises(AssertionError, match="rebuilt"):
        load_arrays(question(gt="8"), tmp_path, window=W)


def test_cache_key_names_content_and_settings():
    q = question()
    key = cache_key(q, 2048, W)
    assert key == cache_key(question(), 2048, W)
    assert key != cache_key(q, 1024, W)
    assert key != cache_key(q, 2048, 2 * W)
    assert key != cache_key(question(gt="8"), 2048, W)
    assert key != cache_key(question(probe_cost=False), 2048, W)


def test_digest_arrays_sees_dtype_shape_and_bytes():
    a = np.arange(6, dtype=np.int64)
    assert digest_arrays(a) == digest_arrays(a.copy())
    assert digest_arrays(a) != digest_arrays(a.astype(np.int32))
    assert digest_arrays(a) != digest_arrays(a.reshape(2, 3))
    b = a.copy()
    b[5] = 7
    assert digest_arrays(a) != digest_arrays(b)
    assert digest_arrays(a, b) != digest_arrays(b, a)


def bare_question(token_confs: list[np.ndarray]) -> QuestionData:
    """Traces with these per-token confidences and no probes (all the confidences need)."""
    n = len(token_confs)
    lengths = np.array([len(c) for c in token_confs], dtype=np.int64)
    return QuestionData(
        qid=0,
        ground_truth="1",
        trace_idx=np.arange(n, dtype=np.int64),
        lengths=lengths,
        final_answers=[None] * n,
        probe_offsets=np.zeros(n + 1, dtype=np.int64),
        probe_positions=np.zeros(0, dtype=np.int64),
        probe_codes=np.zeros(0, dtype=np.int32),
        probe_strings=[],
        conf_offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        conf_values=np.concatenate([*token_confs, np.zeros(0, np.float16)]).astype(np.float16),
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.floats(0, 30, width=16), max_size=40).map(lambda v: np.array(v, np.float16)),
        min_size=1,
        max_size=4,
    ),
    st.integers(1, 9),
    st.integers(1, 12),
    st.integers(1, 6),
)
def test_running_confidence_is_the_batch_at_each_checkpoint(token_confs, window, spacing, m):
    """The live twin (RunningConfidence), fed what an engine holds at each checkpoint (the tokens
    so far while a trace runs, all of them once it has ended), gives the batch's
    (checkpoint_confidences, window before the probe) value there to the bit."""
    grid = np.arange(1, m + 1, dtype=np.int64) * spacing
    batch = checkpoint_confidences(bare_question(token_confs), grid, window, conf_window="before")
    running = RunningConfidence(len(token_confs), window)
    for k, p in enumerate(grid.tolist()):
        for j, c in enumerate(token_confs):
            runs = len(c) > p
            value = running.at(j, p, c[:p] if runs else c, runs)
            assert np.float32(value) == batch[j, k], (j, p)
