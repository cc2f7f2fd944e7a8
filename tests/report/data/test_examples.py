"""The single-question figures' samples are chosen by their stated rules."""

from __future__ import annotations

from mars.report import collect
from mars.report.data.examples import (
    MARS_SC,
    PP_SC,
    pick_example,
    pick_pp_failure,
    pp_failure_frame,
    saved_pct,
    stop_agrees,
    top_answers,
)
from mars.store.analysis import EXAMPLE


def test_the_example_shows_the_mechanism(synthetic):
    """Issue 25 (11): Fig. 1 (right) shows, by a stated rule, MARS waiting while its answer
    trails and stopping early once it is safe: among early correct stops (iteration 0), the one
    saving most whose answer overtook the first checkpoint's leader."""
    results = collect([synthetic])  # the analysis under results/ (mars analyze)
    ex = pick_example(results)
    assert ex is not None and ex.run.analysis is not None
    it = ex.run.per_iteration("sc-mars-cal")
    early = it[
        (it.iteration == 0)
        & (it.stopped_by == "margin")
        & it.correct
        & (it.stop_position > it.stop_position.min())
    ]
    saved = (1 - early.tokens / early.baseline_tokens).set_axis(early.qid)
    trajectories = {t.qid: t for t in ex.run.analysis.of(EXAMPLE)}
    assert set(trajectories) == set(saved.index)  # this pool has fewer than 8 candidates

    def overtook(qid: int) -> bool:
        tr = trajectories[qid]
        return tr.stop_k < len(tr.positions) and tr.lead[0] != tr.lead[tr.stop_k]

    assert ex.iteration == 0 and ex.qid in saved.index and overtook(ex.qid)
    assert all(not overtook(q) for q, v in saved.items() if v > saved[ex.qid])
    assert saved[ex.qid] > 0.5  # it shows a real saving (this pool: 71 %)
    stop = ex.stop(MARS_SC)
    assert saved_pct(stop) == 100 * saved[ex.qid] and stop_agrees(ex.trajectory, stop)
    keep = top_answers(ex.trajectory)
    assert ex.trajectory.final_answer in keep and len(keep) == len(set(keep))


def test_the_pp_failure_and_its_stops(synthetic):
    ex = pick_pp_failure(collect([synthetic]))
    assert ex is not None
    if not ex.fallback:  # the early leader is overtaken
        assert ex.trajectory.lead[0] != ex.trajectory.final_answer
    df = pp_failure_frame(ex)
    assert df.drop(columns=["pp_stop", "mars_stop"]).equals(ex.trajectory.frame())
    assert set(df.mars_stop) == {ex.stop(MARS_SC).stop_position}
    assert set(df.pp_stop) == {ex.stop(PP_SC).stop_position}


def test_nothing_to_show_without_an_analysis(tree):
    results = collect([tree[0]])
    assert pick_example(results) is None and pick_pp_failure(results) is None
