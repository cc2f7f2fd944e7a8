"""`mars analyze` (mars.analyze, mars.store.analysis): the report's single-question figures, q
calibration and switch models computed upstream from pool, fit and one simulation, as files the
report only draws; the trajectories are the simulator's own decisions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner
from util import report_files_differ

from mars.analyze.driver import trajectory
from mars.cli import app
from mars.fit.fitdir import FitDir
from mars.method.registry import sweep_settings
from mars.method.walk import QuestionContext
from mars.report import collect, render_report
from mars.report.collect import ReportError
from mars.store import analysis as files
from mars.store.pool import open_pool

RUNNER = CliRunner()
METHODS = "sc,sc-mars,sc-mars-cal,sc-pp,oracle-first,dco,dco-mars-cal"


def cli(*args) -> None:
    res = RUNNER.invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, (args, res.output, res.exception)


def one_line(res, *needles) -> None:
    assert res.exit_code == 2, (res.output, res.exception)
    assert res.output.startswith("error: ") and res.output.count("\n") == 1, res.output
    for needle in needles:
        assert needle in res.output, res.output


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> Path:
    """pool -> fit -> simulate -> analyze, as the workflow runs them, in one folder."""
    root = tmp_path_factory.mktemp("chain")
    cli("generate", "--backend", "synthetic", "--preset", "qwen3-8b", "--problems", "aime_2025",
        "--traces", "40", "--questions", "0-5", "--out", root / "pool", "-q")  # fmt: skip
    cli("fit", root / "pool", "--out", root / "fit", "-q")
    sim = root / "results" / "simulate" / "m" / "d" / "default"
    cli("simulate", root / "pool", "-m", METHODS, "--budget", "24", "--iterations", "4",
        "--fit", root / "fit", "--out", sim, "-q")  # fmt: skip
    cli("analyze", root / "pool", sim, "--fit", root / "fit", "--out",
        root / "results" / "analysis" / "m" / "d", "-q")  # fmt: skip
    return root


def read(root: Path) -> files.Analysis:
    return files.read_analysis(root / "results" / "analysis" / "m" / "d")


def test_trajectories_are_the_simulators_decisions(chain):
    """Every sample's recomputed vote shares and slack stop where the simulation stopped."""
    res = collect([chain / "results" / "simulate"])
    run = res.runs[0]
    it = run.per_iteration("sc-mars-cal")
    s = run.sim_settings("sc-mars-cal").replace(spacing=2048)
    fit = FitDir(chain / "fit")
    pool = open_pool(chain / "pool")
    for qid in sorted(it.qid.unique()):
        q = pool.read_question(int(qid))
        arr = fit.arrays(q, s)
        ctx = QuestionContext.sample(arr, s, fitted=fit.question(q, arr, s.warmup))
        for i in range(s.iterations):
            tr = trajectory(arr, ctx, i, files.EXAMPLE)
            row = it[(it.qid == qid) & (it.iteration == i)].iloc[0]
            k = tr.stop_k
            assert (k < len(tr.positions)) == (row.stopped_by == "margin")
            if k < len(tr.positions):
                assert tr.positions[k] == row.stop_position
            # the slack is positive exactly where the margin test passes (checkpoint 0 also has
            # the probe-0 guard)
            assert np.array_equal(tr.slack[1:] > 0, tr.fires[1:])
            assert np.allclose(tr.shares.sum(axis=1)[tr.lead >= 0], 1.0)
            back = files.Trajectory.from_dict(json.loads(json.dumps(tr.to_dict())))
            pd.testing.assert_frame_equal(back.frame(), tr.frame())
            assert back.stop_k == tr.stop_k and back.overtook == tr.overtook


def test_an_analysis_holds_the_candidates_and_the_fit(chain):
    an = read(chain)
    res = collect([chain / "results" / "simulate"])
    run = res.runs[0]
    assert an.label == "m/d/default"
    assert set(an.inputs) == {"sc-mars", "sc-mars-cal", "sc-pp"}
    assert all(an.inputs[m] == run.digest(m) for m in an.inputs)
    assert an.of(files.EXAMPLE) and an.of(files.PP_FAILURE)
    assert all(t.iteration == 0 for t in an.of(files.EXAMPLE))
    # q calibration: ten bins, held-out traces only, rates in [0, 1]
    bins = an.q_calibration[an.q_calibration.kind == "bin"]
    assert len(bins) == 10 and bins.n.sum() > 0
    rates = an.q_calibration[["q_learned_mean", "q_oracle_rate"]].dropna().to_numpy()
    assert ((rates >= 0) & (rates <= 1)).all()
    # the switch models are the fit's rows at the run's warmup, one per question
    fit = FitDir(chain / "fit")
    assert sorted(an.switch_models.qid) == sorted(q for q, w in fit.rows if w == 16)
    for r in an.switch_models.itertuples():
        row = fit.rows[(r.qid, 16)]
        assert r.n_rows == row["n_rows"] and r.coef_position == pytest.approx(row["coef"][0])


