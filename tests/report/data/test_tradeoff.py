"""The trade-off curves are the runs: a curve per declared sweep, its knob's values in order, the
single points beside them, none from another sampling."""

from __future__ import annotations

import json

import pytest

from mars.method.registry import METHODS as REGISTRY
from mars.method.registry import SWEEP_POINTS
from mars.report import collect
from mars.report.data.tradeoff import tradeoff_frames, tradeoff_points

from ..trees import MODEL, TRADEOFF_GAMMAS, close, drop_paid, overall, tradeoff_tree


def test_tradeoff_points_are_the_runs(simulated):
    res_root, _, rep = simulated
    frames = tradeoff_frames(rep.results)
    assert list(frames) == [("synthetic", "synth-5q")]
    df = tradeoff_points(frames)
    assert set(df.setting) <= {f"tradeoff-{i}" for i in range(1, 7)}
    for r in df.itertuples():
        run = res_root / "synthetic" / "synth-5q" / r.setting / "sim"
        ov = json.loads((run / r.method / "overall.json").read_text())
        assert close(r.accuracy_pct, ov["accuracy_pct"]) and close(r.savings_pct, ov["savings_pct"])
        assert close(r.savings_paid_pct, ov["savings_paid_pct"])
        assert ov["settings"]["budget"] == 16 and r.n_questions == 2
    curves = df[df.param.notna()]
    for method, sub in curves.groupby("method"):
        sweep = REGISTRY[method].sweep
        assert sub.param.iloc[0] == sweep.param
        # a value over the budget runs as the budget: one point there, not two alike
        values = sorted({min(v, 16) if sweep.bound == "budget" else v for v in sweep.values})
        assert sub.value.tolist() == [pytest.approx(v) for v in values]
    assert {"esc", "sc-mars2-waves"} & set(curves.method) == {"esc"}  # waves: 8 and 16 only
    assert set(df[df.param.isna()].method) == set(SWEEP_POINTS)


def test_no_sweep_no_curve(tree):
    assert tradeoff_frames(collect([tree[0]])) == {}  # one γ, one u, one δ: no curve


def test_tradeoff_points_carry_the_paid_savings(tmp_path):
    """Each point's paid savings (warmup, probes) are its run's overall.json's; NaN for a run
    simulated before they were recorded."""
    results = tradeoff_tree(tmp_path)
    df = tradeoff_points(tradeoff_frames(collect([results])))
    assert sorted(df[df.param.notna()].value) == list(TRADEOFF_GAMMAS)
    assert set(df[df.param.isna()].method) == set(SWEEP_POINTS)
    for r in df.itertuples():
        ov = overall(results, MODEL, r.setting, r.method)
        assert close(r.savings_paid_pct, ov["savings_paid_pct"])
    drop_paid(results)
    old = tradeoff_points(tradeoff_frames(collect([results])))
    assert len(old) == len(df) and old.savings_paid_pct.isna().all()
