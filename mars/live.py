"""Live MARS: stop parallel generation on an engine the moment a stopping rule fires.

:func:`solve` answers one question on a backend (synthetic, transformers, SGLang):

1. *warmup*: ``warmup`` traces (trace ids 0..W-1) run to completion, probed at every checkpoint;
2. *main*: ``n_traces`` traces (ids W..W+N-1) advance checkpoint by checkpoint
   (:func:`mars.engines.generate.run_batch`, ``spacing`` tokens apart); every running trace is
   probed;
3. at each checkpoint the method takes one step (:class:`mars.stepper.Stopper`) fed what the
   engine just produced (each trace's probed or final answer, whether it runs, its confidence);
   when it fires, every running trace is stopped (:meth:`~mars.engines.base.TraceBatch.stop`) and
   the leader is the answer. Parallel-Probe as its authors define it (``sc-pp-faithful``) also
   stops the traces it prunes, there and then.

The decision is the simulator's own (one step of :class:`mars.simulate.MethodRun` over the one
iteration whose sample is the N main traces and whose warmup is the W warmup traces, running
traces shown as traces stopped at the checkpoint). The records are written once, at the end of the
question (the finished warmup traces are kept meanwhile, so an interrupted question resumes after
its warmup); re-simulating them (:func:`decide`, :func:`replay`) gives the run's answer, stop
position and tokens exactly, which every run checks (``replay_ok``). Three things differ from
the offline simulator, each because a live run cannot see the future:

* the checkpoint grid is fixed in advance (``spacing``, 2·spacing, … ≤ ``max_tokens``), not taken
  from the traces;
* answers are grouped online, in the order they arrive (warmup traces first, then checkpoint by
  checkpoint), so that an answer's group id never changes
  (:func:`~mars.method.answers.group_answers_online`; ids break vote ties);
* a checkpoint's confidence is the mean of the W tokens *before* the probe; the reference's window
  ends at token p, which does not exist yet when the engine probes at p tokens.

DeepConf methods are refused (its online filter truncates traces token by token inside the engine),
and so are methods that read the future (oracle q, oracle stopping).

Output of :func:`solve_pool` (a pool directory, so ``mars simulate`` reads it too)::

    OUT/traces/qNNNNNN.parquet   warmup + main traces; a stopped trace has its length at the stop,
                                 finished = false, no final answer, and its last probe at the stop
    OUT/live/qNNNNNN.json        the live result of the question (see :class:`LiveRun`)
    OUT/live.csv                 one row per question; OUT/pool.json has the run's parameters
    OUT/live/qNNNNNN.warmup.parquet  the question's finished warmup traces while its main traces
                                 run (an interrupted question resumes after its warmup)
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import reprlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .engines.base import Backend, TraceBatch, TraceResult
from .engines.generate import (
    TraceRecord,
    backend_info,
    question_rows,
    records_to_table,
    run_batch,
    token_cap,
    warn_without_final_answers,
)
from .errors import MarsError, UsageError, first_line
from .live_summary import write_csv
from .method.answers import group_answers_online, is_correct
from .method.arrays import QuestionArrays, build_arrays, checkpoint_answers, checkpoint_confidences
from .method.registry import DEFAULT_METHOD, Method, get_method, live_method
from .method.settings import Settings
from .progress import Detail, Progress, counted, prefixed
from .simulate import MethodResult, QuestionContext, run_method
from .stepper import MAX_CHECKPOINTS, Stopper, Warmup, check_knobs
from .store import schema
from .store.atomic import folder_lock, make_dirs, output_dir, write_json_atomic
from .store.pool import (
    LayoutPool,
    PoolError,
    QuestionData,
    open_pool,
    question_from_table,
    read_trace_table,
)
from .store.problems import Problem, problem_digest, problems_digest, select_problems
from .store.userfiles import read_json_object
from .store.write import RUN_METADATA_KEY, PoolDirWriter, write_trace_table

log = logging.getLogger(__name__)

LIVE_DIR = "live"
LIVE_RECORD = ".solve.json"
SUMMARY_FILE = "live.csv"
#: Parquet metadata key of a kept warmup file (question, warmup size, its wall time; JSON)
WARMUP_METADATA_KEY = "mars.live.warmup"


def live_grid(spacing: int, max_tokens: int) -> np.ndarray:
    """Checkpoints of a live run: spacing, 2·spacing, … ≤ max_tokens."""
    if spacing <= 0 or max_tokens < spacing:
        raise UsageError(f"no checkpoint: --spacing {spacing}, --max-tokens {max_tokens}")
    n = max_tokens // spacing
    if n > MAX_CHECKPOINTS:
        raise UsageError(
            f"--max-tokens {max_tokens:,} at --spacing {spacing:,}: {n:,} checkpoints, more than "
            f"{MAX_CHECKPOINTS:,} (raise --spacing or lower --max-tokens)"
        )
    return spacing * np.arange(1, n + 1, dtype=np.int64)


def live_settings(
    n_traces: int, warmup: int, seed: int, spacing: int, max_tokens: int, knobs: dict
) -> Settings:
    """The simulator settings of a live run: N traces, one iteration, the rule's knobs.

    ``knobs`` are the settings `mars solve` takes (:data:`mars.method.settings.LIVE_KEYS`); the
    others
    are fixed by the run itself.
    """
    if n_traces < 1:
        raise UsageError(f"--traces {n_traces}: must be at least 1")
    if warmup < 0:
        raise UsageError(f"--warmup {warmup}: must be ≥ 0")
    check_knobs(knobs, "live setting")
    live_grid(spacing, max_tokens)
    return Settings(
        budget=n_traces, iterations=1, warmup=warmup, seed=seed, spacing=spacing, **knobs
    ).validate()


def decide(
    q: QuestionData,
    method: Method,
    settings: Settings,
    grid: np.ndarray,
    n_warm: int,
    stopped: np.ndarray,
    memo: dict | None = None,
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
        arr, settings, samples=main[None, :], warm=warm[arr.final_ids[warm] >= 0], memo=memo
    )
    return run_method(ctx, method), arr


def _as_stopped(r: TraceResult) -> TraceResult:
    """A trace stopped early has no final answer (what it would say is its probe)."""
    return TraceResult(
        length=r.length, final_answer=None, finished=False, confs=r.confs, text=r.text
    )


def _question(problem: Problem, tables: Sequence[pa.Table]) -> QuestionData:
    return question_from_table(
        pa.concat_tables(tables),
        problem.qid,
        f"<live question {problem.qid}>",
        published=False,
        ground_truth=problem.answer or "",  # not known: nothing is graded correct
        question=problem.question,
    )


def _graded(answer: str | None, problem: Problem) -> bool | None:
    """Whether ``answer`` is ``problem``'s; None when its answer is not known."""
    if problem.answer is None:
        return None
    return bool(answer is not None and is_correct(answer, problem.answer))


