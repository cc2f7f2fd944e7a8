"""The two comparison figures draw what they claim: one distinct, labelled mark per method (and
setting), every pool's main run, axes per pipeline that hold every point (nothing "off axis")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mars.method.registry import METHODS
from mars.report import collect
from mars.report.data.comparison import FAMILIES, frontier_points, sc_counterpart
from mars.report.figures import comparison
from mars.report.figures.base import PAID_COLOR, PAID_LABEL
from mars.report.figures.comparison import FAMILY_COLORS, assign_marks
from mars.report.names import method_label

from ..trees import drop_paid, overall, savings_against_the_vote, small_tree


def drawn(make, results: Path, out_dir: Path) -> tuple[list[dict], list[str], object]:
    """Every marked point ``make`` draws (its axes' pool, pipeline, label, mark, coordinates and
    limits), the figure's texts and its legend."""
    seen: dict = {}
    finish = comparison.finish

    def spy(fo, fig, *args):
        seen["fig"], seen["fo"] = fig, fo
        return finish(fo, fig, *args)

    comparison.finish = spy
    try:
        make(collect([results]), out_dir, ("png",))
    finally:
        comparison.finish = finish
    fig = seen["fig"]
    points = []
    for ax in fig.get_axes():
        pool = ax.get_figure(root=False).get_suptitle()
        pipeline = ax.get_title() or ax.get_ylabel().split(":")[0]
        for line in ax.get_lines():
            if line.get_marker() in (None, "None", ""):
                continue
            style = (line.get_marker(), line.get_markerfacecolor(), line.get_markeredgecolor())
            for x, y in zip(line.get_xdata(), line.get_ydata()):
                points.append(
                    {
                        "pool": pool,
                        "pipeline": pipeline,
                        "label": line.get_label(),
                        "style": style,
                        "x": float(x),
                        "y": float(y),
                        "xlim": ax.get_xlim(),
                        "ylim": ax.get_ylim(),
                    }
                )
    texts = [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]
    legend = {t.get_text() for leg in fig.legends for t in leg.get_texts()}
    return points, texts, legend


def _one_mark_per_label(points: list[dict]) -> None:
    styles: dict[str, set] = {}
    for p in points:
        styles.setdefault(p["label"], set()).add(p["style"])
    assert all(len(s) == 1 for s in styles.values()), styles
    marks = [next(iter(s)) for s in styles.values()]
    assert len(set(marks)) == len(marks), styles  # no two labels share a mark


def _inside(points: list[dict]) -> None:
    for p in points:
        assert p["xlim"][0] <= p["x"] <= p["xlim"][1], p
        assert p["ylim"][0] <= p["y"] <= p["ylim"][1], p


@pytest.mark.slow
def test_the_frontier_draws_every_method_with_its_own_mark(pools, tmp_path):
    results = pools
    points, texts, legend = drawn(comparison.fig_frontier, results, tmp_path)
    _one_mark_per_label(points)
    _inside(points)
    assert not any("off axis" in t for t in texts)
    rc = collect([results])
    for pair in rc.pairs:
        pool = [p for p in points if p["pool"].endswith(f" · {pair[1]}") and pair[0] in p["pool"]]
        main = rc.main_run(*pair)
        for method in main.methods:
            m = METHODS[method]
            if m.is_baseline or m.reads_future:
                continue
            ov = main.overall[method]
            want = (savings_against_the_vote(main, method), ov["accuracy_pct"])
            pipe = {"sc": "SC pipeline", "dco": "DeepConf pipeline"}[m.baseline]
            here = [
                (p["x"], p["y"]) for p in pool if p["pipeline"] == pipe and p["label"] in legend
            ]
            assert any(np.allclose(xy, want) for xy in here), (pair, method)
    # one trace spends a few percent of the vote's tokens: it saves most of them
    (single,) = [p for p in points if p["label"].startswith("One trace") and "qwen3" in p["pool"]]
    assert (
        single["x"] > 90 > rc.main_run("qwen3-8b", "aime_2025").overall["single-sac"]["savings_pct"]
    )
    # ASC, ESC, both Parallel-Probe controllers and both convergence exits: six marks
    main = rc.main_run("qwen3-8b", "aime_2025")
    others = ["asc", "esc", "pp-main", "pp-main-keep", "sc-sac", "single-sac"]
    labels = {method_label(o, main.settings(o))[0] for o in others}
    assert labels <= legend
    assert len({p["style"] for p in points if p["label"] in labels}) == 6
    # the second Parallel-Probe setting is its own mark, named by its u
    assert {"Parallel-Probe (u=3)", "Parallel-Probe (u=4)"} <= legend
    assert "MARS2 (predictive risk)" in legend and any(
        x.startswith("MARS2 in waves") for x in legend
    )
    # the pool without confidences has no DeepConf panel; the other has both
    pipes = {(p["pool"], p["pipeline"]) for p in points}
    assert {pipe for pool, pipe in pipes if "own-model" in pool} == {"SC pipeline"}
    assert {pipe for pool, pipe in pipes if "qwen3-8b" in pool} == {
        "SC pipeline",
        "DeepConf pipeline",
    }


