"""The batch driver every backend shares (synthetic, transformers, SGLang, servers), and what
a stage builds from its records.

One path for all engines and both modes:

* :func:`run_batch` moves a :class:`~mars.engines.base.TraceBatch` checkpoint by checkpoint
  (:class:`~mars.store.grid.Grid`, up to ``max_tokens``), probes every trace still running at each
  checkpoint, offers the probes to an optional ``on_checkpoint`` hook (live mode: return True to
  stop every running trace), and collects the finished traces;
* :func:`records_to_table` turns those records into one question's trace table
  (:data:`mars.store.schema.TRACE_SCHEMA`), and :func:`table_records` a kept table back into
  records;
* :func:`backend_info`, :func:`token_cap`, :func:`question_rows`: an engine's provenance, its
  token cap and a pool's question rows, for the stages that write pools (the generate stage,
  :mod:`mars.generate`, and the live loop, :mod:`mars.live`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..errors import MarsError, UsageError
from ..progress import Detail
from ..store import schema
from ..store.grid import Grid
from ..store.problems import Problem
from ..store.write import probes_array, token_ids_array, with_stood_in
from . import cancel
from .base import Backend, ProbeResult, TraceBatch, TraceResult

log = logging.getLogger(__name__)


@dataclass
class TraceRecord:
    """A trace as it ended plus its probes, in checkpoint order."""

    result: TraceResult
    probes: list[tuple[int, ProbeResult]] = field(default_factory=list)


CheckpointHook = Callable[[int, TraceBatch, dict], "bool | None"]


def run_batch(
    batch: TraceBatch,
    grid: Grid | None,
    *,
    max_tokens: int | None = None,
    on_checkpoint: CheckpointHook | None = None,
    detail: Detail | None = None,
) -> list[TraceRecord]:
    """Drive ``batch`` over the checkpoint grid and return one :class:`TraceRecord` per trace.

    For each checkpoint p of ``grid`` up to ``max_tokens`` (default: the grid's cap): advance to
    p, probe every trace that is still running at p (not ended and holding exactly p tokens; a
    trace that ended at or before p is not probed), record ``(p, ProbeResult)``, then call
    ``on_checkpoint(p, batch, probes)`` with ``probes = {batch index j: ProbeResult}``. If the
    hook returns True every running trace is stopped (:meth:`TraceBatch.stop`) and the loop ends
    there (live mode); otherwise, after the grid, the batch is advanced to ``max_tokens``
    (completion, or the cap). With no grid (``None``) nothing is probed: the traces run straight
    to the end (the probe stage probes them later). ``detail`` (:mod:`mars.progress`) hears where
    the batch is: each checkpoint reached, with the traces still running, and the run to the end.
    A cancelled scope (:mod:`mars.engines.cancel`) ends the loop at the next checkpoint with
    :class:`~mars.engines.cancel.Cancelled`.
    """
    if max_tokens is None:
        if grid is None or grid.max_tokens is None:
            raise ValueError("run_batch: no token cap")
        max_tokens = grid.max_tokens
    records = [TraceRecord(result=None) for _ in range(batch.n)]  # type: ignore[arg-type]
    stopped = False
    for p in [] if grid is None else grid.upto(max_tokens).tolist():
        cancel.check()
        batch.advance(p)
        cancel.check()
        ended = np.asarray(batch.ended)
        if ended.all():
            break
        running = np.flatnonzero(~ended & (np.asarray(batch.lengths) == p))
        if detail is not None:
            detail(f"{p:,} tokens, {running.size} of {batch.n} running")
        results = batch.probe(running) if running.size else []
        if len(results) != running.size:
            raise RuntimeError(f"backend returned {len(results)} probes for {running.size} traces")
        for j, r in zip(running.tolist(), results):
            records[j].probes.append((p, r))
        if on_checkpoint is not None and on_checkpoint(
            p, batch, dict(zip(running.tolist(), results))
        ):
            live = np.flatnonzero(~np.asarray(batch.ended))
            if live.size:
                batch.stop(live)
            stopped = True
            break
    if not stopped:
        if detail is not None:
            detail(f"to the end (at most {max_tokens:,} tokens)")
        cancel.check()
        batch.advance(max_tokens)
        left = np.flatnonzero(~np.asarray(batch.ended))
        if left.size:  # the backend would go on past max_tokens: cut them here
            batch.stop(left)
    for j in range(batch.n):
        records[j].result = batch.result(j)
    return records


def warn_without_final_answers(
    qid: int, results: Sequence[TraceResult], max_tokens: int, what: str = "traces"
) -> bool:
    """Warn, the moment a question's traces have ended, when none holds a final answer: nothing
    would vote on the question (`mars simulate` finds nothing to sample), and the cause is most
    often the prompt or the token cap, which the rest of the run would not change. True if it
    warned."""
    if not results or any(r.final_answer is not None for r in results):
        return False
    n, cut = len(results), sum(not r.finished for r in results)
    if cut == n:
        why = f"all were cut at --max-tokens {max_tokens:,} first (raise it)"
    else:
        why = f"{n - cut} finished without one: does the prompt ask for the answer in \\boxed{{}}?"
    log.warning(
        "question %d: none of its %d %s ended with a \\boxed{} final answer, so nothing votes "
        "on it; %s",
        qid,
        n,
        what,
        why,
    )
    return True


def records_to_table(qid: int, first_trace: int, records: Sequence[TraceRecord]) -> pa.Table:
    """One question's trace table (:data:`mars.store.schema.TRACE_SCHEMA`);
    trace_idx = first_trace + j; the count of confidences the engine stood in for rides in its
    metadata (:func:`mars.store.write.stood_in_of`)."""
    n = len(records)
    res = [r.result for r in records]
    has_confs = [r.confs is not None for r in res]
    if any(has_confs) and not all(has_confs):
        raise ValueError(f"question {qid}: confidences for some traces only")
    lengths = np.array([r.length for r in res], np.int64)
    if all(has_confs) and n:
        counts = np.array([len(r.confs) for r in res if r.confs is not None], np.int64)
        bad = np.flatnonzero(counts != lengths)
        if bad.size:
            j = int(bad[0])
            raise ValueError(
                f"question {qid}, trace {first_trace + j}: {counts[j]} confidences for length "
                f"{lengths[j]}"
            )
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        if offsets[-1] >= 2**31:
            raise ValueError(f"question {qid}: more than 2^31 tokens in one question table")
        values = (
            np.concatenate([np.asarray(r.confs, np.float16) for r in res])
            if n
            else np.zeros(0, np.float16)
        )
        values = np.ascontiguousarray(values)
        flat = pa.Array.from_buffers(pa.float16(), len(values), [None, pa.py_buffer(values)])
        confs = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), flat)
    else:
        confs = pa.nulls(n, pa.list_(pa.float16()))

    probes = probes_array([r.probes for r in records])
    table = pa.Table.from_arrays(
        [
            pa.array(np.full(n, qid, np.int64)),
            pa.array(first_trace + np.arange(n, dtype=np.int64)),
            pa.array([r.final_answer for r in res], pa.string()),
            pa.array(lengths),
            pa.array([r.finished for r in res], pa.bool_()),
            confs,
            probes,
            pa.array([r.text for r in res], pa.string()),
            token_ids_array([r.token_ids for r in res]),
        ],
        schema=schema.TRACE_SCHEMA,
    )
    return with_stood_in(table, sum(getattr(r, "stood_in", 0) for r in res))


def row_probes(row: dict) -> list[tuple[int, ProbeResult]]:
    """A trace table row's probes as :class:`TraceRecord` holds them."""
    return [
        (
            int(p["position"]),
            ProbeResult(
                p["answer"],
                p.get("raw_text"),
                p.get("conf"),
                p.get("prompt_tokens"),
                p.get("cached_tokens"),
                p.get("generated_tokens"),
            ),
        )
        for p in row.get("probes") or ()
    ]


def table_records(table: pa.Table) -> list[TraceRecord]:
    """The records of a trace table, row by row (:func:`records_to_table`'s inverse; the count
    of stood-in confidences stays the table's, not the traces')."""
    out = []
    for row in table.to_pylist():
        confs, ids = row.get("confs"), row.get("token_ids")
        result = TraceResult(
            length=int(row["length"]),
            final_answer=row["final_answer"],
            finished=bool(row["finished"]),
            confs=None if confs is None else np.asarray(confs, np.float16),
            text=row.get("text"),
            token_ids=None if ids is None else np.asarray(ids, np.int32),
        )
        out.append(TraceRecord(result, row_probes(row)))
    return out


def backend_info(backend: Backend) -> dict:
    """Provenance of a backend for a pool manifest (its name, model and ``describe()``)."""
    info = {
        "backend": getattr(backend, "name", type(backend).__name__),
        "model": getattr(backend, "model", ""),
    }
    describe = getattr(backend, "describe", None)
    if callable(describe):
        info.update(describe())
    return info


def token_cap(backend: Backend, max_tokens: int | None) -> int:
    """``max_tokens``, by default the backend's own cap."""
    if max_tokens is None:
        max_tokens = getattr(backend, "max_tokens", None)
        if max_tokens is None:
            raise MarsError("--max-tokens not given and the backend has no default")
    if int(max_tokens) < 1:
        raise UsageError(f"--max-tokens {max_tokens}: must be at least 1")
    return int(max_tokens)


def question_rows(
    by_qid: dict[int, Problem], qids: list[int], model: str, backend: Backend | None = None
) -> list[dict]:
    """The ``questions.parquet`` rows of a pool (with the generator's prompt token ids when the
    backend works in tokens)."""
    prompt_ids = getattr(backend, "prompt_ids", None)
    return [
        {
            "qid": q,
            "ground_truth": by_qid[q].answer,
            "question": by_qid[q].question,
            "dataset": by_qid[q].dataset,
            "model": model,
            "prompt_ids": list(prompt_ids(by_qid[q].question)) if callable(prompt_ids) else None,
        }
        for q in qids
    ]
