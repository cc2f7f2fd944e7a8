"""`mars replay`: re-simulate a live run from its stored records (finished, or the questions an
interrupted run finished) and compare with what ran live. :func:`decide` is the simulator's
decision on a live run's records, which the live run itself takes at its end (``replay_ok``).

Before any question is re-simulated, the run's parameters and every record are checked; as each
question is read, its traces, and what its record says it was made from (the question's content
where the run has written it, the warmup's inputs, the run that wrote the trace file).
"""

from __future__ import annotations

import os
import reprlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import MarsError
from ..method.answers import group_answers_online
from ..method.arrays import QuestionArrays, build_arrays, checkpoint_answers
from ..method.learned import Calibration
from ..method.registry import Method, live_method
from ..method.settings import Settings
from ..method.walk import MethodResult, QuestionContext, run_method
from ..store import schema
from ..store.pool import LayoutPool, PoolError, QuestionData, open_pool
from ..store.problems import Problem, problem_digest
from ..store.userfiles import read_json_object
from .records import (
    LIVE_RECORD,
    check_made_for,
    is_whole,
    live_grid,
    live_path,
    live_settings,
    read_calibration,
    read_records,
)


def decide(
    q: QuestionData,
    method: Method,
    settings: Settings,
    grid: np.ndarray,
    n_warm: int,
    stopped: np.ndarray,
    memo: dict | None = None,
    calibration: Calibration | None = None,
) -> tuple[MethodResult, QuestionArrays]:
    """The simulator's decision on a live run's records (traces 0..n_warm-1 = warmup, then main).

    ``stopped`` marks traces stopped early (and, during the run, traces still running); ``memo``
    keeps the warmup's fitted q-model and γ between checkpoints.
    """
    answers = checkpoint_answers(q, grid, stopped)
    warm, main = np.arange(n_warm), np.arange(n_warm, q.n_traces)
    finals = q.final_answers
    arrival = [
        *answers[warm].T.ravel(),
        *finals[:n_warm],
        *answers[main].T.ravel(),
        *finals[n_warm:],
    ]
    groups = group_answers_online(arrival)
    assert settings.spacing is not None  # live settings carry the spacing
    arr = build_arrays(
        q,
        settings.spacing,
        settings.window,
        groups,
        grid=grid,
        stopped=stopped,
        conf_window="before",
        group_stats=False,
    )
    ctx = QuestionContext(
        arr,
        settings,
        samples=main[None, :],
        warm=warm[arr.final_ids[warm] >= 0],
        memo=memo,
        calibration=calibration,
    )
    return run_method(ctx, method), arr


@dataclass(frozen=True)
class _LiveParams:
    """What a live run's manifest says about how it decided."""

    method: Method
    settings: Settings
    warmup: int
    n_traces: int
    max_tokens: int
    grid: np.ndarray
    calibration: Calibration | None = None


_WHOLE_PARAMS = ("n_traces", "warmup", "seed", "spacing", "max_tokens")


def _live_params(path: Path, live: object, source: Path) -> _LiveParams:
    """The method, settings and grid of the live run in ``path`` (its parameters ``live``, read
    from ``source``), checked as `mars solve` checks its options; one line naming ``source``
    otherwise."""
    if live is None:
        raise PoolError(f"{path}: not a live run (no 'live' block in {schema.POOL_MANIFEST})")
    try:
        if not isinstance(live, dict):
            raise PoolError(f"is {reprlib.repr(live)}, not an object")
        missing = [k for k in ("method", *_WHOLE_PARAMS, "settings") if k not in live]
        if missing:
            raise PoolError(f"no {', '.join(map(repr, missing))}")
        for key in _WHOLE_PARAMS:
            if not is_whole(live[key]):
                raise PoolError(f"{key!r} is {reprlib.repr(live[key])}, not a whole number")
        if not isinstance(live["method"], str):
            raise PoolError(f"'method' is {reprlib.repr(live['method'])}, not a string")
        if not isinstance(live["settings"], dict):
            raise PoolError(f"'settings' is {reprlib.repr(live['settings'])}, not an object")
        method = live_method(live["method"])
        settings = live_settings(
            live["n_traces"],
            live["warmup"],
            live["seed"],
            live["spacing"],
            live["max_tokens"],
            live["settings"],
        )
        grid = live_grid(live["spacing"], live["max_tokens"]).checkpoints()
    except MarsError as exc:
        what = "'live' block: " if source.name == schema.POOL_MANIFEST else ""
        raise PoolError(f"{source}: {what}{exc}") from None
    assert isinstance(live, dict)
    cal = None
    if "calibration" in live:  # the run decided with one: kept beside its records
        cal = read_calibration(path, live["calibration"])
    return _LiveParams(
        method, settings, live["warmup"], live["n_traces"], live["max_tokens"], grid, cal
    )


def _check_traces(q: QuestionData, run: _LiveParams) -> None:
    """The records of a live run hold its warmup + main traces, none past its token cap."""
    n = run.warmup + run.n_traces
    if not np.array_equal(q.trace_idx, np.arange(n)):
        raise PoolError(
            f"{q.where()}: trace ids {_ids(q.trace_idx)}, but the live run has {run.warmup} "
            f"warmup + {run.n_traces} traces (ids 0..{n - 1})"
        )
    long = np.flatnonzero(q.lengths > run.max_tokens)
    if long.size:
        raise PoolError(
            f"{q.where(int(long[0]))}: {int(q.lengths[long[0]]):,} tokens, past the live run's "
            f"max_tokens {run.max_tokens:,}"
        )


