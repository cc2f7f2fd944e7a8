"""A question's Arrow table -> :class:`~.question.QuestionData`, for either format.

List columns become flat numpy buffers plus offsets, answers a dictionary code per probe; the
published format's conventions (a probe with a null answer dropped, lengths from the confidences)
are applied here, and the result is checked (:func:`~.checks.check_traces`) and sorted by trace.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import confs as confs_codec
from .. import schema
from .checks import check_traces
from .question import MAX_TRACE_LENGTH, PoolError, QuestionData

__all__ = ["question_from_table"]


def _none_if_empty(values: list) -> list:
    return [v if v else None for v in values]


def _list_buffers(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """Offsets (int64, starting at 0) and flat values of a list column; nulls count as empty."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    lengths = (
        pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    )
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets, pc.list_flatten(arr)


def _encode_answers(values: pa.Array) -> tuple[np.ndarray, list]:
    """Dictionary-encode answer strings: codes (-1 for null/empty) and unique strings."""
    values = pc.if_else(pc.equal(values, ""), pa.scalar(None, pa.string()), values)
    enc = pc.dictionary_encode(values)
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    codes = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int32)
    return codes, enc.dictionary.to_pylist()


def _sort_by_trace(q: QuestionData) -> QuestionData:
    """Reorder traces by trace_idx (readers keep flat buffers consistent)."""
    order = np.argsort(q.trace_idx, kind="stable")
    if np.array_equal(order, np.arange(len(order))):
        return q
    take_p = np.concatenate([np.arange(q.probe_offsets[j], q.probe_offsets[j + 1]) for j in order])
    counts = np.diff(q.probe_offsets)[order]
    q.probe_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    q.probe_positions = q.probe_positions[take_p]
    q.probe_codes = q.probe_codes[take_p]
    if q.probe_cost is not None:
        q.probe_cost = q.probe_cost[take_p]
    if q.conf_values is not None:
        assert q.conf_offsets is not None
        take_c = np.concatenate(
            [np.arange(q.conf_offsets[j], q.conf_offsets[j + 1]) for j in order]
        )
        ccounts = np.diff(q.conf_offsets)[order]
        q.conf_offsets = np.concatenate([[0], np.cumsum(ccounts)]).astype(np.int64)
        q.conf_values = q.conf_values[take_c]
    q.trace_idx = q.trace_idx[order]
    q.lengths = q.lengths[order]
    q.final_answers = [q.final_answers[j] for j in order]
    if q.probe_steps is not None:
        q.probe_steps = q.probe_steps[order]
    if q.probe_raw is not None:
        q.probe_raw = [q.probe_raw[i] for i in take_p.tolist()]
    return q


