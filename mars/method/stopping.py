"""Stopping rules, each evaluated for many bootstrap iterations at once.

Every rule sees a :class:`Snapshot` (one checkpoint, the still-active iterations) and answers, per
iteration, whether to stop now. Rules with memory (Parallel-Probe) keep it per iteration.

* :class:`Mars` — the margin test of the paper (unseen challenger + every challenger with votes,
  strict inequalities, probe-0 guard), as the reference runs it, its guard at the first
  checkpoint or (off the paper's grid) at every one before :data:`GUARD_BEFORE` tokens; with
  ``certified=True`` the paper's theorem instead: finished traces carry q = 0, the Hoeffding term
  ε = w_max·sqrt(2·N_active·ln(N/δ)) is added, and the inequalities are ≥ as in Eq. (4).
* :class:`ParallelProbe` — consensus + deviation pruning, as the MARS reference runs it (pruning
  changes neither tokens nor answer) or as Parallel-Probe's authors define it (pruned traces stop
  voting and stop costing tokens).
* :class:`ProbeController` — Parallel-Probe's main-table controller as its authors' evaluation
  runs it (majority stable for T steps, deviation pruning; pruned traces stop voting, or keep
  voting with their last answer).
* :class:`ConvergenceExit` — a per-trace exit: a running trace stops once its last n probes agree
  and votes with that answer (Parallel-Probe's "SAC"; Dynasor-like).
* :class:`AdaptiveConsistency`, :class:`EarlyStopping` — the sample-more family: traces are drawn
  one round after another (1 for Adaptive-Consistency, a window for ESC) and run in full; the
  rule decides when to stop drawing (:attr:`Rule.draws`).
* :class:`Consensus` — stop once the leader holds a given share of the votes.
* :class:`Never` — the full-budget baselines.
* :class:`OracleStop` — the oracle bounds (they read the full-budget answer).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..store.schema import CHECKPOINT_SPACING
from .voting import leader, tally

if TYPE_CHECKING:
    from .arrays import QuestionArrays
    from .settings import Settings


@dataclass
class Snapshot:
    """One checkpoint for the active iterations ``rows``; arrays are [len(rows), B]."""

    k: int
    position: int
    rows: np.ndarray
    ids: np.ndarray
    eligible: np.ndarray
    weights: np.ndarray
    votes: np.ndarray  # [len(rows), n_answers] float64
    lead: np.ndarray
    has_votes: np.ndarray
    running: np.ndarray  # trace still generating at this checkpoint
    n_answers: int
    q: np.ndarray | None = None  # switch probabilities, float32
    pending: np.ndarray | None = (
        None  # running, otherwise eligible, but no answer yet (abstained probe)
    )
    #: ties go to the answer seen first in sample order (else the lowest id): the protocol's
    first_seen: bool = False

    def vote(self, ids: np.ndarray, voting: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The leader of ``ids`` [R, B] among the ``voting`` traces (this snapshot's weights and
        tie rule) and whether a row has votes."""
        votes = tally(ids, self.weights, voting & (ids >= 0), self.n_answers)
        if self.first_seen:
            return leader(votes, ids, voting & (ids >= 0))
        return leader(votes)


class QuestionView(Protocol):
    """What a rule factory (:class:`mars.method.registry.Stopping`) and a launch policy read of a
    question: its arrays, settings and warmup traces, and the warmup's majority final answer (-1:
    none). :class:`mars.method.walk.QuestionContext` is one."""

    arr: QuestionArrays
    s: Settings
    warm: np.ndarray
    warm_ref: int
    #: a :class:`mars.method.learned.Calibration` or None (not imported: learned fits γ with
    #: this module's margin test)
    calibration: Any


