"""Stopping rules (mars.method.stopping) on hand-built snapshots: the MARS margin test against the
adversarial bound of reference-protocol §5.1 computed by hand, the certified variant, and the
baselines' stop conditions."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from mars.method.stopping import (
    GUARD_BEFORE,
    UNSEEN,
    AdaptiveConsistency,
    Consensus,
    ConvergenceExit,
    EarlyStopping,
    Mars,
    Never,
    OracleStop,
    ParallelProbe,
    ProbeController,
    Snapshot,
    margin,
    margin_test,
)
from mars.method.voting import leader, tally


def snapshot(
    ids,
    q=None,
    *,
    k=1,
    weights=None,
    eligible=None,
    running=None,
    pending=None,
    n_answers=None,
    first_seen=False,
):
    """A snapshot of one or more rows from answer ids [R, B] (-1: no answer)."""
    ids = np.atleast_2d(np.asarray(ids, dtype=np.int64))
    R, B = ids.shape
    if eligible is None:
        eligible = ids >= 0
    eligible = np.asarray(eligible, dtype=bool) & (ids >= 0)
    w = np.ones(1) if weights is None else np.atleast_2d(np.asarray(weights, dtype=np.float64))
    A = int(ids.max()) + 1 if n_answers is None else n_answers
    votes = tally(ids, w, eligible, A)
    lead, has = leader(votes, ids, eligible) if first_seen else leader(votes)
    return Snapshot(
        k=k,
        position=2048 * (k + 1),
        rows=np.arange(R),
        ids=ids,
        eligible=eligible,
        weights=w,
        votes=votes,
        lead=lead,
        has_votes=has,
        running=np.ones((R, B), bool) if running is None else np.atleast_2d(running),
        n_answers=A,
        q=None if q is None else np.atleast_2d(np.asarray(q, dtype=np.float32)),
        pending=None if pending is None else np.atleast_2d(pending),
        first_seen=first_seen,
    )


def bound_by_hand(ids, q, w, eligible, gamma, n_answers):
    """Per-trace costs of reference-protocol §5.1, one trace at a time: (V_L, threshold of the
    unseen challenger, {k: (V_L − V_k, threshold of k)}), or None without votes."""
    V = [0.0] * n_answers
    for a, wj, e in zip(ids, w, eligible):
        if e and a >= 0:
            V[a] += wj
    if sum(V) == 0:
        return None
    L = max(range(n_answers), key=lambda a: (V[a], -a))
    unseen = sum(
        q[j] * (gamma * 2 * w[j] if ids[j] == L else gamma * w[j])
        for j in range(len(ids))
        if eligible[j]
    )
    challengers = {}
    for c in range(n_answers):
        if c == L or V[c] == 0:
            continue
        thr = 0.0
        for j in range(len(ids)):
            if not eligible[j]:
                continue
            if ids[j] == L:
                cost = gamma * 2 * w[j]
            elif ids[j] == c:
                cost = -w[j]
            else:
                cost = gamma * w[j]
            thr += q[j] * cost
        challengers[c] = (V[L] - V[c], thr)
    return V[L], unseen, challengers


def run_margin(snap, gamma, **kw):
    return margin(
        snap.votes,
        snap.lead,
        snap.has_votes,
        snap.ids,
        snap.weights,
        snap.eligible,
        snap.q,
        gamma,
        **kw,
    )


# ----------------------------------------------------------------------------- the margin test


def test_margin_passes_when_both_tests_clear_the_bound():
    # V = (3, 1); Q_0 = 0.5 + 0.5 + 0.5 = 1.5, Q_1 = 0.5, Q = 2; γ = 0.5
    # unseen: 3 > 0.5·(2 + 1.5) = 1.75 (slack 1.25); challenger 1: 2 > 0.5·(2 + 1.5 − 0.5) − 0.5
    # = 1.0 (slack 1.0, the binding one)
    snap = snapshot([0, 0, 0, 1], q=[0.5] * 4)
    out = run_margin(snap, 0.5, explain=True)
    assert out.passed.tolist() == [True]
    assert out.slack.tolist() == [1.0]
    assert out.binding.tolist() == [1]


def test_unseen_challenger_binds_when_no_other_answer_has_votes():
    # unanimous V_0 = 4, Q = Q_0 = 4·0.5 = 2: 4 > γ·4 holds below γ = 1 only
    snap = snapshot([0, 0, 0, 0], q=[0.5] * 4)
    passed = run_margin(snap, 0.75, explain=True)
    assert passed.passed.tolist() == [True]
    assert passed.slack.tolist() == [1.0]
    assert passed.binding.tolist() == [UNSEEN]
    assert run_margin(snap, 1.0).passed.tolist() == [False]  # 4 > 4 fails: strict


def test_challenger_on_the_bound_fails_strict_and_passes_non_strict():
    # Q_0 = 0.5 + 0.5 + 0.125 = 1.125, Q_1 = 0.25, Q = 1.375, γ = 1:
    # unseen 3 > 2.5; challenger 1: V_0 − V_1 = 2 against 1.375 + 1.125 − 0.25 − 0.25 = 2 exactly
    snap = snapshot([0, 0, 0, 1], q=[0.5, 0.5, 0.125, 0.25])
    strict = run_margin(snap, 1.0, explain=True)
    assert strict.passed.tolist() == [False]
    assert strict.slack.tolist() == [0.0]
    assert strict.binding.tolist() == [1]
    assert run_margin(snap, 1.0, strict=False).passed.tolist() == [True]


def test_challenger_voters_cost_minus_w_whatever_gamma():
    # a 2-2 tie: at γ = 0 the unseen threshold is 0 and challenger 1's is −Q_1, so the tie passes
    # exactly when the challenger's own voters may switch (q > 0); their −w is not scaled by γ
    switching = snapshot([0, 1, 0, 1], q=[0.0, 0.25, 0.0, 0.25])
    assert run_margin(switching, 0.0).passed.tolist() == [True]
    firm = snapshot([0, 1, 0, 1], q=[0.25, 0.0, 0.25, 0.0])
    assert run_margin(firm, 0.0).passed.tolist() == [False]


def test_ineligible_traces_neither_vote_nor_cost():
    # the last two traces hold 1 with q = 1 but are not eligible: only the unanimous 0-voters count
    ids = [0, 0, 0, 1, 1]
    q = [0.25, 0.25, 0.25, 1.0, 1.0]
    eligible = [True, True, True, False, False]
    snap = snapshot(ids, q=q, eligible=eligible)
    assert snap.votes.tolist() == [[3.0, 0.0]]
    out = run_margin(snap, 1.0, explain=True)
    # unseen only: 3 > 1·2·0.75 = 1.5
    assert out.passed.tolist() == [True]
    assert out.slack.tolist() == [1.5]
    assert out.binding.tolist() == [UNSEEN]


def test_no_votes_never_passes_and_has_no_slack():
    snap = snapshot([-1, -1, -1], q=[0.0, 0.0, 0.0], n_answers=2)
    out = run_margin(snap, 0.0, explain=True)
    assert out.passed.tolist() == [False]
    assert math.isnan(out.slack[0])


def test_no_rows():
    out = margin(
        np.zeros((0, 2)),
        np.zeros(0, np.int64),
        np.zeros(0, bool),
        np.zeros((0, 3), np.int64),
        np.ones(1),
        np.zeros((0, 3), bool),
        np.zeros((0, 3), np.float32),
        1.0,
        explain=True,
    )
    assert out.passed.shape == (0,) and out.slack.shape == (0,) and out.binding.shape == (0,)


def test_epsilon_is_added_to_every_threshold_per_row():
    # V = (3, 1) with q = 0: thresholds 0 and 0; ε = (1.9, 2.0) per row: the challenger's 2 > ε
    # holds for the first row only
    snap = snapshot([[0, 0, 0, 1], [0, 0, 0, 1]], q=[[0.0] * 4] * 2)
    eps = np.array([1.9, 2.0])
    assert run_margin(snap, 1.0, epsilon=eps).passed.tolist() == [True, False]
    assert run_margin(snap, 1.0, epsilon=eps, strict=False).passed.tolist() == [True, True]


@pytest.mark.parametrize("seed", range(40))
def test_margin_agrees_with_the_per_trace_definition(seed):
    rng = np.random.default_rng(seed)
    R, B, A = 3, int(rng.integers(1, 9)), int(rng.integers(1, 5))
    ids = rng.integers(-1, A, size=(R, B))
    # binary fractions keep every sum exact, so the comparison is exact too
    q = rng.integers(0, 9, size=(R, B)) / 8
    w = rng.integers(1, 5, size=(R, B)) / 4
    eligible = rng.random((R, B)) < 0.8
    gamma = float(rng.integers(0, 5) / 4)
    snap = snapshot(ids, q=q, weights=w, eligible=eligible, n_answers=A)
    out = run_margin(snap, gamma, explain=True)
    for r in range(R):
        el = (eligible[r] & (ids[r] >= 0)).tolist()
        ref = bound_by_hand(ids[r].tolist(), q[r].tolist(), w[r].tolist(), el, gamma, A)
        if ref is None:
            assert not out.passed[r]
            continue
        v_lead, unseen, challengers = ref
        slacks = {UNSEEN: v_lead - unseen} | {c: d - t for c, (d, t) in challengers.items()}
        assert out.passed[r] == all(s > 0 for s in slacks.values())
        assert out.slack[r] == min(slacks.values())
        assert slacks[int(out.binding[r])] == out.slack[r]
        assert margin_test(
            snap.votes[r : r + 1],
            snap.lead[r : r + 1],
            snap.has_votes[r : r + 1],
            snap.ids[r : r + 1],
            snap.weights[r : r + 1],
            snap.eligible[r : r + 1],
            snap.q[r : r + 1],
            gamma,
        ).tolist() == [out.passed[r]]


def test_closed_form_of_the_bound():
    # reference-protocol §5.1: test 1 is V_L > γ(Q + Q_L), test 2 is V_L − V_k > γ(Q + Q_L − Q_k)
    # − Q_k, with Q_x the q·w mass of answer x's voters
    ids = [0, 0, 0, 1, 1, 2]
    q = [0.25, 0.5, 0.125, 0.5, 0.25, 0.75]
    w = [1.0, 0.5, 2.0, 1.0, 1.5, 0.5]
    Qx = [0.0, 0.0, 0.0]
    for a, qj, wj in zip(ids, q, w):
        Qx[a] += qj * wj
    Q, gamma = sum(Qx), 0.5
    V = [3.5, 2.5, 0.5]
    expected = [V[0] - gamma * (Q + Qx[0])] + [
        V[0] - V[c] - (gamma * (Q + Qx[0] - Qx[c]) - Qx[c]) for c in (1, 2)
    ]
    snap = snapshot(ids, q=q, weights=w)
    assert snap.votes[0].tolist() == V
    out = run_margin(snap, gamma, explain=True)
    assert out.slack[0] == pytest.approx(min(expected), abs=1e-12)
    assert out.binding[0] == [UNSEEN, 1, 2][int(np.argmin(expected))]


# ----------------------------------------------------------------------------- the Mars rule


def test_mars_rule_is_the_margin_test():
    rule = Mars(gamma=0.5)
    rule.reset(1, 4)
    assert rule.needs_q
    assert rule.check(snapshot([0, 0, 0, 1], q=[0.5] * 4)).tolist() == [True]
    assert Mars(gamma=1.0).check(snapshot([0, 0, 0, 1], q=[0.5] * 4)).tolist() == [False]


def test_probe_zero_guard_applies_at_the_first_checkpoint_only():
    rule = Mars(gamma=0.5, guard_answer=1)
    passing = {"ids": [0, 0, 0, 1], "q": [0.5] * 4}
    assert rule.check(snapshot(**passing, k=0)).tolist() == [False]  # leader 0 is not the guard
    assert rule.check(snapshot(**passing, k=1)).tolist() == [True]
    assert Mars(gamma=0.5, guard_answer=0).check(snapshot(**passing, k=0)).tolist() == [True]
    assert Mars(gamma=0.5).check(snapshot(**passing, k=0)).tolist() == [True]  # no guard: -1


def test_guard_by_tokens_covers_every_checkpoint_before_the_paper_grids_second():
    passing = {"ids": [0, 0, 0, 1], "q": [0.5] * 4}

    def stops(rule, k, position):
        snap = snapshot(**passing, k=k)
        snap.position = position
        return bool(rule.check(snap)[0])

    by_index = Mars(gamma=0.5, guard_answer=1)
    by_tokens = Mars(gamma=0.5, guard_answer=1, guard_before=GUARD_BEFORE)
    assert GUARD_BEFORE == 4096
    # a 500-token grid: the reference guards 500 only, the guard by tokens 500 … 4,000
    assert [stops(by_index, k, 500 * (k + 1)) for k in (0, 1, 7, 8)] == [False, True, True, True]
    assert [stops(by_tokens, k, 500 * (k + 1)) for k in (0, 1, 7, 8)] == [False] * 3 + [True]
    # the paper's grid: both guard 2,048 alone
    for rule in (by_index, by_tokens):
        assert [stops(rule, k, 2048 * (k + 1)) for k in (0, 1)] == [False, True]
    # a coarse grid: the first checkpoint stays guarded wherever it lies
    assert not stops(by_tokens, 0, 8192)
    # a confirmed leader passes anywhere
    confirmed = Mars(gamma=0.5, guard_answer=0, guard_before=GUARD_BEFORE)
    assert stops(confirmed, 0, 500) and stops(confirmed, 3, 2000)


def certified_eps(n_active, budget, delta, w_max=1.0):
    return w_max * math.sqrt(2.0 * n_active * math.log(budget / delta))


def test_certified_rule_zeroes_q_of_finished_traces_and_adds_hoeffding():
    # all four traces finished: q becomes 0 whatever the model says, N_active = max(0, 1) = 1
    eps = certified_eps(1, 4, 0.05)  # sqrt(2 ln 80) ≈ 2.96
    rule = Mars(gamma=1.0, certified=True, delta=0.05)
    rule.reset(1, 4)
    done = np.zeros((1, 4), bool)
    unanimous = snapshot([0, 0, 0, 0], q=[1.0] * 4, running=done)
    split = snapshot([0, 0, 0, 1], q=[1.0] * 4, running=done)
    assert 4 >= eps > 2  # the unanimous 4 clear ε, the 3-1 margin of 2 does not
    assert rule.check(unanimous).tolist() == [True]
    assert rule.check(split).tolist() == [False]
    out = rule.explain(split)
    assert out.slack[0] == pytest.approx(2 - eps)
    assert out.binding[0] == 1


def test_certified_rule_counts_running_traces_and_the_budget():
    # two running leader voters with q = 0.25 of four: thresholds are γ·2·0.25·2 = 1 (unseen) and
    # the Hoeffding term grows with the running traces and with the budget
    ids, q = [0, 0, 0, 0], [0.25, 0.25, 0.0, 0.0]
    running = np.array([[True, True, False, False]])
    rule = Mars(gamma=1.0, certified=True, delta=0.5)
    rule.reset(1, 4)
    slack = rule.explain(snapshot(ids, q=q, running=running)).slack[0]
    assert slack == pytest.approx(4 - 1.0 - certified_eps(2, 4, 0.5))
    rule.reset(1, 64)
    slack64 = rule.explain(snapshot(ids, q=q, running=running)).slack[0]
    assert slack64 == pytest.approx(4 - 1.0 - certified_eps(2, 64, 0.5))


def test_certified_rule_charges_pending_traces_as_neutral_voters():
    # a running trace whose probe abstained (pending) costs γ·w·q against the unseen challenger
    ids = [0, 0, 0, -1]
    q = [0.0, 0.0, 0.0, 1.0]
    running = np.array([[False, False, False, True]])
    pending = np.array([[False, False, False, True]])
    rule = Mars(gamma=1.0, certified=True, delta=0.5)
    rule.reset(1, 4)
    without = rule.explain(snapshot(ids, q=q, running=running)).slack[0]
    with_pending = rule.explain(snapshot(ids, q=q, running=running, pending=pending)).slack[0]
    assert without == pytest.approx(3 - certified_eps(1, 4, 0.5))
    assert with_pending == pytest.approx(3 - 1.0 - certified_eps(1, 4, 0.5))


def test_certified_rule_ignores_the_probe_zero_guard():
    rule = Mars(gamma=1.0, certified=True, delta=0.5, guard_answer=1)
    rule.reset(1, 2)
    snap = snapshot([0] * 8, q=[0.0] * 8, k=0, running=np.zeros((1, 8), bool))
    assert 8 > certified_eps(1, 2, 0.5)
    assert rule.check(snap).tolist() == [True]


# ----------------------------------------------------------------------------- baselines


def test_never_stops():
    snap = snapshot([[0, 0, 0], [1, 1, 1]])
    assert Never().check(snap).tolist() == [False, False]


def test_consensus_stops_at_the_share_and_after_min_checkpoint():
    snap = snapshot([[0, 0, 0, 1], [0, 0, 1, 1], [-1, -1, -1, -1]], n_answers=2)
    assert Consensus(share=0.75).check(snap).tolist() == [True, False, False]
    assert Consensus(share=0.5).check(snap).tolist() == [True, True, False]
    assert Consensus(share=0.5, min_checkpoint=2).check(snap).tolist() == [False] * 3


class FakeWalk:
    """What OracleStop.foresee reads of a walk: leaders per checkpoint and the final vote."""

    def __init__(self, leads, final):
        self.leads = np.asarray(leads)  # [I, m]
        self.final = np.asarray(final)
        self.samples = [None] * len(final)
        self.arr = SimpleNamespace(grid=np.arange(self.leads.shape[1]))

    def full_budget_vote(self, rows):
        return self.final[rows]

    def snapshot(self, k, rows):
        return SimpleNamespace(lead=self.leads[rows, k])


def oracle_stops(rule, walk):
    rule.foresee(walk)
    I, m = walk.leads.shape
    first = []
    for i in range(I):
        ks = [
            k
            for k in range(m)
            if rule.check(SimpleNamespace(k=k, rows=np.array([i]), lead=walk.leads[[i], k]))[0]
        ]
        first.append(ks[0] if ks else None)
    return first


def test_oracle_first_and_last():
    walk = FakeWalk([[1, 0, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]], [0, 0, 0])
    assert oracle_stops(OracleStop(), walk) == [1, 0, None]
    # one after the last checkpoint whose leader is not the final vote
    assert oracle_stops(OracleStop(last=True), walk) == [3, 0, None]
    rule = OracleStop()
    rule.foresee(walk)
    assert rule.answer(SimpleNamespace(rows=np.array([2, 0]))).tolist() == [0, 0]


def run_rule(rule, frames, budget, **kw):
    """Feed one row's checkpoints to a rule; the first k it stops at, or None."""
    rule.reset(1, budget)
    for k, ids in enumerate(frames):
        if rule.check(snapshot([ids], k=k, **kw))[0]:
            return k
    return None