@dataclass
class LiveRun:
    """One question answered live. ``tokens`` counts the main traces; warmup and probes apart."""

    qid: int
    method: str
    answer: str | None
    correct: bool | None  # None: the question's answer is not known
    stopped_by: str  # the rule's label (margin, certified, pp_consensus, consensus) or "budget"
    stop_position: int | None  # checkpoint where the rule fired; None: every trace ran to its end
    tokens: int
    warmup_tokens: int
    probe_tokens: (
        int | None
    )  # probe generation + uncached probe prompts, when the engine reports them
    n_probes: int
    gamma: float
    n_traces: int
    warmup: int
    stopped_traces: list[int]  # trace ids stopped early (running when the rule fired, or pruned)
    checkpoints: int  # checkpoints the rule was asked at
    wall_s: dict  # warmup, main (generation + probes + decisions), decide (decisions only)
    replay_ok: bool  # the stored records re-simulate to this answer, stop position and tokens
    inputs: dict  # what the records are made from: the question's digest, the warmup's inputs
    full: dict | None = None  # the same N traces run to completion (compare_full)
    table: pa.Table | None = field(default=None, repr=False)

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("table")
        return d


class _Confidences:
    """The checkpoint confidence of each of the N traces as it generates, to the bit what its
    stored record gives (:func:`mars.method.arrays.checkpoint_confidences`,
    ``conf_window="before"``):
    float16-stored token confidences, float64 prefix sums, of which the last ``window`` + 1 are
    kept; a trace that no longer runs has the mean of all its tokens."""

    def __init__(self, n: int, window: int):
        self.window = window
        self.tails = [np.zeros(1) for _ in range(n)]  # prefix sums cs[L - len + 1 .. L]
        self.seen = np.zeros(n, dtype=np.int64)
        self.final: dict[int, float] = {}  # traces that no longer run: their whole mean

    def at(self, j: int, p: int, confs, running: bool) -> float:
        if j in self.final:
            return self.final[j]
        c = np.asarray(confs[self.seen[j] :], np.float16).astype(np.float32)
        tail = self.tails[j]
        if len(c):
            cs = np.cumsum(np.concatenate(([tail[-1]], c.astype(np.float64))))
            self.tails[j] = tail = np.concatenate((tail, cs[1:]))[-(self.window + 1) :]
            self.seen[j] += len(c)
        L = int(self.seen[j])
        if L == 0:
            return 0.0 if running else self.final.setdefault(j, 0.0)
        if not running:
            self.final[j] = float(tail[-1] / L)
            return self.final[j]
        end = min(p, L)
        start = max(end - self.window, 0)
        first = L - len(tail) + 1  # the prefix index tail[0] holds
        if start < first:  # only when a trace ran past its checkpoint
            raise RuntimeError(f"trace {j}: {L} tokens at checkpoint {p}")
        return float((tail[end - first] - tail[start - first]) / max(end - start, 1))


