"""Evaluation protocols: how a question's traces become samples, answers and token costs.

* ``bootstrap`` — the MARS paper's (reference-protocol §4): ``iterations`` samples of ``budget``
  traces drawn with replacement from the traces that have a final answer; answers grouped by value
  (:mod:`mars.method.answers`), an abstention votes for nothing, ties go to the lowest answer id; a
  trace stopped at a checkpoint costs the tokens it generated up to there.
* ``parallel-probe`` — Parallel-Probe's public evaluator (zhengkid/Parallel-Probe,
  ``evaluation/data_loader.py`` and ``method.py``, read and re-implemented): iteration i shuffles
  the question's traces with ``random.Random(seed + i).shuffle`` (the same permutation for every
  question with as many traces) and runs the first ``budget``, without replacement; answers are
  exact strings and an abstention is the answer ``ERR``, which votes; a majority tie goes to the
  answer seen first in the order the traces were drawn; a trace is read step by step (step 0 is
  its first probe, each later step one probe more, ``spacing`` tokens each; after its recorded
  probes one more step reads the rest and ends it); a trace read in full without probes costs its
  length. Correct means equal to the gold answer as a string.

:func:`samples`, :func:`warmup`, :func:`first_seen` and :func:`question_arrays` give the walk
(:mod:`mars.method.walk`) what it needs; the rules and the walk are the same under both.
:func:`check_sizes` refuses sizes that cannot mean anything under a protocol; :func:`table_row`
averages a run the way Parallel-Probe's evaluator prints it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..errors import SimulationError
from ..store.grid import Grid
from ..store.pool import QuestionData
from .arrays import QuestionArrays
from .settings import SPECS, Settings, check_warmup

if TYPE_CHECKING:
    from .registry import Method

BOOTSTRAP = "bootstrap"
PARALLEL_PROBE = "parallel-probe"
#: what Parallel-Probe's evaluator votes for where a probe or a trace gave no answer
NO_ANSWER = "ERR"


def samples(arr: QuestionArrays, s: Settings) -> np.ndarray:
    """The sampled trace indices [iterations, budget] of the settings' protocol: bootstrap
    samples (reference-protocol §4.2: with replacement, from the traces that have a final answer,
    ``default_rng(seed + 10000·qid + i)``), or Parallel-Probe's shuffles (:func:`shuffles`)."""
    if s.protocol == PARALLEL_PROBE:
        return shuffles(arr.n_traces, s.budget, s.iterations, s.seed)
    pool = arr.pool_ids()
    out = np.empty((s.iterations, s.budget), dtype=np.int64)
    for i in range(s.iterations):
        rng = np.random.default_rng(s.seed + 10000 * arr.qid + i)
        out[i] = pool[rng.choice(len(pool), size=s.budget, replace=True)]
    return out


def warmup(arr: QuestionArrays, s: Settings) -> np.ndarray:
    """The warmup traces: the first ``warmup`` traces that have a final answer, by trace index
    (reference-protocol §4.3), under either protocol."""
    return arr.warmup_ids(s.warmup)


def first_seen(s: Settings) -> bool:
    """The protocol's tie rule: a tied vote goes to the answer seen first in sample order
    (Parallel-Probe's), else to the lowest answer id (the MARS reference's)."""
    return s.protocol == PARALLEL_PROBE


def shuffles(n_traces: int, budget: int, iterations: int, seed: int) -> np.ndarray:
    """The first ``budget`` traces of ``random.Random(seed + i).shuffle`` of the ``n_traces``
    traces, for i < ``iterations``: [iterations, budget] trace positions."""
    if budget > n_traces:
        raise SimulationError(
            f"--budget {budget}: the parallel-probe protocol draws without replacement, and a "
            f"question has only {n_traces} traces"
        )
    out = np.empty((iterations, budget), dtype=np.int64)
    for i in range(iterations):
        order = list(range(n_traces))
        random.Random(seed + i).shuffle(order)
        out[i] = order[:budget]
    return out