class WalkView(Protocol):
    """What a rule that reads the future (:meth:`Rule.foresee`) and a launch policy
    (:class:`mars.method.launch.Launch`) read of the walk: the question, the sampled traces
    [I, B], the rule, the vote at any checkpoint and the full-budget vote.
    :class:`mars.method.walk.MethodRun` is one."""

    @property
    def question(self) -> QuestionView: ...

    @property
    def arr(self) -> QuestionArrays: ...

    @property
    def samples(self) -> np.ndarray: ...

    @property
    def rule(self) -> Rule: ...

    def snapshot(self, k: int, rows: np.ndarray) -> Snapshot: ...

    def full_budget_vote(
        self, rows: np.ndarray, exclude: np.ndarray | None = None
    ) -> np.ndarray: ...


def _challengers(votes: np.ndarray, lead: np.ndarray) -> np.ndarray:
    """Answers with votes other than the leader, per row, padded with -1: [R, K]."""
    has = votes > 0
    has[np.arange(len(lead)), np.maximum(lead, 0)] &= lead < 0
    rows, cols = np.nonzero(has)
    R = votes.shape[0]
    counts = np.bincount(rows, minlength=R)
    K = int(counts.max()) if R else 0
    out = np.full((R, K), -1, dtype=np.int64)
    if K:
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        out[rows, np.arange(len(rows)) - starts[rows]] = cols
    return out


#: The binding challenger id reported for the unseen answer (no trace holds it yet).
UNSEEN = -2


@dataclass
class Margin:
    """The MARS certificate of every row, and why: ``passed`` [R]; with ``explain``, the smallest
    slack (margin − threshold, NaN without votes) over the unseen and every voted challenger and
    the challenger that binds there (:data:`UNSEEN` for the unseen answer)."""

    passed: np.ndarray
    slack: np.ndarray | None = None
    binding: np.ndarray | None = None


def margin(
    votes,
    lead,
    has_votes,
    ids,
    weights,
    eligible,
    q,
    gamma,
    epsilon=None,
    strict=True,
    explain=False,
) -> Margin:
    """The MARS certificate for every row: leader safe against the unseen
    and every voted challenger.

    Costs follow reference-protocol §5.1 term by term (γ·2w for leader voters, −w for the
    challenger's own voters, γ·w otherwise, times eligibility) and each threshold is summed over the
    B traces with numpy's pairwise summation, so floating-point results match the reference.
    ``epsilon`` (per row) adds the Hoeffding term of the certified rule. The decision is the
    comparison itself; the slack (``explain``) is computed from the same rounded quantities.
    """
    R = len(lead)
    if R == 0:
        empty = np.zeros(0)
        return Margin(
            np.zeros(0, dtype=bool),
            empty if explain else None,
            empty.astype(np.int64) if explain else None,
        )
    base = gamma * weights
    is_lead = ids == lead[:, None]
    cost_unseen = np.where(is_lead, base * 2, base) * eligible
    # every term q·cost of a trace that is not a challenger's own voter, against any challenger
    terms = q * cost_unseen
    thr_unseen = np.sum(terms, axis=-1)
    v_lead = votes[np.arange(R), np.maximum(lead, 0)]
    eps: Any = 0.0 if epsilon is None else epsilon  # a scalar or one value per row
    cmp = np.greater if strict else np.greater_equal
    rhs_unseen = thr_unseen + eps
    ok = has_votes & cmp(v_lead, rhs_unseen)
    slack: np.ndarray | None = None
    binding: np.ndarray | None = None
    if explain:
        slack = np.where(has_votes, v_lead - rhs_unseen, np.nan).astype(np.float64)
        binding = np.full(R, UNSEEN, dtype=np.int64)
    # a row that fails against the unseen answer fails: its challengers matter only for the
    # slack (every row's, when explained)
    rows = np.arange(R) if explain else np.flatnonzero(ok)
    if len(rows) < R:  # the same numbers, row by row, for fewer rows
        votes, lead, has_votes, v_lead, terms = (
            votes[rows],
            lead[rows],
            has_votes[rows],
            v_lead[rows],
            terms[rows],
        )
        ids, eligible = ids[rows], eligible[rows]
        # per-row arrays lose the other rows; what broadcasts over rows stays as it is
        weights, q = (x[rows] if np.ndim(x) == 2 and len(x) == R else x for x in (weights, q))
        eps = eps if np.ndim(eps) == 0 else eps[rows]
        R = len(rows)
    chal = _challengers(votes, lead)
    K = chal.shape[1]
    if K:
        # a challenger's own voters cost −w (cast as the other costs are, then the same two
        # products): every challenger's [B] terms are the unseen's, but at its own voters. Each
        # trace votes for one answer, so they are copied once and each own voter's term written
        # over its challenger's copy (what selecting per challenger computes, in one pass)
        neg = np.broadcast_to(np.asarray(-weights, dtype=cost_unseen.dtype), ids.shape)
        own_terms = q * (neg * eligible)
        A = votes.shape[1]
        slot = np.full((R, A + 1), -1, dtype=np.int64)  # challenger slot of each answer id
        r_of, k_of = np.nonzero(chal >= 0)
        slot[r_of, chal[r_of, k_of]] = k_of
        k_own = slot[np.arange(R)[:, None], np.where(ids >= 0, ids, A)]  # [R, B]
        per = np.repeat(terms[:, None, :], K, axis=1)
        r_b, b_b = np.nonzero(k_own >= 0)
        per[r_b, k_own[r_b, b_b], b_b] = own_terms[r_b, b_b]
        thr = np.sum(per, axis=-1)  # padding slots (chal −1) hold the unseen's: never read
        v_chal = np.take_along_axis(votes, np.maximum(chal, 0), axis=1)
        eps_k = eps if np.ndim(eps) == 0 else eps[:, None]
        lhs, rhs = v_lead[:, None] - v_chal, thr + eps_k
        passed = cmp(lhs, rhs) | (chal < 0)
        ok[rows] &= passed.all(axis=1)
        if explain:
            assert slack is not None and binding is not None
            s_k = np.where(chal >= 0, lhs - rhs, np.inf)
            k_min = np.argmin(s_k, axis=1)
            s_min = s_k[np.arange(R), k_min]
            tighter = has_votes & (s_min < slack)
            slack = np.where(tighter, s_min, slack)
            binding = np.where(tighter, chal[np.arange(R), k_min], binding)
    return Margin(ok, slack, binding)


