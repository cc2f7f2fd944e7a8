"""Every served question is data: its traces appended to a pool, read offline like any live run.

``mars serve --record DIR`` keeps one pool per way of solving (method, traces, warmup, grid, knobs,
seed, model and sampling: what `mars replay` must know to re-decide), each a sub-folder of ``DIR``
named for it (``sc-mars-cal-n64-w16-s2048-t32768-seed0-T0.6-p0.95-1a2b3c4d``: what tells pools
apart, then a hash of the rest), in the layout `mars solve` writes::

    DIR/<pool>/traces/qNNNNNN.parquet   the question's warmup + main traces (as `mars solve`)
    DIR/<pool>/live/qNNNNNN.json        its live record, plus the request's seed
    DIR/<pool>/questions.parquet        the prompt as the model saw it, its token ids
    DIR/<pool>/pool.json                the pool's manifest (a live run's)

Questions are numbered in the order they finish (0, 1, …). Each question is written atomically:
its trace file, then its record, then the pool's question table and manifest, rewritten to hold
it, so ``mars replay DIR/<pool>``, ``mars simulate`` and ``mars report`` read served traffic at
any moment. A write that fails (a full disk, a permission) is rolled back — the pool as it was,
the number free for the next question — and the client still gets its answer (``record: null``).
A trace or record file without its row in the question table (a process killed between two
writes) is written over by the next question.

Several ``mars serve`` processes may record into one folder: a question is written holding the
record's lock (:func:`~mars.store.atomic.folder_lock`, ``flock`` on ``DIR/.mars-lock``, which
the kernel releases when its process dies, however it dies), and its number is taken from the
question table as it is on disk then, never from what this process wrote last, so no two
questions take one number and no writer drops another's rows. The question table is the pool's
list of questions (every reader reads it); the manifest is rewritten from it. A new pool is
written whole under a temporary name with its first question and renamed into place, so a pool
folder is a readable pool from the moment it exists.

Questions are recorded with their prompt's id replaced by their number in the pool; the ground
truth is what the client gave (``mars.ground_truth``), else empty (unknown).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import MarsError
from ..live.plan import pool_manifest
from ..live.records import CALIBRATION_FILE
from ..method.learned import Calibration
from ..store import schema
from ..store.atomic import (
    LOCK_NAME,
    check_output_dir,
    folder_lock,
    make_dirs,
    make_temp_dir,
    write_json_atomic,
)
from ..store.pool import PoolError
from ..store.pool.checks import check_qids
from ..store.problems import Problem, problem_digest
from ..store.userfiles import read_json_object
from ..store.write import PoolDirWriter

#: The dataset name of served questions in a record.
DATASET = "served"
#: A record folder's marker (what ``mars serve`` wrote there, so another folder is refused).
MARKER = "serve.json"
RECORD_KIND = "mars-serve-record"


@dataclass(frozen=True)
class Recorded:
    """Where a question was recorded: its pool's folder name and its number there."""

    pool: str
    qid: int


