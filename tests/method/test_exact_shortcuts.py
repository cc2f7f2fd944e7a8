"""The simulator's shortcuts compute exactly what the straightforward computation computes.

Each fast path (the compiled pass over every token's confidence, every iteration's DeepConf
truncation at once, the margin test's terms selected once, a checkpoint's
vote shared by the methods voting alike, probe costs from per-trace sums) is checked here against
the plain computation it replaces, bit for bit, on random inputs that include its edge cases.
"""

from __future__ import annotations

import numpy as np
import pytest
from util import write_layout_pool

from mars.method import arrays, deepconf
from mars.method.arrays import build_arrays
from mars.method.registry import parse_methods
from mars.method.settings import Settings
from mars.method.stopping import Margin, _challengers, margin
from mars.method.voting import leader, tally
from mars.method.walk import MethodRun, QuestionContext
from mars.simulate.driver import simulate_question
from mars.store.pool import QuestionData, open_pool


def plain_confidence_stats(q: QuestionData, grid: np.ndarray, window: int, finished_at):
    """reference-protocol §3.2-§3.4 as written: float64 running sum for the checkpoint
    confidence, float32 running sum and running minimum for the group confidences."""
    n, m = q.n_traces, len(grid)
    conf = np.empty((n, m), np.float32)
    lows, rec_idx, rec_val = [], [], []
    for j in range(n):
        c32 = q.confs(j).astype(np.float32)
        L = len(c32)
        cs = np.zeros(L + 1)
        np.cumsum(c32, dtype=np.float64, out=cs[1:])
        ends = np.minimum(grid, L - 1) + 1
        starts = np.maximum(ends - window, 0)
        vals = (cs[ends] - cs[starts]) / np.maximum(ends - starts, 1) if L else np.zeros(m)
        conf[j] = np.where(finished_at[j], cs[L] / L if L else 0.0, vals).astype(np.float32)
        if L < window:
            gc = np.array([c32.mean(dtype=np.float32) if L else 0.0], np.float32)
        else:
            cs32 = np.zeros(L + 1, np.float32)
            np.cumsum(c32, dtype=np.float32, out=cs32[1:])
            gc = (cs32[window:] - cs32[:-window]) / np.float32(window)
        run = np.minimum.accumulate(gc)
        at = np.flatnonzero(np.concatenate(([True], run[1:] < run[:-1])))
        lows.append(run[-1])
        rec_idx.append(at)
        rec_val.append(run[at])
    return conf, np.array(lows, np.float32), rec_idx, rec_val


@pytest.mark.parametrize("scale", [1.0, 3000.0])  # 3000: float64 sums no longer exact
def test_confidence_statistics_equal_the_plain_computation(tmp_path, scale):
    pool = write_layout_pool(tmp_path / "pool", seed=3, n_questions=2, n=30, max_len=40_000)
    for qid in (0, 1):
        q = open_pool(pool).read_question(qid)
        rng = np.random.default_rng(qid)
        assert q.conf_values is not None and q.conf_offsets is not None
        q.conf_values = (rng.random(q.conf_values.size) * 20 * scale).astype(np.float16)
        q.conf_values[rng.random(q.conf_values.size) < 0.3] = 12.0  # ties in the windows
        if scale > 1:  # partial sums beyond 2^53 multiples of float16's 2^-24: rounded
            assert float(q.conf_values.max()) * int(q.lengths.max()) > 2.0**29
        for window in (2048, 1000, 5000):
            arr = build_arrays(q, 2048, window)
            finished = arr.grid[None, :] >= arr.lengths[:, None]
            conf, lows, rec_idx, rec_val = plain_confidence_stats(q, arr.grid, window, finished)
            assert np.array_equal(arr.conf_at_pos, conf)
            assert np.array_equal(arr.min_group, lows)
            assert arr.rec_offsets is not None and arr.rec_index is not None
            assert np.array_equal(np.diff(arr.rec_offsets), [len(r) for r in rec_idx])
            assert np.array_equal(arr.rec_index, np.concatenate(rec_idx))
            assert np.array_equal(arr.rec_value, np.concatenate(rec_val))