def test_the_same_inputs_give_the_same_bytes_with_or_without_the_fit(chain, tmp_path):
    """Deterministic, and the fit's switch models are the ones fitting here would give."""
    sim = chain / "results" / "simulate" / "m" / "d" / "default"
    cli("analyze", chain / "pool", sim, "--fit", chain / "fit", "--out", tmp_path / "a", "-q")
    cli("analyze", chain / "pool", sim, "--out", tmp_path / "b", "-q")
    ours = chain / "results" / "analysis" / "m" / "d"
    assert (tmp_path / "a" / "q_calibration.csv").read_bytes() == (
        ours / "q_calibration.csv"
    ).read_bytes()
    a = json.loads((tmp_path / "a" / "analysis.json").read_text())
    b = json.loads((tmp_path / "b" / "analysis.json").read_text())
    assert a["trajectories"] == b["trajectories"]
    assert (tmp_path / "a" / "q_calibration.csv").read_bytes() == (
        tmp_path / "b" / "q_calibration.csv"
    ).read_bytes()
    assert pd.read_csv(tmp_path / "b" / "switch_models.csv").empty  # no fit, no fit summary


@pytest.mark.slow
def test_the_report_reads_only_its_declared_inputs(chain, tmp_path):
    """Issue 21 (1): with pool and fit moved away, the same report command gives byte-identical
    tables and figures; without the analysis the pool-level figures say what they need."""
    results = chain / "results"
    out = tmp_path / "report"
    png = ("png",)  # one format: what is read does not depend on it
    first = render_report([results / "simulate"], out, analyses=[results / "analysis"], formats=png)
    shutil.copytree(out, tmp_path / "first")
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in ("pool", "fit"):
        shutil.move(chain / name, moved / name)
    try:
        second = render_report(
            [results / "simulate"], out, analyses=[results / "analysis"], formats=png
        )
    finally:
        for name in ("pool", "fit"):
            shutil.move(moved / name, chain / name)
    assert [f.stem for f in first.figures] == [f.stem for f in second.figures]

    def files(root: Path) -> dict:
        return {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    assert report_files_differ(files(tmp_path / "first"), files(out)) == []
    notes = {f.stem: " ".join(f.notes) for f in first.figures}
    assert "skipped" not in notes["fig1-right-example"] + notes["fig2-pp-failure"]
    bare = render_report([results / "simulate"], tmp_path / "bare", formats=png)
    notes = {f.stem: " ".join(f.notes) for f in bare.figures}
    assert "mars analyze" in notes["fig1-right-example"]
    assert "mars analyze" in notes["fig4-ablations"]


def test_the_report_finds_analyses_under_its_results_root(chain, tmp_path):
    rep = render_report([chain / "results"], tmp_path / "r", figures=False)
    assert rep.results.runs[0].analysis is not None
    assert "mars analyze" in (tmp_path / "r" / "report.md").read_text()
    models = pd.read_csv(tmp_path / "r" / "tables" / "table-switch-models.csv", comment="#")
    assert models.questions.tolist() == [6]


def test_a_damaged_fit_is_one_line(chain, tmp_path):
    """The fit is read as a simulation reads it: a damaged models.parquet is one line naming it."""
    fit = tmp_path / "fit"
    shutil.copytree(chain / "fit", fit)
    data = (fit / "models.parquet").read_bytes()
    (fit / "models.parquet").write_bytes(data[: len(data) // 2])
    sim = chain / "results" / "simulate" / "m" / "d" / "default"
    out = tmp_path / "an"
    res = RUNNER.invoke(
        app, ["analyze", str(chain / "pool"), str(sim), "--fit", str(fit), "--out", str(out)]
    )
    one_line(res, "models.parquet")
    assert not out.exists()


def test_an_analysis_of_a_run_simulated_again_is_refused(chain, tmp_path):
    """Its trajectories would not be the tables' samples: one line, before any output."""
    results = tmp_path / "results"
    shutil.copytree(chain / "results", results)
    sim = results / "simulate" / "m" / "d" / "default"
    cli("simulate", chain / "pool", "-m", METHODS, "--budget", "24", "--iterations", "4",
        "--seed", "7", "--fit", chain / "fit", "--out", sim, "-q")  # fmt: skip
    res = RUNNER.invoke(app, ["report", str(results), "--out", str(tmp_path / "r")])
    one_line(res, "analysis.json", "simulated again", "mars analyze")
    assert not (tmp_path / "r").exists()


def test_a_stale_analysis_is_refused_wherever_the_run_lies(chain, tmp_path):
    """A run folder outside any ``results/`` labels itself by its name alone when analysed, and by
    its path under the report's root when reported: the analysis is still known as that run's,
    and refused once the run is simulated again (it was left out, exit 0)."""
    runs = tmp_path / "runs"
    sim = runs / "simulate" / "m" / "d" / "default"
    args = ["-m", METHODS, "--budget", "24", "--iterations", "4", "--fit", chain / "fit", "-q"]
    cli("simulate", chain / "pool", *args, "--out", sim)
    cli("analyze", chain / "pool", sim, "--fit", chain / "fit", "--out", runs / "analysis", "-q")
    rep = render_report([runs], tmp_path / "r0", figures=False)
    assert rep.results.runs[0].analysis is not None  # found although the labels differ
    cli("simulate", chain / "pool", *args, "--seed", "7", "--out", sim)
    res = RUNNER.invoke(app, ["report", str(runs), "--out", str(tmp_path / "r")])
    one_line(res, "analysis.json", "simulated again", "mars analyze")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "damage, needle",
    [
        (lambda d: (d / "analysis.json").write_text("{"), "analysis.json"),
        (lambda d: (d / "analysis.json").write_text('{"format": "x"}'), "format"),
        (lambda d: (d / "q_calibration.csv").unlink(), "q_calibration.csv: missing"),
        (lambda d: (d / "switch_models.csv").write_text("a,b\n1,2\n"), "switch_models.csv"),
        (
            lambda d: _edit(d, lambda m: m["trajectories"][0].update(lead=[0])),
            "trajectory 0 is malformed",
        ),
    ],
)
def test_a_damaged_analysis_is_one_line(chain, tmp_path, damage, needle):
    results = tmp_path / "results"
    shutil.copytree(chain / "results", results)
    damage(results / "analysis" / "m" / "d")
    res = RUNNER.invoke(app, ["report", str(results), "--out", str(tmp_path / "r")])
    one_line(res, needle)


def _edit(d: Path, edit) -> None:
    meta = json.loads((d / "analysis.json").read_text())
    edit(meta)
    (d / "analysis.json").write_text(json.dumps(meta))


def test_bad_analyze_inputs_are_one_line_before_any_output(chain, tmp_path):
    sim = chain / "results" / "simulate" / "m" / "d" / "default"
    pool = chain / "pool"
    out = tmp_path / "a"
    cases = [
        (["--example", "99"], "no question 99"),
        (["--example", "1:x"], "QID[:ITERATION]"),
        (["--q-questions", "-1"], "--q-questions"),
    ]
    for extra, needle in cases:
        res = RUNNER.invoke(app, ["analyze", str(pool), str(sim), "--out", str(out), *extra])
        one_line(res, needle)
        assert not out.exists()
    res = RUNNER.invoke(app, ["analyze", str(pool), str(sim.parent), "--out", str(out)])
    one_line(res, "not one `mars simulate` output folder")
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    res = RUNNER.invoke(app, ["analyze", str(pool), str(sim), "--out", str(out)])
    one_line(res, "notes.txt")
    assert (out / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_an_example_asked_for_is_the_figure(chain, tmp_path):
    sim = chain / "results" / "simulate" / "m" / "d" / "default"
    an = tmp_path / "an"
    cli("analyze", chain / "pool", sim, "--fit", chain / "fit", "--out", an, "--example", "3:2",
        "-q")  # fmt: skip
    assert [(t.qid, t.iteration) for t in files.read_analysis(an).of(files.EXAMPLE)] == [(3, 2)]
    rep = render_report([sim], tmp_path / "r", analyses=[an], formats=("png",))
    fig = next(f for f in rep.figures if f.stem == "fig1-right-example")
    assert "Question 3" in fig.caption and "sample 2" in fig.caption
    assert not any("warning" in n for n in fig.notes)


def test_every_swept_method_reads_only_its_own_knob(chain, tmp_path):
    """The trade-off settings put point i of every curve in one simulation: a method's result
    there equals a simulation where only its own knob is set."""
    knobs, methods = sweep_settings()[1]
    base = ["--budget", "24", "--iterations", "2", "--questions", "0-2", "--fit", chain / "fit"]
    together = tmp_path / "together"
    flags = [x for k, v in knobs.items() for x in (f"--{k.replace('_', '-')}", v)]
    cli("simulate", chain / "pool", "-m", ",".join(methods), *base, *flags, "--out", together, "-q")
    for method in methods:
        sweep_knob = next((k for k in knobs if method in _sweepers(k)), None)
        alone = tmp_path / method
        own = [] if sweep_knob is None else [f"--{sweep_knob.replace('_', '-')}", knobs[sweep_knob]]
        cli("simulate", chain / "pool", "-m", method, *base, *own, "--out", alone, "-q")
        a, b = alone / method, together / method
        assert (a / "per_iteration.csv").read_bytes() == (b / "per_iteration.csv").read_bytes()
        # per_question.csv also records the run's γ setting, which only fixed-γ MARS reads
        keep = None if sweep_knob == "gamma" else (lambda c: c != "gamma")
        pd.testing.assert_frame_equal(
            pd.read_csv(a / "per_question.csv", usecols=keep),
            pd.read_csv(b / "per_question.csv", usecols=keep),
        )


def _sweepers(knob: str) -> set[str]:
    from mars.method.registry import METHODS as REGISTRY

    return {n for n, m in REGISTRY.items() if m.sweep is not None and m.sweep.param == knob}


def test_report_errors_name_the_analysis(chain, tmp_path):
    with pytest.raises(ReportError, match="no such directory"):
        collect([chain / "results" / "simulate"], analyses=[tmp_path / "missing"])


@pytest.mark.slow
def test_the_report_imports_neither_the_pool_reader_nor_the_simulator(chain, tmp_path):
    """Issue 21 (1): drawing needs no pool reader, no simulator, no fit reader (of the simulate
    stage it reads only its readers, mars.simulate.runs and .candidates)."""
    import subprocess
    import sys

    results = chain / "results"
    code = (
        "import sys\n"
        "from mars.report import render_report\n"
        f"render_report([{str(results / 'simulate')!r}], {str(tmp_path / 'r')!r}, "
        f"analyses=[{str(results / 'analysis')!r}], formats=('png',))\n"
        "banned = ('mars.simulate.driver', 'mars.method.walk', 'mars.store.pool',\n"
        "          'mars.fit', 'mars.analyze', 'mars.method.arrays', 'mars.method.features',\n"
        "          'pyarrow.parquet')\n"
        "print([m for m in banned if m in sys.modules])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_the_analysis_stage_imports_nothing_of_the_report():
    """Data flows one way: the analysis reads runs through mars.simulate.runs, and the
    report, after it, reads the analysis; nothing of the render stage is imported before it."""
    import subprocess
    import sys

    code = (
        "import sys, mars.analyze\n"
        "print(sorted(m for m in sys.modules if m.startswith('mars.report')))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_a_pool_or_fit_the_run_was_not_simulated_on_is_refused(chain, tmp_path):
    """The analysis is checked against what it is loaded for: the run's input checksum must be
    that of the traces it reads (the fit's recorded hashes, or the pool's content)."""
    other = tmp_path / "other"
    cli("generate", "--backend", "synthetic", "--preset", "qwen3-8b", "--problems", "aime_2025",
        "--traces", "40", "--questions", "0-5", "--seed", "9", "--out", other, "-q")  # fmt: skip
    cli("fit", other, "--out", tmp_path / "other-fit", "-q")
    sim = chain / "results" / "simulate" / "m" / "d" / "default"
    out = tmp_path / "an"
    for args in (
        [other, sim],
        [other, sim, "--fit", tmp_path / "other-fit"],
        [chain / "pool", sim, "--fit", tmp_path / "other-fit"],
    ):
        res = RUNNER.invoke(app, ["analyze", *map(str, args), "--out", str(out)])
        one_line(res, "simulated on other traces")
        assert not out.exists()