def test_parallel_probe_stops_after_conv_equal_winners_from_warmup():
    frames = [[0, 1, 1], [1, 1, 0], [1, 0, 1], [1, 1, 1], [1, 1, 1]]
    # winners 1, 1, 1, 1, 1: three equal by k = 2
    assert run_rule(ParallelProbe(conv=3, warmup=0, patience=0), frames, 3) == 2
    assert run_rule(ParallelProbe(conv=3, warmup=4, patience=0), frames, 3) == 4
    frames = [[0, 0, 1], [1, 1, 0], [1, 1, 0], [1, 1, 1]]  # winners 0, 1, 1, 1
    assert run_rule(ParallelProbe(conv=3, warmup=0, patience=0), frames, 3) == 3


def test_faithful_parallel_probe_prunes_and_answers_with_the_unpruned_vote():
    rule = ParallelProbe(conv=10, warmup=0, patience=2, faithful=True)
    rule.reset(1, 3)
    frames = [[0, 0, 1], [0, 0, 1], [0, 0, 1]]
    for k, ids in enumerate(frames):
        assert not rule.check(snapshot([ids], k=k))[0]
    # trace 2 was off the winner at k = 0 and 1: pruned at k = 1 (position 2048·2)
    assert rule.excluded(np.array([0])).tolist() == [[False, False, True]]
    at = rule.charged_until()[0]
    assert at[2] == 2048 * 2
    assert at[0] == at[1] == np.iinfo(np.int64).max
    reference = ParallelProbe(conv=10, warmup=0, patience=2)
    reference.reset(1, 3)
    reference.check(snapshot([[0, 0, 1]], k=0))
    assert reference.excluded(np.array([0])) is None
    assert reference.charged_until() is None