def question_from_table(
    t: pa.Table,
    qid: int,
    source: str,
    published: bool,
    ground_truth: str | None = None,
    question: str | None = None,
    confs: tuple | None = None,
    first_trace: int = 0,
) -> QuestionData:
    """Question ``qid`` of table ``t`` (``published``: the authors' columns), checked and sorted
    by trace; ``confs`` (offsets, values) when streamed apart, ``first_trace`` a shard's first
    id."""
    where = f"{source}: question {qid}"
    if t.num_rows == 0:
        raise PoolError(f"{where}: no traces")
    trace_idx = t.column("trace_idx")
    if trace_idx.null_count:
        raise PoolError(f"{where}: null trace_idx")
    trace_idx = trace_idx.to_numpy().astype(np.int64)
    if ground_truth is None:
        gts = t.column("ground_truth")
        if gts.null_count == t.num_rows:
            raise PoolError(f"{where}: no ground truth")
        # the reference takes the ground truth of the first trace after sorting by trace_idx
        ground_truth = gts[int(np.argmin(trace_idx))].as_py()
        if ground_truth is None:
            raise PoolError(f"{where}: null ground truth")
    final_col = "extracted_answer" if published else "final_answer"
    finals = _none_if_empty(t.column(final_col).to_pylist())

    probes = t.column("probes")
    p_offsets, p_flat = _list_buffers(probes)
    if isinstance(p_flat, pa.ChunkedArray):
        p_flat = p_flat.combine_chunks()
    positions = p_flat.field("position")
    if positions.null_count:
        raise PoolError(f"{where}: probe with null position")
    positions = positions.to_numpy(zero_copy_only=False).astype(np.int64)
    answers = p_flat.field("answer")
    cost = None
    if published:
        # The authors' loader drops probes whose answer is None; '' stays
        # (and later maps to no group).
        keep = np.asarray(pc.is_valid(answers).to_numpy(zero_copy_only=False), dtype=bool)
        if not keep.all():
            counts = (
                np.add.reduceat(keep.astype(np.int64), p_offsets[:-1])
                if len(keep)
                else np.zeros(0, np.int64)
            )
            counts = np.where(np.diff(p_offsets) == 0, 0, counts)
            positions = positions[keep]
            answers = answers.filter(pa.array(keep))
            p_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    else:
        names = {p_flat.type.field(i).name for i in range(p_flat.type.num_fields)}
        if {"prompt_tokens", "cached_tokens", "generated_tokens"} <= names:
            cost = np.stack(
                [
                    pc.fill_null(p_flat.field(n), -1)
                    .to_numpy(zero_copy_only=False)
                    .astype(np.int64)
                    for n in ("prompt_tokens", "cached_tokens", "generated_tokens")
                ],
                axis=1,
            )
            if cost.size == 0 or (cost < 0).all():
                cost = None
    codes, strings = _encode_answers(answers)

    conf_offsets = conf_values = None
    if confs is not None:
        conf_offsets, conf_values = confs
    elif "confs" in t.column_names:
        ccol = t.column("confs")
        if ccol.null_count == 0:
            conf_offsets, conf_values = confs_codec.decode(ccol, where, PoolError)
        elif ccol.null_count != t.num_rows:
            j = int(
                np.flatnonzero(~np.asarray(pc.is_valid(ccol).to_numpy(zero_copy_only=False)))[0]
            )
            raise PoolError(
                f"{where}, trace {int(trace_idx[j])}: confs missing for some traces only"
            )

    if published:
        if conf_offsets is None:
            raise PoolError(f"{where}: published pools need confs (trace length is len(confs))")
        lengths = np.diff(conf_offsets)
    else:
        lengths = t.column("length")
        if lengths.null_count:
            raise PoolError(f"{where}: null length")
        lengths = lengths.to_numpy().astype(np.int64)
        if conf_offsets is not None:
            bad = np.flatnonzero(np.diff(conf_offsets) != lengths)
            if bad.size:
                j = int(bad[0])
                raise PoolError(
                    f"{where}, trace {int(trace_idx[j])}: {int(np.diff(conf_offsets)[j])} "
                    f"confidences for length {int(lengths[j])}"
                )
    probe_steps = None
    if schema.PROBE_STEPS_FIELD.name in t.column_names:
        col = t.column(schema.PROBE_STEPS_FIELD.name)
        if col.null_count < t.num_rows:
            steps = pc.fill_null(col, -1).to_numpy(zero_copy_only=False).astype(np.int64)
            if (steps < -1).any() or (steps > MAX_TRACE_LENGTH).any():
                j = int(np.flatnonzero((steps < -1) | (steps > MAX_TRACE_LENGTH))[0])
                raise PoolError(
                    f"{where}, trace {int(trace_idx[j])}: probe_steps {int(steps[j])} is not a "
                    f"probe count"
                )
            probe_steps = steps
    probe_raw = None
    if probe_steps is not None and "raw_text" in {
        p_flat.type.field(i).name for i in range(p_flat.type.num_fields)
    }:
        raw = p_flat.field("raw_text")
        if not published and raw.null_count < len(raw):
            probe_raw = raw.to_pylist()
    q = QuestionData(
        qid=int(qid),
        ground_truth=str(ground_truth),
        trace_idx=trace_idx,
        lengths=lengths,
        final_answers=finals,
        probe_offsets=p_offsets,
        probe_positions=positions,
        probe_codes=codes,
        probe_strings=strings,
        conf_offsets=conf_offsets,
        conf_values=conf_values,
        probe_cost=cost,
        question=question,
        source=source,
        probe_steps=probe_steps,
        probe_raw=probe_raw,
    )
    check_traces(q, first_trace)
    return _sort_by_trace(q)