class _Controller:
    """The checkpoint hook of the main batch: one :meth:`mars.stepper.Stopper.step` per
    checkpoint, fed what the engine just produced."""

    def __init__(
        self,
        problem: Problem,
        method: Method,
        settings: Settings,
        grid: np.ndarray,
        warm_table: pa.Table,
        n_warm: int,
        n: int,
    ):
        self.problem, self.method, self.settings, self.grid = problem, method, settings, grid
        self.n_warm, self.n = n_warm, n
        self.ended: dict[int, TraceResult] = {}
        self.pruned = np.zeros(n, dtype=bool)
        self.stopped = np.zeros(n, dtype=bool)
        self.fired: tuple[str, int, str | None] | None = None  # (label, position, answer)
        self.decide_s = 0.0
        self.checkpoints = 0
        t0 = time.perf_counter()
        if n_warm:
            warm_q = _question(problem, [warm_table])
            confs = checkpoint_confidences(warm_q, grid, settings.window, conf_window="before")
            answers = checkpoint_answers(warm_q, grid).tolist()
            warmup = Warmup(answers, warm_q.final_answers, warm_q.lengths, confs)
        else:  # --warmup 0: no warmup traces (q = 1, gamma = 1, no guard)
            confs = None
            warmup = Warmup([], [], np.zeros(0, dtype=np.int64))
        self.stopper = Stopper(method, n, grid, warmup, settings=settings)
        self.confs = _Confidences(n, settings.window) if confs is not None or not n_warm else None
        self.decide_s += time.perf_counter() - t0

    def __call__(self, p: int, batch: TraceBatch, probes: dict) -> bool:
        t0 = time.perf_counter()
        if p != self.grid[self.stopper.k]:
            raise RuntimeError(f"checkpoint {p}, expected {self.grid[self.stopper.k]}")
        ended = np.asarray(batch.ended)
        answers: list[str | None] = []
        confs: list[float] | None = [] if self.confs is not None else None
        for j in range(self.n):
            if ended[j]:
                if j not in self.ended:
                    r = batch.result(j)
                    self.ended[j] = _as_stopped(r) if self.pruned[j] else r
                answers.append(self.ended[j].final_answer)
                token_confs = self.ended[j].confs
            else:
                answers.append(probes[j].answer if j in probes else None)
                token_confs = batch.confs_so_far(j)
            if confs is not None:
                assert self.confs is not None
                if token_confs is None:
                    confs = None
                    self.confs = None
                else:
                    confs.append(self.confs.at(j, p, token_confs, not ended[j]))
        if self.n_warm == 0 or self.stopper.conf is None:
            confs = None
        d = self.stopper.step(answers, ~ended, confs)
        self.checkpoints += 1
        running = ~ended
        if d.stop:
            self.fired = (d.label, p, d.answer)
            self.stopped = running | self.pruned
        elif d.stop_traces.size:
            newly = d.stop_traces[~self.pruned[d.stop_traces]]
            if newly.size:
                batch.stop(newly)
                self.pruned[newly] = True
                self.stopped = self.pruned.copy()
        self.decide_s += time.perf_counter() - t0
        return d.stop


