"""Live MARS: stop parallel generation on an engine the moment a stopping rule fires.

:func:`solve` answers one question on a backend (synthetic, transformers, SGLang):

1. *warmup*: ``warmup`` traces (trace ids 0..W-1) run to completion, probed at every checkpoint;
2. *main*: ``n_traces`` traces (ids W..W+N-1) advance checkpoint by checkpoint
   (:func:`mars.generate.run_batch`, ``spacing`` tokens apart); every running trace is probed;
3. at each checkpoint the method decides on the records *as they stand*; when it fires, every
   running trace is stopped (:meth:`~mars.backends.base.TraceBatch.stop`) and the leader is the
   answer. Parallel-Probe as its authors define it (``sc-pp-faithful``) also stops the traces it
   prunes, there and then.

The decision is the simulator's own (:func:`mars.simulate.run_method`, one iteration whose sample
is the N main traces and whose warmup is the W warmup traces) applied to those records, with the
running traces shown as traces stopped at the checkpoint. Re-simulating a live run's stored
records (:func:`replay`) therefore gives its answer, stop position and tokens exactly. Three things
differ from the offline simulator, each because a live run cannot see the future:

* the checkpoint grid is fixed in advance (``spacing``, 2·spacing, … ≤ ``max_tokens``), not taken
  from the traces;
* answers are grouped online, in the order they arrive (warmup traces first, then checkpoint by
  checkpoint), so that an answer's group id never changes
  (:func:`~mars.answers.group_answers_online`; ids break vote ties);
* a checkpoint's confidence is the mean of the W tokens *before* the probe; the reference's window
  ends at token p, which does not exist yet when the engine probes at p tokens.

DeepConf methods are refused (its online filter truncates traces token by token inside the engine),
and so are methods that read the future (oracle q, oracle stopping).

Output of :func:`solve_pool` (a pool directory, so ``mars simulate`` reads it too)::

    OUT/traces/qNNNNNN.parquet   warmup + main traces; a stopped trace has its length at the stop,
                                 finished = false, no final answer, and its last probe at the stop
    OUT/live/qNNNNNN.json        the live result of the question (see :class:`LiveRun`)
    OUT/live.csv                 one row per question; OUT/pool.json has the run's parameters
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from . import schema
from .answers import group_answers_online, is_correct
from .arrays import QuestionArrays, build_arrays, checkpoint_answers
from .atomic import write_atomic, write_json_atomic
from .backends.base import Backend, TraceBatch, TraceResult
from .errors import UsageError
from .generate import (
    TraceRecord,
    backend_info,
    question_rows,
    records_to_table,
    run_batch,
    token_cap,
)
from .methods import Method, get_method
from .pool import PoolError, QuestionData, open_pool, question_from_table
from .pooldir import PoolDirWriter
from .problems import Problem, problems_digest, select_problems
from .progress import track
from .settings import LIVE_KEYS, Settings
from .simulate import MethodResult, QuestionContext, SimulationError, run_method

LIVE_DIR = "live"
LIVE_RECORD = ".solve.json"
SUMMARY_FILE = "live.csv"


def live_method(method: str | Method) -> Method:
    """The method, if it can run live; a clear error otherwise."""
    m = get_method(method) if isinstance(method, str) else method
    if m.deepconf:
        raise SimulationError(
            f"method {m.name}: DeepConf's online filter truncates traces token by token inside "
            "the engine; live mode runs sc, sc-mars, sc-mars-cal, sc-mars-cert, sc-mars2, sc-pp, "
            "sc-pp-faithful, sc-consensus"
        )
    if (m.q == "oracle" and m.stopping == "mars") or m.stopping.startswith("oracle"):
        raise SimulationError(
            f"method {m.name} reads the traces' future (oracle); it cannot run live"
        )
    return m


def live_grid(spacing: int, max_tokens: int) -> np.ndarray:
    """Checkpoints of a live run: spacing, 2·spacing, … ≤ max_tokens."""
    if spacing <= 0 or max_tokens < spacing:
        raise UsageError(f"no checkpoint: --spacing {spacing}, --max-tokens {max_tokens}")
    return spacing * np.arange(1, max_tokens // spacing + 1, dtype=np.int64)


def live_settings(
    n_traces: int, warmup: int, seed: int, spacing: int, max_tokens: int, knobs: dict
) -> Settings:
    """The simulator settings of a live run: N traces, one iteration, the rule's knobs.

    ``knobs`` are the settings `mars solve` takes (:data:`mars.settings.LIVE_KEYS`); the others
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
        length=r.length, final_answer=None, finished=False, confs=r.confs, text=r.text
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


