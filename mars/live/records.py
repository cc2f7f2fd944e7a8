"""A live run's parameters and records: its checkpoint grid and simulator settings (checked as
`mars solve` checks its options), where its records (``OUT/live/qNNNNNN.json``) are, the fields
each must hold, and their reader (one line naming the file for anything else)."""

from __future__ import annotations

import json
import reprlib
from collections.abc import Callable, Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import UsageError
from ..method.learned import Calibration
from ..method.settings import Settings
from ..store import schema
from ..store.grid import Grid
from ..store.pool import PoolError
from ..store.userfiles import read_json_object
from ..store.write import RUN_METADATA_KEY
from .stepper import MAX_CHECKPOINTS, check_knobs

LIVE_DIR = "live"
#: the parameters of a run still under way (the pool writer's record; pool.json once finished)
LIVE_RECORD = ".solve.json"
SUMMARY_FILE = "live.csv"


#: where a live run (or a served record pool) keeps the calibration it decided with
CALIBRATION_FILE = "calibration.json"


def read_calibration(folder: Path, digest: object) -> Calibration:
    """The calibration a live run decided with, from its folder, checked against the digest its
    parameters record (one line naming the file otherwise)."""
    path = folder / CALIBRATION_FILE
    cal = Calibration.load(path)
    if cal.digest != digest:
        raise PoolError(
            f"{path}: calibration {cal.digest}, but the run decided with {reprlib.repr(digest)}"
        )
    return cal


def live_grid(spacing: int, max_tokens: int) -> Grid:
    """The grid of a live run (spacing, 2·spacing, … ≤ max_tokens), checked as `mars solve`
    checks its options: at least one checkpoint, at most :data:`MAX_CHECKPOINTS`."""
    return Grid.checked(spacing, max_tokens, most=MAX_CHECKPOINTS)


def live_settings(
    n_traces: int, warmup: int, seed: int, spacing: int, max_tokens: int | None, knobs: dict
) -> Settings:
    """The simulator settings of a live run: N traces, one iteration, the rule's knobs; its grid
    checked where its token cap is known (``max_tokens``; None: not yet, e.g. a served request
    whose cap comes from the model's context).

    ``knobs`` are the settings `mars solve` takes (:data:`mars.method.settings.LIVE_KEYS`); the
    others are fixed by the run itself.
    """
    if n_traces < 1:
        raise UsageError(f"--traces {n_traces}: must be at least 1")
    if warmup < 0:
        raise UsageError(f"--warmup {warmup}: must be ≥ 0")
    check_knobs(knobs, "live setting")
    if max_tokens is not None:
        live_grid(spacing, max_tokens)
    return Settings(
        budget=n_traces, iterations=1, warmup=warmup, seed=seed, spacing=spacing, **knobs
    ).validate()


def live_path(out: Path, qid: int) -> Path:
    """A question's live record (its being there marks the question done)."""
    return out / LIVE_DIR / f"q{qid:06d}.json"


def warmup_path(out: Path, qid: int) -> Path:
    """Where a question's finished warmup traces are kept while its main traces run."""
    return out / LIVE_DIR / f"q{qid:06d}.warmup.parquet"


#: A record's fields: name -> (test of its value, what the value must be).
Fields = dict[str, tuple[Callable[[object], bool], str]]


