"""Live MARS: stop parallel generation on an engine the moment a stopping rule fires.

:func:`solve` answers one question on a backend (synthetic, transformers, SGLang):

1. *warmup*: ``warmup`` traces (trace ids 0..W-1) run to completion, probed at every checkpoint;
2. *main*: ``n_traces`` traces (ids W..W+N-1) advance checkpoint by checkpoint
   (:func:`mars.engines.generate.run_batch`, ``spacing`` tokens apart); every running trace is
   probed;
3. at each checkpoint the method takes one step (:class:`mars.live.stepper.Stopper`) fed what the
   engine just produced (each trace's probed or final answer, whether it runs, its confidence);
   when it fires, every running trace is stopped (:meth:`~mars.engines.base.TraceBatch.stop`) and
   the leader is the answer. Parallel-Probe as its authors define it (``sc-pp-faithful``) also
   stops the traces it prunes, there and then.

The decision is the simulator's own (one step of :class:`mars.method.walk.MethodRun` over the one
iteration whose sample is the N main traces and whose warmup is the W warmup traces, running
traces shown as traces stopped at the checkpoint). The records are written once, at the end of the
question (the finished warmup traces are kept meanwhile, so an interrupted question resumes after
its warmup: :mod:`mars.live.warmup`); re-simulating them (:func:`decide`,
:func:`mars.live.replay.replay_run`) gives the run's answer, stop position and tokens exactly, which
every run checks (``replay_ok``). Three things differ from the offline simulator, each because a
live run cannot see the future:

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
    OUT/live/qNNNNNN.json        the live result of the question (see :class:`LiveRun`;
                                 :mod:`mars.live.records`)
    OUT/live.csv                 one row per question (:mod:`mars.live.summary`); OUT/pool.json
                                 has the run's parameters
    OUT/live/qNNNNNN.warmup.parquet  the question's finished warmup traces while its main traces
                                 run (an interrupted question resumes after its warmup)

One run writes into ``OUT`` at a time (its lock); a second waits its turn.
"""

from __future__ import annotations

import contextvars
import copy
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..engines import cancel
from ..engines.base import Backend, TraceBatch, TraceResult
from ..engines.generate import (
    TraceRecord,
    question_rows,
    records_to_table,
    run_batch,
    warn_without_final_answers,
)
from ..method.answers import is_correct
from ..method.arrays import RunningConfidence, checkpoint_answers, checkpoint_confidences
from ..method.registry import (
    get_method,
)
from ..progress import Detail, Progress, counted, prefixed
from ..store.atomic import folder_lock, make_dirs, output_dir, write_json_atomic
from ..store.grid import Grid
from ..store.pool import (
    QuestionData,
    question_from_table,
)
from ..store.problems import Problem, problem_digest, problems_digest, select_problems
from ..store.write import PoolDirWriter, stood_in_of, with_stood_in
from .plan import LivePlan, pool_manifest
from .records import (
    CALIBRATION_FILE,
    LIVE_DIR,
    LIVE_RECORD,
    SUMMARY_FIELDS,
    SUMMARY_FILE,
    check_made_for,
    live_path,
    read_records,
    warmup_path,
)
from .replay import decide
from .stepper import Warmup
from .summary import write_csv
from .warmup import warmup_inputs, warmup_traces

log = logging.getLogger(__name__)


