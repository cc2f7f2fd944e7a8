"""The results tables show their frames' numbers, rounded: Table 1, Table 2 (the best accuracy
bold), the full tables (one per model, every run a block) and both cost axes."""

from __future__ import annotations

import json

import numpy as np

from mars.report import collect, render_report
from mars.report.fmt import md_escape
from mars.report.tables import table_latency, table_main, table_pp

from ..trees import (
    DATASET,
    MODEL,
    SETTINGS,
    close,
    md_rows,
    overall,
    read_csv,
    small_tree,
    write_method,
)


def test_table1_shows_the_numbers_rounded(tree):
    results, out, _ = tree
    df = read_csv(out / "tables" / "table1-main.csv")
    assert len(df) == 2
    rows = md_rows(out / "tables" / "table1-main.md")
    for (_, r), cells in zip(df.iterrows(), rows):
        expect = [
            f"{r[c]:.1f}" + ("%" if c.endswith(("savings_pct", "savings_paid_pct")) else "")
            for c in df.columns[2:]
        ]
        assert cells[2:] == expect
    assert [c[0] for c in rows] == list(df.model)  # one pool per model: each named
    t = table_main(collect([results]), "mars report")
    assert t.breaks == [0, 1] and t.commands[0] == "mars report"


def test_table2_names_every_u_and_bolds_the_best(tree):
    results, out, _ = tree
    md = (out / "tables" / "table2-parallel-probe.md").read_text()
    assert "PP (u=3)" in md and "PP (u=4)" in md
    t = table_pp(collect([results]))
    for row, (_, rec) in zip(t.rows, t.data.iterrows()):
        accs = [rec[c] for c in t.data.columns if c.endswith("accuracy_pct")]
        bold = [c.value for c in row if c.bold]
        assert bold and all(round(b, 1) == round(max(accs), 1) for b in bold)
    tex = (out / "tables" / "table2-parallel-probe.tex").read_text()
    assert "--pp-conv 4" in tex


def test_full_tables_every_method(tree):
    results, out, _ = tree
    assert len(list((out / "tables").glob("table[3-9]-full-*.csv"))) == 2  # one per model
    for f in (out / "tables").glob("table[3-9]-full-*.csv"):
        df = read_csv(f)
        for _, r in df.iterrows():
            assert close(
                r.accuracy_pct, overall(results, r.model, r.setting, r.method)["accuracy_pct"]
            )
        md = f.with_suffix(".md").read_text()
        assert "`sc-mars-oracle-cal`" in md and "MARS (oracle q)" in md
        tex = f.with_suffix(".tex").read_text()
        assert "{,}" in tex  # thousands separators in LaTeX


def test_runs_with_other_sampling_settings_get_their_own_rows(tmp_path):
    """Issue 25 (2): a setting simulated at another budget is never mixed into the main rows."""
    results = small_tree(tmp_path)
    other = results / MODEL / DATASET / "b512" / "sim"
    rng = np.random.default_rng(9)
    for m in ("sc", "dco", "sc-mars2"):
        write_method(other, m, rng, {**SETTINGS, "budget": 512})
    rep = render_report([results], tmp_path / "out", figures=False)
    t1 = read_csv(tmp_path / "out" / "tables" / "table1-main.csv").iloc[0]
    main = results / MODEL / DATASET / "default" / "sim"
    for col in ("sc.accuracy_pct", "dco.accuracy_pct"):  # from the budget-16 run only
        m, key = col.split(".")
        assert close(t1[col], json.loads((main / m / "overall.json").read_text())[key])
    full = (tmp_path / "out" / "tables" / "table3-full-toy-model-co.md").read_text()
    assert f"{md_escape(DATASET)} · b512 (budget 512)" in full
    share = read_csv(tmp_path / "out" / "tables" / "table-oracle-share.csv")
    assert "sc-mars2" not in set(share.method)
    assert {r.setting for r in rep.results.comparable_runs(MODEL, DATASET)} == {"default"}


def test_latency_says_when_no_run_used_the_probe_protocol(tree, simulated):
    t = table_latency(collect([tree[0]]))
    assert t.caption.endswith("No run here used that protocol.")
    assert all(r[5].value == "–" for r in t.rows)  # no Parallel-Probe row printed
    t = table_latency(simulated[2].results)
    assert len(t.rows) == len(t.data) and t.breaks[0] == 0
