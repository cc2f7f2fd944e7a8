"""Importers into our pool layout and the exporter back to the published MARS parquet schema.

* ``mars-parquet`` — the authors' published parquet (one row per trace; length = len(confs)).
* ``mars-pickle`` — the authors' pickle: a dict keyed by (qid, trace_idx) of dicts with
  ``ground_truth``, ``confs``, ``probes`` ({position: {answer, ...}}) and optional
  ``extracted_answer``. A pickle can run code when loaded, so it is read by a restricted
  unpickler (plain data and numpy arrays only) unless the user passes ``--trust-pickle``.
* ``parallel-probe`` — Parallel-Probe's probe matrices (JSON: per question ``gold_answer`` and
  ``each_branch`` = [probe_list, branch_tokens, final_answer], a probe every ``probe_freq``
  tokens), mapped onto the 2048-token grid: for k = 1, 2, … while 2048·k < branch_tokens the
  answer at 2048·k is ``probe_list[min(2048·k // probe_freq − 1, len − 1)]``, the last probe
  read by then (none before the first); ``"ERR"`` or empty means no answer. Like the authors'
  pools, every trace also gets a terminal probe at its length carrying its final answer. There
  are no confidences (the column is null). The gold answer is a string or a whole number; the
  question's text, where given, a string.

Neither direction replaces an existing output or writes where it reads (one-line refusals).
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import schema
from .atomic import check_apart, check_output_file, make_dirs, write_atomic
from .grid import Grid, GridError
from .pool import (
    MAX_TRACE_LENGTH,
    LayoutPool,
    PoolError,
    PublishedPool,
    grid_spacing,
    open_pool,
    positions_gcd,
)
from .userfiles import read_json, regular_file
from .write import PoolDirWriter, question_to_table

FORMATS = ("mars-parquet", "mars-pickle", "parallel-probe")
#: Parallel-Probe: how many probes a trace may lack at its end before its token count is refused
#: (the published AIME 2024 file lacks up to 8: tokens // probe_freq − len(probe_list) ≤ 8).
MAX_MISSING_PROBES = 32


def _probe_rows(positions, answers, raws=None) -> list[dict]:
    raws = raws if raws is not None else [None] * len(positions)
    return [
        {
            "position": int(p),
            "answer": a if a else None,
            "raw_text": r,
            "conf": None,
            "prompt_tokens": None,
            "cached_tokens": None,
            "generated_tokens": None,
        }
        for p, a, r in zip(positions, answers, raws)
    ]


def _write(out, manifest, questions) -> Path:
    """questions: iterable of (meta dict, trace table); written atomically (nothing on failure).
    The pool's spacing is the manifest's, else the grid its probes lie on, else 2,048."""
    rows = []
    g = 0
    with PoolDirWriter(out, atomic=True) as w:
        for meta, table in questions:
            w.write_question(int(meta["qid"]), table)
            rows.append(meta)
            g = positions_gcd(table.column("probes"), g)
        spacing = grid_spacing(g) or schema.CHECKPOINT_SPACING
        w.finish(rows, {"spacing": spacing, **manifest})
    return Path(out)


def import_mars_parquet(src, out, **manifest) -> Path:
    pool = PublishedPool(src)

    def gen():
        for qid in pool.qids:
            q = pool.read_question(qid)
            yield {"qid": qid, "ground_truth": q.ground_truth}, question_to_table(q)

    return _write(out, {"imported_from": "mars-parquet", "source": str(src), **manifest}, gen())


#: What the authors' pickle needs beyond plain containers: numpy arrays and scalars.
PICKLE_ALLOWED = frozenset(
    {
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "complex"),
        ("builtins", "bytearray"),
        ("collections", "OrderedDict"),
        ("_codecs", "encode"),
        ("codecs", "encode"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
    }
)


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickles containers, strings, numbers and numpy arrays only: loading a pickle runs any
    callable it names, so everything else is refused before it runs."""

    def find_class(self, module: str, name: str):
        if (module, name) not in PICKLE_ALLOWED:
            raise pickle.UnpicklingError(
                f"refusing to load {module}.{name} (only numpy arrays and plain data; "
                "pass --trust-pickle for a file you trust)"
            )
        return super().find_class(module, name)


