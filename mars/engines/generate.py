"""Pool generation: the batch driver every backend shares (synthetic, transformers, SGLang).

One path for all engines and both modes:

* :func:`run_batch` moves a :class:`~mars.engines.base.TraceBatch` checkpoint by checkpoint
  (``spacing``, 2·spacing, ... ≤ ``max_tokens``), probes every trace still running at each
  checkpoint, offers the probes to an optional ``on_checkpoint`` hook (live mode: return True to
  stop every running trace), and collects the finished traces;
* :func:`records_to_table` turns those records into one question's trace table
  (:data:`mars.store.schema.TRACE_SCHEMA`);
* :func:`generate_pool` writes a pool directory (or one shard of it) question by question
  (streaming: one question in memory at a time), resumable (:mod:`mars.store.write`) and sharded
  (:mod:`mars.store.consolidate`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..errors import MarsError, UsageError
from ..progress import Detail, Progress, counted, prefixed
from ..store import schema
from ..store.consolidate import GENERATION_RECORD, shard_range
from ..store.problems import Problem, problems_digest, select_problems
from ..store.write import (
    PoolDirWriter,
    probes_array,
    token_ids_array,
    with_stood_in,
    write_trace_table,
)
from ..workers import process_pool
from . import cancel
from .base import Backend, ProbeResult, TraceBatch, TraceResult

log = logging.getLogger(__name__)

#: Largest pool (traces per question, all shards) and largest shard a generation accepts: far
#: above the paper's 4,096, far below what exhausts memory.
MAX_TRACES = 1 << 20
MAX_SHARD_TRACES = 1 << 17
#: ``inline``: probe while generating (one pass); ``none``: leave it to `mars probe`.
PROBE_MODES = ("inline", "none")


@dataclass
class TraceRecord:
    """A trace as it ended plus its probes, in checkpoint order."""

    result: TraceResult
    probes: list[tuple[int, ProbeResult]] = field(default_factory=list)


CheckpointHook = Callable[[int, TraceBatch, dict], "bool | None"]


def run_batch(
    batch: TraceBatch,
    spacing: int = schema.CHECKPOINT_SPACING,
    *,
    max_tokens: int,
    on_checkpoint: CheckpointHook | None = None,
    probe: bool = True,
    detail: Detail | None = None,
) -> list[TraceRecord]:
    """Drive ``batch`` over the checkpoint grid and return one :class:`TraceRecord` per trace.

    For p = spacing, 2·spacing, … ≤ ``max_tokens``: advance to p, probe every trace that is still
    running at p (not ended and holding exactly p tokens; a trace that ended at or before p is not
    probed), record ``(p, ProbeResult)``, then call ``on_checkpoint(p, batch, probes)`` with
    ``probes = {batch index j: ProbeResult}``. If the hook returns True every running trace is
    stopped (:meth:`TraceBatch.stop`) and the loop ends there (live mode); otherwise, after the
    grid, the batch is advanced to ``max_tokens`` (completion, or the cap). With ``probe=False``
    nothing is probed: the traces run straight to the end (the probe stage probes them later).
    ``detail`` (:mod:`mars.progress`) hears where the batch is: each checkpoint reached, with the
    traces still running, and the run to the end. A cancelled scope (:mod:`mars.engines.cancel`)
    ends the loop at the next checkpoint with :class:`~mars.engines.cancel.Cancelled`.
    """
    if spacing <= 0:
        raise UsageError(f"--spacing {spacing}: must be at least 1")
    records = [TraceRecord(result=None) for _ in range(batch.n)]  # type: ignore[arg-type]
    stopped = False
    p = spacing
    while probe and p <= max_tokens:
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
        p += spacing
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


def _generate_question(
    backend: Backend,
    problem: Problem,
    lo: int,
    hi: int,
    seed: int,
    spacing: int,
    max_tokens: int,
    path: Path,
    with_confs: bool = True,
    metadata: dict[str, str] | None = None,
    probe: bool = True,
    token_ids: bool = True,
    detail: Detail | None = None,
) -> pa.Table:
    """Generate traces lo..hi-1 of one question and write its trace file atomically."""
    batch = backend.start(problem, hi - lo, seed, first_trace=lo)
    try:
        records = run_batch(
            batch,
            spacing,
            max_tokens=max_tokens,
            probe=probe,
            detail=prefixed(detail, f"q{problem.qid}: "),
        )
    finally:
        batch.close()
    warn_without_final_answers(problem.qid, [r.result for r in records], max_tokens)
    for r in records:
        if not with_confs:
            r.result.confs = None
        if not token_ids:
            r.result.token_ids = None
    table = records_to_table(problem.qid, lo, records)
    del records
    write_trace_table(table, path, metadata)
    return table


def check_generation(
    n_traces: int, seed: int, spacing: int | None, max_tokens: int, lo: int, hi: int
) -> None:
    """Refuse impossible or absurd generation settings before anything is written."""
    if not 1 <= n_traces <= MAX_TRACES:
        raise UsageError(f"--traces {n_traces}: must be between 1 and {MAX_TRACES:,} per question")
    if hi - lo > MAX_SHARD_TRACES:
        raise UsageError(
            f"--traces {n_traces}: {hi - lo:,} traces in one shard is more than "
            f"{MAX_SHARD_TRACES:,}; split the generation with --n-shards"
        )
    if hi <= lo:
        raise UsageError(f"this shard is empty for {n_traces} traces (fewer traces than shards)")
    if seed < 0:
        raise UsageError(f"--seed {seed}: must be a non-negative whole number")
    if spacing is None:  # no inline probes: the grid is the probe stage's
        return
    if spacing < 1:
        raise UsageError(f"--spacing {spacing}: must be at least 1")
    if max_tokens < spacing:
        raise UsageError(
            f"--max-tokens {max_tokens} is below --spacing {spacing}: no trace would be probed"
        )


def generate_pool(
    backend: Backend,
    problems: Sequence[Problem] | str | Path,
    n_traces: int,
    seed: int,
    out: str | Path,
    questions: Iterable[int] | None = None,
    shard: int | None = None,
    n_shards: int = 1,
    progress: Progress | None = None,
    spacing: int = schema.CHECKPOINT_SPACING,
    max_tokens: int | None = None,
    on_question: Callable[[int, pa.Table | None], None] | None = None,
    workers: int = 1,
    with_confs: bool = True,
    probe: str = "inline",
    token_ids: bool = True,
    detail: Detail | None = None,
) -> Path:
    """Generate a trace pool (or one shard of it) into directory ``out``; return ``out``.

    Args:
        backend: any :class:`~mars.engines.base.Backend` (e.g. ``SyntheticBackend("qwen3-8b")``).
        problems: a list of :class:`~mars.store.problems.Problem`, or a jsonl path / bundled set
        name.
        n_traces: traces per question in the *whole* pool (all shards together).
        seed: generation seed; trace t of question q depends on (seed, q, t) only.
        out: output directory (created; resumed if it holds an interrupted run of the same
            parameters; refused if it holds anything else). See :mod:`mars.store.write`.
        questions: qids to generate (default: all problems).
        shard, n_shards: generate only traces ``shard_range(n_traces, shard, n_shards)``; with
            ``n_shards > 1`` the directory is a shard for
            :func:`mars.store.consolidate.consolidate`.
        progress: called as ``progress(done, total)`` per question (:mod:`mars.progress`).
        spacing: checkpoint spacing in tokens (probes every ``spacing`` tokens).
        max_tokens: token cap (default: the backend's ``max_tokens``).
        on_question: called as ``on_question(qid, table)`` after each question is written
            (``table`` is None with ``workers > 1``).
        workers: generate questions in this many forked processes (CPU backends such as the
            synthetic one; an engine holding a GPU should use 1). The output does not depend on it.
        with_confs: keep per-token confidences (DeepConf needs them).
        probe: ``"inline"`` probes every running trace each ``spacing`` tokens in the same engine
            job; ``"none"`` leaves probing to the probe stage (:mod:`mars.engines.probe`), which can
            probe at any spacing and with another model.
        token_ids: keep each trace's generated token ids (what the probe stage reads).
        detail: hears where the current question's traces are (:mod:`mars.progress`; with
            ``workers > 1`` the questions run in other processes and it hears nothing).

    Every setting is checked before ``out`` is touched. The manifest (``pool.json``) records
    backend, preset, model, seed, n_traces, spacing, max_tokens, the problems digest and, for
    shards, ``shard = {index, n_shards, first_trace, n_traces}``.
    """
    by_qid, qids = select_problems(problems, questions)
    if shard is None:
        if n_shards != 1:
            raise UsageError("--n-shards > 1 needs a --shard index")
        shard = 0
    lo, hi = shard_range(n_traces, shard, n_shards)
    max_tokens = token_cap(backend, max_tokens)
    if probe not in PROBE_MODES:
        raise UsageError(f"--probe {probe!r}: one of {', '.join(PROBE_MODES)}")
    check_generation(n_traces, seed, spacing if probe == "inline" else None, max_tokens, lo, hi)
    sel = [by_qid[q] for q in qids]
    datasets = sorted({p.dataset for p in sel})
    params = {
        "generator": "mars.engines.generate",
        **backend_info(backend),
        "seed": int(seed),
        "n_traces": int(n_traces),
        "spacing": int(spacing),
        "max_tokens": int(max_tokens),
        "dataset": datasets[0] if len(datasets) == 1 else datasets,
        "qids": qids,
        "problems_digest": problems_digest(sel),
    }
    if not with_confs:
        params["confidences"] = False
    params["probes"] = probe
    if probe == "none":
        params.pop("spacing")  # no grid yet: the probe stage sets it
    params["token_ids"] = bool(token_ids)
    if n_shards > 1:
        params["shard"] = {
            "index": shard,
            "n_shards": n_shards,
            "first_trace": lo,
            "n_traces": hi - lo,
        }

    for p in sel:  # every question fits the model, before anything is written
        backend.check_context(p)
    out = Path(out)
    writer = PoolDirWriter(out, params, record=GENERATION_RECORD, what="generation")
    if not writer.start(qids):
        return out
    todo = writer.todo(qids)
    args = (seed, spacing, max_tokens)
    if workers <= 1 or len(todo) <= 1:
        for qid in counted(todo, len(todo), progress):
            path = writer.trace_path(qid)
            table = _generate_question(
                backend,
                by_qid[qid],
                lo,
                hi,
                *args,
                path,
                with_confs,
                writer.run_metadata(),
                probe == "inline",
                token_ids,
                detail,
            )
            if on_question is not None:
                on_question(qid, table)
            del table
    else:
        import multiprocessing as mp
        from concurrent.futures import as_completed

        with process_pool(workers, mp.get_context("fork")) as ex:
            futs = {
                ex.submit(
                    _generate_question_quiet,
                    backend,
                    by_qid[q],
                    lo,
                    hi,
                    *args,
                    writer.trace_path(q),
                    with_confs,
                    writer.run_metadata(),
                    probe == "inline",
                    token_ids,
                ): q
                for q in todo
            }
            for f in counted(as_completed(futs), len(futs), progress):
                f.result()
                if on_question is not None:
                    on_question(futs[f], None)
    writer.finish(question_rows(by_qid, qids, params.get("model", ""), backend), params)
    return out


def _generate_question_quiet(*args) -> None:
    """:func:`_generate_question` in a worker process (the table stays there)."""
    _generate_question(*args)