def _as_stopped(r: TraceResult) -> TraceResult:
    """A trace stopped early has no final answer (what it would say is its probe); it keeps its
    token ids, from which an audit continues it (:mod:`mars.live.audit`)."""
    return TraceResult(
        length=r.length,
        final_answer=None,
        finished=False,
        confs=r.confs,
        text=r.text,
        token_ids=r.token_ids,
        stood_in=r.stood_in,
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
    #: main traces started (fewer than n_traces where a staged method stopped before its last
    #: launch; None in records written before launches ran live)
    launched: int | None = None
    #: the traces as they ended (a stopped one as stopped, one never launched empty), warmup then
    #: main, indexed by trace id: what ``table`` is built from, and what an answer's text, votes
    #: and costs are read from (``mars serve``'s response) without reading the table back
    traces: list[TraceRecord] = field(default_factory=list, repr=False, compare=False)

    def summary(self) -> dict:
        """The live record (``OUT/live/qNNNNNN.json``): every field but the traces and their
        table."""
        return {
            f.name: copy.deepcopy(getattr(self, f.name))
            for f in fields(self)
            if f.name not in ("table", "traces")
        }


@dataclass(frozen=True)
class Checkpoint:
    """What the method was shown and said at one checkpoint of the main traces (what
    :func:`solve`'s ``watch`` hears): each trace's answer there (its probe's, or its final answer
    once it has ended; None: none), which traces still run, and the decision."""

    position: int
    answers: list[str | None]
    running: np.ndarray  # bool [N]
    stop: bool
    answer: str | None  # the answer when ``stop``
    label: str


#: ``watch(checkpoint)``: called after each decision of a live run
Watch = Callable[[Checkpoint], None]


class _Controller:
    """The checkpoint hook of the main batch: one :meth:`mars.live.stepper.Stopper.step` per
    checkpoint, fed what the engine just produced."""

    def __init__(
        self, problem: Problem, plan: LivePlan, warm_table: pa.Table, watch: Watch | None = None
    ):
        settings, grid, n_warm, n = plan.settings, plan.checkpoints, plan.warmup, plan.traces
        self.problem, self.method, self.settings, self.grid = problem, plan.method, settings, grid
        self.n_warm, self.n = n_warm, n
        self.watch = watch
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
        self.stopper = plan.stopper(warmup)
        self.confs = (
            RunningConfidence(n, settings.window) if confs is not None or not n_warm else None
        )
        self.decide_s += time.perf_counter() - t0

    @property
    def window(self) -> tuple[int, int]:
        """The main traces (first, last + 1) of the launch running now (all of them, for a method
        that starts its traces together)."""
        return self.stopper.current or (0, self.n)

    def __call__(self, p: int, batch: TraceBatch, probes: dict) -> bool:
        t0 = time.perf_counter()
        if p != self.grid[self.stopper.k]:
            raise RuntimeError(f"checkpoint {p}, expected {self.grid[self.stopper.k]}")
        lo, hi = self.window
        ended = np.asarray(batch.ended)
        answers: list[str | None] = []
        confs: list[float] | None = [] if self.confs is not None else None
        for i in range(hi - lo):  # i: in the batch; j: among the N traces
            j = lo + i
            if ended[i]:
                if j not in self.ended:
                    r = batch.result(i)
                    self.ended[j] = _as_stopped(r) if self.pruned[j] else r
                answers.append(self.ended[j].final_answer)
                token_confs = self.ended[j].confs
            else:
                answers.append(probes[i].answer if i in probes else None)
                token_confs = batch.confs_so_far(i)
            if confs is not None:
                assert self.confs is not None
                if token_confs is None:
                    confs = None
                    self.confs = None
                else:
                    confs.append(self.confs.at(j, p, token_confs, not ended[i]))
        if self.n_warm == 0 or self.stopper.conf is None:
            confs = None
        d = self.stopper.step(answers, ~ended, confs)
        self.checkpoints += 1
        running = ~ended
        if d.stop:
            self.fired = (d.label, p, d.answer)
            self.stopped[lo:hi] = running | self.pruned[lo:hi]
        elif d.stop_traces.size:
            newly = d.stop_traces[~self.pruned[lo + d.stop_traces]]
            if newly.size:
                batch.stop(newly)
                self.pruned[lo + newly] = True
                self.stopped = self.pruned.copy()
        self.decide_s += time.perf_counter() - t0
        if self.watch is not None:
            self.watch(Checkpoint(p, answers, running, d.stop, d.answer, d.label))
        return d.stop

    def tick(self, batches: Sequence[tuple[TraceBatch, int, int, dict]]) -> bool:
        """One checkpoint of the clock of overlapping launches: each launched batch (batch,
        its first trace among the N, its own checkpoint position, its probes there) tells the
        stopper what its traces hold (:meth:`mars.live.stepper.Stopper.step`). True if the rule
        stopped; then every running trace is marked stopped."""
        t0 = time.perf_counter()
        answers: list[str | None] = []
        running: list[bool] = []
        confs: list[float] | None = (
            [] if self.confs is not None and self.n_warm and self.stopper.conf is not None else None
        )
        for batch, first, p, probes in batches:
            ended = np.asarray(batch.ended)
            for i in range(batch.n):
                j = first + i
                if ended[i]:
                    if j not in self.ended:
                        self.ended[j] = batch.result(i)
                    answers.append(self.ended[j].final_answer)
                    token_confs = self.ended[j].confs
                else:
                    answers.append(probes[i].answer if i in probes else None)
                    token_confs = batch.confs_so_far(i)
                running.append(not ended[i])
                if confs is not None:
                    assert self.confs is not None
                    if token_confs is None:
                        confs = None
                    else:
                        confs.append(self.confs.at(j, p, token_confs, not ended[i]))
        run = np.array(running, dtype=bool)
        d = self.stopper.step(answers, run, confs)
        self.checkpoints += 1
        if d.stop:
            self.fired = (d.label, d.position, d.answer)
            self.stopped[: len(run)] = run
        self.decide_s += time.perf_counter() - t0
        if self.watch is not None:
            self.watch(Checkpoint(d.position, answers, run, d.stop, d.answer, d.label))
        return d.stop

    def land(self, records: Sequence[TraceRecord]) -> bool:
        """A staged method's launch has ended (its traces' records): the rule decides once more,
        and the next launch, if any, becomes :attr:`window`. True if it stopped."""
        t0 = time.perf_counter()
        lo, _ = self.window
        results = [r.result for r in records]
        confs: list[float] | None = None
        if self.confs is not None and self.stopper.conf is not None:
            p = int(self.grid[-1])
            if all(r.confs is not None for r in results):
                confs = [self.confs.at(lo + i, p, r.confs, False) for i, r in enumerate(results)]
        d = self.stopper.land([r.final_answer for r in results], confs)
        self.decide_s += time.perf_counter() - t0
        if d.stop:
            self.checkpoints += 1
            self.fired = (d.label, d.position, d.answer)
        return d.stop

    def finish(self, records: Sequence[TraceRecord]) -> tuple[str, int, str | None]:
        """(label, position, answer) of the method: where it fired, or, when it never did, its
        decision once every trace has ended (:meth:`mars.live.stepper.Stopper.finish`) fed the
        traces' final answers and confidences."""
        if self.fired is not None:
            return self.fired
        t0 = time.perf_counter()
        if self.stopper.staged:  # every launch has run: the full-budget vote
            d = self.stopper.finish()
            self.decide_s += time.perf_counter() - t0
            return d.label, d.position, d.answer
        results = [r.result for r in records]
        confs: list[float] | None = None
        if self.confs is not None and self.stopper.conf is not None:
            p = int(self.grid[-1])
            if all(r.confs is not None for r in results):
                confs = [self.confs.at(j, p, r.confs, False) for j, r in enumerate(results)]
        d = self.stopper.finish([r.final_answer for r in results], confs)
        self.decide_s += time.perf_counter() - t0
        return d.label, d.position, d.answer


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
    plan: LivePlan,
    *,
    compare_full: bool = False,
    warmup_file: str | Path | None = None,
    detail: Detail | None = None,
    watch: Watch | None = None,
) -> LiveRun:
    """Answer ``problem`` live as ``plan`` says (:class:`mars.live.plan.LivePlan`, from
    :func:`mars.live.plan_for`; see the module docstring); the records are in ``.table``, built
    from the traces in ``.traces``.

    ``warmup_file``: where the finished warmup traces are kept until the question ends, so that
    an interrupted question resumes after its warmup (read back if it exists, checked against the
    question and the warmup size; the warmup's wall time is the one measured when it ran).
    ``detail`` hears the phase (warmup, main, run to completion) and the checkpoint reached
    (:mod:`mars.progress`); ``watch`` each decision on the main traces (:class:`Checkpoint`). A
    cancelled scope (:mod:`mars.engines.cancel`) ends the run with
    :class:`~mars.engines.cancel.Cancelled`, the engine's batches closed. ``compare_full`` also
    runs the same N traces to completion and reports its tokens, wall time and answer in
    ``.full``.
    """
    m, n_traces, warmup, seed = plan.method, plan.traces, plan.warmup, plan.seed
    spacing, max_tokens, settings, on = plan.spacing, plan.max_tokens, plan.settings, plan.grid
    grid, calibration = plan.checkpoints, plan.calibration

    made_by = warmup_inputs(backend, problem, warmup, seed, spacing, max_tokens)
    warm, warm_table, warm_wall = warmup_traces(backend, problem, made_by, warmup_file, detail)
    t1 = time.perf_counter()
    ctl = _Controller(problem, plan, warm_table, watch)
    say = prefixed(detail, f"q{problem.qid} {m.name}: ")
    if say is not None:
        say(f"starting {n_traces} traces")
    if m.launch.overlaps:
        records, launched = _run_early(backend, problem, ctl, seed, warmup, on, say)
    elif m.launch.staged:
        records, launched = _run_launches(backend, problem, ctl, seed, warmup, on, say)
    else:
        batch = backend.start(problem, n_traces, seed, first_trace=warmup)
        try:
            records = run_batch(batch, on, on_checkpoint=ctl, detail=say)
        finally:
            batch.close()
        launched = n_traces
    t2 = time.perf_counter()
    ran = [r.result for r, stopped in zip(records[:launched], ctl.stopped) if not stopped]
    warn_without_final_answers(problem.qid, ran, max_tokens, "traces that ran to their end")
    for j in np.flatnonzero(ctl.stopped):
        records[j].result = _as_stopped(records[j].result)
    main_table = records_to_table(problem.qid, warmup, records)
    table = with_stood_in(
        pa.concat_tables([warm_table, main_table]),
        stood_in_of(warm_table) + stood_in_of(main_table),
    )

    # the method's decision (where it fired, or its full-budget vote), and the replay check:
    # the records re-simulated give the same
    label, position, answer = ctl.finish(records)
    stopped = np.concatenate([np.zeros(warmup, bool), ctl.stopped])
    res, arr = decide(
        _question(problem, [table]), m, settings, grid, warmup, stopped, calibration=calibration
    )
    a = int(res.answer[0])
    final = (
        str(res.stopped_by[0]),
        int(res.position[0]),
        arr.representatives[a] if a >= 0 else None,
    )
    tokens = int(sum(r.result.length for r in records))
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
        traces=[*warm, *records],
        launched=launched,
    )
    if compare_full:
        run.full = _run_full(
            backend, problem, plan, warm_table, prefixed(detail, f"q{problem.qid} to completion: ")
        )
    return run


