"""The probe stage: probe stored traces again, at any spacing, with any probe model.

``mars probe TRACES --out PROBED`` reads a pool (or a shard) that ``mars generate`` wrote, asks
every trace for its current answer at every checkpoint of a ``--spacing`` grid plus at its own
end (the terminal probe, as the authors' prober does), and writes the same traces with the new
probes. Nothing is regenerated: changing the spacing, the probe suffix or the probe model costs
probes only. A probe at position d sees exactly the prompt + the first d generated tokens + the
probe suffix; how each engine reuses prefixes is its own (``Backend.reprobe``).

Before any work: the output is apart from the input, every trace has what the engine needs
(token ids for token-level engines), the spacing probes something, and the probe model's context
holds every trace's longest probe. What only probing finds (a trace the engine does not rebuild,
token ids too short or outside the vocabulary) is refused as well, and what that command wrote is
undone. Output: a pool directory of the same layout, written resumably like generation (one file
per question, atomic; ``pool.json`` last; the same finished command again does nothing), whose
manifest is the input's plus a ``probe`` block; shard information is kept, so probed shards
consolidate like generated ones.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..engines.base import Backend, GeneratorInfo, StoredTrace
from ..errors import MarsError, UsageError
from ..progress import Progress, counted
from ..store import confs as confs_codec
from ..store import schema
from ..store.atomic import check_apart, write_atomic
from ..store.grid import Grid
from ..store.pool import LayoutPool, PoolError, open_pool, read_manifest
from ..store.problems import Problem
from ..store.write import PoolDirWriter, probes_array

PROBE_RECORD = ".probe.json"
#: Manifest keys of the input that describe its probes, replaced by the probe stage's (and the
#: count of stood-in confidences, counted again over the trace files it writes).
_REPLACED = (
    "format",
    "version",
    "n_questions",
    "qids",
    "spacing",
    "probes",
    "probe",
    "stood_in_confs",
)


def _per_row(col: pa.ChunkedArray, offsets: np.ndarray, flat: np.ndarray) -> list:
    """``flat[offsets[i]:offsets[i + 1]]`` for every row of ``col`` (None where it is null),
    without per-element Python objects."""
    valid = np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)
    return [flat[offsets[i] : offsets[i + 1]] if ok else None for i, ok in enumerate(valid)]


def _column_lists(col: pa.ChunkedArray) -> list[np.ndarray | None]:
    """A list column as one numpy array (or None) per row."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return _per_row(arr, offsets, pc.list_flatten(arr).to_numpy(zero_copy_only=False))


def stored_traces(table: pa.Table, where: str = "trace file") -> list[StoredTrace]:
    """The traces of one question's trace table, as the probe stage hands them to an engine
    (``where``: the file, named by a refusal of its confidences)."""
    names = table.column_names
    ids = _column_lists(table["token_ids"]) if "token_ids" in names else [None] * len(table)
    confs = (
        _per_row(table["confs"], *confs_codec.decode(table["confs"], where, PoolError))
        if "confs" in names
        else [None] * len(table)
    )
    texts = table["text"].to_pylist() if "text" in names else [None] * len(table)
    finals = table["final_answer"].to_pylist()
    return [
        StoredTrace(int(t), int(n), i, c, x, f or None)
        for t, n, i, c, x, f in zip(
            table["trace_idx"].to_pylist(), table["length"].to_pylist(), ids, confs, texts, finals
        )
    ]


def _read_column(path: Path, name: str) -> pa.ChunkedArray | None:
    try:
        if name not in pq.read_schema(path).names:
            return None
        return pq.read_table(path, columns=[name], **schema.TRACE_READ_OPTIONS)[name]
    except (OSError, pa.ArrowException) as exc:
        raise PoolError(f"{path}: unreadable ({str(exc).splitlines()[0]})") from None


