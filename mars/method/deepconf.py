"""DeepConf-online emulation (reference-protocol §8): threshold, voting filter, truncation; and
the filter as a part of a method (:class:`Filter`: :data:`KEEP_ALL` or
:data:`DEEPCONF_ONLINE`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    from .arrays import QuestionArrays

PERCENTILE = 90


def threshold(arr: QuestionArrays, warm: np.ndarray):
    """Confidence threshold: 90th percentile (linear)
    of the warmup traces' lowest group confidence."""
    assert arr.min_group is not None  # DeepConf needs confidences
    return np.percentile(arr.min_group[warm], PERCENTILE)


def running_min_conf(arr: QuestionArrays) -> np.ndarray:
    """Running minimum over checkpoints of the checkpoint confidence (once below, out for good)."""
    assert arr.conf_at_pos is not None  # DeepConf needs confidences
    return np.minimum.accumulate(arr.conf_at_pos, axis=1)


def iteration_state(arr: QuestionArrays, samples: np.ndarray, n_warmup: int):
    """Per-iteration thresholds τ_i (from each sample's first ``n_warmup`` columns)
    and truncation [I, B]."""
    taus = [threshold(arr, s[:n_warmup]) for s in samples]
    return taus, truncations(arr, taus, samples)


def truncations(arr: QuestionArrays, taus, samples: np.ndarray) -> np.ndarray:
    """``arr.truncation(taus[i])[samples[i]]`` for every iteration ``i``: [I, B].

    All iterations at once. A trace's records (its group confidence's running minima) strictly
    decrease, so its first record below τ is the one after those at or above τ: counted per trace
    for every τ by one binary search in its records. The comparisons are the ones
    :meth:`~mars.method.arrays.QuestionArrays.truncation` makes (float32 records against float32
    thresholds, which is what :func:`threshold` returns); any other type takes that method.
    """
    assert arr.rec_value is not None and arr.rec_offsets is not None
    assert arr.rec_index is not None
    samples = np.asarray(samples, dtype=np.int64)
    off, val = arr.rec_offsets, arr.rec_value
    n_rec = np.diff(off)
    falls = val[1:] < val[:-1]
    falls[off[1:-1][(off[1:-1] > 0) & (off[1:-1] < len(val))] - 1] = True  # a trace's first
    same_types = val.dtype == np.float32 and all(isinstance(t, np.float32) for t in taus)
    if not same_types or not falls.all():
        return np.stack([arr.truncation(t)[s] for t, s in zip(taus, samples)])
    tau = np.array(taus, dtype=np.float32)
    order = np.argsort(tau, kind="stable")
    rank = np.empty(len(tau), dtype=np.int64)
    rank[order] = np.arange(len(tau))
    # records at or above each (sorted) threshold: all but those below it, found in the trace's
    # records reversed (ascending), in numpy's order (NaN above every number, as sorting ranks it)
    ranked = tau[order]
    rev, end = val[::-1].copy(), len(val)
    n, T = arr.n_traces, len(tau)
    at_or_above = np.empty((n, T), dtype=np.int64)  # [n, T]: records ≥ τ_(i)
    for j in range(n):
        mine = rev[end - off[j + 1] : end - off[j]]
        at_or_above[j] = len(mine) - np.searchsorted(mine, ranked, side="left")
    first = off[:-1, None] + at_or_above  # index of the first record below τ_(i)
    cut = np.where(
        at_or_above < n_rec[:, None],
        arr.rec_index[np.minimum(first, max(len(val) - 1, 0))] + arr.window,
        arr.lengths[:, None],
    )
    return cut[samples, rank[:, None]]


