"""Pool generation: the driver shared by every backend (synthetic, transformers, SGLang).

One path for all engines and both modes:

* :func:`run_batch` moves a :class:`~mars.backends.base.TraceBatch` checkpoint by checkpoint
  (``spacing``, 2·spacing, ... ≤ ``max_tokens``), probes every trace still running at each
  checkpoint, offers the probes to an optional ``on_checkpoint`` hook (live mode: return True to
  stop every running trace), and collects the finished traces;
* :func:`records_to_table` turns those records into one question's trace table
  (:data:`mars.schema.TRACE_SCHEMA`);
* :func:`generate_pool` writes a pool directory question by question (streaming: one question in
  memory at a time), sharded and resumable; :func:`consolidate` merges shard directories into one
  pool.

Output directory protocol (resumable)
-------------------------------------
``generate_pool(..., out=DIR)`` writes the usual pool layout (:mod:`mars.schema`) *in place*::

    DIR/.generate.json          the generation parameters (written first, removed at the end)
    DIR/traces/q000007.parquet  one file per finished question, written to a temporary name and
                                renamed (os.replace), so a file that exists is complete
    DIR/questions.parquet       written when every question is done
    DIR/pool.json               written last: its presence marks a complete directory

Re-running the same command after an interruption skips the questions whose file exists and
regenerates the rest; since every trace is reproducible from (seed, qid, trace_idx), the result
is identical to an uninterrupted run. Re-running with *different* parameters into the same
directory is refused. With ``n_shards > 1`` each shard directory holds traces
``[s·N/n_shards, (s+1)·N/n_shards)`` of every question (global ``trace_idx``) and its manifest a
``shard`` entry; only :func:`consolidate` turns shards into a pool (a single shard 0 of 1 is
already a pool).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import schema
from .backends.base import Backend, ProbeResult, Problem, TraceBatch, TraceResult
from .pool import PoolError, PoolWriter

DATA_DIR = Path(__file__).resolve().parent / "data"
PROBLEMS_DIR = DATA_DIR / "problems"
PARTIAL_MANIFEST = ".generate.json"

PARQUET_OPTIONS = schema.TRACE_PARQUET_OPTIONS


# ---------------------------------------------------------------------------------------------
# Problems


def bundled_problem_sets() -> list[str]:
    """Names of the problem files bundled in ``mars/data/problems`` (``aime_2025``, ...)."""
    return sorted(p.stem for p in PROBLEMS_DIR.glob("*.jsonl"))


def load_problems(path_or_name: str | Path) -> list[Problem]:
    """Problems of a jsonl file (``{"question", "answer"}`` per line) or of a bundled set by name.

    The qid is the 0-based line index (blank lines are not allowed); the dataset name is the file
    stem (``aime_2025``).
    """
    p = Path(path_or_name)
    if not p.exists():
        name = str(path_or_name)
        name = name[:-6] if name.endswith(".jsonl") else name
        p = PROBLEMS_DIR / f"{name}.jsonl"
        if not p.exists():
            raise FileNotFoundError(
                f"{path_or_name}: no such problem file or bundled set "
                f"(bundled: {', '.join(bundled_problem_sets())})"
            )
    out = []
    with p.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if not line.strip():
                raise ValueError(f"{p}:{i + 1}: blank line (qid = line index)")
            try:
                row = json.loads(line)
                out.append(
                    Problem(
                        qid=i,
                        question=str(row["question"]),
                        answer=str(row["answer"]).strip(),
                        dataset=p.stem,
                    )
                )
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(f"{p}:{i + 1}: bad problem line ({exc})") from None
    if not out:
        raise ValueError(f"{p}: no problems")
    return out


# ---------------------------------------------------------------------------------------------
# Driving a batch


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
) -> list[TraceRecord]:
    """Drive ``batch`` over the checkpoint grid and return one :class:`TraceRecord` per trace.

    For p = spacing, 2·spacing, … ≤ ``max_tokens``: advance to p, probe every trace that is still
    running at p (not ended and holding exactly p tokens; a trace that ended at or before p is not
    probed), record ``(p, ProbeResult)``, then call ``on_checkpoint(p, batch, probes)`` with
    ``probes = {batch index j: ProbeResult}``. If the hook returns True every running trace is
    stopped (:meth:`TraceBatch.stop`) and the loop ends there (live mode); otherwise, after the
    grid, the batch is advanced to ``max_tokens`` (completion, or the cap).
    """
    if spacing <= 0:
        raise ValueError(f"spacing must be positive, got {spacing}")
    records = [TraceRecord(result=None) for _ in range(batch.n)]  # type: ignore[arg-type]
    stopped = False
    p = spacing
    while p <= max_tokens:
        batch.advance(p)
        ended = np.asarray(batch.ended)
        if ended.all():
            break
        running = np.flatnonzero(~ended & (np.asarray(batch.lengths) == p))
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
        batch.advance(max_tokens)
        left = np.flatnonzero(~np.asarray(batch.ended))
        if left.size:  # the backend would go on past max_tokens: cut them here
            batch.stop(left)
    for j in range(batch.n):
        records[j].result = batch.result(j)
    return records


def records_to_table(qid: int, first_trace: int, records: Sequence[TraceRecord]) -> pa.Table:
    """One question's trace table (:data:`mars.schema.TRACE_SCHEMA`); trace_idx = first_trace + j."""
    n = len(records)
    res = [r.result for r in records]
    has_confs = [r.confs is not None for r in res]
    if any(has_confs) and not all(has_confs):
        raise ValueError(f"question {qid}: confidences for some traces only")
    lengths = np.array([r.length for r in res], np.int64)
    if all(has_confs) and n:
        counts = np.array([len(r.confs) for r in res], np.int64)
        bad = np.flatnonzero(counts != lengths)
        if bad.size:
            j = int(bad[0])
            raise ValueError(
                f"question {qid}, trace {first_trace + j}: {counts[j]} confidences for length {lengths[j]}"
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

    p_off = np.zeros(n + 1, np.int32)
    np.cumsum([len(r.probes) for r in records], out=p_off[1:])
    flat_probes = [pr for r in records for pr in r.probes]
    pos = pa.array([p for p, _ in flat_probes], pa.int64())
    cols = [
        pa.array([pr.answer for _, pr in flat_probes], pa.string()),
        pa.array([pr.raw_text for _, pr in flat_probes], pa.string()),
        pa.array([pr.conf for _, pr in flat_probes], pa.float32()),
        pa.array([pr.prompt_tokens for _, pr in flat_probes], pa.int32()),
        pa.array([pr.cached_tokens for _, pr in flat_probes], pa.int32()),
        pa.array([pr.generated_tokens for _, pr in flat_probes], pa.int32()),
    ]
    struct = pa.StructArray.from_arrays([pos, *cols], fields=list(schema.PROBE_TYPE))
    probes = pa.ListArray.from_arrays(pa.array(p_off), struct)
    return pa.Table.from_arrays(
        [
            pa.array(np.full(n, qid, np.int64)),
            pa.array(first_trace + np.arange(n, dtype=np.int64)),
            pa.array([r.final_answer for r in res], pa.string()),
            pa.array(lengths),
            pa.array([r.finished for r in res], pa.bool_()),
            confs,
            probes,
            pa.array([r.text for r in res], pa.string()),
        ],
        schema=schema.TRACE_SCHEMA,
    )


def write_trace_table(table: pa.Table, path: str | Path) -> None:
    """Write a trace table atomically (temporary file in the same folder, then os.replace)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        pq.write_table(table, tmp, **PARQUET_OPTIONS)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


class _TraceWriter(PoolWriter):
    """PoolWriter (atomic pool directory) writing trace files with :data:`PARQUET_OPTIONS`."""

    def write_question(self, meta: dict, traces: pa.Table | dict) -> None:
        qid = int(meta["qid"])
        table = (
            traces
            if isinstance(traces, pa.Table)
            else pa.Table.from_pydict(traces, schema=schema.TRACE_SCHEMA)
        )
        table = (
            table.cast(schema.TRACE_SCHEMA)
            if not table.schema.equals(schema.TRACE_SCHEMA)
            else table
        )
        pq.write_table(table, self._tmp / schema.trace_file_name(qid), **PARQUET_OPTIONS)
        self._questions.append({n: meta.get(n) for n in schema.QUESTION_SCHEMA.names})


# ---------------------------------------------------------------------------------------------
# Pools


def shard_range(n_traces: int, shard: int, n_shards: int) -> tuple[int, int]:
    """Global trace ids ``[lo, hi)`` of shard ``shard`` of ``n_shards``."""
    if not 0 <= shard < n_shards:
        raise ValueError(f"shard {shard} out of range for {n_shards} shards")
    return shard * n_traces // n_shards, (shard + 1) * n_traces // n_shards


def _problems_digest(problems: Iterable[Problem]) -> str:
    h = hashlib.blake2b(digest_size=12)
    for p in problems:
        h.update(json.dumps([p.qid, p.question, p.answer, p.dataset]).encode())
    return h.hexdigest()


def _backend_info(backend: Backend) -> dict:
    info = {
        "backend": getattr(backend, "name", type(backend).__name__),
        "model": getattr(backend, "model", ""),
    }
    describe = getattr(backend, "describe", None)
    if callable(describe):
        info.update(describe())
    return info


def _progress(iterable, total: int, desc: str, enabled: bool):
    if not enabled:
        return iterable
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        return iterable
    return tqdm(iterable, total=total, desc=desc, unit="q", file=sys.stderr)


def _write_json_atomic(path: Path, obj: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def select_problems(
    problems: Sequence[Problem] | str | Path, questions: Iterable[int] | None
) -> tuple[dict[int, Problem], list[int]]:
    """(problems by qid, the sorted qids asked for: all by default); unknown qids are an error."""
    if isinstance(problems, (str, Path)):
        problems = load_problems(problems)
    by_qid = {p.qid: p for p in problems}
    if len(by_qid) != len(problems):
        raise ValueError("duplicate qids in problems")
    qids = sorted(by_qid) if questions is None else sorted({int(q) for q in questions})
    missing = [q for q in qids if q not in by_qid]
    if missing:
        raise ValueError(f"questions {missing} not in problems (qids {min(by_qid)}..{max(by_qid)})")
    return by_qid, qids


def token_cap(backend: Backend, max_tokens: int | None) -> int:
    """``max_tokens``, by default the backend's own cap."""
    if max_tokens is None:
        max_tokens = getattr(backend, "max_tokens", None)
        if max_tokens is None:
            raise ValueError("max_tokens not given and the backend has no max_tokens")
    return int(max_tokens)


def claim_output_dir(out: Path, params: dict, partial_name: str, what: str) -> None:
    """Start or resume writing a run into ``out`` (the partial manifest ``partial_name`` holds its
    parameters); refuse a run with other parameters or a directory that is not one."""
    partial_path = out / partial_name
    if partial_path.exists():
        prev = json.loads(partial_path.read_text())
        if prev != params:
            diff = sorted(k for k in set(prev) | set(params) if prev.get(k) != params.get(k))
            raise PoolError(
                f"{out}: holds an interrupted {what} with other parameters ({', '.join(diff)})"
            )
    elif out.exists() and any(out.iterdir()):
        raise PoolError(f"{out}: exists and is not an interrupted {what} (refusing to overwrite)")
    (out / schema.POOL_TRACES_DIR).mkdir(parents=True, exist_ok=True)
    if not partial_path.exists():
        _write_json_atomic(partial_path, params)


def _generate_question(
    backend: Backend,
    problem: Problem,
    lo: int,
    hi: int,
    seed: int,
    spacing: int,
    max_tokens: int,
    path: Path,
    return_table: bool = True,
) -> pa.Table | None:
    """Generate traces lo..hi-1 of one question and write its trace file atomically."""
    batch = backend.start(problem, hi - lo, seed, first_trace=lo)
    try:
        records = run_batch(batch, spacing, max_tokens=max_tokens)
    finally:
        batch.close()
    table = records_to_table(problem.qid, lo, records)
    del records
    write_trace_table(table, path)
    return table if return_table else None


def generate_pool(
    backend: Backend,
    problems: Sequence[Problem] | str | Path,
    n_traces: int,
    seed: int,
    out: str | Path,
    questions: Iterable[int] | None = None,
    shard: int | None = None,
    n_shards: int = 1,
    progress: bool = True,
    spacing: int = schema.CHECKPOINT_SPACING,
    max_tokens: int | None = None,
    on_question: Callable[[int, pa.Table | None], None] | None = None,
    workers: int = 1,
) -> Path:
    """Generate a trace pool (or one shard of it) into directory ``out``; return ``out``.

    Args:
        backend: any :class:`~mars.backends.base.Backend` (e.g. ``SyntheticBackend("qwen3-8b")``).
        problems: a list of :class:`Problem`, or a jsonl path / bundled set name for
            :func:`load_problems`.
        n_traces: traces per question in the *whole* pool (all shards together).
        seed: generation seed; trace t of question q depends on (seed, q, t) only.
        out: output directory (created; resumed if it holds an interrupted run of the same
            parameters; refused if it holds anything else).
        questions: qids to generate (default: all problems).
        shard, n_shards: generate only traces ``shard_range(n_traces, shard, n_shards)``; with
            ``n_shards > 1`` the directory is a shard for :func:`consolidate`.
        progress: show a progress bar (tqdm, on stderr).
        spacing: checkpoint spacing in tokens (probes every ``spacing`` tokens).
        max_tokens: token cap (default: the backend's ``max_tokens``).
        on_question: called as ``on_question(qid, table)`` after each question is written
            (``table`` is None with ``workers > 1``).
        workers: generate questions in this many forked processes (CPU backends such as the
            synthetic one; an engine holding a GPU should use 1). The output does not depend on it.

    The manifest (``pool.json``) records backend, preset, model, seed, n_traces, spacing,
    max_tokens, the problems digest and, for shards, ``shard = {index, n_shards, first_trace,
    n_traces}``. See the module docstring for the resume protocol.
    """
    by_qid, qids = select_problems(problems, questions)
    if n_traces <= 0:
        raise ValueError(f"n_traces must be positive, got {n_traces}")
    if shard is None:
        if n_shards != 1:
            raise ValueError("n_shards > 1 needs a shard index")
        shard = 0
    lo, hi = shard_range(n_traces, shard, n_shards)
    if hi <= lo:
        raise ValueError(f"shard {shard} of {n_shards} is empty for {n_traces} traces")
    max_tokens = token_cap(backend, max_tokens)
    sel = [by_qid[q] for q in qids]
    datasets = sorted({p.dataset for p in sel})
    params = {
        "generator": "mars.generate",
        **_backend_info(backend),
        "seed": int(seed),
        "n_traces": int(n_traces),
        "spacing": int(spacing),
        "max_tokens": int(max_tokens),
        "dataset": datasets[0] if len(datasets) == 1 else datasets,
        "qids": qids,
        "problems_digest": _problems_digest(sel),
    }
    if n_shards > 1:
        params["shard"] = {
            "index": shard,
            "n_shards": n_shards,
            "first_trace": lo,
            "n_traces": hi - lo,
        }

    out = Path(out)
    manifest_path = out / schema.POOL_MANIFEST
    partial_path = out / PARTIAL_MANIFEST
    if manifest_path.exists():
        done = json.loads(manifest_path.read_text())
        if {k: done.get(k) for k in params} != params:
            raise PoolError(f"{out}: holds a finished pool generated with other parameters")
        if all((out / schema.trace_file_name(q)).exists() for q in qids):
            return out
        # trace files were deleted since: regenerate them (the manifest is rewritten at the end)
        manifest_path.unlink()
        _write_json_atomic(partial_path, params)
    claim_output_dir(out, params, PARTIAL_MANIFEST, "generation")
    for stale in (out / schema.POOL_TRACES_DIR).glob(".*.tmp-*"):
        stale.unlink()

    todo = [q for q in qids if not (out / schema.trace_file_name(q)).exists()]
    desc = f"generate {params.get('preset') or params['backend']}" + (
        f" shard {shard}/{n_shards}" if n_shards > 1 else ""
    )
    if workers <= 1 or len(todo) <= 1:
        for qid in _progress(todo, len(todo), desc, progress):
            table = _generate_question(
                backend,
                by_qid[qid],
                lo,
                hi,
                seed,
                spacing,
                max_tokens,
                out / schema.trace_file_name(qid),
            )
            if on_question is not None:
                on_question(qid, table)
            del table
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as ex:
            futs = {
                ex.submit(
                    _generate_question,
                    backend,
                    by_qid[q],
                    lo,
                    hi,
                    seed,
                    spacing,
                    max_tokens,
                    out / schema.trace_file_name(q),
                    False,
                ): q
                for q in todo
            }
            for f in _progress(as_completed(futs), len(futs), desc, progress):
                f.result()
                if on_question is not None:
                    on_question(futs[f], None)

    model = params.get("model", "")
    rows = [
        {
            "qid": q,
            "ground_truth": by_qid[q].answer,
            "question": by_qid[q].question,
            "dataset": by_qid[q].dataset,
            "model": model,
        }
        for q in qids
    ]
    qtmp = out / f".{schema.POOL_QUESTIONS}.tmp-{os.getpid()}"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema.QUESTION_SCHEMA), qtmp)
    os.replace(qtmp, out / schema.POOL_QUESTIONS)
    manifest = {
        "format": schema.POOL_FORMAT,
        "version": schema.POOL_FORMAT_VERSION,
        **params,
        "n_questions": len(qids),
    }
    _write_json_atomic(manifest_path, manifest)
    partial_path.unlink()
    return out


