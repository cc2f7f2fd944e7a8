"""Per-question arrays: answer ids per trace and checkpoint, lengths, confidence statistics.

Everything the simulator needs from a question, computed once (reference-protocol §1.3–§3):

* the checkpoint grid (sorted union of probe positions that are multiples of the spacing);
* ``ids[j, k]``: the answer group of trace ``j`` at checkpoint ``k`` (its final answer once
  ``grid[k] >= length``, else its probe answer; -1 = no answer / abstained);
* confidence statistics with the reference's numerics: checkpoint confidence (float64 cumulative
  sum, stored float32, window ending *at* token ``p``), sliding-window group confidences (float32
  cumulative sum), lowest group confidence, and the running-minimum "records" of the group
  confidences, which give DeepConf's truncation point for any threshold without keeping the
  dense window array.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from ..store.atomic import write_atomic
from ..store.grid import Grid
from ..store.pool import PoolError, QuestionData
from ..store.schema import CHECKPOINT_SPACING
from .answers import AnswerGroups, group_answers, is_correct, symbolic_budget

#: 2: answers must be their value, exact keys for huge integers; 3: a cached file records its key;
#: 4: plain numbers equal only when the same number, exact keys from 10^9, spaced digit groups
ARRAYS_VERSION = 4


@dataclass
class QuestionArrays:
    qid: int
    ground_truth: str
    grid: np.ndarray  # int64 [m]
    lengths: np.ndarray  # int64 [n]
    final_ids: np.ndarray  # int32 [n]
    ids: np.ndarray  # int32 [n, m]
    representatives: list  # [n_answers] representative string per group id
    correct: np.ndarray  # bool [n_answers]
    conf_at_pos: np.ndarray | None = None  # float32 [n, m]
    min_group: np.ndarray | None = None  # float32 [n]
    rec_offsets: np.ndarray | None = None  # int64 [n+1] running-min records of group confidence
    rec_index: np.ndarray | None = None  # int64 first window index reaching each record
    rec_value: np.ndarray | None = None  # float32 record values (strictly decreasing per trace)
    #: int64 [n, m] probe cost at each checkpoint (-1 unknown)
    probe_tokens: np.ndarray | None = None
    #: bool [n]: stopped early by a live run (still running at its length)
    stopped: np.ndarray | None = None
    #: keys and comparisons decided by string identity because the question's symbolic time
    #: budget was spent (0 normally; see mars.method.answers.symbolic_budget)
    answer_fallbacks: int = 0
    window: int = 2048
    content_hash: str = ""
    #: int64 [n]: a trace runs at checkpoint k while k < run_steps (None: while grid[k] <
    #: run_lengths); and int64 [n, m] what it has cost when stopped at checkpoint k (None: its
    #: tokens up to grid[k]). Parallel-Probe's protocol reads traces step by step
    #: (:func:`mars.method.protocol.question_arrays`).
    run_steps: np.ndarray | None = None
    step_cost: np.ndarray | None = None
    #: results derived from these arrays that do not depend on the answer-id order (e.g. learned q)
    derived: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_traces(self) -> int:
        return len(self.lengths)

    @property
    def n_checkpoints(self) -> int:
        return len(self.grid)

    @property
    def n_answers(self) -> int:
        return len(self.representatives)

    @property
    def has_confs(self) -> bool:
        return self.conf_at_pos is not None

    @property
    def run_lengths(self) -> np.ndarray:
        """A trace runs at checkpoint p while p < run_lengths: its length, and one more for a trace
        stopped early (live), which was probed and still running at the checkpoint it stopped at."""
        return self.lengths if self.stopped is None else self.lengths + self.stopped

    @property
    def run_checkpoints(self) -> np.ndarray:
        """int64 [n]: the checkpoints at which each trace is still generating (it runs at k while
        k < run_checkpoints)."""
        if self.run_steps is not None:
            return self.run_steps
        return np.searchsorted(self.grid, self.run_lengths, side="left").astype(np.int64)

    def pool_ids(self) -> np.ndarray:
        """Traces eligible for bootstrap sampling: those with a final answer, in trace order."""
        return np.flatnonzero(self.final_ids >= 0)

    def warmup_ids(self, n: int) -> np.ndarray:
        """The warmup traces: the first ``n`` pool traces by trace index (reference §4.3)."""
        return self.pool_ids()[:n]

    def truncation(self, tau) -> np.ndarray:
        """DeepConf-online truncation point of every trace for threshold ``tau`` (§3.4).

        ``length`` where no group confidence falls below ``tau``, else (first such window) + W.
        Records strictly decrease within a trace, so the first record below ``tau`` marks it.
        """
        assert self.rec_value is not None and self.rec_offsets is not None
        assert self.rec_index is not None
        pos = np.flatnonzero(self.rec_value < tau)
        if len(pos) == 0:
            return self.lengths.copy()
        i = np.searchsorted(pos, self.rec_offsets[:-1])
        first = pos[np.minimum(i, len(pos) - 1)]
        hit = (i < len(pos)) & (first < self.rec_offsets[1:])
        return np.where(hit, self.rec_index[first] + self.window, self.lengths)

    def with_answer_order(self, order: list[int]) -> QuestionArrays:
        """A copy whose group ids follow ``order`` (old ids, new id = position in ``order``).

        Group ids only break ties (lowest id wins), so this replays a run under another id order,
        e.g. the hash-seed-dependent order of the reference implementation.
        """
        perm = np.asarray(order, dtype=np.int64)
        if sorted(perm.tolist()) != list(range(self.n_answers)):
            raise ValueError("order must be a permutation of the answer ids")
        new_of_old = np.empty(self.n_answers + 1, dtype=np.int32)
        new_of_old[perm] = np.arange(self.n_answers, dtype=np.int32)
        new_of_old[-1] = -1  # -1 stays -1 (index -1 picks the last slot)
        out = QuestionArrays(**{f.name: getattr(self, f.name) for f in fields(self)})
        out.ids = new_of_old[self.ids]
        out.final_ids = new_of_old[self.final_ids]
        out.representatives = [self.representatives[i] for i in perm]
        out.correct = self.correct[perm]
        return out

    def check(self) -> None:
        """Raise ValueError unless the arrays fit together (shapes, dtypes, ids within range): a
        cached file that passes its zip checksums can still have been written by something else."""
        n, m, k = self.n_traces, self.n_checkpoints, self.n_answers

        def need(ok: bool, what: str) -> None:
            if not ok:
                raise ValueError(f"question {self.qid}: {what}")

        def shaped(a: np.ndarray | None, shape: tuple, kind: str, name: str) -> None:
            need(
                isinstance(a, np.ndarray) and a.shape == shape and a.dtype.kind == kind,
                f"{name} is not {kind}{shape}",
            )

        need(isinstance(self.qid, int) and self.qid >= 0, "bad qid")
        need(all(isinstance(r, str) for r in self.representatives), "bad answers")
        shaped(self.grid, (m,), "i", "grid")
        need(m > 0 and bool((self.grid >= 0).all()), "empty or negative grid")
        need(bool((np.diff(self.grid) > 0).all()), "grid not increasing")
        shaped(self.lengths, (n,), "i", "lengths")
        shaped(self.final_ids, (n,), "i", "final_ids")
        shaped(self.ids, (n, m), "i", "ids")
        shaped(self.correct, (k,), "b", "correct")
        for name in ("final_ids", "ids"):
            a = getattr(self, name)
            need(bool(((a >= -1) & (a < k)).all()), f"{name} outside -1..{k - 1}")
        if self.conf_at_pos is not None:
            shaped(self.conf_at_pos, (n, m), "f", "conf_at_pos")
            need(bool(np.isfinite(self.conf_at_pos).all()), "conf_at_pos not finite")
        if self.min_group is not None:
            shaped(self.min_group, (n,), "f", "min_group")
            shaped(self.rec_offsets, (n + 1,), "i", "rec_offsets")
            assert self.rec_offsets is not None
            r = int(self.rec_offsets[-1])
            need(
                self.rec_offsets[0] == 0 and bool((np.diff(self.rec_offsets) >= 0).all()),
                "rec_offsets not increasing from 0",
            )
            shaped(self.rec_index, (r,), "i", "rec_index")
            shaped(self.rec_value, (r,), "f", "rec_value")
        if self.probe_tokens is not None:
            shaped(self.probe_tokens, (n, m), "i", "probe_tokens")
        if self.stopped is not None:
            shaped(self.stopped, (n,), "b", "stopped")
        if self.run_steps is not None:
            shaped(self.run_steps, (n,), "i", "run_steps")
        if self.step_cost is not None:
            shaped(self.step_cost, (n, m), "i", "step_cost")

    # -- caching -------------------------------------------------------------------------------
    def save(self, path: str | Path, key: str = "") -> None:
        """Write an ``.npz``; ``key`` (:func:`cache_key`) names what the arrays were built from."""
        arrays: dict[str, Any] = {}
        meta: dict[str, Any] = {"_key": key}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "derived":
                continue
            if isinstance(v, np.ndarray):
                arrays[f.name] = v
            elif f.name == "representatives":
                meta[f.name] = v
            else:
                meta[f.name] = v
        arrays["_meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        Path(path).write_bytes(buf.getvalue())

    @classmethod
    def load(cls, path: str | Path, key: str | None = None) -> QuestionArrays:
        """Read a saved ``.npz``; ValueError if it was not saved under ``key`` (when given) or
        its arrays do not fit together."""
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(z["_meta"].tobytes().decode())
            kwargs = {k: z[k] for k in z.files if k != "_meta"}
        saved_key = meta.pop("_key", None)
        if key is not None and saved_key != key:
            raise ValueError(f"{path}: holds arrays of other traces or settings")
        kwargs.update(meta)
        arr = cls(**kwargs)
        arr.check()
        return arr


def digest_arrays(*arrays: np.ndarray) -> str:
    """Digest of arrays' dtypes, shapes and bytes (memo keys of fitted models and γ)."""
    h = hashlib.blake2b(digest_size=16)
    for a in arrays:
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def cache_key(q: QuestionData, spacing: int, window: int) -> str:
    """What a question's arrays are built from: its content (qid and ground truth included), the
    probe costs, the settings and this module's version."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"v{ARRAYS_VERSION}:{q.content_hash()}:{spacing}:{window}".encode())
    if q.probe_cost is not None:
        h.update(np.ascontiguousarray(q.probe_cost, dtype=np.int64).tobytes())
    return h.hexdigest()


def _collect_strings(q: QuestionData) -> list:
    """Answer strings in the order the grouping sees them (finals,
    then each trace's probes + final)."""
    out = [a for a in q.final_answers if a]
    codes = q.probe_codes
    for j in range(q.n_traces):
        seg = codes[q.probe_offsets[j] : q.probe_offsets[j + 1]]
        out.extend(q.probe_strings[c] for c in seg[seg >= 0].tolist())
        if q.final_answers[j]:
            out.append(q.final_answers[j])
    return out


def _confidence_stats(
    q: QuestionData,
    grid: np.ndarray,
    window: int,
    finished_at: np.ndarray,
    conf_window: str = "at",
    group_stats: bool = True,
):
    """conf_at_pos (float32 [n, m]), min_group (float32 [n]) and running-min records.

    ``conf_window="at"`` (the reference): the window ends at token p inclusive; ``"before"``
    (live runs): the W tokens before the probe, all a live engine holds when it probes at p.
    ``group_stats=False`` skips DeepConf's group confidences (min_group and records are None).
    The sums are the reference's (:mod:`mars.method.confstats`).
    """
    from .confstats import window_sums_and_records  # numba: imported where it runs

    n = q.n_traces
    W = window
    if q.conf_offsets is not None and q.conf_values is not None:
        offsets = np.asarray(q.conf_offsets, dtype=np.int64)
        values = q.conf_values[: offsets[-1]]
    else:
        offsets, values = np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.float16)
    lengths = np.diff(offsets)
    # checkpoint confidence: the float64 sum of the window of W tokens ending at index p
    ends = (
        np.minimum(grid[None, :], lengths[:, None] - 1) + 1
        if conf_window == "at"
        else np.minimum(grid[None, :], lengths[:, None])
    )  # exclusive end
    starts = np.maximum(ends - W, 0)
    sums, totals, counts, rec_index, rec_value = window_sums_and_records(
        values, offsets, starts, ends, W, group_stats
    )
    vals = sums / np.maximum(ends - starts, 1)
    whole = np.divide(totals, lengths, out=np.zeros(n), where=lengths > 0)
    conf_at_pos = np.where(finished_at, whole[:, None], vals).astype(np.float32)
    if not group_stats:
        return conf_at_pos, None, None, None, None
    rec_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=rec_offsets[1:])
    min_group = rec_value[rec_offsets[1:] - 1]
    return conf_at_pos, min_group, rec_offsets, rec_index, rec_value