class Filter:
    """Which traces vote, and where a trace is cut: a part of a method
    (:class:`mars.method.registry.Method`). :data:`KEEP_ALL` keeps every trace;
    :data:`DEEPCONF_ONLINE` is DeepConf's online filter.

    :meth:`prepare` computes what the filter needs of a question's samples (once per question,
    shared by the methods that filter alike); :meth:`kept` says which sampled traces vote at
    checkpoint ``k``, :meth:`truncation` where each stops generating, and :meth:`warm_kept` which
    warmup traces vote at every checkpoint (γ's calibration)."""

    name: ClassVar[str] = "filter"
    needs_confs: ClassVar[bool] = False
    #: it keeps every trace (a sample may then be run in part: ``Method.width``)
    keeps_all: ClassVar[bool] = False
    #: a live run can apply it (DeepConf's cuts traces token by token inside the engine: no)
    live: ClassVar[bool] = False
    #: what a method with this filter is measured against: the pipeline of its full-budget vote
    pipeline: ClassVar[str] = "dco"

    def prepare(self, arr: QuestionArrays, samples: np.ndarray, n_warmup: int) -> Any:
        return None

    def kept(
        self, state: Any, arr: QuestionArrays, S: np.ndarray, rows: np.ndarray | None, k: int
    ) -> np.ndarray:
        """bool [len(rows), B]: the traces ``S`` (the sampled traces of iterations ``rows``;
        None: every iteration) that vote at checkpoint ``k``."""
        raise NotImplementedError

    def truncation(self, state: Any, lengths: np.ndarray) -> np.ndarray:
        """Where every sampled trace stops generating [I, B] (``lengths``: their lengths)."""
        raise NotImplementedError

    def warm_kept(self, arr: QuestionArrays, warm: np.ndarray) -> np.ndarray:
        """bool [W, m]: the warmup traces that vote at each checkpoint."""
        raise NotImplementedError


@dataclass(frozen=True)
class KeepAll(Filter):
    """No filter: every trace votes and runs to its end."""

    name: ClassVar[str] = "none"
    keeps_all: ClassVar[bool] = True
    live: ClassVar[bool] = True
    pipeline: ClassVar[str] = "sc"

    def kept(
        self, state: Any, arr: QuestionArrays, S: np.ndarray, rows: np.ndarray | None, k: int
    ) -> np.ndarray:
        return np.ones(S.shape, dtype=bool)

    def truncation(self, state: Any, lengths: np.ndarray) -> np.ndarray:
        return lengths

    def warm_kept(self, arr: QuestionArrays, warm: np.ndarray) -> np.ndarray:
        return np.ones((len(warm), len(arr.grid)), dtype=bool)


@dataclass(frozen=True)
class DeepConf(Filter):
    """DeepConf-online (reference-protocol §8): a trace votes while its running minimum
    checkpoint confidence stays at or above its iteration's threshold τ (from the sample's first
    ``warmup`` traces), and is cut where its group confidence first falls below τ."""

    name: ClassVar[str] = "deepconf"
    needs_confs: ClassVar[bool] = True

    def prepare(
        self, arr: QuestionArrays, samples: np.ndarray, n_warmup: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(τ per iteration float32 [I], truncation [I, B], running-min checkpoint conf [n, m])."""
        taus, trunc = iteration_state(arr, samples, n_warmup)
        return np.array(taus, dtype=np.float32), trunc, running_min_conf(arr)

    def kept(
        self, state: Any, arr: QuestionArrays, S: np.ndarray, rows: np.ndarray | None, k: int
    ) -> np.ndarray:
        taus, trunc, runmin = state
        if rows is not None:
            taus, trunc = taus[rows], trunc[rows]
        lens = arr.lengths[S]
        return (runmin[S, k] >= taus[:, None]) & ~((trunc < lens) & (arr.grid[k] >= trunc))

    def truncation(self, state: Any, lengths: np.ndarray) -> np.ndarray:
        return state[1]

    def warm_kept(self, arr: QuestionArrays, warm: np.ndarray) -> np.ndarray:
        return running_min_conf(arr)[warm] >= threshold(arr, warm)


KEEP_ALL: Filter = KeepAll()
DEEPCONF_ONLINE: Filter = DeepConf()
