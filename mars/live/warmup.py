"""A live question's warmup traces: run to completion before its main traces, and kept
(``OUT/live/qNNNNNN.warmup.parquet``) until the question's record is written, so that an
interrupted question resumes after its warmup.

A kept warmup is used only for what made it (:func:`warmup_inputs`: the question's content, the
warmup size, seed, grid and engine) and only if its rows are those it kept (a digest of them);
anything else is one line naming the file and saying to remove it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..engines.base import Backend
from ..engines.generate import (
    TraceRecord,
    backend_info,
    records_to_table,
    run_batch,
    table_records,
    warn_without_final_answers,
)
from ..errors import first_line
from ..progress import Detail, prefixed
from ..store import schema
from ..store.grid import Grid
from ..store.pool import PoolError, QuestionData, question_from_table, read_trace_table
from ..store.problems import Problem, problem_digest
from ..store.write import stood_in_of, with_stood_in, write_trace_table

#: Parquet metadata key of a kept warmup file (what made it, its wall time, its rows' digest; JSON)
WARMUP_METADATA_KEY = "mars.live.warmup"


def warmup_inputs(
    backend: Backend, problem: Problem, warmup: int, seed: int, spacing: int, max_tokens: int
) -> dict:
    """What a question's warmup traces are made from: the question itself (its content's digest),
    the warmup size, seed, grid and engine. A kept warmup file records it and is used only for
    the same; each live record carries it (``inputs``), and `mars replay` checks it."""
    return {
        "qid": int(problem.qid),
        "problem": problem_digest(problem),
        "warmup": int(warmup),
        "seed": int(seed),
        "spacing": int(spacing),
        "max_tokens": int(max_tokens),
        "engine": backend_info(backend),
    }


def warmup_traces(
    backend: Backend,
    problem: Problem,
    made_by: dict,
    kept: str | Path | None,
    detail: Detail | None,
) -> tuple[list[TraceRecord], pa.Table, float]:
    """The question's warmup traces (run to completion, or read back from ``kept`` where an
    interrupted run of the same question, engine and settings left them; written there once they
    have run): their records, their table and their wall time."""
    warmup, seed = made_by["warmup"], made_by["seed"]
    spacing, max_tokens = made_by["spacing"], made_by["max_tokens"]
    table = read_warmup(kept, made_by) if kept else None
    if table is not None:
        wall, stood_in = warmup_wall(table), stood_in_of(table, str(kept))
        table = with_stood_in(table.replace_schema_metadata(None), stood_in)
        return table_records(table), table, wall
    t0 = time.perf_counter()
    records: list[TraceRecord] = []
    if warmup:
        say = prefixed(detail, f"q{problem.qid} warmup: ")
        if say is not None:
            say(f"starting {warmup} traces")
        batch = backend.start(problem, warmup, seed, first_trace=0)
        try:
            records = run_batch(batch, Grid(spacing, max_tokens), detail=say)
        finally:
            batch.close()
        results = [r.result for r in records]
        warn_without_final_answers(problem.qid, results, max_tokens, "warmup traces")
    table = records_to_table(problem.qid, 0, records)
    wall = time.perf_counter() - t0
    if kept and warmup:
        write_warmup(kept, table, made_by, wall)
    return records, table, wall


def write_warmup(path: str | Path, table: pa.Table, made_by: dict, wall_s: float) -> None:
    """Keep a question's finished warmup traces (a trace file, atomically), with what made them
    (:func:`warmup_inputs`) and their wall time."""
    info = {**made_by, "wall_s": round(wall_s, 4), "rows": _rows_digest(table)}
    write_trace_table(table, path, metadata={WARMUP_METADATA_KEY: json.dumps(info)})


def _rows_digest(table: pa.Table) -> str:
    """Digest of a trace table's rows as producers build them (confidences as float16 lists):
    what a kept warmup must still hold when it is read back."""
    h = hashlib.sha256()
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        h.update(name.encode())
        if name == "confs":  # token by token, as the bytes they are
            h.update(pc.fill_null(pc.list_value_length(col), -1).to_numpy().tobytes())
            flat = pc.list_flatten(col).to_numpy(zero_copy_only=False).astype(np.float16)
            h.update(flat.view(np.uint16).tobytes())
        else:
            h.update(json.dumps(col.to_pylist()).encode())
    return h.hexdigest()[:32]


def read_warmup(path: str | Path, made_by: dict) -> pa.Table | None:
    """The warmup traces kept by :func:`write_warmup` (None if there are none), checked against
    what ``made_by`` (:func:`warmup_inputs`) says they must be made from — the question's content,
    not only its id — and row by row as the live run reads them; anything else is one line naming
    the file and saying to remove it."""
    path = Path(path)
    if not os.path.lexists(path):
        return None
    qid, warmup = made_by["qid"], made_by["warmup"]
    remedy = "remove it to run the warmup again"
    if not path.is_file():
        what = "a directory" if path.is_dir() else "not a regular file"
        raise PoolError(f"{path}: {what}, not a warmup file; {remedy}")
    try:
        table = read_trace_table(path)
        raw = (table.schema.metadata or {}).get(WARMUP_METADATA_KEY.encode())
        if raw is None:
            raise ValueError("it records no warmup")
        info = json.loads(raw)
        wall = info.get("wall_s") if isinstance(info, dict) else None
        if isinstance(wall, bool) or not (isinstance(wall, int | float) and 0 <= wall < math.inf):
            raise ValueError("its metadata is damaged")
        qids = table.column("qid").to_numpy(zero_copy_only=False)
        idx = table.column("trace_idx").to_numpy(zero_copy_only=False)
    except (OSError, KeyError, ValueError, pa.ArrowException) as exc:
        raise PoolError(
            f"{path}: not a warmup file of this run ({first_line(exc)}); {remedy}"
        ) from None
    if info.get("qid") != qid or info.get("warmup") != warmup:
        raise PoolError(f"{path}: not question {qid}'s {warmup} warmup traces; {remedy}")
    if info.get("problem") != made_by["problem"]:
        raise PoolError(
            f"{path}: warmup traces of another question {qid} (its text, answer or problem set "
            f"differ from this run's); {remedy}"
        )
    expected = json.loads(json.dumps(made_by))  # as the file holds it (lists, not tuples)
    other = [k for k in expected if info.get(k) != expected[k]]
    if other:
        raise PoolError(f"{path}: kept by a run with other settings ({', '.join(other)}); {remedy}")
    if table.num_rows != warmup or (qids != qid).any() or (idx != np.arange(warmup)).any():
        raise PoolError(
            f"{path}: rows are not question {qid}'s warmup traces 0..{warmup - 1}; {remedy}"
        )
    try:  # every row as the live run reads it
        if not table.schema.remove_metadata().equals(schema.TRACE_SCHEMA):
            raise PoolError("its columns are not a trace file's")
        q = question_from_table(table, qid, str(path), published=False, ground_truth="")
        _check_warmup_traces(q, made_by)
        if info.get("rows") != _rows_digest(table):
            raise PoolError("its rows are not those the run kept")
    except PoolError as exc:
        why = first_line(exc).removeprefix(f"{path}: ")
        raise PoolError(f"{path}: damaged warmup traces ({why}); {remedy}") from None
    return table


def _check_warmup_traces(q: QuestionData, made_by: dict) -> None:
    """Warmup traces as a run of ``made_by``'s grid wrote them: none past the token cap, each
    probed at the grid's first checkpoints and at no others."""
    spacing, max_tokens = made_by["spacing"], made_by["max_tokens"]
    long = np.flatnonzero(q.lengths > max_tokens)
    if long.size:
        raise PoolError(f"trace {int(q.trace_idx[long[0]])} is longer than {max_tokens:,} tokens")
    for j in range(q.n_traces):
        at = q.probe_positions[q.probe_offsets[j] : q.probe_offsets[j + 1]]
        if (at != Grid(spacing).first(len(at))).any() or (at > q.lengths[j]).any():
            raise PoolError(f"trace {int(q.trace_idx[j])} is not probed every {spacing:,} tokens")


def warmup_wall(table: pa.Table) -> float:
    return float(json.loads(table.schema.metadata[WARMUP_METADATA_KEY.encode()])["wall_s"])