_MISSING = -2  # no probe where a running trace needs one


def _layout(q: QuestionData, spacing: int, grid, stopped):
    """(grid, probe string code per trace and checkpoint [n, m] (-1 abstained, -2 missing),
    finished_at [n, m], on_grid mask and checkpoint index of every probe)."""
    pos = q.probe_positions
    if grid is None:
        on_grid = Grid(spacing).on_grid(pos)
        grid = np.unique(pos[on_grid]).astype(np.int64)
        if len(grid) == 0:
            raise PoolError(f"{q.where()}: no probe on the {spacing}-token checkpoint grid")
    else:
        grid = np.asarray(grid, dtype=np.int64)
        on_grid = np.isin(pos, grid)
    n, m = q.n_traces, len(grid)
    trace_of_probe = np.repeat(np.arange(n), np.diff(q.probe_offsets))
    k_of = np.searchsorted(grid, pos[on_grid])
    codes = np.full((n, m), _MISSING, dtype=np.int32)
    codes[trace_of_probe[on_grid], k_of] = q.probe_codes[on_grid]
    run_lengths = q.lengths if stopped is None else q.lengths + np.asarray(stopped, dtype=bool)
    finished_at = grid[None, :] >= run_lengths[:, None]
    return grid, codes, finished_at, on_grid, trace_of_probe[on_grid], k_of


