"""Per-question savings with their t-intervals (Fig. 1 left) and the paired differences of the
ablations (Fig. 4 a–b) equal the runs' numbers."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from mars.report import collect
from mars.report.data.savings import (
    GAMMA_PAIRS,
    ORACLE_PAIRS,
    ablations,
    paired_difference,
    savings_summary,
    t_interval,
)

from ..trees import MODEL, close, overall


def test_t_interval():
    mean, sd, lo, hi = t_interval(np.array([1.0, 2.0, 3.0, np.nan]))
    half = stats.t.ppf(0.975, 2) * 1.0 / np.sqrt(3)
    assert (mean, sd) == (2.0, 1.0) and (lo, hi) == pytest.approx((2 - half, 2 + half))
    assert np.isnan(t_interval(np.array([4.0]))[1]) and t_interval(np.array([4.0]))[0] == 4.0
    assert all(np.isnan(t_interval(np.array([]))))


def test_savings_summary_is_the_overall_savings(tree):
    """Fig. 1 left plots the overall savings (mean of per-question savings)."""
    results, _, _ = tree
    df = savings_summary(collect([results]))
    assert set(df.pipeline) == {"SC", "DeepConf"} and len(df) == 4
    for _, r in df.iterrows():
        ov = overall(results, r.model, r.setting, r.method)
        assert close(r["mean"], ov["savings_pct"], 1e-9)
        assert r.ci_low <= r["mean"] <= r.ci_high


def test_paired_differences(tree):
    """Fig. 4a: per-question sc-mars-cal − sc-mars; 4b compares at one γ."""
    results, _, _ = tree
    res = collect([results])
    a = paired_difference(res, GAMMA_PAIRS)
    a = a[(a.pipeline == "SC") & (a.model == MODEL)].iloc[0]
    expect = (
        overall(results, MODEL, "default", "sc-mars-cal")["savings_pct"]
        - overall(results, MODEL, "default", "sc-mars")["savings_pct"]
    )
    assert close(a["mean"], expect, 1e-9)
    b = paired_difference(res, ORACLE_PAIRS)
    assert set(zip(b.method_a, b.method_b)) == {
        ("sc-mars-oracle", "sc-mars"),
        ("dco-mars-oracle", "dco-mars"),
    }
    ab = ablations(res)
    assert ab.bins is None and ab.checkpoints is None  # no analysis
    assert list(ab.frame().panel.unique()) == ["a", "b"]


def test_ablations_with_an_analysis(simulated):
    _, _, rep = simulated
    ab = ablations(rep.results)
    assert ab.bins is not None and ab.checkpoints is not None
    assert set(ab.frame().panel) == {"a", "b", "c", "d"}
    assert ab.bins.q_learned_mean.dropna().between(0, 1).all()
