"""The bootstrap stopping simulation (reference-protocol §4), vectorised over iterations × traces.

Per question: draw ``iterations`` bootstrap samples of ``budget`` traces (with replacement, from
the traces that have a final answer, ``default_rng(seed + 10000·qid + i)``), take the switch model
fitted on the first ``warmup`` pool traces (from the fit stage, or fitted here), then walk the
checkpoint grid once per method, stopping each iteration when its rule fires. Several methods
share loading, arrays, samples and the q-model.

:class:`MethodRun` is the walk itself, one checkpoint at a time: :func:`run_method` runs it to
the end, and the report's trajectory figure reads the same snapshots and the same rule.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from .errors import SimulationError
from .method import deepconf, launch, protocol
from .method.arrays import QuestionArrays, digest_arrays, load_arrays
from .method.calibration import calibrate_gamma
from .method.features import switch_labels
from .method.qmodel import QuestionFit, fit_question, predict_question
from .method.qmodel import preload as preload_fit
from .method.registry import Method
from .method.settings import Settings, check_sizes, resolve_spacing
from .method.stopping import Rule, Snapshot
from .method.voting import leader, tally
from .progress import Progress, counter
from .store.pool import Pool, PoolError, open_pool
from .workers import map_largest_first, process_pool

__all__ = [
    "MethodResult",
    "MethodRun",
    "QuestionContext",
    "QuestionResult",
    "Settings",
    "SimulationError",
    "bootstrap_samples",
    "pool_settings",
    "run_method",
    "simulate_pool",
    "simulate_question",
    "size_notes",
]


@dataclass
class MethodResult:
    """One method on one question: arrays over iterations."""

    answer: np.ndarray  # group id, -1 none
    correct: np.ndarray
    tokens: np.ndarray
    baseline: np.ndarray
    position: np.ndarray
    stopped_by: np.ndarray  # str labels
    probe_tokens: np.ndarray  # float (NaN: unknown)
    gamma: float = float("nan")
    pruned_at: np.ndarray | None = (
        None  # [I, B] where the rule stopped charging a trace (pruned, exited)
    )
    #: the latency axis: tokens a user waits for (the longest trace at the stop; for sample-more
    #: methods the longest trace of each round, summed over rounds) and the longest started trace
    seq_tokens: np.ndarray | None = None
    longest_tokens: np.ndarray | None = None
    #: traces drawn per round by a sample-more method (0: every trace starts at once)
    rounds: int = 0


@dataclass
class QuestionResult:
    qid: int
    ground_truth: str
    representatives: list
    content_hash: str
    methods: dict = field(default_factory=dict)
    answer_fallbacks: int = 0  # answers grouped by string identity (symbolic budget spent)


@dataclass
class Vote:
    """The vote of every iteration at one checkpoint, as one way of voting sees it (weights,
    DeepConf filter, traces per sample, tie rule): arrays [I, B] and ``votes`` [I, n_answers].
    Computed once per checkpoint for every method that votes this way
    (:meth:`QuestionContext.vote`); read-only, since methods share it."""

    ids: np.ndarray
    kept: np.ndarray  # passes DeepConf's filter (everything without it)
    eligible: np.ndarray
    weights: np.ndarray
    votes: np.ndarray
    lead: np.ndarray
    has_votes: np.ndarray

    def take(self, rows: np.ndarray) -> Vote:
        """The vote of iterations ``rows`` (each row's tally and leader are its own)."""
        return Vote(*(getattr(self, f.name)[rows] for f in fields(self)))


def bootstrap_samples(arr: QuestionArrays, s: Settings) -> np.ndarray:
    """Sampled trace indices [iterations, budget] (reference-protocol §4.2), or the protocol's
    (:mod:`mars.method.protocol`)."""
    if s.protocol == protocol.PARALLEL_PROBE:
        return protocol.shuffles(arr.n_traces, s.budget, s.iterations, s.seed)
    pool = arr.pool_ids()
    out = np.empty((s.iterations, s.budget), dtype=np.int64)
    for i in range(s.iterations):
        rng = np.random.default_rng(s.seed + 10000 * arr.qid + i)
        out[i] = pool[rng.choice(len(pool), size=s.budget, replace=True)]
    return out


class QuestionContext:
    """What every method of one question shares: samples, warmup, q-models, DeepConf state.

    ``samples`` and ``warm`` default to the bootstrap protocol; a live run's replay passes its own
    (one iteration: the traces it ran; the warmup traces it ran first). ``fitted`` is the switch
    model of the fit stage (its warmup traces must be this context's); without it the model is
    fitted here. ``memo`` (a dict kept by the caller) reuses fitted q-models and calibrated γ
    across contexts whose warmup inputs are byte-identical, as at every checkpoint of a live run.
    """

    def __init__(
        self,
        arr: QuestionArrays,
        settings: Settings,
        samples: np.ndarray | None = None,
        warm: np.ndarray | None = None,
        memo: dict | None = None,
        fitted: QuestionFit | None = None,
    ):
        self.arr = arr
        self.s = settings
        self.memo = memo
        self.samples = (
            bootstrap_samples(arr, settings)
            if samples is None
            else np.asarray(samples, dtype=np.int64)
        )
        self.warm = (
            arr.warmup_ids(settings.warmup) if warm is None else np.asarray(warm, dtype=np.int64)
        )
        if fitted is not None and not np.array_equal(fitted.warm, self.warm):
            raise SimulationError(
                f"question {arr.qid}: the fitted switch model was trained on warmup traces "
                f"{fitted.warm.tolist()[:4]}…, this simulation's warmup is "
                f"{self.warm.tolist()[:4]}… (refit with the same --warmup)"
            )
        self.fitted = fitted
        self._shared: dict[Any, Any] = {}  # computed state that depends on samples/warmup only
        if len(self.warm):
            self.warm_ref = int(np.argmax(np.bincount(arr.final_ids[self.warm])))
        else:
            self.warm_ref = -1

    def with_settings(self, settings: Settings) -> QuestionContext:
        """A context for other settings of the same question.

        When only stopping knobs change (γ, δ, u, share, …: ``settings.sampling_key()`` equal),
        the new context shares this one's bootstrap samples, warmup, switch model, learned and
        oracle q and DeepConf state (computed once, by whichever context needs them first),
        exactly what a fresh simulation would rebuild; otherwise it starts afresh.
        """
        if settings.sampling_key() != self.s.sampling_key():
            return QuestionContext(self.arr, settings, memo=self.memo)
        other = QuestionContext(
            self.arr, settings, self.samples, self.warm, memo=self.memo, fitted=self.fitted
        )
        other._shared = self._shared
        return other

    def _cached(self, name: str, compute: Callable[[], Any]) -> Any:
        if name not in self._shared:
            self._shared[name] = compute()
        return self._shared[name]

    @property
    def q_learned(self) -> np.ndarray:
        """Learned switch probabilities [n, m]; shared by reorderings of the same arrays."""
        return self._cached("q_learned", self._learned_q)

    def _learned_q(self) -> np.ndarray:
        arr = self.arr
        key = ("q_learned", self.warm.tobytes())
        if key in arr.derived:  # ids only break ties: reordered arrays share the model's output
            return arr.derived[key]
        fit = self.fitted if self.fitted is not None else fit_question(arr, self.warm, self.memo)
        arr.derived[key] = q = predict_question(fit.model, arr)
        return q

    @property
    def q_oracle(self) -> np.ndarray:
        return self._cached("q_oracle", lambda: switch_labels(self.arr))

    @property
    def dco(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(τ per iteration float32 [I], truncation [I, B], running-min checkpoint conf [n, m])."""

        def compute():
            taus, trunc = deepconf.iteration_state(self.arr, self.samples, self.s.warmup)
            return np.array(taus, dtype=np.float32), trunc, deepconf.running_min_conf(self.arr)

        return self._cached("dco", compute)

    def vote(self, k: int, method: Method, first_seen: bool = False) -> Vote:
        """Checkpoint ``k`` of every iteration as ``method`` votes there, computed once for all
        the methods that vote alike (same weights, DeepConf filter, width and tie rule): a row's
        tally and leader do not depend on the other rows, so each method takes its active rows
        of the same arrays and gets what it would have computed alone."""
        key = ("vote", k, method.deepconf, method.conf_weights, method.width, first_seen)
        if key in self._shared:
            return self._shared[key]
        arr = self.arr
        S = self.samples if method.width is None else self.samples[:, : method.width]
        ids = arr.ids[S, k]
        kept = np.ones(ids.shape, dtype=bool)
        if method.deepconf:
            taus, trunc, runmin = self.dco
            lens = arr.lengths[S]
            kept &= runmin[S, k] >= taus[:, None]
            kept &= ~((trunc < lens) & (arr.grid[k] >= trunc))
        e = kept & (ids >= 0)
        if method.conf_weights:
            assert arr.conf_at_pos is not None
            w = arr.conf_at_pos[S, k]
        else:
            w = np.ones(ids.shape)
        votes = tally(ids, w, e, arr.n_answers)
        lead, has = leader(votes, ids, e) if first_seen else leader(votes)
        vote = Vote(ids, kept, e, w, votes, lead, has)
        for f in fields(vote):
            getattr(vote, f.name).flags.writeable = False
        self._shared[key] = vote
        return vote

    def probe_sums(self) -> tuple[np.ndarray, np.ndarray]:
        """Per trace and checkpoint k [n, m]: the probe tokens spent on it at checkpoints 0..k
        while it runs, and whether one of them is unknown (what a method's probe cost sums over
        its sampled traces up to its stop)."""

        def compute():
            arr = self.arr
            assert arr.probe_tokens is not None
            probed = arr.grid[None, :] < arr.run_lengths[:, None]
            spent = np.cumsum(np.where(probed, np.maximum(arr.probe_tokens, 0), 0), axis=1)
            unknown = np.logical_or.accumulate(probed & (arr.probe_tokens < 0), axis=1)
            return spent, unknown

        return self._cached("probe_sums", compute)

    def gamma_for(self, method: Method) -> Any:
        """The γ ``method``'s rule gets (:attr:`mars.method.registry.Stopping.gamma`)."""
        s = self.s
        if method.rule.gamma == "one":
            return 1.0
        if method.rule.gamma != "calibrated":
            return s.gamma
        arr, warm = self.arr, self.warm
        ids = arr.ids[warm]
        eligible = ids >= 0
        if method.deepconf:
            tau_w = deepconf.threshold(arr, warm)
            eligible &= deepconf.running_min_conf(arr)[warm] >= tau_w
            assert arr.conf_at_pos is not None  # deepconf methods need confidences
            weights = arr.conf_at_pos[warm]
        else:
            weights = np.ones(ids.shape)
        args = (ids, arr.final_ids[warm], weights, eligible, self.q_oracle[warm])
        key = ("gamma", method.deepconf, arr.n_answers, s.ucb_z, s.gamma_min, digest_arrays(*args))
        if self.memo is not None and key in self.memo:
            return self.memo[key]
        gamma = calibrate_gamma(*args, arr.n_answers, ucb_z=s.ucb_z, gamma_min=s.gamma_min)
        if self.memo is not None:
            self.memo[key] = gamma
        return gamma

    def rule_for(self, method: Method, gamma: Any = None) -> Rule:
        """The stopping rule of ``method`` with this context's settings, γ (calibrated here unless
        given) and probe-0 guard."""
        return method.rule.rule(self, method, self.gamma_for(method) if gamma is None else gamma)


class MethodRun:
    """One method on one question's bootstrap samples, checkpoint by checkpoint.

    Holds what the method sees of every sampled trace (DeepConf threshold and truncation,
    eligibility, vote weights, q) and its stopping rule; :meth:`snapshot` is the vote at one
    checkpoint for some iterations, :meth:`run` walks the grid and returns the result.
    """

    def __init__(self, ctx: QuestionContext, method: Method):
        arr = ctx.arr
        if method.needs_confs and not arr.has_confs:
            raise SimulationError(
                f"method {method.name} needs per-token confidences; question {arr.qid} has none"
            )
        self.ctx, self.method, self.arr = ctx, method, arr
        S = self.samples = ctx.samples if method.width is None else ctx.samples[:, : method.width]
        if method.width is not None and method.deepconf:
            raise SimulationError(f"method {method.name}: DeepConf runs every trace of a sample")
        self.lens = arr.lengths[S]
        self.run_lens = arr.run_lengths[S]
        self.run_k = arr.run_checkpoints[S]
        #: the protocol's tie rule (mars.method.protocol): the answer seen first, or the lowest id
        self.first_seen = ctx.s.protocol == "parallel-probe"
        self.taus: np.ndarray | None
        self.runmin: np.ndarray | None
        if method.deepconf:
            self.taus, self.trunc, self.runmin = ctx.dco
        else:
            self.taus, self.trunc, self.runmin = None, self.lens, None
        self.truncated = self.trunc < self.lens
        self.cap = np.minimum(self.lens, self.trunc)
        self.gamma = ctx.gamma_for(method)
        self.rule = ctx.rule_for(method, self.gamma)
        self.rule.reset(*S.shape)
        self.q_matrix: np.ndarray | None = None
        if self.rule.needs_q:
            self.q_matrix = ctx.q_oracle if method.q == "oracle" else ctx.q_learned
        if self.rule.reads_future:
            self.rule.foresee(self)

    def snapshot(self, k: int, rows: np.ndarray) -> Snapshot:
        """The vote at checkpoint ``k`` of iterations ``rows``."""
        arr = self.arr
        v = self.ctx.vote(k, self.method, self.first_seen)  # shared by the methods voting alike
        if not np.array_equal(rows, np.arange(len(v.lead))):
            v = v.take(rows)
        running = self._running(k, rows)
        return Snapshot(
            k=k,
            position=int(arr.grid[k]),
            rows=rows,
            ids=v.ids,
            eligible=v.eligible,
            weights=v.weights,
            votes=v.votes,
            lead=v.lead,
            has_votes=v.has_votes,
            running=running,
            n_answers=arr.n_answers,
            q=None if self.q_matrix is None else self.q_matrix[self.samples[rows], k],
            pending=v.kept & running & (v.ids < 0),
            first_seen=self.first_seen,
        )

    def _running(self, k: int, rows: np.ndarray) -> np.ndarray:
        """Which sampled traces are still generating at checkpoint ``k`` [len(rows), B]."""
        return self.run_k[rows] > k

    def full_budget_vote(self, rows: np.ndarray, exclude: np.ndarray | None = None) -> np.ndarray:
        """The answer of iterations ``rows`` that run to the end: a vote over final answers."""
        arr, method, grid = self.arr, self.method, self.arr.grid
        S = self.samples[rows]
        ids = self.rule.votes_with(rows, arr.final_ids[S])
        e = ids >= 0
        if method.deepconf:
            assert self.runmin is not None and self.taus is not None
            e &= self.runmin[S, len(grid) - 1] >= self.taus[rows, None]
            e &= ~(self.truncated[rows] & (self.trunc[rows] <= grid[-1]))
        if exclude is not None:
            e &= ~exclude
        if method.conf_weights:
            assert arr.conf_at_pos is not None
            w = arr.conf_at_pos[S, len(grid) - 1]
        else:
            w = np.ones(S.shape)
        votes = tally(ids, w, e, arr.n_answers)
        return (leader(votes, ids, e) if self.first_seen else leader(votes))[0]

    def start(self) -> None:
        """Before the first :meth:`step`: no iteration has stopped."""
        I, m = len(self.samples), len(self.arr.grid)
        self.answer = np.full(I, -1, dtype=np.int64)
        self.stop_k = np.full(I, m, dtype=np.int64)  # m = ran to the full budget
        self.label = np.full(I, "budget", dtype=object)
        self.active = np.ones(I, dtype=bool)

    def step(self, k: int) -> np.ndarray:
        """Checkpoint ``k`` for the iterations still active: the rule decides, those it stops
        keep their answer, stop index and label. Returns the iterations stopped here."""
        rows = np.flatnonzero(self.active)
        if len(rows) == 0:
            return rows
        snap = self.snapshot(k, rows)
        stop = self.rule.check(snap)
        hit = rows[stop]
        if len(hit):
            self.answer[hit] = self.rule.answer(snap)[stop]
            self.stop_k[hit] = k
            why = self.rule.stop_label(rows)
            self.label[hit] = why[stop] if isinstance(why, np.ndarray) else why
            self.active[hit] = False
        return hit

    def run(self) -> MethodResult:
        """Every checkpoint in turn (:meth:`step`) until every iteration has stopped; a
        sample-more rule (:attr:`mars.method.stopping.Rule.draws`) decides over whole traces
        instead."""
        if self.rule.draws:
            return self._draw()
        if self.method.waves:
            return self._waves()
        self.start()
        for k in range(len(self.arr.grid)):
            if not self.active.any():
                break
            self.step(k)
        return self.finish()

    def finish(self) -> MethodResult:
        """The result: the iterations still active take the full-budget vote."""
        arr, rule = self.arr, self.rule
        grid = arr.grid
        m = len(grid)
        answer, stop_k, label = self.answer, self.stop_k, self.label
        rest = np.flatnonzero(self.active)
        if len(rest):
            answer[rest] = self.full_budget_vote(rest, exclude=rule.excluded(rest))

        # tokens: every sampled trace is charged up to the stop position (and truncation/pruning)
        until = rule.charged_until()
        if arr.step_cost is not None and rule.probes:  # read step by step (mars.method.protocol)
            through = np.broadcast_to(np.minimum(stop_k, m - 1)[:, None], self.samples.shape)
            if until is not None:
                through = np.minimum(through, np.searchsorted(grid, until, side="left"))
            spent = arr.step_cost[self.samples, np.minimum(through, m - 1)]
        else:
            charged = self.cap if until is None else np.minimum(self.cap, until)
            stop_pos = np.where(stop_k < m, grid[np.minimum(stop_k, m - 1)], np.iinfo(np.int64).max)
            spent = np.minimum(charged, stop_pos[:, None])
        tokens = spent.sum(axis=1)
        longest = spent.max(axis=1) if spent.shape[1] else np.zeros(len(spent), np.int64)
        position = grid[np.minimum(stop_k, m - 1)]
        correct = np.where(
            answer >= 0, arr.correct[np.maximum(answer, 0)] if arr.n_answers else False, False
        )
        return MethodResult(
            answer=answer,
            correct=correct.astype(bool),
            tokens=tokens.astype(np.int64),
            baseline=self.cap.sum(axis=1).astype(np.int64),
            position=position.astype(np.int64),
            stopped_by=label,
            probe_tokens=self._probe_tokens(stop_k, until),
            gamma=float(self.gamma),
            pruned_at=until,
            seq_tokens=longest.astype(np.int64),
            longest_tokens=longest.astype(np.int64),
        )

    def _waves(self) -> MethodResult:
        """Width-adaptive: the sample's traces run in waves of ``wave_size``, one wave after
        another. At every checkpoint of a wave the rule sees the earlier waves' final answers,
        the wave's current ones, and every trace not yet launched as pending (an answer still to
        be drawn); it stops everything when it fires, and a wave that ends without a stop
        launches the next. Sequential tokens are each wave's longest trace, summed. A trace
        costs what :meth:`finish` charges a trace stopped at the same checkpoint (its tokens up
        to there, or the protocol's step cost), and a wave that ended its full reading."""
        arr, rule, method = self.arr, self.rule, self.method
        if method.deepconf or method.conf_weights or rule.needs_q:
            raise SimulationError(f"method {method.name}: waves need a rule that reads no q")
        grid, m = arr.grid, len(arr.grid)
        S = self.samples
        I, B = S.shape
        launches = self.launches()
        self.start()
        spent = np.zeros((I, B), dtype=np.int64)
        seq = np.zeros(I, dtype=np.int64)
        final = arr.final_ids[S]
        if arr.step_cost is not None and rule.probes:  # read step by step (mars.method.protocol)
            step_cost = arr.step_cost

            def cost(rows: np.ndarray, lo: int, hi: int, k: int) -> np.ndarray:
                return step_cost[S[rows, lo:hi], min(k, m - 1)]
        else:

            def cost(rows: np.ndarray, lo: int, hi: int, k: int) -> np.ndarray:
                return (
                    self.cap[rows, lo:hi] if k >= m else np.minimum(self.cap[rows, lo:hi], grid[k])
                )

        for lo, hi in launches:
            ends = self.run_k[:, lo:hi].max(axis=1)  # the checkpoint where the wave has ended
            for k in range(m):
                rows = np.flatnonzero(self.active & (k <= ends))
                if len(rows) == 0:
                    break
                ids = np.full((len(rows), B), -1, dtype=np.int64)
                ids[:, :lo] = final[rows, :lo]
                ids[:, lo:hi] = arr.ids[S[rows, lo:hi], k]
                running = np.zeros((len(rows), B), dtype=bool)
                running[:, lo:hi] = self.run_k[rows, lo:hi] > k
                pending = np.zeros((len(rows), B), dtype=bool)
                pending[:, hi:] = True
                eligible = (ids >= 0) & ~pending
                pending[:, lo:hi] = running[:, lo:hi] & (ids[:, lo:hi] < 0)
                running |= pending
                weights = np.ones((len(rows), B))
                votes = tally(ids, weights, eligible, arr.n_answers)
                lead, has = leader(votes, ids, eligible) if self.first_seen else leader(votes)
                snap = Snapshot(
                    k=k,
                    position=int(grid[k]),
                    rows=rows,
                    ids=ids,
                    eligible=eligible,
                    weights=weights,
                    votes=votes,
                    lead=lead,
                    has_votes=has,
                    running=running,
                    n_answers=arr.n_answers,
                    pending=pending,
                    first_seen=self.first_seen,
                )
                stop = rule.check(snap)
                hit = rows[stop]
                if len(hit):
                    self.answer[hit] = rule.answer(snap)[stop]
                    self.stop_k[hit] = k
                    self.label[hit] = rule.label
                    self.active[hit] = False
                    part = cost(hit, lo, hi, k)
                    spent[hit, lo:hi] = part
                    seq[hit] += part.max(axis=1)
            rest = np.flatnonzero(self.active)
            part = cost(rest, lo, hi, m)  # the wave ran to its end
            spent[rest, lo:hi] = part
            seq[rest] += part.max(axis=1)
        result = self.finish()  # the rows still active take the full-budget vote of all traces
        result.tokens = spent.sum(axis=1).astype(np.int64)
        result.seq_tokens = seq
        result.longest_tokens = spent.max(axis=1).astype(np.int64)
        result.rounds = launches[0][1]
        return result

    def launches(self) -> list[tuple[int, int]]:
        """The waves of a width-adaptive run, as (first, last + 1) sample positions: waves of
        ``wave_size``, or the launch planned from the warmup (:mod:`mars.method.launch`)."""
        B = self.samples.shape[1]
        w = max(1, min(int(self.ctx.s.wave_size), B))
        if self.method.planned:
            alpha = getattr(self.rule, "alpha", launch.ALPHA_SC)  # the rule's own level
            warm_final = self.ctx.arr.final_ids[self.ctx.warm]
            return launch.plan(warm_final, self.arr.n_answers, w, B, alpha)
        return [(lo, min(B, lo + w)) for lo in range(0, B, w)]

    def _draw(self) -> MethodResult:
        """A sample-more rule: traces are drawn ``rule.draws`` at a time in sample order and run
        in full; the rule says how many are drawn and the answer. Sequential tokens are the
        longest trace of each round, summed over rounds."""
        arr, rule = self.arr, self.rule
        S = self.samples
        I, B = S.shape
        used, answer, early = rule.decide_draws(arr.final_ids[S], self.first_seen)
        drawn = np.arange(B)[None, :] < used[:, None]
        spent = np.where(drawn, self.cap, 0)
        w = max(1, min(int(rule.draws), B))  # a round larger than the budget is the budget
        rounds = -(-B // w)
        padded = np.zeros((I, rounds * w), dtype=np.int64)
        padded[:, :B] = spent
        seq = padded.reshape(I, rounds, w).max(axis=2).sum(axis=1)
        correct = np.where(
            answer >= 0, arr.correct[np.maximum(answer, 0)] if arr.n_answers else False, False
        )
        return MethodResult(
            answer=answer.astype(np.int64),
            correct=correct.astype(bool),
            tokens=spent.sum(axis=1).astype(np.int64),
            baseline=self.cap.sum(axis=1).astype(np.int64),
            position=np.full(I, arr.grid[-1], dtype=np.int64),  # drawn traces run to the end
            stopped_by=np.where(early, rule.label, "budget").astype(object),
            probe_tokens=np.zeros(I, dtype=np.float64),
            gamma=float(self.gamma),
            seq_tokens=seq.astype(np.int64),
            longest_tokens=spent.max(axis=1).astype(np.int64),
            rounds=w,
        )

    def _probe_tokens(self, stop_k: np.ndarray, until: np.ndarray | None) -> np.ndarray:
        """Probe cost per iteration: every running sampled trace is probed up to the decision (a
        trace the rule stopped charging, e.g. pruned, up to there); NaN where the pool does not
        record the cost."""
        arr, m = self.arr, len(self.arr.grid)
        out = np.zeros(len(self.samples), dtype=np.float64)
        if not self.rule.probes:
            return out
        if arr.probe_tokens is None:
            out[:] = np.nan
            return out
        # from per-trace running sums, shared by the methods: each sampled trace's up to the
        # stop, or up to where the rule stopped charging it (its checkpoint there included)
        spent, unknown_at = self.ctx.probe_sums()
        at = np.broadcast_to(np.minimum(stop_k, m - 1)[:, None], self.samples.shape)
        if until is not None:
            probed_until = np.minimum(self.run_lens, np.minimum(until, self.run_lens) + 1)
            at = np.minimum(at, np.searchsorted(arr.grid, probed_until, side="left") - 1)
        some = at >= 0  # probed at some checkpoint
        at = np.maximum(at, 0)
        out = np.where(some, spent[self.samples, at], 0).sum(axis=1).astype(np.float64)
        out[(some & unknown_at[self.samples, at]).any(axis=1)] = np.nan
        return out


def run_method(ctx: QuestionContext, method: Method) -> MethodResult:
    return MethodRun(ctx, method).run()


def simulate_question(
    arr: QuestionArrays,
    methods: list[Method],
    settings: Settings,
    fitted: QuestionFit | None = None,
) -> QuestionResult:
    res = QuestionResult(
        qid=arr.qid,
        ground_truth=arr.ground_truth,
        representatives=arr.representatives,
        content_hash=arr.content_hash,
        answer_fallbacks=arr.answer_fallbacks,
    )
    if len(arr.pool_ids()) == 0:
        raise SimulationError(f"question {arr.qid}: no trace has a final answer; nothing to sample")
    ctx = QuestionContext(arr, settings, fitted=fitted)
    for method in methods:
        res.methods[method.name] = run_method(ctx, method)
    return res


def size_notes(
    pool: Pool, methods: list[Method], settings: Settings, qids: list[int] | None
) -> list[str]:
    """Refuse sizes that cannot mean anything on this pool's questions; notes on legal sizes
    that surprise (:func:`mars.method.settings.check_sizes`). Reads file metadata only."""
    counts = pool.trace_counts(pool.qids if qids is None else qids)
    return check_sizes(settings, counts, methods, pool.source)


def pool_settings(pool: Pool, settings: Settings) -> Settings:
    """``settings`` with the pool's checkpoint spacing filled in (an explicit one must agree)."""
    spacing = resolve_spacing(settings.spacing, pool.recorded_spacing, pool.source)
    return settings.replace(spacing=spacing)


def _check_confs(methods: list[Method], arr: QuestionArrays, source: str) -> None:
    for method in methods:
        if method.needs_confs and not arr.has_confs:
            raise SimulationError(
                f"{source}: method {method.name} needs per-token confidences, "
                f"but question {arr.qid} has none"
            )


def supported_methods(spec: str, pool: Pool, qids: list[int] | None):
    """The methods of ``spec`` this pool can run and those a group (``all``) left out: a pool
    without per-token confidences (its first question asked for tells) runs no DeepConf method.
    """
    from .method.registry import parse_methods, select_methods

    if not any(m.needs_confs for m in parse_methods(spec)):
        return select_methods(spec, has_confs=True)
    return select_methods(spec, has_confs=pool.has_confs((qids or pool.qids)[0]))


_POOLS: dict[str, Pool] = {}
_FITS: dict[str, Any] = {}


def _worker_pool(path: str) -> Pool:
    if path not in _POOLS:
        _POOLS[path] = open_pool(path)
    return _POOLS[path]


def _worker_fit(path: str):
    """The fit directory at ``path``, read once per process while its files stay the same (a
    directory fitted again is read again)."""
    from .fit import FitDir
    from .store import schema

    stamp: list[tuple[int, int, int] | None] = []
    for name in (schema.FIT_MANIFEST, schema.FIT_MODELS):
        try:
            st = os.stat(Path(path) / name)
            stamp.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            stamp.append(None)  # FitDir says what is missing
    cached = _FITS.get(path)
    if cached is None or cached[0] != stamp:
        _FITS[path] = cached = (stamp, FitDir(path))
    return cached[1]


def _worker(args) -> QuestionResult:
    pool_path, qid, methods, settings, cache_dir, fit_dir = args
    pool = _worker_pool(pool_path)
    q = pool.read_question(qid)
    fitted = None
    if settings.protocol == protocol.PARALLEL_PROBE:
        arr = protocol.question_arrays(q, settings.spacing)
    elif fit_dir is not None:
        fit = _worker_fit(fit_dir)
        arr = fit.arrays(q, settings)
        fitted = fit.question(q, arr, settings.warmup)
    else:
        arr = load_arrays(q, cache_dir, spacing=settings.spacing, window=settings.window)
    _check_confs(methods, arr, pool.source)
    del q  # the per-token confidences: not needed by the methods
    return simulate_question(arr, methods, settings, fitted)


def check_protocol_inputs(settings: Settings, fit_dir=None, cache_dir=None) -> None:
    """Arrays and switch models of the fit stage or the cache are the bootstrap protocol's; another
    protocol builds its own (:mod:`mars.method.protocol`)."""
    if settings.protocol != protocol.BOOTSTRAP and (fit_dir is not None or cache_dir is not None):
        raise SimulationError(
            f"--protocol {settings.protocol} reads the traces its own way (exact answers, step "
            "costs): it takes neither --fit nor --cache, whose arrays are the bootstrap protocol's"
        )


def simulate_pool(
    pool_path,
    methods: list[Method],
    settings: Settings,
    questions: list[int] | None = None,
    workers: int = 1,
    cache_dir=None,
    progress: Progress | None = None,
    fit_dir: str | Path | None = None,
) -> list[QuestionResult]:
    """Simulate every requested question of a pool; results sorted by qid, whatever ``workers``.

    ``fit_dir`` (from ``mars fit``) supplies the per-question arrays and the fitted switch models
    (nothing is refitted; the results are identical to fitting here); ``cache_dir`` caches arrays
    only. ``progress(done, total)``: questions simulated (:mod:`mars.progress`).
    """
    settings.validate()
    check_protocol_inputs(settings, fit_dir, cache_dir)
    pool = _worker_pool(str(pool_path))
    settings = pool_settings(pool, settings)
    qids = pool.qids if questions is None else questions
    known = set(pool.qids)
    missing = [q for q in qids if q not in known]
    if missing:
        raise PoolError(
            f"{pool.source}: no question {missing[0]} (questions: {', '.join(map(str, pool.qids))})"
        )
    unknown = [q for q in qids if q in getattr(pool, "unknown_answers", ())]
    if unknown:
        raise SimulationError(
            f"{pool.source}: question {unknown[0]} has no known answer (null ground_truth), and "
            "accuracy is scored against it; leave it out with --questions"
        )
    size_notes(pool, methods, settings, qids)
    if fit_dir is not None:
        _worker_fit(str(fit_dir)).check(pool, settings, qids)
    jobs = [
        (
            str(pool_path),
            q,
            methods,
            settings,
            None if cache_dir is None else str(cache_dir),
            None if fit_dir is None else str(fit_dir),
        )
        for q in qids
    ]
    results = []
    tick = counter(len(jobs), progress)
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            results.append(_worker(job))
            tick()
    else:
        work = pool.work_estimate(qids)
        if fit_dir is None and any(m.q == "learned" for m in methods):
            preload_fit()  # the workers fork with it
        if fit_dir is None and pool.has_confs(qids[0]):
            from .method.confstats import warm_up  # numba: imported where it runs

            warm_up()  # compiled (or loaded from its cache) once, before the workers fork
        with process_pool(min(workers, len(jobs), os.cpu_count() or 1)) as ex:
            sizes = [work.get(q, 0) for q in qids]
            results = map_largest_first(ex, _worker, jobs, sizes, tick)
    return sorted(results, key=lambda r: r.qid)
