"""The single-question figures draw their sample: where MARS (and Parallel-Probe) stop, what they
answer; without an analysis they say what they need."""

from __future__ import annotations

from mars.report import collect
from mars.report.data.examples import MARS_SC, PP_SC, pick_example, pick_pp_failure
from mars.report.figures import examples


def drawn(make, results, out_dir):
    seen: dict = {}
    finish = examples.finish

    def spy(fo, fig, *args):
        seen["fig"], seen["fo"] = fig, fo
        return finish(fo, fig, *args)

    examples.finish = spy
    try:
        make(results, out_dir, ("png",))
    finally:
        examples.finish = finish
    return seen["fig"], seen["fo"]


def _vertical_lines(ax) -> set[float]:
    return {
        float(line.get_xdata()[0])
        for line in ax.get_lines()
        if len(set(line.get_xdata())) == 1 and line.get_linestyle() == "--"
    }


def test_the_example_marks_where_mars_stops(synthetic, tmp_path):
    results = collect([synthetic])
    fig, fo = drawn(examples.fig_example, results, tmp_path)
    ex = pick_example(results)
    assert ex is not None and f"Question {ex.qid} " in fo.caption
    stop = ex.stop(MARS_SC)
    top = fig.get_axes()[0]
    assert _vertical_lines(top) == {stop.stop_position / 1000}
    texts = " ".join(t.get_text() for t in top.texts)
    assert "MARS stops" in texts and str(stop.answer)[:10] in texts
    assert fo.data.equals(ex.trajectory.frame())


def test_the_pp_failure_marks_both_stops(synthetic, tmp_path):
    results = collect([synthetic])
    fig, _ = drawn(examples.fig_pp_failure, results, tmp_path)
    ex = pick_pp_failure(results)
    assert ex is not None
    want = {ex.stop(m).stop_position / 1000 for m in (PP_SC, MARS_SC)}
    assert _vertical_lines(fig.get_axes()[0]) == want


def test_without_an_analysis_they_say_what_they_need(tree, tmp_path):
    results = collect([tree[0]])
    for make in (examples.fig_example, examples.fig_pp_failure):
        fig, fo = drawn(make, results, tmp_path)
        assert fo.data is None and fo.notes[0].startswith("skipped")
        assert any("mars analyze" in t.get_text() for ax in fig.get_axes() for t in ax.texts)
