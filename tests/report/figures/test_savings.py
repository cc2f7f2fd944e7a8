"""Fig. 1 (left) and Fig. 4 draw their frames: one bar per pool and pipeline at the mean, its
error bar the t-interval; Fig. 4's four panels with an analysis."""

from __future__ import annotations

import numpy as np

from mars.report import collect
from mars.report.data.savings import savings_summary
from mars.report.figures import savings


def drawn(make, results, out_dir):
    seen: dict = {}
    finish = savings.finish

    def spy(fo, fig, *args):
        seen["fig"], seen["fo"] = fig, fo
        return finish(fo, fig, *args)

    savings.finish = spy
    try:
        make(results, out_dir, ("png",))
    finally:
        savings.finish = finish
    return seen["fig"], seen["fo"]


def test_fig1_left_draws_a_bar_per_pool_and_pipeline(tree, tmp_path):
    results = collect([tree[0]])
    fig, fo = drawn(savings.fig_savings, results, tmp_path)
    df = savings_summary(results)
    heights = sorted(p.get_height() for ax in fig.get_axes() for p in ax.patches)
    assert np.allclose(heights, sorted(df["mean"]))
    assert fo.data.equals(df)
    assert [ax.get_title() for ax in fig.get_axes()] == [
        results.model_title(m) for m in results.models
    ]


def test_fig4_has_its_four_panels_with_an_analysis(simulated, tmp_path):
    _, _, rep = simulated
    fig, fo = drawn(savings.fig_ablations, rep.results, tmp_path)
    assert set(fo.data.panel) == {"a", "b", "c", "d"}
    titles = {ax.get_title() for ax in fig.get_axes()}
    assert {"(c) calibration of the learned switch model"} <= titles
    assert not any("skipped" in n for n in fo.notes)
