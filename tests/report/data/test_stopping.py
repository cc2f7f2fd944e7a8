"""Every early-stopping method against the oracle stops and the probes' cost: the frames equal
the runs' overall.json and per_question.csv, and which methods are early-stopping ones is the
registry's word, not their names'."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mars.method.registry import MARS_CERTIFIED, Method, register, unregister
from mars.report import collect
from mars.report.data.stopping import (
    oracle_bounds_frame,
    oracle_share_frame,
    probe_cost_frame,
    stopping_methods,
)

from ..trees import DATASET, MODEL, MODEL2, SETTINGS, close, overall, write_method


def test_oracle_bounds_and_share(tree):
    results, _, _ = tree
    df = oracle_bounds_frame(collect([results]))
    assert len(df) == 2
    for _, r in df.iterrows():
        mars = overall(results, r.model, "default", "sc-mars-cal")["savings_pct"]
        first = overall(results, r.model, "default", "oracle-first")["savings_pct"]
        assert close(r["sc-mars-cal.savings_pct"], mars)
        assert close(r["oracle-first.savings_pct"], first)
        assert close(r["sc-mars-cal.share_of_oracle_pct"], 100 * mars / first)
        assert close(
            r["oracle-dco-last.savings_pct"],
            overall(results, r.model, "default", "oracle-dco-last")["savings_pct"],
        )


def test_probe_cost(tree):
    results, _, _ = tree
    df = probe_cost_frame(collect([results]))
    assert not set(df.method) & {"sc", "dco", "oracle-first", "oracle-last"}
    for _, r in df.iterrows():
        ov = overall(results, r.model, "default", r.method)
        pq = pd.read_csv(
            results / r.model / DATASET / "default" / "sim" / r.method / "per_question.csv"
        )
        assert close(r.savings_pct, ov["savings_pct"])
        assert close(r.savings_with_probes_pct, ov["savings_with_probes_pct"])
        if ov["savings_with_probes_pct"] is not None:
            assert close(r.probe_cost_pp, ov["savings_pct"] - ov["savings_with_probes_pct"])
            assert close(r.probe_tokens_mean, pq.probe_tokens_mean.mean())
        else:  # MODEL2 has no probe costs
            assert r.model == MODEL2 and np.isnan(r.probe_tokens_mean)


def test_oracle_share_against_the_pipelines_vote_and_oracle(tree):
    results, _, _ = tree
    df = oracle_share_frame(collect([results])).set_index(["model", "method"])
    for method, vote, oracle in (
        ("sc-mars-cal", "sc", "oracle-first"),
        ("dco-mars", "dco", "oracle-dco-first"),
    ):
        r = df.loc[(MODEL, method)]
        ov = overall(results, MODEL, "default", method)
        acc = ov["accuracy_pct"] - overall(results, MODEL, "default", vote)["accuracy_pct"]
        orc = overall(results, MODEL, "default", oracle)["savings_pct"]
        assert close(r.accuracy_delta_pp, acc) and close(r.oracle_savings_pct, orc)
        assert close(r.share_of_oracle_pct, 100 * ov["savings_pct"] / orc)


def test_the_early_stopping_methods_are_the_registrys(tmp_path):
    """Baselines and oracle stops are left out by their declarations, never by their names: a
    method called "oracle-…" that stops by the certified rule is in, and so is one this process
    does not know (simulated with a registration of its own); oracle-q MARS (a reference point)
    is in."""
    toy = register(Method("oracle-toy", "Toy certified", MARS_CERTIFIED, q="learned"))
    try:
        run = tmp_path / "results" / MODEL / DATASET / "default" / "sim"
        rng = np.random.default_rng(1)
        for m in ("sc", "sc-mars-oracle", "oracle-first", toy.name, "oracle-unknown"):
            write_method(run, m, rng, SETTINGS)
        found = [m for _, _, m, _ in stopping_methods(collect([tmp_path / "results"]))]
        assert found == ["sc-mars-oracle", "oracle-toy", "oracle-unknown"]
    finally:
        unregister(toy.name)
