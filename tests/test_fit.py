"""The fit stage: `mars fit` fits every question's switch model once; `simulate --fit` reads it."""

from __future__ import annotations

import filecmp
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from util import write_layout_pool

from mars import schema
from mars.arrays import build_arrays
from mars.cli import app
from mars.features import question_features, switch_labels
from mars.fit import FitDir
from mars.methods import parse_methods
from mars.pool import open_pool
from mars.qmodel import SwitchModel
from mars.settings import Settings
from mars.simulate import simulate_pool

runner = CliRunner()
METHODS = "sc,sc-mars,sc-mars-cal,sc-mars-oracle,dco,dco-mars-cal,sc-pp,sc-mars-cert"


@pytest.fixture
def fitted(tmp_path):
    pool = write_layout_pool(tmp_path / "pool", seed=5, n_questions=3, n_answers=4)
    fit = tmp_path / "fit"
    res = runner.invoke(app, ["fit", str(pool), "--out", str(fit), "--warmup", "8,4"])
    assert res.exit_code == 0, res.output
    return pool, fit, res.output


def test_models_parquet_holds_one_model_per_question_and_warmup(fitted):
    pool, fit, output = fitted
    table = pq.read_table(fit / schema.FIT_MODELS)
    assert table.schema.equals(schema.MODEL_SCHEMA)
    rows = table.to_pylist()
    assert sorted((r["qid"], r["warmup"]) for r in rows) == [
        (q, w) for q in range(3) for w in (4, 8)
    ]
    p = open_pool(pool)
    for r in rows:
        arr = build_arrays(p.read_question(r["qid"]))
        warm = arr.pool_ids()[: r["warmup"]]
        assert r["warmup_traces"] == warm.tolist()  # the first W pool traces (reference §4.3)
        assert r["n_rows"] == len(warm) * arr.n_checkpoints
        y = switch_labels(arr, warm).reshape(-1)
        assert r["n_positive"] == int(y.sum())
        X = question_features(arr, warm).reshape(-1, 5)
        model = SwitchModel().fit(X, y)
        assert r["coef"] == model.coef_.tolist() and r["intercept"] == float(model.intercept_)
        assert (r["platt_a"], r["platt_b"]) == model.platt_
        q = model.predict_proba(X)[:, 1]
        assert r["brier"] == pytest.approx(np.mean((q - y) ** 2))
        assert 0 < r["log_loss"] < 1
    manifest = json.loads((fit / schema.FIT_MANIFEST).read_text())
    assert manifest["warmups"] == [4, 8] and manifest["spacing"] == 2048
    assert manifest["features"] == ["position", "confidence", "flips", "streak", "conf_trend"]
    assert "switch models" in output and "mean" in output  # the one-screen summary


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_summary_of_a_fit_without_models_shows_no_numbers(tmp_path):
    """No warmup, no switch model: the summary says so instead of printing nan."""
    pool = write_layout_pool(tmp_path / "pool", seed=5, n_questions=2, n_answers=4)
    res = runner.invoke(app, ["fit", str(pool), "--out", str(tmp_path / "fit"), "--warmup", "0"])
    assert res.exit_code == 0, res.output
    rows = pq.read_table(tmp_path / "fit" / schema.FIT_MODELS).to_pylist()
    assert [r["coef"] for r in rows] == [None, None]
    assert "nan" not in res.output and "mean" in res.output


def test_restored_model_predicts_bit_for_bit(fitted):
    pool, fit, _ = fitted
    arr = build_arrays(open_pool(pool).read_question(1))
    X = question_features(arr).reshape(-1, 5)
    warm = arr.warmup_ids(8)
    model = SwitchModel().fit(
        question_features(arr, warm).reshape(-1, 5), switch_labels(arr, warm).reshape(-1)
    )
    restored = FitDir(fit).question(arr, 8).model
    assert np.array_equal(restored.predict_proba(X), model.predict_proba(X))