def _run_launches(
    backend: Backend,
    problem: Problem,
    ctl: _Controller,
    seed: int,
    warmup: int,
    on: Grid,
    say: Detail | None,
) -> tuple[list[TraceRecord], int]:
    """A staged method's launches, one after another: each starts once the one before has
    ended without a stop. Returns the N traces' records (a trace never launched: no tokens, no
    answer) and how many traces were launched."""
    records: list[TraceRecord | None] = [None] * ctl.n
    launched = 0
    while (cur := ctl.stopper.current) is not None:
        lo, hi = cur
        if say is not None:
            say(f"launching traces {lo + 1}–{hi} of {ctl.n}")
        batch = backend.start(problem, hi - lo, seed, first_trace=warmup + lo)
        try:
            part = run_batch(batch, on, on_checkpoint=ctl, detail=say)
        finally:
            batch.close()
        records[lo:hi] = part
        launched = hi
        if ctl.fired is not None or ctl.land(part):
            break
    return _with_unlaunched(records), launched


def _with_unlaunched(records: list[TraceRecord | None]) -> list[TraceRecord]:
    """Every trace's record, one never launched standing as an empty trace (no tokens, no
    answer) with the same fields as those that ran."""
    ran = [r for r in records if r is not None]
    unlaunched = TraceResult(
        length=0,
        final_answer=None,
        finished=False,
        confs=np.zeros(0, np.float16) if any(r.result.confs is not None for r in ran) else None,
        text="" if any(r.result.text is not None for r in ran) else None,
        token_ids=np.zeros(0, np.int32)
        if any(r.result.token_ids is not None for r in ran)
        else None,
    )
    return [r if r is not None else TraceRecord(unlaunched) for r in records]


