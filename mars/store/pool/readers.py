"""The two pool formats behind one interface: our per-question layout and the authors' published
parquet, opened by :func:`open_pool` and read one question at a time."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...errors import first_line
from .. import confs as confs_codec
from .. import schema
from ..grid import Grid
from ..userfiles import read_manifest, regular_file
from .checks import check_lengths, check_qids, require_columns
from .confstream import STREAM_OPTIONS, read_confs, stream_confs
from .decode import question_from_table
from .grid import probe_spacing
from .question import PoolError, QuestionData

__all__ = ["LayoutPool", "Pool", "PublishedPool", "open_pool", "read_trace_table"]


class Pool:
    """Common interface of the two pool formats."""

    source: str
    qids: list[int]
    #: the probe grid the pool records (None: not recorded); of the published format, which
    #: records none, the grid its probes lie on (:func:`probe_spacing`)
    grid: Grid | None = None

    def read_question(self, qid: int) -> QuestionData:  # pragma: no cover - interface
        raise NotImplementedError

    def questions(self) -> Iterator[QuestionData]:
        for qid in self.qids:
            yield self.read_question(qid)

    def trace_counts(self, qids: Sequence[int]) -> dict[int, int]:
        """Traces (rows) of each question, read from file metadata, never the traces: what sizes
        are checked against before any work. A question it cannot tell is left out (reading it
        then says what is wrong)."""
        return {}

    def has_confs(self, qid: int) -> bool:
        """Whether question ``qid`` has per-token confidences (what a group of methods keeps of
        DeepConf), read from as little of the question as the format allows."""
        return self.read_question(qid).has_confs

    def work_estimate(self, qids: Sequence[int]) -> dict[int, int]:
        """A number that grows with the work of reading and simulating each question (its trace
        file's bytes; here its traces), from metadata: the largest go to workers first."""
        return self.trace_counts(qids)

    def fingerprint(self) -> str:
        """Cheap identity of the input (size + mtime of every file);
        content hashes are per question."""
        h = hashlib.blake2b(digest_size=16)
        for p in sorted(self._files()):
            st = os.stat(p)
            h.update(f"{p.name}:{st.st_size}:{st.st_mtime_ns}".encode())
        return h.hexdigest()

    def _files(self) -> list[Path]:  # pragma: no cover - interface
        raise NotImplementedError


class PublishedPool(Pool):
    """The authors' published parquet, read per question through row-group statistics."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.source = str(path)
        regular_file(self.path, PoolError)
        try:
            self._pf = pq.ParquetFile(self.path)
        except Exception as exc:
            raise PoolError(f"{self.source}: not a readable parquet file ({exc})") from None
        require_columns(
            self._pf.schema_arrow, schema.PUBLISHED_SCHEMA.remove(4).remove(2), self.source
        )
        names = set(self._pf.schema_arrow.names)
        self._has_confs = "confs" in names
        if self._has_confs:
            require_columns(
                self._pf.schema_arrow,
                pa.schema([schema.PUBLISHED_SCHEMA.field("confs")]),
                self.source,
            )
        self._has_gt = "ground_truth" in names
        if not self._has_gt:
            raise PoolError(f"{self.source}: missing column 'ground_truth'")
        self._row_groups: dict[int, list[int]] = {}
        for rg in range(self._pf.num_row_groups):
            try:
                qids = self._pf.read_row_group(rg, columns=["qid"]).column("qid")
            except (OSError, pa.ArrowException) as exc:
                raise PoolError(
                    f"{self.source}: row group {rg} unreadable ({first_line(exc)})"
                ) from None
            if qids.null_count:
                raise PoolError(f"{self.source}: null qid in row group {rg}")
            for q in pc.unique(qids).to_pylist():
                self._row_groups.setdefault(int(q), []).append(rg)
        if not self._row_groups:
            raise PoolError(f"{self.source}: empty pool (no rows)")
        self.qids = sorted(self._row_groups)
        check_qids(self.qids, self.source)
        spacing = probe_spacing(self._pf, self.source)
        self.grid = None if spacing is None else Grid(spacing)

    def _files(self) -> list[Path]:
        return [self.path]

    def has_confs(self, qid: int) -> bool:
        return self._has_confs  # a question without them is an error when read

    def trace_counts(self, qids: Sequence[int]) -> dict[int, int]:
        counts = pc.value_counts(self._pf.read(columns=["qid"]).column("qid"))
        wanted = set(qids)
        return {
            int(c["values"]): int(c["counts"]) for c in counts.to_pylist() if c["values"] in wanted
        }

    def read_question(self, qid: int) -> QuestionData:
        if qid not in self._row_groups:
            raise PoolError(
                f"{self.source}: no question {qid} (questions: {self.qids[0]}..{self.qids[-1]})"
            )
        cols = ["qid", "trace_idx", "ground_truth", "extracted_answer", "probes"]
        rgs = self._row_groups[qid]
        where = f"{self.source}: question {qid}"
        try:
            t = self._pf.read_row_groups(rgs, columns=cols)
            mine = pc.equal(t.column("qid"), qid)
            if not pc.all(mine).as_py():  # a row group shared with other questions
                t = t.filter(mine)
            confs = None
            if self._has_confs:  # streamed, as a pool's are: a list column decoded whole
                # holds its levels beside the values, and the table a second copy
                pf = pq.ParquetFile(self.path, **STREAM_OPTIONS, **schema.TRACE_READ_OPTIONS)
                confs = stream_confs(
                    pf, where, t.num_rows, self._conf_capacity(pf, rgs), "the file says", rgs, qid
                )
        except (OSError, pa.ArrowException) as exc:
            raise PoolError(f"{where}: unreadable ({first_line(exc)})") from None
        return question_from_table(t, qid, self.source, published=True, confs=confs)

    @staticmethod
    def _conf_capacity(pf: pq.ParquetFile, row_groups: list[int]) -> int:
        """At least the confidences these row groups hold: the values their ``confs`` column
        chunks record (one more for each empty or null list), from the file's metadata."""
        md = pf.metadata
        leaf = next(
            j
            for j in range(md.num_columns)
            if md.row_group(0).column(j).path_in_schema.split(".")[0] == "confs"
        )
        return sum(md.row_group(rg).column(leaf).num_values for rg in row_groups)


class LayoutPool(Pool):
    """Our per-question pool directory (see :mod:`mars.store.schema`)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.source = str(path)
        self.manifest = read_manifest(
            self.path / schema.POOL_MANIFEST,
            schema.POOL_FORMAT,
            PoolError,
            f"{self.source}: not a pool directory (no {schema.POOL_MANIFEST})",
            schema.POOL_FORMAT_VERSIONS_READ,
        )
        qfile = regular_file(self.path / schema.POOL_QUESTIONS, PoolError)
        try:
            qt = pq.read_table(qfile)
        except Exception as exc:
            raise PoolError(f"{qfile}: unreadable ({exc})") from None
        require_columns(
            qt.schema,
            pa.schema([schema.QUESTION_SCHEMA.field(n) for n in ("qid", "ground_truth")]),
            str(qfile),
        )
        rows = qt.to_pylist()
        if not rows:
            raise PoolError(f"{qfile}: empty pool (no questions)")
        if any(r["qid"] is None for r in rows):
            raise PoolError(f"{qfile}: null qid")
        self.qids = check_qids([r["qid"] for r in rows], str(qfile))
        self._questions = {r["qid"]: r for r in rows}
        #: questions whose answer is not known (null ground truth): nothing to grade against
        self.unknown_answers = [q for q in self.qids if self._questions[q]["ground_truth"] is None]
        self.grid = Grid.of_manifest(self.manifest, self.path / schema.POOL_MANIFEST, PoolError)
        for f in self._files():  # before any work: reading a FIFO would wait forever
            if os.path.lexists(f):
                regular_file(f, PoolError)

    def _files(self) -> list[Path]:
        return [self.path / schema.POOL_QUESTIONS] + [
            self.path / schema.trace_file_name(q) for q in self.qids
        ]

    def trace_counts(self, qids: Sequence[int]) -> dict[int, int]:
        counts = {}
        for q in qids:
            f = self.path / schema.trace_file_name(q)
            if not f.is_file():  # missing, or not a regular file (a FIFO would block)
                continue
            try:
                counts[q] = pq.ParquetFile(f).metadata.num_rows
            except Exception:  # unreadable: read_question reports it
                continue
        return counts

    def work_estimate(self, qids: Sequence[int]) -> dict[int, int]:
        sizes = {}
        for q in qids:
            try:
                sizes[q] = (self.path / schema.trace_file_name(q)).stat().st_size
            except OSError:  # reading it says what is wrong
                sizes[q] = 0
        return sizes

    def has_confs(self, qid: int) -> bool:
        """The first trace's ``confs`` tells (a pool holds them for every trace or none; reading
        the question checks that); anything unusual reads the question, which says what is wrong."""
        f = self.path / schema.trace_file_name(qid)
        try:
            pf = pq.ParquetFile(f, **schema.TRACE_READ_OPTIONS)
            if "confs" not in pf.schema_arrow.names:
                return False
            first = next(pf.iter_batches(batch_size=1, columns=["confs"], use_threads=False))
            return first.num_rows == 1 and first.column(0).null_count == 0
        except Exception:  # missing, damaged, empty: the reader's own message
            return super().has_confs(qid)

    def question_meta(self, qid: int) -> dict:
        return dict(self._questions[qid])

    def read_question(self, qid: int, first_trace: int = 0) -> QuestionData:
        """Question ``qid``, checked; ``first_trace``: the first trace id of a shard's
        (:mod:`mars.store.consolidate`)."""
        if qid not in self._questions:
            raise PoolError(f"{self.source}: no question {qid}")
        f = self.path / schema.trace_file_name(qid)
        regular_file(f, PoolError, f"{f}: missing trace file for question {qid}")
        try:
            names = pq.read_schema(f).names
            t = pq.read_table(
                f,
                columns=[n for n in names if n not in schema.TRACE_PAYLOAD_COLUMNS],
                **schema.TRACE_READ_OPTIONS,
            )
        except FileNotFoundError:
            raise PoolError(f"{f}: missing trace file for question {qid}") from None
        except Exception as exc:
            raise PoolError(f"{f}: unreadable ({first_line(exc)})") from None
        if "qid" in t.column_names:
            qids = t.column("qid")
            other = pc.unique(pc.drop_null(qids)).to_pylist()
            if qids.null_count or other != [qid]:
                found = [str(x) for x in sorted(int(x) for x in other if x != qid)] or ["null"]
                raise PoolError(
                    f"{f}: holds rows of question {found[0]}, but this file is question {qid}'s"
                )
        required = pa.schema(
            [
                schema.TRACE_SCHEMA.field(n)
                for n in ("trace_idx", "final_answer", "length", "probes")
            ]
        )
        require_columns(t.schema, required, str(f))
        check_lengths(t.column("length"), t.column("trace_idx"), str(f))
        meta = self._questions[qid]
        try:
            confs = read_confs(f, t)
        except (OSError, pa.ArrowException) as exc:
            raise PoolError(f"{f}: unreadable ({first_line(exc)})") from None
        q = question_from_table(
            t,
            qid,
            str(f),
            published=False,
            ground_truth=meta["ground_truth"] or "",  # not known: no answer is graded correct
            question=meta.get("question"),
            confs=confs,
            first_trace=first_trace,
        )
        q.meta = {k: meta.get(k) for k in ("dataset", "model")}
        return q


def read_trace_table(path: str | Path, columns: list[str] | None = None) -> pa.Table:
    """A trace file of either format as producers build it (confidences as float16 lists,
    :data:`mars.store.schema.TRACE_SCHEMA`): for inspecting a pool with pyarrow or pandas."""
    return confs_codec.lists_table(
        pq.read_table(path, columns=columns, **schema.TRACE_READ_OPTIONS)
    )


def open_pool(path: str | Path) -> Pool:
    """Open a published parquet file or a pool directory."""
    p = Path(path)
    if p.is_dir():
        return LayoutPool(p)
    if not p.exists():
        raise PoolError(f"{path}: no such file or directory")
    return PublishedPool(p)