def _ids(ids: np.ndarray) -> str:
    if len(ids) and np.array_equal(ids, np.arange(ids[0], ids[0] + len(ids))):
        return f"{ids[0]}..{ids[-1]}"
    return reprlib.repr(ids.tolist())


class _UnfinishedPool(LayoutPool):
    """The trace files of an unfinished live run's finished questions: a pool directory but for
    ``questions.parquet`` and ``pool.json``, which a run writes last."""

    def __init__(self, path: Path, qids: list[int]):
        self.path, self.source, self.manifest = path, str(path), {}
        self.grid = None
        self._questions = {
            q: {"qid": q, "ground_truth": "", "question": None, "dataset": None, "model": None}
            for q in qids
        }
        self.qids = list(qids)


@dataclass
class LiveRunDir:
    """A `mars solve` output directory, finished or not: its parameters, its questions and those
    done (each with its record and trace file)."""

    path: Path
    params: dict  # the run's parameters (the manifest's "live" block)
    run: _LiveParams
    qids: list[int]  # every question the run answers
    done: list[int]  # those with a record (all of them once the run is finished)
    pool: LayoutPool
    finished: bool

    def unfinished_line(self) -> str:
        """What to tell a user about a run that has not finished."""
        return (
            f"unfinished run ({len(self.done)}/{len(self.qids)} questions): rerun the same "
            "command to finish"
        )


def open_live_run(path: str | Path) -> LiveRunDir:
    """The live run in ``path``; an interrupted one (its parameters in ``.solve.json``, no
    ``pool.json`` yet) gives the questions it finished."""
    path = Path(path)
    record = path / LIVE_RECORD
    if path.is_dir() and not os.path.lexists(path / schema.POOL_MANIFEST):
        if os.path.lexists(record):
            params = read_json_object(record, PoolError)
            run = _live_params(path, params, record)
            qids = params.get("qids")
            if not isinstance(qids, list) or not all(map(is_whole, qids)):
                raise PoolError(f"{record}: 'qids' is {reprlib.repr(qids)}, not question ids")
            done = [q for q in qids if os.path.lexists(live_path(path, q))]
            return LiveRunDir(path, params, run, qids, done, _UnfinishedPool(path, done), False)
    pool = open_pool(path)
    if not isinstance(pool, LayoutPool):
        raise PoolError(f"{path}: not a live run (a parquet file, not a `mars solve` directory)")
    live = pool.manifest.get("live")
    run = _live_params(path, live, path / schema.POOL_MANIFEST)
    assert isinstance(live, dict)
    return LiveRunDir(path, live, run, list(pool.qids), list(pool.qids), pool, True)


def _check_inputs(d: LiveRunDir, rec: dict, q: QuestionData) -> None:
    """A record (and its trace file) made for this question of this run: the question's content
    (where the run has written it), the warmup's inputs, the run that wrote the trace file."""
    digest = None
    if d.finished:
        meta = d.pool.question_meta(q.qid)
        problem = Problem(q.qid, meta.get("question") or "", meta["ground_truth"], meta["dataset"])
        digest = problem_digest(problem)
    check_made_for(d.path, rec, d.params, digest, f"{schema.POOL_QUESTIONS}'s")


def replay_run(path: str | Path, questions: Iterable[int] | None = None) -> list[dict]:
    """Re-simulate a live run from its stored records; per question the live and replayed results
    (of an interrupted run, of the questions it finished: :func:`open_live_run`).

    Each dict has ``qid``, ``live`` and ``replay`` (answer, stopped_by, stop_position, tokens) and
    ``match`` (all equal). The manifest and every record are checked before any question is
    re-simulated; the records' traces and what they were made from (the question, the warmup's
    inputs, the run) as each is read.
    """
    d = open_live_run(path)
    run = d.run
    qids = list(d.done if questions is None else questions)
    if not d.finished:
        todo = [q for q in qids if q not in d.done]
        if todo:
            raise PoolError(f"{d.path}: question {todo[0]} is not done yet; {d.unfinished_line()}")
    records = read_records(d.path, qids, run.warmup, run.n_traces)
    out = []
    for qid, rec in zip(qids, records):
        q = d.pool.read_question(qid)
        _check_traces(q, run)
        _check_inputs(d, rec, q)
        stopped = np.isin(q.trace_idx, rec["stopped_traces"])
        res, arr = decide(
            q,
            run.method,
            run.settings,
            run.grid,
            run.warmup,
            stopped,
            calibration=run.calibration,
        )
        a = int(res.answer[0])
        label = str(res.stopped_by[0])
        again = {
            "answer": arr.representatives[a] if a >= 0 else None,
            "stopped_by": label,
            "stop_position": None if label == "budget" else int(res.position[0]),
            "tokens": int(res.tokens[0]),
        }
        was = {k: rec[k] for k in again}
        out.append({"qid": qid, "live": was, "replay": again, "match": was == again})
    return out
