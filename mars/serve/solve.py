"""One MARS request solved: its prompt made ready, the live loop run, what the client gets.

The decision loop is `mars solve`'s own (:func:`mars.live.solve`), run in a worker thread per
question on the question's view of the upstreams (:meth:`~mars.serve.upstreams.Upstreams.backend`)
inside a cancel scope (:mod:`mars.engines.cancel`): a client that goes away cancels it and every
request it has in flight upstream. What the live loop says as it goes (the warmup's progress, each
decision on the main traces) is turned into progress events for a streaming client.

What the client gets (:class:`Outcome`) is read off the live run's traces as they ended
(:attr:`~mars.live.LiveRun.traces`, what its record is built from): the answer's text (the text
of a trace that ended with the answer, else the probe's completion that gave it), the votes at the
stop, the tokens every part spent — what the question paid — and the full budget's tokens, exact
when no trace was stopped, else an estimate with its basis stated (:func:`full_budget`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..engines import cancel
from ..engines.base import Backend
from ..engines.endpoint import shown
from ..engines.generate import TraceRecord, token_cap
from ..errors import MarsError, first_line
from ..live import Checkpoint, LivePlan, LiveRun, solve
from ..store.problems import Problem
from .notes import SYNTHETIC_NOTE
from .reconcile import Ledger
from .record import DATASET, Recorded, Recorder
from .requests import BadRequest, Question, prompt_seed
from .upstreams import Upstreams, synthetic_truth

log = logging.getLogger("mars.serve")

#: ``emit(event)``: a progress event of a running question (a JSON-able dict)
Emit = Callable[[dict], None]


@dataclass(frozen=True)
class Prepared:
    """A question ready to run: the prompt as the model continues it and its token ids, how it
    is solved (its plan, its token cap fitted to the model's context), the question's view of the
    upstreams and the problem the live loop takes."""

    question: Question
    text: str
    prompt_ids: list[int] | None
    plan: LivePlan
    backend: Backend
    problem: Problem


@dataclass
class Outcome:
    """What one question gave (see the module docstring)."""

    run: LiveRun
    content: str
    finish_reason: str
    prompt_tokens: int
    probe_generated: int
    probe_prompt_uncached: int | None
    budget: dict  # {"tokens": int, "exact": bool}
    votes: list[dict]
    traces: list[dict] | None
    record: Recorded | None
    wall_s: float
    record_error: str | None = None  # why the question could not be recorded
    synthetic: bool = False  # answered by the synthetic upstream (made-up traces)
    #: the manifest block of its record pool, and the pool's name (with --record; the audit
    #: finds them where they are not)
    params: dict | None = None
    pool: str | None = None
    #: its upstream requests, named and counted (mars.serve.reconcile)
    ledger: Ledger | None = None


def prepare(upstreams: Upstreams, q: Question) -> Prepared:
    """Render and tokenize the prompt, fix the token cap, check that the question fits the
    model's context (the command line's one-line message otherwise), and build, once, what the
    question runs with: its plan, its view of the upstreams and the problem the loop takes."""
    text = upstreams.render(q.kind, q.prompt, q.messages)
    ids = upstreams.tokenize(q.kind, text)
    room = None if ids is None else upstreams.default_max_tokens(len(ids))
    if room is not None and room < 1:
        raise BadRequest(
            f"the prompt ({len(ids or ())} tokens) and a probe leave no room in the model's "
            f"context ({upstreams.context()} tokens): shorten it",
            "prompt" if q.kind == "completions" else "messages",
        )
    if q.max_tokens is not None and room is not None and q.max_tokens > room:
        raise BadRequest(
            f"max_tokens {q.max_tokens}: the prompt ({len(ids or ())} tokens) and a probe leave "
            f"room for {room} in the model's context ({upstreams.context()} tokens): ask for "
            f"{room} or less, or leave it out",
            "max_tokens",
        )
    max_tokens = q.max_tokens
    if max_tokens is None:
        max_tokens = room
        if max_tokens is None:
            max_tokens = token_cap(upstreams.synthetic or upstreams.primary, None)
    q = q.with_max_tokens(max_tokens)
    plan = q.plan()
    problem = problem_of(upstreams, q, text)
    try:
        be = upstreams.backend(text, ids, max_tokens, q.temperature, q.top_p, q.answer_pattern)
        be.check_context(problem)
    except MarsError as exc:
        raise BadRequest(str(exc), "max_tokens") from None
    return Prepared(q, text, ids, plan, be, problem)


def problem_of(upstreams: Upstreams, q: Question, text: str) -> Problem:
    """The question as the live loop takes it: its id from the prompt (the same prompt and seed
    give the same traces), its ground truth the client's (the synthetic engine's own where it
    gives none; else unknown, empty)."""
    truth = q.ground_truth
    if not truth and upstreams.synthetic is not None:
        truth = synthetic_truth(text)
    return Problem(qid=prompt_seed(text), question=text, answer=truth, dataset=DATASET)


def warm_up() -> None:
    """Pay the live loop's one-off costs before the first client does (tens of seconds on a busy
    CPU): the answer grader's imports (math-verify) and the compiled confidence pass, by deciding
    a made-up question of two traces once."""

    from ..live import decide, live_grid, live_settings
    from ..method.registry import get_method
    from ..store import schema
    from ..store.pool import question_from_table

    probe = {"position": 4, "answer": "\\frac{1}{2}", "raw_text": None, "conf": None,
             "prompt_tokens": None, "cached_tokens": None, "generated_tokens": None}  # fmt: skip
    table = pa.table(
        {
            "qid": [0, 0],
            "trace_idx": [0, 1],
            "final_answer": ["\\frac{1}{2}", "0.5"],
            "length": [8, 8],
            "finished": [True, True],
            "confs": [[1.0] * 8, [2.0] * 8],
            "probes": [[probe], [probe]],
            "text": [None, None],
            "token_ids": [None, None],
        },
        schema=schema.TRACE_SCHEMA,
    )
    q = question_from_table(table, 0, "<warm-up>", published=False, ground_truth="1/2")
    settings = live_settings(2, 0, 0, 4, 8, {})
    decide(q, get_method("sc"), settings, live_grid(4, 8).checkpoints(), 0, np.zeros(2, bool))


def progress_of(c: Checkpoint, n_traces: int) -> dict:
    """A streaming client's view of one decision: the leader and the vote shares of the answers
    the traces hold now."""
    held = [a for a in c.answers if a is not None]
    counts = Counter(held).most_common()
    shares = {a: round(k / n_traces, 4) for a, k in counts[:5]}
    return {
        "phase": "main",
        "checkpoint": int(c.position),
        "leader": counts[0][0] if counts else None,
        "shares": shares,
        "running": int(np.count_nonzero(c.running)),
        "traces": n_traces,
        "stop": bool(c.stop),
    }


def run_question(
    upstreams: Upstreams,
    prep: Prepared,
    scope: cancel.CancelScope,
    emit: Emit | None = None,
    recorder: Recorder | None = None,
    ledger: Ledger | None = None,
) -> Outcome:
    """Solve the question (in the calling thread; ``scope`` cancels it), record it, and read
    what the client gets; ``ledger`` names and counts its upstream requests."""
    q, plan, be, problem = prep.question, prep.plan, prep.backend, prep.problem
    if ledger is not None and hasattr(be, "ledger"):
        be.ledger = ledger

    def watch(c: Checkpoint) -> None:
        if emit is not None:
            emit(progress_of(c, plan.traces))

    def detail(text: str) -> None:
        if emit is not None and "warmup" in text:
            emit({"phase": "warmup", "detail": text.split(": ", 1)[-1]})

    t0 = time.perf_counter()
    with cancel.scope(scope):
        run = solve(be, problem, plan, detail=detail, watch=watch)
    wall = time.perf_counter() - t0
    out = _outcome(run, q, plan, len(prep.prompt_ids or ()), wall)
    out.ledger = ledger
    out.synthetic = upstreams.synthetic is not None
    if recorder is not None:
        assert run.table is not None
        params = out.params = pool_params(prep)
        out.pool = Recorder.pool_name(params)
        summary = {**run.summary(), "seed": plan.seed, "served": served(plan)}
        if ledger is not None:  # its upstream requests' ids and counts (mars.serve.reconcile)
            summary["upstream"] = ledger.view()
        row = {
            "ground_truth": problem.answer or None,  # None: not known (no grading)
            "question": prep.text,
            "dataset": DATASET,
            "model": getattr(be, "model", ""),
            "prompt_ids": prep.prompt_ids,
        }
        try:  # a side effect: the client gets its answer whether or not it is recorded
            out.record = recorder.add(params, run.table, summary, row, plan.calibration)
        except (OSError, MarsError, pa.ArrowException) as exc:
            out.record_error = first_line(exc)
            log.error("a question was answered but not recorded: %s", shown(out.record_error, 300))
    return out


def pool_params(prep: Prepared) -> dict:
    """The manifest block of the record pool a question goes to (`mars replay` reads it): its
    plan's, and the answer format where it is not the default."""
    fmt = prep.question.answer_format
    return {
        **prep.plan.params("mars.serve", prep.backend, DATASET),
        **({"answer_format": fmt} if fmt != "boxed" else {}),
    }