def test_probe_controller_stops_after_stable_equal_winners():
    rule = ProbeController(stable=2, warmup=100, patience=1, max_steps=100)
    frames = [[0, 1, 1]] * 6
    # checkpoint 0 is the first probe; steps from k = 1: winner 1, 1 (count 1), 1 (count 2)
    assert run_rule(rule, frames, 3) == 3
    assert rule.stop_label(np.array([0])).tolist() == ["pp_consensus"]
    assert rule.answer(snapshot([[0, 1, 1]])).tolist() == [1]


def test_probe_controller_stops_at_max_steps():
    rule = ProbeController(stable=50, warmup=100, patience=1, max_steps=2)
    frames = [[0, 1, 1], [0, 1, 1], [1, 0, 0], [1, 0, 0]]
    assert run_rule(rule, frames, 3) == 2
    assert rule.stop_label(np.array([0])).tolist() == ["max_steps"]
    assert rule.answer(snapshot([[0, 0, 0]])).tolist() == [0]


def test_convergence_exit_holds_the_answer_a_trace_repeated_n_times():
    rule = ConvergenceExit(n=3)
    rule.reset(1, 3)
    frames = [[1, 2, 0], [1, -1, 0], [1, -1, 1], [2, -1, 1]]
    for k, ids in enumerate(frames):
        assert not rule.check(snapshot([ids], k=k, n_answers=3))[0]  # the method never stops
    # trace 0 repeated 1 three times: exits at k = 2 holding 1; trace 1's abstentions never end
    # it; trace 2 changed answer
    final = np.array([[2, 2, 1]])
    assert rule.votes_with(np.array([0]), final).tolist() == [[1, 2, 1]]
    until = rule.charged_until()[0]
    assert until[0] == 2048 * 3
    assert until[1] == until[2] == np.iinfo(np.int64).max


