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

import csv
import io
import json
import reprlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from .engines.base import Backend, TraceBatch, TraceResult
from .engines.generate import (
    TraceRecord,
    backend_info,
    question_rows,
    records_to_table,
    run_batch,
    token_cap,
)
from .errors import MarsError, UsageError, first_line
from .method.answers import group_answers_online, is_correct
from .method.arrays import QuestionArrays, build_arrays, checkpoint_answers, checkpoint_confidences
from .method.registry import DEFAULT_METHOD, Method, get_method, live_method
from .method.settings import LIVE_KEYS, Settings
from .progress import Detail, Progress, counted, prefixed
from .simulate import MethodResult, QuestionContext, run_method
from .stepper import Stopper, Warmup
from .store import schema
from .store.atomic import write_atomic, write_json_atomic
from .store.pool import PoolError, QuestionData, open_pool, question_from_table, read_trace_table
from .store.problems import Problem, problems_digest, select_problems
from .store.userfiles import read_json_object
from .store.write import PoolDirWriter, stood_in_of, with_stood_in, write_trace_table

LIVE_DIR = "live"
LIVE_RECORD = ".solve.json"
SUMMARY_FILE = "live.csv"
#: Parquet metadata key of a kept warmup file (question, warmup size, its wall time; JSON)
WARMUP_METADATA_KEY = "mars.live.warmup"
#: The most checkpoints a live grid may have. The grid is fixed in advance and every look of the
#: rule builds arrays over all of it, so this bounds the memory of a run and of its replay,
#: whatever a manifest claims (at a 2,048-token spacing: 8.4 million tokens).
MAX_CHECKPOINTS = 1 << 12


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
    bad = sorted(set(knobs) - set(LIVE_KEYS))
    if bad:
        raise UsageError(f"unknown or fixed live settings {bad} (live: {', '.join(LIVE_KEYS)})")
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
        length=r.length,
        final_answer=None,
        finished=False,
        confs=r.confs,
        text=r.text,
        stood_in=r.stood_in,
    )


def _question(problem: Problem, tables: Sequence[pa.Table]) -> QuestionData:
    return question_from_table(
        pa.concat_tables(tables),
        problem.qid,
        f"<live question {problem.qid}>",
        published=False,
        ground_truth=problem.answer,
        question=problem.question,
    )


@dataclass
class LiveRun:
    """One question answered live. ``tokens`` counts the main traces; warmup and probes apart."""

    qid: int
    method: str
    answer: str | None
    correct: bool
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

    warm_table, warm_wall = _warmup(
        backend, problem, warmup, seed, spacing, max_tokens, warmup_file, detail
    )
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
    for j in np.flatnonzero(ctl.stopped):
        records[j].result = _as_stopped(records[j].result)
    main_table = records_to_table(problem.qid, warmup, records)
    table = with_stood_in(
        pa.concat_tables([warm_table, main_table]),
        stood_in_of(warm_table) + stood_in_of(main_table),
    )

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
        correct=bool(answer is not None and is_correct(answer, problem.answer)),
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


def _warmup(
    backend: Backend,
    problem: Problem,
    warmup: int,
    seed: int,
    spacing: int,
    max_tokens: int,
    kept: str | Path | None,
    detail: Detail | None,
) -> tuple[pa.Table, float]:
    """The question's warmup traces (run to completion, or read back from ``kept`` where an
    interrupted run of the same engine and settings left them; written there once they have run)
    and their wall time."""
    made_by = {
        "qid": int(problem.qid),
        "warmup": int(warmup),
        "seed": int(seed),
        "spacing": int(spacing),
        "max_tokens": int(max_tokens),
        "engine": backend_info(backend),
    }
    table = read_warmup(kept, made_by) if kept else None
    if table is not None:
        wall, stood_in = _warmup_wall(table), stood_in_of(table, str(kept))
        return with_stood_in(table.replace_schema_metadata(None), stood_in), wall
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
    table = records_to_table(problem.qid, 0, records)
    wall = time.perf_counter() - t0
    if kept and warmup:
        write_warmup(kept, table, made_by, wall)
    return table, wall


def write_warmup(path: str | Path, table: pa.Table, made_by: dict, wall_s: float) -> None:
    """Keep a question's finished warmup traces (a trace file, atomically), with what made them
    (question, warmup size, seed, grid, engine) and their wall time."""
    info = {**made_by, "wall_s": round(wall_s, 4)}
    write_trace_table(table, path, metadata={WARMUP_METADATA_KEY: json.dumps(info)})


