"""The command line: help texts, one-line user errors, tracebacks for bugs."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from mars import __version__, cli
from mars.engines.factory import bundled_presets
from mars.method.settings import LIVE_KEYS, SETTINGS, SPECS
from mars.store.problems import bundled_problem_sets

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

    from mars.simulate import driver

    pool = write_layout_pool(tmp_path / "p", n_questions=1)

    def broken(*args, **kwargs):
        raise ValueError("operands could not be broadcast together with shapes (3,) (4,)")

    monkeypatch.setattr(driver, "simulate_question", broken)
    res = runner.invoke(cli.app, ["simulate", str(pool), "-m", "sc", "--out", str(tmp_path / "o")])
    assert res.exit_code == 1
    assert isinstance(res.exception, ValueError) and "broadcast" in str(res.exception)
    assert "error: " not in res.output


def test_simulate_all_says_which_methods_the_pool_cannot_run(tmp_path):
    """--method all on a pool without per-token confidences runs every other method and says,
    in one line, which it left out and why."""
    from util import write_layout_pool

    pool = write_layout_pool(tmp_path / "p", n_questions=2, confs=False)
    out = tmp_path / "o"
    args = ["simulate", str(pool), "-m", "all", "--out", str(out), "--budget", "24"]
    res = runner.invoke(cli.app, [*args, "--iterations", "2", "--warmup", "8", "-q"])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines() == [
        "note: --method all leaves out dco, dco-mars, dco-mars-cal, dco-mars-oracle, "
        "oracle-dco-first, oracle-dco-last, dco-mars-cert, dco-mars2: they need per-token "
        f"confidences, which {pool} does not have"
    ]
    assert (out / "sc-mars-cal" / "overall.json").is_file() and not (out / "dco").exists()


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
        if name in ("import", "export") and where == "existing-file":
            continue  # refused as "already exists" (their own test)
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


#: Commands whose unfinished output is kept on purpose: a rerun resumes it.
RESUMABLE = {"generate", "probe", "fit"}


@pytest.mark.parametrize(
    "command", ["generate", "probe", "import", "export", "fit", "simulate", "report"]
)
def test_a_full_disk_is_one_line(tmp_path, command):
    """The disk fills up while writing: one line naming the output and the disk, exit 2, no
    temporary file left, and no partial output but what a rerun resumes."""
    import os

    from util import small_disk, write_published_pool

    with small_disk(tmp_path / "disk", "8k") as disk:
        out = disk / "out"
        args = _commands(tmp_path, str(out))
        published = write_published_pool(tmp_path / "published.parquet", n_questions=1)
        args["import"] = ["import", "mars-parquet", str(published), str(out)]
        if command == "probe":
            traces = tmp_path / "traces"
            gen = [*args["generate"][:-3], "--probe", "none", "--out", str(traces), "-q"]
            assert runner.invoke(cli.app, gen).exit_code == 0
            args["probe"] = ["probe", str(traces), "--out", str(out), "-q"]
        res = runner.invoke(cli.app, args[command])
        assert res.exit_code == 2, (res.output, res.exception)
        assert res.output.count("\n") == 1 and res.output.startswith(f"error: {out}"), res.output
        assert f"no space left on the disk mounted at {disk} (" in res.output
        left = [os.path.join(d, f) for d, ds, fs in os.walk(disk) for f in ds + fs]
        assert not [p for p in left if ".tmp-" in p or ".old-" in p], left
        if command not in RESUMABLE:
            assert left == []


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
    assert time.perf_counter() - t0 < 15  # was 35 s for 0-100000000; instant now


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


# -- an output is never an input, inside one or holding one (issue 19) ---------------------------


def _run(*args: str) -> None:
    res = runner.invoke(cli.app, list(args))
    assert res.exit_code == 0, (args, res.output)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Every kind of input a command with an output reads, each alone in a folder of its own
    (the folder that holds it)."""
    from util import write_layout_pool, write_published_pool

    root = tmp_path_factory.mktemp("inputs")
    box = {n: root / n for n in ("pool", "fit", "cache", "sim", "traces", "shards", "files")}
    for d in box.values():
        d.mkdir()
    pool = write_layout_pool(box["pool"] / "p", n_questions=1)
    sim = ["-m", "sc", "--budget", "8", "--iterations", "2", "-q"]
    _run("simulate", str(pool), *sim, "--out", str(box["sim"] / "s"))
    _run("simulate", str(pool), *sim, "--out", str(root / "s2"), "--cache", str(box["cache"] / "c"))
    _run("fit", str(pool), "--out", str(box["fit"] / "f"), "-q")
    gen = ["generate", "--problems", "aime_2025", "--traces", "2", "--questions", "0", "-q"]
    _run(*gen, "--probe", "none", "--out", str(box["traces"] / "t"))
    for s in ("0", "1"):
        _run(*gen, "--n-shards", "2", "--shard", s, "--out", str(box["shards"] / f"s{s}"))
    problems = box["files"] / "problems.jsonl"
    problems.write_text('{"question": "What is 2 + 3?", "answer": "5"}\n')
    published = write_published_pool(box["files"] / "pub.parquet", n_questions=1)
    return root, {
        "pool": pool,
        "sim": box["sim"] / "s",
        "fit": box["fit"] / "f",
        "cache": box["cache"] / "c",
        "traces": box["traces"] / "t",
        "shard": box["shards"] / "s0",
        "problems": problems,
        "published": published,
    }


