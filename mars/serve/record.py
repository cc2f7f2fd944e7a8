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
A trace or record file without its manifest row (a crash between two writes) is written over by
the next question. Questions are recorded with their prompt's id replaced by
their number in the pool; the ground truth is what the client gave (``mars.ground_truth``), else
empty (unknown).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import MarsError
from ..live.records import CALIBRATION_FILE
from ..method.learned import Calibration
from ..store import schema
from ..store.atomic import check_output_dir, make_dirs, write_json_atomic
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
    """One pool of the record (one way of solving), written question by question."""

    def __init__(self, path: Path, params: dict):
        self.path = path
        self.params = params
        self.lock = threading.Lock()
        self.writer = PoolDirWriter(path, params, record=".serve.json", what="served record")
        self.rows: list[dict] = []
        manifest_path = path / schema.POOL_MANIFEST
        if manifest_path.exists():
            manifest = read_json_object(manifest_path, PoolError)
            if manifest.get("live") != params:
                raise PoolError(f"{path}: holds a pool of other settings than its name says")
            table = pq.read_table(path / schema.POOL_QUESTIONS)
            self.rows = table.to_pylist()
            check_qids([r["qid"] for r in self.rows], str(path / schema.POOL_QUESTIONS))
        self.next_qid = max((r["qid"] for r in self.rows), default=-1) + 1
        make_dirs(path / schema.POOL_TRACES_DIR)
        make_dirs(path / "live")

    def add(self, table: pa.Table, summary: dict, row: dict) -> int:
        """Write one question under the next number; a write that fails leaves the pool as it
        was (and the number free), and is raised."""
        with self.lock:
            qid = self.next_qid
            table = table.set_column(
                table.schema.get_field_index("qid"),
                "qid",
                pc.cast(pa.array([qid] * table.num_rows), pa.int64()),
            )
            rows = [*self.rows, {**row, "qid": qid}]
            written: list[Path] = []
            try:
                self.writer.write_question(qid, table)
                written.append(self.writer.trace_path(qid))
                live = self.path / "live" / f"q{qid:06d}.json"
                write_json_atomic(live, _as_recorded(summary, qid, row))
                written.append(live)
                self.writer.finish(rows, self._manifest(rows))
            except BaseException:
                self._roll_back(written)
                raise
            self.rows, self.next_qid = rows, qid + 1
            return qid

    def _manifest(self, rows: list[dict]) -> dict:
        return {
            **{
                k: v
                for k, v in self.params.items()
                if k not in ("settings", "method", "warmup", "compare_full")
            },
            "n_traces": int(self.params["warmup"] + self.params["n_traces"]),
            "qids": [r["qid"] for r in rows],
            "live": self.params,
        }

    def _roll_back(self, written: list[Path]) -> None:
        """Put the pool back as it was before a question whose writing failed: its question table
        and manifest rewritten for the questions it held (or removed, when it held none), then
        the question's own files removed. If the table cannot be put back (the disk is still
        full), the question's files stay beside it: the table never names a question without its
        traces, and the next question, under the same number, writes over them."""
        try:
            if self.rows:
                self.writer.finish(self.rows, self._manifest(self.rows))
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


class Recorder:
    """The record folder (see the module docstring); thread-safe."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        check_output_dir(self.root)
        marker = self.root / MARKER
        if self.root.exists() and any(self.root.iterdir()) and not marker.exists():
            raise MarsError(
                f"--record {self.root}: exists and is not a record of `mars serve` (no {MARKER})"
            )
        if marker.exists():
            found = read_json_object(marker, MarsError)
            if found.get("kind") != RECORD_KIND:
                raise MarsError(f"{marker}: not a `mars serve` record marker")
        else:
            make_dirs(self.root)
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
                pool = self._pools[name] = _Pool(self.root / name, params)
                if calibration is not None:
                    calibration.save(pool.path / CALIBRATION_FILE)
        return Recorded(name, pool.add(table, summary, row))

    def record_path(self, pool: str, qid: int) -> Path | None:
        """The live record of question ``qid`` of pool ``pool`` (None: no such record)."""
        if "/" in pool or pool.startswith(".") or pool not in self._known():
            return None
        path = self.root / pool / "live" / f"q{qid:06d}.json"
        return path if path.is_file() else None

    def _known(self) -> set[str]:
        return {p.name for p in self.root.iterdir() if (p / schema.POOL_MANIFEST).is_file()}