def import_mars_pickle(src, out, trust_pickle: bool = False, **manifest) -> Path:
    """The authors' pickle, read by a restricted unpickler unless ``trust_pickle``."""
    regular_file(src, PoolError)
    try:
        with open(src, "rb") as f:
            data = pickle.load(f) if trust_pickle else _RestrictedUnpickler(f).load()
    except FileNotFoundError:
        raise PoolError(f"{src}: no such file") from None
    except Exception as exc:
        raise PoolError(f"{src}: not a readable pickle ({exc})") from None
    if not isinstance(data, dict) or not data:
        raise PoolError(f"{src}: expected a non-empty dict keyed by (qid, trace_idx)")
    by_q: dict[int, list] = {}
    for key, entry in data.items():
        try:
            qid, tidx = (int(key[0]), int(key[1]))
            by_q.setdefault(qid, []).append((tidx, entry))
        except Exception:
            raise PoolError(f"{src}: key {key!r} is not (qid, trace_idx)") from None

    def gen():
        for qid in sorted(by_q):
            rows = sorted(by_q[qid], key=lambda r: r[0])
            cols = {n: [] for n in schema.TRACE_SCHEMA.names}
            for tidx, e in rows:
                for req in ("ground_truth", "confs", "probes"):
                    if req not in e:
                        raise PoolError(f"{src}: question {qid}, trace {tidx}: missing {req!r}")
                confs = np.asarray(e["confs"], dtype=np.float16)
                probes = e["probes"]
                cols["qid"].append(qid)
                cols["trace_idx"].append(tidx)
                cols["final_answer"].append(e.get("extracted_answer") or None)
                cols["length"].append(len(confs))
                cols["finished"].append(None)
                cols["confs"].append(confs)
                # the reference drops probes whose answer is None
                kept = [
                    (p, v.get("answer")) for p, v in probes.items() if v.get("answer") is not None
                ]
                cols["probes"].append(_probe_rows([p for p, _ in kept], [a for _, a in kept]))
                cols["text"].append(None)
                cols["token_ids"].append(None)
            yield (
                {"qid": qid, "ground_truth": rows[0][1]["ground_truth"]},
                pa.Table.from_pydict(cols, schema=schema.TRACE_SCHEMA),
            )

    return _write(out, {"imported_from": "mars-pickle", "source": str(src), **manifest}, gen())