def served(plan: LivePlan) -> dict:
    """What decided a served question, in its live record: method, sizes, grid, knobs."""
    return {
        "method": plan.method.name,
        "traces": plan.traces,
        "warmup": plan.warmup,
        "spacing": plan.spacing,
        "max_tokens": plan.max_tokens,
        "knobs": dict(plan.knobs),
    }


def _cut(text: str, stops: tuple[str, ...]) -> str:
    cut = min((i for s in stops if s and (i := text.find(s)) >= 0), default=len(text))
    return text[:cut]


def _boxed(raw: str | None, answer: str) -> str:
    """The probe's completion up to the brace that closes its ``\\boxed{``."""
    if raw:
        depth = 0
        start = raw.find("{")
        for i in range(max(start, 0), len(raw)):
            depth += {"{": 1, "}": -1}.get(raw[i], 0)
            if depth == 0 and start >= 0:
                return raw[: i + 1]
    return f"\\boxed{{{answer}}}"


def _outcome(run: LiveRun, q: Question, plan: LivePlan, prompt_tokens: int, wall: float) -> Outcome:
    traces = run.traces
    main = {t: traces[t] for t in range(run.warmup, len(traces))}
    # where the answer's text is looked for: the main traces, then the warmup's
    looked = [traces[t] for t in [*main, *range(run.warmup)]]
    ends = [r.result for r in looked]
    stopped = set(run.stopped_traces)
    answer = run.answer
    content = ""
    if answer is not None:
        ended = [e for e in ends if e.final_answer == answer and e.text]
        if ended:
            content = ended[0].text or ""
        else:
            probes = [p for r in looked for _, p in r.probes if p.answer == answer and p.raw_text]
            content = _boxed(probes[-1].raw_text if probes else None, answer)
    finish_reason = "stop"
    if answer is None:  # never an empty answer: the longest trace's text, said so
        texts = [e for e in ends if e.text]
        if texts:
            longest = max(texts, key=lambda e: (bool(e.finished), int(e.length)))
            content = longest.text or ""
            finish_reason = "stop" if longest.finished else "length"
    content = _cut(content, q.stop)
    votes = [
        {"answer": a, "votes": k}
        for a, k in Counter(held_at_stop(main, stopped, run.stop_position)).most_common(5)
    ]
    probed = [p for r in traces for _, p in r.probes]
    generated = [int(p.generated_tokens) for p in probed if p.generated_tokens]
    # the probes' uncached prompt tokens: None where a probe's counts are not known
    known = [
        (a, b)
        for p in probed
        if (a := p.prompt_tokens) is not None and (b := p.cached_tokens) is not None
    ]
    uncached = sum(max(int(a) - int(b), 0) for a, b in known) if len(known) == len(probed) else None
    # a trace a staged method never launched counts as one stopped before its first token
    launched = run.warmup + (run.launched if run.launched is not None else run.n_traces)
    unlaunched = {t for t in main if t >= launched}
    budget = full_budget(main, stopped | unlaunched, plan.max_tokens)
    returned = None
    if q.return_traces:
        returned = [
            {
                "trace": t,
                "text": _cut(r.result.text or "", q.stop),
                "tokens": int(r.result.length),
                "answer": r.result.final_answer,
                "finished": bool(r.result.finished),
                "stopped_early": t in stopped,
            }
            for t, r in main.items()
        ]
    return Outcome(
        run=run,
        content=content,
        finish_reason=finish_reason,
        prompt_tokens=prompt_tokens,
        probe_generated=int(sum(generated)),
        probe_prompt_uncached=uncached,
        budget=budget,
        votes=votes,
        traces=returned,
        record=None,
        wall_s=wall,
    )


