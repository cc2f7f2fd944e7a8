"""The two-axis figure: one row per pool and samples, its key listing every point."""

from __future__ import annotations

from mars.report.data.twoaxis import two_axis_points
from mars.report.figures import twoaxis


def test_one_row_per_samples_and_a_key_of_every_point(simulated, tmp_path):
    _, _, rep = simulated
    seen: dict = {}
    finish = twoaxis.finish

    def spy(fo, fig, *args):
        seen["fig"], seen["fo"] = fig, fo
        return finish(fo, fig, *args)

    twoaxis.finish = spy
    try:
        twoaxis.fig_two_axis(rep.results, tmp_path, ("png",))
    finally:
        twoaxis.finish = finish
    df = two_axis_points(rep.results)
    fig = seen["fig"]
    panels = list(dict.fromkeys(df.panel))[:6]
    axes = fig.get_axes()
    assert len(axes) == 2 * len(panels)
    for (ax, key), panel in zip(zip(axes[::2], axes[1::2]), panels):
        sub = df[(df.panel == panel) & df.saved_pct.notna()]
        (text,) = key.texts
        assert len(text.get_text().splitlines()) == 1 + len(sub)
        assert ax.get_title(loc="left").startswith("synthetic · synth-5q · bootstrap protocol")