def test_simulate_with_fit_is_byte_identical_and_never_refits(fitted, tmp_path, monkeypatch):
    pool, fit, _ = fitted
    args = [
        "simulate",
        str(pool),
        "-m",
        METHODS,
        "--budget",
        "16",
        "--iterations",
        "4",
        "--warmup",
        "8",
        "-q",
    ]
    assert runner.invoke(app, [*args, "--out", str(tmp_path / "a")]).exit_code == 0

    def no_refit(self, X, y):
        raise AssertionError("refitted a switch model")

    monkeypatch.setattr(SwitchModel, "fit", no_refit)
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "b"), "--fit", str(fit)])
    assert res.exit_code == 0, res.output
    for m in METHODS.split(","):
        for f in ("per_iteration.csv", "per_question.csv"):
            assert filecmp.cmp(tmp_path / "a" / m / f, tmp_path / "b" / m / f, shallow=False), (
                m,
                f,
            )
    # the library path too (in-process, one worker): nothing is fitted
    results = simulate_pool(
        pool, parse_methods("sc-mars-cal"), Settings(budget=8, iterations=2, warmup=4), fit_dir=fit
    )
    assert len(results) == 3


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--warmup", "16"], "no switch models for --warmup 16"),
        (["--warmup", "8", "--window", "1024"], "fitted with --window 2048"),
    ],
)
def test_simulate_refuses_a_fit_of_other_settings(fitted, tmp_path, extra, message):
    pool, fit, _ = fitted
    res = runner.invoke(
        app,
        [
            "simulate",
            str(pool),
            "-m",
            "sc-mars",
            "--budget",
            "8",
            "--iterations",
            "2",
            "--out",
            str(tmp_path / "o"),
            "--fit",
            str(fit),
            *extra,
        ],
    )
    assert res.exit_code == 2 and message in res.output
    assert not (tmp_path / "o").exists()


def test_simulate_refuses_a_fit_of_other_traces(fitted, tmp_path):
    _, fit, _ = fitted
    other = write_layout_pool(tmp_path / "other", seed=6, n_questions=3)
    res = runner.invoke(
        app,
        [
            "simulate",
            str(other),
            "-m",
            "sc-mars",
            "--budget",
            "8",
            "--iterations",
            "2",
            "--warmup",
            "8",
            "--out",
            str(tmp_path / "o"),
            "--fit",
            str(fit),
        ],
    )
    assert res.exit_code == 2 and "fitted on other traces" in res.output


def test_not_a_fit_directory(tmp_path):
    pool = write_layout_pool(tmp_path / "pool", n_questions=1)
    res = runner.invoke(
        app,
        ["simulate", str(pool), "-m", "sc", "--out", str(tmp_path / "o"), "--fit", str(tmp_path)],
    )
    assert res.exit_code == 2 and "not a fit directory" in res.output


def test_damaged_array_file_is_rebuilt(fitted, tmp_path):
    """A truncated or empty cached .npz is rebuilt, not a crash; the results do not change."""
    pool, fit, _ = fitted
    args = [
        "simulate",
        str(pool),
        "-m",
        "sc-mars-cal",
        "--budget",
        "8",
        "--iterations",
        "2",
        "--warmup",
        "8",
        "-q",
    ]
    assert (
        runner.invoke(app, [*args, "--out", str(tmp_path / "a"), "--cache", str(fit)]).exit_code
        == 0
    )
    npz = sorted(fit.glob("q*.npz"))
    npz[0].write_bytes(npz[0].read_bytes()[:100])
    npz[1].write_bytes(b"")
    for flag in ("--cache", "--fit"):
        out = tmp_path / f"b{flag}"
        res = runner.invoke(app, [*args, "--out", str(out), flag, str(fit)])
        assert res.exit_code == 0, res.output
        assert filecmp.cmp(
            tmp_path / "a" / "sc-mars-cal" / "per_iteration.csv",
            out / "sc-mars-cal" / "per_iteration.csv",
            shallow=False,
        )