class _Controller:
    """The checkpoint hook of the main batch: the method's decision on the records as they stand."""

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
        self.warm_table, self.n_warm, self.n = warm_table, n_warm, n
        self.probes: list[list] = [[] for _ in range(n)]
        self.ended: dict[int, TraceResult] = {}
        self.pruned = np.zeros(n, dtype=bool)
        self.stopped = np.zeros(n, dtype=bool)
        self.fired: tuple[str, int, str | None] | None = None  # (label, position, answer)
        self.decide_s = 0.0
        self.checkpoints = 0
        self.memo: dict = {}

    def __call__(self, p: int, batch: TraceBatch, probes: dict) -> bool:
        t0 = time.perf_counter()
        for j, r in probes.items():
            self.probes[j].append((p, r))
        ended = np.asarray(batch.ended)
        lengths = np.asarray(batch.lengths)
        records = []
        for j in range(self.n):
            if ended[j]:
                if j not in self.ended:
                    r = batch.result(j)
                    self.ended[j] = _as_stopped(r) if self.pruned[j] else r
                trace_res = self.ended[j]
            else:
                trace_res = TraceResult(
                    length=int(lengths[j]),
                    final_answer=None,
                    finished=False,
                    confs=batch.confs_so_far(j),
                )
            records.append(TraceRecord(trace_res, list(self.probes[j])))
        running = ~ended
        q = _question(
            self.problem,
            [self.warm_table, records_to_table(self.problem.qid, self.n_warm, records)],
        )
        stopped = np.concatenate([np.zeros(self.n_warm, bool), running | self.pruned])
        res, arr = decide(q, self.method, self.settings, self.grid, self.n_warm, stopped, self.memo)
        self.checkpoints += 1
        label, pos = str(res.stopped_by[0]), int(res.position[0])
        if label != "budget" and pos < p:
            raise RuntimeError(
                f"question {self.problem.qid}: the rule fired at {pos} < {p} on a later look "
                "(a decision that depends on the future)"
            )
        fire = label != "budget" and pos == p
        if fire:
            a = int(res.answer[0])
            self.fired = (label, p, arr.representatives[a] if a >= 0 else None)
            self.stopped = running | self.pruned
        elif res.pruned_at is not None:
            newly = np.flatnonzero((res.pruned_at[0] == p) & running & ~self.pruned)
            if newly.size:
                batch.stop(newly)
                self.pruned[newly] = True
                self.stopped = self.pruned.copy()
        self.decide_s += time.perf_counter() - t0
        return fire


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
    method: str | Method = "sc-mars-cal",
    *,
    n_traces: int = 64,
    warmup: int = 16,
    seed: int = 0,
    spacing: int = schema.CHECKPOINT_SPACING,
    max_tokens: int | None = None,
    compare_full: bool = False,
    **knobs,
) -> LiveRun:
    """Answer ``problem`` live with ``method`` (see the module docstring);
    the records are in ``.table``.

    ``knobs`` are :class:`mars.simulate.Settings` fields (gamma, ucb_z, gamma_min, delta, pp_conv,
    pp_warmup, pp_patience, consensus, window). ``compare_full`` also runs the same N traces to
    completion and reports its tokens, wall time and answer in ``.full``.
    """
    m = live_method(method)
    max_tokens = token_cap(backend, max_tokens)
    settings = live_settings(n_traces, warmup, seed, spacing, max_tokens, knobs)
    grid = live_grid(spacing, max_tokens)

    t0 = time.perf_counter()
    warm_records: list[TraceRecord] = []
    if warmup:
        batch = backend.start(problem, warmup, seed, first_trace=0)
        try:
            warm_records = run_batch(batch, spacing, max_tokens=max_tokens)
        finally:
            batch.close()
    warm_table = records_to_table(problem.qid, 0, warm_records)
    t1 = time.perf_counter()
    ctl = _Controller(problem, m, settings, grid, warm_table, warmup, n_traces)
    batch = backend.start(problem, n_traces, seed, first_trace=warmup)
    try:
        records = run_batch(batch, spacing, max_tokens=max_tokens, on_checkpoint=ctl)
    finally:
        batch.close()
    t2 = time.perf_counter()
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
        correct=bool(answer is not None and is_correct(answer, problem.answer)),
        stopped_by=label,
        stop_position=None if label == "budget" else position,
        tokens=tokens,
        warmup_tokens=int(sum(r.result.length for r in warm_records)),
        probe_tokens=probe_tokens,
        n_probes=n_probes,
        gamma=float(res.gamma),
        n_traces=n_traces,
        warmup=warmup,
        stopped_traces=[warmup + int(j) for j in np.flatnonzero(ctl.stopped)],
        checkpoints=ctl.checkpoints,
        wall_s={
            "warmup": round(t1 - t0, 4),
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
            n_traces,
            seed,
            warmup,
            spacing,
            max_tokens,
            warm_table,
            settings,
            grid,
        )
    return run