def _overlap_cases(p: dict) -> list[tuple[str, str, list[str]]]:
    """(command, the input it must stay apart from, its arguments with OUT for the output)."""
    sim = ["-m", "sc", "--budget", "8", "--iterations", "2", "-q", "--out", "OUT"]
    gen = ["--problems", str(p["problems"]), "--traces", "2", "-q", "--out", "OUT"]
    return [
        ("probe", "traces", ["probe", str(p["traces"]), "--out", "OUT", "--replace", "-q"]),
        ("simulate", "pool", ["simulate", str(p["pool"]), *sim]),
        ("simulate --fit", "fit", ["simulate", str(p["pool"]), "--fit", str(p["fit"]), *sim]),
        (
            "simulate --cache",
            "cache",
            ["simulate", str(p["pool"]), "--cache", str(p["cache"]), *sim],
        ),
        ("fit", "pool", ["fit", str(p["pool"]), "--out", "OUT", "-q"]),
        ("import", "published", ["import", "mars-parquet", str(p["published"]), "OUT"]),
        ("export", "pool", ["export", str(p["pool"]), "OUT"]),
        ("generate", "problems", ["generate", *gen]),
        ("solve", "problems", ["solve", *gen]),
        (
            "consolidate",
            "shard",
            ["consolidate", str(p["shard"]), str(p["shard"]) + "1", "-o", "OUT"],
        ),
        ("report", "sim", ["report", str(p["sim"]), "--out", "OUT", "--no-figures"]),
        ("analyze", "pool", ["analyze", str(p["pool"]), str(p["sim"]), "--out", "OUT", "-q"]),
        ("analyze", "sim", ["analyze", str(p["pool"]), str(p["sim"]), "--out", "OUT", "-q"]),
        (
            "analyze --fit",
            "fit",
            ["analyze", str(p["pool"]), str(p["sim"]), "--fit", str(p["fit"]), "--out", "OUT"],
        ),
    ]


def _tree(root) -> dict:
    return {
        str(f.relative_to(root)): f.read_bytes() if f.is_file() else None for f in root.rglob("*")
    }