def test_confidence_statistics_of_awkward_traces():
    """Each trace's own numbers: empty traces, traces shorter than the window (one after
    another), negative confidences, sums that float64 rounds beside exact ones, windows ending at
    or before the probe."""
    rng = np.random.default_rng(7)
    lengths = np.array([0, 5, 2047, 2048, 2049, 0, 9000, 4096, 30_000, 1, 6000, 0, 7000], np.int64)
    values = (rng.random(int(lengths.sum())) * 20).astype(np.float16)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    values[offsets[12] :] = np.linspace(20, 0.5, 7000)  # falling: a record at nearly every token
    values[offsets[6] : offsets[6] + 50] *= np.float16(-1)  # negative confidences
    values[offsets[8] : offsets[9]] = np.float16(60_000.0)  # beyond the exact bound
    values[offsets[10] : offsets[11]] = values[offsets[10]]  # ties everywhere
    n = len(lengths)
    q = QuestionData(
        qid=0,
        ground_truth="1",
        trace_idx=np.arange(n, dtype=np.int64),
        lengths=lengths,
        final_answers=[None] * n,
        probe_offsets=np.zeros(n + 1, dtype=np.int64),
        probe_positions=np.zeros(0, dtype=np.int64),
        probe_codes=np.zeros(0, dtype=np.int32),
        probe_strings=[],
        conf_offsets=offsets,
        conf_values=values,
    )
    grid = np.arange(0, 32_768, 2048, dtype=np.int64)
    finished = grid[None, :] >= lengths[:, None]
    for window in (2048, 1000):
        conf, lows, rec_idx, rec_val = plain_confidence_stats(q, grid, window, finished)
        got = arrays._confidence_stats(q, grid, window, finished)
        assert np.array_equal(got[0], conf) and got[0].dtype == np.float32
        assert np.array_equal(got[1], lows) and got[1].dtype == np.float32
        assert np.array_equal(np.diff(got[2]), [len(r) for r in rec_idx])
        assert np.array_equal(got[3], np.concatenate(rec_idx)) and got[3].dtype == np.int64
        assert np.array_equal(got[4], np.concatenate(rec_val)) and got[4].dtype == np.float32
        # a live run's window (the W tokens before the probe), checkpoint confidences only
        before = arrays._confidence_stats(q, grid, window, finished, "before", group_stats=False)
        ends = np.minimum(grid[None, :], lengths[:, None])
        starts = np.maximum(ends - window, 0)
        for j in range(n):
            cs = np.zeros(lengths[j] + 1)
            np.cumsum(q.confs(j).astype(np.float32), dtype=np.float64, out=cs[1:])
            vals = (cs[ends[j]] - cs[starts[j]]) / np.maximum(ends[j] - starts[j], 1)
            whole = cs[-1] / lengths[j] if lengths[j] else 0.0
            assert np.array_equal(
                before[0][j], np.where(finished[j], whole, vals).astype(np.float32)
            )


def test_truncations_of_every_iteration_equal_one_threshold_at_a_time(tmp_path):
    pool = write_layout_pool(tmp_path / "pool", seed=4, n_questions=1, n=50, max_len=30_000)
    arr = build_arrays(open_pool(pool).read_question(0))
    rng = np.random.default_rng(1)
    samples = rng.integers(0, arr.n_traces, size=(40, 64))
    assert arr.min_group is not None
    lo, hi = float(arr.min_group.min()), float(arr.min_group.max())
    taus = [np.float32(t) for t in rng.uniform(lo - 0.01, hi + 0.01, 40)]
    taus[:4] = [np.float32(-1), np.float32(1e9), arr.min_group[3], taus[4]]  # edges and a tie
    one_by_one = np.stack([arr.truncation(t)[s] for t, s in zip(taus, samples)])
    assert np.array_equal(deepconf.truncations(arr, taus, samples), one_by_one)
    as_floats = [float(t) for t in taus]  # another type: compared as truncation() compares it
    one_by_one = np.stack([arr.truncation(t)[s] for t, s in zip(as_floats, samples)])
    assert np.array_equal(deepconf.truncations(arr, as_floats, samples), one_by_one)


def plain_margin(votes, lead, has_votes, ids, weights, eligible, q, gamma, epsilon, strict):
    """The margin test term by term, every challenger's costs built in full."""
    R = len(lead)
    base = gamma * weights
    is_lead = ids == lead[:, None]
    thr_unseen = np.sum(q * (np.where(is_lead, base * 2, base) * eligible), axis=-1)
    v_lead = votes[np.arange(R), np.maximum(lead, 0)]
    eps = 0.0 if epsilon is None else epsilon
    cmp = np.greater if strict else np.greater_equal
    ok = has_votes & cmp(v_lead, thr_unseen + eps)
    chal = _challengers(votes, lead)
    if chal.shape[1]:
        own = ids[:, None, :] == chal[:, :, None]
        cost = (
            np.where(
                is_lead[:, None, :],
                (base * 2)[:, None, :],
                np.where(own, (-weights)[:, None, :], base[:, None, :]),
            )
            * eligible[:, None, :]
        )
        thr = np.sum(q[:, None, :] * cost, axis=-1)
        v_chal = np.take_along_axis(votes, np.maximum(chal, 0), axis=1)
        eps_k = eps if np.ndim(eps) == 0 else eps[:, None]
        ok &= (cmp(v_lead[:, None] - v_chal, thr + eps_k) | (chal < 0)).all(axis=1)
    return ok