def _probe_cost(records: Iterable[TraceRecord]) -> tuple[int | None, int]:
    total, n, known = 0, 0, True
    for rec in records:
        for _, pr in rec.probes:
            n += 1
            if pr.generated_tokens is None or pr.prompt_tokens is None or pr.cached_tokens is None:
                known = False
            else:
                total += pr.generated_tokens + max(pr.prompt_tokens - pr.cached_tokens, 0)
    return (total if known else None), n


def solve(
    backend: Backend,
    problem: Problem,
    method: str | Method = DEFAULT_METHOD,
    *,
    n_traces: int = 64,
    warmup: int = 16,
    seed: int = 0,
    spacing: int = schema.CHECKPOINT_SPACING,
    max_tokens: int | None = None,
    compare_full: bool = False,
    warmup_file: str | Path | None = None,
    detail: Detail | None = None,
    **knobs,
) -> LiveRun:
    """Answer ``problem`` live with ``method`` (see the module docstring);
    the records are in ``.table``.

    ``warmup_file``: where the finished warmup traces are kept until the question ends, so that
    an interrupted question resumes after its warmup (read back if it exists, checked against the
    question and the warmup size; the warmup's wall time is the one measured when it ran).
    ``detail`` hears the phase (warmup, main, run to completion) and the checkpoint reached
    (:mod:`mars.progress`).

    ``knobs`` are :class:`mars.simulate.Settings` fields (gamma, ucb_z, gamma_min, delta, pp_conv,
    pp_warmup, pp_patience, consensus, window). ``compare_full`` also runs the same N traces to
    completion and reports its tokens, wall time and answer in ``.full``.
    """
    m = live_method(method)
    max_tokens = token_cap(backend, max_tokens)
    settings = live_settings(n_traces, warmup, seed, spacing, max_tokens, knobs)
    grid = live_grid(spacing, max_tokens)

    made_by = warmup_inputs(backend, problem, warmup, seed, spacing, max_tokens)
    warm_table, warm_wall = _warmup(backend, problem, made_by, warmup_file, detail)
    t1 = time.perf_counter()
    ctl = _Controller(problem, m, settings, grid, warm_table, warmup, n_traces)
    say = prefixed(detail, f"q{problem.qid} {m.name}: ")
    if say is not None:
        say(f"starting {n_traces} traces")
    batch = backend.start(problem, n_traces, seed, first_trace=warmup)
    try:
        records = run_batch(batch, spacing, max_tokens=max_tokens, on_checkpoint=ctl, detail=say)
    finally:
        batch.close()
    t2 = time.perf_counter()
    ran = [r.result for r, stopped in zip(records, ctl.stopped) if not stopped]
    warn_without_final_answers(problem.qid, ran, max_tokens, "traces that ran to their end")
    for j in np.flatnonzero(ctl.stopped):
        records[j].result = _as_stopped(records[j].result)
    table = pa.concat_tables([warm_table, records_to_table(problem.qid, warmup, records)])

    # the final look: the answer when the rule never fired, and the replay check
    stopped = np.concatenate([np.zeros(warmup, bool), ctl.stopped])
    res, arr = decide(_question(problem, [table]), m, settings, grid, warmup, stopped)
    a = int(res.answer[0])
    final = (
        str(res.stopped_by[0]),
        int(res.position[0]),
        arr.representatives[a] if a >= 0 else None,
    )
    tokens = int(sum(r.result.length for r in records))
    if ctl.fired is not None:
        label, position, answer = ctl.fired
    else:
        label, position, answer = final
    replay_ok = (
        final[0] == label
        and final[2] == answer
        and int(res.tokens[0]) == tokens
        and (label == "budget" or final[1] == position)
    )
    probe_tokens, n_probes = _probe_cost(records)
    run = LiveRun(
        qid=problem.qid,
        method=m.name,
        answer=answer,
        correct=_graded(answer, problem),
        stopped_by=label,
        stop_position=None if label == "budget" else position,
        tokens=tokens,
        warmup_tokens=int(warm_table.column("length").to_numpy().sum()),
        probe_tokens=probe_tokens,
        n_probes=n_probes,
        gamma=float(res.gamma),
        n_traces=n_traces,
        warmup=warmup,
        stopped_traces=[warmup + int(j) for j in np.flatnonzero(ctl.stopped)],
        checkpoints=ctl.checkpoints,
        wall_s={
            "warmup": round(warm_wall, 4),
            "main": round(t2 - t1, 4),
            "decide": round(ctl.decide_s, 4),
        },
        replay_ok=bool(replay_ok),
        inputs={"problem": made_by["problem"], "warmup": made_by},
        table=table,
    )
    if compare_full:
        run.full = _run_full(
            backend,
            problem,
            m,
            n_traces,
            seed,
            warmup,
            spacing,
            max_tokens,
            warm_table,
            settings,
            grid,
            prefixed(detail, f"q{problem.qid} to completion: "),
        )
    return run