def test_convergence_exit_leaves_finished_traces_alone():
    rule = ConvergenceExit(n=2)
    rule.reset(1, 2)
    running = np.array([[False, True]])  # trace 0 has finished, trace 1 runs
    for k in range(3):
        rule.check(snapshot([[0, 0]], k=k, running=running))
    # only the running trace exits (at its second equal probe, k = 1); the finished one votes
    # with its final answer
    assert rule.votes_with(np.array([0]), np.array([[1, 1]])).tolist() == [[1, 0]]
    assert rule.exited_at[0].tolist() == [np.iinfo(np.int64).max, 2048 * 2]


def beta_stop(v1, v2, threshold):
    """1 − BetaCDF(0.5; v1 + 1, v2 + 1) > threshold, by the binomial identity."""
    n = v1 + v2 + 1
    # P(Beta(a, b) ≤ x) = P(Binomial(a + b − 1, x) ≥ a)
    cdf = sum(math.comb(n, j) for j in range(v1 + 1, n + 1)) / 2**n
    return 1 - cdf > threshold


def test_adaptive_consistency_stops_by_the_beta_criterion():
    # unanimous draws: P(p1 > p2) = 1 − 0.5^(v+1) first exceeds 0.95 at v = 4 draws
    assert [beta_stop(v, 0, 0.95) for v in range(1, 6)] == [False, False, False, True, True]
    final = np.array(
        [
            [0] * 10,
            [0, 1] * 5,  # never decided: majority of all ten, a tie
            [-1, 2, 2, 2, 2, 0, 0, 0, 0, 0],  # the trace without an answer is not counted
            [0, 1, 1, 1, 1, 1, 1, 0, 0, 0],
        ]
    )
    rule = AdaptiveConsistency(threshold=0.95)
    used, answer, early = rule.decide_draws(final, first_seen=False)
    # row 3: 4-1 and 5-1 do not clear 0.95, 6-1 does (draw 7)
    assert [beta_stop(v, 1, 0.95) for v in (4, 5, 6)] == [False, False, True]
    assert used.tolist() == [4, 10, 5, 7]
    assert early.tolist() == [True, False, True, True]
    assert answer.tolist() == [0, 0, 2, 1]
    # the tie of row 1 goes to the answer drawn first under the protocol's tie rule
    swapped = np.array([[1, 0] * 5])
    assert rule.decide_draws(swapped, first_seen=True)[1].tolist() == [1]
    assert rule.decide_draws(swapped, first_seen=False)[1].tolist() == [0]