def _run_early(
    backend: Backend,
    problem: Problem,
    ctl: _Controller,
    seed: int,
    warmup: int,
    on: Grid,
    say: Detail | None,
) -> tuple[list[TraceRecord], int]:
    """Launches that overlap (:class:`mars.method.launch.Early`): the first launch starts, and
    the rest start at the checkpoint after which the stopper launched them, while the first goes
    on; every checkpoint of the one clock, each launched batch advances to its own checkpoint
    (past its grid: to its end), its running traces are probed there, and the stopper decides
    over all of them (where the engine takes two batches at once, they advance side by side,
    :attr:`mars.engines.base.Backend.concurrent_batches`). Returns the N traces' records (a
    trace never launched: no tokens, no answer) and how many traces were launched."""
    stopper = ctl.stopper
    grid = [int(p) for p in ctl.grid]
    m = len(grid)
    assert on.max_tokens is not None
    cap = int(on.max_tokens)
    #: batch, its first trace among the N, the checkpoint of the clock it started at, records
    runs: list[tuple[TraceBatch, int, int, list[TraceRecord]]] = []
    t = 0
    try:
        while (cur := stopper.current) is not None:
            hi = cur[1]
            launched = runs[-1][1] + runs[-1][0].n if runs else 0
            if hi > launched:
                if say is not None:
                    say(f"launching traces {launched + 1}–{hi} of {ctl.n}")
                batch = backend.start(problem, hi - launched, seed, first_trace=warmup + launched)
                runs.append((batch, launched, t, [TraceRecord(None) for _ in range(batch.n)]))  # type: ignore[arg-type]

            def checkpoint(run: tuple, t: int = t) -> tuple[TraceBatch, int, int, dict]:
                batch, first, start, recs = run
                local = t - start  # launched after checkpoint start - 1: its own checkpoint
                target = grid[local] if local < m else cap
                cancel.check()
                batch.advance(target)
                ended = np.asarray(batch.ended)
                if local >= m and not ended.all():  # past its grid: cut at the cap
                    batch.stop(np.flatnonzero(~ended))
                    ended = np.asarray(batch.ended)
                probes: dict = {}
                if local < m:
                    live = np.flatnonzero(~ended & (np.asarray(batch.lengths) == target))
                    if live.size:
                        results = batch.probe(live)
                        if len(results) != live.size:
                            raise RuntimeError(
                                f"backend returned {len(results)} probes for {live.size} traces"
                            )
                        for j, r in zip(live.tolist(), results):
                            recs[j].probes.append((target, r))
                        probes = dict(zip(live.tolist(), results))
                return batch, first, target, probes

            if len(runs) > 1 and backend.concurrent_batches:  # side by side at the server
                with ThreadPoolExecutor(len(runs)) as pool:
                    jobs = [
                        pool.submit(contextvars.copy_context().run, checkpoint, r) for r in runs
                    ]
                    told = [job.result() for job in jobs]
            else:
                told = [checkpoint(r) for r in runs]
            if say is not None:
                going = sum(int((~np.asarray(b.ended)).sum()) for b, *_ in runs)
                say(f"checkpoint {t + 1} of the clock: {going} running")
            if ctl.tick(told):
                for batch, *_ in runs:
                    live = np.flatnonzero(~np.asarray(batch.ended))
                    if live.size:
                        batch.stop(live)
                break
            t += 1
        for batch, _, _, recs in runs:
            for j in range(batch.n):
                recs[j].result = batch.result(j)
    finally:
        for batch, *_ in runs:
            batch.close()
    records: list[TraceRecord | None] = [None] * ctl.n
    for batch, first, _, recs in runs:
        records[first : first + batch.n] = recs
    launched = runs[-1][1] + runs[-1][0].n if runs else 0
    return _with_unlaunched(records), launched