@pytest.mark.parametrize("where", ["is", "is, by ..", "is, by a symlink", "inside", "holds"])
def test_an_output_is_never_an_input_inside_one_or_holding_one(inputs, where):
    """`mars probe POOL --out POOL --replace` deleted the pool it read. Every command with an input
    and an output refuses an output that is the input, lies inside it or holds it (paths compared
    on the file system): one line, exit 2, before any work, every input untouched."""
    root, p = inputs
    before = _tree(root)
    link = root / "link"
    for name, key, args in _overlap_cases(p):
        given = p[key]
        out = {
            "is": given,
            "is, by ..": given.parent / ".." / given.parent.name / given.name,
            "is, by a symlink": link,
            "inside": given / "sub",
            "holds": given.parent,
        }[where]
        if (name, where) == ("report", "inside"):
            continue  # allowed: a report under its results root (the next test)
        link.symlink_to(given)
        try:
            res = runner.invoke(cli.app, [str(out) if a == "OUT" else a for a in args])
        finally:
            link.unlink()
        assert res.exit_code == 2, (name, where, res.output)
        assert res.output.startswith("error: ") and res.output.count("\n") == 1, (name, res.output)
        assert _tree(root) == before, (name, where)


def test_a_report_may_lie_inside_its_results_root(inputs, tmp_path):
    """The usual layout: `mars report results --out results/report`."""
    import shutil

    results = tmp_path / "results"
    shutil.copytree(inputs[1]["sim"], results / "s")
    _run("report", str(results), "--out", str(results / "report"), "--no-figures")
    assert (results / "report" / "report.md").exists()


def _mars(*args: str) -> list[str]:
    return [sys.executable, "-m", "mars.cli", *args]


@pytest.mark.slow
def test_generate_without_a_terminal_writes_progress_lines_and_a_closing_summary(tmp_path):
    """stderr to a file (nohup, CI, SLURM): a line per question, and what the folder holds."""
    out = tmp_path / "pool"
    args = ["generate", "--problems", "aime_2025", "--questions", "0-2", "--traces", "4"]
    r = subprocess.run(_mars(*args, "--out", str(out)), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0].endswith("] generate (synthetic): 3 questions to do")
    assert any("] generate (synthetic): 1/3 questions done, about " in x for x in lines)
    assert any(x.endswith("] generate (synthetic): 3/3 questions done") for x in lines)
    assert any(re.search(r"\]   q2: [\d,]+ tokens, \d of 4 running$", x) for x in lines)
    finals = [pq.read_table(p, columns=["final_answer"]).column(0) for p in out.glob("traces/*")]
    n_final = sum(len(c) - c.null_count for c in finals)
    share = f"{n_final / 12:.0%}"
    assert (
        lines[-1]
        == f"wrote 12 traces of 3 questions, {n_final} with a final answer ({share}), to {out}"
    )
    again = subprocess.run(_mars(*args, "--out", str(out)), capture_output=True, text=True)
    assert again.stderr.splitlines()[-1] == lines[-1]  # nothing left to do: the same summary
    quiet = subprocess.run(_mars(*args, "--out", str(out), "-q"), capture_output=True, text=True)
    assert quiet.returncode == 0 and quiet.stderr == ""


@pytest.mark.slow
def test_ctrl_c_in_solve_says_how_to_resume_and_the_same_command_does(tmp_path):
    """Ctrl-C: one line saying what is kept and the command that goes on; it does. (512 traces a
    question: the whole run must outlast the test reading its first line on a loaded machine.)"""
    out = tmp_path / "live"
    args = _mars("solve", "--problems", "aime_2025", "--traces", "512", "--out", str(out))
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "questions done" in line:
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.stderr.read().splitlines()
    assert proc.wait(60) == 130
    (said,) = [x for x in rest if x.startswith("interrupted:")]
    done = len(list((out / "live").glob("q*.json")))
    assert 1 <= done < 30
    command = shlex.join(["mars", *args[3:]])
    assert said == (
        f"interrupted: {done} of 30 questions finished in this run, kept in {out}; "
        f"`{command}` resumes from there"
    )
    r = subprocess.run([*args, "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert len(list((out / "live").glob("q*.json"))) == 30
