"""The walk: one method on one question's samples, checkpoint by checkpoint.

:class:`QuestionContext` is the question's state that every method of it shares: its arrays, the
sampled traces [iterations, budget] and the warmup traces (both given: the protocol's,
:func:`mars.method.protocol.samples`, or a live run's one iteration), the switch probabilities,
each filter's state, the votes at each checkpoint and the calibrated γ.

:class:`MethodRun` is the walk of one method over those samples, vectorised over iterations ×
traces: :meth:`~MethodRun.start`, then one :meth:`~MethodRun.step` per checkpoint — the vote
(:meth:`~MethodRun.snapshot`) goes to the rule, which stops some iterations (their answer, stop
checkpoint and label kept) and may stop single traces (:meth:`~MethodRun.stopped_traces`) — and
:meth:`~MethodRun.finish`: the iterations still going take the full-budget vote
(:meth:`~MethodRun.full_budget_vote`), and every trace is charged its tokens. :meth:`~MethodRun.run`
does it all, over each launch of the method's launch policy (:mod:`mars.method.launch`). The
simulator (:mod:`mars.simulate`), the live stopper (:class:`mars.Stopper`), the replay of a live
run and the report's trajectories all take these same steps.

How a method votes and filters are its parts (:class:`mars.method.voting.Voting`,
:class:`mars.method.deepconf.Filter`); the walk has no per-method branch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..errors import SimulationError
from . import protocol
from .arrays import QuestionArrays, digest_arrays
from .calibration import calibrate_gamma
from .deepconf import Filter
from .features import switch_labels
from .learned import Calibration
from .qmodel import QuestionFit, fit_question, predict_question
from .registry import Method
from .settings import Settings
from .stopping import Rule, Snapshot
from .voting import leader, tally


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
    #: [I, B] where the rule stopped charging a trace (pruned, exited)
    pruned_at: np.ndarray | None = None
    #: the latency axis: tokens a user waits for (the longest trace at the stop; for sample-more
    #: methods the longest trace of each round, summed over rounds) and the longest started trace
    seq_tokens: np.ndarray | None = None
    longest_tokens: np.ndarray | None = None
    #: traces launched first by a staged launch or drawn per round by a sample-more method (0:
    #: every trace starts at once)
    rounds: int = 0
    #: tokens of the question's warmup traces a live run of the method generates first, per run
    #: (0: the method reads no warmup, :attr:`mars.method.registry.Method.pays_warmup`)
    warmup_tokens: int = 0

    @property
    def paid_tokens(self) -> np.ndarray:
        """What a live run pays per iteration: the main traces, the warmup it generates, and
        its probes where the pool records their cost (float)."""
        probes = np.nan_to_num(self.probe_tokens, nan=0.0)
        return self.tokens + self.warmup_tokens + probes


@dataclass
class Vote:
    """The vote of every iteration at one checkpoint, as one way of voting sees it (voting,
    filter, traces per sample, tie rule): arrays [I, B] and ``votes`` [I, n_answers]. Computed
    once per checkpoint for every method that votes this way (:meth:`QuestionContext.vote`);
    read-only, since methods share it."""

    ids: np.ndarray
    kept: np.ndarray  # passes the method's filter
    eligible: np.ndarray
    weights: np.ndarray
    votes: np.ndarray
    lead: np.ndarray
    has_votes: np.ndarray

    def take(self, rows: np.ndarray) -> Vote:
        """The vote of iterations ``rows`` (each row's tally and leader are its own)."""
        return Vote(*(getattr(self, f.name)[rows] for f in fields(self)))


class QuestionContext:
    """What every method of one question shares: samples, warmup, q, filter state, votes, γ.

    ``samples`` [iterations, budget] are the sampled trace indices and ``warm`` the warmup traces
    (:meth:`sample` takes the settings' protocol's; a live run's replay passes its own: one
    iteration, the traces it ran, and the warmup traces it ran first). ``fitted`` is the switch
    model of the fit stage (its warmup traces must be this context's); without it the model is
    fitted here, unless ``q_learned`` [n, m] gives the learned switch probabilities themselves (a
    live stopper fills them in column by column). ``memo`` (a dict kept by the caller) reuses
    fitted q-models and calibrated γ across contexts whose warmup inputs are byte-identical, as at
    every checkpoint of a live run.
    """

    def __init__(
        self,
        arr: QuestionArrays,
        settings: Settings,
        samples: np.ndarray,
        warm: np.ndarray,
        memo: dict | None = None,
        fitted: QuestionFit | None = None,
        q_learned: np.ndarray | None = None,
        calibration: Calibration | None = None,
    ):
        self.arr = arr
        #: learned once across questions (:mod:`mars.method.learned`): MARS2 reads it instead of
        #: a warmup
        self.calibration = calibration
        self.s = settings
        self.memo = memo
        self.samples = np.asarray(samples, dtype=np.int64)
        self.warm = np.asarray(warm, dtype=np.int64)
        if fitted is not None and not np.array_equal(fitted.warm, self.warm):
            raise SimulationError(
                f"question {arr.qid}: the fitted switch model was trained on warmup traces "
                f"{fitted.warm.tolist()[:4]}…, this simulation's warmup is "
                f"{self.warm.tolist()[:4]}… (refit with the same --warmup)"
            )
        self.fitted = fitted
        self._shared: dict[Any, Any] = {}  # computed state that depends on samples/warmup only
        if q_learned is not None:
            self._shared["q_learned"] = q_learned
        #: the warmup traces' tokens, run to their end (what a live run generates first)
        self.warm_tokens = int(arr.lengths[self.warm].sum())
        if len(self.warm):
            self.warm_ref = int(np.argmax(np.bincount(arr.final_ids[self.warm])))
        else:
            self.warm_ref = -1
        #: the protocol's tie rule (:func:`mars.method.protocol.first_seen`)
        self.first_seen = protocol.first_seen(settings)

    @classmethod
    def sample(
        cls,
        arr: QuestionArrays,
        settings: Settings,
        memo: dict | None = None,
        fitted: QuestionFit | None = None,
        calibration: Calibration | None = None,
    ) -> QuestionContext:
        """The question as the settings' protocol samples it (:func:`mars.method.protocol.samples`
        and :func:`~mars.method.protocol.warmup`)."""
        return cls(
            arr, settings, protocol.samples(arr, settings), protocol.warmup(arr, settings), memo,
            fitted, calibration=calibration,
        )  # fmt: skip

    def with_settings(self, settings: Settings) -> QuestionContext:
        """A context for other settings of the same question.

        When only stopping knobs change (γ, δ, u, share, …: ``settings.sampling_key()`` equal),
        the new context shares this one's samples, warmup, switch model, learned and oracle q and
        filter state (computed once, by whichever context needs them first), exactly what a fresh
        simulation would rebuild; otherwise it starts afresh from the protocol.
        """
        if settings.sampling_key() != self.s.sampling_key():
            return QuestionContext.sample(
                self.arr, settings, memo=self.memo, calibration=self.calibration
            )
        other = QuestionContext(
            self.arr,
            settings,
            self.samples,
            self.warm,
            memo=self.memo,
            fitted=self.fitted,
            calibration=self.calibration,
        )
        other._shared = self._shared
        return other

    def _cached(self, name: Any, compute: Callable[[], Any]) -> Any:
        if name not in self._shared:
            self._shared[name] = compute()
        return self._shared[name]

    @property
    def q_learned(self) -> np.ndarray:
        """Learned switch probabilities [n, m]; shared by reorderings of the same arrays."""
        return self._cached("q_learned", self._learned_q)

    def _learned_q(self) -> np.ndarray:
        arr = self.arr
        cal = self.calibration
        if cal is not None and not len(self.warm):  # learned once (mars.method.learned)
            cal_key = ("q_calibrated", cal.digest)
            if cal_key not in arr.derived:
                arr.derived[cal_key] = predict_question(cal.switch_model(), arr)
            return arr.derived[cal_key]
        key = ("q_learned", self.warm.tobytes())
        if key in arr.derived:  # ids only break ties: reordered arrays share the model's output
            return arr.derived[key]
        fit = self.fitted if self.fitted is not None else fit_question(arr, self.warm, self.memo)
        arr.derived[key] = q = predict_question(fit.model, arr)
        return q

    @property
    def q_oracle(self) -> np.ndarray:
        return self._cached("q_oracle", lambda: switch_labels(self.arr))

    def filter_state(self, f: Filter) -> Any:
        """What filter ``f`` computes of these samples (:meth:`Filter.prepare`), once."""
        return self._cached(("filter", f), lambda: f.prepare(self.arr, self.samples, self.s.warmup))

    def vote(self, k: int, method: Method) -> Vote:
        """Checkpoint ``k`` of every iteration as ``method`` votes there, computed once for all
        the methods that vote alike (same voting, filter and width): a row's tally and leader do
        not depend on the other rows, so each method takes its active rows of the same arrays and
        gets what it would have computed alone."""
        key = ("vote", k, method.filter, method.voting, method.width)
        if key in self._shared:
            return self._shared[key]
        arr = self.arr
        S = self.samples if method.width is None else self.samples[:, : method.width]
        ids = arr.ids[S, k]
        kept = method.filter.kept(self.filter_state(method.filter), arr, S, None, k)
        e = kept & (ids >= 0)
        w = method.voting.weights(arr, S, k)
        votes = tally(ids, w, e, arr.n_answers)
        lead, has = leader(votes, ids, e) if self.first_seen else leader(votes)
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
        """The γ ``method``'s rule gets (:attr:`mars.method.registry.Stopping.gamma`): calibrated
        on the warmup traces as the method votes (its voting and filter) with oracle q."""
        s = self.s
        if method.rule.gamma == "one":
            return 1.0
        if method.rule.gamma != "calibrated":
            return s.gamma
        arr, warm = self.arr, self.warm
        cal = self.calibration
        if cal is not None and not len(warm):  # learned once (mars.method.learned)
            return 1.0 if cal.gamma is None else cal.gamma
        ids = arr.ids[warm]
        eligible = (ids >= 0) & method.filter.warm_kept(arr, warm)
        weights = method.voting.weights(arr, warm)
        args = (ids, arr.final_ids[warm], weights, eligible, self.q_oracle[warm])
        key = ("gamma", method.filter, arr.n_answers, s.ucb_z, s.gamma_min, digest_arrays(*args))
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
    """One method on one question's samples, checkpoint by checkpoint (see the module docstring).

    Holds what the method sees of every sampled trace (its filter's state, truncation, q) and
    its stopping rule. A walk by hand: :meth:`start`, :meth:`launch` (the first launch is every
    trace), :meth:`step` at each checkpoint while :meth:`deciding` has rows, :meth:`land` at the
    end of a launch, then :meth:`finish`; :meth:`run` does exactly that.
    """

    def __init__(self, ctx: QuestionContext, method: Method):
        arr = ctx.arr
        if method.needs_confs and not arr.has_confs:
            raise SimulationError(
                f"method {method.name} needs per-token confidences; question {arr.qid} has none"
            )
        if method.width is not None and not method.filter.keeps_all:
            raise SimulationError(f"method {method.name}: DeepConf runs every trace of a sample")
        self.ctx = self.question = ctx
        self.method, self.arr = method, arr
        S = self.samples = ctx.samples if method.width is None else ctx.samples[:, : method.width]
        self.lens = arr.lengths[S]
        self.run_lens = arr.run_lengths[S]
        self.run_k = arr.run_checkpoints[S]
        self.first_seen = ctx.first_seen
        self.filter_state = ctx.filter_state(method.filter)
        #: where each sampled trace stops generating (its filter's truncation) and what it costs
        self.trunc = method.filter.truncation(self.filter_state, self.lens)
        self.cap = np.minimum(self.lens, self.trunc)
        self.gamma = ctx.gamma_for(method)
        self.rule = ctx.rule_for(method, self.gamma)
        method.launch.check(method.name, self.rule, method.voting, method.filter)
        self.rule.reset(*S.shape)
        self.q_matrix: np.ndarray | None = None
        if self.rule.needs_q:
            self.q_matrix = ctx.q_oracle if method.q == "oracle" else ctx.q_learned
        self.window = (0, S.shape[1])  # the traces launched last (every one before run())
        self.overlaps = method.launch.overlaps
        if self.rule.reads_future:
            self.rule.foresee(self)

    # -- the vote ---------------------------------------------------------------------------

    def snapshot(self, k: int, rows: np.ndarray, running: np.ndarray | None = None) -> Snapshot:
        """The vote at checkpoint ``k`` of iterations ``rows``, within the current launch.

        ``running`` [len(rows), B]: which sampled traces still generate at ``k`` (default: as
        the arrays say; a live stopper passes what it was told)."""
        lo, hi = self.window
        if running is None:
            running = self.run_k[rows] > k
        if (lo, hi) != (0, self.samples.shape[1]):
            return self._staged_snapshot(k, rows, running)
        v = self.ctx.vote(k, self.method)  # shared by the methods voting alike
        if not np.array_equal(rows, np.arange(len(v.lead))):
            v = v.take(rows)
        return Snapshot(
            k=k,
            position=int(self.arr.grid[k]),
            rows=rows,
            ids=v.ids,
            eligible=v.eligible,
            weights=v.weights,
            votes=v.votes,
            lead=v.lead,
            has_votes=v.has_votes,
            running=running,
            n_answers=self.arr.n_answers,
            q=None if self.q_matrix is None else self.q_matrix[self.samples[rows], k],
            pending=v.kept & running & (v.ids < 0),
            first_seen=self.first_seen,
        )

    def _staged_snapshot(self, k: int, rows: np.ndarray, running_now: np.ndarray) -> Snapshot:
        """Checkpoint ``k`` of launch [lo, hi): the traces launched before have ended with their
        final answers, the launch's hold their answers at ``k``, the traces not yet launched are
        pending (uniform votes, no filter, no q: :meth:`mars.method.launch.Waves.check`)."""
        arr, S = self.arr, self.samples
        lo, hi = self.window
        B = S.shape[1]
        ids = np.full((len(rows), B), -1, dtype=np.int64)
        ids[:, :lo] = arr.final_ids[S[rows, :lo]]
        ids[:, lo:hi] = arr.ids[S[rows, lo:hi], k]
        running = np.zeros((len(rows), B), dtype=bool)
        running[:, lo:hi] = running_now[:, lo:hi]
        pending = np.zeros((len(rows), B), dtype=bool)
        pending[:, hi:] = True
        eligible = (ids >= 0) & ~pending
        pending[:, lo:hi] = running[:, lo:hi] & (ids[:, lo:hi] < 0)
        running |= pending
        weights = np.ones((len(rows), B))
        votes = tally(ids, weights, eligible, arr.n_answers)
        lead, has = leader(votes, ids, eligible) if self.first_seen else leader(votes)
        return Snapshot(
            k=k,
            position=int(arr.grid[k]),
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

    def full_budget_vote(self, rows: np.ndarray, exclude: np.ndarray | None = None) -> np.ndarray:
        """The answer of iterations ``rows`` that run to the end: a vote over final answers (as
        the rule has them vote, :meth:`mars.method.stopping.Rule.votes_with`), the traces
        ``exclude`` [len(rows), B] left out."""
        arr, method, m = self.arr, self.method, len(self.arr.grid)
        S = self.samples[rows]
        ids = self.rule.votes_with(rows, arr.final_ids[S])
        e = (ids >= 0) & method.filter.kept(self.filter_state, arr, S, rows, m - 1)
        if exclude is not None:
            e &= ~exclude
        w = method.voting.weights(arr, S, m - 1)
        votes = tally(ids, w, e, arr.n_answers)
        return (leader(votes, ids, e) if self.first_seen else leader(votes))[0]

    # -- the steps --------------------------------------------------------------------------

    def launches(self) -> list[tuple[int, int]]:
        """The method's launches (:meth:`mars.method.launch.Launch.launches`)."""
        return self.method.launch.launches(self)

    def start(self) -> None:
        """Before the first :meth:`step`: no iteration has stopped, nothing is charged."""
        I, B = self.samples.shape
        m = len(self.arr.grid)
        self.answer = np.full(I, -1, dtype=np.int64)
        self.stop_k = np.full(I, m, dtype=np.int64)  # m = ran to the full budget
        self.label = np.full(I, "budget", dtype=object)
        self.active = np.ones(I, dtype=bool)
        self.staged = self.method.launch.staged
        self.spent = np.zeros((I, B), dtype=np.int64)  # what staged launches have charged
        self.seq = np.zeros(I, dtype=np.int64)
        self.window = (0, B)
        self.ends: np.ndarray | None = None
        self.overlaps = self.method.launch.overlaps
        if self.overlaps:  # one clock t for every launch (:meth:`_early_step`)
            #: the traces of the first launch; the checkpoint of it after which the rest
            #: launched (-1: not yet); rows whose launched traces have all ended, looked at
            self.first_hi = self.launches()[0][1]
            self.second_at = np.full(I, -1, dtype=np.int64)
            self.closed = np.zeros(I, dtype=bool)

    def launch(self, lo: int, hi: int, ends: np.ndarray | None = None) -> None:
        """Launch the traces at sample positions [lo, hi): the next steps decide over them. A
        staged launch ends where its traces have all ended (:meth:`deciding`): ``ends`` per
        iteration, by default from the arrays (a live stopper, which learns it as the traces
        run, passes the grid's length and says when with :meth:`land`)."""
        self.window = (lo, hi)
        if ends is not None:
            self.ends = np.asarray(ends, dtype=np.int64)
        else:
            self.ends = self.run_k[:, lo:hi].max(axis=1) if self.staged else None

    def deciding(self, k: int) -> np.ndarray:
        """The iterations the rule decides at checkpoint ``k``: those still active (within a
        staged launch, those whose launch still runs there)."""
        if self.overlaps:
            return np.flatnonzero(self.active & ~self.closed)
        if self.ends is None:
            return np.flatnonzero(self.active)
        return np.flatnonzero(self.active & (k <= self.ends))

    def step(self, k: int, running: np.ndarray | None = None) -> np.ndarray:
        """Checkpoint ``k`` for the iterations deciding there: the rule decides, those it stops
        keep their answer, stop index and label. Returns the iterations stopped here.
        ``running``: as in :meth:`snapshot`."""
        if self.overlaps:
            return self._early_step(k, running)
        rows = self.deciding(k)
        if len(rows) == 0:
            return rows
        snap = self.snapshot(k, rows, running)
        hit, _ = self._decide(snap, rows, k)
        if len(hit) and self.staged:
            self._charge(hit, k)
        return hit

    def _decide(self, snap: Snapshot, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The rule at checkpoint ``k`` for ``rows``: the rows it stops (and its decision per row),
        their answer, checkpoint and label recorded and their walk ended."""
        stop = self.rule.check(snap)
        hit = rows[stop]
        if len(hit):
            self.answer[hit] = self.rule.answer(snap)[stop]
            self.stop_k[hit] = k
            why = self.rule.stop_label(rows)
            self.label[hit] = why[stop] if isinstance(why, np.ndarray) else why
            self.active[hit] = False
        return hit, stop

    # -- launches that overlap (mars.method.launch.Early) ---------------------------------------

    def clock(self, t: int) -> int:
        """The position, in tokens since the first launch started, of checkpoint ``t`` of the one
        clock of overlapping launches (past the grid: on at the grid's last spacing)."""
        grid, m = self.arr.grid, len(self.arr.grid)
        if t < m:
            return int(grid[t])
        step = int(grid[-1] - grid[-2]) if m > 1 else int(grid[0])
        return int(grid[-1]) + (t - m + 1) * step

    def position(self, t: int, row: int) -> int:
        """Where in its traces iteration ``row`` is when the clock reads ``t``: the position of
        the checkpoint the traces launched last are at (as a staged launch's stop is placed in
        its launch)."""
        grid, m = self.arr.grid, len(self.arr.grid)
        s = int(self.second_at[row])
        k = t - s - 1 if 0 <= s < t else t
        return int(grid[min(k, m - 1)])

    def local(self, t: int, rows: np.ndarray) -> np.ndarray:
        """int [len(rows), B]: the checkpoint of its own grid each sampled trace is at when the
        clock reads ``t`` (-1: not launched). The first launch starts with the clock; the rest,
        launched after checkpoint s, reach their checkpoint 0 at s + 1 (on a grid of equal
        spacings, the same position in tokens)."""
        B, w = self.samples.shape[1], self.first_hi
        loc = np.full((len(rows), B), t, dtype=np.int64)
        s = self.second_at[rows]
        loc[:, w:] = np.where((s >= 0) & (s < t), t - s - 1, -1)[:, None]
        return loc

    def _early_snapshot(
        self, t: int, rows: np.ndarray, running_now: np.ndarray | None
    ) -> tuple[Snapshot, np.ndarray]:
        """Checkpoint ``t`` of the clock: each launched trace holds its answer at its own
        checkpoint (its final one past its grid), the traces not launched are pending (uniform
        votes, no filter, no q). Returns the snapshot and which traces run."""
        arr, m = self.arr, len(self.arr.grid)
        S = self.samples[rows]
        loc = self.local(t, rows)
        on = loc >= 0
        inside = on & (loc < m)
        k = np.clip(loc, 0, m - 1)
        ids = np.where(inside, arr.ids[S, k], np.where(on, arr.final_ids[S], -1)).astype(np.int64)
        if running_now is None:
            running = inside & (self.run_k[rows] > loc)
        else:
            running = np.asarray(running_now, dtype=bool) & on
        pending = ~on
        eligible = (ids >= 0) & ~pending
        pending = pending | (running & (ids < 0))
        weights = np.ones(ids.shape)
        votes = tally(ids, weights, eligible, arr.n_answers)
        lead, has = leader(votes, ids, eligible) if self.first_seen else leader(votes)
        snap = Snapshot(
            k=t,
            position=self.clock(t),
            rows=rows,
            ids=ids,
            eligible=eligible,
            weights=weights,
            votes=votes,
            lead=lead,
            has_votes=has,
            running=running | pending,
            n_answers=arr.n_answers,
            pending=pending,
            first_seen=self.first_seen,
        )
        return snap, running

    def _early_step(self, t: int, running: np.ndarray | None) -> np.ndarray:
        """Checkpoint ``t`` of the clock of overlapping launches: the rule decides over every
        launched trace; of the rows going on, those whose launched traces have all ended (none
        left to launch) close, and the first launch's policy says where the rest launch now
        (:meth:`mars.method.launch.Early.launch_now`; at the latest once the first launch has
        ended)."""
        rows = self.deciding(t)
        if len(rows) == 0:
            return rows
        snap, run = self._early_snapshot(t, rows, running)
        hit, stop = self._decide(snap, rows, t)
        B, w = self.samples.shape[1], self.first_hi
        waiting = (self.second_at[rows] < 0) & (w < B)  # the rest not launched yet
        idle = ~run.any(axis=1)
        self.closed[rows[~stop & ~waiting & idle]] = True
        due = ~stop & waiting
        if due.any():
            now = ~run[:, :w].any(axis=1) | self.method.launch.launch_now(self.rule, snap, w)
            self.second_at[rows[due & now]] = t
        return hit

    def _early_spent(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What overlapping launches charge: each trace its tokens up to its own checkpoint at
        the stop (the whole trace where the row ran to its end; nothing where never launched),
        what the user waits for (the later of the launches' ends, on the clock) and each
        trace's own checkpoint there ([I, B]; -1: never launched)."""
        arr, m, rule = self.arr, len(self.arr.grid), self.rule
        I, B = self.samples.shape
        end = 2 * m + 2  # past every grid: ran to its end
        loc = np.empty((I, B), dtype=np.int64)
        for i in range(I):
            t = end if self.active[i] else int(self.stop_k[i])
            loc[i] = self.local(t, np.array([i]))[0]
        on = loc >= 0
        k = np.clip(loc, 0, m - 1)
        if arr.step_cost is not None and rule.probes:  # read step by step (protocol)
            part = arr.step_cost[self.samples, k]
        else:
            part = np.where(loc >= m, self.cap, np.minimum(self.cap, arr.grid[k]))
        spent = np.where(on, part, 0).astype(np.int64)
        w = self.first_hi
        seq = spent[:, :w].max(axis=1) if w else np.zeros(I, np.int64)
        if w < B:
            start = np.array([self.clock(int(s)) if s >= 0 else 0 for s in self.second_at])
            rest = spent[:, w:].max(axis=1)
            seq = np.maximum(seq, np.where(rest > 0, start + rest, 0))
        return spent, seq.astype(np.int64), loc

    def _early_probe_tokens(self, loc: np.ndarray) -> np.ndarray:
        """Probe cost per iteration of overlapping launches: every launched trace probed up to
        its own checkpoint at the stop (NaN where the pool does not record the cost)."""
        arr, m = self.arr, len(self.arr.grid)
        out = self._probe_cost_base()
        if not self.rule.probes or arr.probe_tokens is None:
            return out
        spent, unknown_at = self.ctx.probe_sums()
        some = loc >= 0
        at = np.clip(loc, 0, m - 1)
        out = np.where(some, spent[self.samples, at], 0).sum(axis=1).astype(np.float64)
        out[(some & unknown_at[self.samples, at]).any(axis=1)] = np.nan
        return out

    def stopped_traces(self, k: int) -> np.ndarray:
        """bool [I, B]: the sampled traces the rule stopped at checkpoint ``k`` while their
        iteration goes on (pruned, exited: :meth:`mars.method.stopping.Rule.charged_until`)."""
        until = self.rule.charged_until()
        if until is None:
            return np.zeros(self.samples.shape, dtype=bool)
        return until == self.arr.grid[k]

    def land(self) -> None:
        """The current launch has run to its end: a staged launch charges its full reading to
        the iterations still active (they launch the next)."""
        if self.staged:
            self._charge(np.flatnonzero(self.active), len(self.arr.grid))

    def _charge(self, rows: np.ndarray, k: int) -> None:
        """A staged launch stopped at checkpoint ``k`` (``k`` = m: ran to its end) charges its
        traces what :meth:`finish` charges a trace stopped there, and its longest trace to what
        the user waits for."""
        arr, (lo, hi), m = self.arr, self.window, len(self.arr.grid)
        if arr.step_cost is not None and self.rule.probes:  # read step by step (protocol)
            part = arr.step_cost[self.samples[rows, lo:hi], min(k, m - 1)]
        elif k >= m:
            part = self.cap[rows, lo:hi]
        else:
            part = np.minimum(self.cap[rows, lo:hi], arr.grid[k])
        self.spent[rows, lo:hi] = part
        self.seq[rows] += part.max(axis=1)

    def run(self) -> MethodResult:
        """Every launch in turn, every checkpoint of it (:meth:`step`) until no iteration decides
        there; then :meth:`finish`. A sample-more rule (:attr:`mars.method.stopping.Rule.draws`)
        decides over whole traces instead."""
        if self.rule.draws:
            return self._draw()
        m = len(self.arr.grid)
        if self.method.launch.overlaps:
            self.start()
            t = 0
            while len(self.deciding(t)):
                if t > 2 * m + 1:  # every launch has ended by then
                    raise SimulationError(f"method {self.method.name}: launches never ended")
                self.step(t)
                t += 1
            result = self.finish()
            result.rounds = self.first_hi
            return result
        launches = self.launches()
        self.start()
        for lo, hi in launches:
            self.launch(lo, hi)
            for k in range(m):
                if len(self.deciding(k)) == 0:
                    break
                self.step(k)
            self.land()
        result = self.finish()
        if self.staged:
            result.rounds = launches[0][1]
        return result

    def finish(self) -> MethodResult:
        """The result: the iterations still active take the full-budget vote; every sampled trace
        is charged up to its iteration's stop (and its truncation, or where the rule stopped
        charging it), or what its staged launches charged."""
        arr, rule = self.arr, self.rule
        grid = arr.grid
        m = len(grid)
        answer, stop_k, label = self.answer, self.stop_k, self.label
        rest = np.flatnonzero(self.active)
        if len(rest):
            answer[rest] = self.full_budget_vote(rest, exclude=rule.excluded(rest))

        until = rule.charged_until()
        early = None
        if self.overlaps:
            spent, seq, loc = early = self._early_spent()
        elif self.staged:
            spent = self.spent
        elif arr.step_cost is not None and rule.probes:  # read step by step (protocol)
            through = np.broadcast_to(np.minimum(stop_k, m - 1)[:, None], self.samples.shape)
            if until is not None:
                through = np.minimum(through, np.searchsorted(grid, until, side="left"))
            spent = arr.step_cost[self.samples, np.minimum(through, m - 1)]
        else:
            charged = self.cap if until is None else np.minimum(self.cap, until)
            stop_pos = np.where(stop_k < m, grid[np.minimum(stop_k, m - 1)], np.iinfo(np.int64).max)
            spent = np.minimum(charged, stop_pos[:, None])
        longest = spent.max(axis=1) if spent.shape[1] else np.zeros(len(spent), np.int64)
        correct = np.where(
            answer >= 0, arr.correct[np.maximum(answer, 0)] if arr.n_answers else False, False
        )
        position = grid[np.minimum(stop_k, m - 1)].astype(np.int64)
        if early is not None:
            position = np.array(
                [
                    grid[-1] if a else self.position(int(k), i)
                    for i, (a, k) in enumerate(zip(self.active, stop_k))
                ],
                dtype=np.int64,
            )
            probe_tokens = self._early_probe_tokens(loc)
            seq_tokens = seq
        else:
            probe_tokens = self._probe_tokens(stop_k, until)
            seq_tokens = self.seq if self.staged else longest
        return MethodResult(
            answer=answer,
            correct=correct.astype(bool),
            tokens=spent.sum(axis=1).astype(np.int64),
            baseline=self.cap.sum(axis=1).astype(np.int64),
            position=position,
            stopped_by=label,
            probe_tokens=probe_tokens,
            gamma=float(self.gamma),
            pruned_at=until,
            seq_tokens=seq_tokens.astype(np.int64),
            longest_tokens=longest.astype(np.int64),
            warmup_tokens=self.ctx.warm_tokens if self.method.pays_warmup else 0,
        )

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

    def _probe_cost_base(self) -> np.ndarray:
        """Probe cost per iteration before any is counted: 0 for a rule that probes nothing, NaN
        where the pool does not record the cost."""
        unknown = self.rule.probes and self.arr.probe_tokens is None
        return np.full(len(self.samples), np.nan if unknown else 0.0, dtype=np.float64)

    def _probe_tokens(self, stop_k: np.ndarray, until: np.ndarray | None) -> np.ndarray:
        """Probe cost per iteration: every running sampled trace is probed up to the decision (a
        trace the rule stopped charging, e.g. pruned, up to there); NaN where the pool does not
        record the cost."""
        arr, m = self.arr, len(self.arr.grid)
        out = self._probe_cost_base()
        if not self.rule.probes or arr.probe_tokens is None:
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
    """``method`` walked to the end on ``ctx``'s samples (:meth:`MethodRun.run`)."""
    return MethodRun(ctx, method).run()