def _exact_groups(strings: list[str]) -> tuple[np.ndarray, list[str]]:
    """Ids by exact string, numbered in first-seen order."""
    index: dict[str, int] = {}
    ids = np.fromiter(
        (index.setdefault(a, len(index)) for a in strings), dtype=np.int32, count=len(strings)
    )
    return ids, list(index)


def _steps(q: QuestionData, on: Grid) -> np.ndarray:
    """Recorded probes per trace: ``probe_steps`` where the source kept it, else the probes at
    the spacing's multiples below the length."""
    below = on.count_below(q.lengths)  # 0 tokens: 0
    if q.probe_steps is None:
        return below
    return np.where(q.probe_steps >= 0, q.probe_steps, below)


def question_arrays(q: QuestionData, spacing: int) -> QuestionArrays:
    """The question as Parallel-Probe's evaluator reads it: one column per step.

    Trace j's answer at step t < L_j is its probe after (t + 1)·spacing tokens (its final answer
    where that probe lies at or past its length), and its final answer from step L_j on, where it
    has ended; stopped at step t it has cost min(t + 1, L_j)·spacing tokens, or max(length,
    L_j·spacing) once ended (the last step reads whatever is left).
    """
    n = q.n_traces
    if n == 0:
        raise SimulationError(f"{q.where()}: no traces")
    on = Grid(spacing)
    steps = _steps(q, on)
    T = int(steps.max()) + 1
    grid = on.first(T)
    pos, off = q.probe_positions, q.probe_offsets
    raw = q.probe_raw

    def unanswered(i: int) -> str:
        """What probe i stands for where it gave no answer: the source's text ("ERR", "") where
        a native import kept it, else ERR."""
        r = raw[i] if raw is not None else None
        return NO_ANSWER if r is None else r

    finals = []
    for j, a in enumerate(q.final_answers):
        if a is None or a == "":
            end = [i for i in range(int(off[j]), int(off[j + 1])) if pos[i] == q.lengths[j]]
            a = unanswered(end[-1]) if end and q.probe_codes[end[-1]] < 0 else NO_ANSWER
        finals.append(a)
    # step answers as strings: probes at multiples of the spacing below the length, then finals
    text = np.empty((n, T), dtype=object)
    for j in range(n):
        text[j, :] = finals[j]
    for j in range(n):
        lo, hi = int(off[j]), int(off[j + 1])
        p = pos[lo:hi]
        keep = (p < q.lengths[j]) & on.on_grid(p) & (on.index(p) < steps[j])
        for i in (lo + np.flatnonzero(keep)).tolist():
            c = int(q.probe_codes[i])
            text[j, int(on.index(pos[i]))] = q.probe_strings[c] if c >= 0 else unanswered(i)
    flat, reps = _exact_groups([*finals, *text.ravel().tolist()])
    final_ids = flat[:n]
    ids = flat[n:].reshape(n, T)
    full = np.maximum(np.asarray(q.lengths, dtype=np.int64), on.at(steps))
    cost = np.minimum(grid[None, :], on.at(steps)[:, None])
    cost = np.where(np.arange(T)[None, :] >= steps[:, None], full[:, None], cost)
    return QuestionArrays(
        qid=q.qid,
        ground_truth=q.ground_truth,
        grid=grid,
        lengths=np.asarray(q.lengths, dtype=np.int64),
        final_ids=final_ids,
        ids=ids,
        representatives=reps,
        correct=np.array([r == q.ground_truth for r in reps], dtype=bool),
        content_hash=q.content_hash(),
        run_steps=steps.astype(np.int64),
        step_cost=cost.astype(np.int64),
    )


