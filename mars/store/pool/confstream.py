"""Per-token confidences streamed from a trace file into one buffer.

The largest column by far (hundreds of MB for a paper-scale question): read in row batches, never
decoded whole, so peak memory stays near the size of the result.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import confs as confs_codec
from .. import schema
from .question import PoolError

__all__ = ["STREAM_OPTIONS", "read_confs", "stream_confs"]

#: how the confidences are read: no pre-buffering (it holds the whole column's pages at once, 2×
#: the memory, and costs more CPU than reading row group by row group) and a buffered stream (else
#: a column chunk is read whole before its first batch: 420 MB for a published question of 4,096
#: traces in one row group)
STREAM_OPTIONS = {"pre_buffer": False, "buffer_size": 1 << 20}


def read_confs(path: Path, t: pa.Table) -> tuple | None:
    """Per-token confidences of a trace file as (offsets, float16 values) (a file of either
    format: :mod:`mars.store.confs`); None for a pool without them."""
    pf = pq.ParquetFile(path, **STREAM_OPTIONS, **schema.TRACE_READ_OPTIONS)
    if "confs" not in pf.schema_arrow.names:
        return None
    capacity = int(pc.sum(t.column("length")).as_py() or 0)
    return stream_confs(pf, str(path), t.num_rows, capacity, "the lengths say")


def stream_confs(
    pf: pq.ParquetFile,
    where: str,
    n_rows: int,
    capacity: int,
    bound: str,
    row_groups: list[int] | None = None,
    qid: int | None = None,
    batch_rows: int = 64,
) -> tuple | None:
    """The ``confs`` column of ``pf`` (its ``row_groups``, the rows of question ``qid`` when
    given) as (offsets, float16 values), streamed in row batches into one buffer of
    ``capacity`` tokens (what ``bound`` says a question holds at most); None when every row is
    null (a pool without confidences).

    Decoding a whole column at once costs more than its size in temporary buffers (of a
    ``list<float16>`` column: repetition and definition levels, 2 bytes each per token, beside
    the values); batches of a quarter row group keep the peak near the size of the result.
    """
    kind = pf.schema_arrow.field("confs").type
    if not confs_codec.readable(kind):
        raise PoolError(f"{where}: column 'confs' has type {kind}, expected float16 bytes or lists")
    columns = ["confs"] if qid is None else ["qid", "confs"]
    offsets = np.zeros(n_rows + 1, dtype=np.int64)
    values = None
    row = 0
    n_null = 0
    batches = pf.iter_batches(
        batch_size=batch_rows, row_groups=row_groups, columns=columns, use_threads=False
    )
    for batch in batches:
        if qid is not None:
            mine = pc.equal(batch.column(0), qid)
            if not pc.all(mine).as_py():
                batch = batch.filter(mine)
        col = batch.column(len(columns) - 1)
        if row + len(col) > n_rows:
            raise PoolError(f"{where}: more traces than its question holds")
        if col.null_count == len(col) and values is None:
            n_null += len(col)  # a pool without confidences has nulls in every row
            row += len(col)
            continue
        if col.null_count or n_null:
            valid = np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False))
            j = row + int(np.flatnonzero(~valid)[0]) if col.null_count else 0
            raise PoolError(f"{where}: trace {j}: confs missing for some traces only")
        off, flat = confs_codec.decode(col, where, PoolError, first_row=row)
        if values is None:
            values = np.empty(capacity, dtype=np.float16)
        start = offsets[row]
        n_new = int(off[-1])
        if start + n_new > len(values):
            raise PoolError(f"{where}: more confidences than {bound} (trace {row + len(col) - 1})")
        values[start : start + n_new] = flat
        offsets[row + 1 : row + len(col) + 1] = start + off[1:]
        row += len(col)
    # the decoding buffers back to the system: Arrow's allocator would keep them (~200 MB on a
    # large question) beside the values while the question's arrays are built
    pa.default_memory_pool().release_unused()
    if values is None:
        return None
    if row != n_rows:
        raise PoolError(f"{where}: fewer traces than its question holds")
    return offsets, values[: offsets[-1]]
