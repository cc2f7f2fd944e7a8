"""The report tests' results, made once per session: the hand-made tree and its report, the
synthetic-5q pool simulated and analysed as the workflow does (skipped without ../shared), a small
synthetic pool with its analysis, and the two pools the comparison figures are drawn from."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mars.cli import app
from mars.report import render_report

from .trees import make_tree

SHARED = Path(__file__).resolve().parents[3] / "shared"
SYNTH5Q = SHARED / "fixtures" / "reference-sim" / "synthetic-5q" / "pool.parquet"


def mars_cli(*args) -> None:
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, res.output


@pytest.fixture(scope="session")
def tree(tmp_path_factory):
    """The hand-made tree, its report (figures without a pool) and the Report."""
    root = tmp_path_factory.mktemp("tree")
    results = make_tree(root)
    out = root / "report"
    rep = render_report([results], out)
    return results, out, rep


@pytest.fixture(scope="session")
def simulated(tmp_path_factory):
    """synthetic-5q simulated (main setting, a Parallel-Probe variant, the trade-off settings on
    two questions) and analysed, as the workflow does, then reported."""
    if not SYNTH5Q.exists():
        pytest.skip("needs ../shared reference fixtures")
    from mars.analyze.driver import analyze
    from mars.method.registry import parse_methods, sweep_settings
    from mars.method.settings import Settings
    from mars.simulate.driver import simulate_pool
    from mars.simulate.results import write_methods

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


@pytest.fixture(scope="session")
def synthetic(tmp_path_factory) -> Path:
    """A small synthetic pool (8 questions × 40 traces) simulated into results/, with its
    analysis under results/analysis."""
    root = tmp_path_factory.mktemp("synthetic")
    pool = root / "pool"
    mars_cli("generate", "--backend", "synthetic", "--preset", "qwen3-8b", "--problems",
             "aime_2025", "--traces", 40, "--questions", "0-7", "--out", pool)  # fmt: skip
    sim = root / "results" / "qwen3-8b" / "aime_2025" / "default" / "sim"
    methods = "sc,sc-mars,sc-mars-cal,sc-mars-oracle,dco,dco-mars,dco-mars-cal,dco-mars-oracle"
    mars_cli("simulate", pool, "-m", methods + ",sc-pp,oracle-first,oracle-dco-first",
             "--budget", 24, "--iterations", 4, "--out", sim, "-q")  # fmt: skip
    an = root / "results" / "analysis" / "qwen3-8b" / "aime_2025"
    mars_cli("analyze", pool, sim, "--out", an, "--q-questions", 1, "-q")
    return root / "results"


@pytest.fixture(scope="session")
def pools(tmp_path_factory) -> Path:
    """Two pools as a user has them: synthetic AIME (every method; Parallel-Probe at a second u
    on the same samples; a run on other samples) and one without per-token confidences (no
    DeepConf pipeline)."""
    root = tmp_path_factory.mktemp("comparison")
    res = root / "results"
    small = ["--budget", "24", "--iterations", "4", "-q"]
    for model, confs in (("qwen3-8b", "--confs"), ("own-model", "--no-confs")):
        pool = root / model
        mars_cli("generate", "--preset", "qwen3-8b", "--problems", "aime_2025", "--traces", 40,
                 "--questions", "0-5", confs, "--out", pool, "-q")  # fmt: skip
        sim = res / model / "aime_2025"
        mars_cli("simulate", pool, "-m", "all", "--out", sim / "default" / "sim", *small)
        mars_cli("simulate", pool, "-m", "sc-pp,sc-pp-faithful", "--pp-conv", 4,
                 "--out", sim / "pp-u4" / "sim", *small)  # fmt: skip
    mars_cli("simulate", root / "qwen3-8b", "-m", "sc,sc-mars", "--budget", 16, "--iterations", 2,
             "--out", res / "qwen3-8b" / "aime_2025" / "tradeoff-1" / "sim", "-q")  # fmt: skip
    return res


@pytest.fixture(scope="session")
def fitted(tmp_path_factory) -> Path:
    """A small synthetic pool fitted (`mars fit`), simulated with that fit and analysed with it:
    an analysis holding the switch models."""
    root = tmp_path_factory.mktemp("fitted")
    pool, fit = root / "pool", root / "fit"
    mars_cli("generate", "--backend", "synthetic", "--preset", "qwen3-8b", "--problems",
             "aime_2025", "--traces", 40, "--questions", "0-3", "--out", pool, "-q")  # fmt: skip
    mars_cli("fit", pool, "--out", fit, "-q")
    sim = root / "results" / "qwen3-8b" / "aime_2025" / "default" / "sim"
    mars_cli("simulate", pool, "--fit", fit, "-m", "sc,sc-mars-cal", "--budget", 24,
             "--iterations", 2, "--out", sim, "-q")  # fmt: skip
    an = root / "results" / "analysis" / "qwen3-8b" / "aime_2025"
    mars_cli("analyze", pool, sim, "--fit", fit, "--out", an, "--q-questions", 1, "-q")
    return root / "results"
