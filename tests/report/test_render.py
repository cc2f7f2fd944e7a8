"""The report folder: every table and figure with its files, the index (results first, the
provenance last, the command once), the folder owned as a whole (a second report replaces the
first, a failed one leaves it, a user's file is never replaced), and the command line."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from mars.report import render_report
from mars.report.fmt import read_table_csv

from .trees import DATASET, MODEL, MODEL2, assert_one_line, make_tree, report_cli, small_tree


def test_every_table_carries_its_commands(tree):
    _results, out, rep = tree
    for t in rep.tables:
        for ext in ("md", "tex", "csv"):
            text = (out / "tables" / f"{t.key}.{ext}").read_text()
            assert "mars report" in text and "mars simulate" in text, (t.key, ext)
    tex = (out / "tables" / "table2-parallel-probe.tex").read_text()
    assert "--pp-conv 4" in tex


STEMS = [
    "fig1-left-savings",
    "fig1-right-example",
    "fig2-pp-failure",
    "fig4-ablations",
    "fig-frontier",
    "fig-latency",
    "fig-two-axis",
]


def test_figures_without_pool(tree):
    _, out, rep = tree
    # no trade-off: no sweep here; promised against realised risk: the certified rule beside SC
    assert [f.stem for f in rep.figures] == [*STEMS, "fig-promise"]
    for f in rep.figures:
        for ext in ("png", "pdf"):
            p = out / "figures" / f"{f.stem}.{ext}"
            assert p.stat().st_size > 1000
        assert f"figures/{f.stem}.png" in rep.index.read_text()
    # the pool-level figures say why they are empty
    notes = {f.stem: " ".join(f.notes) for f in rep.figures}
    assert "skipped" in notes["fig1-right-example"] and "skipped" in notes["fig2-pp-failure"]


def test_every_figure_is_produced(simulated):
    _, out, rep = simulated
    assert [f.stem for f in rep.figures] == [*STEMS, "fig-tradeoff", "fig-promise"]
    for f in rep.figures:
        assert not any("skipped" in n or "warning" in n for n in f.notes), (f.stem, f.notes)
        for ext in ("png", "csv"):
            assert (out / "figures" / f"{f.stem}.{ext}").stat().st_size > 100
    for stem in ("table1-main", "table2-parallel-probe", "table-risk-audit", "table-oracle-share"):
        assert (out / "tables" / f"{stem}.md").exists()


def test_the_csvs_are_the_frames(simulated):
    """Every table's CSV and every figure's CSV hold the frame it was made from, unrounded."""
    _, out, rep = simulated
    for t in rep.tables:
        if t.data.columns.empty:  # a table of nothing (no analysis with a fit): no columns
            text = (out / "tables" / f"{t.key}.csv").read_text()
            assert [line for line in text.splitlines() if not line.startswith("#")] == [""]
            continue
        back = read_table_csv(out / "tables" / f"{t.key}.csv")
        assert list(back.columns) == list(t.data.columns) and len(back) == len(t.data), t.key
        numbers = t.data.select_dtypes("number").columns
        assert np.allclose(back[numbers].to_numpy(float), t.data[numbers].to_numpy(float),
                           rtol=1e-12, equal_nan=True), t.key  # fmt: skip
    for f in rep.figures:
        back = pd.read_csv(out / "figures" / f"{f.stem}.csv")
        assert list(back.columns) == list(f.data.columns) and len(back) == len(f.data), f.stem


def test_cli_report(tmp_path):
    from mars.cli import main

    results = make_tree(tmp_path)
    out = tmp_path / "out"
    assert main(["report", str(results), "--out", str(out), "--no-figures"]) == 0
    assert (out / "report.md").exists() and (out / "tables" / "table1-main.tex").exists()
    assert not (out / "figures").exists()
    assert main(["report", str(tmp_path / "missing"), "--out", str(out)]) == 2


def test_a_second_report_replaces_the_first(tmp_path):
    """Issue 19 (15): no table of an earlier report survives; user files are never replaced."""
    results = make_tree(tmp_path)
    out = tmp_path / "out"
    assert report_cli(results, out).exit_code == 0
    first = sorted(p.name for p in (out / "tables").iterdir())
    assert any("other-model" in n for n in first)
    # the second report covers one model only: it holds what a fresh report holds
    shutil.rmtree(results / MODEL2)
    assert report_cli(results, out).exit_code == 0
    assert report_cli(results, tmp_path / "fresh").exit_code == 0
    second = sorted(p.name for p in (out / "tables").iterdir())
    assert second == sorted(p.name for p in (tmp_path / "fresh" / "tables").iterdir())
    assert not any("other-model" in n for n in second)
    assert MODEL2 not in (out / "report.md").read_text()
    shutil.rmtree(tmp_path / "fresh")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "results"]  # nothing aside
    # a failing report leaves the previous one as it was
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    (results / MODEL / DATASET / "default" / "sim" / "sc" / "overall.json").write_text("[]")
    assert_one_line(report_cli(results, out), "overall.json")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    # a folder holding anything a report does not write is refused, the file kept
    notes = out / "notes.txt"
    notes.write_text("mine")
    assert_one_line(report_cli(make_tree(tmp_path / "t2"), out), "notes.txt")
    assert notes.read_text() == "mine" and (out / "report.md").is_file()
    # so is a results folder given as --out
    assert_one_line(report_cli(results, results), "--out")
    assert (results / MODEL / DATASET / "default" / "sim" / "sc").is_dir()


def test_the_index_puts_the_results_first_and_the_provenance_last(tree):
    """Issue 35 (10): Table 1 comes before the commands and inputs that made it, not after
    ~100 lines of them."""
    _, out, rep = tree
    index = (out / "report.md").read_text()
    table1 = index.index(rep.tables[0].title)
    assert table1 < index.index("## Figures") < index.index("## Provenance")
    provenance = index[index.index("## Provenance") :]
    assert rep.command in provenance and "### Inputs" in provenance
    assert "mars simulate " in provenance and "mars simulate " not in index[:table1]
    assert len(index[:table1].splitlines()) < 12


def test_the_index_shows_the_report_command_once(tree):
    """Issue 25 (12): report.md does not repeat the `mars report` command per table and figure;
    the table files keep theirs."""
    _, out, rep = tree
    index = (out / "report.md").read_text()
    assert index.count(rep.command) == 1
    assert all(rep.command in (out / "tables" / f"{t.key}.md").read_text() for t in rep.tables)


def test_a_symlinked_out_keeps_its_link(tmp_path):
    """The folder a symlinked --out points to is replaced; the link stays."""
    results = small_tree(tmp_path)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    for _ in range(2):
        assert report_cli(results, tmp_path / "link").exit_code == 0
    assert (tmp_path / "link").is_symlink() and (tmp_path / "real" / "report.md").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real", "results"]


@pytest.mark.slow
def test_synthetic_results_say_so(synthetic, tmp_path):
    """Issue 25 (3): every table, figure and the index of a synthetic run says "synthetic", with
    the model the preset imitates; the index holds the report command once (issue 25, 12)."""
    results = synthetic
    out = tmp_path / "report"
    rep = render_report([results], out, formats=("png",))
    index = (out / "report.md").read_text()
    first = index.split("## Tables")[0]
    assert "Synthetic data" in first and "Qwen/Qwen3-8B (preset qwen3-8b)" in first
    for t in rep.tables:
        for ext in ("md", "tex", "csv", "html"):
            assert "Synthetic data" in (out / "tables" / f"{t.key}.{ext}").read_text(), t.key
    for f in rep.figures:
        assert "Synthetic data" in f.caption and "Synthetic data" in f.footer, f.stem
        assert f.caption in index
    # the report command once, not once per table and figure
    assert index.count("mars report ") == 1
