"""Writing pool directories (the layout of :mod:`mars.store.schema`): the one writer behind
generation,
live runs, imports and consolidation.

Two modes:

* **resumable** (``mars generate``, ``mars solve``): written in place. The run's parameters go
  first into a record file (``.generate.json``, ``.solve.json``); every trace file is written
  atomically, so a question whose file exists is done; ``questions.parquet`` and ``pool.json``
  (the completion marker) come last and the record is removed. Re-running the same command skips
  what is done and regenerates the rest; since every trace is reproducible from (seed, qid,
  trace_idx) the result is identical to an uninterrupted run. A run with *other* parameters into
  the same folder is refused.
* **atomic** (``mars import``, ``mars consolidate``): everything is written to a hidden sibling
  folder and renamed into place at the end; a failure leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import MarsError
from . import confs, schema
from .atomic import (
    LOCK_NAME,
    check_output_dir,
    make_dirs,
    make_temp_dir,
    write_atomic,
    write_json_atomic,
)
from .pool import PoolError, QuestionData
from .userfiles import parse_json, read_json_object

#: A manifest's view of the parameters it was written with (compared on resume).
ParamsOf = Callable[[dict], dict]
#: Parquet metadata key of a resumable run's trace files: the run's parameters (JSON).
RUN_METADATA_KEY = "mars.run"
#: Parquet metadata key of a trace table (and file) some of whose confidences were stood in for
#: log-probabilities the engine did not send: how many (absent: none).  :meth:`PoolDirWriter.finish`
#: sums them into the manifest's ``stood_in_confs``.
STOOD_IN_KEY = "mars.stood_in_confs"
#: The manifest key of that sum (absent: none stood in).
STOOD_IN_MANIFEST_KEY = "stood_in_confs"


def stood_in_of(table: pa.Table | pa.Schema, where: str = "trace table") -> int:
    """How many of a trace table's confidences were stood in for (:data:`STOOD_IN_KEY`)."""
    meta = table.metadata if isinstance(table, pa.Schema) else table.schema.metadata
    raw = (meta or {}).get(STOOD_IN_KEY.encode())
    if raw is None:
        return 0
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if n < 0:
        raise PoolError(f"{where}: its count of stood-in confidences {raw[:40]!r} is not a count")
    return n


def with_stood_in(table: pa.Table, n: int) -> pa.Table:
    """``table`` recording that ``n`` of its confidences were stood in for (0: none)."""
    meta = dict(table.schema.metadata or {})
    meta.pop(STOOD_IN_KEY.encode(), None)
    if n:
        meta[STOOD_IN_KEY.encode()] = str(int(n)).encode()
    return table.replace_schema_metadata(meta or None)


def _params_at_top(params: dict) -> ParamsOf:
    return lambda manifest: {k: manifest.get(k) for k in params}


def write_trace_table(
    table: pa.Table, path: str | Path, metadata: dict[str, str] | None = None
) -> None:
    """Write one question's trace table atomically, with the pool's parquet options (and
    ``metadata`` as its schema metadata, replacing any it had), its confidences stored as bytes
    (:mod:`mars.store.confs`); the table's count of stood-in confidences is kept."""
    n = stood_in_of(table)
    table = with_stood_in(confs.stored_table(table).replace_schema_metadata(metadata), n)
    write_atomic(path, lambda p: pq.write_table(table, p, **schema.TRACE_PARQUET_OPTIONS))


def _as_trace_table(traces: pa.Table | dict) -> pa.Table:
    """A trace table in TRACE_FILE_SCHEMA, followed by the optional columns it holds
    (:data:`mars.store.schema.TRACE_OPTIONAL_FIELDS`)."""
    names = traces if isinstance(traces, dict) else traces.column_names
    extra = [f for f in schema.TRACE_OPTIONAL_FIELDS if f.name in names]
    if isinstance(traces, dict):
        full = pa.schema([*schema.TRACE_SCHEMA, *extra])
        return confs.stored_table(pa.Table.from_pydict(traces, schema=full))
    base = confs.stored_table(traces.select(schema.TRACE_SCHEMA.names))
    if not base.schema.equals(schema.TRACE_FILE_SCHEMA):
        base = base.cast(schema.TRACE_FILE_SCHEMA)
    for f in extra:
        base = base.append_column(f, traces.column(f.name).cast(f.type))
    return with_stood_in(base, stood_in_of(traces))


