"""`mars report`: tables equal the simulate outputs they came from, figures are produced and stable,
LaTeX is escaped. A hand-made results tree needs nothing else; the fixture tests simulate the
synthetic-5q pool from ../shared into tmp_path (skipped when ../shared is absent)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mars.report import collect, discover, figures, render_report
from mars.report.collect import ReportError, split_label
from mars.report.fmt import md_escape, read_table_csv, tex_escape

SHARED = Path(__file__).resolve().parents[2] / "shared"
SYNTH5Q = SHARED / "fixtures" / "reference-sim" / "synthetic-5q" / "pool.parquet"
needs_shared = pytest.mark.skipif(not SYNTH5Q.exists(), reason="needs ../shared reference fixtures")

# names with every LaTeX special a label is likely to carry
MODEL = "toy_model&co"
DATASET = "set_50%#1"
MODEL2 = "other-model"

SETTINGS = {
    "budget": 16,
    "iterations": 4,
    "warmup": 16,
    "seed": 42,
    "window": 2048,
    "gamma": 1.0,
    "ucb_z": 1.0,
    "gamma_min": 0.5,
    "pp_conv": 3,
    "pp_warmup": 4,
    "pp_patience": 2,
    "delta": 0.05,
    "consensus": 0.9,
    "spacing": 2048,
}
METHODS = [
    "sc",
    "sc-mars",
    "sc-mars-cal",
    "sc-mars-oracle",
    "sc-mars-oracle-cal",
    "sc-mars-cert",
    "sc-mars-oracle-cert",
    "dco",
    "dco-mars",
    "dco-mars-cal",
    "dco-mars-oracle",
    "sc-pp",
    "oracle-first",
    "oracle-last",
    "oracle-dco-first",
    "oracle-dco-last",
]
QIDS = [0, 1, 2]
ITERS = 4


# -- a hand-made results tree ---------------------------------------------------------------------
def _write_method(run_dir: Path, method: str, rng, settings: dict, answers=None, probes=True):
    d = run_dir / method
    d.mkdir(parents=True)
    baseline = method in ("sc", "dco")
    pq_rows, it_rows = [], []
    for qid in QIDS:
        base = float(rng.integers(50_000, 90_000))
        sav = 0.0 if baseline else float(rng.uniform(5, 60))
        acc = float(rng.choice([0.0, 0.25, 0.5, 0.75, 1.0]))
        wp = (
            sav - float(rng.uniform(0.1, 2.0))
            if probes and not baseline
            else (0.0 if baseline else np.nan)
        )
        pq_rows.append(
            {
                "qid": qid,
                "accuracy": acc,
                "tokens_mean": base * (1 - sav / 100),
                "baseline_tokens_mean": base,
                "savings_pct": sav,
                "stop_position_mean": 8192.0,
                "accuracy_std": 0.5,
                "n_iterations": ITERS,
                "savings_with_probes_pct": wp,
                "probe_tokens_mean": float(rng.uniform(100, 900)) if probes else np.nan,
                "gamma": 1.0,
                "stopped_early": 0 if baseline else ITERS,
                "stopped_by_budget": ITERS if baseline else 0,
                "ground_truth": "7",
            }
        )
        for i in range(ITERS):
            ans = answers(qid, i) if answers else "7"
            it_rows.append(
                {
                    "qid": qid,
                    "iteration": i,
                    "answer": ans,
                    "correct": ans == "7",
                    "tokens": int(base),
                    "baseline_tokens": int(base),
                    "stop_position": 8192 if not baseline else 14336,
                    "stopped_by": "budget" if baseline else "margin",
                    "probe_tokens": 10.0,
                }
            )
    pq = pd.DataFrame(pq_rows)
    pq.to_csv(d / "per_question.csv", index=False)
    pd.DataFrame(it_rows).to_csv(d / "per_iteration.csv", index=False)
    ov = {
        "method": method,
        "n_questions": len(pq),
        "accuracy_pct": float(100 * pq.accuracy.mean()),
        "savings_pct": float(pq.savings_pct.mean()),
        "savings_with_probes_pct": None
        if pq.savings_with_probes_pct.isna().any()
        else float(pq.savings_with_probes_pct.mean()),
        "tokens_mean": float(pq.tokens_mean.mean()),
        "baseline_tokens_mean": float(pq.baseline_tokens_mean.mean()),
        "stop_position_mean": 8192.0,
        "settings": settings,
        "input": {"source": "/nonexistent/pool.parquet", "checksum": "x"},
        "versions": {},
    }
    (d / "overall.json").write_text(json.dumps(ov, indent=2))


def make_tree(root: Path) -> Path:
    rng = np.random.default_rng(7)
    results = root / "results"
    for model in (MODEL, MODEL2):
        run = results / model / DATASET / "default" / "sim"
        for m in METHODS:
            answers = None
            if (
                m == "sc-mars-cert"
            ):  # one run of 12 differs from the full-budget vote: 8.3 % > δ = 5 %
                answers = lambda q, i: "8" if (q, i) == (1, 2) else "7"  # noqa: E731
            _write_method(run, m, rng, SETTINGS, answers, probes=model == MODEL)
        u4 = results / model / DATASET / "pp-u4" / "sim"
        _write_method(u4, "sc-pp", rng, {**SETTINGS, "pp_conv": 4})
    return results


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    results = make_tree(root)
    out = root / "report"
    rep = render_report([results], out)
    return results, out, rep


def overall(results: Path, model: str, setting: str, method: str) -> dict:
    return json.loads(
        (results / model / DATASET / setting / "sim" / method / "overall.json").read_text()
    )


def read_csv(path: Path) -> pd.DataFrame:
    return read_table_csv(path)


def md_rows(path: Path) -> list[list[str]]:
    """Body rows of the first Markdown table in a file."""
    lines = [line for line in path.read_text().splitlines() if line.startswith("|")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines[2:]]


def close(a, b, tol=1e-9):
    if a is None or (isinstance(a, float) and np.isnan(a)):
        return b is None or (isinstance(b, float) and np.isnan(b))
    return abs(float(a) - float(b)) <= tol * max(1.0, abs(float(b)))


# -- discovery ------------------------------------------------------------------------------------
def test_labels_from_paths(tree):
    results, _, rep = tree
    labels = sorted(r.label for r in rep.results.runs)
    assert labels == sorted(
        [
            f"{MODEL}/{DATASET}/default",
            f"{MODEL}/{DATASET}/pp-u4",
            f"{MODEL2}/{DATASET}/default",
            f"{MODEL2}/{DATASET}/pp-u4",
        ]
    )
    assert split_label(["m", "d", "s", "sim"]) == ("m", "d", "s")
    assert split_label(["m", "d"]) == ("m", "d", "default")
    assert split_label(["only"]) == ("-", "only", "default")
    assert split_label(["simulate", "m", "d", "s"]) == (
        "m",
        "d",
        "s",
    )  # the workflow's results/simulate/...
    # a run directory given directly, with and without --label
    run_dir = results / MODEL / DATASET / "default" / "sim"
    (r,) = discover(run_dir)
    assert (r.model, r.dataset, r.setting) == (MODEL, DATASET, "default")  # parts after "results/"
    (r,) = discover(run_dir, label="m1/d1/s1")
    assert (r.model, r.dataset, r.setting) == ("m1", "d1", "s1")
    with pytest.raises(ReportError):
        collect([run_dir, run_dir])  # same label twice


# -- tables equal their sources -------------------------------------------------------------------
def test_table1_numbers_equal_overall(tree):
    results, out, _ = tree
    df = read_csv(out / "tables" / "table1-main.csv")
    assert len(df) == 2
    rows = md_rows(out / "tables" / "table1-main.md")
    for (_, r), cells in zip(df.iterrows(), rows):
        for col in df.columns[2:]:
            method, key = col.split(".")
            assert close(r[col], overall(results, r.model, "default", method)[key]), col
        # the Markdown shows the same numbers, rounded
        expect = [
            f"{r[c]:.1f}" + ("%" if c.endswith("savings_pct") else "") for c in df.columns[2:]
        ]
        assert cells[2:] == expect


def test_table2_parallel_probe_per_u(tree):
    results, out, _ = tree
    df = read_csv(out / "tables" / "table2-parallel-probe.csv")
    assert {"sc-pp-u3.accuracy_pct", "sc-pp-u4.accuracy_pct", "sc-mars-cal.savings_pct"} <= set(
        df.columns
    )
    for _, r in df.iterrows():
        assert close(
            r["sc-pp-u3.accuracy_pct"],
            overall(results, r.model, "default", "sc-pp")["accuracy_pct"],
        )
        assert close(
            r["sc-pp-u4.savings_pct"], overall(results, r.model, "pp-u4", "sc-pp")["savings_pct"]
        )
        assert close(
            r["sc-mars-cal.accuracy_pct"],
            overall(results, r.model, "default", "sc-mars-cal")["accuracy_pct"],
        )
    md = (out / "tables" / "table2-parallel-probe.md").read_text()
    assert "PP (u=3)" in md and "PP (u=4)" in md and "**" in md


def test_appendix_tables_every_method(tree):
    results, out, _ = tree
    assert len(list((out / "tables").glob("table[3-9]-full-*.csv"))) == 2  # one per model
    for f in (out / "tables").glob("table[3-9]-full-*.csv"):
        df = read_csv(f)
        model = df.model.iloc[0]
        default = df[df.setting == "default"]
        assert set(default.method) == set(METHODS)
        for _, r in df.iterrows():
            ov = overall(results, model, r.setting, r.method)
            assert close(r.accuracy_pct, ov["accuracy_pct"])
            assert close(r.tokens_mean, ov["tokens_mean"])
            if r.method in ("sc", "dco"):
                assert np.isnan(r.savings_pct)  # the paper's "---"
            else:
                assert close(r.savings_pct, ov["savings_pct"])
        md = f.with_suffix(".md").read_text()
        assert "`sc-mars-oracle-cal`" in md and "MARS (oracle q)" in md
        tex = f.with_suffix(".tex").read_text()
        assert "{,}" in tex  # thousands separators in LaTeX


def test_oracle_bounds_share(tree):
    results, out, _ = tree
    df = read_csv(out / "tables" / "table-oracle-bounds.csv")
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


def test_probe_cost_table(tree):
    results, out, _ = tree
    df = read_csv(out / "tables" / "table-probe-cost.csv")
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


def test_risk_audit(tree):
    _results, out, _ = tree
    df = read_csv(out / "tables" / "table-risk-audit.csv")
    cert = df[(df.method == "sc-mars-cert") & (df.model == MODEL)].iloc[0]
    assert (cert.runs, cert.differ, cert.reference) == (len(QIDS) * ITERS, 1, "sc")
    assert close(cert.rate_pct, 100 / 12)
    assert close(cert.delta, SETTINGS["delta"])
    assert close(cert.worst_question_pct, 25.0)
    assert cert.questions_over_delta == 1
    oc = df[(df.method == "sc-mars-oracle-cert") & (df.model == MODEL)].iloc[0]
    assert oc.differ == 0
    assert set(df[df.method == "dco-mars-cal"].reference) == {"dco"}
    md = (out / "tables" / "table-risk-audit.md").read_text()
    assert "violated" in md and "holds" in md and "no guarantee" in md


def test_every_table_carries_its_commands(tree):
    _results, out, rep = tree
    for t in rep.tables:
        for ext in ("md", "tex", "csv"):
            text = (out / "tables" / f"{t.key}.{ext}").read_text()
            assert "mars report" in text and "mars simulate" in text, (t.key, ext)
    tex = (out / "tables" / "table2-parallel-probe.tex").read_text()
    assert "--pp-conv 4" in tex


# -- LaTeX escaping -------------------------------------------------------------------------------
def test_tex_escape_unit():
    assert (
        tex_escape("a_b & 50% #1 {x} $y ~^\\")
        == r"a\_b \& 50\% \#1 \{x\} \$y \textasciitilde{}\textasciicircum{}\textbackslash{}"
    )
    assert tex_escape("γ=1") == r"$\gamma$=1"


def test_latex_is_escaped(tree):
    _, out, rep = tree
    for t in rep.tables:
        tex = (out / "tables" / f"{t.key}.tex").read_text()
        body = [line for line in tex.splitlines() if not line.startswith("%")]
        ncol = len(t.headers)
        for line in body:
            assert not re.search(r"(?<!\\)%", line), line  # no bare % (a LaTeX comment)
            assert not re.search(r"(?<!\\)_", line), line  # no bare _ (math subscript)
            assert not re.search(r"(?<!\\)#", line), line
            assert line.isascii(), line  # pdflatex-safe: γ, δ, —, · are written as LaTeX
            if line.endswith(r"\\") and "multicolumn" not in line:
                assert len(re.findall(r"(?<!\\)&", line)) == ncol - 1, (
                    line
                )  # & only separates columns
        joined = "\n".join(body)
        assert (
            joined.count(r"\begin{tabular}") == 1
            and r"\toprule" in joined
            and r"\bottomrule" in joined
        )
    t1 = (out / "tables" / "table1-main.tex").read_text()
    assert tex_escape(MODEL) in t1 and tex_escape(DATASET) in t1
    assert re.search(r"\d\\%", t1)  # savings carry an escaped percent


def test_markdown_tables_are_rectangular(tree):
    _, out, rep = tree
    for t in rep.tables:
        lines = [
            line
            for line in (out / "tables" / f"{t.key}.md").read_text().splitlines()
            if line.startswith("|")
        ]
        widths = {len(re.split(r"(?<!\\)\|", line)) for line in lines}
        assert len(widths) == 1, t.key


def test_html_tables_hold_the_markdown_cells(tree):
    """Each table also as a web page (what `snakemake --report` shows inline): the title and,
    row by row, the cells of the Markdown table, escaped."""
    from html import escape
    from html.parser import HTMLParser

    class Cells(HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows, self.cell = [], None

        def handle_starttag(self, tag, attrs):
            if tag == "tr":
                self.rows.append([])
            elif tag == "td":
                self.cell = ""

        def handle_endtag(self, tag):
            if tag == "td":
                self.rows[-1].append(self.cell)
                self.cell = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell += data

    _, out, rep = tree
    assert rep.tables
    for t in rep.tables:
        page = (out / "tables" / f"{t.key}.html").read_text()
        assert page.startswith("<!DOCTYPE html>") and f"<h3>{escape(t.title)}</h3>" in page
        parser = Cells()
        parser.feed(page)
        md = [
            [c.replace("**", "").replace("\\|", "|") for c in row]
            for row in md_rows(out / "tables" / f"{t.key}.md")
        ]
        assert [r for r in parser.rows if r] == (md if t.rows else [["(no data)"]]), t.key


def test_figure_captions_as_html(tree):
    """Each figure's caption beside it as an HTML fragment (the workflow's HTML report shows
    it under the figure): the title, the caption and the notes, escaped."""
    from html import escape

    _, out, rep = tree
    for f in rep.figures:
        text = (out / "figures" / f"{f.stem}.caption.html").read_text()
        assert f"<b>{escape(f.title)}</b>" in text and escape(f.caption) in text
        assert all(f"<li>{escape(n)}</li>" in text for n in f.notes)


# -- figures --------------------------------------------------------------------------------------
def test_figures_without_pool(tree):
    results, out, rep = tree
    stems = [f.stem for f in rep.figures]
    assert stems == [
        "fig1-left-savings",
        "fig1-right-example",
        "fig2-pp-failure",
        "fig4-ablations",
        "fig-frontier",
        "fig-latency",
    ]
    for f in rep.figures:
        for ext in ("png", "pdf"):
            p = out / "figures" / f"{f.stem}.{ext}"
            assert p.stat().st_size > 1000
        assert f"figures/{f.stem}.png" in rep.index.read_text()
    # the pool-level figures say why they are empty
    notes = {f.stem: " ".join(f.notes) for f in rep.figures}
    assert "skipped" in notes["fig1-right-example"] and "skipped" in notes["fig2-pp-failure"]
    # Fig. 1 left plots the overall savings (mean of per-question savings)
    df = pd.read_csv(out / "figures" / "fig1-left-savings.csv")
    for _, r in df.iterrows():
        ov = overall(results, r.model, r.setting, r.method)
        assert close(r["mean"], ov["savings_pct"], 1e-9)
        assert r.ci_low <= r["mean"] <= r.ci_high
    # Fig. 4a: per-question difference sc-mars-cal − sc-mars
    d4 = pd.read_csv(out / "figures" / "fig4-ablations.csv")
    a = d4[(d4.panel == "a") & (d4.pipeline == "SC") & (d4.model == MODEL)].iloc[0]
    expect = (
        overall(results, MODEL, "default", "sc-mars-cal")["savings_pct"]
        - overall(results, MODEL, "default", "sc-mars")["savings_pct"]
    )
    assert close(a["mean"], expect, 1e-9)


def test_figures_are_byte_stable(tree, tmp_path):
    from mars.report.figures import fig_ablations, fig_savings

    results, out, _ = tree
    res = collect([results])  # a fresh load, as a second `mars report` would
    for f in (fig_savings(res, tmp_path), fig_ablations(res, tmp_path)):
        for p in f.files:
            assert p.read_bytes() == (out / "figures" / p.name).read_bytes(), p.name
    png = (out / "figures" / "fig1-left-savings.png").read_bytes()
    assert b"Software" not in png and b"matplotlib" not in png.lower()
    pdf = (out / "figures" / "fig1-left-savings.pdf").read_bytes()
    assert b"CreationDate" not in pdf


def test_cli_report(tmp_path):
    from mars.cli import main

    results = make_tree(tmp_path)
    out = tmp_path / "out"
    assert main(["report", str(results), "--out", str(out), "--no-figures"]) == 0
    assert (out / "report.md").exists() and (out / "tables" / "table1-main.tex").exists()
    assert not (out / "figures").exists()
    assert main(["report", str(tmp_path / "missing"), "--out", str(out)]) == 2


# -- with a real simulation of the synthetic-5q pool ----------------------------------------------
@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """synthetic-5q simulated (main setting, a Parallel-Probe variant, the trade-off settings on
    two questions) and analysed, as the workflow does, then reported."""
    if not SYNTH5Q.exists():
        pytest.skip("needs ../shared reference fixtures")
    from mars.analyze import analyze
    from mars.method.registry import parse_methods, sweep_settings
    from mars.results import write_methods
    from mars.simulate import Settings, simulate_pool

    root = tmp_path_factory.mktemp("sim")
    res_root = root / "results"
    runs = [
        ("default", "all", Settings(budget=32, iterations=4), None),
        ("pp-u4", "sc-pp", Settings(budget=32, iterations=4, pp_conv=4), None),
    ]
    for i, (knobs, methods) in enumerate(sweep_settings(), 1):
        s = Settings(budget=16, iterations=2, **knobs)
        runs.append((f"tradeoff-{i}", ",".join(methods), s, [0, 1]))
    for setting, methods, s, questions in runs:
        ms = parse_methods(methods)
        results = simulate_pool(SYNTH5Q, ms, s, questions=questions)
        out = res_root / "synthetic" / "synth-5q" / setting / "sim"
        write_methods(out, [m.name for m in ms], results, s.to_dict(), str(SYNTH5Q))
    analyze(
        SYNTH5Q,
        res_root / "synthetic" / "synth-5q" / "default" / "sim",
        root / "analysis",
        label="synthetic/synth-5q/default",
        q_questions=3,
    )
    out = root / "report"
    rep = render_report([res_root], out, analyses=[root / "analysis"], formats=("png",))
    return res_root, out, rep


@needs_shared
def test_every_figure_is_produced(simulated):
    _, out, rep = simulated
    stems = [f.stem for f in rep.figures]
    assert stems == [
        "fig1-left-savings",
        "fig1-right-example",
        "fig2-pp-failure",
        "fig4-ablations",
        "fig-frontier",
        "fig-latency",
        "fig-tradeoff",
    ]
    for f in rep.figures:
        assert not any("skipped" in n or "warning" in n for n in f.notes), (f.stem, f.notes)
        for ext in ("png", "csv"):
            assert (out / "figures" / f"{f.stem}.{ext}").stat().st_size > 100
    d4 = pd.read_csv(out / "figures" / "fig4-ablations.csv")
    assert set(d4.panel) == {"a", "b", "c", "d"}
    for stem in ("table1-main", "table2-parallel-probe", "table-risk-audit", "table-oracle-share"):
        assert (out / "tables" / f"{stem}.md").exists()
    # both axes: every method of every run, sequential tokens never above total tokens
    lat = read_table_csv(out / "tables" / "table-latency.csv")
    assert len(lat) == sum(
        len(r.methods) for p in rep.results.pairs for r in rep.results.runs_of(*p)
    )
    assert (lat.seq_tokens_mean <= lat.tokens_mean + 1e-9).all() and lat.pp_Acc.isna().all()
    points = pd.read_csv(out / "figures" / "fig-latency.csv")
    assert set(points.method) == set(lat.method) and set(points.family) >= {"full budget"}
    frontier = pd.read_csv(out / "figures" / "fig-frontier.csv")
    assert {"sc-mars-cal", "sc-mars2", "sc-pp", "dco-mars2"} <= set(frontier.method)
    assert frontier.oracle_savings_pct.notna().all()
    share = read_table_csv(out / "tables" / "table-oracle-share.csv")
    row = share[share.method == "sc-mars-cal"].iloc[0]
    assert row.share_of_oracle_pct == pytest.approx(100 * row.savings_pct / row.oracle_savings_pct)


@needs_shared
def test_tradeoff_points_are_the_runs(simulated):
    """Every trade-off point is a run's overall.json: a curve per declared sweep (its knob's
    values in order), the single points beside them, none from another sampling."""
    from mars.method.registry import METHODS as REGISTRY
    from mars.method.registry import SWEEP_POINTS

    res_root, out, _ = simulated
    df = pd.read_csv(out / "figures" / "fig-tradeoff.csv", comment="#")
    assert set(df.setting) <= {f"tradeoff-{i}" for i in range(1, 7)}
    for r in df.itertuples():
        run = res_root / "synthetic" / "synth-5q" / r.setting / "sim"
        ov = json.loads((run / r.method / "overall.json").read_text())
        assert close(r.accuracy_pct, ov["accuracy_pct"]) and close(r.savings_pct, ov["savings_pct"])
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


@needs_shared
def test_simulated_tables_match_outputs(simulated):
    res_root, out, _ = simulated
    t1 = read_csv(out / "tables" / "table1-main.csv").iloc[0]
    for col in ("sc.accuracy_pct", "sc-mars-cal.savings_pct", "dco-mars-cal.accuracy_pct"):
        m, k = col.split(".")
        ov = json.loads(
            (
                res_root / "synthetic" / "synth-5q" / "default" / "sim" / m / "overall.json"
            ).read_text()
        )
        assert close(t1[col], ov[k])
    t2 = read_csv(out / "tables" / "table2-parallel-probe.csv").iloc[0]
    ov4 = json.loads(
        (
            res_root / "synthetic" / "synth-5q" / "pp-u4" / "sim" / "sc-pp" / "overall.json"
        ).read_text()
    )
    assert close(t2["sc-pp-u4.accuracy_pct"], ov4["accuracy_pct"])
    # the risk audit recomputed by hand from per_iteration.csv
    audit = read_csv(out / "tables" / "table-risk-audit.csv")
    sim = res_root / "synthetic" / "synth-5q" / "default" / "sim"
    a = pd.read_csv(
        sim / "sc-mars-cert" / "per_iteration.csv", dtype={"answer": str}, keep_default_na=False
    )
    b = pd.read_csv(sim / "sc" / "per_iteration.csv", dtype={"answer": str}, keep_default_na=False)
    differ = int((a.answer.to_numpy() != b.answer.to_numpy()).sum())
    row = audit[audit.method == "sc-mars-cert"].iloc[0]
    assert row.differ == differ and row.runs == len(a)


# -- damaged simulation results: one line naming the file, exit 2, no output ---------------------
SMALL_METHODS = ["sc", "sc-mars-cal", "dco", "dco-mars-cal", "sc-mars-cert", "sc-pp"]


def small_tree(root: Path, settings: dict | None = None) -> Path:
    """One model × dataset run of a few methods (fast to report)."""
    rng = np.random.default_rng(3)
    run = root / "results" / MODEL / DATASET / "default" / "sim"
    for m in SMALL_METHODS:
        _write_method(run, m, rng, settings or SETTINGS)
    return root / "results"


def _edit_json(path: Path, edit):
    ov = json.loads(path.read_text())
    edit(ov)
    path.write_text(json.dumps(ov))


def _report_cli(results: Path, out: Path, *extra):
    from typer.testing import CliRunner

    from mars.cli import app

    return CliRunner().invoke(
        app, ["report", str(results), "--out", str(out), "--no-figures", *map(str, extra)]
    )


def assert_one_line(res, *needles):
    assert res.exit_code == 2, (res.output, res.exception)
    assert res.output.startswith("error: ") and res.output.count("\n") == 1, res.output
    for needle in needles:
        assert needle in res.output, res.output


DAMAGES = {
    "accuracy_pct a string": (
        "sc/overall.json",
        lambda p: _edit_json(p, lambda ov: ov.update(accuracy_pct="87.5")),
        "accuracy_pct",
    ),
    "settings not a dict": (
        "sc-mars-cal/overall.json",
        lambda p: _edit_json(p, lambda ov: ov.update(settings=[16, 4])),
        "settings",
    ),
    "a bad setting": (
        "dco/overall.json",
        lambda p: _edit_json(p, lambda ov: ov["settings"].update(budget="sixteen")),
        "budget",
    ),
    "missing per_iteration.csv": ("sc-mars-cert/per_iteration.csv", Path.unlink, "missing"),
    "overall.json a list": ("sc/overall.json", lambda p: p.write_text("[1, 2]"), "JSON object"),
    "overall.json nested 100,000 deep": (
        "sc/overall.json",
        lambda p: p.write_text("[" * 100_000 + "]" * 100_000),
        "nested",
    ),
    "overall.json a 5,001-digit number": (
        "sc/overall.json",
        lambda p: p.write_text('{"accuracy_pct": ' + "9" * 5001 + "}"),
        "digits",
    ),
    "overall.json a directory": (
        "sc/overall.json",
        lambda p: (p.unlink(), p.mkdir()),
        "not a regular file",
    ),
    "per_question.csv a FIFO": (
        "sc/per_question.csv",
        lambda p: (p.unlink(), os.mkfifo(p)),
        "not a regular file",
    ),
    "a non-number in per_question.csv": (
        "sc/per_question.csv",
        lambda p: p.write_text(p.read_text().replace("\n1,", "\nx,", 1)),
        "column qid",
    ),
    "a missing per_iteration row": (
        "dco/per_iteration.csv",
        lambda p: p.write_text("\n".join(p.read_text().splitlines()[:-1]) + "\n"),
        "rows",
    ),
    "overall.json disagrees with per_question.csv": (
        "sc-pp/overall.json",
        lambda p: _edit_json(p, lambda ov: ov.update(savings_pct=ov["savings_pct"] + 5)),
        "disagrees",
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_results_are_one_line(tmp_path, damage):
    """Issue 19 (12): each damage is one line naming the file, exit 2, before any output."""
    results = small_tree(tmp_path)
    rel, edit, needle = DAMAGES[damage]
    target = results / MODEL / DATASET / "default" / "sim" / rel
    edit(target)
    out = tmp_path / "out"
    res = _report_cli(results, out)
    assert_one_line(res, rel.split("/")[1], needle)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["results"]  # no staging folder left either


FUZZ_RESULTS_TRIALS = 40
_BAD_VALUES = ["abc", None, float("nan"), -1, 1e308, [], {}, True, "", 10**30]
_BAD_CELLS = ["abc", "", "nan", "-1", "1e309", "1.5", "True", '"', "7,8"]


def _fuzz_results(rng, run: Path) -> str:
    """Damage a run in one random way: bytes, JSON values, CSV cells, rows, columns or kinds."""
    method = run / str(rng.choice(SMALL_METHODS))
    files = ["overall.json", "per_question.csv", "per_iteration.csv"]
    f = method / str(rng.choice(files))
    kind = str(rng.choice(["flip", "truncate", "json", "key", "cell", "rows", "column", "kind"]))
    if kind == "flip":
        data = bytearray(f.read_bytes())
        for i in rng.integers(0, len(data), size=int(rng.integers(1, 20))):
            data[int(i)] = int(rng.integers(0, 256))
        f.write_bytes(bytes(data))
    elif kind == "truncate":
        f.write_bytes(f.read_bytes()[: int(rng.integers(0, f.stat().st_size))])
    elif kind == "json":
        f = method / "overall.json"
        f.write_text(str(rng.choice(["", "{", "[]", "null", '"x"', "[" * 5000, "1" * 5000])))
    elif kind == "key":
        f = method / "overall.json"
        ov = json.loads(f.read_text())
        target = ov if rng.random() < 0.6 else ov["settings"]
        key = str(rng.choice(sorted(target)))
        if rng.random() < 0.2:
            del target[key]
        else:
            target[key] = _BAD_VALUES[int(rng.integers(0, len(_BAD_VALUES)))]
        f.write_text(json.dumps(ov))
    else:
        f = method / str(rng.choice(files[1:]))
        lines = f.read_text().splitlines()
        if kind == "cell":
            i = int(rng.integers(0, len(lines)))
            cells = lines[i].split(",")
            cells[int(rng.integers(0, len(cells)))] = str(rng.choice(_BAD_CELLS))
            lines[i] = ",".join(cells)
        elif kind == "rows":
            i = int(rng.integers(1, len(lines)))
            lines = lines[:i] + lines[i + 1 :] if rng.random() < 0.5 else [*lines, lines[i]]
        elif kind == "column":
            j = int(rng.integers(0, len(lines[0].split(","))))
            lines = [",".join(c for k, c in enumerate(ln.split(",")) if k != j) for ln in lines]
        if kind == "kind":
            f.unlink()
            if rng.random() < 0.5:
                f.mkdir()
        else:
            f.write_text("\n".join(lines) + "\n")
    return f"{kind} {f.relative_to(run)}"


@pytest.mark.slow
def test_fuzz_damaged_results_never_give_a_traceback(tmp_path):
    """Issue 19 (beyond the list): damaged overall.json / CSVs give a report or one line."""
    import shutil

    rng = np.random.default_rng(19)
    clean = small_tree(tmp_path / "clean")
    outcomes = {0: 0, 2: 0}
    for trial in range(FUZZ_RESULTS_TRIALS):
        results = tmp_path / f"r{trial}"
        shutil.copytree(clean, results)
        case = _fuzz_results(rng, results / MODEL / DATASET / "default" / "sim")
        out = tmp_path / f"o{trial}"
        res = _report_cli(results, out)
        assert res.exit_code in (0, 2), (trial, case, res.output, res.exception)
        if res.exit_code == 2:
            assert res.output.startswith("error: ") and res.output.count("\n") == 1, (case, res)
            assert not out.exists()
        else:
            assert (out / "tables" / "table1-main.csv").is_file()
        outcomes[res.exit_code] += 1
    assert outcomes[2] > FUZZ_RESULTS_TRIALS // 2  # most damage is detected


# -- the output folder holds exactly this run's report -------------------------------------------
def test_a_second_report_replaces_the_first(tmp_path):
    """Issue 19 (15): no table of an earlier report survives; user files are never replaced."""
    results = make_tree(tmp_path)
    out = tmp_path / "out"
    assert _report_cli(results, out).exit_code == 0
    first = sorted(p.name for p in (out / "tables").iterdir())
    assert any("other-model" in n for n in first)
    # the second report covers one model only: it holds what a fresh report holds
    shutil.rmtree(results / MODEL2)
    assert _report_cli(results, out).exit_code == 0
    assert _report_cli(results, tmp_path / "fresh").exit_code == 0
    second = sorted(p.name for p in (out / "tables").iterdir())
    assert second == sorted(p.name for p in (tmp_path / "fresh" / "tables").iterdir())
    assert not any("other-model" in n for n in second)
    assert MODEL2 not in (out / "report.md").read_text()
    shutil.rmtree(tmp_path / "fresh")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "results"]  # nothing aside
    # a failing report leaves the previous one as it was
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    (results / MODEL / DATASET / "default" / "sim" / "sc" / "overall.json").write_text("[]")
    assert_one_line(_report_cli(results, out), "overall.json")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    # a folder holding anything a report does not write is refused, the file kept
    notes = out / "notes.txt"
    notes.write_text("mine")
    assert_one_line(_report_cli(make_tree(tmp_path / "t2"), out), "notes.txt")
    assert notes.read_text() == "mine" and (out / "report.md").is_file()
    # so is a results folder given as --out
    assert_one_line(_report_cli(results, results), "--out")
    assert (results / MODEL / DATASET / "default" / "sim" / "sc").is_dir()


# -- one table, one set of sampling settings -----------------------------------------------------
def test_a_method_simulated_with_other_sampling_settings_is_refused(tmp_path):
    """Issue 25 (2): `mars simulate -m sc` without --budget into a folder of budget-16 runs."""
    results = small_tree(tmp_path)
    run = results / MODEL / DATASET / "default" / "sim"
    shutil.rmtree(run / "sc")
    _write_method(run, "sc", np.random.default_rng(5), {**SETTINGS, "budget": 512})
    out = tmp_path / "out"
    assert_one_line(_report_cli(results, out), "sc/overall.json", "budget 512 (theirs: 16)")
    assert not out.exists()


def test_runs_with_other_sampling_settings_get_their_own_rows(tmp_path):
    """Issue 25 (2): a setting simulated at another budget is never mixed into the main rows."""
    results = small_tree(tmp_path)
    other = results / MODEL / DATASET / "b512" / "sim"
    rng = np.random.default_rng(9)
    for m in ("sc", "dco", "sc-mars2"):
        _write_method(other, m, rng, {**SETTINGS, "budget": 512})
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


# -- results say what they are -------------------------------------------------------------------
@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    """A small synthetic pool (8 questions × 40 traces) simulated into results/."""
    from typer.testing import CliRunner

    from mars.cli import app

    root = tmp_path_factory.mktemp("synthetic")
    runner = CliRunner()
    pool = root / "pool"
    args = ["generate", "--backend", "synthetic", "--preset", "qwen3-8b", "--problems"]
    args += ["aime_2025", "--traces", "40", "--questions", "0-7", "--out", str(pool)]
    assert runner.invoke(app, args).exit_code == 0
    sim = root / "results" / "qwen3-8b" / "aime_2025" / "default" / "sim"
    methods = "sc,sc-mars,sc-mars-cal,sc-mars-oracle,dco,dco-mars,dco-mars-cal,dco-mars-oracle"
    args = ["simulate", str(pool), "-m", methods + ",sc-pp,oracle-first,oracle-dco-first"]
    args += ["--budget", "24", "--iterations", "4", "--out", str(sim), "-q"]
    assert runner.invoke(app, args).exit_code == 0, args
    an = root / "results" / "analysis" / "qwen3-8b" / "aime_2025"
    args = ["analyze", str(pool), str(sim), "--out", str(an), "--q-questions", "1", "-q"]
    assert runner.invoke(app, args).exit_code == 0, args
    return root / "results"


def test_synthetic_results_say_so(synthetic, tmp_path):
    """Issue 25 (3): every table, figure and the index of a synthetic run says "synthetic", with
    the model the preset imitates; the index holds the report command once (issue 25, 12)."""
    results = synthetic
    out = tmp_path / "report"
    rep = render_report([results], out, formats=("png",))
    index = (out / "report.md").read_text()
    first = index.split("## Inputs")[0]
    assert "Synthetic data" in first and "Qwen/Qwen3-8B (preset qwen3-8b)" in first
    for t in rep.tables:
        for ext in ("md", "tex", "csv", "html"):
            assert "Synthetic data" in (out / "tables" / f"{t.key}.{ext}").read_text(), t.key
    for f in rep.figures:
        assert "Synthetic data" in f.caption and "Synthetic data" in f.footer, f.stem
        assert f.caption in index
    # the report command once, not once per table and figure
    assert index.count("mars report ") == 1


def test_real_and_unknown_sources_are_named(tmp_path):
    """Issue 25 (3): real data names its source; results that record none say it is unknown."""
    from mars.store.provenance import pool_source

    results = small_tree(tmp_path)
    pool = tmp_path / "smollm-pool"
    pool.mkdir()
    manifest = {"format": "mars-pool", "backend": "transformers", "model": "org/Model-1B"}
    (pool / "pool.json").write_text(json.dumps(manifest))
    data = pool_source(pool).to_dict()  # what `mars simulate` records in overall.json
    for d in (results / MODEL / DATASET / "default" / "sim").iterdir():
        _edit_json(d / "overall.json", lambda ov: ov["input"].update(source=str(pool), data=data))
    other = make_tree(tmp_path / "t2")  # its results record no source
    out = tmp_path / "out"
    shutil.rmtree(pool)  # the report reads what the simulation recorded, not the pool
    render_report([results, other / MODEL2], out, labels=["m/d", "m2/d2"], figures=False)
    index = (out / "report.md").read_text()
    assert "Data: m from a transformers run of org/Model-1B." in index
    assert f"m2: unknown: {other / MODEL2}" in index and "records none" in index
    assert "Synthetic" not in index


def _legend_of(make, results, out_dir) -> set[str]:
    """The legend entries of the figure ``make(results, out_dir)`` draws."""
    seen: set[str] = set()
    finish = figures._finish

    def spy(fo, fig, *args):
        seen.update(t.get_text() for leg in fig.legends for t in leg.get_texts())
        return finish(fo, fig, *args)

    figures._finish = spy
    try:
        make(results, out_dir)
    finally:
        figures._finish = finish
    return seen


def test_figures_name_what_they_show(tree, tmp_path):
    """Issue 25 (11): Fig. 4(b) compares at one γ, the frontier tells Parallel-Probe's u apart
    and calls oracle-first what it is."""
    results, out, rep = tree
    d4 = pd.read_csv(out / "figures" / "fig4-ablations.csv")
    b = d4[d4.panel == "b"]
    assert set(zip(b.method_a, b.method_b)) == {
        ("sc-mars-oracle", "sc-mars"),
        ("dco-mars-oracle", "dco-mars"),
    }
    frontier = pd.read_csv(out / "figures" / "fig-frontier.csv")
    pp = frontier[frontier.method == "sc-pp"]
    assert sorted(pp.pp_conv.astype(int)) == [3, 3, 4, 4]  # two models × u = 3, 4
    legend = _legend_of(figures.fig_frontier, collect([results]), tmp_path)
    assert {"Parallel-Probe, u=3", "Parallel-Probe, u=4", "oracle-first savings"} <= legend
    captions = " ".join(f.caption + f.title for f in rep.figures)
    assert "oracle bound" not in captions and "oracle-first" in captions
    share = (out / "tables" / "table-oracle-share.md").read_text()
    assert "oracle bound" not in share and "Share of oracle-first" in share


def test_the_index_shows_the_report_command_once(tree):
    """Issue 25 (12): report.md does not repeat the `mars report` command per table and figure;
    the table files keep theirs."""
    _, out, rep = tree
    index = (out / "report.md").read_text()
    assert index.count(rep.command) == 1
    assert all(rep.command in (out / "tables" / f"{t.key}.md").read_text() for t in rep.tables)


def test_the_example_shows_the_mechanism(synthetic):
    """Issue 25 (11): Fig. 1 (right) shows, by a stated rule, MARS waiting while its answer
    trails and stopping early once it is safe: among early correct stops (iteration 0), the one
    saving most whose answer overtook the first checkpoint's leader."""
    from mars.report.figures import pick_example
    from mars.store.analysis import EXAMPLE

    results = collect([synthetic])  # the analysis under results/ (mars analyze)
    ex = pick_example(results)
    assert ex is not None and ex.run.analysis is not None
    it = ex.run.per_iteration("sc-mars-cal")
    early = it[
        (it.iteration == 0)
        & (it.stopped_by == "margin")
        & it.correct
        & (it.stop_position > it.stop_position.min())
    ]
    saved = (1 - early.tokens / early.baseline_tokens).set_axis(early.qid)
    trajectories = {t.qid: t for t in ex.run.analysis.of(EXAMPLE)}
    assert set(trajectories) == set(saved.index)  # this pool has fewer than 8 candidates

    def overtook(qid: int) -> bool:
        tr = trajectories[qid]
        return tr.stop_k < len(tr.positions) and tr.lead[0] != tr.lead[tr.stop_k]

    assert ex.iteration == 0 and ex.qid in saved.index and overtook(ex.qid)
    assert all(not overtook(q) for q, v in saved.items() if v > saved[ex.qid])
    assert saved[ex.qid] > 0.5  # it shows a real saving (this pool: 71 %)


def test_a_symlinked_out_keeps_its_link(tmp_path):
    """The folder a symlinked --out points to is replaced; the link stays."""
    results = small_tree(tmp_path)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    for _ in range(2):
        assert _report_cli(results, tmp_path / "link").exit_code == 0
    assert (tmp_path / "link").is_symlink() and (tmp_path / "real" / "report.md").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real", "results"]
