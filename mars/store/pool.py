"""Trace pools: read one question at a time, validate, write atomically.

A pool is either the authors' published parquet (one file, one row per trace) or our pool layout
(see :mod:`mars.store.schema`). Both are read question by question with pyarrow; list columns are
turned into flat numpy buffers plus offsets, never into per-token Python objects, so peak memory is
bounded by one question.

Answer conventions, the same for both formats once loaded: an empty answer string means "no
answer" and is read as ``None``. In our layout a probe with a null answer is an *abstention* (the
probe ran but nothing parsed); in the published format the authors' loader drops such probes, so a
running trace left without a probe at a grid point is an error there, as in the reference.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import MarsError, first_line
from . import confs as confs_codec
from . import schema
from .userfiles import read_json, regular_file


class PoolError(MarsError):
    """Bad pool input. The message is one line naming the file, question and trace."""


def read_manifest(
    path: Path,
    fmt: str,
    error: type[MarsError],
    missing: str,
    version: int | tuple[int, ...] | None = None,
    remedy: str = "",
) -> dict:
    """A directory's JSON manifest of format ``fmt`` (and ``version``, or one of them, when
    given); ``missing`` is the error without one, ``remedy`` what to do about another version."""
    manifest = read_json(path, error, missing)
    if not isinstance(manifest, dict) or manifest.get("format") != fmt:
        raise error(f"{path}: not a {fmt} manifest")
    versions = (version,) if isinstance(version, int) else version
    if versions is not None and manifest.get("version") not in versions:
        readable = " and ".join(str(v) for v in versions)
        raise error(
            f"{path}: {fmt} format version {manifest.get('version')!r} is not supported "
            f"(this mars reads version {readable}){'; ' + remedy if remedy else ''}"
        )
    return manifest


@dataclass
class QuestionData:
    """One question's traces as flat numpy buffers (the output of the pool readers)."""

    qid: int
    ground_truth: str
    trace_idx: np.ndarray  # int64 [n]
    lengths: np.ndarray  # int64 [n], generated tokens
    final_answers: list  # [n] str | None
    probe_offsets: np.ndarray  # int64 [n+1] into the flat probe arrays
    probe_positions: np.ndarray  # int64 [total probes]
    probe_codes: np.ndarray  # int32 [total probes], index into probe_strings, -1 = abstained
    probe_strings: list  # unique probe answer strings
    conf_offsets: np.ndarray | None = None  # int64 [n+1]
    conf_values: np.ndarray | None = None  # float16 [total tokens]
    probe_cost: np.ndarray | None = (
        None  # int64 [total probes, 3]: prompt, cached, generated; -1 unknown
    )
    question: str | None = None
    source: str = "<memory>"
    meta: dict = field(default_factory=dict)
    #: int64 [n]: probes the source recorded per trace (-1: unknown; schema.PROBE_STEPS_FIELD)
    probe_steps: np.ndarray | None = None
    #: [total probes]: a probe's raw text where it gave no answer (read for pools that record
    #: probe_steps: Parallel-Probe's evaluation votes with "ERR" or "" as written)
    probe_raw: list | None = None

    @property
    def n_traces(self) -> int:
        return len(self.lengths)

    @property
    def has_confs(self) -> bool:
        return self.conf_values is not None

    def confs(self, j: int) -> np.ndarray:
        """Per-token confidences of trace ``j`` (float16 view)."""
        assert self.conf_values is not None and self.conf_offsets is not None
        return self.conf_values[self.conf_offsets[j] : self.conf_offsets[j + 1]]

    def content_hash(self) -> str:
        """Digest of everything the simulator reads; keys caches and result provenance.

        SHA-256 (its first 128 bits): it passes over every token's confidence, and where the CPU
        has SHA instructions it runs 3× faster than BLAKE2b (1.8 against 0.53 GB/s here).
        """
        h = hashlib.sha256()
        h.update(
            json.dumps(
                [self.qid, self.ground_truth, self.final_answers, self.probe_strings]
            ).encode()
        )
        for arr in (
            self.trace_idx,
            self.lengths,
            self.probe_offsets,
            self.probe_positions,
            self.probe_codes,
        ):
            h.update(np.ascontiguousarray(arr).data.cast("B"))
        if self.conf_values is not None:
            h.update(np.ascontiguousarray(self.conf_offsets).data.cast("B"))
            h.update(np.ascontiguousarray(self.conf_values).view(np.uint16).data.cast("B"))
        if self.probe_steps is not None:
            h.update(b"probe_steps")
            h.update(np.ascontiguousarray(self.probe_steps, dtype=np.int64).data.cast("B"))
        return h.hexdigest()[:32]

    def where(self, j: int | None = None) -> str:
        """Location prefix for error messages."""
        loc = f"{self.source}: question {self.qid}"
        if j is not None:
            loc += f", trace {int(self.trace_idx[j])}"
        return loc