def warmup_inputs(
    backend: Backend, problem: Problem, warmup: int, seed: int, spacing: int, max_tokens: int
) -> dict:
    """What a question's warmup traces are made from: the question itself (its content's digest),
    the warmup size, seed, grid and engine. A kept warmup file records it and is used only for
    the same; each live record carries it (``inputs``), and `mars replay` checks it."""
    return {
        "qid": int(problem.qid),
        "problem": problem_digest(problem),
        "warmup": int(warmup),
        "seed": int(seed),
        "spacing": int(spacing),
        "max_tokens": int(max_tokens),
        "engine": backend_info(backend),
    }


def _warmup(
    backend: Backend,
    problem: Problem,
    made_by: dict,
    kept: str | Path | None,
    detail: Detail | None,
) -> tuple[pa.Table, float]:
    """The question's warmup traces (run to completion, or read back from ``kept`` where an
    interrupted run of the same question, engine and settings left them; written there once they
    have run) and their wall time."""
    warmup, seed = made_by["warmup"], made_by["seed"]
    spacing, max_tokens = made_by["spacing"], made_by["max_tokens"]
    table = read_warmup(kept, made_by) if kept else None
    if table is not None:
        return table.replace_schema_metadata(None), _warmup_wall(table)
    t0 = time.perf_counter()
    records: list[TraceRecord] = []
    if warmup:
        say = prefixed(detail, f"q{problem.qid} warmup: ")
        if say is not None:
            say(f"starting {warmup} traces")
        batch = backend.start(problem, warmup, seed, first_trace=0)
        try:
            records = run_batch(batch, spacing, max_tokens=max_tokens, detail=say)
        finally:
            batch.close()
        results = [r.result for r in records]
        warn_without_final_answers(problem.qid, results, max_tokens, "warmup traces")
    table = records_to_table(problem.qid, 0, records)
    wall = time.perf_counter() - t0
    if kept and warmup:
        write_warmup(kept, table, made_by, wall)
    return table, wall


def write_warmup(path: str | Path, table: pa.Table, made_by: dict, wall_s: float) -> None:
    """Keep a question's finished warmup traces (a trace file, atomically), with what made them
    (:func:`warmup_inputs`) and their wall time."""
    info = {**made_by, "wall_s": round(wall_s, 4), "rows": _rows_digest(table)}
    write_trace_table(table, path, metadata={WARMUP_METADATA_KEY: json.dumps(info)})


def _rows_digest(table: pa.Table) -> str:
    """Digest of a trace table's rows as producers build them (confidences as float16 lists):
    what a kept warmup must still hold when it is read back."""
    h = hashlib.sha256()
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        h.update(name.encode())
        if name == "confs":  # token by token, as the bytes they are
            h.update(pc.fill_null(pc.list_value_length(col), -1).to_numpy().tobytes())
            flat = pc.list_flatten(col).to_numpy(zero_copy_only=False).astype(np.float16)
            h.update(flat.view(np.uint16).tobytes())
        else:
            h.update(json.dumps(col.to_pylist()).encode())
    return h.hexdigest()[:32]