def test_margin_equals_the_term_by_term_formula():
    rng = np.random.default_rng(2)
    for t in range(1500):
        R, B, A = int(rng.integers(1, 9)), int(rng.integers(1, 40)), int(rng.integers(1, 7))
        ids = rng.integers(-1, A, size=(R, B)).astype(np.int32)
        eligible = (rng.random((R, B)) < 0.8) & (ids >= 0)
        weights = [
            np.ones((R, B)),
            (rng.random((R, B)) * 10).astype(np.float32),
            rng.random((R, B)) * 10,
        ][t % 3]
        q = rng.random((R, B)).astype(np.float32)
        gamma = [1.0, 0.7, np.float64(0.63), 1, np.float32(0.8)][t % 5]
        votes = tally(ids, weights, eligible, A)
        lead, has = leader(votes)
        eps = None if t % 4 else rng.random(R) * 2
        strict = bool(t % 2)
        got = margin(votes, lead, has, ids, weights, eligible, q, gamma, eps, strict)
        assert isinstance(got, Margin)
        want = plain_margin(votes, lead, has, ids, weights, eligible, q, gamma, eps, strict)
        assert np.array_equal(got.passed, want)


def test_methods_sharing_a_question_decide_as_they_do_alone(tmp_path):
    """Votes shared across methods, probe costs from shared sums: each method's result equals
    its result in a context of its own."""
    pool = write_layout_pool(tmp_path / "pool", seed=5, n_questions=2, n=60, abstain=0.1)
    settings = Settings(budget=24, iterations=6, warmup=8)
    methods = parse_methods("all")
    for qid in (0, 1):
        arr = build_arrays(open_pool(pool).read_question(qid))
        together = simulate_question(arr, methods, settings).methods
        for m in methods:
            alone = MethodRun(QuestionContext.sample(arr, settings), m).run()
            for field in ("answer", "tokens", "position", "stopped_by", "probe_tokens"):
                a, b = getattr(together[m.name], field), getattr(alone, field)
                assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), (m.name, field)


def plain_probe_tokens(run: MethodRun, stop_k: np.ndarray, until: np.ndarray | None):
    """Every probe counted: a sampled trace at checkpoint k ≤ the stop while it runs (and, when
    the rule stopped charging it, at a checkpoint up to that position)."""
    arr, m = run.arr, len(run.arr.grid)
    probed_until = run.run_lens
    if until is not None:
        probed_until = np.minimum(run.run_lens, np.minimum(until, run.run_lens) + 1)
    probed = (arr.grid[None, None, :] < probed_until[:, :, None]) & (
        np.arange(m)[None, None, :] <= stop_k[:, None, None]
    )
    cost = arr.probe_tokens[run.samples]
    out = np.where(probed, np.maximum(cost, 0), 0).sum(axis=(1, 2)).astype(np.float64)
    out[(probed & (cost < 0)).any(axis=(1, 2))] = np.nan
    return out


def test_probe_cost_from_shared_sums_equals_the_direct_count(tmp_path):
    pool = write_layout_pool(tmp_path / "pool", seed=6, n_questions=1, n=40)
    arr = build_arrays(open_pool(pool).read_question(0))
    assert arr.probe_tokens is not None
    arr.probe_tokens[3, 1] = -1  # one unknown cost
    ctx = QuestionContext.sample(arr, Settings(budget=16, iterations=8, warmup=4))
    run = MethodRun(ctx, parse_methods("sc-mars")[0])
    stop_k = np.arange(8) % (len(arr.grid) + 1)
    never = np.full(run.samples.shape, np.iinfo(np.int64).max)  # charged to the end: the same
    rng = np.random.default_rng(0)
    pruned = np.where(  # some traces stop being charged: before, at and between checkpoints
        rng.random(run.samples.shape) < 0.5,
        rng.choice(np.concatenate([[0], arr.grid - 1, arr.grid, arr.grid + 7]), run.samples.shape),
        never,
    )
    for until in (None, never, pruned):
        assert np.array_equal(
            run._probe_tokens(stop_k, until),
            plain_probe_tokens(run, stop_k, until),
            equal_nan=True,
        )
