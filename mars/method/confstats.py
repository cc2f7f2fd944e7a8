"""Per-token confidences → checkpoint confidences and DeepConf's group-confidence records.

reference-protocol §3.2-§3.4 as the reference computes it, in one compiled pass over every token
(numba): each trace's float64 running sum (the checkpoint confidence is the float64 sum of a
window, read off it) and float32 running sum (a group confidence is the float32 difference of two
of its values over the window, divided by it), and the running minimum of the group confidences,
kept where it falls (strictly). The same additions in the same order as the reference's
``np.cumsum`` calls, so the same numbers bit for bit; numpy needs several passes and temporary
arrays for what is here one loop (a paper-scale question: 1.27 s → 0.29 s).
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: float16 bit pattern → float32 value (exact), for widening inside the compiled loop
_WIDEN = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


def _compiled(fn):
    """``fn`` compiled by numba, the machine code kept in numba's cache (beside this file, else
    the user's cache folder); where neither can be written (a read-only install and home), it
    is compiled in each process instead (3.8 s) rather than failing."""
    try:
        return njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        return njit(nogil=True)(fn)


@_compiled
def _records_into(cs32, length, window, out_index, out_value):  # pragma: no cover - compiled
    """Group confidences (cs32[g + W] - cs32[g]) / W of one trace where their running minimum
    falls (strictly): written to ``out_*``, their number returned."""
    low = np.float32(np.inf)
    w = np.float32(window)
    count = 0
    for g in range(length - window + 1):
        gc = (cs32[g + window] - cs32[g]) / w
        if gc < low or g == 0:  # the first always (NaN included: never from a checked pool)
            low = gc
            out_index[count] = g
            out_value[count] = gc
            count += 1
    return count


@_compiled
def _pass(bits, offsets, starts, ends, window, group, widen):  # pragma: no cover - compiled
    n = len(offsets) - 1
    m = starts.shape[1]
    sums = np.zeros((n, m), np.float64)
    totals = np.zeros(n, np.float64)
    counts = np.zeros(n, np.int64)
    longest = 0
    for j in range(n):
        longest = max(longest, offsets[j + 1] - offsets[j])
    cs64 = np.zeros(longest + 1, np.float64)  # cs64[t]: the float64 sum of the first t tokens
    cs32 = np.zeros(longest + 1, np.float32)
    index = np.empty(longest + 1, np.int64)
    value = np.empty(longest + 1, np.float32)
    index_parts = []
    value_parts = []
    for j in range(n):
        at = offsets[j]
        length = offsets[j + 1] - at
        s64 = 0.0
        s32 = np.float32(0.0)
        for t in range(length):
            c = widen[bits[at + t]]
            s64 += np.float64(c)
            s32 = s32 + c
            cs64[t + 1] = s64
            cs32[t + 1] = s32
        for k in range(m):
            sums[j, k] = cs64[ends[j, k]] - cs64[starts[j, k]]
        totals[j] = cs64[length]
        if group and length >= window:
            count = _records_into(cs32, length, window, index, value)
            counts[j] = count
            index_parts.append(index[:count].copy())
            value_parts.append(value[:count].copy())
    total = 0
    for part in index_parts:
        total += len(part)
    rec_index = np.empty(total, np.int64)
    rec_value = np.empty(total, np.float32)
    p = 0
    for i in range(len(index_parts)):
        c = len(index_parts[i])
        rec_index[p : p + c] = index_parts[i]
        rec_value[p : p + c] = value_parts[i]
        p += c
    return sums, totals, counts, rec_index, rec_value


def window_sums_and_records(
    values: np.ndarray,
    offsets: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    window: int,
    group: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For traces ``values[offsets[j]:offsets[j + 1]]`` (float16): the float64 sums of the tokens
    ``[starts[j, k], ends[j, k])`` ([n, m]), each trace's float64 total, and (``group``) the
    running-minimum records of its group confidences: count per trace, index and value.

    A trace shorter than the window has one group confidence, the float32 mean of its tokens
    (0 when empty), which is its only record.
    """
    values = np.ascontiguousarray(values, dtype=np.float16)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    sums, totals, counts, rec_index, rec_value = _pass(
        values.view(np.uint16),
        offsets,
        np.ascontiguousarray(starts, dtype=np.int64),
        np.ascontiguousarray(ends, dtype=np.int64),
        int(window),
        bool(group),
        _WIDEN,
    )
    lengths = np.diff(offsets)
    short = np.flatnonzero(lengths < window)
    if group and len(short):  # numpy's float32 mean (pairwise), as the reference takes it
        means = np.array(
            [
                values[offsets[j] : offsets[j + 1]].astype(np.float32).mean(dtype=np.float32)
                if lengths[j]
                else 0.0
                for j in short
            ],
            dtype=np.float32,
        )
        first = np.concatenate([[0], np.cumsum(counts)])[:-1]  # each trace's first record
        rec_index = np.insert(rec_index, first[short], 0)
        rec_value = np.insert(rec_value, first[short], means)
        counts[short] = 1
    return sums, totals, counts, rec_index, rec_value


def warm_up() -> None:
    """Compile the pass (or load it from numba's cache) before worker processes fork."""
    window_sums_and_records(
        np.ones(4, np.float16), np.array([0, 4]), np.zeros((1, 1)), np.ones((1, 1)), 2
    )