_SHARD_ONLY = ("shard", "n_questions", "format", "version")


def consolidate(shard_dirs: Sequence[str | Path], out: str | Path, overwrite: bool = False) -> Path:
    """Merge complete shard directories of one generation into the pool ``out``.

    Checks that the shards share every generation parameter, cover trace ids 0..N-1 exactly
    (contiguous, no overlap) and hold the same questions; concatenates each question's traces by
    trace_idx and writes the pool atomically (:class:`mars.pool.PoolWriter`).
    """
    if not shard_dirs:
        raise ValueError("no shard directories")
    shards = []
    for d in shard_dirs:
        d = Path(d)
        mf = d / schema.POOL_MANIFEST
        if not mf.exists():
            hint = (
                " (interrupted: re-run its generation to finish it)"
                if (d / PARTIAL_MANIFEST).exists()
                else ""
            )
            raise PoolError(f"{d}: not a finished shard (no {schema.POOL_MANIFEST}){hint}")
        m = json.loads(mf.read_text())
        info = m.get("shard") or {
            "index": 0,
            "n_shards": 1,
            "first_trace": 0,
            "n_traces": m["n_traces"],
        }
        shards.append((info["first_trace"], d, m, info))
    shards.sort(key=lambda s: s[0])
    ref = {k: v for k, v in shards[0][2].items() if k not in _SHARD_ONLY}
    for _, d, m, _ in shards[1:]:
        other = {k: v for k, v in m.items() if k not in _SHARD_ONLY}
        if other != ref:
            diff = sorted(k for k in set(ref) | set(other) if ref.get(k) != other.get(k))
            raise PoolError(
                f"{d}: generated with other parameters than {shards[0][1]} ({', '.join(diff)})"
            )
    expect = 0
    for first, d, _, info in shards:
        if first != expect:
            what = (
                "overlaps the previous shard"
                if first < expect
                else f"leaves a gap (traces {expect}..{first - 1} missing)"
            )
            raise PoolError(f"{d}: shard starts at trace {first} and {what}")
        expect = first + info["n_traces"]
    if expect != ref["n_traces"]:
        raise PoolError(
            f"shards cover traces 0..{expect - 1}, the pool has {ref['n_traces']} (missing shards?)"
        )
    qtables = [pq.read_table(d / schema.POOL_QUESTIONS) for _, d, _, _ in shards]
    qrows = qtables[0].to_pylist()
    for t, (_, d, _, _) in zip(qtables[1:], shards[1:]):
        if t.to_pylist() != qrows:
            raise PoolError(f"{d}: questions differ from {shards[0][1]}")
    manifest = {**ref, "consolidated_from": [info for _, _, _, info in shards]}
    manifest.pop("n_questions", None)
    with _TraceWriter(out, manifest=manifest, overwrite=overwrite) as w:
        for row in qrows:
            qid = row["qid"]
            parts = [pq.read_table(d / schema.trace_file_name(qid)) for _, d, _, _ in shards]
            table = pa.concat_tables(parts).combine_chunks()
            idx = table.column("trace_idx").to_numpy()
            if not np.array_equal(idx, np.arange(ref["n_traces"])):
                raise PoolError(
                    f"question {qid}: consolidated trace ids are not 0..{ref['n_traces'] - 1}"
                )
            w.write_question(row, table)
    return Path(out)


