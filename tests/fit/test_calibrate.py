"""`mars calibrate` (mars/fit/calibrate.py) and `mars simulate --calibration`: a calibration fitted
on some pools, read by MARS2 on another, recorded in the results; every refusal one line, exit 2,
before any work."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner
from util import write_layout_pool

from mars.cli import app as cli
from mars.method.learned import Calibration


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def pools(tmp_path):
    return (
        write_layout_pool(tmp_path / "fit", seed=1, n_questions=4),
        write_layout_pool(tmp_path / "eval", seed=2, n_questions=3),
    )


def test_a_calibration_fitted_on_one_pool_is_read_on_another(tmp_path, pools):
    fit, other = pools
    cal = tmp_path / "cal.json"
    res = _run("calibrate", str(fit), "--out", str(cal), "-q")
    assert res.exit_code == 0, res.output
    c = Calibration.load(cal)
    assert [f["source"] for f in c.fitted_on] == [str(fit)] and c.fitted_on[0]["questions"] == 4
    out = tmp_path / "sim"
    res = _run(
        "simulate",
        str(other),
        "-m",
        "sc,sc-mars2,sc-mars2-launch",
        "--budget",
        "16",
        "--iterations",
        "4",
        "--calibration",
        str(cal),
        "--out",
        str(out),
        "-q",
    )
    assert res.exit_code == 0, res.output
    ov = json.loads((out / "sc-mars2-launch" / "overall.json").read_text())
    assert ov["settings"]["warmup"] == 0  # the calibration's default: no warmup
    assert ov["calibration"]["digest"] == c.digest and ov["calibration"]["in_sample"] is False
    assert ov["warmup_tokens_mean"] == 0 and ov["savings_paid_pct"] <= ov["savings_pct"]
    # the same pool it was fitted on is said to be in sample
    res = _run(
        "simulate",
        str(fit),
        "-m",
        "sc-mars2",
        "--budget",
        "16",
        "--iterations",
        "2",
        "--calibration",
        str(cal),
        "--out",
        str(tmp_path / "in"),
    )
    assert res.exit_code == 0 and "in sample" in res.output
    assert json.loads((tmp_path / "in" / "sc-mars2" / "overall.json").read_text())["calibration"][
        "in_sample"
    ]


def test_refusals_are_one_line_before_any_work(tmp_path, pools):
    fit, other = pools
    cal = tmp_path / "cal.json"
    assert _run("calibrate", str(fit), "--out", str(cal), "-q").exit_code == 0
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    out = tmp_path / "sim"
    cases = [
        (["calibrate", str(tmp_path / "nope"), "--out", str(tmp_path / "c.json")], "no such pool"),
        (["calibrate", str(fit), "--out", str(fit / "c.json")], "lies inside POOL"),
        (
            ["calibrate", str(fit), "--out", str(tmp_path / "c.json"), "--protocol", "x"],
            "--protocol",
        ),
        (
            [
                "simulate",
                str(other),
                "-m",
                "sc-mars2",
                "--warmup",
                "16",
                "--calibration",
                str(cal),
                "--out",
                str(out),
            ],
            "--calibration replaces the per-question warmup",
        ),
        (
            [
                "simulate",
                str(other),
                "-m",
                "sc-mars2",
                "--calibration",
                str(bad),
                "--out",
                str(out),
            ],
            "not a calibration of `mars calibrate`",
        ),
        (
            [
                "simulate",
                str(other),
                "-m",
                "sc-mars2",
                "--spacing",
                "4096",
                "--calibration",
                str(cal),
                "--out",
                str(out),
            ],
            "probed every 4096 tokens",
        ),
    ]
    for args, words in cases:
        res = _run(*args)
        assert res.exit_code == 2, (args, res.output)
        assert words in res.output and res.output.count("\n") == 1, res.output
    assert not out.exists() and not (tmp_path / "c.json").exists()


def test_the_fits_arrays_serve_the_calibration_unchanged(tmp_path, pools, monkeypatch):
    """`--fit`: the pools' `mars fit` arrays are read instead of grouping the answers again (what
    the workflow's calibrate jobs do); the calibration is the same, and a fit of other traces
    serves nothing (its questions' arrays are built)."""
    from mars.fit import calibrate as calibrate_module

    fit_pool, other = pools
    fits = tmp_path / "fits"
    for pool in pools:
        res = _run("fit", str(pool), "--out", str(fits / pool.name), "--warmup", "4", "-q")
        assert res.exit_code == 0, res.output
    plain, read = tmp_path / "plain.json", tmp_path / "read.json"
    assert _run("calibrate", str(fit_pool), "--out", str(plain), "-q").exit_code == 0
    built = []
    real = calibrate_module.load_arrays
    monkeypatch.setattr(
        calibrate_module, "load_arrays", lambda q, **kw: built.append(q.qid) or real(q, **kw)
    )
    args = ["calibrate", str(fit_pool), "--out", str(read), "-q"]
    res = _run(*args, "--fit", str(fits / other.name), "--fit", str(fits / fit_pool.name))
    assert res.exit_code == 0, res.output
    assert built == []  # every question's arrays came from its pool's fit
    assert read.read_text() == plain.read_text()
    res = _run(*args, "--fit", str(fits / other.name))  # another pool's fit: built here
    assert res.exit_code == 0 and len(built) == 4
    assert read.read_text() == plain.read_text()
    for extra, words in [
        (["--fit", str(tmp_path / "nope")], "--fit"),
        (["--fit", str(fits / other.name), "--protocol", "parallel-probe"], "it takes no --fit"),
    ]:
        res = _run(*args, *extra)
        assert res.exit_code == 2 and words in res.output and res.output.count("\n") == 1
