"""The fit stage: `mars fit` fits every question's switch model once; `simulate --fit` reads it."""

from __future__ import annotations

import filecmp
import json
import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from util import write_layout_pool

from mars.cli import app
from mars.fit.fitdir import FitDir
from mars.method.arrays import build_arrays, load_arrays
from mars.method.features import question_features, switch_labels
from mars.method.qmodel import SwitchModel
from mars.method.registry import parse_methods
from mars.method.settings import Settings
from mars.simulate.driver import simulate_pool
from mars.store import schema
from mars.store.pool import open_pool

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
    q = open_pool(pool).read_question(1)
    arr = build_arrays(q)
    X = question_features(arr).reshape(-1, 5)
    warm = arr.warmup_ids(8)
    model = SwitchModel().fit(
        question_features(arr, warm).reshape(-1, 5), switch_labels(arr, warm).reshape(-1)
    )
    restored = FitDir(fit).question(q, arr, 8).model
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
        (["--warmup", "8", "--finals", "last-probe"], "fitted with --finals trace"),
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
    (tmp_path / "empty").mkdir()
    res = runner.invoke(
        app,
        [
            "simulate",
            str(pool),
            "-m",
            "sc",
            "--out",
            str(tmp_path / "o"),
            "--fit",
            str(tmp_path / "empty"),
        ],
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


SIM = ["-m", "sc-mars-cal,dco-mars-cal", "--budget", "8", "--iterations", "2", "--warmup", "8"]


def _simulate(pool, out, *extra):
    return runner.invoke(app, ["simulate", str(pool), *SIM, "--out", str(out), "-q", *extra])


def _same_results(a, b) -> bool:
    return all(
        filecmp.cmp(a / m / f, b / m / f, shallow=False)
        for m in ("sc-mars-cal", "dco-mars-cal")
        for f in ("per_iteration.csv", "per_question.csv")
    )


@pytest.mark.parametrize("flag", ["--fit", "--cache"])
@pytest.mark.parametrize("swap", ["question", "window"])
def test_an_array_file_serves_only_the_question_and_settings_it_was_built_for(
    fitted, tmp_path, flag, swap
):
    """A file at question 0's name holding question 1's arrays (or arrays of another window) is
    never used: question 0 is simulated from its own traces, and results are unchanged."""
    pool, fit, _ = fitted
    assert _simulate(pool, tmp_path / "clean").exit_code == 0
    q0 = next(fit.glob("q000000-*.npz"))
    if swap == "question":
        q0.write_bytes(next(fit.glob("q000001-*.npz")).read_bytes())
    else:
        other = load_arrays(open_pool(pool).read_question(0), tmp_path / "w1024", window=1024)
        assert other.window == 1024
        q0.write_bytes(next((tmp_path / "w1024").glob("q000000-*.npz")).read_bytes())
    res = _simulate(pool, tmp_path / "o", flag, str(fit))
    assert res.exit_code == 0, res.output
    assert pq.read_table(fit / schema.FIT_MODELS).num_rows == 6  # the fit itself is untouched
    assert pd.read_csv(tmp_path / "o" / "sc-mars-cal" / "per_question.csv").qid.tolist() == [
        0,
        1,
        2,
    ]
    assert _same_results(tmp_path / "clean", tmp_path / "o")


def _edit_models(fit, edit):
    f = fit / schema.FIT_MODELS
    t = pq.read_table(f)
    rows = t.to_pylist()
    table = edit(t, rows)
    pq.write_table(table, f)


def _edit_row(**changes):
    def edit(t, rows):
        rows[0].update(changes)
        nullable = pa.schema([f.with_nullable(True) for f in t.schema], metadata=t.schema.metadata)
        return pa.Table.from_pylist(rows, schema=nullable)

    return edit


def _drop(col):
    return lambda t, rows: t.drop_columns([col])


@pytest.mark.parametrize(
    "edit, message",
    [
        (_edit_row(coef=[float("nan"), 0.0, 0.0, 0.0, 0.0]), "coef holds a value that is not"),
        (_edit_row(coef=[float("inf"), 0.0, 0.0, 0.0, 0.0]), "coef holds a value that is not"),
        (_edit_row(mean=[1e308, 0.0, 0.0, 0.0, 0.0]), "mean holds a value that is not"),
        (_edit_row(intercept=float("-inf")), "intercept -inf is not a finite number"),
        (_edit_row(scale=[0.0, 1.0, 1.0, 1.0, 1.0]), "scale holds a value below"),
        (_edit_row(platt_a=float("inf")), "platt_a inf is not a finite number"),
        (_edit_row(coef=[0.1, 0.2, 0.3]), "coef has 3 values, expected 5"),
        (_edit_row(mean=None), "mean None is not a list of 5 numbers"),
        (_edit_row(n_rows=None), "n_rows is null"),
        (_edit_row(n_rows=3), "do not fit"),
        (_edit_row(warmup_traces=[0, 1, 2, 99]), "warmup traces"),
        (_edit_row(content_hash="x"), "content hash differs"),
        (_edit_row(warmup=12), "not one of the warmup sizes"),
        (_edit_row(log_loss=float("nan")), "log_loss nan is not a finite number"),
        (_drop("platt_b"), "missing column 'platt_b'"),
        (_drop("n_rows"), "missing column 'n_rows'"),
        (
            lambda t, rows: pa.Table.from_pylist([rows[0], *rows], schema=t.schema),
            "two rows",
        ),
        (
            lambda t, rows: t.set_column(
                t.column_names.index("coef"), "coef", pa.array([["a"]] * t.num_rows)
            ),
            "column 'coef' has type list<element: string>",
        ),
    ],
)
def test_a_damaged_models_file_is_one_line_naming_it(fitted, tmp_path, edit, message):
    """Fitted models are validated on load: finite numbers, right shapes, every column, one row
    per question × warmup, consistent with fit.json; anything else is refused before any work."""
    pool, fit, _ = fitted
    _edit_models(fit, edit)
    res = _simulate(pool, tmp_path / "o", "--fit", str(fit))
    assert res.exit_code == 2, res.output
    assert res.output.startswith(f"error: {fit / schema.FIT_MODELS}") and message in res.output
    assert res.output.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_a_models_file_of_other_fit_settings_is_refused(fitted, tmp_path):
    """models.parquet records the spacing and window it was fitted with: one copied from a fit of
    another window is refused, even where fit.json matches the simulation."""
    pool, fit, _ = fitted
    other = tmp_path / "fit1024"
    res = runner.invoke(
        app, ["fit", str(pool), "--out", str(other), "--warmup", "8,4", "--window", "1024", "-q"]
    )
    assert res.exit_code == 0, res.output
    (fit / schema.FIT_MODELS).write_bytes((other / schema.FIT_MODELS).read_bytes())
    res = _simulate(pool, tmp_path / "o", "--fit", str(fit))
    assert (
        res.exit_code == 2 and "'window': 1024" in res.output and "rerun `mars fit`" in res.output
    )


def _fuzz_fit(rng, fit):
    """Damage a fit directory in one random way: its array files, its models file or its
    manifest (bytes, truncation, a swapped file, values, columns)."""
    npz = sorted(fit.glob("q*.npz"))
    models = fit / schema.FIT_MODELS
    kind = str(
        rng.choice(["flip", "truncate", "swap", "manifest", "value", "column", "models-bytes"])
    )
    if kind in ("flip", "models-bytes"):
        f = npz[int(rng.integers(0, len(npz)))] if kind == "flip" else models
        data = bytearray(f.read_bytes())
        for i in rng.integers(0, len(data), size=int(rng.integers(1, 20))):
            data[int(i)] = int(rng.integers(0, 256))
        f.write_bytes(bytes(data))
    elif kind == "truncate":
        f = [*npz, models][int(rng.integers(0, len(npz) + 1))]
        data = f.read_bytes()
        f.write_bytes(data[: int(rng.integers(0, len(data)))])
    elif kind == "swap":
        a, b = rng.choice(len(npz), size=2, replace=False)
        npz[int(a)].write_bytes(npz[int(b)].read_bytes())
    elif kind == "manifest":
        m = json.loads((fit / schema.FIT_MANIFEST).read_text())
        key = str(rng.choice(["spacing", "window", "warmups", "questions", "version"]))
        m[key] = [None, -1, "x", [], {}, 1.5][int(rng.integers(0, 6))]
        (fit / schema.FIT_MANIFEST).write_text(json.dumps(m))
    elif kind == "value":
        col = str(rng.choice(list(_BAD_VALUES)))
        bad = _BAD_VALUES[col]
        _edit_models(fit, _edit_row(**{col: bad[int(rng.integers(0, len(bad)))]}))
    else:
        col = str(rng.choice(schema.MODEL_SCHEMA.names))

        def as_strings(t, rows):
            values = pa.array([str(x) for x in t.column(col).to_pylist()])
            return t.set_column(t.column_names.index(col), col, values)

        _edit_models(fit, _drop(col) if rng.random() < 0.5 else as_strings)
    return kind


_NUMBER = (None, float("nan"), float("inf"), -1e308)
_VECTOR = (None, [], [1.0], [float("nan")] * 5, [1e308] * 5)
_BAD_VALUES = {
    **dict.fromkeys(("intercept", "platt_a", "platt_b", "log_loss"), _NUMBER),
    **dict.fromkeys(("mean", "scale", "coef"), _VECTOR),
    **dict.fromkeys(("qid", "warmup", "n_rows", "n_traces"), (None, -1, 10**12)),
    "warmup_traces": (None, [-1], [10**6] * 8),
}
FIT_FUZZ_TRIALS = 40


@pytest.mark.slow
def test_fuzz_damaged_fit_directories_never_give_a_traceback_or_wrong_results(tmp_path):
    """Damaged arrays, models or manifest: exit 0 with the results of a run without the fit, or
    exit 2 with one line and no output; never a traceback."""
    rng = np.random.default_rng(19)
    pool = write_layout_pool(tmp_path / "pool", seed=4, n_questions=3, n=24)
    clean = tmp_path / "clean"
    assert runner.invoke(app, ["fit", str(pool), "--out", str(clean), "--warmup", "8", "-q"])
    assert _simulate(pool, tmp_path / "ref").exit_code == 0
    outcomes: dict[int, list] = {0: [], 2: []}
    for trial in range(FIT_FUZZ_TRIALS):
        fit = tmp_path / f"f{trial}"
        shutil.copytree(clean, fit)
        kind = _fuzz_fit(rng, fit)
        for flag in ("--fit", "--cache"):
            out = tmp_path / f"o{trial}{flag}"
            res = _simulate(pool, out, flag, str(fit))
            assert res.exit_code in (0, 2), (trial, kind, res.output, res.exception)
            if res.exit_code == 2:
                assert res.output.startswith("error: ") and res.output.count("\n") == 1
                assert not out.exists()
            else:
                assert _same_results(tmp_path / "ref", out), (trial, kind, flag)
            outcomes[res.exit_code].append(kind)
    assert len(outcomes[2]) > FIT_FUZZ_TRIALS // 4  # damaged models are refused
    assert set(outcomes[0]) >= {"flip", "swap"}  # damaged arrays are rebuilt


def test_a_warmup_beyond_the_traces_is_refused_before_any_work(tmp_path):
    """`mars fit --warmup 100` on 64-trace questions would fit on all 64 and label it 100."""
    pool = write_layout_pool(tmp_path / "pool", seed=5, n_questions=2, n=64)
    res = runner.invoke(
        app, ["fit", str(pool), "--out", str(tmp_path / "fit"), "--warmup", "8,100"]
    )
    assert res.exit_code == 2, res.output
    assert res.output == f"error: --warmup 100: question 0 of {pool} has only 64 traces " + (
        "(the warmup is the first --warmup of them)\n"
    )
    assert not (tmp_path / "fit").exists()


def test_a_fit_of_an_older_format_is_refused(fitted, tmp_path):
    """A fit directory written before models.parquet recorded its settings asks to be refitted."""
    pool, fit, _ = fitted
    manifest = json.loads((fit / schema.FIT_MANIFEST).read_text())
    for old in (1, 3):  # 3: content hashes by BLAKE2b
        (fit / schema.FIT_MANIFEST).write_text(json.dumps({**manifest, "version": old}))
        res = _simulate(pool, tmp_path / "o", "--fit", str(fit))
        assert res.exit_code == 2 and res.output.count("\n") == 1
        assert f"mars-fit format version {old} is not supported" in res.output
        assert "fit again (`mars fit`; in the workflow `snakemake --forcerun fit`)" in res.output


def test_models_of_other_answer_groups_are_refused(fitted, monkeypatch):
    """Switch labels follow the answer groups: models fitted under another arrays version (the
    grouping or grading changed since) are refused, not used with the new groups."""
    from mars.fit import fitdir

    _, fit, _ = fitted
    FitDir(fit)  # readable as written
    monkeypatch.setattr(fitdir, "ARRAYS_VERSION", fitdir.ARRAYS_VERSION + 1)
    with pytest.raises(fitdir.FitError, match=r"models.parquet: fitted on .*rerun `mars fit`"):
        FitDir(fit)


def test_a_fit_directory_fitted_again_is_read_again(fitted, tmp_path):
    """One process (a notebook, the library) that refits a directory simulates with the new
    models, never with those it read before."""
    pool, fit, _ = fitted
    assert _simulate(pool, tmp_path / "a", "--fit", str(fit)).exit_code == 0
    res = runner.invoke(app, ["fit", str(pool), "--out", str(fit), "--warmup", "4", "-q"])
    assert res.exit_code == 0, res.output
    res = _simulate(pool, tmp_path / "b", "--fit", str(fit))
    assert res.exit_code == 2 and "no switch models for --warmup 8" in res.output
