"""The trade-off figure: a curve per swept knob, named by its symbol and values; none without a
sweep."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mars.method.registry import METHODS
from mars.report import collect
from mars.report.figures import tradeoff
from mars.report.figures.base import PAID_LABEL

from ..trees import drop_paid, tradeoff_tree
from .test_comparison import _drawn_paid


def test_a_curve_per_sweep(simulated, tmp_path):
    _, _, rep = simulated
    fo = tradeoff.fig_tradeoff(rep.results, tmp_path, ("png",))
    assert fo is not None and fo.stem == "fig-tradeoff"
    swept = [m for m in fo.data.method.unique() if METHODS[m].sweep is not None]
    assert swept and {METHODS[m].sweep.title for m in swept} <= set(fo.data.family)


def test_no_sweep_no_figure(tree, tmp_path):
    assert tradeoff.fig_tradeoff(collect([tree[0]]), tmp_path) is None


def test_the_paid_savings_are_drawn_beside_the_curves(tmp_path, monkeypatch):
    """A thin dashed curve of the curve's colour through the paid points, a black mark joined to
    each single point whose paid savings differ, one legend entry; the CSV holds them."""
    results = tradeoff_tree(tmp_path)
    marks, links, legend, fo = _drawn_paid(
        tradeoff, tradeoff.fig_tradeoff, results, tmp_path / "out", monkeypatch
    )
    df = fo.data
    curve = df[df.param.notna()].sort_values("value")
    points = df[df.param.isna()]
    differs = points[(points.savings_paid_pct - points.savings_pct).abs() >= 0.05]
    assert list(differs.method) == ["sc-mars-cal"]  # the vote and the oracle pay as counted
    want = [*zip(curve.savings_paid_pct, curve.accuracy_pct)]
    want += [*zip(differs.savings_paid_pct, differs.accuracy_pct)]
    assert np.allclose(marks, want) and len(links) == 1
    assert legend.count(PAID_LABEL) == 1 and not fo.notes
    back = pd.read_csv(tmp_path / "out" / "fig-tradeoff.csv")
    assert np.allclose(back.savings_paid_pct, df.savings_paid_pct)
    # byte-stable, paid marks and all
    again = tradeoff.fig_tradeoff(collect([results]), tmp_path / "again", ("png", "pdf"))
    first = tradeoff.fig_tradeoff(collect([results]), tmp_path / "first", ("png", "pdf"))
    assert again is not None and first is not None
    for p in again.files:
        assert p.read_bytes() == (tmp_path / "first" / p.name).read_bytes(), p.name


def test_no_paid_savings_nothing_drawn(tmp_path, monkeypatch):
    results = tradeoff_tree(tmp_path)
    drop_paid(results)
    marks, links, legend, fo = _drawn_paid(
        tradeoff, tradeoff.fig_tradeoff, results, tmp_path / "out", monkeypatch
    )
    assert not marks and not links and PAID_LABEL not in legend
    assert len([n for n in fo.notes if "paid savings" in n]) == 1
    assert pd.read_csv(tmp_path / "out" / "fig-tradeoff.csv").savings_paid_pct.isna().all()