def read_warmup(path: str | Path, made_by: dict) -> pa.Table | None:
    """The warmup traces kept by :func:`write_warmup` (None if there are none); a file that is
    not the warmup traces ``made_by`` describes is one line naming it."""
    path = Path(path)
    if not path.exists():
        return None
    qid, warmup = made_by["qid"], made_by["warmup"]
    remedy = "remove it to run the warmup again"
    if not path.is_file():
        what = "a directory" if path.is_dir() else "not a regular file"
        raise PoolError(f"{path}: {what}, not a warmup file; {remedy}")
    try:
        table = read_trace_table(path)
        raw = (table.schema.metadata or {}).get(WARMUP_METADATA_KEY.encode())
        if raw is None:
            raise ValueError("it records no warmup")
        info = json.loads(raw)
        info_ok = isinstance(info, dict) and isinstance(info.get("wall_s"), (int, float))
        qids = table.column("qid").to_numpy(zero_copy_only=False)
        idx = table.column("trace_idx").to_numpy(zero_copy_only=False)
    except (OSError, KeyError, ValueError, pa.ArrowException) as exc:
        raise PoolError(
            f"{path}: not a warmup file of this run ({first_line(exc)}); {remedy}"
        ) from None
    if not info_ok or info.get("qid") != qid or info.get("warmup") != warmup:
        raise PoolError(f"{path}: not question {qid}'s {warmup} warmup traces; {remedy}")
    expected = json.loads(json.dumps(made_by))  # as the file holds it (lists, not tuples)
    other = [k for k in expected if info.get(k) != expected[k]]
    if other:
        raise PoolError(f"{path}: kept by a run with other settings ({', '.join(other)}); {remedy}")
    if table.num_rows != warmup or (qids != qid).any() or (idx != np.arange(warmup)).any():
        raise PoolError(
            f"{path}: rows are not question {qid}'s warmup traces 0..{warmup - 1}; {remedy}"
        )
    return table


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
        "correct": bool(res.correct[0]),
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
    if writer.start(qids):
        (out / LIVE_DIR).mkdir(exist_ok=True)
        todo = writer.todo(qids)
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
        _write_summary_csv(out / SUMMARY_FILE, summaries)
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
    return read_records(out, qids, warmup, n_traces, SUMMARY_FIELDS)


SUMMARY_COLUMNS = (
    "qid",
    "method",
    "answer",
    "correct",
    "stopped_by",
    "stop_position",
    "tokens",
    "warmup_tokens",
    "probe_tokens",
    "gamma",
    "n_stopped",
    "wall_main_s",
    "full_tokens",
    "full_wall_s",
    "full_answer",
    "full_correct",
    "replay_ok",
)


def _write_summary_csv(path: Path, summaries: list[dict]) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(SUMMARY_COLUMNS)
    for s in summaries:
        full = s.get("full") or {}
        w.writerow(
            [
                s["qid"],
                s["method"],
                s["answer"],
                s["correct"],
                s["stopped_by"],
                s["stop_position"],
                s["tokens"],
                s["warmup_tokens"],
                s["probe_tokens"],
                s["gamma"],
                len(s["stopped_traces"]),
                s["wall_s"]["main"],
                full.get("tokens"),
                full.get("wall_s"),
                full.get("answer"),
                full.get("correct"),
                s["replay_ok"],
            ]
        )
    write_atomic(path, lambda p: p.write_text(buf.getvalue()))


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
}
_FULL: Fields = {
    "tokens": (_whole, ""),
    "wall_s": (_number, ""),
    "answer": (_str_or_null, ""),
    "correct": (_bool, ""),
}
#: ... and what the summary (``live.csv``, `mars solve`'s table) reads besides.
SUMMARY_FIELDS: Fields = {
    **REPLAY_FIELDS,
    "method": (_str, "a string"),
    "correct": (_bool, "true or false"),
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


def _live_params(path: Path, manifest: dict) -> _LiveParams:
    """The method, settings and grid of the live run in ``path``, checked as `mars solve` checks
    its options; one line naming the manifest otherwise."""
    live = manifest.get("live")
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
        raise PoolError(f"{path / schema.POOL_MANIFEST}: 'live' block: {exc}") from None
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


def replay(path: str | Path, questions: Iterable[int] | None = None) -> list[dict]:
    """Re-simulate a live run from its stored records; per question the live and replayed results.

    Each dict has ``qid``, ``live`` and ``replay`` (answer, stopped_by, stop_position, tokens) and
    ``match`` (all equal). The manifest and every record are checked before any question is
    re-simulated; the records' traces as each is read.
    """
    path = Path(path)
    pool = open_pool(path)
    run = _live_params(path, getattr(pool, "manifest", {}))
    qids = list(pool.qids if questions is None else questions)
    records = read_records(path, qids, run.warmup, run.n_traces)
    out = []
    for qid, rec in zip(qids, records):
        q = pool.read_question(qid)
        _check_traces(q, run)
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