def table_row(per_iteration, n_questions: int, rounds: int = 0) -> dict:
    """One row of Parallel-Probe's table from a run's per-iteration results (columns qid,
    iteration, correct, tokens, seq_tokens, longest_tokens), averaged as their evaluator does:
    per iteration the mean over questions, then ``Acc`` = round(100 · mean, 2) and the costs the
    mean over iterations truncated to an integer.

    ``Cost``: total tokens. ``Seq``: our sequential tokens (what a user waits for). ``Seq_Cost``:
    their CSV's sequential cost, the longest started trace, except for a method drawing
    ``rounds`` > 1 traces per round (ESC), whose round maxima their evaluator sums; it differs
    from ``Seq`` only for Adaptive-Consistency (one trace per round: fully sequential, which
    their paper's table reports and their CSV does not)."""
    df = per_iteration.sort_values(["iteration", "qid"], kind="stable")
    accs, costs, longest, seqs = [], [], [], []
    for _, it in df.groupby("iteration", sort=True):
        accs.append(int(it["correct"].sum()) / n_questions)
        costs.append(int(it["tokens"].sum()) / n_questions)
        longest.append(int(it["longest_tokens"].sum()) / n_questions)
        seqs.append(int(it["seq_tokens"].sum()) / n_questions)
    acc = float(np.mean(accs))
    their_seq = seqs if rounds > 1 else longest
    return {
        "Acc": round(100 * acc / 1, 2),
        "Cost": int(sum(costs) / len(costs)),
        "Seq_Cost": int(sum(their_seq) / len(their_seq)),
        "Seq": int(sum(seqs) / len(seqs)),
    }


def check_sizes(
    settings: Settings, traces: Mapping[int, int], methods: Sequence[Method], source: str
) -> list[str]:
    """Refuse sizes that cannot mean anything for these questions (``traces``: count per
    question) and methods; return a note (one line each) on every legal size that surprises.

    The DeepConf methods set their threshold from the first ``warmup`` traces of each bootstrap
    sample (reference-protocol §8): they need at least one, and no more than the budget. The
    others' warmup is the first ``warmup`` traces of the question, outside the budget (§4.3).
    """
    empty = sorted(q for q, n in traces.items() if n == 0)
    if empty:
        raise SimulationError(f"question {empty[0]} of {source} has no traces: nothing to sample")
    check_warmup(settings.warmup, traces, source)
    w, b = settings.warmup, settings.budget
    deepconf = [m.name for m in methods if not m.filter.keeps_all]
    if deepconf and not 1 <= w <= b:
        raise SimulationError(
            f"--warmup {w}: the DeepConf methods ({', '.join(deepconf)}) set their confidence "
            f"threshold from the first --warmup traces of each sample; it must be 1 to --budget "
            f"({b})"
        )
    notes = []
    if traces and settings.protocol == "parallel-probe":
        q = min(traces, key=lambda k: (traces[k], k))
        if b > traces[q]:
            raise SimulationError(
                f"--budget {b}: the parallel-probe protocol draws without replacement, and "
                f"question {q} of {source} has only {traces[q]} traces"
            )
    elif traces:
        q = min(traces, key=lambda k: (traces[k], k))
        if b > traces[q]:
            which = (
                "per question"
                if len(set(traces.values())) == 1
                else f"of question {q} (the fewest)"
            )
            notes.append(
                f"budget {b} > the {traces[q]} traces {which}: bootstrap samples are drawn with "
                f"replacement, so a sample holds each trace {b / traces[q]:.1f} times on average"
            )
    for m in methods:
        sweep = m.sweep
        if sweep is not None and sweep.bound == "budget" and getattr(settings, sweep.param) > b:
            flag = SPECS[sweep.param].flag
            notes.append(
                f"{m.name}: {flag} {getattr(settings, sweep.param)} > --budget {b}: runs as "
                f"{flag} {b}, the whole budget at once"
            )
    if w > b and any(m.q is not None for m in methods):  # rules that read q use the warmup
        notes.append(
            f"warmup {w} > budget {b}: the warmup traces are run in full, outside the budget "
            "and its token count"
        )
    return notes