@pytest.mark.slow
def test_latency_draws_every_default_run_on_axes_that_hold_it(pools, tmp_path):
    results = pools
    points, texts, _ = drawn(comparison.fig_latency, results, tmp_path)
    _one_mark_per_label(points)
    _inside(points)
    assert not any("off axis" in t or "first 6" in t for t in texts)
    rc = collect([results])
    for pair in rc.pairs:
        main = rc.main_run(*pair)
        pool = [p for p in points if pair[0] in p["pool"]]
        for method in main.methods:
            ov = main.overall[method]
            want = {
                (ov["tokens_mean"], ov["accuracy_pct"]),
                (ov["seq_tokens_mean"], ov["accuracy_pct"]),
            }
            got = {(p["x"], p["y"]) for p in pool}
            assert all(any(np.allclose(w, g) for g in got) for w in want), (pair, method)
    # the full-budget votes of both pipelines are drawn, each on its own pipeline's axes
    sc = [p for p in points if p["label"] == "SC (baseline)"]
    assert {p["pipeline"] for p in sc} == {"SC", "DeepConf"}
    # a run on other samples (a trade-off sweep) is not mixed in
    tradeoff = rc.runs_of("qwen3-8b", "aime_2025")[-1]
    assert tradeoff.setting == "tradeoff-1"
    ov = tradeoff.overall["sc-mars"]
    assert not any(np.allclose((p["x"], p["y"]), (ov["tokens_mean"], ov["accuracy_pct"]))
                   for p in points)  # fmt: skip


def test_marks_are_distinct_by_family_and_shape():
    assert set(FAMILY_COLORS) == set(FAMILIES)
    labels = [(m, m) for m in METHODS if sc_counterpart(m) == m]  # DeepConf's take SC's marks
    marks = assign_marks(labels)
    assert len({(k.marker, k.color, k.hollow) for k in marks.values()}) == len(labels)
    assert not {"h", "H", "p", "8"} & {k.marker for k in marks.values()}  # look like circles
    assert marks["sc-mars-cal"].marker == "*"
    # a method keeps its mark whatever else a figure holds
    alone = assign_marks([("esc", "ESC")])
    assert alone["ESC"] == assign_marks([("sc", "SC"), ("asc", "ASC"), ("esc", "ESC")])["ESC"]


def test_the_frontier_names_what_it_shows(tree, tmp_path):
    """Issue 25 (11): the frontier tells Parallel-Probe's u apart and calls oracle-first what it
    is; its CSV is its points."""
    results, out, rep = tree
    _, _, legend = drawn(comparison.fig_frontier, results, tmp_path)
    assert {"Parallel-Probe (u=3)", "Parallel-Probe (u=4)", "oracle-first savings"} <= legend
    captions = " ".join(f.caption + f.title for f in rep.figures)
    assert "oracle bound" not in captions and "oracle-first" in captions
    back = pd.read_csv(out / "figures" / "fig-frontier.csv")
    assert back.equals(frontier_points(collect([results])).astype(back.dtypes))


def _drawn_paid(module, make, results: Path, out_dir: Path, monkeypatch):
    """What ``make`` draws of the paid savings: the black marks' points, the grey links, the
    legend's texts and the figure's notes."""
    seen: dict = {}
    finish = module.finish

    def spy(fo, fig, *args):
        seen["fig"], seen["fo"] = fig, fo
        return finish(fo, fig, *args)

    monkeypatch.setattr(module, "finish", spy)
    make(collect([results]), out_dir, ("png",))
    fig, fo = seen["fig"], seen["fo"]
    marks, links = [], []
    for ax in fig.get_axes():
        for line in ax.get_lines():
            if line.get_gid() not in ("paid", "paid-link"):
                continue
            xy = list(zip(map(float, line.get_xdata()), map(float, line.get_ydata())))
            if line.get_gid() == "paid":
                marks += xy
                assert line.get_markerfacecolor() == PAID_COLOR, line
            else:
                links.append(xy)
            lo, hi = ax.get_xlim()
            assert all(lo <= x <= hi for x, _ in xy), line  # on the axes
    legend = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    return marks, links, legend, fo


def test_the_frontier_draws_the_paid_savings_beside_the_papers(tree, tmp_path, monkeypatch):
    """A black mark at (paid savings, accuracy) joined to each point whose paid savings differ
    (the tree's MARS methods pay a warmup; Parallel-Probe pays as the paper counts), one legend
    entry; the CSV holds the paid savings, overall.json's."""
    results, out, _ = tree
    marks, links, legend, fo = _drawn_paid(
        comparison, comparison.fig_frontier, results, tmp_path, monkeypatch
    )
    df = frontier_points(collect([results]))
    differs = df[(df.savings_paid_pct - df.savings_pct).abs() >= 0.05]
    assert len(differs) and len(differs) < len(df)  # sc-pp's paid savings are its savings
    want = sorted(zip(differs.savings_paid_pct, differs.accuracy_pct))
    assert np.allclose(sorted(marks), want)
    # each link joins a point to its paid mark, at the point's accuracy
    ends = zip(differs.savings_pct, differs.savings_paid_pct, differs.accuracy_pct)
    assert np.allclose(sorted(links), sorted([(a, y), (b, y)] for a, b, y in ends))
    assert legend.count(PAID_LABEL) == 1 and not fo.notes
    assert "live run pays" in fo.caption
    back = pd.read_csv(out / "figures" / "fig-frontier.csv")
    for r in back.itertuples():
        ov = overall(results, r.model, r.setting, r.method)
        assert np.isclose(r.savings_paid_pct, ov["savings_paid_pct"])


def test_the_frontier_of_runs_without_paid_savings_draws_none(tmp_path, monkeypatch):
    results = small_tree(tmp_path)
    drop_paid(results)
    marks, links, legend, fo = _drawn_paid(
        comparison, comparison.fig_frontier, results, tmp_path / "out", monkeypatch
    )
    assert not marks and not links and PAID_LABEL not in legend
    assert len([n for n in fo.notes if "paid savings" in n]) == 1
    back = pd.read_csv(tmp_path / "out" / "fig-frontier.csv")
    assert "savings_paid_pct" in back and back.savings_paid_pct.isna().all()