def check_inputs(pool: LayoutPool, qids: list[int], backend: Backend, grid: Grid) -> dict:
    """Everything that can be checked before probing starts; returns the longest trace per
    question (one-line :class:`MarsError` naming the question / trace otherwise)."""
    longest, longest_row = {}, {}
    for qid in qids:
        path = pool.path / schema.trace_file_name(qid)
        if not path.exists():
            raise PoolError(f"{path}: missing trace file for question {qid}")
        lengths = _read_column(path, "length")
        if lengths is None or lengths.null_count:
            raise PoolError(f"{path}: no trace lengths")
        longest[qid] = int(pc.max(lengths).as_py() or 0)
        longest_row[qid] = int(pc.index(lengths, longest[qid]).as_py())
        if backend.reprobe_needs_token_ids and pool.manifest.get("token_ids") is not True:
            # a pool `mars generate` wrote records whether it kept them; others are read
            ids = _read_column(path, "token_ids")
            if ids is None or ids.null_count:
                where = ""
                if ids is not None:
                    idx = pq.read_table(path, columns=["trace_idx"])["trace_idx"].to_pylist()
                    nulls = pc.is_null(ids).to_numpy(zero_copy_only=False)
                    where = f", trace {idx[int(np.flatnonzero(nulls)[0])]}"
                raise PoolError(
                    f"{path}: question {qid}{where}: no token ids to probe (generate with token "
                    "ids kept, the default, or probe with the engine that generated the traces)"
                )
    top = max(longest.values(), default=0)
    if grid.spacing >= top and top > 0:
        raise UsageError(
            f"--spacing {grid.spacing} is beyond the longest trace ({top:,} tokens): no trace "
            "would be probed on the grid"
        )
    for qid in qids:
        path, j = pool.path / schema.trace_file_name(qid), longest_row[qid]
        idx = pq.read_table(path, columns=["trace_idx"])["trace_idx"]
        backend.check_probe_context(
            _problem(pool, qid),
            int(idx[j].as_py()),
            longest[qid],
            token_ids=_row_token_ids(path, j),
        )
    return longest


def _row_token_ids(path: Path, row: int) -> np.ndarray | None:
    """The token ids of one row of a trace file (reading only its row group), None without."""
    try:
        f = pq.ParquetFile(path, **schema.TRACE_READ_OPTIONS)
        if "token_ids" not in f.schema_arrow.names:
            return None
        start = 0
        for g in range(f.num_row_groups):
            n = f.metadata.row_group(g).num_rows
            if row < start + n:
                cell = f.read_row_group(g, columns=["token_ids"])["token_ids"][row - start]
                return cell.values.to_numpy() if cell.is_valid else None
            start += n
    except (OSError, pa.ArrowException) as exc:
        raise PoolError(f"{path}: unreadable ({str(exc).splitlines()[0]})") from None
    return None


def _problem(pool: LayoutPool, qid: int) -> Problem:
    meta = pool.question_meta(qid)
    return Problem(
        qid=qid,
        question=str(meta.get("question") or ""),
        answer=meta["ground_truth"],  # None: not known
        dataset=str(meta.get("dataset") or ""),
    )


def probe_pool(
    src: str | Path,
    out: str | Path,
    backend: Backend,
    *,
    spacing: int = schema.CHECKPOINT_SPACING,
    questions: Iterable[int] | None = None,
    progress: Progress | None = None,
    replace: bool = False,
) -> Path:
    """Probe every trace of the pool (or shard) ``src`` again into ``out``; return ``out``.

    Resumable: a question is done once its trace file exists in ``out``; re-running the same
    command probes the rest (identical results: probes are seeded by (seed, question, trace,
    position)). Another source, spacing or probe setting into the same ``out`` is refused, unless
    ``replace`` (then the earlier probing is discarded).
    """
    grid = Grid.checked(spacing)
    check_apart(out, [("TRACES", src)])
    pool = open_pool(src)
    if not isinstance(pool, LayoutPool):
        raise PoolError(f"{src}: `mars probe` reads a pool directory written by `mars generate`")
    qids = sorted(pool.qids if questions is None else {int(q) for q in questions})
    missing = [q for q in qids if q not in set(pool.qids)]
    if missing:
        raise UsageError(f"{src}: no question {missing[0]}")
    backend.bind_generator(dict(pool.manifest))
    check_inputs(pool, qids, backend, grid)
    describe = getattr(backend, "describe_probe", None) or getattr(backend, "describe", None)
    probe_info = {
        "prober": "mars.engines.probe",
        "spacing": grid.spacing,
        **(describe() if describe else {}),
    }
    # as a manifest holds them (JSON), so a finished run compares equal to its own command
    params = json.loads(json.dumps({"source": _source(pool.manifest), "probe": probe_info}))
    params["qids"] = qids
    writer = PoolDirWriter(
        out, params, record=PROBE_RECORD, what="probing", params_of=_params_of_manifest
    )
    with _undone_on_refusal(Path(out), params, [writer.trace_path(q) for q in qids]):
        if not writer.start(qids, replace=replace):
            os.utime(Path(out) / schema.POOL_MANIFEST)  # up to date: newer than its input again
            return Path(out)
        qrows = {r["qid"]: r for r in pq.read_table(pool.path / schema.POOL_QUESTIONS).to_pylist()}
        todo = writer.todo(qids)
        for qid in counted(todo, len(todo), progress):
            _probe_question(pool, qid, backend, grid, qrows[qid], writer)
    manifest = {**params["source"], "qids": qids, "spacing": grid.spacing, "probes": "stage"}
    writer.finish([qrows[q] for q in qids], {**manifest, "probe": params["probe"]})
    return Path(out)


