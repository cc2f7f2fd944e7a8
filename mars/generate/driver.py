"""The generate stage (`mars generate`): :func:`generate_pool` writes a pool directory (or one
shard of it) question by question (streaming: one question in memory at a time), resumable
(:mod:`mars.store.write`) and sharded (:mod:`mars.store.consolidate`), each question's traces
driven by the engines' batch driver (:func:`mars.engines.generate.run_batch`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pyarrow as pa

from ..engines.base import Backend
from ..engines.generate import (
    backend_info,
    question_rows,
    records_to_table,
    run_batch,
    token_cap,
    warn_without_final_answers,
)
from ..errors import UsageError
from ..progress import Detail, Progress, counted, prefixed
from ..store import schema
from ..store.consolidate import GENERATION_RECORD, shard_range
from ..store.grid import Grid
from ..store.problems import Problem, problems_digest, select_problems
from ..store.write import PoolDirWriter, write_trace_table
from ..workers import process_pool

#: Largest pool (traces per question, all shards) and largest shard a generation accepts: far
#: above the paper's 4,096, far below what exhausts memory.
MAX_TRACES = 1 << 20
MAX_SHARD_TRACES = 1 << 17
#: ``inline``: probe while generating (one pass); ``none``: leave it to `mars probe`.
PROBE_MODES = ("inline", "none")


def _generate_question(
    backend: Backend,
    problem: Problem,
    lo: int,
    hi: int,
    seed: int,
    grid: Grid | None,
    max_tokens: int,
    path: Path,
    with_confs: bool = True,
    metadata: dict[str, str] | None = None,
    token_ids: bool = True,
    detail: Detail | None = None,
) -> pa.Table:
    """Generate traces lo..hi-1 of one question and write its trace file atomically."""
    batch = backend.start(problem, hi - lo, seed, first_trace=lo)
    try:
        records = run_batch(
            batch,
            grid,
            max_tokens=max_tokens,
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
) -> Grid | None:
    """Refuse impossible or absurd generation settings before anything is written; the grid
    inline probes lie on (None: no inline probes, the probe stage sets the grid)."""
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
        return None
    return Grid.checked(spacing, max_tokens)


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
            job; ``"none"`` leaves probing to the probe stage (:mod:`mars.generate.probe`), which
            can probe at any spacing and with another model.
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
    grid = check_generation(
        n_traces, seed, spacing if probe == "inline" else None, max_tokens, lo, hi
    )
    sel = [by_qid[q] for q in qids]
    datasets = sorted({p.dataset for p in sel})
    params = {
        "generator": "mars.engines.generate",
        **backend_info(backend),
        "seed": int(seed),
        "n_traces": int(n_traces),
        "spacing": spacing,
        "max_tokens": int(max_tokens),
        "dataset": datasets[0] if len(datasets) == 1 else datasets,
        "qids": qids,
        "problems_digest": problems_digest(sel),
    }
    if not with_confs:
        params["confidences"] = False
    params["probes"] = probe
    if grid is None:
        params.pop("spacing")  # no grid yet: the probe stage sets it
    else:
        params["spacing"] = grid.spacing
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
    args = (seed, grid, max_tokens)
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