def parallel_probe_question(
    qid: int, item: dict, spacing: int | None = schema.CHECKPOINT_SPACING, src: str = ""
) -> tuple[dict, pa.Table]:
    """One Parallel-Probe question → (meta, trace table) on the ``spacing`` grid.

    ``spacing=None`` keeps the source's own probe spacing (``probe_freq``) and records each
    trace's probe count (``probe_steps``), which Parallel-Probe's evaluation protocol reads.
    """
    where = f"{src}: question {qid}"
    if not isinstance(item, dict):
        raise PoolError(f"{where}: not a JSON object")
    try:
        freq, branches, gold = item["probe_freq"], item["each_branch"], item["gold_answer"]
    except KeyError as exc:
        raise PoolError(f"{where}: missing field {exc}") from None
    if isinstance(freq, bool) or not isinstance(freq, int) or not 1 <= freq <= MAX_TRACE_LENGTH:
        raise PoolError(
            f"{where}: probe_freq {_json_kind(freq)} is not a whole number of tokens from 1 to "
            f"{MAX_TRACE_LENGTH:,}"
        )
    if isinstance(gold, bool) or not isinstance(gold, (str, int)):
        raise PoolError(
            f"{where}: gold_answer is {_json_kind(gold)}, not a string or a whole number (the "
            "answers are graded against it)"
        )
    gold = str(gold)
    text = item.get("question")
    if text is not None and not isinstance(text, str):
        raise PoolError(f"{where}: its question text is {_json_kind(text)}, not a string")
    if not isinstance(branches, list):
        raise PoolError(f"{where}: each_branch is not a list")
    native = spacing is None
    on = Grid(freq if spacing is None else spacing)
    cols: dict[str, list] = {n: [] for n in schema.TRACE_SCHEMA.names}
    if native:
        cols[schema.PROBE_STEPS_FIELD.name] = []
    for t, br in enumerate(branches):
        if not (isinstance(br, list) and len(br) == 3 and isinstance(br[0], list)):
            raise PoolError(f"{where}, trace {t}: branch is not [probe_list, tokens, final]")
        probe_list, n_tok, final = br
        if isinstance(n_tok, bool) or not isinstance(n_tok, int) or n_tok < 0:
            raise PoolError(f"{where}, trace {t}: token count {n_tok!r} is not a whole number ≥ 0")
        # a probe every `freq` tokens: the claimed length must be covered by the probes (up to
        # MAX_MISSING_PROBES), so memory never depends on a claimed length alone
        covered = (len(probe_list) + MAX_MISSING_PROBES) * freq
        if n_tok > covered:
            raise PoolError(
                f"{where}, trace {t}: claims {n_tok:,} tokens, but its {len(probe_list)} probes "
                f"every {freq} tokens cover at most {covered:,}"
            )
        if n_tok > MAX_TRACE_LENGTH:
            raise PoolError(
                f"{where}, trace {t}: claims {n_tok:,} tokens, more than a trace may hold "
                f"({MAX_TRACE_LENGTH:,})"
            )
        if not all(a is None or isinstance(a, str) for a in probe_list) or not (
            final is None or isinstance(final, str)
        ):
            raise PoolError(f"{where}, trace {t}: answers must be strings (or null)")
        # the grid's checkpoints below the length, each with the last probe read by then
        grid = on.below(n_tok)
        if len(grid) and not probe_list:
            raise PoolError(f"{where}, trace {t}: no probes for a {n_tok}-token trace")
        read = np.minimum(grid // freq - 1, len(probe_list) - 1).tolist()
        positions = grid.tolist()
        raws = [probe_list[i] if i >= 0 else None for i in read]
        answers = [None if a in ("ERR", "", None) else str(a) for a in raws]
        # the terminal probe at the trace's end carries its final answer, as in the authors' pools
        positions.append(n_tok)
        answers.append(None if final in ("ERR", "", None) else str(final))
        raws.append(final)
        cols["qid"].append(qid)
        cols["trace_idx"].append(t)
        cols["final_answer"].append(None if final in ("ERR", "", None) else str(final))
        cols["length"].append(n_tok)
        cols["finished"].append(None)
        cols["confs"].append(None)
        # a native import keeps what the source wrote where it gave no answer ("ERR", ""):
        # Parallel-Probe's evaluation votes with it (mars.method.protocol)
        cols["probes"].append(_probe_rows(positions, answers, raws if native else None))
        cols["text"].append(None)
        cols["token_ids"].append(None)
        if native:
            cols[schema.PROBE_STEPS_FIELD.name].append(len(probe_list))
    meta = {"qid": qid, "ground_truth": gold, "question": text}
    fields = [*schema.TRACE_SCHEMA, *([schema.PROBE_STEPS_FIELD] if native else [])]
    return meta, pa.Table.from_pydict(cols, schema=pa.schema(fields))


def _json_kind(value) -> str:
    """A JSON value as a message names it: null, a list, an object, or the value itself."""
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "an object"
    return json.dumps(value)[:40]


def import_parallel_probe(
    src, out, spacing: int | None = schema.CHECKPOINT_SPACING, **manifest
) -> Path:
    """Parallel-Probe's matrices as a pool: mapped to the ``spacing`` grid, or (``None``) at the
    source's own probe spacing with each trace's probe count kept (``--spacing native``)."""
    data = read_json(src, PoolError)
    if not isinstance(data, list) or not data:
        raise PoolError(f"{src}: expected a non-empty list of questions")
    if spacing is None:
        freqs = set()
        for qid, item in enumerate(data):  # each one a whole number first, named if not
            if not isinstance(item, dict) or "probe_freq" not in item:
                continue  # refused, named, when the question is read
            freq = item["probe_freq"]
            if isinstance(freq, bool) or not isinstance(freq, int) or freq < 1:
                raise PoolError(
                    f"{src}: question {qid}: probe_freq {freq!r} is not a positive whole number "
                    "of tokens"
                )
            freqs.add(freq)
        if len(freqs) > 1:
            raise PoolError(
                f"{src}: questions have different probe_freq values {sorted(freqs)}; "
                "a native import needs one spacing"
            )
    gen = (parallel_probe_question(qid, item, spacing, str(src)) for qid, item in enumerate(data))
    first = data[0] if isinstance(data[0], dict) else {}
    return _write(
        out,
        {
            "imported_from": "parallel-probe",
            "source": str(src),
            "confidences": False,
            **manifest,
            "spacing": first.get("probe_freq") if spacing is None else spacing,
        },
        gen,
    )


def import_pool(
    fmt: str, src, out, trust_pickle: bool = False, spacing: str | int | None = None
) -> Path:
    """Import ``src`` in format ``fmt``; ``spacing`` (parallel-probe only): the checkpoint grid,
    a number of tokens or ``native`` (default 2,048)."""
    if fmt not in FORMATS:
        raise PoolError(f"unknown import format {fmt!r} (known: {', '.join(FORMATS)})")
    grid: int | None = schema.CHECKPOINT_SPACING
    if spacing is not None:
        if fmt != "parallel-probe":
            raise PoolError(f"--spacing: only for parallel-probe matrices ({fmt} keeps its grid)")
        if spacing == "native":
            grid = None
        else:
            try:
                grid = Grid(int(spacing)).spacing
            except (ValueError, GridError):
                grid = 0
            if not 0 < grid <= MAX_TRACE_LENGTH:
                raise PoolError(
                    f"--spacing {spacing}: a positive number of tokens up to "
                    f"{MAX_TRACE_LENGTH:,}, or native"
                )
    check_apart(out, [("SRC", src)], "output")
    refuse_existing(out)
    if fmt == "mars-parquet":
        return import_mars_parquet(src, out)
    if fmt == "mars-pickle":
        return import_mars_pickle(src, out, trust_pickle=trust_pickle)
    if fmt == "parallel-probe":
        return import_parallel_probe(src, out, grid)
    raise PoolError(f"unknown import format {fmt!r} (known: {', '.join(FORMATS)})")


def export_published(pool_path, out, grade: Callable[[str, str], bool]) -> Path:
    """Write a pool in the published MARS parquet schema (one row group per question).

    Pools without confidences get a constant 1.0 array of each trace's length (the published
    format infers length from ``len(confs)``), as the reference fixtures do. ``grade(answer,
    ground_truth)`` fills each probe's ``is_correct`` (the method layer's
    :func:`mars.method.answers.is_correct`; the storage layer grades nothing itself).
    """
    out = Path(out)
    check_apart(out, [("POOL", pool_path)], "output")
    refuse_existing(out)
    check_output_file(out, "output")
    pool = open_pool(pool_path)

    # the confidences plain, not dictionary-encoded (pyarrow's default): a reader decodes a
    # dictionary of float16 about 4× slower (~20 ns a token), and the file is no smaller
    plain = ["confs.list.element"]
    dictionary = [c for c in _leaf_columns(schema.PUBLISHED_SCHEMA) if c not in plain]

    def write(tmp: Path) -> None:
        with pq.ParquetWriter(
            tmp, schema.PUBLISHED_SCHEMA, compression="zstd", use_dictionary=dictionary
        ) as w:
            for qid in pool.qids:
                w.write_table(_published_table(pool.read_question(qid), grade))

    make_dirs(out.parent)
    return write_atomic(out, write)


def _leaf_columns(sch: pa.Schema) -> list[str]:
    """The Parquet leaf column paths of an Arrow schema (``probes.list.element.position``)."""

    def leaves(name: str, t: pa.DataType) -> list[str]:
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return leaves(f"{name}.list.element", t.value_type)
        if pa.types.is_struct(t):
            return [p for f in t for p in leaves(f"{name}.{f.name}", f.type)]
        return [name]

    return [p for f in sch for p in leaves(f.name, f.type)]


def refuse_existing(out: str | Path) -> None:
    """Imports and exports never replace what is there (an earlier pool, the authors' file)."""
    if os.path.lexists(out):
        raise PoolError(f"{out}: already exists (refusing to overwrite)")


def _published_table(q, grade: Callable[[str, str], bool]) -> pa.Table:
    n = q.n_traces
    if q.conf_values is not None:
        confs = pa.ListArray.from_arrays(
            pa.array(q.conf_offsets, pa.int64()).cast(pa.int32()),
            pa.array(q.conf_values, pa.float16()),
        )
    else:
        offs = np.concatenate([[0], np.cumsum(q.lengths)])
        confs = pa.ListArray.from_arrays(
            pa.array(offs, pa.int32()), pa.array(np.ones(int(offs[-1]), np.float16))
        )
    strings = q.probe_strings
    ans = [strings[c] if c >= 0 else "" for c in q.probe_codes.tolist()]
    correct_of = {s: grade(s, q.ground_truth) for s in set(ans)}
    probe_struct = pa.StructArray.from_arrays(
        [
            pa.array(q.probe_positions, pa.int64()),
            pa.array(ans, pa.string()),
            pa.array([correct_of[a] for a in ans], pa.bool_()),
            pa.array([f"\\boxed{{{a}}}" for a in ans], pa.string()),
            pa.nulls(len(ans), pa.float64()),
        ],
        fields=list(schema.PUBLISHED_PROBE_TYPE),
    )
    probes = pa.ListArray.from_arrays(pa.array(q.probe_offsets, pa.int32()), probe_struct)
    return pa.Table.from_arrays(
        [
            pa.array(np.full(n, q.qid), pa.int64()),
            pa.array(q.trace_idx, pa.int64()),
            pa.array([q.ground_truth] * n, pa.string()),
            pa.array(q.final_answers, pa.string()),
            confs,
            probes,
        ],
        schema=schema.PUBLISHED_SCHEMA,
    )


__all__ = ["FORMATS", "LayoutPool", "export_published", "import_pool", "parallel_probe_question"]
