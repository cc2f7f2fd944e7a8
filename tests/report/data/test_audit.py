"""The risk audit: how often the stopped answer differs from the full-budget vote of the same
sample, its Clopper–Pearson bound, and which methods carry the certificate (the registry's rule,
not a name)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binom

from mars.method.registry import MARS_CERTIFIED, Method, register, unregister
from mars.report import collect
from mars.report.data.audit import audit_frame, clopper_pearson_upper, risk_audit, verdict

from ..trees import DATASET, ITERS, MODEL, QIDS, SETTINGS, close, write_method


@pytest.mark.slow
def test_risk_audit(tree):
    results, _, _ = tree
    df = risk_audit(collect([results]))
    cert = df[(df.method == "sc-mars-cert") & (df.model == MODEL)].iloc[0]
    assert (cert.runs, cert.differ, cert.reference) == (len(QIDS) * ITERS, 1, "sc")
    assert close(cert.rate_pct, 100 / 12)
    assert close(cert.delta, SETTINGS["delta"])
    assert close(cert.worst_question_pct, 25.0)
    assert cert.questions_over_delta == 1 and cert.certified
    assert cert.rate_upper95_pct == pytest.approx(100 * clopper_pearson_upper(1, 12))
    oc = df[(df.method == "sc-mars-oracle-cert") & (df.model == MODEL)].iloc[0]
    assert oc.differ == 0
    assert set(df[df.method == "dco-mars-cal"].reference) == {"dco"}
    assert not df[df.method == "dco-mars-cal"].certified.any()
    shown = audit_frame(collect([results])).set_index(["model", "method"])
    assert shown.loc[(MODEL, "sc-mars-cert")].verdict == "violated"  # 8.3 % > δ = 5 %
    assert shown.loc[(MODEL, "sc-mars-oracle-cert")].verdict == "holds"
    assert set(shown.xs("sc-mars-cal", level="method").verdict) == {"no guarantee"}


def test_clopper_pearson_upper_bound():
    """The exact one-sided bound: the rate p at which k or fewer events in n are 5 % likely."""
    for k, n in ((0, 10), (1, 12), (7, 40), (99, 100)):
        p = clopper_pearson_upper(k, n)
        assert binom.cdf(k, n, p) == pytest.approx(0.05, abs=1e-9)
    assert clopper_pearson_upper(0, 10) == pytest.approx(1 - 0.05 ** (1 / 10))
    assert clopper_pearson_upper(5, 5) == 1.0 and np.isnan(clopper_pearson_upper(0, 0))


def test_a_certified_method_is_one_the_registry_says_is(tmp_path):
    """A method that stops by the certified rule is audited against δ whatever its name."""
    toy = register(Method("sc-toy-bounded", "Toy bounded ({delta})", MARS_CERTIFIED, q="learned"))
    try:
        run = tmp_path / "results" / MODEL / DATASET / "default" / "sim"
        rng = np.random.default_rng(2)
        for m in ("sc", toy.name):
            write_method(run, m, rng, SETTINGS)
        row = audit_frame(collect([tmp_path / "results"])).iloc[0]
        assert row.method == toy.name and row.certified and row.verdict == "holds"
    finally:
        unregister(toy.name)


def test_verdict():
    row = pd.Series({"certified": True, "rate_pct": 5.0, "delta": 0.05})
    assert verdict(row) == "holds"
    assert verdict(row.copy().replace({5.0: 5.1})) == "violated"
    assert verdict(pd.Series({"certified": False, "rate_pct": 50.0, "delta": 0.05})) == (
        "no guarantee"
    )


def test_the_audit_recomputed_by_hand(simulated):
    """The simulated pool's certified run against its full-budget vote, from per_iteration.csv."""
    res_root, _, rep = simulated
    sim = res_root / "synthetic" / "synth-5q" / "default" / "sim"
    a = pd.read_csv(
        sim / "sc-mars-cert" / "per_iteration.csv", dtype={"answer": str}, keep_default_na=False
    )
    b = pd.read_csv(sim / "sc" / "per_iteration.csv", dtype={"answer": str}, keep_default_na=False)
    differ = int((a.answer.to_numpy() != b.answer.to_numpy()).sum())
    df = risk_audit(rep.results)
    row = df[(df.method == "sc-mars-cert") & (df.setting == "default")].iloc[0]
    assert row.differ == differ and row.runs == len(a)