def read_warmup(path: str | Path, made_by: dict) -> pa.Table | None:
    """The warmup traces kept by :func:`write_warmup` (None if there are none), checked against
    what ``made_by`` (:func:`warmup_inputs`) says they must be made from — the question's content,
    not only its id — and row by row as the live run reads them; anything else is one line naming
    the file and saying to remove it."""
    path = Path(path)
    if not os.path.lexists(path):
        return None
    qid, warmup = made_by["qid"], made_by["warmup"]
    remedy = "remove it to run the warmup again"
    if not path.is_file():
        raise PoolError(f"{path}: not a file, so not a kept warmup of this run; {remedy}")
    try:
        table = read_trace_table(path)
        info = json.loads((table.schema.metadata or {})[WARMUP_METADATA_KEY.encode()])
        wall = info.get("wall_s") if isinstance(info, dict) else None
        if isinstance(wall, bool) or not (isinstance(wall, int | float) and 0 <= wall < math.inf):
            raise ValueError("its metadata is damaged")
        qids = table.column("qid").to_numpy(zero_copy_only=False)
        idx = table.column("trace_idx").to_numpy(zero_copy_only=False)
    except (OSError, KeyError, ValueError, pa.ArrowException) as exc:
        raise PoolError(
            f"{path}: not a warmup file of this run ({first_line(exc)}); {remedy}"
        ) from None
    if info.get("qid") != qid or info.get("warmup") != warmup:
        raise PoolError(f"{path}: not question {qid}'s {warmup} warmup traces; {remedy}")
    if info.get("problem") != made_by["problem"]:
        raise PoolError(
            f"{path}: warmup traces of another question {qid} (its text, answer or problem set "
            f"differ from this run's); {remedy}"
        )
    expected = json.loads(json.dumps(made_by))  # as the file holds it (lists, not tuples)
    other = [k for k in expected if info.get(k) != expected[k]]
    if other:
        raise PoolError(f"{path}: kept by a run with other settings ({', '.join(other)}); {remedy}")
    if table.num_rows != warmup or (qids != qid).any() or (idx != np.arange(warmup)).any():
        raise PoolError(
            f"{path}: rows are not question {qid}'s warmup traces 0..{warmup - 1}; {remedy}"
        )
    try:  # every row as the live run reads it
        if not table.schema.remove_metadata().equals(schema.TRACE_SCHEMA):
            raise PoolError("its columns are not a trace file's")
        q = question_from_table(table, qid, str(path), published=False, ground_truth="")
        _check_warmup_traces(q, made_by)
        if info.get("rows") != _rows_digest(table):
            raise PoolError("its rows are not those the run kept")
    except PoolError as exc:
        why = first_line(exc).removeprefix(f"{path}: ")
        raise PoolError(f"{path}: damaged warmup traces ({why}); {remedy}") from None
    return table


def _check_warmup_traces(q: QuestionData, made_by: dict) -> None:
    """Warmup traces as a run of ``made_by``'s grid wrote them: none past the token cap, each
    probed at the grid's first checkpoints and at no others."""
    spacing, max_tokens = made_by["spacing"], made_by["max_tokens"]
    long = np.flatnonzero(q.lengths > max_tokens)
    if long.size:
        raise PoolError(f"trace {int(q.trace_idx[long[0]])} is longer than {max_tokens:,} tokens")
    for j in range(q.n_traces):
        at = q.probe_positions[q.probe_offsets[j] : q.probe_offsets[j + 1]]
        if (at != spacing * np.arange(1, len(at) + 1)).any() or (at > q.lengths[j]).any():
            raise PoolError(f"trace {int(q.trace_idx[j])} is not probed every {spacing:,} tokens")


def _warmup_wall(table: pa.Table) -> float:
    return float(json.loads(table.schema.metadata[WARMUP_METADATA_KEY.encode()])["wall_s"])


def _run_full(
    backend,
    problem,
    method,
    n_traces,
    seed,
    first_trace,
    spacing,
    max_tokens,
    warm_table,
    settings,
    grid,
    detail: Detail | None = None,
) -> dict:
    """The same N traces, every one to its end: tokens, wall time and the answer of the
    full-budget vote ``method`` is measured against
    (:attr:`~mars.method.registry.Method.baseline`)."""
    t0 = time.perf_counter()
    batch = backend.start(problem, n_traces, seed, first_trace=first_trace)
    try:
        records = run_batch(batch, spacing, max_tokens=max_tokens, detail=detail)
    finally:
        batch.close()
    wall = time.perf_counter() - t0
    q = _question(problem, [warm_table, records_to_table(problem.qid, first_trace, records)])
    full = get_method(method.baseline)
    res, arr = decide(q, full, settings, grid, first_trace, np.zeros(q.n_traces, bool))
    a = int(res.answer[0])
    return {
        "tokens": int(sum(r.result.length for r in records)),
        "wall_s": round(wall, 4),
        "answer": arr.representatives[a] if a >= 0 else None,
        "correct": None if problem.answer is None else bool(res.correct[0]),
    }