#: No trace is longer than this many tokens (far beyond any model's context); a larger length is
#: damage, and must not size a buffer.
MAX_TRACE_LENGTH = 1 << 24


def _check_lengths(lengths: pa.ChunkedArray, trace_idx: pa.ChunkedArray, source: str) -> None:
    if lengths.null_count:
        return  # reported with the trace by question_from_table
    values = lengths.to_numpy().astype(np.int64)
    bad = np.flatnonzero((values < 0) | (values > MAX_TRACE_LENGTH))
    if bad.size:
        j = int(bad[0])
        tidx = trace_idx.to_pylist()[j]
        raise PoolError(
            f"{source}, trace {tidx}: length {int(values[j]):,} is not between 0 and "
            f"{MAX_TRACE_LENGTH:,} tokens"
        )


def _check_qids(qids: list[int], source: str) -> None:
    if qids and qids[0] < 0:
        raise PoolError(f"{source}: question id {qids[0]} is negative (ids are 0, 1, 2, ...)")


def _none_if_empty(values: list) -> list:
    return [v if v else None for v in values]


def _list_buffers(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """Offsets (int64, starting at 0) and flat values of a list column; nulls count as empty."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    lengths = (
        pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    )
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets, pc.list_flatten(arr)


def _encode_answers(values: pa.Array) -> tuple[np.ndarray, list]:
    """Dictionary-encode answer strings: codes (-1 for null/empty) and unique strings."""
    values = pc.if_else(pc.equal(values, ""), pa.scalar(None, pa.string()), values)
    enc = pc.dictionary_encode(values)
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    codes = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int32)
    return codes, enc.dictionary.to_pylist()


def _require_columns(table_schema: pa.Schema, expected: pa.Schema, source: str) -> None:
    names = set(table_schema.names)
    for f in expected:
        if f.name not in names:
            raise PoolError(f"{source}: missing column {f.name!r}")
        actual = table_schema.field(f.name).type
        if not _type_compatible(actual, f.type):
            raise PoolError(f"{source}: column {f.name!r} has type {actual}, expected {f.type}")


def _type_compatible(actual: pa.DataType, expected: pa.DataType) -> bool:
    if pa.types.is_integer(expected):
        return pa.types.is_integer(actual)
    if pa.types.is_floating(expected):
        return pa.types.is_floating(actual)
    if pa.types.is_string(expected):
        return (
            pa.types.is_string(actual)
            or pa.types.is_large_string(actual)
            or pa.types.is_null(actual)
        )
    if pa.types.is_list(expected) or pa.types.is_large_list(expected):
        if not (pa.types.is_list(actual) or pa.types.is_large_list(actual)):
            return pa.types.is_null(actual)
        return _type_compatible(actual.value_type, expected.value_type)
    if pa.types.is_struct(expected):
        if not pa.types.is_struct(actual):
            return False
        names = {actual.field(i).name: actual.field(i).type for i in range(actual.num_fields)}
        for i in range(expected.num_fields):
            f = expected.field(i)
            if f.name in names and not _type_compatible(names[f.name], f.type):
                return False
        return "position" in names and "answer" in names
    return actual.equals(expected) or pa.types.is_null(actual)


def _check_traces(q: QuestionData, first_trace: int = 0) -> None:
    """Structural checks shared by both formats (trace ids from ``first_trace``: a shard's)."""
    if q.n_traces == 0:
        raise PoolError(f"{q.where()}: no traces")
    order = np.argsort(q.trace_idx, kind="stable")
    sorted_idx = q.trace_idx[order]
    dup = np.flatnonzero(np.diff(sorted_idx) == 0)
    if dup.size:
        raise PoolError(f"{q.where()}, trace {int(sorted_idx[dup[0]])}: duplicate (qid, trace_idx)")
    expected = np.arange(first_trace, first_trace + q.n_traces)
    if not np.array_equal(sorted_idx, expected):
        bad = int(np.flatnonzero(sorted_idx != expected)[0])
        raise PoolError(
            f"{q.where()}: trace ids are not contiguous {first_trace}.."
            f"{first_trace + q.n_traces - 1} (first gap at {first_trace + bad}, found trace "
            f"{int(sorted_idx[bad])})"
        )
    if (q.lengths < 0).any():
        j = int(np.flatnonzero(q.lengths < 0)[0])
        raise PoolError(f"{q.where(j)}: negative length")
    _check_probes(q)
    if q.conf_values is not None and q.conf_values.size:
        assert q.conf_offsets is not None
        pos = _first_nonfinite(q.conf_values)
        if pos >= 0:
            j = int(np.searchsorted(q.conf_offsets, pos, side="right") - 1)
            raise PoolError(
                f"{q.where(j)}: non-finite confidence (NaN or inf) at token "
                f"{pos - q.conf_offsets[j]}"
            )


def _first_nonfinite(v: np.ndarray, chunk: int = 1 << 16) -> int:
    """Index of the first NaN or infinite value of ``v`` (-1: none). float16 values are judged on
    their bits (every exponent bit set), a cache-sized chunk at a time: no temporary the size of
    a question's confidences (tens of MB), 4× faster than ``isfinite``."""
    if v.dtype != np.float16:
        bad = np.flatnonzero(~np.isfinite(v))
        return int(bad[0]) if bad.size else -1
    bits = v.view(np.uint16)
    buf = np.empty(min(chunk, len(bits)), dtype=np.uint16)
    hit = np.empty(len(buf), dtype=bool)
    for start in range(0, len(bits), chunk):
        part = bits[start : start + chunk]
        n = len(part)
        np.bitwise_and(part, 0x7C00, out=buf[:n])
        np.equal(buf[:n], 0x7C00, out=hit[:n])
        if hit[:n].any():
            return start + int(np.argmax(hit[:n]))
    return -1


def _check_probes(q: QuestionData) -> None:
    """Probe positions lie in 0..length of their trace, one probe per position.

    Two probes at one position would make the answer there arbitrary; a probe after the trace's
    end would stretch the whole question's checkpoint grid past every trace (a terminal probe at
    the length itself is the authors' convention and fine).
    """
    pos = q.probe_positions
    if pos.size == 0:
        return
    counts = np.diff(q.probe_offsets)
    trace = np.repeat(np.arange(q.n_traces), counts)
    bad = np.flatnonzero((pos < 0) | (pos > q.lengths[trace]))
    if bad.size:
        i = int(bad[0])
        j = int(trace[i])
        where = "before the trace's start" if pos[i] < 0 else "after the trace's end"
        raise PoolError(
            f"{q.where(j)}: probe at position {int(pos[i])} {where} (length {int(q.lengths[j])})"
        )
    order = np.lexsort((pos, trace))
    same = (np.diff(trace[order]) == 0) & (np.diff(pos[order]) == 0)
    if same.any():
        i = int(order[np.flatnonzero(same)[0]])
        raise PoolError(
            f"{q.where(int(trace[i]))}: two probes at position {int(pos[i])} "
            "(one answer per position)"
        )


def _sort_by_trace(q: QuestionData) -> QuestionData:
    """Reorder traces by trace_idx (readers keep flat buffers consistent)."""
    order = np.argsort(q.trace_idx, kind="stable")
    if np.array_equal(order, np.arange(len(order))):
        return q
    take_p = np.concatenate([np.arange(q.probe_offsets[j], q.probe_offsets[j + 1]) for j in order])
    counts = np.diff(q.probe_offsets)[order]
    q.probe_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    q.probe_positions = q.probe_positions[take_p]
    q.probe_codes = q.probe_codes[take_p]
    if q.probe_cost is not None:
        q.probe_cost = q.probe_cost[take_p]
    if q.conf_values is not None:
        assert q.conf_offsets is not None
        take_c = np.concatenate(
            [np.arange(q.conf_offsets[j], q.conf_offsets[j + 1]) for j in order]
        )
        ccounts = np.diff(q.conf_offsets)[order]
        q.conf_offsets = np.concatenate([[0], np.cumsum(ccounts)]).astype(np.int64)
        q.conf_values = q.conf_values[take_c]
    q.trace_idx = q.trace_idx[order]
    q.lengths = q.lengths[order]
    q.final_answers = [q.final_answers[j] for j in order]
    if q.probe_steps is not None:
        q.probe_steps = q.probe_steps[order]
    if q.probe_raw is not None:
        q.probe_raw = [q.probe_raw[i] for i in take_p.tolist()]
    return q


class Pool:
    """Common interface of the two pool formats."""

    source: str
    qids: list[int]
    #: probe spacing the pool records (None: not recorded); of the published format, which
    #: records none, the spacing its probes lie on (:func:`probe_spacing`)
    recorded_spacing: int | None = None

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


#: an inferred probe spacing below this many tokens is no grid (positions that share no spacing)
MIN_INFERRED_SPACING = 16


def probe_spacing(pf: pq.ParquetFile, source: str) -> int | None:
    """The spacing the probes of a published parquet lie on (:func:`grid_spacing` of its probes),
    read from the positions alone (a few MB at paper scale)."""
    try:
        col = pf.read(columns=["probes.list.element.position"], use_threads=False)
    except (OSError, pa.ArrowException) as exc:
        raise PoolError(f"{source}: probe positions unreadable ({first_line(exc)})") from None
    g = 0
    for chunk in col.column("probes").chunks:
        g = positions_gcd(chunk, g)
    return grid_spacing(g)


def positions_gcd(probes: pa.Array | pa.ChunkedArray, g: int = 0) -> int:
    """The greatest common divisor of ``g`` and the positions of a ``list<struct<position>>``
    probe column, each trace's largest left out (the terminal probe at its length lies
    anywhere)."""
    for chunk in probes.chunks if isinstance(probes, pa.ChunkedArray) else [probes]:
        counts = pc.fill_null(pc.list_value_length(chunk), 0).to_numpy(zero_copy_only=False)
        flat = pc.list_flatten(chunk)
        if not len(flat):
            continue
        pos = pc.fill_null(flat.field("position"), 0).to_numpy(zero_copy_only=False)
        starts = np.cumsum(counts)[counts > 0] - counts[counts > 0]
        largest = np.repeat(np.maximum.reduceat(pos, starts), counts[counts > 0])
        pos = pos[(pos < largest) & (pos > 0)]
        if len(pos):
            g = int(np.gcd(g, np.gcd.reduce(pos)))
    return g


def grid_spacing(g: int) -> int | None:
    """The grid a pool's probes lie on, from :func:`positions_gcd`: None when no trace has two
    probes or the positions share no spacing of :data:`MIN_INFERRED_SPACING` tokens or more (then
    the grid is the default, and a probe missing from it is an error naming the trace)."""
    return g if g >= MIN_INFERRED_SPACING else None


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
        _require_columns(
            self._pf.schema_arrow, schema.PUBLISHED_SCHEMA.remove(4).remove(2), self.source
        )
        names = set(self._pf.schema_arrow.names)
        self._has_confs = "confs" in names
        if self._has_confs:
            _require_columns(
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
        _check_qids(self.qids, self.source)
        self.recorded_spacing = probe_spacing(self._pf, self.source)

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


def question_from_table(
    t: pa.Table,
    qid: int,
    source: str,
    published: bool,
    ground_truth: str | None = None,
    question: str | None = None,
    confs: tuple | None = None,
    first_trace: int = 0,
) -> QuestionData:
    where = f"{source}: question {qid}"
    if t.num_rows == 0:
        raise PoolError(f"{where}: no traces")
    trace_idx = t.column("trace_idx")
    if trace_idx.null_count:
        raise PoolError(f"{where}: null trace_idx")
    trace_idx = trace_idx.to_numpy().astype(np.int64)
    if ground_truth is None:
        gts = t.column("ground_truth")
        if gts.null_count == t.num_rows:
            raise PoolError(f"{where}: no ground truth")
        # the reference takes the ground truth of the first trace after sorting by trace_idx
        ground_truth = gts[int(np.argmin(trace_idx))].as_py()
        if ground_truth is None:
            raise PoolError(f"{where}: null ground truth")
    final_col = "extracted_answer" if published else "final_answer"
    finals = _none_if_empty(t.column(final_col).to_pylist())

    probes = t.column("probes")
    p_offsets, p_flat = _list_buffers(probes)
    if isinstance(p_flat, pa.ChunkedArray):
        p_flat = p_flat.combine_chunks()
    positions = p_flat.field("position")
    if positions.null_count:
        raise PoolError(f"{where}: probe with null position")
    positions = positions.to_numpy(zero_copy_only=False).astype(np.int64)
    answers = p_flat.field("answer")
    cost = None
    if published:
        # The authors' loader drops probes whose answer is None; '' stays
        # (and later maps to no group).
        keep = np.asarray(pc.is_valid(answers).to_numpy(zero_copy_only=False), dtype=bool)
        if not keep.all():
            counts = (
                np.add.reduceat(keep.astype(np.int64), p_offsets[:-1])
                if len(keep)
                else np.zeros(0, np.int64)
            )
            counts = np.where(np.diff(p_offsets) == 0, 0, counts)
            positions = positions[keep]
            answers = answers.filter(pa.array(keep))
            p_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    else:
        names = {p_flat.type.field(i).name for i in range(p_flat.type.num_fields)}
        if {"prompt_tokens", "cached_tokens", "generated_tokens"} <= names:
            cost = np.stack(
                [
                    pc.fill_null(p_flat.field(n), -1)
                    .to_numpy(zero_copy_only=False)
                    .astype(np.int64)
                    for n in ("prompt_tokens", "cached_tokens", "generated_tokens")
                ],
                axis=1,
            )
            if cost.size == 0 or (cost < 0).all():
                cost = None
    codes, strings = _encode_answers(answers)

    conf_offsets = conf_values = None
    if confs is not None:
        conf_offsets, conf_values = confs
    elif "confs" in t.column_names:
        ccol = t.column("confs")
        if ccol.null_count == 0:
            conf_offsets, conf_values = confs_codec.decode(ccol, where, PoolError)
        elif ccol.null_count != t.num_rows:
            j = int(
                np.flatnonzero(~np.asarray(pc.is_valid(ccol).to_numpy(zero_copy_only=False)))[0]
            )
            raise PoolError(
                f"{where}, trace {int(trace_idx[j])}: confs missing for some traces only"
            )

    if published:
        if conf_offsets is None:
            raise PoolError(f"{where}: published pools need confs (trace length is len(confs))")
        lengths = np.diff(conf_offsets)
    else:
        lengths = t.column("length")
        if lengths.null_count:
            raise PoolError(f"{where}: null length")
        lengths = lengths.to_numpy().astype(np.int64)
        if conf_offsets is not None:
            bad = np.flatnonzero(np.diff(conf_offsets) != lengths)
            if bad.size:
                j = int(bad[0])
                raise PoolError(
                    f"{where}, trace {int(trace_idx[j])}: {int(np.diff(conf_offsets)[j])} "
                    f"confidences for length {int(lengths[j])}"
                )
    probe_steps = None
    if schema.PROBE_STEPS_FIELD.name in t.column_names:
        col = t.column(schema.PROBE_STEPS_FIELD.name)
        if col.null_count < t.num_rows:
            steps = pc.fill_null(col, -1).to_numpy(zero_copy_only=False).astype(np.int64)
            if (steps < -1).any() or (steps > MAX_TRACE_LENGTH).any():
                j = int(np.flatnonzero((steps < -1) | (steps > MAX_TRACE_LENGTH))[0])
                raise PoolError(
                    f"{where}, trace {int(trace_idx[j])}: probe_steps {int(steps[j])} is not a "
                    f"probe count"
                )
            probe_steps = steps
    probe_raw = None
    if probe_steps is not None and "raw_text" in {
        p_flat.type.field(i).name for i in range(p_flat.type.num_fields)
    }:
        raw = p_flat.field("raw_text")
        if not published and raw.null_count < len(raw):
            probe_raw = raw.to_pylist()
    q = QuestionData(
        qid=int(qid),
        ground_truth=str(ground_truth),
        trace_idx=trace_idx,
        lengths=lengths,
        final_answers=finals,
        probe_offsets=p_offsets,
        probe_positions=positions,
        probe_codes=codes,
        probe_strings=strings,
        conf_offsets=conf_offsets,
        conf_values=conf_values,
        probe_cost=cost,
        question=question,
        source=source,
        probe_steps=probe_steps,
        probe_raw=probe_raw,
    )
    _check_traces(q, first_trace)
    return _sort_by_trace(q)


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
        _require_columns(
            qt.schema,
            pa.schema([schema.QUESTION_SCHEMA.field(n) for n in ("qid", "ground_truth")]),
            str(qfile),
        )
        self._questions = {r["qid"]: r for r in qt.to_pylist()}
        if not self._questions:
            raise PoolError(f"{qfile}: empty pool (no questions)")
        if any(q is None for q in self._questions):
            raise PoolError(f"{qfile}: null qid")
        self.qids = sorted(self._questions)
        _check_qids(self.qids, str(qfile))
        #: questions whose answer is not known (null ground truth): nothing to grade against
        self.unknown_answers = [q for q in self.qids if self._questions[q]["ground_truth"] is None]
        spacing = self.manifest.get("spacing")
        if spacing is not None and (
            isinstance(spacing, bool) or not isinstance(spacing, int) or spacing < 1
        ):
            raise PoolError(
                f"{self.path / schema.POOL_MANIFEST}: spacing {spacing!r} "
                "is not a positive whole number"
            )
        self.recorded_spacing = spacing
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
        _require_columns(t.schema, required, str(f))
        _check_lengths(t.column("length"), t.column("trace_idx"), str(f))
        meta = self._questions[qid]
        try:
            confs = _read_confs(f, t)
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


#: how the confidences are read: no pre-buffering (it holds the whole column's pages at once, 2×
#: the memory, and costs more CPU than reading row group by row group) and a buffered stream (else
#: a column chunk is read whole before its first batch: 420 MB for a published question of 4,096
#: traces in one row group)
STREAM_OPTIONS = {"pre_buffer": False, "buffer_size": 1 << 20}


def _read_confs(path: Path, t: pa.Table) -> tuple | None:
    """Per-token confidences of a trace file as (offsets, float16 values) (a file of either
    format: :mod:`mars.store.confs`); None for a pool without them."""
    pf = pq.ParquetFile(path, **STREAM_OPTIONS, **schema.TRACE_READ_OPTIONS)
    if "confs" not in pf.schema_arrow.names:
        return None
    capacity = int(pc.sum(t.column("length")).as_py() or 0)
    return stream_confs(pf, str(path), t.num_rows, capacity, "the lengths say")


def stream_confs(
    pf: pq.ParquetFile,
    where: str,
    n_rows: int,
    capacity: int,
    bound: str,
    row_groups: list[int] | None = None,
    qid: int | None = None,
    batch_rows: int = 64,
) -> tuple | None:
    """The ``confs`` column of ``pf`` (its ``row_groups``, the rows of question ``qid`` when
    given) as (offsets, float16 values), streamed in row batches into one buffer of
    ``capacity`` tokens (what ``bound`` says a question holds at most); None when every row is
    null (a pool without confidences).

    Decoding a whole column at once costs more than its size in temporary buffers (of a
    ``list<float16>`` column: repetition and definition levels, 2 bytes each per token, beside
    the values); batches of a quarter row group keep the peak near the size of the result.
    """
    kind = pf.schema_arrow.field("confs").type
    if not confs_codec.readable(kind):
        raise PoolError(f"{where}: column 'confs' has type {kind}, expected float16 bytes or lists")
    columns = ["confs"] if qid is None else ["qid", "confs"]
    offsets = np.zeros(n_rows + 1, dtype=np.int64)
    values = None
    row = 0
    n_null = 0
    batches = pf.iter_batches(
        batch_size=batch_rows, row_groups=row_groups, columns=columns, use_threads=False
    )
    for batch in batches:
        if qid is not None:
            mine = pc.equal(batch.column(0), qid)
            if not pc.all(mine).as_py():
                batch = batch.filter(mine)
        col = batch.column(len(columns) - 1)
        if row + len(col) > n_rows:
            raise PoolError(f"{where}: more traces than its question holds")
        if col.null_count == len(col) and values is None:
            n_null += len(col)  # a pool without confidences has nulls in every row
            row += len(col)
            continue
        if col.null_count or n_null:
            valid = np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False))
            j = row + int(np.flatnonzero(~valid)[0]) if col.null_count else 0
            raise PoolError(f"{where}: trace {j}: confs missing for some traces only")
        off, flat = confs_codec.decode(col, where, PoolError, first_row=row)
        if values is None:
            values = np.empty(capacity, dtype=np.float16)
        start = offsets[row]
        n_new = int(off[-1])
        if start + n_new > len(values):
            raise PoolError(f"{where}: more confidences than {bound} (trace {row + len(col) - 1})")
        values[start : start + n_new] = flat
        offsets[row + 1 : row + len(col) + 1] = start + off[1:]
        row += len(col)
    # the decoding buffers back to the system: Arrow's allocator would keep them (~200 MB on a
    # large question) beside the values while the question's arrays are built
    pa.default_memory_pool().release_unused()
    if values is None:
        return None
    if row != n_rows:
        raise PoolError(f"{where}: fewer traces than its question holds")
    return offsets, values[: offsets[-1]]


def open_pool(path: str | Path) -> Pool:
    """Open a published parquet file or a pool directory."""
    p = Path(path)
    if p.is_dir():
        return LayoutPool(p)
    if not p.exists():
        raise PoolError(f"{path}: no such file or directory")
    return PublishedPool(p)
