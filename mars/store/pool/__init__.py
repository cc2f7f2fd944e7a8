"""Trace pools: read one question at a time, checked.

A pool is either the authors' published parquet (one file, one row per trace) or our pool layout
(see :mod:`mars.store.schema`). Both are read question by question with pyarrow; list columns are
turned into flat numpy buffers plus offsets, never into per-token Python objects, so peak memory is
bounded by one question.

Answer conventions, the same for both formats once loaded: an empty answer string means "no
answer" and is read as ``None``. In our layout a probe with a null answer is an *abstention* (the
probe ran but nothing parsed); in the published format the authors' loader drops such probes, so a
running trace left without a probe at a grid point is an error there, as in the reference.

One module per job: :mod:`.readers` (the two formats behind :class:`Pool`, :func:`open_pool`),
:mod:`.decode` (a question's Arrow table to :class:`QuestionData`), :mod:`.checks` (what a question
must satisfy), :mod:`.confstream` (confidences streamed into one buffer), :mod:`.grid` (the probe
spacing inferred from positions), :mod:`.question` (the in-memory question and :class:`PoolError`).
"""

from __future__ import annotations

from ..userfiles import read_manifest
from .confstream import STREAM_OPTIONS, stream_confs
from .decode import question_from_table
from .grid import MIN_INFERRED_SPACING, grid_spacing, positions_gcd, probe_spacing
from .question import MAX_TRACE_LENGTH, PoolError, QuestionData
from .readers import LayoutPool, Pool, PublishedPool, open_pool, read_trace_table

__all__ = [
    "MAX_TRACE_LENGTH",
    "MIN_INFERRED_SPACING",
    "STREAM_OPTIONS",
    "LayoutPool",
    "Pool",
    "PoolError",
    "PublishedPool",
    "QuestionData",
    "grid_spacing",
    "open_pool",
    "positions_gcd",
    "probe_spacing",
    "question_from_table",
    "read_manifest",
    "read_trace_table",
    "stream_confs",
]
