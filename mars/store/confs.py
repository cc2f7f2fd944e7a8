"""Per-token confidences in trace files: one little-endian float16 byte string per trace.

Producers build the column as ``list<float16>`` (:data:`mars.store.schema.TRACE_SCHEMA`); trace
files store it as ``large_binary`` (:data:`mars.store.schema.TRACE_FILE_SCHEMA`), because Parquet
decodes a list column value by value through its repetition and definition levels (4.5 ns a token,
more than all the simulator's other work on a paper-scale pool) and a byte string per trace as one
copy (1.7 ns a token with zstd). Pools of format 1 hold the list form; readers take both.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import MarsError

#: How trace files store the confidences of a trace (float16, little-endian, 2 bytes a token).
STORED_TYPE = pa.large_binary()
_LE_HALF = np.dtype("<f2")


def _one_array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def is_stored(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def is_list(t: pa.DataType) -> bool:
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_floating(t.value_type)


def readable(t: pa.DataType) -> bool:
    """A confidence column of this type decodes (bytes, lists of floats, or all null)."""
    return is_stored(t) or is_list(t) or pa.types.is_null(t)


def encode(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A confidence column (lists of floats, byte strings, or all null) in the stored form."""
    arr = _one_array(col)
    if pa.types.is_large_binary(arr.type):
        return arr
    if pa.types.is_binary(arr.type) or pa.types.is_null(arr.type):
        return arr.cast(STORED_TYPE)
    if not is_list(arr.type):
        raise TypeError(f"confidences of type {arr.type}: expected lists of floats")
    offsets, values = decode(arr, "confidences")
    stored = pa.LargeBinaryArray.from_buffers(
        STORED_TYPE,
        len(arr),
        [None, pa.py_buffer(offsets * 2), pa.py_buffer(np.ascontiguousarray(values, _LE_HALF))],
    )
    if arr.null_count:
        return pc.if_else(arr.is_valid(), stored, pa.scalar(None, STORED_TYPE))
    return stored


def decode(
    col: pa.Array | pa.ChunkedArray,
    where: str,
    error: type[MarsError] = MarsError,
    first_row: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Offsets in tokens (int64 [n + 1], from 0; a null row is empty) and the float16 values of a
    confidence column in either form. A byte string of odd length or a null inside a list is an
    ``error`` naming ``where`` and the trace (its row, counted from ``first_row``)."""
    arr = _one_array(col)
    n = len(arr)
    if pa.types.is_null(arr.type):
        return np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.float16)
    if is_stored(arr.type):
        width = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
        _, off_buf, data_buf = arr.buffers()
        at = np.frombuffer(off_buf, dtype=width)[arr.offset : arr.offset + n + 1].astype(np.int64)
        data = (
            np.frombuffer(data_buf, dtype=np.uint8)[at[0] : at[-1]] if n else np.zeros(0, np.uint8)
        )
        sizes = np.diff(at)
        if arr.null_count:  # a null row's bytes (if any) are not its own
            valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            data = data[np.repeat(valid, sizes)]
            sizes = np.where(valid, sizes, 0)
        odd = np.flatnonzero(sizes % 2)
        if len(odd):
            j = int(odd[0])
            raise error(
                f"{where}: trace {first_row + j}: confs of {int(sizes[j])} bytes "
                "(float16: 2 a token)"
            )
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(sizes // 2, out=offsets[1:])
        return offsets, data.view(_LE_HALF).astype(np.float16, copy=False)
    if not is_list(arr.type):
        raise error(f"{where}: confs of type {arr.type}, expected lists of float16 or bytes")
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = pc.list_flatten(arr)
    if flat.null_count:
        raise error(f"{where}: null inside confs")
    return offsets, flat.to_numpy(zero_copy_only=False).astype(np.float16, copy=False)


def as_lists(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A confidence column in the producers' form: one list of float16 per trace (null kept)."""
    arr = _one_array(col)
    offsets, values = decode(arr, "confidences")
    lists = pa.LargeListArray if offsets[-1] > np.iinfo(np.int32).max else pa.ListArray
    mask = pc.invert(arr.is_valid()) if arr.null_count else None
    out = lists.from_arrays(offsets, pa.array(values, pa.float16()), mask=mask)
    return out.cast(pa.list_(pa.float16())) if lists is pa.ListArray else out


def _with_column(table: pa.Table, convert) -> pa.Table:
    if "confs" not in table.column_names:
        return table
    i = table.column_names.index("confs")
    col = convert(table.column(i))
    return table.set_column(i, pa.field("confs", col.type), col)


def stored_table(table: pa.Table) -> pa.Table:
    """``table`` with its confidences (lists, as producers build them, or bytes, as a trace file
    of either format holds them) in the stored form; unchanged if they already are."""
    if "confs" in table.column_names and table.schema.field("confs").type == STORED_TYPE:
        return table
    return _with_column(table, encode)


def lists_table(table: pa.Table) -> pa.Table:
    """``table`` with its confidences as float16 lists, the producers' form."""
    return _with_column(table, as_lists)