def test_early_stopping_draws_windows_until_one_is_unanimous():
    rule = EarlyStopping(window=2)
    assert rule.draws == 2
    final = np.array(
        [
            [0, 1, 1, 1, 0, 0, 2],  # second window unanimous: 4 drawn, answer 1
            [0, 1, 1, 0, 0, 1, 0],  # none: the three whole windows (6), majority 0 by 3-3 → 0
            [-1, 2, 0, 1, 1, 0, 0],  # the first window's only answer is 2
        ]
    )
    used, answer, early = rule.decide_draws(final, first_seen=False)
    assert used.tolist() == [4, 6, 2]
    assert early.tolist() == [True, False, True]
    assert answer.tolist() == [1, 0, 2]
    assert rule.decide_draws(final[1:2], first_seen=True)[1].tolist() == [0]
    assert rule.decide_draws(np.array([[1, 0, 0, 1, 1, 0]]), first_seen=True)[1].tolist() == [1]


def test_an_early_stopping_window_larger_than_the_budget_is_the_whole_budget():
    final = np.array([[1, 1, 1], [0, 1, 1], [-1, 2, 2]])
    for window in (3, 4, 100):
        used, answer, early = EarlyStopping(window=window).decide_draws(final, first_seen=False)
        assert used.tolist() == [3, 3, 3] and answer.tolist() == [1, 1, 2]
        assert early.tolist() == [True, False, True]