def _run_full(
    backend: Backend,
    problem: Problem,
    plan: LivePlan,
    warm_table: pa.Table,
    detail: Detail | None = None,
) -> dict:
    """The same N traces, every one to its end: tokens, wall time and the answer of the
    full-budget vote ``method`` is measured against
    (:attr:`~mars.method.registry.Method.baseline`)."""
    first_trace = plan.warmup
    t0 = time.perf_counter()
    batch = backend.start(problem, plan.traces, plan.seed, first_trace=first_trace)
    try:
        records = run_batch(batch, plan.grid, detail=detail)
    finally:
        batch.close()
    wall = time.perf_counter() - t0
    q = _question(problem, [warm_table, records_to_table(problem.qid, first_trace, records)])
    full = get_method(plan.method.baseline)
    res, arr = decide(
        q, full, plan.settings, plan.checkpoints, first_trace, np.zeros(q.n_traces, bool)
    )
    a = int(res.answer[0])
    return {
        "tokens": int(sum(r.result.length for r in records)),
        "wall_s": round(wall, 4),
        "answer": arr.representatives[a] if a >= 0 else None,
        "correct": None if problem.answer is None else bool(res.correct[0]),
    }


# ---------------------------------------------------------------------------------------------
# Many questions into a pool directory (resumable), and the replay of one