# ---------------------------------------------------------------------------------------------
# Many questions into a pool directory (resumable), and the replay of one


def _live_path(out: Path, qid: int) -> Path:
    return out / LIVE_DIR / f"q{qid:06d}.json"


def _warmup_path(out: Path, qid: int) -> Path:
    return out / LIVE_DIR / f"q{qid:06d}.warmup.parquet"


def solve_pool(
    backend: Backend,
    problems: Sequence[Problem] | str | Path,
    out: str | Path,
    method: str = DEFAULT_METHOD,
    *,
    n_traces: int = 64,
    warmup: int = 16,
    seed: int = 0,
    spacing: int = schema.CHECKPOINT_SPACING,
    max_tokens: int | None = None,
    questions: Iterable[int] | None = None,
    compare_full: bool = False,
    progress: Progress | None = None,
    on_question: Callable[[LiveRun], None] | None = None,
    detail: Detail | None = None,
    **knobs,
) -> list[dict]:
    """:func:`solve` every requested question into the pool directory ``out``;
    one summary per question.

    Resumable: a question is done once its ``live/qNNNNNN.json`` exists (written after its trace
    file); re-running the same command skips it. Other parameters into the same directory are
    refused.
    """
    by_qid, qids = select_problems(problems, questions)
    m = live_method(method)
    max_tokens = token_cap(backend, max_tokens)
    live_settings(n_traces, warmup, seed, spacing, max_tokens, knobs)  # before touching ``out``
    sel = [by_qid[q] for q in qids]
    for p in sel:
        backend.check_context(p)
    datasets = sorted({p.dataset for p in sel})
    params = {
        "generator": "mars.live",
        **backend_info(backend),
        "method": m.name,
        "seed": int(seed),
        "n_traces": int(n_traces),
        "warmup": int(warmup),
        "spacing": int(spacing),
        "max_tokens": int(max_tokens),
        "settings": dict(sorted(knobs.items())),
        "compare_full": bool(compare_full),
        "dataset": datasets[0] if len(datasets) == 1 else datasets,
        "qids": qids,
        "problems_digest": problems_digest(sel),
    }
    out = Path(out)
    writer = PoolDirWriter(
        out,
        params,
        record=LIVE_RECORD,
        what="live run",
        params_of=lambda manifest: manifest.get("live", {}),
        done_marker=lambda qid: _live_path(out, qid),
    )

    def busy() -> None:
        log.warning("%s: another `mars solve` is writing into it; waiting for it to finish", out)

    # one writer at a time: a second identical command waits, then finds the questions done
    with output_dir(out), folder_lock(out, busy):
        if writer.start(qids):
            make_dirs(out / LIVE_DIR)
            todo = writer.todo(qids)
            _remove_litter(out, [q for q in qids if q not in todo])
            # a damaged record of a question done earlier is refused before any work
            read_records(out, [q for q in qids if q not in todo], warmup, n_traces, SUMMARY_FIELDS)
            for qid in counted(todo, len(todo), progress):
                run = solve(
                    backend,
                    by_qid[qid],
                    m,
                    n_traces=n_traces,
                    warmup=warmup,
                    seed=seed,
                    spacing=spacing,
                    max_tokens=max_tokens,
                    compare_full=compare_full,
                    warmup_file=_warmup_path(out, qid),
                    detail=detail,
                    **knobs,
                )
                assert run.table is not None
                writer.write_question(qid, run.table)
                write_json_atomic(_live_path(out, qid), run.summary())
                _warmup_path(out, qid).unlink(missing_ok=True)
                if on_question is not None:
                    on_question(run)
            summaries = read_records(out, qids, warmup, n_traces, SUMMARY_FIELDS)
            write_csv(out / SUMMARY_FILE, summaries)
            manifest = {
                **{
                    k: v
                    for k, v in params.items()
                    if k not in ("settings", "method", "warmup", "compare_full")
                },
                "n_traces": int(warmup + n_traces),
                "live": params,
            }
            writer.finish(question_rows(by_qid, qids, params.get("model", ""), backend), manifest)
        else:
            _remove_litter(out, qids)
        return read_records(out, qids, warmup, n_traces, SUMMARY_FIELDS)


