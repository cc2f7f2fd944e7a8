"""The compiled pass over every token: the reference's running sums, read where asked."""

from __future__ import annotations

import numpy as np
import pytest

from mars.method.confstats import window_sums_and_records


def _reference(values, offsets, starts, ends, window):
    """Trace by trace with numpy's cumulative sums (reference-protocol §3.2-§3.4)."""
    n = len(offsets) - 1
    sums = np.zeros(starts.shape)
    totals, counts, index, value = np.zeros(n), [], [], []
    for j in range(n):
        c = values[offsets[j] : offsets[j + 1]].astype(np.float32)
        cs = np.zeros(len(c) + 1)
        np.cumsum(c, dtype=np.float64, out=cs[1:])
        sums[j] = cs[ends[j]] - cs[starts[j]]
        totals[j] = cs[-1]
        if len(c) < window:
            gc = np.array([c.mean(dtype=np.float32) if len(c) else 0.0], np.float32)
        else:
            cs32 = np.zeros(len(c) + 1, np.float32)
            np.cumsum(c, out=cs32[1:])
            gc = (cs32[window:] - cs32[:-window]) / np.float32(window)
        low = np.minimum.accumulate(gc)
        at = np.flatnonzero(np.concatenate(([True], low[1:] < low[:-1])))
        counts.append(len(at))
        index.append(at)
        value.append(gc[at])
    return sums, totals, np.array(counts), np.concatenate(index), np.concatenate(value)


@pytest.mark.parametrize("window", [1, 3, 64, 10_000])
def test_the_pass_equals_numpys_running_sums(window):
    rng = np.random.default_rng(window)
    lengths = rng.integers(0, 3000, size=25)
    lengths[[3, 4, 9]] = 0  # empty traces, two in a row
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    values = (rng.normal(5, 4, size=offsets[-1]) * rng.choice([1, 100], offsets[-1])).astype(
        np.float16
    )
    values[rng.random(offsets[-1]) < 0.2] = 2.0  # ties
    ends = np.minimum(rng.integers(0, 3000, size=(25, 6)), lengths[:, None])
    starts = np.maximum(ends - window, 0)
    got = window_sums_and_records(values, offsets, starts, ends, window)
    want = _reference(values, offsets, starts, ends, window)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        assert np.array_equal(g, w)


def test_without_group_statistics_no_records():
    values = np.arange(10, dtype=np.float16)
    sums, totals, counts, index, value = window_sums_and_records(
        values, np.array([0, 4, 10]), np.array([[0], [1]]), np.array([[2], [6]]), 3, group=False
    )
    assert sums.tolist() == [[0 + 1], [5 + 6 + 7 + 8 + 9]] and totals.tolist() == [6.0, 39.0]
    assert counts.tolist() == [0, 0] and len(index) == len(value) == 0


@pytest.mark.slow  # a fresh interpreter compiles the pass: seconds of CPU
def test_without_a_writable_cache_it_compiles_in_the_process():
    """A read-only install with a read-only home: numba finds nowhere to cache the machine code
    (its locators all decline); the pass is then compiled in the process, the same numbers."""
    import subprocess
    import sys

    code = (
        "import numba.core.caching as c\n"
        "c.CacheImpl._locator_classes = []\n"
        "import numpy as np\n"
        "from mars.method.confstats import window_sums_and_records\n"
        "v = np.array([1, 2, 3, 4, 5], np.float16)\n"
        "out = window_sums_and_records(v, np.array([0, 5]), np.array([[1]]), np.array([[4]]), 2)\n"
        "print([a.tolist() for a in out])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[[[9.0]], [15.0], [1], [0], [1.5]]"
