"""What the tables share: the model shown once per model, and the sign and note of a method that
runs fewer traces than the budget."""

from __future__ import annotations

import numpy as np

from mars.report import collect
from mars.report.tables import all_tables
from mars.report.tables.base import breaks_by_model, model_column

from ..trees import DATASET, MODEL, SETTINGS, overall, write_method


def test_model_column_and_breaks():
    models = ["a", "a", "b", "b", "b", "c"]
    assert model_column(models) == ["a", "", "b", "", "", "c"]
    assert breaks_by_model(models) == [0, 2, 5]


def test_a_method_on_fewer_traces_says_what_its_savings_are_against(tmp_path):
    """Issue 35 (10): single-sac's savings are against its one trace; the tables mark them and
    say what share of the full-budget vote's tokens it spends."""
    rng = np.random.default_rng(3)
    run = tmp_path / "results" / MODEL / DATASET / "default" / "sim"
    for m in ("sc", "single-sac", "sc-mars-cal"):
        write_method(run, m, rng, SETTINGS)
    results = collect([tmp_path / "results"])
    spent = 100 * overall(tmp_path / "results", MODEL, "default", "single-sac")["tokens_mean"]
    spent /= overall(tmp_path / "results", MODEL, "default", "sc")["tokens_mean"]
    tables = {t.key: t for t in all_tables(results, "mars report")}
    for key in ("table3-full-toy-model-co", "table-oracle-share", "table-probe-cost"):
        md = tables[key].markdown()
        (row,) = [line for line in md.splitlines() if "`single-sac`" in line]
        (mars,) = [line for line in md.splitlines() if "`sc-mars-cal`" in line]
        assert "†" in row and "†" not in mars, key
        assert (
            "- † single-sac runs 1 trace of each sample: its savings are against that trace run "
            "to the end, not against the full-budget vote (sc); it spends "
            f"{spent:.1f} % of sc's tokens."
        ) in md, key
        assert "vote_share_pct" not in tables[key].csv()  # what the table shows, not its data