def checkpoint_answers(
    q: QuestionData, grid: np.ndarray, stopped: np.ndarray | None = None
) -> np.ndarray:
    """The answer string (or None) of every trace at every checkpoint of ``grid``: object [n, m].

    Its final answer once it has finished, else its probe answer (live runs order answers by it).
    """
    grid, codes, finished_at, *_ = _layout(q, CHECKPOINT_SPACING, grid, stopped)
    probe = np.array([*list(q.probe_strings), None, None], dtype=object)  # -1, -2 -> None
    final = np.array(list(q.final_answers), dtype=object)
    return np.where(finished_at, final[:, None], probe[codes])


def checkpoint_confidences(
    q: QuestionData,
    grid: np.ndarray,
    window: int,
    stopped: np.ndarray | None = None,
    conf_window: str = "at",
) -> np.ndarray | None:
    """The confidence of every trace at every checkpoint of ``grid`` (float32 [n, m], None
    without per-token confidences), as :func:`build_arrays` computes it."""
    if not q.has_confs:
        return None
    finished_at = _layout(q, CHECKPOINT_SPACING, grid, stopped)[2]
    return _confidence_stats(q, grid, window, finished_at, conf_window, group_stats=False)[0]


class RunningConfidence:
    """:func:`checkpoint_confidences` (``conf_window="before"``), one checkpoint at a time: the
    checkpoint confidence of each of ``n`` traces as they generate, to the bit what their stored
    records give. Float16-stored token confidences, float64 prefix sums, of which the last
    ``window`` + 1 are kept; a trace that no longer runs has the mean of all its tokens."""

    def __init__(self, n: int, window: int):
        self.window = window
        self.tails = [np.zeros(1) for _ in range(n)]  # prefix sums cs[L - len + 1 .. L]
        self.seen = np.zeros(n, dtype=np.int64)
        self.final: dict[int, float] = {}  # traces that no longer run: their whole mean

    def at(self, j: int, p: int, confs, running: bool) -> float:
        """Trace ``j``'s confidence at checkpoint ``p`` (tokens), given its token confidences so
        far ``confs`` (all of them once it no longer runs) and whether it still runs."""
        if j in self.final:
            return self.final[j]
        c = np.asarray(confs[self.seen[j] :], np.float16).astype(np.float32)
        tail = self.tails[j]
        if len(c):
            cs = np.cumsum(np.concatenate(([tail[-1]], c.astype(np.float64))))
            self.tails[j] = tail = np.concatenate((tail, cs[1:]))[-(self.window + 1) :]
            self.seen[j] += len(c)
        L = int(self.seen[j])
        if L == 0:
            return 0.0 if running else self.final.setdefault(j, 0.0)
        if not running:
            self.final[j] = float(tail[-1] / L)
            return self.final[j]
        end = min(p, L)
        start = max(end - self.window, 0)
        first = L - len(tail) + 1  # the prefix index tail[0] holds
        if start < first:  # only when a trace ran past its checkpoint
            raise RuntimeError(f"trace {j}: {L} tokens at checkpoint {p}")
        return float((tail[end - first] - tail[start - first]) / max(end - start, 1))