def held_at_stop(
    main: Mapping[int, TraceRecord], stopped: set[int], position: int | None
) -> list[str]:
    """The answers the vote counted where the method decided: a trace stopped there holds its
    probe's answer there (its last one before, if it was stopped earlier), every other trace its
    final answer (it ended first; a trace never launched holds none). ``main``: the main traces
    by trace id."""
    held = []
    for t, r in main.items():
        if t in stopped and position is not None:
            probes = [p for at, p in r.probes if at <= position]
            answer = probes[-1].answer if probes else None
        else:
            answer = r.result.final_answer
        if answer is not None:
            held.append(answer)
    return held


def full_budget(main: Mapping[int, TraceRecord], stopped: set[int], cap: int) -> dict:
    """What the N main traces run to their end would have cost: exact when no trace was stopped;
    else an estimate — each stopped trace run to the mean length of the traces that went past
    where it was stopped and ended (the cap where none did) — and the bound, every stopped trace
    run to the cap. ``main``: the main traces by trace id."""
    ended = [int(r.result.length) for t, r in main.items() if t not in stopped]
    total = at_most = 0
    for t, r in main.items():
        n = int(r.result.length)
        if t not in stopped:
            total += n
            at_most += n
            continue
        past = [x for x in ended if x > n]
        total += round(sum(past) / len(past)) if past else cap
        at_most += cap
    return {"tokens": int(total), "at_most": int(at_most), "exact": not stopped}