class _Pool:
    """One pool of the record (one way of solving), written question by question, by this
    process and any other (see the module docstring)."""

    def __init__(self, root: Path, name: str, params: dict):
        self.root, self.path, self.params = root, root / name, params
        self.lock = threading.Lock()  # this process's writers take turns before the folder's lock
        with folder_lock(root):
            self._read()  # a pool of other settings, or whose numbers repeat: refused at once
        self._calibrated = False

    def _read(self) -> list[dict]:
        """The pool's questions as its folder holds them now (other processes add to it); call
        holding the record's lock."""
        manifest_path = self.path / schema.POOL_MANIFEST
        if manifest_path.exists():
            manifest = read_json_object(manifest_path, PoolError)
            if manifest.get("live") != self.params:
                raise PoolError(f"{self.path}: holds a pool of other settings than its name says")
        qfile = self.path / schema.POOL_QUESTIONS
        if not qfile.exists():
            return []
        rows = pq.read_table(qfile).to_pylist()
        check_qids([r["qid"] for r in rows], str(qfile))
        return rows

    def add(
        self, table: pa.Table, summary: dict, row: dict, calibration: Calibration | None = None
    ) -> int:
        """Write one question under the next number the pool's folder leaves free; a write that
        fails leaves the pool as it was (and the number free), and is raised."""
        with self.lock, folder_lock(self.root):
            before = self._read()
            qid = max((r["qid"] for r in before), default=-1) + 1
            table = table.set_column(
                table.schema.get_field_index("qid"),
                "qid",
                pc.cast(pa.array([qid] * table.num_rows), pa.int64()),
            )
            question = (qid, table, _as_recorded(summary, qid, row), [*before, {**row, "qid": qid}])
            if self.path.exists():
                self._append(question, before, calibration)
            else:
                self._create(question, calibration)
            return qid

    def _create(self, question: tuple, calibration: Calibration | None) -> None:
        """A new pool, whole with its first question: written under a temporary name, renamed
        into place (a process killed on the way leaves no pool, and a hidden folder the next
        new pool of the name removes)."""
        for stale in self.root.glob(f".{self.path.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = make_temp_dir(self.root, f".{self.path.name}.tmp-")
        try:
            if calibration is not None:
                calibration.save(tmp / CALIBRATION_FILE)
            self._write(tmp, question, [])
            os.rename(tmp, self.path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._calibrated = True

    def _append(self, question: tuple, before: list[dict], calibration: Calibration | None) -> None:
        """One more question into the pool's folder: its trace file, its record, then the
        question table and the manifest; rolled back if a write fails."""
        if calibration is not None and not self._calibrated:
            calibration.save(self.path / CALIBRATION_FILE)
            self._calibrated = True
        written: list[Path] = []
        try:
            self._write(self.path, question, written)
        except BaseException:
            self._roll_back(written, before)
            raise

    def _write(self, folder: Path, question: tuple, written: list[Path]) -> None:
        """Write a question into ``folder`` (each file's path added to ``written`` once it is
        there): its trace file, its live record, the question table and the manifest."""
        qid, table, record, rows = question
        writer = self._writer(folder)
        make_dirs(folder / schema.POOL_TRACES_DIR)
        make_dirs(folder / "live")
        writer.write_question(qid, table)
        written.append(writer.trace_path(qid))
        live = folder / "live" / f"q{qid:06d}.json"
        write_json_atomic(live, record)
        written.append(live)
        writer.finish(rows, self._manifest(rows))

    def _writer(self, folder: Path) -> PoolDirWriter:
        return PoolDirWriter(folder, self.params, record=".serve.json", what="served record")

    def _manifest(self, rows: list[dict]) -> dict:
        return pool_manifest(self.params, qids=[r["qid"] for r in rows])

    def _roll_back(self, written: list[Path], rows: list[dict]) -> None:
        """Put the pool back as it was before a question whose writing failed (``rows``: the
        questions it held): its question table and manifest rewritten for them (or removed, when
        it held none), then the question's own files removed. If the table cannot be put back
        (the disk is still full), the question's files stay beside it: the table never names a
        question without its traces, and the next question, under the same number, writes over
        them."""
        try:
            if rows:
                self._writer(self.path).finish(rows, self._manifest(rows))
            else:
                for name in (schema.POOL_MANIFEST, schema.POOL_QUESTIONS):
                    (self.path / name).unlink(missing_ok=True)
        except (OSError, MarsError, pa.ArrowException):
            return
        for path in written:
            with contextlib.suppress(OSError):
                path.unlink()


def _as_recorded(summary: dict, qid: int, row: dict) -> dict:
    """A question's live record as its pool holds it: its number there, and what it was made for
    in the pool's terms (the digest of its row of ``questions.parquet``), which `mars replay`
    checks; the id its traces were seeded with (from its prompt) is kept as ``trace_seed_qid``."""
    digest = problem_digest(Problem(qid, row["question"], row["ground_truth"], DATASET))
    inputs = dict(summary["inputs"])
    warm = dict(inputs["warmup"])
    seeded = warm["qid"]
    inputs["problem"] = warm["problem"] = digest
    warm["qid"] = qid
    inputs["warmup"] = warm
    return {**summary, "qid": qid, "inputs": inputs, "trace_seed_qid": seeded}


def _holds_more_than(folder: Path, marker: Path) -> bool:
    """Whether ``folder`` holds anything but ``marker``, its temporary file and the folder's
    lock (what another proxy starting on the same new folder leaves there for a moment)."""
    own = {marker.name, LOCK_NAME}
    return any(
        p.name not in own and not p.name.startswith(f".{marker.name}.tmp-")
        for p in folder.iterdir()
    )


class Recorder:
    """The record folder (see the module docstring); thread-safe."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        check_output_dir(self.root)
        marker = self.root / MARKER
        if self.root.exists() and _holds_more_than(self.root, marker) and not marker.exists():
            raise MarsError(
                f"--record {self.root}: exists and is not a record of `mars serve` (no {MARKER})"
            )
        make_dirs(self.root)
        with folder_lock(self.root):  # proxies started together on a new folder: one marks it
            if marker.exists():
                found = read_json_object(marker, MarsError)
                if found.get("kind") != RECORD_KIND:
                    raise MarsError(f"{marker}: not a `mars serve` record marker")
            else:
                write_json_atomic(marker, {"kind": RECORD_KIND, "version": 1})
        self._pools: dict[str, _Pool] = {}
        self._lock = threading.Lock()

    @staticmethod
    def pool_name(params: dict) -> str:
        """``METHOD-nN-wW-sSPACING-tCAP-seedS[-TEMP][-pTOP_P][-FORMAT][-calDIGEST]-HASH``:
        what an operator tells pools apart by, then a hash of everything else."""
        digest = hashlib.blake2b(
            json.dumps(params, sort_keys=True, default=str).encode(), digest_size=4
        ).hexdigest()
        given = params.get("sampling")
        sampling: dict = given if isinstance(given, dict) else {}
        parts = [
            str(params["method"]),
            f"n{params['n_traces']}",
            f"w{params['warmup']}",
            f"s{params['spacing']}",
            f"t{params['max_tokens']}",
            f"seed{params['seed']}",
        ]
        if sampling.get("temperature") is not None:
            parts.append(f"T{sampling['temperature']:g}")
        if sampling.get("top_p") is not None:
            parts.append(f"p{sampling['top_p']:g}")
        if params.get("answer_format"):
            parts.append(str(params["answer_format"]))
        if params.get("calibration"):
            parts.append(f"cal{str(params['calibration'])[:6]}")
        return "-".join([*parts, digest])

    def add(
        self,
        params: dict,
        table: pa.Table,
        summary: dict,
        row: dict,
        calibration: Calibration | None = None,
    ) -> Recorded:
        """Append one question (its trace table, live summary and question row) to the pool of
        ``params`` (a live run's manifest block); a ``calibration`` it decided with is kept in
        the pool's folder (``mars replay`` reads it there)."""
        name = self.pool_name(params)
        with self._lock:
            pool = self._pools.get(name)
            if pool is None:
                pool = self._pools[name] = _Pool(self.root, name, params)
        return Recorded(name, pool.add(table, summary, row, calibration))

    def record_path(self, pool: str, qid: int) -> Path | None:
        """The live record of question ``qid`` of pool ``pool`` (None: no such record)."""
        if "/" in pool or pool.startswith(".") or pool not in self._known():
            return None
        path = self.root / pool / "live" / f"q{qid:06d}.json"
        return path if path.is_file() else None

    def _known(self) -> set[str]:
        return {p.name for p in self.root.iterdir() if (p / schema.POOL_MANIFEST).is_file()}