def build_arrays(
    q: QuestionData,
    spacing: int = CHECKPOINT_SPACING,
    window: int = 2048,
    groups: AnswerGroups | None = None,
    *,
    grid: np.ndarray | None = None,
    stopped: np.ndarray | None = None,
    conf_window: str = "at",
    group_stats: bool = True,
) -> QuestionArrays:
    """Turn one question's traces into the simulator's arrays, validating as it goes.

    Live runs (:mod:`mars.live`) pass a fixed ``grid``, the traces they ``stopped`` early (probed
    at their last checkpoint, no final answer), online ``groups``, ``conf_window="before"`` and
    ``group_stats=False`` (no DeepConf statistics: DeepConf does not run live).
    """
    n = q.n_traces
    if conf_window not in ("at", "before"):
        raise ValueError(f"conf_window must be 'at' or 'before', got {conf_window!r}")
    with symbolic_budget() as budget:  # bounds the symbolic work of the whole question
        if groups is None:
            groups = group_answers(_collect_strings(q))
        probe_ids_by_code = np.array(
            [groups.id_of(s) for s in q.probe_strings] + [-1], dtype=np.int32
        )
        final_ids = np.array(
            [groups.id_of(a) if a else -1 for a in q.final_answers], dtype=np.int32
        )
        correct = np.array(
            [is_correct(r, q.ground_truth) for r in groups.representatives], dtype=bool
        )

    grid, codes, finished_at, on_grid, trace_of_probe, k_of = _layout(q, spacing, grid, stopped)
    m = len(grid)
    # a missing probe (-2) is not an index of the table (which may hold nothing but the -1 entry)
    probe_ids = np.where(
        codes == _MISSING, _MISSING, probe_ids_by_code[np.maximum(codes, -1)]
    ).astype(np.int32)
    ids = np.where(finished_at, final_ids[:, None], probe_ids).astype(np.int32)
    missing = np.argwhere(ids == _MISSING)
    if missing.size:
        j, k = missing[0]
        raise PoolError(
            f"{q.where(j)}: running trace (length {int(q.lengths[j])}) has no probe at "
            f"checkpoint {int(grid[k])}"
        )

    probe_tokens = None
    if q.probe_cost is not None:
        probe_tokens = np.full((n, m), -1, dtype=np.int64)
        c = q.probe_cost[on_grid]
        tok = np.where((c >= 0).all(axis=1), c[:, 2] + np.maximum(c[:, 0] - c[:, 1], 0), -1)
        probe_tokens[trace_of_probe, k_of] = tok

    arr = QuestionArrays(
        qid=q.qid,
        ground_truth=q.ground_truth,
        grid=grid,
        lengths=q.lengths.astype(np.int64),
        final_ids=final_ids,
        ids=ids,
        representatives=list(groups.representatives),
        correct=correct,
        probe_tokens=probe_tokens,
        window=window,
        content_hash=q.content_hash(),
        stopped=None if stopped is None else np.asarray(stopped, dtype=bool),
        answer_fallbacks=budget.fallbacks,
    )
    if q.has_confs:
        (arr.conf_at_pos, arr.min_group, arr.rec_offsets, arr.rec_index, arr.rec_value) = (
            _confidence_stats(q, grid, window, finished_at, conf_window, group_stats)
        )
    return arr