# ---------------------------------------------------------------------------------------------
# Command line (manual use; ``mars generate`` wraps generate_pool)


def make_backend(
    name: str,
    preset: str | None = None,
    skill: float | None = None,
    max_tokens: int | None = None,
    with_confs: bool = True,
) -> Backend:
    """Build a backend by name (only ``synthetic`` lives here)."""
    if name == "synthetic":
        from .backends.synthetic import DEFAULT_PRESET, SyntheticBackend

        return SyntheticBackend(
            preset or DEFAULT_PRESET, skill=skill, max_tokens=max_tokens, with_confs=with_confs
        )
    raise ValueError(f"backend {name!r} is not available from mars.generate.make_backend")


def parse_qids(spec: str | None) -> list[int] | None:
    """``"0-4,7"`` -> [0, 1, 2, 3, 4, 7]; None -> None."""
    if not spec:
        return None
    out: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m:
            raise ValueError(f"bad question list {spec!r}")
        a, b = int(m.group(1)), int(m.group(2) or m.group(1))
        out.extend(range(a, b + 1))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "consolidate":
        ap = argparse.ArgumentParser(prog="python -m mars.generate consolidate")
        ap.add_argument("--out", required=True)
        ap.add_argument("--overwrite", action="store_true")
        ap.add_argument("shards", nargs="+")
        a = ap.parse_args(argv[1:])
        print(consolidate(a.shards, a.out, overwrite=a.overwrite))
        return 0
    if argv and argv[0] == "generate":
        argv = argv[1:]
    ap = argparse.ArgumentParser(
        prog="python -m mars.generate", description="Generate a trace pool."
    )
    ap.add_argument("--backend", default="synthetic")
    ap.add_argument("--preset", default=None)
    ap.add_argument(
        "--problems",
        required=True,
        help="jsonl file or bundled set (aime_2025, hmmt_feb_2025, brumo_2025)",
    )
    ap.add_argument("--traces", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--skill", type=float, default=None)
    ap.add_argument("--max-tokens", type=int, default=None)
    ap.add_argument("--spacing", type=int, default=schema.CHECKPOINT_SPACING)
    ap.add_argument("--questions", default=None, help="e.g. 0-4,7")
    ap.add_argument("--shard", type=int, default=None)
    ap.add_argument("--n-shards", type=int, default=1)
    ap.add_argument("--no-confs", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    backend = make_backend(a.backend, a.preset, a.skill, a.max_tokens, with_confs=not a.no_confs)
    t0 = time.perf_counter()
    out = generate_pool(
        backend,
        a.problems,
        a.traces,
        a.seed,
        a.out,
        questions=parse_qids(a.questions),
        shard=a.shard,
        n_shards=a.n_shards,
        progress=not a.quiet,
        spacing=a.spacing,
        max_tokens=a.max_tokens,
    )
    if not a.quiet:
        print(f"{out} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
