"""Stopping rules, each evaluated for many bootstrap iterations at once.

Every rule sees a :class:`Snapshot` (one checkpoint, the still-active iterations) and answers, per
iteration, whether to stop now. Rules with memory (Parallel-Probe) keep it per iteration.

* :class:`Mars` — the margin test of the paper (unseen challenger + every challenger with votes,
  strict inequalities, probe-0 guard), as the reference runs it; with ``certified=True`` the
  paper's theorem instead: finished traces carry q = 0, the Hoeffding term
  ε = w_max·sqrt(2·N_active·ln(N/δ)) is added, and the inequalities are ≥ as in Eq. (4).
* :class:`ParallelProbe` — consensus + deviation pruning, as the MARS reference runs it (pruning
  changes neither tokens nor answer) or as Parallel-Probe's authors define it (pruned traces stop
  voting and stop costing tokens).
* :class:`Consensus` — stop once the leader holds a given share of the votes.
* :class:`Never` — the full-budget baselines.
* :class:`OracleStop` — the oracle bounds (they read the full-budget answer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .voting import tally


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
    thr_unseen = np.sum(q * cost_unseen, axis=-1)
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
    chal = _challengers(votes, lead)
    if chal.shape[1]:
        own = ids[:, None, :] == chal[:, :, None]
        neg = -weights
        cost = (
            np.where(
                is_lead[:, None, :],
                (base * 2)[:, None, :] if np.ndim(base) else base * 2,
                np.where(
                    own,
                    neg[:, None, :] if np.ndim(neg) else neg,
                    base[:, None, :] if np.ndim(base) else base,
                ),
            )
            * eligible[:, None, :]
        )
        thr = np.sum(q[:, None, :] * cost, axis=-1)
        v_chal = np.take_along_axis(votes, np.maximum(chal, 0), axis=1)
        eps_k = eps if np.ndim(eps) == 0 else eps[:, None]
        lhs, rhs = v_lead[:, None] - v_chal, thr + eps_k
        passed = cmp(lhs, rhs) | (chal < 0)
        ok &= passed.all(axis=1)
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
    live decision then rebuilds the rule whenever a new answer arrives).
    """

    label = "none"
    needs_q = False
    probes = True
    reads_future = False
    counts_answers = True

    def reset(self, n_iterations: int, budget: int) -> None:
        pass

    def foresee(self, walk: Any) -> None:
        pass

    def check(self, snap: Snapshot) -> np.ndarray:
        raise NotImplementedError

    def answer(self, snap: Snapshot) -> np.ndarray:
        return snap.lead

    def excluded(self, rows: np.ndarray) -> np.ndarray | None:
        return None

    def charged_until(self) -> np.ndarray | None:
        return None


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

    def foresee(self, walk: Any) -> None:
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


@dataclass
class Mars(Rule):
    """The MARS margin rule (see module docstring)."""

    gamma: object = 1.0  # kept as given: a Python float and a numpy float64 promote differently
    guard_answer: int = -1  # probe-0 guard: warmup majority, checked at the first checkpoint only
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
        if snap.k == 0 and self.guard_answer >= 0 and not self.certified:
            out.passed &= snap.lead == self.guard_answer
        return out


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