def arrays_path(cache_dir: str | Path, q: QuestionData, spacing: int, window: int) -> Path:
    """Where :func:`load_arrays` caches a question's arrays (named by its :func:`cache_key`)."""
    return Path(cache_dir) / f"q{q.qid:06d}-{cache_key(q, spacing, window)}.npz"


def read_cached(path: Path, key: str) -> QuestionArrays | None:
    """The arrays cached at ``path`` if they were built under ``key``; None when the file is
    missing, unreadable (truncated, empty, not an npz) or holds anything else (another question's
    arrays, other settings, arrays that do not fit together), so the caller rebuilds them."""
    try:
        return QuestionArrays.load(path, key)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile):
        return None


def load_arrays(
    q: QuestionData,
    cache_dir: str | Path | None = None,
    spacing: int = CHECKPOINT_SPACING,
    window: int = 2048,
    *,
    store: bool = True,
) -> QuestionArrays:
    """build_arrays with an on-disk cache keyed by the question's content and the settings.

    The one reader of cached arrays (``simulate --cache``, the fit directory, the report): a file
    is used only if it was built from this question's content with these settings; any other
    (damaged, another question's, other settings) is rebuilt and, with ``store``, replaced.
    """
    if cache_dir is None:
        return build_arrays(q, spacing, window)
    path = arrays_path(cache_dir, q, spacing, window)
    key = cache_key(q, spacing, window)
    arr = read_cached(path, key)
    if arr is not None:
        return arr
    arr = build_arrays(q, spacing, window)
    if store:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lambda p: arr.save(p, key))
    return arr