def _source(manifest: dict) -> dict:
    """What a probed pool keeps of its input's manifest: the generation's parameters."""
    return {k: v for k, v in manifest.items() if k not in _REPLACED}


def _params_of_manifest(manifest: dict) -> dict:
    """The parameters a finished probed pool was written with, read back from its manifest."""
    return {
        "source": _source(manifest),
        "probe": manifest.get("probe"),
        "qids": manifest.get("qids"),
    }


@contextlib.contextmanager
def _undone_on_refusal(out: Path, params: dict, trace_files: list[Path]) -> Iterator[None]:
    """A refusal found only while probing (a :class:`MarsError`: traces that are not what the
    engine rebuilds, token ids missing, too short or outside the vocabulary, a re-encoded prefix
    past the context) undoes what this command wrote into ``out``, so the corrected command runs.
    Anything else (an interruption, a crash) keeps the finished questions to resume from."""
    record, manifest = out / PROBE_RECORD, out / schema.POOL_MANIFEST
    files = [*trace_files, record]
    before = {p: _identity(p) for p in files}
    try:
        done = read_manifest(manifest, schema.POOL_FORMAT, PoolError, "no manifest")
        finished = _params_of_manifest(done) == params
    except MarsError:  # none, or not ours: start() refuses it or starts afresh
        finished = False
    kept = manifest.read_bytes() if finished else b""
    made = [d for d in (out, out / schema.POOL_TRACES_DIR) if not d.exists()]
    try:
        yield
    except MarsError:
        for path in files:
            if _identity(path) not in (None, before[path]):  # written by this command
                path.unlink()
        if finished and not manifest.exists():  # a finished pool missing files: marked again
            write_atomic(manifest, lambda p: p.write_bytes(kept))
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only if empty
        raise


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def _probe_question(
    pool: LayoutPool, qid: int, backend: Backend, grid: Grid, qrow: dict, writer: PoolDirWriter
) -> None:
    path = pool.path / schema.trace_file_name(qid)
    try:
        table = pq.read_table(path, **schema.TRACE_READ_OPTIONS)
    except (OSError, pa.ArrowException) as exc:
        raise PoolError(f"{path}: unreadable ({str(exc).splitlines()[0]})") from None
    traces = stored_traces(table, str(path))
    positions = [grid.probe_positions(t.length) for t in traces]
    generator = GeneratorInfo(manifest=dict(pool.manifest), prompt_ids=qrow.get("prompt_ids"))
    results = backend.reprobe(_problem(pool, qid), traces, positions, generator)
    if len(results) != len(traces) or any(len(r) != len(p) for r, p in zip(results, positions)):
        raise RuntimeError(f"question {qid}: the backend returned probes for other positions")
    probes = probes_array([list(zip(p.tolist(), r)) for p, r in zip(positions, results)])
    table = table.set_column(table.column_names.index("probes"), "probes", probes)
    if "token_ids" not in table.column_names:
        table = table.append_column("token_ids", pa.nulls(len(table), pa.list_(pa.int32())))
    writer.write_question(qid, table.select(schema.TRACE_SCHEMA.names))


def probe_backend(manifest: dict, backend: str | None = None, **options) -> Backend:
    """The engine that probes a generation's traces: by default the generator's own (the same
    preset and seed for the synthetic engine, the same model for real ones)."""
    from ..engines import registry
    from ..engines.factory import make_backend

    name = backend or manifest.get("backend")
    if name is None:
        raise MarsError("the pool does not say which engine generated it: pass --backend")
    engine = registry.get(str(name))
    if engine.from_pool is not None:  # an engine that rebuilds its generator (synthetic)
        return engine.from_pool(manifest, options)
    model = options.pop("model", None) or manifest.get("model_path") or manifest.get("model")
    # the traces answer the generator's prompt: any probe model is shown that prompt (in its
    # own chat template), as inline probing showed it
    for key in ("prompt_template", "system_prompt"):
        if manifest.get(key) is not None and options.get(key) is None:
            options[key] = manifest[key]
    return make_backend(str(name), model=model, **options)
