"""The oracle and probe-cost tables: every early-stopping method once per pool, the oracle-first
stop named as what it is."""

from __future__ import annotations

import numpy as np

from mars.report import collect
from mars.report.tables import table_oracle, table_oracle_share, table_probe_cost

from ..trees import DATASET, MODEL, SETTINGS, write_method


def test_oracle_tables_call_oracle_first_what_it_is(tree):
    _, out, _ = tree
    share = (out / "tables" / "table-oracle-share.md").read_text()
    assert "oracle bound" not in share and "Share of oracle-first" in share


def test_each_pool_opens_a_block(tree):
    results = collect([tree[0]])
    for make in (table_oracle_share, table_probe_cost):
        t = make(results)
        assert len(t.rows) == len(t.data) and len(t.breaks) == 2
        assert [i for i, r in enumerate(t.rows) if r[1].value] == t.breaks
    t = table_oracle(results)
    assert len(t.rows) == 2 and all(len(r) == len(t.headers) for r in t.rows)


def test_probe_cost_says_when_no_run_records_them(tmp_path):
    run = tmp_path / "results" / MODEL / DATASET / "default" / "sim"
    rng = np.random.default_rng(4)
    for m in ("sc", "sc-mars-cal", "sc-pp"):
        write_method(run, m, rng, SETTINGS, probes=False)
    t = table_probe_cost(collect([tmp_path / "results"]))
    assert t.notes == [
        "No run records probe costs (published pools carry none); generate a pool with "
        "`mars generate` to measure them."
    ]
    assert [r[4].md() for r in t.rows] == ["—", "—"]
