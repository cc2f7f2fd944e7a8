"""The single-question figures' samples: Fig. 1 (right), where MARS waits while the vote is
contested and stops once its answer is safe, and Fig. 2, where Parallel-Probe's consensus stop
errs on a question whose early leader is overtaken. The candidates are a run's
(:mod:`mars.simulate.candidates`); their trajectories come from the pools' analyses
(``mars analyze``), and the report picks among them over all its pools."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...simulate.candidates import (
    CANDIDATES,
    MARS_SC,
    PP_SC,
    example_candidates,
    pp_failure_candidates,
)
from ...store.analysis import EXAMPLE, PP_FAILURE, Analysis, Trajectory
from ..collect import Results, Run

__all__ = [
    "EXAMPLE_LOADS",
    "MARS_SC",
    "PP_SC",
    "Example",
    "pick_example",
    "pick_pp_failure",
    "top_answers",
]

#: how many of the best candidates, over every pool, :func:`pick_example` and
#: :func:`pick_pp_failure` look at (each analysis keeps as many of its own)
EXAMPLE_LOADS = CANDIDATES


@dataclass
class Example:
    """One bootstrap sample of one question, its trajectory and why it was chosen; ``fallback``
    when it is not what the figure looks for, only the closest there is."""

    run: Run
    trajectory: Trajectory
    reason: str = ""
    fallback: bool = False

    @property
    def qid(self) -> int:
        return self.trajectory.qid

    @property
    def iteration(self) -> int:
        return self.trajectory.iteration

    def stop(self, method: str) -> pd.Series:
        """The sample's row of ``method``'s per_iteration.csv: where it stopped, what it
        answered and what it spent."""
        it = self.run.per_iteration(method)
        return it[(it.qid == self.qid) & (it.iteration == self.iteration)].iloc[0]


def saved_pct(stop: pd.Series) -> float:
    """The share (%) of the full budget's tokens a stop saved on its sample."""
    return 100 * (1 - stop.tokens / stop.baseline_tokens) if stop.baseline_tokens else 0.0


def stop_agrees(tr: Trajectory, stop: pd.Series) -> bool:
    """The analysis's stop is the simulation's (not analysed with other settings)."""
    k, n = tr.stop_k, len(tr.positions)
    stopped = stop.stopped_by != "budget"
    return bool(tr.positions[min(k, n - 1)] == stop.stop_position and stopped == (k < n))


def top_answers(tr: Trajectory, n: int = 4) -> list[int]:
    """The answers a vote-share panel draws: the ``n`` with the highest peak share, then the
    final and the correct ones if not among them."""
    peak = tr.shares.max(axis=0)
    order = [int(a) for a in np.argsort(-peak, kind="stable") if peak[a] > 0]
    keep = order[:n]
    for a in [tr.final_answer] + [int(a) for a in np.flatnonzero(tr.correct)]:
        if 0 <= a < len(peak) and peak[a] > 0 and a not in keep:
            keep.append(a)
    return keep


def _analysed(results: Results, method: str) -> Iterator[tuple[int, Run, Analysis]]:
    """(pair order, run, analysis) of every pair whose analysed run holds ``method``."""
    for order, pair in enumerate(results.pairs):
        found = results.analysis_of(*pair)
        if found is not None and method in found[0].overall:
            yield order, found[0], found[1]


def pick_example(results: Results) -> Example | None:
    """The Fig. 1 (right) question: the one an analysis was asked for (``mars analyze
    --example``), else chosen to show the mechanism: MARS waits while the vote is contested and
    stops once its answer is safe.

    Automatic choice, over every analysed pair: the iteration-0 samples where sc-mars-cal stops
    early with the correct answer, not at the first checkpoint, in order of the tokens they save
    (then report order); the first of the :data:`EXAMPLE_LOADS` that save most whose answer did not
    lead at the first checkpoint (it overtook the early leader), else the one that saves most.
    """
    analysed = list(_analysed(results, MARS_SC))
    for _, run, an in analysed:
        if an.example_spec is not None and an.of(EXAMPLE):
            return Example(run, an.of(EXAMPLE)[0], "chosen by mars analyze --example")
    cands = []  # (-saved, pair index, qid, run, trajectory)
    for order, run, an in analysed:
        for r in example_candidates(run).head(EXAMPLE_LOADS).itertuples():
            tr = an.trajectory(EXAMPLE, int(r.qid), 0)
            if tr is not None:
                cands.append((-float(r.saved), order, int(r.qid), run, tr))
    cands.sort(key=lambda c: c[:3])
    for _, _, _, run, tr in cands[:EXAMPLE_LOADS]:
        if tr.overtook:
            return Example(
                run,
                tr,
                "of the samples where MARS stops early and correctly (iteration 0 of every "
                "question), the one saving the most tokens whose answer overtook the first "
                "checkpoint's leader",
            )
    if cands:
        return Example(
            cands[0][3],
            cands[0][4],
            "of the samples where MARS stops early and correctly after at least one checkpoint "
            "where it could not (iteration 0 of every question), the one saving the most tokens "
            f"(none of the {min(len(cands), EXAMPLE_LOADS)} saving most had its answer overtake "
            "the first checkpoint's leader)",
        )
    return None


def pick_pp_failure(results: Results) -> Example | None:
    """A question whose early leader is wrong and later overtaken, where PP errs more than MARS.

    Candidates, over every analysed pair holding both: questions where sc-pp's accuracy is below
    sc-mars-cal's (largest gap first, then report order); within one, the first bootstrap sample
    where PP is wrong and MARS right; accepted when that sample's checkpoint-0 leader differs from
    its full-budget vote. The largest gap (a fallback) when none is accepted.
    """
    cands = []
    for order, run, an in _analysed(results, MARS_SC):
        if PP_SC not in run.overall:
            continue
        for r in pp_failure_candidates(run).head(EXAMPLE_LOADS).itertuples():
            tr = an.trajectory(PP_FAILURE, int(r.qid), int(r.iteration))
            if tr is not None:
                cands.append((-r.gap, order, int(r.qid), run, tr, r.accuracy_pp, r.accuracy_mars))
    cands.sort(key=lambda c: c[:3])
    fallback = None
    for neg_gap, _, _, run, tr, acc_pp, acc_mars in cands[:EXAMPLE_LOADS]:
        if -neg_gap > 0 and tr.lead[0] != tr.final_answer:
            reason = (
                f"{PP_SC} is right in {100 * acc_pp:.0f}% of samples, {MARS_SC} in "
                f"{100 * acc_mars:.0f}%; the checkpoint-0 leader is not the full-budget vote"
            )
            return Example(run, tr, reason)
        if fallback is None:
            fallback = Example(
                run,
                tr,
                "no question where the early leader is overtaken and PP loses accuracy; showing "
                f"the largest PP-vs-MARS accuracy gap ({100 * -neg_gap:+.0f} pp)",
                fallback=True,
            )
    return fallback


def pp_failure_frame(ex: Example) -> pd.DataFrame:
    """Fig. 2's numbers: the sample's trajectory and where each rule stopped."""
    return ex.trajectory.frame().assign(
        pp_stop=ex.stop(PP_SC).stop_position, mars_stop=ex.stop(MARS_SC).stop_position
    )
