"""When a sample's traces start: a launch policy, a part of a method; how many traces
width-adaptive MARS2 launches first, planned from the warmup (``sc-mars2-launch``); and when the
rest start beside a first wave that cannot decide (``sc-mars2-early``).

A launch policy (:class:`Launch`) says which traces of a sample start together: all of them
(:data:`TOGETHER`, the paper's walk), waves of ``wave_size`` (:data:`WAVES`), a first wave
planned from the warmup and then the rest (:data:`PLANNED`), or a first wave and the rest
launched at the checkpoint of it where it can no longer decide, beside it (:data:`EARLY`). The
walk (:class:`mars.method.walk.MethodRun`) runs the same step over each launch in turn, or, for
launches that overlap, over all of them on one clock.

MARS2 in waves (``sc-mars2-waves``) launches ``wave_size`` traces and the next wave only once a
wave has ended without a stop; to the risk, every trace not yet launched is an answer still to be
drawn from the warmup's posterior. Where one wave decides the question, that spends a fraction of
the budget at the latency of one round; where it does not, every further wave adds its longest
trace to what the user waits for — on AIME 2024 the four questions whose warmup is dispersed run
two to four rounds of sixteen traces, three quarters of the waves' latency, for a fifth of their
tokens (research/offgrid/results/writeup.md). The wave size is then a constant where it should be
a decision.

What a live run knows before it launches is its warmup, run to completion. So the plan asks the
rule itself, before launching: had a first wave of ``size`` traces ended with the warmup's final
answers in the warmup's proportions, every other trace of the budget still to be drawn, would its
risk be at most α (:func:`first_wave_risk`)? The first launch is the smallest size of ``wave``,
2 ``wave``, 4 ``wave``, … for which it would — doubling, so that a question needing more traces
costs at most one size too many — and the whole budget where none below it would: then no wave
can be expected to decide, and every trace starts at once, MARS2 at its own latency. A first
wave that ends without a stop after all launches every other trace at once: two rounds, never
more. Nothing is fitted: the risk is the rule's (:func:`mars.method.riskstop.predictive_risk`, at
the rule's level α, with the landing it gives traces not launched once every warmup trace has
ended), ``wave`` the ``wave_size`` setting (16, the warmup's size).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..errors import SimulationError
from .deepconf import KEEP_ALL
from .stopping import Snapshot
from .voting import UNIFORM, leader, tally

if TYPE_CHECKING:
    from .deepconf import Filter
    from .stopping import Rule, WalkView
    from .voting import Voting


def first_wave_risk(warm_final: np.ndarray, n_answers: int, size: int, budget: int) -> float:
    """The rule's risk once a first wave of ``size`` traces has ended with the warmup's final
    answers in the warmup's proportions and the other ``budget - size`` traces are still to be
    drawn (1 where the warmup gave no answer)."""
    from .riskstop import TAU, dirichlet_counts, predictive_risk  # scipy: where it runs

    wf = np.asarray(warm_final, dtype=np.int64)
    given = wf[wf >= 0]
    if len(given) == 0:
        return 1.0
    n = len(given)
    ids = np.concatenate([given, np.full(max(budget - size, 0), -1, dtype=np.int64)])[None]
    ended = np.zeros(ids.shape, dtype=bool)
    ended[0, :n] = True
    drawn = ~ended  # still to be drawn: re-drawn from the landing distribution
    weights = np.where(ended, size / n, 1.0)  # the warmup's proportions, ``size`` traces' worth
    theta = dirichlet_counts(wf, n_answers)
    landing = TAU * theta / theta.sum()  # the rule's landing once no warmup trace runs
    lead = np.array([np.bincount(given).argmax()])
    q = np.ones(ids.shape, dtype=np.float32)
    return float(predictive_risk(ids, ended, drawn, drawn, q, weights, lead, landing)[0])


def first_wave(
    warm_final: np.ndarray, n_answers: int, wave: int, budget: int, alpha: float | None = None
) -> int:
    """The size of the first launch: the smallest of ``wave``, 2 ``wave``, 4 ``wave``, … below
    the budget whose end could decide (:func:`first_wave_risk` ≤ ``alpha``; None: MARS2's level
    for self-consistency, :data:`mars.method.riskstop.ALPHA_SC`), else the budget."""
    if alpha is None:
        from .riskstop import ALPHA_SC

        alpha = ALPHA_SC
    size = max(1, wave)
    while size < budget:
        if first_wave_risk(warm_final, n_answers, size, budget) <= alpha:
            return size
        size *= 2
    return budget


def plan(
    warm_final: np.ndarray, n_answers: int, wave: int, budget: int, alpha: float | None = None
) -> list[tuple[int, int]]:
    """The launches, as (first, last + 1) sample positions: the first wave
    (:func:`first_wave`), then, should it end without a stop, every other trace at once."""
    size = first_wave(warm_final, n_answers, wave, budget, alpha)
    return [(0, size)] if size >= budget else [(0, size), (size, budget)]


class Launch:
    """Which traces of a sample start together, one launch after another: (first, last + 1)
    sample positions (:meth:`launches`).

    The base policy launches every trace at once. A *staged* policy (:attr:`staged`) launches
    more than once (live too: the loop starts each launch once the one before has ended): at
    every checkpoint of a launch the rule sees the earlier launches' final answers, the launch's
    current ones and every trace not yet launched as pending (an answer still to be drawn); a
    launch whose traces have all ended without a stop launches the next.
    A trace costs its tokens up to the stop (or the protocol's step cost), and a launch that ended
    its full reading; what a user waits for is each launch's longest trace, summed. Only
    :attr:`live` policies run live."""

    name: ClassVar[str] = "together"
    staged: ClassVar[bool] = False
    #: a later launch may start while the one before still runs (:class:`Early`): the walk keeps
    #: one clock for all of them (:meth:`mars.method.walk.MethodRun.step`)
    overlaps: ClassVar[bool] = False
    live: ClassVar[bool] = True
    #: the launch is planned from the question's warmup traces (which a live run pays for)
    reads_warmup: ClassVar[bool] = False

    def launches(self, walk: WalkView) -> list[tuple[int, int]]:
        return [(0, walk.samples.shape[1])]

    def check(self, method: str, rule: Rule, voting: Voting, filter: Filter) -> None:
        """Refuse a method this policy cannot run (one line)."""

    def launch_now(self, rule: Rule, snap: Snapshot, wave: int) -> np.ndarray:
        """Overlapping launches (:attr:`overlaps`): bool [len(snap.rows)], the rows whose next
        launch starts at this checkpoint of the first ``wave`` traces (else once they have all
        ended)."""
        return np.zeros(len(snap.rows), dtype=bool)


@dataclass(frozen=True)
class Together(Launch):
    """Every trace of the sample at once (the paper's walk)."""


@dataclass(frozen=True)
class Waves(Launch):
    """Waves of ``wave_size`` traces (the setting), one after another (``sc-mars2-waves``).
    Earlier waves vote with their final answers, uniformly, unfiltered: the rule reads no q."""

    name: ClassVar[str] = "waves"
    staged: ClassVar[bool] = True
    live: ClassVar[bool] = True  # a launch at a time (mars.live.stepper.Stopper.land)

    def wave(self, walk: WalkView) -> int:
        """The wave size: ``wave_size``, at most the budget."""
        return max(1, min(int(walk.question.s.wave_size), walk.samples.shape[1]))

    def launches(self, walk: WalkView) -> list[tuple[int, int]]:
        B, w = walk.samples.shape[1], self.wave(walk)
        return [(lo, min(B, lo + w)) for lo in range(0, B, w)]

    def check(self, method: str, rule: Rule, voting: Voting, filter: Filter) -> None:
        if filter != KEEP_ALL or voting != UNIFORM or rule.needs_q:
            raise SimulationError(f"method {method}: waves need a rule that reads no q")


@dataclass(frozen=True)
class Planned(Waves):
    """A first wave planned from the warmup (:func:`plan`), then every other trace at once
    (``sc-mars2-launch``)."""

    name: ClassVar[str] = "planned"
    reads_warmup: ClassVar[bool] = True

    def launches(self, walk: WalkView) -> list[tuple[int, int]]:
        B = walk.samples.shape[1]
        if walk.question.calibration is not None:  # no warmup to plan from:
            w = self.wave(walk)  # a first wave of ``wave_size``, then the rest at once
            return [(0, w)] if w >= B else [(0, w), (w, B)]
        alpha = getattr(walk.rule, "alpha", None)  # the rule's own level
        warm_final = walk.arr.final_ids[walk.question.warm]
        return plan(warm_final, walk.arr.n_answers, self.wave(walk), B, alpha)


def _ended_on(snap: Snapshot, wave: int, held: bool = False) -> Snapshot:
    """The optimistic end of a first wave of ``wave`` traces: each of its running traces ends on
    the leader (``held``: on the answer it holds, one holding none on the leader); the traces
    not launched stay answers still to be drawn."""
    ids = snap.ids.copy()
    run = snap.running.copy()
    pend = np.zeros_like(run) if snap.pending is None else snap.pending.copy()
    first = np.zeros(ids.shape, dtype=bool)
    first[:, :wave] = True
    silent = first & run & ((ids < 0) | (not held))
    ids = np.where(silent & (snap.lead >= 0)[:, None], snap.lead[:, None], ids)
    run &= ~first
    pend &= ~first
    eligible = (ids >= 0) & ~pend
    votes = tally(ids, snap.weights, eligible, snap.n_answers)
    lead, has = leader(votes, ids, eligible) if snap.first_seen else leader(votes)
    return replace(
        snap,
        ids=ids,
        eligible=eligible,
        votes=votes,
        lead=lead,
        has_votes=has,
        running=run | pend,
        pending=pend,
    )


@dataclass(frozen=True)
class Early(Waves):
    """A first wave of ``wave_size`` traces, and every other trace launched the moment the wave
    can no longer decide the question by its end (``sc-mars2-early``): at each checkpoint of the
    first wave the rule asks itself whether it would stop had every running trace of the wave
    ended on the current leader, every trace not launched still an answer to be drawn
    (:func:`_ended_on`); where even that most optimistic end would not stop — the wave's ended
    traces already disagree too much — waiting for the wave buys nothing, and the rest start
    there, at that checkpoint, while the wave goes on. A wave that ends without a stop and
    without that launches the rest then. Until a trace of the wave answers it is not judged.
    The launches overlap, so what a user waits for is the later of the wave's end and the
    rest's, not their sum; nothing is fitted (the rule and its level are the method's).

    For studies (research/calibration/early.py): ``held`` judges the wave with its running
    traces on the answers they hold now (those holding none on the leader); ``margin`` launches
    already where the optimistic risk exceeds ``margin`` times the rule's level (the level
    alone, without the rule's other conditions)."""

    name: ClassVar[str] = "early"
    overlaps: ClassVar[bool] = True
    margin: float = 1.0
    held: bool = False

    def launches(self, walk: WalkView) -> list[tuple[int, int]]:
        B, w = walk.samples.shape[1], self.wave(walk)
        return [(0, w)] if w >= B else [(0, w), (w, B)]

    def check(self, method: str, rule: Rule, voting: Voting, filter: Filter) -> None:
        super().check(method, rule, voting, filter)
        if not hasattr(rule, "risk") or not hasattr(rule, "alpha"):
            raise SimulationError(f"method {method}: an early launch needs a rule with a risk")

    def launch_now(self, rule: Rule, snap: Snapshot, wave: int) -> np.ndarray:
        """bool [len(snap.rows)]: the rows whose first wave, ended optimistically
        (:func:`_ended_on`), would not stop: launch the rest now. A row with no answer yet
        waits."""
        opt = _ended_on(snap, wave, self.held)
        if self.margin == 1.0:
            stops = rule.check(opt)
        else:
            alpha = rule.alpha  # type: ignore[attr-defined]
            stops = opt.has_votes & (rule.risk(opt) <= self.margin * alpha)  # type: ignore[attr-defined]
        return snap.has_votes & ~stops


TOGETHER: Launch = Together()
WAVES: Launch = Waves()
PLANNED: Launch = Planned()
EARLY: Launch = Early()