def is_whole(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _whole_or_null(v: object) -> bool:
    return v is None or is_whole(v)


def _number(v: object) -> bool:
    return isinstance(v, float) or is_whole(v)


def _str(v: object) -> bool:
    return isinstance(v, str)


def _str_or_null(v: object) -> bool:
    return v is None or isinstance(v, str)


def _bool(v: object) -> bool:
    return isinstance(v, bool)


def _bool_or_null(v: object) -> bool:
    return v is None or isinstance(v, bool)


def _object_with(fields: Fields, null: bool = False) -> Callable[[object], bool]:
    return lambda v: (
        (v is None and null)
        or (isinstance(v, dict) and all(k in v and ok(v[k]) for k, (ok, _) in fields.items()))
    )


#: What :func:`replay` reads of a live record (:meth:`LiveRun.summary`).
REPLAY_FIELDS: Fields = {
    "qid": (is_whole, "a whole number"),
    "answer": (_str_or_null, "a string or null"),
    "stopped_by": (_str, "a string"),
    "stop_position": (_whole_or_null, "a whole number or null"),
    "tokens": (is_whole, "a whole number"),
    "stopped_traces": (
        lambda v: isinstance(v, list) and all(map(is_whole, v)),
        "a list of trace ids",
    ),
    "inputs": (
        _object_with(
            {
                "problem": (_str, ""),
                "warmup": (_object_with({"problem": (_str, ""), "qid": (is_whole, "")}), ""),
            }
        ),
        "an object with the question's digest and the warmup's inputs",
    ),
}
_FULL: Fields = {
    "tokens": (is_whole, ""),
    "wall_s": (_number, ""),
    "answer": (_str_or_null, ""),
    "correct": (_bool_or_null, ""),
}
#: ... and what the summary (``live.csv``, `mars solve`'s table) reads besides.
SUMMARY_FIELDS: Fields = {
    **REPLAY_FIELDS,
    "method": (_str, "a string"),
    "warmup": (is_whole, "a whole number"),
    "correct": (_bool_or_null, "true, false or null (answer not known)"),
    "warmup_tokens": (is_whole, "a whole number"),
    "probe_tokens": (_whole_or_null, "a whole number or null"),
    "gamma": (_number, "a number"),
    "replay_ok": (_bool, "true or false"),
    "wall_s": (_object_with({"main": (_number, "")}), "an object with a number 'main'"),
    "full": (_object_with(_FULL, null=True), f"null or an object with {', '.join(_FULL)}"),
}


def read_records(
    out: Path, qids: Iterable[int], warmup: int, n_traces: int, fields: Fields = REPLAY_FIELDS
) -> list[dict]:
    """The live records of ``qids``, each checked for ``fields``, its question and its stopped
    traces (main traces of a run with ``warmup`` + ``n_traces``); one line naming the file
    otherwise."""
    records = []
    for qid in qids:
        path = live_path(out, qid)
        rec = read_json_object(path, PoolError, f"{path}: missing live record of question {qid}")
        for key, (ok, what) in fields.items():
            if key not in rec:
                raise PoolError(f"{path}: no {key!r}")
            if not ok(rec[key]):
                raise PoolError(f"{path}: {key!r} is {reprlib.repr(rec[key])}, not {what}")
        if rec["qid"] != qid:
            raise PoolError(f"{path}: holds the record of question {rec['qid']}, not {qid}")
        main = range(warmup, warmup + n_traces)
        outside = [j for j in rec["stopped_traces"] if j not in main]
        if outside:
            raise PoolError(
                f"{path}: stopped trace {outside[0]} is not a main trace "
                f"({main.start}..{main.stop - 1})"
            )
        records.append(rec)
    return records


def check_made_for(
    out: Path, rec: dict, params: dict, digest: str | None, against: str = "this run's"
) -> None:
    """A record of ``out`` (and its question's trace file) made for its question of the run of
    ``params``: the question's content (its ``digest``, where known), the warmup's inputs, the
    run that wrote the trace file. One line naming the file otherwise."""
    qid = rec["qid"]
    where = live_path(out, qid)
    inputs, warm = rec["inputs"], rec["inputs"]["warmup"]
    if digest is not None and inputs["problem"] != digest:
        raise PoolError(
            f"{where}: made for another question {qid} (its text, answer or problem set differ "
            f"from {against})"
        )
    if warm["problem"] != inputs["problem"] or warm["qid"] != qid:
        raise PoolError(f"{where}: its warmup traces were made for another question")
    other = [k for k in ("warmup", "seed", "spacing", "max_tokens") if warm.get(k) != params[k]]
    if other:
        raise PoolError(f"{where}: its warmup traces were made with other {', '.join(other)}")
    trace_file = out / schema.trace_file_name(qid)
    try:
        raw = (pq.read_schema(trace_file).metadata or {}).get(RUN_METADATA_KEY.encode())
        written_by = json.loads(raw) if raw is not None else None
    except (OSError, ValueError, pa.ArrowException):
        written_by = None
    if written_by != params:
        raise PoolError(f"{trace_file}: not written by this live run (its parameters differ)")