def margin_test(
    votes, lead, has_votes, ids, weights, eligible, q, gamma, epsilon=None, strict=True
) -> np.ndarray:
    """Whether the MARS certificate holds, per row (see :func:`margin`)."""
    return margin(votes, lead, has_votes, ids, weights, eligible, q, gamma, epsilon, strict).passed


class Rule:
    """A stopping rule, everything the walk asks of it.

    ``check`` says which rows stop at a snapshot (``label`` says why); ``answer`` is their answer
    there (the leader unless the rule votes otherwise); ``excluded`` are the traces that no longer
    vote in a row that runs to the end; ``charged_until`` is the position where each trace stops
    costing tokens and probes (None: where the method stops). ``needs_q``: snapshots must carry
    switch probabilities; ``probes``: the rule looks at probes (their cost is counted);
    ``reads_future``: :meth:`foresee` is called before the walk with the walk itself, whose
    full-budget vote and snapshots at any checkpoint the rule may read. ``counts_answers``: the
    decision may depend on how many answer ids exist, not only on the answers traces hold (a
    live decision then rebuilds the rule whenever a new answer arrives). ``votes_with`` are the
    answers the traces of rows that ran to the end vote with (None: their final answers).

    ``draws`` > 0 makes it a *sample-more* rule: no checkpoint walk; traces are drawn ``draws`` at
    a time in sample order and run in full, and :meth:`decide_draws` says after how many the rule
    stops drawing.
    """

    label = "none"
    needs_q = False
    probes = True
    reads_future = False
    counts_answers = True
    draws = 0

    def reset(self, n_iterations: int, budget: int) -> None:
        pass

    def foresee(self, walk: WalkView) -> None:
        pass

    def check(self, snap: Snapshot) -> np.ndarray:
        raise NotImplementedError

    def answer(self, snap: Snapshot) -> np.ndarray:
        return snap.lead

    def stop_label(self, rows: np.ndarray) -> Any:
        """Why the rows stopped (one label, or one per row)."""
        return self.label

    def excluded(self, rows: np.ndarray) -> np.ndarray | None:
        return None

    def charged_until(self) -> np.ndarray | None:
        return None

    def votes_with(self, rows: np.ndarray, final_ids: np.ndarray) -> np.ndarray:
        return final_ids

    def decide_draws(
        self, final_ids: np.ndarray, first_seen: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample-more rules: traces drawn [I], the answer [I] and whether the rule stopped the
        drawing before the budget [I], from the drawn traces' final answers [I, B] in order."""
        raise NotImplementedError


class Never(Rule):
    """Full-budget baseline: never stops early."""

    label = "budget"
    probes = False
    counts_answers = False

    def check(self, snap: Snapshot) -> np.ndarray:
        return np.zeros(len(snap.rows), dtype=bool)


@dataclass
class OracleStop(Rule):
    """An oracle bound (reads the future): stop at the first checkpoint whose leader is the
    full-budget answer, or (``last``) at the one after the last checkpoint whose leader is not;
    the answer is the full-budget vote either way."""

    last: bool = False
    label: str = "oracle"
    reads_future = True
    counts_answers = False
    final: np.ndarray | None = field(default=None, repr=False)
    settled_at: np.ndarray | None = field(default=None, repr=False)  # last: first settled k

    def foresee(self, walk: WalkView) -> None:
        everyone = np.arange(len(walk.samples))
        self.final = walk.full_budget_vote(everyone)
        if self.last:
            m = len(walk.arr.grid)
            disagree = np.stack(
                [walk.snapshot(k, everyone).lead != self.final for k in range(m)], axis=1
            )
            self.settled_at = np.where(
                disagree.any(axis=1), m - np.argmax(disagree[:, ::-1], axis=1), 0
            )

    def check(self, snap: Snapshot) -> np.ndarray:
        assert self.final is not None  # set by foresee()
        if self.last:
            assert self.settled_at is not None
            return snap.k >= self.settled_at[snap.rows]
        return snap.lead == self.final[snap.rows]

    def answer(self, snap: Snapshot) -> np.ndarray:
        assert self.final is not None  # set by foresee()
        return self.final[snap.rows]


#: The guard by tokens covers every checkpoint before the paper's grid's second one (2 × 2,048
#: tokens): on that grid the first checkpoint alone, as the reference; on any finer grid no stop
#: on a leader that the warmup's final answers do not confirm comes earlier than it could there.
GUARD_BEFORE = 2 * CHECKPOINT_SPACING


@dataclass
class Mars(Rule):
    """The MARS margin rule (see module docstring)."""

    gamma: object = 1.0  # kept as given: a Python float and a numpy float64 promote differently
    guard_answer: int = -1  # probe-0 guard: warmup majority, checked at the first checkpoint only
    #: the guard also covers every checkpoint before this position in tokens (None: the first
    #: checkpoint only, as the reference; :data:`GUARD_BEFORE` for the guard by tokens)
    guard_before: int | None = None
    #: no stop at a checkpoint before this position in tokens (None: none held): where a
    #: calibration replaces the warmup, no warmup majority confirms an early leader
    hold_before: int | None = None
    certified: bool = False
    delta: float = 0.05
    label: str = "margin"
    needs_q = True
    counts_answers = False

    def reset(self, n_iterations: int, budget: int) -> None:
        self._budget = budget

    def check(self, snap: Snapshot) -> np.ndarray:
        return self.explain(snap, slack=False).passed

    def explain(self, snap: Snapshot, slack: bool = True) -> Margin:
        """The rule's decision per row (margin test and probe-0 guard) and, with ``slack``, the
        slack and binding challenger of the margin test: what the report's figures draw."""
        q = snap.q
        charged, eps, strict = snap.eligible, None, True
        if self.certified:
            assert q is not None  # the rule needs q
            q = np.where(snap.running, q, np.float32(0))  # finished traces cannot switch
            # a running trace whose probe abstained may still vote later: charge it as a neutral
            # voter (cost w against every challenger); the reference ignores such traces
            pending = snap.pending if snap.pending is not None else np.zeros_like(snap.eligible)
            charged = snap.eligible | pending
            active = charged & snap.running
            n_active = np.maximum(active.sum(axis=1), 1)
            w_el = np.where(charged, np.broadcast_to(snap.weights, snap.ids.shape), 0)
            w_max = np.maximum(w_el.max(axis=1), 0) if w_el.size else np.ones(len(snap.rows))
            eps = w_max * np.sqrt(2.0 * n_active * np.log(max(self._budget, 1) / self.delta))
            strict = False
        out = margin(
            snap.votes,
            snap.lead,
            snap.has_votes,
            snap.ids,
            snap.weights,
            charged,
            q,
            self.gamma,
            epsilon=eps,
            strict=strict,
            explain=slack,
        )
        if self.guarded(snap) and self.guard_answer >= 0 and not self.certified:
            out.passed &= snap.lead == self.guard_answer
        if self.hold_before is not None and snap.position < self.hold_before:
            out.passed &= False
        return out

    def guarded(self, snap: Snapshot) -> bool:
        """Whether the probe-0 guard covers this checkpoint: the first one (the reference), and
        with ``guard_before`` every one before that position."""
        return snap.k == 0 or (self.guard_before is not None and snap.position < self.guard_before)


@dataclass
class ParallelProbe(Rule):
    """Parallel-Probe: stop after ``conv`` equal winners; prune traces off-track ``patience`` times.

    ``faithful=False`` is the MARS reference's emulation (pruning only steers PP's own winner);
    ``faithful=True`` follows Parallel-Probe's authors: pruned traces stop voting and stop costing
    tokens, and the answer is the vote of the unpruned traces.
    """

    conv: int = 3
    warmup: int = 4
    patience: int = 2
    faithful: bool = False
    label: str = "pp_consensus"
    counts_answers = False
    pruned: np.ndarray | None = field(default=None, repr=False)
    # position where a trace was pruned
    pruned_at: np.ndarray | None = field(default=None, repr=False)

    def reset(self, n_iterations: int, budget: int) -> None:
        self.stable = np.zeros(n_iterations, dtype=np.int64)
        self.prev = np.full(n_iterations, -1, dtype=np.int64)
        self.pruned = np.zeros((n_iterations, budget), dtype=bool)
        self.off = np.zeros((n_iterations, budget), dtype=np.int64)
        self.pruned_at = np.full((n_iterations, budget), np.iinfo(np.int64).max, dtype=np.int64)
        self.winner = np.full(n_iterations, -1, dtype=np.int64)

    def check(self, snap: Snapshot) -> np.ndarray:
        assert self.pruned is not None and self.pruned_at is not None  # set by reset()
        r = snap.rows
        voting = snap.eligible & ~self.pruned[r]
        votes = tally(snap.ids, np.ones(1), voting, snap.n_answers)
        has = votes.sum(axis=1) > 0
        win = np.where(has, np.argmax(votes, axis=1), -1)
        same = (win == self.prev[r]) & (win >= 0)
        self.stable[r] = np.where(same, self.stable[r] + 1, 1)
        self.prev[r] = win
        self.winner[r] = win
        if snap.k >= self.warmup and self.patience > 0:
            agrees = (snap.ids == win[:, None]) | ~voting
            off = np.where(agrees, 0, self.off[r] + 1)
            self.off[r] = off
            newly = (off >= self.patience) & ~self.pruned[r]
            pr = self.pruned[r] | newly
            self.pruned[r] = pr
            self.pruned_at[r] = np.where(newly, snap.position, self.pruned_at[r])
        return (self.stable[r] >= self.conv) & has & (snap.k >= self.warmup)

    def answer(self, snap: Snapshot) -> np.ndarray:
        return self.winner[snap.rows] if self.faithful else snap.lead

    def excluded(self, rows: np.ndarray) -> np.ndarray | None:
        assert self.pruned is not None  # set by reset()
        return self.pruned[rows] if self.faithful else None

    def charged_until(self) -> np.ndarray | None:
        return self.pruned_at if self.faithful else None


@dataclass
class Consensus(Rule):
    """Stop once the leader holds at least ``share`` of the eligible vote
    (after ``min_checkpoint``)."""

    share: float = 0.9
    min_checkpoint: int = 0
    label: str = "consensus"
    counts_answers = False

    def check(self, snap: Snapshot) -> np.ndarray:
        total = snap.votes.sum(axis=1)
        lead_votes = snap.votes[np.arange(len(snap.rows)), np.maximum(snap.lead, 0)]
        return snap.has_votes & (lead_votes >= self.share * total) & (snap.k >= self.min_checkpoint)


def _majority(ids: np.ndarray, n_answers: int, first_seen: bool) -> np.ndarray:
    """Plain majority of ``ids`` [R, B] (-1 does not vote), with the protocol's tie rule."""
    voting = ids >= 0
    votes = tally(ids, np.ones(1), voting, n_answers)
    return leader(votes, ids, voting)[0] if first_seen else leader(votes)[0]


@dataclass
class ProbeController(Rule):
    """Parallel-Probe's main-table controller, step for step as its authors' evaluation runs it.

    Checkpoint 0 is every trace's first probe; from checkpoint 1 on each step is one probe more:
    the majority of the voting traces' current answers is the winner; from step ``warmup`` on
    (steps counted from checkpoint 1) a running trace off the winner ``patience`` steps in a row is
    pruned: it stops costing tokens and either stops voting (``keep_votes=False``, the winner is
    then taken again without it) or keeps voting with its answer at the prune (``keep_votes``).
    Stop once the winner has been the same ``stable`` steps after the first (their ``T``: T + 1
    equal winners), when every trace has been pruned (the answer is then the previous winner), or
    after ``max_steps`` steps; the answer is the winner. Once every trace has finished or been
    pruned the walk runs on to the vote of what is left, which is the controller's winner then.
    A pruning step needs more than one voter (``keep_votes=False``) or more than one running trace
    (``keep_votes``), as in the authors' two classes.
    """

    stable: int = 40
    warmup: int = 15
    patience: int = 7
    keep_votes: bool = False
    max_steps: int = 100
    label: str = "pp_consensus"
    counts_answers = False
    pruned: np.ndarray | None = field(default=None, repr=False)
    pruned_at: np.ndarray | None = field(default=None, repr=False)

    def reset(self, n_iterations: int, budget: int) -> None:
        I, B = n_iterations, budget
        self.count = np.zeros(I, dtype=np.int64)
        self.prev = np.full(I, -2, dtype=np.int64)  # -2: no winner yet (theirs: None)
        self.winner = np.full(I, -1, dtype=np.int64)
        self.off = np.zeros((I, B), dtype=np.int64)
        self.pruned = np.zeros((I, B), dtype=bool)
        self.pruned_at = np.full((I, B), np.iinfo(np.int64).max, dtype=np.int64)
        self.held = np.full((I, B), -1, dtype=np.int64)  # answer at the prune (keep_votes)
        self.why = np.full(I, "", dtype=object)
        self.ended = np.zeros(I, dtype=bool)

    def check(self, snap: Snapshot) -> np.ndarray:
        assert self.pruned is not None and self.pruned_at is not None  # set by reset()
        r, k = snap.rows, snap.k
        stop = np.zeros(len(r), dtype=bool)
        if k == 0:
            return stop
        # rows whose traces have all ended: the walk runs on to the vote of their final answers
        # (what the controller returns then), nothing changes any more
        live = ~self.ended[r]
        step = k - 1
        pruned = self.pruned[r]
        ids = np.where(pruned, self.held[r], snap.ids) if self.keep_votes else snap.ids
        voting = np.ones_like(pruned) if self.keep_votes else ~pruned
        win, _ = snap.vote(ids, voting)
        prev_win = self.prev[r]
        empty = np.zeros(len(r), dtype=bool)
        if step >= self.warmup:
            running = snap.running & ~pruned
            enough = (running if self.keep_votes else voting).sum(axis=1) > 1
            judged = running & (enough & live)[:, None]
            off = np.where(snap.ids != win[:, None], self.off[r] + 1, 0)
            self.off[r] = np.where(judged, off, self.off[r])
            newly = judged & (self.off[r] >= self.patience)
            if newly.any():
                self.pruned[r] |= newly
                self.pruned_at[r] = np.where(newly, snap.position, self.pruned_at[r])
                self.held[r] = np.where(newly, snap.ids, self.held[r])
                if not self.keep_votes:
                    voting = ~self.pruned[r]
                    empty = ~voting.any(axis=1) & live
                    win = np.where(newly.any(axis=1), snap.vote(snap.ids, voting)[0], win)
        self.count[r] = np.where(live, np.where(win == prev_win, self.count[r] + 1, 0), 0)
        self.prev[r] = np.where(live, win, prev_win)
        self.winner[r] = np.where(empty | ~live, prev_win, win)
        settled = live & (self.count[r] >= self.stable)
        halt = settled | empty | (live & (step + 1 >= self.max_steps))
        self.why[r] = np.where(settled, self.label, np.where(empty, "pruned", "max_steps"))
        self.ended[r] |= live & ~halt & ~(snap.running & ~self.pruned[r]).any(axis=1)
        return halt

    def answer(self, snap: Snapshot) -> np.ndarray:
        return self.winner[snap.rows]

    def stop_label(self, rows: np.ndarray) -> np.ndarray:
        return self.why[rows]

    def excluded(self, rows: np.ndarray) -> np.ndarray | None:
        assert self.pruned is not None  # set by reset()
        return None if self.keep_votes else self.pruned[rows]

    def votes_with(self, rows: np.ndarray, final_ids: np.ndarray) -> np.ndarray:
        assert self.pruned is not None  # set by reset()
        if not self.keep_votes:
            return final_ids
        return np.where(self.pruned[rows], self.held[rows], final_ids)

    def charged_until(self) -> np.ndarray | None:
        return self.pruned_at


@dataclass
class ConvergenceExit(Rule):
    """A per-trace exit: a running trace whose last ``n`` probe answers are equal (an abstention
    never ends a trace) stops there and votes with that answer; the others run to their end. The
    method itself never stops early: the vote is taken when every trace has ended."""

    n: int = 14
    label: str = "budget"
    counts_answers = False
    exited_at: np.ndarray | None = field(default=None, repr=False)

    def reset(self, n_iterations: int, budget: int) -> None:
        I, B = n_iterations, budget
        self.last = np.full((I, B), -3, dtype=np.int64)
        self.streak = np.zeros((I, B), dtype=np.int64)
        self.exited = np.zeros((I, B), dtype=bool)
        self.exited_at = np.full((I, B), np.iinfo(np.int64).max, dtype=np.int64)
        self.held = np.full((I, B), -1, dtype=np.int64)

    def check(self, snap: Snapshot) -> np.ndarray:
        assert self.exited_at is not None  # set by reset()
        r = snap.rows
        live = snap.running & ~self.exited[r]
        streak = np.where(snap.ids == self.last[r], self.streak[r] + 1, 1)
        self.streak[r] = np.where(live, streak, self.streak[r])
        self.last[r] = np.where(live, snap.ids, self.last[r])
        newly = live & (self.streak[r] >= self.n) & (snap.ids >= 0)
        if newly.any():
            self.exited[r] |= newly
            self.exited_at[r] = np.where(newly, snap.position, self.exited_at[r])
            self.held[r] = np.where(newly, snap.ids, self.held[r])
        return np.zeros(len(r), dtype=bool)

    def votes_with(self, rows: np.ndarray, final_ids: np.ndarray) -> np.ndarray:
        return np.where(self.exited[rows], self.held[rows], final_ids)

    def charged_until(self) -> np.ndarray | None:
        return self.exited_at


@functools.cache
def _beta_stop_table(budget: int, threshold: float) -> np.ndarray:
    """Adaptive-Consistency's Beta criterion for every pair of top-two counts (v1, v2):
    1 − BetaCDF(0.5; v1 + 1, v2 + 1) > threshold, with the regularized incomplete beta function
    that scipy's Beta distribution evaluates for its CDF (the same numbers, without importing
    scipy.stats: 0.3-0.6 s per process; computed once per budget and threshold: (budget + 1)²
    CDFs, ~0.05 s at 512; read-only, shared)."""
    from scipy.special import betainc

    v = np.arange(budget + 1)
    v1, v2 = np.meshgrid(v, v, indexing="ij")
    table = (1 - betainc(v1 + 1, v2 + 1, 0.5)) > threshold
    table.flags.writeable = False
    return table


@dataclass
class AdaptiveConsistency(Rule):
    """Adaptive-Consistency: draw one trace at a time; from two answers on, stop once
    P(p1 > p2) = 1 − BetaCDF(0.5; v1 + 1, v2 + 1) exceeds ``threshold`` (v1 ≥ v2 the two top
    counts); the answer is the majority of the drawn traces."""

    threshold: float = 0.95
    label: str = "asc"
    probes = False
    counts_answers = False
    draws = 1

    def decide_draws(
        self, final_ids: np.ndarray, first_seen: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        I, B = final_ids.shape
        A = int(final_ids.max()) + 1 if final_ids.size else 1
        table = _beta_stop_table(B, self.threshold)
        counts = np.zeros((I, max(A, 1)), dtype=np.int64)
        used = np.full(I, B, dtype=np.int64)
        early = np.zeros(I, dtype=bool)
        seen = np.zeros(I, dtype=np.int64)  # answers drawn (a trace without one does not count)
        rows = np.arange(I)
        for j in range(B):
            a = final_ids[:, j]
            has = (a >= 0) & ~early
            counts[rows[has], a[has]] += 1
            seen += has
            if A < 2:
                top2 = np.zeros((I, 2), dtype=np.int64)
                top2[:, 0] = counts[:, 0]
            else:
                top2 = -np.partition(-counts, 1, axis=1)[:, :2]
            stop = ~early & (seen >= 2) & table[top2[:, 0], top2[:, 1]]
            used = np.where(stop, j + 1, used)
            early |= stop
            if early.all():
                break
        drawn = np.arange(B)[None, :] < used[:, None]
        answer = _majority(np.where(drawn, final_ids, -1), A, first_seen)
        return used, answer, early


@dataclass
class EarlyStopping(Rule):
    """Early-Stopping Self-Consistency: draw windows of ``window`` traces (as many whole windows
    as the budget holds); stop at the first window whose answers are all the same; otherwise the
    majority of every drawn trace. A window larger than the budget is one window of the whole
    budget (:meth:`window_for`): the budget bounds what is drawn, as it does for every method."""

    window: int = 8
    label: str = "esc"
    probes = False
    counts_answers = False

    @property
    def draws(self) -> int:  # type: ignore[override]
        return self.window

    def window_for(self, budget: int) -> int:
        """The window drawn under ``budget``: at most the whole budget."""
        return max(1, min(self.window, budget))

    def decide_draws(
        self, final_ids: np.ndarray, first_seen: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        I, B = final_ids.shape
        w = self.window_for(B)
        n_win = B // w
        A = int(final_ids.max()) + 1 if final_ids.size else 1
        used = np.full(I, n_win * w, dtype=np.int64)
        early = np.zeros(I, dtype=bool)
        answer = np.full(I, -1, dtype=np.int64)
        if n_win:
            win = final_ids[:, : n_win * w].reshape(I, n_win, w)
            has = win >= 0
            first = np.where(
                has.any(axis=2),
                win[np.arange(I)[:, None], np.arange(n_win), np.argmax(has, axis=2)],
                -1,
            )
            unanimous = has.any(axis=2) & ((win == first[:, :, None]) | ~has).all(axis=2)
            early = unanimous.any(axis=1)
            at = np.argmax(unanimous, axis=1)
            used = np.where(early, (at + 1) * w, used)
            answer = np.where(early, first[np.arange(I), at], -1)
        drawn = np.arange(B)[None, :] < used[:, None]
        rest = _majority(np.where(drawn, final_ids, -1), A, first_seen)
        return used, np.where(early, answer, rest), early