def solve_pool(
    backend: Backend,
    problems: Sequence[Problem] | str | Path,
    out: str | Path,
    plan: LivePlan,
    *,
    questions: Iterable[int] | None = None,
    compare_full: bool = False,
    progress: Progress | None = None,
    on_question: Callable[[LiveRun], None] | None = None,
    detail: Detail | None = None,
) -> list[dict]:
    """:func:`solve` every requested question into the pool directory ``out`` as ``plan`` says;
    one summary per question. A calibration is kept in ``out`` (:data:`CALIBRATION_FILE`, its
    digest in the run's parameters), so the run replays from its folder alone.

    Resumable: a question is done once its ``live/qNNNNNN.json`` exists (written after its trace
    file); re-running the same command skips it. Other parameters into the same directory are
    refused.
    """
    by_qid, qids = select_problems(problems, questions)
    warmup, n_traces, calibration = plan.warmup, plan.traces, plan.calibration
    sel = [by_qid[q] for q in qids]
    for p in sel:
        backend.check_context(p)
    datasets = sorted({p.dataset for p in sel})
    params = plan.params(
        "mars.live",
        backend,
        datasets[0] if len(datasets) == 1 else datasets,
        compare_full,
        qids=qids,
        problems_digest=problems_digest(sel),
    )
    out = Path(out)
    writer = PoolDirWriter(
        out,
        params,
        record=LIVE_RECORD,
        what="live run",
        params_of=lambda manifest: manifest.get("live", {}),
        done_marker=lambda qid: live_path(out, qid),
    )

    def busy() -> None:
        log.warning("%s: another `mars solve` is writing into it; waiting for it to finish", out)

    # one writer at a time: a second identical command waits, then finds the questions done
    with output_dir(out), folder_lock(out, busy):
        if writer.start(qids):
            make_dirs(out / LIVE_DIR)
            if calibration is not None:
                calibration.save(out / CALIBRATION_FILE)
            todo = writer.todo(qids)
            _remove_litter(out, [q for q in qids if q not in todo])
            # a damaged record of a question done earlier, or one made for another question or
            # run, is refused before any work
            done = [q for q in qids if q not in todo]
            as_written = json.loads(json.dumps(params))  # as the files hold them
            for rec in read_records(out, done, warmup, n_traces, SUMMARY_FIELDS):
                problem = by_qid[rec["qid"]]
                check_made_for(out, rec, as_written, problem_digest(problem), "--problems'")
            for qid in counted(todo, len(todo), progress):
                run = solve(
                    backend,
                    by_qid[qid],
                    plan,
                    compare_full=compare_full,
                    warmup_file=warmup_path(out, qid),
                    detail=detail,
                )
                assert run.table is not None
                writer.write_question(qid, run.table)
                write_json_atomic(live_path(out, qid), run.summary())
                warmup_path(out, qid).unlink(missing_ok=True)
                if on_question is not None:
                    on_question(run)
            summaries = read_records(out, qids, warmup, n_traces, SUMMARY_FIELDS)
            write_csv(out / SUMMARY_FILE, summaries)
            rows = question_rows(by_qid, qids, params.get("model", ""), backend)
            writer.finish(rows, pool_manifest(params))
        else:
            _remove_litter(out, qids)
        return read_records(out, qids, warmup, n_traces, SUMMARY_FIELDS)


def _remove_litter(out: Path, done: Iterable[int]) -> None:
    """What a run stopped at the wrong moment leaves in ``live/``: the kept warmup of a question
    whose record was written just before (it is never read again), and half-written files."""
    for qid in done:
        warmup_path(out, qid).unlink(missing_ok=True)
    for tmp in (out / LIVE_DIR).glob(".*.tmp-*"):
        tmp.unlink(missing_ok=True)
