"""Simulation outputs: concurrent writers into one folder, a full disk, a killed writer's litter."""

from __future__ import annotations

import errno
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time

import pytest
from util import small_disk, write_layout_pool

from mars.method.registry import parse_methods
from mars.method.settings import Settings
from mars.simulate.driver import simulate_pool
from mars.simulate.results import write_method, write_methods
from mars.store.atomic import disk_full_message

FILES = ["overall.json", "per_iteration.csv", "per_question.csv"]


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    pool = write_layout_pool(tmp_path_factory.mktemp("pool") / "pool", seed=3, n_questions=2)
    methods = parse_methods("sc,sc-mars,sc-pp,oracle-first")
    results = simulate_pool(pool, methods, Settings(budget=16, iterations=40, warmup=4))
    return results, [m.name for m in methods]


def _folder(out) -> dict[str, list[str]]:
    """Every entry of ``out`` (hidden ones included) with the files it holds."""
    return {e: sorted(os.listdir(out / e)) for e in sorted(os.listdir(out))}


def _tags(out, methods) -> set[str]:
    return {json.loads((out / m / "overall.json").read_text())["settings"]["tag"] for m in methods}


def _slowly(rename):
    def slow(*args, **kw):
        time.sleep(0.05)
        return rename(*args, **kw)

    return slow


def _write_in_turns(out, methods, results, tag, rounds, start, one_by_one):
    os.rename, os.replace = _slowly(os.rename), _slowly(os.replace)  # widen the race (a child)
    start.wait()
    for _ in range(rounds):
        if one_by_one:
            for m in methods:
                write_method(out, m, results, {"tag": tag}, "pool")
        else:
            write_methods(out, methods, results, {"tag": tag}, "pool")


@pytest.mark.slow
@pytest.mark.parametrize("one_by_one", [True, False])
def test_concurrent_writers_into_one_folder(simulated, tmp_path, one_by_one):
    """Two processes replacing the same method folders at once: both succeed (no ENOTEMPTY or
    FileNotFoundError), every folder is whole, nothing else is left; runs written as a whole
    (write_methods) leave one run's methods, never a mix."""
    results, methods = simulated
    methods = methods[:2]
    out = tmp_path / "out"
    ctx = mp.get_context("fork")
    start = ctx.Barrier(2)
    procs = [
        ctx.Process(target=_write_in_turns, args=(out, methods, results, tag, 5, start, one_by_one))
        for tag in "ab"
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert _folder(out) == dict.fromkeys(methods, FILES)
    if not one_by_one:
        assert len(_tags(out, methods)) == 1


def test_a_killed_writers_litter_blocks_nothing(simulated, tmp_path):
    """A moved-aside folder left by a killed writer (`.sc.old-<pid>`, here our own pid) made every
    later replacement from a process with that pid fail; it is cleared instead."""
    results, _ = simulated
    out = tmp_path / "out"
    litter = out / f".sc.old-{os.getpid()}"
    litter.mkdir(parents=True)
    (litter / "overall.json").write_text("{}")
    for tag in "ab":
        write_method(out, "sc", results, {"tag": tag}, "pool")
    assert _folder(out) == {"sc": FILES}
    assert _tags(out, ["sc"]) == {"b"}


def test_full_disk_replaces_nothing(simulated, tmp_path):
    """The disk fills while a run's methods are written: none replaces its predecessor, no
    temporary folder is left, and the error names the method's folder and the disk."""
    results, methods = simulated
    with small_disk(tmp_path / "disk", "16k") as disk:
        out = disk / "sim"
        write_method(out, "sc", results, {"tag": "before"}, "pool")
        before = {f: (out / "sc" / f).read_bytes() for f in FILES}
        with pytest.raises(OSError) as exc:
            write_methods(out, methods, results, {"tag": "after"}, "pool")
        assert exc.value.errno == errno.ENOSPC
        assert _folder(out) == {"sc": FILES}
        assert {f: (out / "sc" / f).read_bytes() for f in FILES} == before
        msg = disk_full_message(exc.value)
        assert msg is not None and msg.startswith(f"{out}/")
        assert f"no space left on the disk mounted at {disk} (" in msg


@pytest.mark.slow
def test_two_simulate_runs_into_one_out(tmp_path):
    """Two `mars simulate` processes writing one --out at once: both succeed silently, and the
    folder holds every method whole and nothing else (no lock file, no temporary folder)."""
    pool = write_layout_pool(tmp_path / "pool", seed=1, n_questions=3)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "mars.cli", "simulate", str(pool), "-m", "all"]
    cmd += ["--budget", "32", "--warmup", "8", "--iterations", "8", "--out", str(out), "-q"]
    procs = [subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errs = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0] and errs == ["", ""], errs
    folder = _folder(out)
    assert len(folder) >= 20 and set(map(tuple, folder.values())) == {tuple(FILES)}


def test_the_summary_marks_a_method_on_fewer_traces_than_the_budget():
    """single-sac's savings are against its own trace run to the end: the summary says so, as
    the report's tables do, and marks no method of the full budget."""
    from rich.console import Console

    from mars.simulate.results import summary_table

    def overall(method, savings, tokens):
        return {
            "method": method,
            "accuracy_pct": 50.0,
            "savings_pct": savings,
            "savings_with_probes_pct": None,
            "tokens_mean": tokens,
            "seq_tokens_mean": tokens,
            "stop_position_mean": 2048.0,
            "savings_paid_pct": savings,
            "paid_counts_probes": False,
        }

    console = Console(width=200, record=True)
    console.print(summary_table([overall("sc", 0.0, 8e6), overall("single-sac", 0.0, 1.5e4)]))
    text = console.export_text()
    assert "0.0†" in text and text.count("†") == 2
    assert "single-sac runs 1 trace of each sample" in text
    plain = Console(width=200, record=True)
    plain.print(summary_table([overall("sc", 0.0, 8e6)]))
    assert "†" not in plain.export_text()


def test_the_summary_shows_what_a_user_pays_beside_the_papers_accounting():
    """A method that reads a warmup is charged it: paid savings below the paper's; one that reads
    none pays its main traces only; a pool without probe costs is marked."""
    from rich.console import Console

    from mars.simulate.results import summary_table

    base = {
        "accuracy_pct": 80.0,
        "savings_with_probes_pct": None,
        "tokens_mean": 1e5,
        "seq_tokens_mean": 1e4,
        "stop_position_mean": 2048.0,
        "paid_counts_probes": False,
    }
    rows = [
        {**base, "method": "sc-mars2", "savings_pct": 51.2, "savings_paid_pct": 26.4},
        {**base, "method": "esc", "savings_pct": 62.3, "savings_paid_pct": 62.3},
    ]
    console = Console(width=240, record=True)
    console.print(summary_table(rows))
    text = console.export_text()
    assert "paid %" in text and "26.4‡" in text and "62.3‡" in text
    assert "the question's warmup" in text and "‡ the pool records no probe costs" in text
