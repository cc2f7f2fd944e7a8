"""The trade-off figure: a curve per swept knob, named by its symbol and values; none without a
sweep."""

from __future__ import annotations

from mars.method.registry import METHODS
from mars.report import collect
from mars.report.figures import tradeoff


def test_a_curve_per_sweep(simulated, tmp_path):
    _, _, rep = simulated
    fo = tradeoff.fig_tradeoff(rep.results, tmp_path, ("png",))
    assert fo is not None and fo.stem == "fig-tradeoff"
    swept = [m for m in fo.data.method.unique() if METHODS[m].sweep is not None]
    assert swept and {METHODS[m].sweep.title for m in swept} <= set(fo.data.family)


def test_no_sweep_no_figure(tree, tmp_path):
    assert tradeoff.fig_tradeoff(collect([tree[0]]), tmp_path) is None
