"""Shards: one generation split into slices of trace ids, and their merge into one pool.

With ``n_shards > 1`` shard ``s`` of a generation holds traces ``[s·N/n, (s+1)·N/n)`` of every
question (global ``trace_idx``) and records a ``shard`` entry in its manifest; only
:func:`consolidate` turns shards into a pool (a single shard 0 of 1 is already a pool).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import MarsError, UsageError
from . import confs, schema
from .atomic import check_apart
from .pool import LayoutPool, PoolError
from .userfiles import read_json_object
from .write import STOOD_IN_MANIFEST_KEY, PoolDirWriter, stood_in_of, with_stood_in

#: Manifest keys that differ between the shards of one generation.
SHARD_ONLY = ("shard", "n_questions", "format", "version", STOOD_IN_MANIFEST_KEY)
#: The record file of an unfinished generation (see :mod:`mars.store.write`).
GENERATION_RECORD = ".generate.json"


def shard_range(n_traces: int, shard: int, n_shards: int) -> tuple[int, int]:
    """Global trace ids ``[lo, hi)`` of shard ``shard`` of ``n_shards``."""
    if n_shards < 1:
        raise UsageError(f"--n-shards {n_shards}: must be at least 1")
    if not 0 <= shard < n_shards:
        raise UsageError(f"--shard {shard}: out of range for {n_shards} shards (0..{n_shards - 1})")
    return shard * n_traces // n_shards, (shard + 1) * n_traces // n_shards


def _read_manifest(d: Path) -> dict:
    mf = d / schema.POOL_MANIFEST
    hint = (
        " (interrupted: re-run its generation to finish it)"
        if (d / GENERATION_RECORD).exists()
        else ""
    )
    missing = f"{d}: not a finished shard (no {schema.POOL_MANIFEST}){hint}"
    m = read_json_object(mf, PoolError, missing)
    if "n_traces" not in m:
        raise PoolError(f"{mf}: not a generation manifest (no n_traces)")
    return m


def consolidate(shard_dirs: Sequence[str | Path], out: str | Path, overwrite: bool = False) -> Path:
    """Merge complete shard directories of one generation into the pool ``out``.

    Checks that the shards are pools this mars reads (format and version), share every
    generation parameter, cover trace ids 0..N-1 exactly (contiguous, no overlap) and hold the
    same questions, and reads every shard's question as a pool is read (confidences, lengths,
    probes: a damaged shard is named, not merged); concatenates each question's traces by
    trace_idx and writes the pool atomically.
    """
    if not shard_dirs:
        raise MarsError("no shard directories")
    check_apart(out, [("shard", d) for d in shard_dirs])
    shards = []
    for d in map(Path, shard_dirs):
        m = _read_manifest(d)
        info = m.get("shard") or {
            "index": 0,
            "n_shards": 1,
            "first_trace": 0,
            "n_traces": m["n_traces"],
        }
        shards.append((info["first_trace"], d, m, info))
    readers = {d: LayoutPool(d) for _, d, _, _ in shards}  # format and version, questions file
    shards.sort(key=lambda s: s[0])
    ref = {k: v for k, v in shards[0][2].items() if k not in SHARD_ONLY}
    for _, d, m, _ in shards[1:]:
        other = {k: v for k, v in m.items() if k not in SHARD_ONLY}
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
    with PoolDirWriter(out, atomic=True, overwrite=overwrite) as w:
        for row in qrows:
            qid = row["qid"]
            for first, d, _, _ in shards:  # each shard's traces as a pool holds them
                readers[d].read_question(qid, first_trace=first)
            parts = [  # shards of either format version: confidences as bytes in both
                confs.stored_table(pq.read_table(d / schema.trace_file_name(qid)))
                for _, d, _, _ in shards
            ]
            stood_in = sum(
                stood_in_of(t, str(d / schema.trace_file_name(qid)))
                for t, (_, d, _, _) in zip(parts, shards)
            )
            table = with_stood_in(pa.concat_tables(parts).combine_chunks(), stood_in)
            idx = table.column("trace_idx").to_numpy()
            if not np.array_equal(idx, np.arange(ref["n_traces"])):
                raise PoolError(
                    f"question {qid}: consolidated trace ids are not 0..{ref['n_traces'] - 1}"
                )
            w.write_question(qid, table)
        w.finish(qrows, manifest)
    return Path(out)