def _remove_litter(out: Path, done: Iterable[int]) -> None:
    """What a run stopped at the wrong moment leaves in ``live/``: the kept warmup of a question
    whose record was written just before (it is never read again), and half-written files."""
    for qid in done:
        _warmup_path(out, qid).unlink(missing_ok=True)
    for tmp in (out / LIVE_DIR).glob(".*.tmp-*"):
        tmp.unlink(missing_ok=True)


#: A record's fields: name -> (test of its value, what the value must be).
Fields = dict[str, tuple[Callable[[object], bool], str]]


def _whole(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _whole_or_null(v: object) -> bool:
    return v is None or _whole(v)


def _number(v: object) -> bool:
    return isinstance(v, float) or _whole(v)


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
    "qid": (_whole, "a whole number"),
    "answer": (_str_or_null, "a string or null"),
    "stopped_by": (_str, "a string"),
    "stop_position": (_whole_or_null, "a whole number or null"),
    "tokens": (_whole, "a whole number"),
    "stopped_traces": (
        lambda v: isinstance(v, list) and all(map(_whole, v)),
        "a list of trace ids",
    ),
    "inputs": (
        _object_with(
            {
                "problem": (_str, ""),
                "warmup": (_object_with({"problem": (_str, ""), "qid": (_whole, "")}), ""),
            }
        ),
        "an object with the question's digest and the warmup's inputs",
    ),
}
_FULL: Fields = {
    "tokens": (_whole, ""),
    "wall_s": (_number, ""),
    "answer": (_str_or_null, ""),
    "correct": (_bool_or_null, ""),
}
#: ... and what the summary (``live.csv``, `mars solve`'s table) reads besides.
SUMMARY_FIELDS: Fields = {
    **REPLAY_FIELDS,
    "method": (_str, "a string"),
    "warmup": (_whole, "a whole number"),
    "correct": (_bool_or_null, "true, false or null (answer not known)"),
    "warmup_tokens": (_whole, "a whole number"),
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
        path = _live_path(out, qid)
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


@dataclass(frozen=True)
class _LiveParams:
    """What a live run's manifest says about how it decided."""

    method: Method
    settings: Settings
    warmup: int
    n_traces: int
    max_tokens: int
    grid: np.ndarray


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
            if not _whole(live[key]):
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
        grid = live_grid(live["spacing"], live["max_tokens"])
    except MarsError as exc:
        what = "'live' block: " if source.name == schema.POOL_MANIFEST else ""
        raise PoolError(f"{source}: {what}{exc}") from None
    assert isinstance(live, dict)
    return _LiveParams(method, settings, live["warmup"], live["n_traces"], live["max_tokens"], grid)


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
        self.recorded_spacing = None
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
            if not isinstance(qids, list) or not all(map(_whole, qids)):
                raise PoolError(f"{record}: 'qids' is {reprlib.repr(qids)}, not question ids")
            done = [q for q in qids if os.path.lexists(_live_path(path, q))]
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
    where = _live_path(d.path, rec["qid"])
    inputs, warm = rec["inputs"], rec["inputs"]["warmup"]
    if d.finished:
        meta = d.pool.question_meta(q.qid)
        problem = Problem(q.qid, meta.get("question") or "", meta["ground_truth"], meta["dataset"])
        if inputs["problem"] != problem_digest(problem):
            raise PoolError(
                f"{where}: made for another question {q.qid} (its text, answer or problem set "
                f"differ from {schema.POOL_QUESTIONS}'s)"
            )
    if warm["problem"] != inputs["problem"] or warm["qid"] != q.qid:
        raise PoolError(f"{where}: its warmup traces were made for another question")
    other = [k for k in ("warmup", "seed", "spacing", "max_tokens") if warm.get(k) != d.params[k]]
    if other:
        raise PoolError(f"{where}: its warmup traces were made with other {', '.join(other)}")
    trace_file = d.path / schema.trace_file_name(q.qid)
    try:
        raw = (pq.read_schema(trace_file).metadata or {}).get(RUN_METADATA_KEY.encode())
        written_by = json.loads(raw) if raw is not None else None
    except (OSError, ValueError, pa.ArrowException):
        written_by = None
    if written_by != d.params:
        raise PoolError(f"{trace_file}: not written by this live run (its parameters differ)")


def replay(path: str | Path, questions: Iterable[int] | None = None) -> list[dict]:
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
        res, arr = decide(q, run.method, run.settings, run.grid, run.warmup, stopped)
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