def _run_full(
    backend, problem, n_traces, seed, first_trace, spacing, max_tokens, warm_table, settings, grid
) -> dict:
    """The same N traces, every one to its end: tokens, wall time and the full-budget SC answer."""
    t0 = time.perf_counter()
    batch = backend.start(problem, n_traces, seed, first_trace=first_trace)
    try:
        records = run_batch(batch, spacing, max_tokens=max_tokens)
    finally:
        batch.close()
    wall = time.perf_counter() - t0
    q = _question(problem, [warm_table, records_to_table(problem.qid, first_trace, records)])
    res, arr = decide(q, get_method("sc"), settings, grid, first_trace, np.zeros(q.n_traces, bool))
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


def solve_pool(
    backend: Backend,
    problems: Sequence[Problem] | str | Path,
    out: str | Path,
    method: str = "sc-mars-cal",
    *,
    n_traces: int = 64,
    warmup: int = 16,
    seed: int = 0,
    spacing: int = schema.CHECKPOINT_SPACING,
    max_tokens: int | None = None,
    questions: Iterable[int] | None = None,
    compare_full: bool = False,
    progress: bool = True,
    on_question: Callable[[LiveRun], None] | None = None,
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
        for qid in track(todo, len(todo), f"solve {m.name}", progress):
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
                **knobs,
            )
            assert run.table is not None
            writer.write_question(qid, run.table)
            write_json_atomic(_live_path(out, qid), run.summary())
            if on_question is not None:
                on_question(run)
        summaries = [json.loads(_live_path(out, q).read_text()) for q in qids]
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
    return [json.loads(_live_path(out, q).read_text()) for q in qids]


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


def replay(path: str | Path, questions: Iterable[int] | None = None) -> list[dict]:
    """Re-simulate a live run from its stored records; per question the live and replayed results.

    Each dict has ``qid``, ``live`` and ``replay`` (answer, stopped_by, stop_position, tokens) and
    ``match`` (all equal).
    """
    path = Path(path)
    pool = open_pool(path)
    live = getattr(pool, "manifest", {}).get("live")
    if not live:
        raise PoolError(f"{path}: not a live run (no 'live' block in {schema.POOL_MANIFEST})")
    m = live_method(live["method"])
    settings = Settings(
        budget=live["n_traces"],
        iterations=1,
        warmup=live["warmup"],
        seed=live["seed"],
        spacing=live["spacing"],
        **live["settings"],
    ).validate()
    grid = live_grid(live["spacing"], live["max_tokens"])
    out = []
    for qid in pool.qids if questions is None else questions:
        rec_path = _live_path(path, qid)
        try:
            rec = json.loads(rec_path.read_text())
        except FileNotFoundError:
            raise PoolError(f"{rec_path}: missing live record of question {qid}") from None
        q = pool.read_question(qid)
        stopped = np.isin(q.trace_idx, rec["stopped_traces"])
        res, arr = decide(q, m, settings, grid, live["warmup"], stopped)
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
