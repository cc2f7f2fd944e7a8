"""The comparison figures' points: every method of the runs that drew each pool's main samples,
its family and SC counterpart from the registry, savings against the full-budget vote."""

from __future__ import annotations

import numpy as np
import pytest

from mars.method.registry import METHODS
from mars.report import collect
from mars.report.data.comparison import (
    FAMILIES,
    FRONTIER_COLUMNS,
    frontier_points,
    latency_points,
    mark_family,
    sc_counterpart,
)

from ..trees import close, drop_paid, overall, savings_against_the_vote, small_tree


def test_families_and_counterparts():
    assert {mark_family(m) for m in METHODS} <= set(FAMILIES)
    assert mark_family("asc") == mark_family("esc") == "sample more"
    assert mark_family("sc") == mark_family("dco") == "full budget"
    assert mark_family("oracle-first") == mark_family("sc-mars-oracle") == "oracle"
    assert mark_family("pp-main") == mark_family("sc-pp") == "Parallel-Probe"
    assert mark_family("unknown-method") == "other"
    assert sc_counterpart("dco-mars2") == "sc-mars2" and sc_counterpart("dco") == "sc"
    assert sc_counterpart("dco-mars-cal") == "sc-mars-cal"
    assert sc_counterpart("sc-mars2-waves") == "sc-mars2-waves"


@pytest.mark.slow
def test_frontier_points_are_every_early_stopping_method(pools):
    rc = collect([pools])
    df = frontier_points(rc)
    for pair in rc.pairs:
        main = rc.main_run(*pair)
        here = df[(df.model == pair[0]) & (df.setting == main.setting)].set_index("method")
        stopping = [
            m for m in main.methods if not METHODS[m].is_baseline and not METHODS[m].reads_future
        ]
        assert sorted(here.index) == sorted(stopping)
        for method in stopping:
            assert np.isclose(
                here.loc[method, "savings_pct"], savings_against_the_vote(main, method)
            )
            assert here.loc[method, "accuracy_pct"] == main.overall[method]["accuracy_pct"]
        assert (here.savings_against == "full-budget vote").all()
    # the second Parallel-Probe setting is its own point, named by its u; no trade-off run
    pp = df[df.method == "sc-pp"]
    assert sorted(pp.pp_conv.astype(int)) == [3, 3, 4, 4] and set(df.setting) == {
        "default",
        "pp-u4",
    }
    probe = df.method.isin(["sc-pp", "sc-pp-faithful"])
    assert df[probe].pp_conv.notna().all() and df[~probe].pp_conv.isna().all()
    assert df.oracle_savings_pct.notna().all()


def test_latency_points_are_every_method(pools):
    rc = collect([pools])
    df = latency_points(rc)
    main = rc.main_run("qwen3-8b", "aime_2025")
    here = df[(df.model == "qwen3-8b") & (df.setting == "default")]
    assert sorted(here.method) == sorted(main.methods)
    assert set(df.protocol) == {"bootstrap"}
    dco = df[df.method.map(lambda m: METHODS[m].baseline) == "dco"]
    assert set(dco.pipeline) == {"DeepConf"} and set(dco.model) == {"qwen3-8b"}


def test_frontier_points_carry_the_paid_savings(tree):
    """Every point's paid savings (warmup, probes) are its run's overall.json's, beside the
    paper's."""
    results = tree[0]
    df = frontier_points(collect([results]))
    assert FRONTIER_COLUMNS.index("savings_paid_pct") == FRONTIER_COLUMNS.index("savings_pct") + 1
    assert len(df) and df.savings_paid_pct.notna().all()
    for r in df.itertuples():
        ov = overall(results, r.model, r.setting, r.method)
        assert close(r.savings_paid_pct, ov["savings_paid_pct"])
        assert close(r.savings_pct, ov["savings_pct"])


def test_frontier_points_of_a_run_without_paid_savings(tmp_path):
    results = small_tree(tmp_path)
    drop_paid(results)
    df = frontier_points(collect([results]))
    assert len(df) and df.savings_paid_pct.isna().all() and df.savings_pct.notna().all()


def test_paid_savings_of_one_trace_are_against_the_vote(pools):
    """A method on fewer traces than the budget pays its traces, warmup and probes against the
    full-budget vote, as its savings are; every other method's paid savings are overall.json's."""
    rc = collect([pools])
    df = frontier_points(rc)
    main = rc.main_run("qwen3-8b", "aime_2025")
    here = df[(df.model == "qwen3-8b") & (df.setting == main.setting)].set_index("method")
    for method, r in here.iterrows():
        if METHODS[method].width is None:
            assert close(r.savings_paid_pct, main.overall[method]["savings_paid_pct"]), method
    it = main.per_iteration("single-sac").set_index(["qid", "iteration"])
    vote = main.per_iteration("sc").set_index(["qid", "iteration"]).tokens.loc[it.index]
    paid = it.tokens + it.warmup_tokens + it.probe_tokens.fillna(0.0)
    want = 100 * (1 - paid / vote).groupby(level="qid").mean().mean()
    assert np.isclose(here.loc["single-sac", "savings_paid_pct"], want)
    assert here.loc["single-sac", "savings_paid_pct"] <= here.loc["single-sac", "savings_pct"]