#: how ``full_budget_tokens`` is had, as the response says it
BASIS = {
    True: "exact: no trace was stopped",
    False: "estimate: each stopped trace run to the mean length of the traces that went past "
    "its stop and ended (the cap where none did)",
}


def mars_object(o: Outcome, prep: Prepared, record_url: str | None) -> dict:
    """The response's ``mars`` object: how the answer was reached and what it cost."""
    r, q, plan = o.run, prep.question, prep.plan
    paid = paid_tokens(o)
    full = o.budget["tokens"]
    return {
        "method": r.method,
        "answer": r.answer,
        "votes": o.votes,
        # the rule's label where it stopped traces or kept launches from starting; "budget"
        # where every trace ran to its end (whatever the rule said once they had)
        "stopped_by": r.stopped_by if saved_any(r) else "budget",
        "rule": r.stopped_by,
        "stop_position": r.stop_position,
        "checkpoints": r.checkpoints,
        "traces": r.n_traces,
        "traces_started": r.launched,
        "warmup": r.warmup,
        "traces_stopped": len(r.stopped_traces),
        "stopped_traces": r.stopped_traces,
        "tokens": {
            "main": r.tokens,
            "warmup": r.warmup_tokens,
            "probes_generated": o.probe_generated,
            "paid": paid,
            "probe_prompts_uncached": o.probe_prompt_uncached,
        },
        "full_budget_tokens": full,
        "full_budget_tokens_at_most": o.budget["at_most"],
        "full_budget_basis": BASIS[o.budget["exact"]],
        "savings": {  # against the full budget: the paper's (main traces only), and as paid
            "paper": _share(full - r.tokens, full),
            "paid": _share(full - paid, full),
        },
        "gamma": r.gamma,
        "seed": plan.seed,
        "spacing": plan.spacing,
        "max_tokens": plan.max_tokens,
        "replay_ok": r.replay_ok,
        "wall_s": round(o.wall_s, 4),
        "record": record_url,
        "calibration": None if plan.calibration is None else plan.calibration.digest,
        "answer_format": q.answer_format,
        "answered": r.answer is not None,
        # what was asked of the upstreams, as they reported it (None: the synthetic upstream)
        "upstream": None if o.ledger is None or o.synthetic else o.ledger.view(),
        "notes": list(q.notes)
        + ([] if r.answer is not None else [unanswered_note(q)])
        + ([SYNTHETIC_NOTE] if o.synthetic else []),
    }


def unanswered_note(q: Question) -> str:
    """What a response without an answer says of its text."""
    how = "\\boxed{…}" if q.answer_format == "boxed" else f"the {q.answer_format} format"
    return (
        f"no trace wrote an answer in {how}: the text is the longest trace's, no vote was taken "
        "(mars.answer_format names another format; see docs/serve.md)"
    )


def saved_any(r: LiveRun) -> bool:
    """Whether the stop saved anything: a trace stopped early, or one never launched."""
    return bool(r.stopped_traces) or (r.launched is not None and r.launched < r.n_traces)


def paid_tokens(o: Outcome) -> int:
    """What the question cost in generated tokens: main traces, warmup and probes (the probes'
    uncached prompt tokens apart, in ``tokens.probe_prompts_uncached``)."""
    return o.run.tokens + o.run.warmup_tokens + o.probe_generated


def _share(saved: int, full: int) -> float | None:
    return None if full <= 0 else round(saved / full, 4)


def usage(o: Outcome) -> dict:
    """OpenAI usage: the prompt once, and every token generated for the answer (main traces,
    warmup, probes)."""
    completion = paid_tokens(o)
    return {
        "prompt_tokens": o.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": o.prompt_tokens + completion,
    }
