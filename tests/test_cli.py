"""The command line: help texts, one-line user errors, tracebacks for bugs."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from mars import __version__, cli
from mars.backends.factory import bundled_presets
from mars.problems import bundled_problem_sets
from mars.settings import LIVE_KEYS, SETTINGS, SPECS

runner = CliRunner()


def test_generate_help_lists_presets_and_problem_sets():
    out = runner.invoke(cli.app, ["generate", "--help"], terminal_width=400).output
    for name in bundled_presets() + bundled_problem_sets():
        assert name in out, name
    assert len(bundled_presets()) >= 4 and "aime_2025" in bundled_problem_sets()


def test_user_error_is_one_line_exit_2(tmp_path):
    res = runner.invoke(
        cli.app, ["simulate", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2
    assert res.output.count("\n") == 1 and res.output.startswith("error: ")


def test_internal_error_shows_its_traceback(tmp_path, monkeypatch):
    """A bug (a numpy broadcast error inside the simulator) is not dressed up as a user error."""
    from util import write_layout_pool

    import mars.simulate

    pool = write_layout_pool(tmp_path / "p", n_questions=1)

    def broken(*args, **kwargs):
        raise ValueError("operands could not be broadcast together with shapes (3,) (4,)")

    monkeypatch.setattr(mars.simulate, "simulate_question", broken)
    res = runner.invoke(cli.app, ["simulate", str(pool), "-m", "sc", "--out", str(tmp_path / "o")])
    assert res.exit_code == 1
    assert isinstance(res.exception, ValueError) and "broadcast" in str(res.exception)
    assert "error: " not in res.output


@pytest.mark.parametrize(
    "command",
    ["simulate", "fit", "generate", "solve", "import", "export", "report", "consolidate", "replay"],
)
def test_every_command_has_help(command):
    res = runner.invoke(cli.app, [command, "--help"])
    assert res.exit_code == 0 and "Usage" in res.output


@pytest.mark.parametrize("args", [["--version"], ["version"]])
def test_version_as_option_and_command(args):
    res = runner.invoke(cli.app, args)
    assert res.exit_code == 0 and res.output == f"{__version__}\n"


@pytest.mark.parametrize(
    "command,names",
    [
        ("simulate", [s.name for s in SETTINGS]),
        ("solve", LIVE_KEYS),
        ("fit", ["warmup", "window", "spacing"]),
    ],
)
def test_settings_help_shows_each_range_and_default(command, names):
    """Every setting option's help shows the range and default its declaration gives."""
    out = runner.invoke(cli.app, [command, "--help"], env={"COLUMNS": "400"}).output
    for name in names:
        spec = SPECS[name]
        (line,) = [line for line in out.splitlines() if f" {spec.flag} " in line]
        assert f"[range: {spec.range_text()}]" in line, line
        if spec.optional:
            assert "(default: " in line, line  # None: what it derives is said in words
        else:
            assert f"[default: {spec.default}]" in line, line


# -- outputs are checked before any work (issue 13) ----------------------------------------------


def _commands(tmp_path, out):
    from util import write_layout_pool

    pool = write_layout_pool(tmp_path / "pool", n_questions=1)
    sim = tmp_path / "sim"
    assert (
        runner.invoke(
            cli.app,
            [
                "simulate",
                str(pool),
                "-m",
                "sc",
                "--budget",
                "8",
                "--iterations",
                "2",
                "--out",
                str(sim),
                "-q",
            ],
        ).exit_code
        == 0
    )
    return {
        "simulate": [
            "simulate",
            str(pool),
            "-m",
            "sc",
            "--budget",
            "8",
            "--iterations",
            "2",
            "--out",
            out,
            "-q",
        ],
        "fit": ["fit", str(pool), "--out", out, "-q"],
        "report": ["report", str(sim), "--out", out, "--no-figures"],
        "export": ["export", str(pool), out],
        "import": ["import", "mars-parquet", str(tmp_path / "nothing.parquet"), out],
        "generate": [
            "generate",
            "--problems",
            "aime_2025",
            "--traces",
            "2",
            "--questions",
            "0",
            "--out",
            out,
            "-q",
        ],
    }


@pytest.mark.parametrize("where", ["existing-file", "under-a-file", "unwritable"])
def test_bad_output_locations_fail_before_work(tmp_path, where):
    """An --out that is a file, lies under a file or cannot be written: one line, exit 2, before
    any computation, and nothing left behind."""
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    out = {"existing-file": blocker, "under-a-file": blocker / "sub", "unwritable": "/proc/x/y"}[
        where
    ]
    for name, args in _commands(tmp_path, str(out)).items():
        if name == "export" and where == "existing-file":
            continue  # export replaces a file atomically, as any output file
        if name == "import" and where == "existing-file":
            continue  # refused as "already exists" (its own test)
        res = runner.invoke(cli.app, args)
        assert res.exit_code == 2, (name, res.output, res.exception)
        assert res.output.startswith("error: ") and res.output.count("\n") == 1, (name, res.output)
    assert blocker.read_text() == "x"


def test_created_folders_are_not_private(tmp_path):
    """Output folders get ordinary permissions (0755 under umask 022), not mkdtemp's 0700."""
    import os

    from util import write_layout_pool

    old = os.umask(0o022)
    try:
        pool = write_layout_pool(tmp_path / "pool", n_questions=1)
        out = tmp_path / "sim"
        res = runner.invoke(
            cli.app,
            [
                "simulate",
                str(pool),
                "-m",
                "sc",
                "--budget",
                "8",
                "--iterations",
                "2",
                "--out",
                str(out),
                "-q",
            ],
        )
        assert res.exit_code == 0
        for d in (pool, out, out / "sc"):
            assert d.stat().st_mode & 0o777 == 0o755, d
    finally:
        os.umask(old)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("5-2", "range 5-2 runs backwards"),
        ("0-100000000", "question ids go up to 1,000,000"),
        ("-1", "'-1' is not an id or a range"),
        ("a", "'a' is not an id or a range"),
    ],
)
def test_question_lists(tmp_path, spec, message):
    import time

    from util import write_layout_pool

    pool = write_layout_pool(tmp_path / "pool", n_questions=2)
    t0 = time.perf_counter()
    res = runner.invoke(
        cli.app,
        ["simulate", str(pool), "-m", "sc", "--questions", spec, "--out", str(tmp_path / "o")],
    )
    assert res.exit_code == 2 and message in res.output and res.output.count("\n") == 1
    assert time.perf_counter() - t0 < 5


def test_repeated_question_is_simulated_once(tmp_path):
    import pandas as pd
    from util import write_layout_pool

    pool = write_layout_pool(tmp_path / "pool", n_questions=2)
    out = tmp_path / "o"
    res = runner.invoke(
        cli.app,
        [
            "simulate",
            str(pool),
            "-m",
            "sc",
            "--questions",
            "0,0,1",
            "--budget",
            "8",
            "--iterations",
            "2",
            "--out",
            str(out),
            "-q",
        ],
    )
    assert res.exit_code == 0
    assert pd.read_csv(out / "sc" / "per_question.csv").qid.tolist() == [0, 1]


def test_sampling_options_are_refused_by_the_synthetic_backend(tmp_path):
    res = runner.invoke(
        cli.app,
        [
            "generate",
            "--problems",
            "aime_2025",
            "--traces",
            "2",
            "--temperature",
            "0.2",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert res.exit_code == 2 and "the synthetic backend has no --temperature" in res.output
    assert not (tmp_path / "o").exists()