class PoolDirWriter:
    """Write a pool directory question by question (see the module docstring for the modes).

    Resumable use::

        w = PoolDirWriter(out, params, record=".generate.json", what="generation")
        if not w.start(qids):            # False: a finished pool of these parameters is there
            return out
        for qid in w.todo(qids): w.write_question(qid, table)
        w.finish(question_rows, manifest)

    Atomic use: ``with PoolDirWriter(out, atomic=True) as w: w.write_question(...);
    w.finish(rows, manifest)`` (leaving the block without ``finish`` discards everything).
    """

    def __init__(
        self,
        out: str | Path,
        params: dict | None = None,
        *,
        record: str = ".generate.json",
        what: str = "generation",
        atomic: bool = False,
        overwrite: bool = False,
        params_of: ParamsOf | None = None,
        done_marker: Callable[[int], Path] | None = None,
    ):
        self.out = Path(out)
        self.params = dict(params or {})
        self.record = self.out / record
        self.what = what
        self.atomic = atomic
        self.overwrite = overwrite
        self.params_of = params_of or _params_at_top(self.params)
        self._done_marker = done_marker
        self._tmp: Path | None = None
        if atomic:
            if self.out.exists() and not overwrite:
                raise PoolError(f"{self.out}: already exists (refusing to overwrite)")
            check_output_dir(self.out.parent, "output")
            try:
                make_dirs(self.out.parent)
                self._tmp = make_temp_dir(self.out.parent, f".{self.out.name}.tmp-")
            except OSError as exc:
                raise MarsError(f"{self.out}: cannot write here ({exc.strerror or exc})") from None
            (self._tmp / schema.POOL_TRACES_DIR).mkdir()

    # -- where things go ---------------------------------------------------------------------
    @property
    def root(self) -> Path:
        """The folder being written (the hidden sibling in atomic mode)."""
        return self._tmp if self._tmp is not None else self.out

    def trace_path(self, qid: int) -> Path:
        return self.root / schema.trace_file_name(qid)

    def is_done(self, qid: int) -> bool:
        marker = self._done_marker(qid) if self._done_marker else self.trace_path(qid)
        return marker.exists()

    def todo(self, qids: list[int]) -> list[int]:
        return [q for q in qids if not self.is_done(q)]

    # -- resumable protocol ------------------------------------------------------------------
    def start(self, qids: list[int], replace: bool = False) -> bool:
        """Claim ``out`` for this run: False when a finished pool of the same parameters holding
        every question is already there (nothing to do), True when work may start or resume.

        ``replace``: a folder this writer's kind of run wrote with *other* parameters is emptied
        and started over instead of refused (a workflow rerun after a settings change); a folder
        of anything else is still refused.
        """
        out, manifest_path = self.out, self.out / schema.POOL_MANIFEST
        check_output_dir(out)
        if replace and self._written_with_other_params():
            shutil.rmtree(out)
        if os.path.lexists(manifest_path):
            done = read_json_object(manifest_path, PoolError)
            if self.params_of(done) != self.params:
                raise PoolError(
                    f"{out}: holds a finished pool {self.what} with other parameters"
                    f"{_other_run(self.params_of(done), self.params)}"
                )
            if all(self.is_done(q) for q in qids):
                return False
            # files were deleted since: regenerate them (the manifest is rewritten at the end)
            manifest_path.unlink()
            write_json_atomic(self.record, self.params)
        if os.path.lexists(self.record):
            prev = read_json_object(self.record, PoolError)
            if prev != self.params:
                raise PoolError(
                    f"{out}: holds an interrupted {self.what} with other parameters"
                    f"{_other_run(prev, self.params)}"
                )
        elif out.exists() and any(p.name != LOCK_NAME for p in out.iterdir()):
            # no record and no manifest (e.g. a workflow manager deleted the completion marker
            # of a finished run): the trace files still say which run wrote them
            found = self._recorded_params()
            if found is None:
                raise PoolError(
                    f"{out}: exists and is not an interrupted {self.what} (refusing to overwrite)"
                )
            if found != self.params:
                raise PoolError(
                    f"{out}: holds a {self.what} with other parameters"
                    f"{_other_run(found, self.params)}"
                )
        try:
            make_dirs(out / schema.POOL_TRACES_DIR)
        except OSError as exc:
            raise MarsError(f"{out}: cannot create it ({exc.strerror or exc})") from None
        if not self.record.exists():
            write_json_atomic(self.record, self.params)
        for stale in (out / schema.POOL_TRACES_DIR).glob(".*.tmp-*"):
            stale.unlink()
        return True

    # -- writing -----------------------------------------------------------------------------
    def write_question(self, qid: int, traces: pa.Table | dict) -> None:
        """Write one question's trace file atomically. In resumable mode the file carries the
        run's parameters in its parquet metadata, so a folder is never left unidentifiable."""
        table = _as_trace_table(traces)
        write_trace_table(table, self.trace_path(int(qid)), self.run_metadata())

    def run_metadata(self) -> dict[str, str] | None:
        """The parquet metadata of this run's trace files (None in atomic mode)."""
        if self.atomic:
            return None
        return {RUN_METADATA_KEY: json.dumps(self.params, sort_keys=True)}

    def _written_with_other_params(self) -> bool:
        """Whether ``out`` holds this kind of run (its record, or trace files naming their run)
        made with other parameters."""
        if not self.out.is_dir():
            return False
        if os.path.lexists(self.record):
            return read_json_object(self.record, PoolError) != self.params
        manifest_path = self.out / schema.POOL_MANIFEST
        found = self._recorded_params()
        if found is not None:
            return found != self.params
        if os.path.lexists(manifest_path):
            return self.params_of(read_json_object(manifest_path, PoolError)) != self.params
        return False

    def _recorded_params(self) -> dict | None:
        """The parameters a trace file of ``out`` was written with (None: no such file)."""
        for path in sorted((self.out / schema.POOL_TRACES_DIR).glob("q*.parquet")):
            try:
                meta = pq.read_schema(path).metadata or {}
            except (OSError, pa.ArrowException):
                continue
            raw = meta.get(RUN_METADATA_KEY.encode())
            if raw is not None:
                try:
                    found = parse_json(raw, str(path), PoolError)
                except PoolError:
                    continue
                if isinstance(found, dict):
                    return found
        return None

    def finish(self, questions: list[dict], manifest: dict) -> Path:
        """Write ``questions.parquet`` and then ``pool.json`` (the completion marker)."""
        rows = sorted(
            ({n: r.get(n) for n in schema.QUESTION_SCHEMA.names} for r in questions),
            key=itemgetter("qid"),
        )
        table = pa.Table.from_pylist(rows, schema=schema.QUESTION_SCHEMA)
        write_atomic(self.root / schema.POOL_QUESTIONS, lambda p: pq.write_table(table, p))
        full: dict[str, Any] = {
            "format": schema.POOL_FORMAT,
            "version": schema.POOL_FORMAT_VERSION,
            **manifest,
            "n_questions": len(rows),
        }
        full.pop(STOOD_IN_MANIFEST_KEY, None)
        stood_in = sum(self._stood_in(int(q["qid"])) for q in questions)
        if stood_in:
            full[STOOD_IN_MANIFEST_KEY] = stood_in
        write_json_atomic(self.root / schema.POOL_MANIFEST, full)
        if self._tmp is not None:
            if self.out.exists() and self.overwrite:
                shutil.rmtree(self.out)
            os.replace(self._tmp, self.out)
            self._tmp = None
        else:
            with contextlib.suppress(FileNotFoundError):
                self.record.unlink()
        return self.out

    def _stood_in(self, qid: int) -> int:
        """The count of stood-in confidences a question's trace file records."""
        path = self.trace_path(int(qid))
        try:
            return stood_in_of(pq.read_schema(path), str(path))
        except (OSError, pa.ArrowException):
            return 0  # a question without a trace file of its own (no file: nothing recorded)

    def abort(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> PoolDirWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.abort()  # a no-op after finish()


def _differing(a: object, b: object) -> list[str]:
    """The parameters that differ; a damaged record (not an object) differs in all of them."""
    a = a if isinstance(a, dict) else {}
    b = b if isinstance(b, dict) else {}
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def _other_run(found: object, wanted: dict) -> str:
    """What differs between the run a folder holds and the one asked for, and what to do: the
    end of the line refusing it."""
    keys = _differing(found, wanted)
    text = f" ({', '.join(keys)}): to keep it, rerun with its parameters"
    qids = found.get("qids") if isinstance(found, dict) else None
    if "qids" in keys and isinstance(qids, list) and all(isinstance(q, int) for q in qids):
        text += f" (its questions: --questions {_question_spec(qids)})"
    return text + "; for these, choose another --out; to replace it, delete the folder"


def _question_spec(qids: list[int]) -> str:
    """[0, 1, 2, 5] → "0-2,5" (what --questions reads)."""
    parts: list[str] = []
    for q in sorted(set(qids)):
        if parts and q == int(parts[-1].rsplit("-", 1)[-1]) + 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{q}"
        else:
            parts.append(str(q))
    return ",".join(parts)


# ---------------------------------------------------------------------------------------------
# Trace tables: the inverse of the readers (mars.store.pool)


def probes_array(probe_lists: Sequence[Sequence[tuple[int, Any]]]) -> pa.ListArray:
    """The ``probes`` column (:data:`mars.store.schema.PROBE_TYPE`) of traces whose probes are
    ``(position, ProbeResult)`` pairs in checkpoint order."""
    offsets = np.zeros(len(probe_lists) + 1, np.int32)
    np.cumsum([len(ps) for ps in probe_lists], out=offsets[1:])
    flat = [pr for ps in probe_lists for pr in ps]
    pos = pa.array([p for p, _ in flat], pa.int64())
    cols = [
        pa.array([pr.answer for _, pr in flat], pa.string()),
        pa.array([pr.raw_text for _, pr in flat], pa.string()),
        pa.array([pr.conf for _, pr in flat], pa.float32()),
        pa.array([pr.prompt_tokens for _, pr in flat], pa.int32()),
        pa.array([pr.cached_tokens for _, pr in flat], pa.int32()),
        pa.array([pr.generated_tokens for _, pr in flat], pa.int32()),
    ]
    struct = pa.StructArray.from_arrays([pos, *cols], fields=list(schema.PROBE_TYPE))
    return pa.ListArray.from_arrays(pa.array(offsets), struct)


def token_ids_array(ids: Sequence[np.ndarray | None]) -> pa.Array:
    """The ``token_ids`` column: int32 lists, null for traces without token ids."""
    if all(x is None for x in ids):
        return pa.nulls(len(ids), pa.list_(pa.int32()))
    return pa.array(
        [None if x is None else np.asarray(x, np.int32) for x in ids], pa.list_(pa.int32())
    )


def question_to_table(q: QuestionData) -> pa.Table:
    """Our trace table for a loaded question (the inverse of the readers)."""
    n = q.n_traces
    p_ans = pa.array(
        [q.probe_strings[c] if c >= 0 else None for c in q.probe_codes.tolist()], pa.string()
    )
    cost = q.probe_cost

    def cost_col(i):
        if cost is None:
            return pa.nulls(len(q.probe_positions), pa.int32())
        v = cost[:, i]
        return pa.array(v, mask=v < 0).cast(pa.int32())

    probe_struct = pa.StructArray.from_arrays(
        [
            pa.array(q.probe_positions, pa.int64()),
            p_ans,
            pa.nulls(len(p_ans), pa.string()),
            pa.nulls(len(p_ans), pa.float32()),
            cost_col(0),
            cost_col(1),
            cost_col(2),
        ],
        fields=list(schema.PROBE_TYPE),
    )
    probes = pa.ListArray.from_arrays(pa.array(q.probe_offsets, pa.int32()), probe_struct)
    if q.conf_values is not None:
        confs = pa.ListArray.from_arrays(
            pa.array(q.conf_offsets, pa.int64()).cast(pa.int32()),
            pa.array(q.conf_values, pa.float16()),
        )
    else:
        confs = pa.nulls(n, pa.list_(pa.float16()))
    return pa.Table.from_arrays(
        [
            pa.array(np.full(n, q.qid), pa.int64()),
            pa.array(q.trace_idx, pa.int64()),
            pa.array(q.final_answers, pa.string()),
            pa.array(q.lengths, pa.int64()),
            pa.nulls(n, pa.bool_()),
            confs,
            probes,
            pa.nulls(n, pa.string()),
            pa.nulls(n, pa.list_(pa.int32())),
        ],
        schema=schema.TRACE_SCHEMA,
    )
