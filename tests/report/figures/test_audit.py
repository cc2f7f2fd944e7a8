"""Promised against realised risk: a point per method that states its risk (MARS2's α, the
certified rule's δ), its rate what the risk audit counts and `mars audit` gives; none without
one."""

from __future__ import annotations

import numpy as np
import pytest

from mars.live.audit import audit_paths
from mars.report import collect
from mars.report.data.audit import promise_frame, risk_audit
from mars.report.figures import audit

from ..trees import DATASET, MODEL, SETTINGS, write_method


@pytest.mark.slow
def test_a_point_per_promise_counted_as_the_risk_audit_and_mars_audit(tree, tmp_path):
    results, _, _ = tree
    fo = audit.fig_promise(collect([results]), tmp_path, ("png",))
    assert fo is not None and fo.stem == "fig-promise"
    assert (tmp_path / "fig-promise.png").stat().st_size > 1000
    df = fo.data.set_index(["model", "method"])
    cert = df.loc[(MODEL, "sc-mars-cert")]
    assert cert.promise == "delta" and cert.promised_pct == pytest.approx(100 * SETTINGS["delta"])
    table = risk_audit(collect([results])).set_index(["model", "method"])
    assert (cert.runs, cert.differ) == tuple(table.loc[(MODEL, "sc-mars-cert"), ["runs", "differ"]])
    assert "sc-mars-cal" not in set(fo.data.method)  # it states no risk of its own
    run = next(r for r in collect([results]).runs if r.model == MODEL and "sc" in r.overall)
    mine = audit_paths([run.path]).summary()["methods"]["sc-mars-cert"]
    assert (mine["audits"], mine["disagreements"]) == (cert.runs, cert.differ)


def test_no_promise_no_figure(tmp_path):
    run = tmp_path / "results" / MODEL / DATASET / "default" / "sim"
    rng = np.random.default_rng(3)
    for m in ("sc", "sc-mars-cal"):
        write_method(run, m, rng, SETTINGS)
    assert promise_frame(collect([tmp_path / "results"])).empty
    assert audit.fig_promise(collect([tmp_path / "results"]), tmp_path) is None


def test_more_pools_than_marks_reuse_the_marks(tmp_path):
    """Nine pools (the default run's three models × three datasets) and eight marks: every pool
    is drawn, the ninth with the first pool's mark."""
    rng = np.random.default_rng(5)
    pools = [(f"model{i // 3}", f"dataset{i % 3}") for i in range(9)]
    for model, dataset in pools:
        run = tmp_path / "results" / model / dataset / "default" / "sim"
        for m in ("sc", "sc-mars-cert"):
            write_method(run, m, rng, SETTINGS)
    fo = audit.fig_promise(collect([tmp_path / "results"]), tmp_path, ("png",))
    assert fo is not None and (tmp_path / "fig-promise.png").stat().st_size > 1000
    assert set(zip(fo.data.model, fo.data.dataset)) == set(pools)
