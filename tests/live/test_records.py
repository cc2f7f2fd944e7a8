"""A live run's records and manifest (mars/live/records.py) and their replay: damaged ones are
refused in one line (issue 19, item 11), fuzzed ones never give a traceback, an unfinished run
replays its finished questions, solves into one folder take turns, the checkpoint grid is
bounded before anything is allocated."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import traceback

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import mars
from live.common import (
    _assert_same_run,
)
from mars.cli import app
from mars.errors import UsageError
from mars.live import (
    MAX_CHECKPOINTS,
    live_grid,
    live_settings,
    plan_for,
    replay_run,
    solve_pool,
)
from mars.method.settings import LIVE_KEYS
from mars.store import schema
from mars.store.atomic import LOCK_NAME, folder_lock

# -- damaged records and manifests (issue 19, item 11) -------------------------------------------

SMALL = {"n_traces": 8, "warmup": 4, "seed": 2}
SMALL_CLI = ["--problems", "aime_2025", "--questions", "0,1", "--traces", "8", "--warmup", "4"]
SMALL_CLI += ["--seed", "2", "-q"]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory, backend, problems):
    out = tmp_path_factory.mktemp("small") / "run"
    solve_pool(backend, problems, out, plan_for(backend, "sc-mars-cal", **SMALL), questions=[0, 1])
    return out


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _edit_json(path, edit):
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _record(run):
    return run / "live" / "q000000.json"


def _live(edit):
    return lambda run: _edit_json(run / schema.POOL_MANIFEST, lambda m: edit(m["live"]))


def _retag_traces(run):
    """Question 0's trace file as another run (another problem set) would have written it."""
    path = run / schema.trace_file_name(0)
    t = pq.read_table(path)
    params = json.loads(t.schema.metadata[b"mars.run"])
    meta = {**t.schema.metadata, b"mars.run": json.dumps({**params, "dataset": "brumo_2025"})}
    pq.write_table(t.replace_schema_metadata(meta), path)


def _drop_last_trace(run):
    path = run / schema.trace_file_name(0)
    t = pq.read_table(path)
    pq.write_table(t.slice(0, t.num_rows - 1), path)


DAMAGE = {
    "record broken JSON": (lambda run: _record(run).write_text("{"), "q000000.json", "JSON"),
    "record without tokens": (
        lambda run: _edit_json(_record(run), lambda r: r.pop("tokens")),
        "q000000.json",
        "'tokens'",
    ),
    "record a list": (lambda run: _record(run).write_text("[]"), "q000000.json", "object"),
    "record missing": (lambda run: _record(run).unlink(), "q000000.json", "missing"),
    "record a directory": (
        lambda run: (_record(run).unlink(), _record(run).mkdir()),
        "q000000.json",
        "directory",
    ),
    "stopped traces a string": (
        lambda run: _edit_json(_record(run), lambda r: r.update(stopped_traces="4,5")),
        "q000000.json",
        "stopped_traces",
    ),
    "stopped trace out of range": (
        lambda run: _edit_json(_record(run), lambda r: r.update(stopped_traces=[1, 99])),
        "q000000.json",
        "stopped trace 1",
    ),
    "record of another question": (
        lambda run: shutil.copy(run / "live" / "q000001.json", _record(run)),
        "q000000.json",
        "question 1",
    ),
    "live without warmup": (_live(lambda live: live.pop("warmup")), "pool.json", "'warmup'"),
    "unknown setting": (
        _live(lambda live: live["settings"].update(bogus=1)),
        "pool.json",
        "bogus",
    ),
    "setting out of range": (
        _live(lambda live: live["settings"].update(delta=2)),
        "pool.json",
        "--delta 2",
    ),
    "live a string": (
        lambda run: _edit_json(run / schema.POOL_MANIFEST, lambda m: m.update(live="x")),
        "pool.json",
        "not an object",
    ),
    "settings a list": (_live(lambda live: live.update(settings=[])), "pool.json", "'settings'"),
    "method not live": (
        _live(lambda live: live.update(method="dco-mars")),
        "pool.json",
        "DeepConf",
    ),
    "method a number": (_live(lambda live: live.update(method=3)), "pool.json", "'method'"),
    "warmup a float": (_live(lambda live: live.update(warmup=4.0)), "pool.json", "'warmup'"),
    "max_tokens 1e15": (
        _live(lambda live: live.update(max_tokens=10**15)),
        "pool.json",
        "checkpoints",
    ),
    "max_tokens below the traces": (
        _live(lambda live: live.update(max_tokens=2048)),
        "q000000.parquet",
        "max_tokens",
    ),
    "more traces claimed than held": (
        _live(lambda live: live.update(n_traces=9)),
        "q000000.parquet",
        "4 warmup + 9 traces",
    ),
    "a trace missing": (_drop_last_trace, "q000000.parquet", "trace ids 0..10"),
    # what the records were made from (issue 30, item 2)
    "record without inputs": (
        lambda run: _edit_json(_record(run), lambda r: r.pop("inputs")),
        "q000000.json",
        "'inputs'",
    ),
    "record made for another question": (
        lambda run: _edit_json(_record(run), lambda r: r["inputs"].update(problem="0" * 24)),
        "q000000.json",
        "made for another question 0",
    ),
    "warmup made for another question": (
        lambda run: _edit_json(
            _record(run), lambda r: r["inputs"]["warmup"].update(problem="0" * 24)
        ),
        "q000000.json",
        "warmup traces were made for another question",
    ),
    "warmup made with another seed": (
        lambda run: _edit_json(_record(run), lambda r: r["inputs"]["warmup"].update(seed=9)),
        "q000000.json",
        "made with other seed",
    ),
    "question text changed": (
        lambda run: _edit_questions(run, question="What is 1 + 1?"),
        "q000000.json",
        "made for another question 0",
    ),
    "trace file of another run": (_retag_traces, "q000000.parquet", "not written by this live run"),
}


def _edit_questions(run, **change):
    path = run / schema.POOL_QUESTIONS
    t = pq.read_table(path)
    rows = t.to_pylist()
    rows[0].update(change)
    pq.write_table(pa.Table.from_pylist(rows, schema=t.schema), path)


@pytest.mark.parametrize("case", DAMAGE)
def test_replay_refuses_a_damaged_run_in_one_line(tmp_path, small_run, case):
    """Damaged records, manifests and trace files: exit 2, one line naming the file, no traceback
    (and a claimed 10^15-token cap allocates nothing)."""
    damage, file, needle = DAMAGE[case]
    run = _copy(small_run, tmp_path / "run")
    damage(run)
    res = CliRunner().invoke(app, ["replay", str(run)])
    assert res.exit_code == 2, (res.output, res.exception)
    assert res.output.startswith("error: ") and res.output.count("\n") == 1, res.output
    assert file in res.output and needle in res.output, res.output


def test_replay_of_an_unfinished_run_reads_its_finished_questions(tmp_path, backend, problems):
    """An interrupted run: replay says so and how to finish, and replays what is done."""
    out, plan = tmp_path / "run", plan_for(backend, "sc-mars-cal", **SMALL)

    def stop_after_two(run):
        if run.qid == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        solve_pool(backend, problems, out, plan, questions=[0, 1, 2], on_question=stop_after_two)
    runner = CliRunner()
    res = runner.invoke(app, ["replay", str(out)])
    assert res.exit_code == 0, res.output
    assert "unfinished run (2/3 questions): rerun the same command to finish" in res.output
    assert "2/2 questions replay exactly" in res.output
    res = runner.invoke(app, ["replay", str(out), "--questions", "2"])
    assert res.exit_code == 2 and "question 2 is not done yet; unfinished run (2/3" in res.output
    _edit_json(out / "live" / "q000001.json", lambda r: r.update(tokens=r["tokens"] + 1))
    res = runner.invoke(app, ["replay", str(out)])
    assert res.exit_code == 1 and "question 1: live" in res.output
    _edit_json(out / "live" / "q000001.json", lambda r: r.update(tokens=r["tokens"] - 1))
    solve_pool(backend, problems, out, plan, questions=[0, 1, 2])
    res = runner.invoke(app, ["replay", str(out)])
    assert res.exit_code == 0 and "unfinished" not in res.output
    assert "3/3 questions replay exactly" in res.output


def test_replay_of_an_undamaged_small_run_matches(small_run):
    res = CliRunner().invoke(app, ["replay", str(small_run)])
    assert res.exit_code == 0 and "2/2 questions replay exactly" in res.output


@pytest.mark.parametrize("finished", [True, False])
def test_solve_refuses_to_resume_over_a_damaged_record(tmp_path, small_run, finished):
    """Resuming reads the records of the questions done: a damaged one is refused before any
    work, and nothing done is touched."""
    run = _copy(small_run, tmp_path / "run")
    if not finished:
        (run / schema.POOL_MANIFEST).unlink()
        (run / schema.trace_file_name(1)).unlink()
        (run / "live" / "q000001.json").unlink()
    _edit_json(_record(run), lambda r: r.update(wall_s=[]))
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    res = CliRunner().invoke(app, ["solve", "--out", str(run), *SMALL_CLI])
    assert res.exit_code == 2, (res.output, res.exception)
    assert res.output.startswith("error: ") and res.output.count("\n") == 1, res.output
    assert "q000000.json" in res.output and "'wall_s'" in res.output
    assert finished or not (run / schema.trace_file_name(1)).exists()  # question 1 not solved
    assert all(p.read_bytes() == data for p, data in before.items())


def test_the_guard_by_tokens_runs_live_and_replays(tmp_path):
    """`mars solve --guard tokens` (issue 34's remedy, a live setting): a word among the knobs,
    taken (it was refused as "not a number"), recorded with the run and replayed with it; a
    wrong word is one line."""
    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["solve", "--out", str(run), *SMALL_CLI, "--guard", "tokens"])
    assert res.exit_code == 0, (res.output, res.exception)
    assert json.loads((run / schema.POOL_MANIFEST).read_text())["live"]["settings"] == {
        "guard": "tokens"
    }
    assert "2/2 questions replay exactly" in CliRunner().invoke(app, ["replay", str(run)]).output
    res = CliRunner().invoke(
        app, ["solve", "--out", str(tmp_path / "o"), *SMALL_CLI, "--guard", "x"]
    )
    assert res.exit_code == 2 and "--guard x: must be one of first, tokens" in res.output


@pytest.mark.slow
def test_solves_into_one_folder_take_turns(tmp_path, small_run):
    """A second `mars solve` into the folder a first one writes waits its turn (saying so), then
    finds the questions done; two started at once both finish, with the one run's records (they
    used to race on the kept warmup, one failing on a file the other had removed)."""
    out = tmp_path / "run"
    out.mkdir()
    cmd = [sys.executable, "-m", "mars.cli", "solve", *SMALL_CLI, "--out"]
    with folder_lock(out):
        proc = subprocess.Popen([*cmd, str(out)], stderr=subprocess.PIPE, text=True)
        try:
            assert "another `mars solve` is writing into it" in proc.stderr.readline()
            assert os.listdir(out) == [LOCK_NAME]  # nothing done while it waits
        except BaseException:
            proc.kill()
            raise
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    _assert_same_run(out, small_run, [0, 1])
    both = tmp_path / "both"
    procs = [
        subprocess.Popen([*cmd, str(both)], stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
    _assert_same_run(both, small_run, [0, 1])
    assert replay_run(both)[0]["match"] and not (both / LOCK_NAME).exists()


def test_solve_refuses_to_resume_over_a_record_of_another_question(tmp_path, small_run):
    """A finished question's record and trace file copied from a run of another problem set:
    resuming refuses them in one line before any work (it used to take the question as done)."""
    run = _copy(small_run, tmp_path / "run")  # as it was before question 1 was solved:
    live = json.loads((run / schema.POOL_MANIFEST).read_text())["live"]
    (run / ".solve.json").write_text(json.dumps(live))
    for f in (schema.POOL_MANIFEST, schema.trace_file_name(1), "live/q000001.json"):
        (run / f).unlink()
    brumo = tmp_path / "brumo"
    res = CliRunner().invoke(
        app, ["solve", "--out", str(brumo), *SMALL_CLI[2:], "--problems", "brumo_2025"]
    )
    assert res.exit_code == 0, res.output
    for f in (schema.trace_file_name(0), "live/q000000.json"):
        shutil.copy(brumo / f, run / f)
    res = CliRunner().invoke(app, ["solve", "--out", str(run), *SMALL_CLI])
    assert res.exit_code == 2, res.output
    assert res.output.startswith("error: ") and res.output.count("\n") == 1, res.output
    assert "q000000.json: made for another question 0" in res.output
    assert not (run / schema.trace_file_name(1)).exists()  # nothing solved


def test_live_grid_is_bounded_before_anything_is_allocated(tmp_path, backend, problems):
    assert len(live_grid(2048, 2048 * MAX_CHECKPOINTS).checkpoints()) == MAX_CHECKPOINTS
    with pytest.raises(UsageError, match="checkpoints, more than"):
        live_grid(2048, 2048 * (MAX_CHECKPOINTS + 1))
    with pytest.raises(UsageError, match="checkpoints, more than"):
        plan_for(backend, "sc-mars-cal", **SMALL, max_tokens=10**15)
    assert not (tmp_path / "o").exists()


LIVE_FUZZ_TRIALS = 60
HOSTILE = [None, "", "x", -1, 0, 1.5, 10**30, float("nan"), [], {}, [1, "a"], True, {"main": "x"}]


def _fuzz_live(rng, run):
    """Damage a live run in one random way: a record's or the manifest's values, their text, or a
    trace file's rows."""
    kind = str(rng.choice(["record", "live", "setting", "text", "traces"]))
    value = HOSTILE[int(rng.integers(len(HOSTILE)))]
    record = run / "live" / f"q{int(rng.integers(2)):06d}.json"
    if kind == "record":

        def edit(r):
            key = str(rng.choice(sorted(r)))
            if rng.random() < 0.3:
                r.pop(key)
            else:
                r[key] = value

        _edit_json(record, edit)
    elif kind == "live":

        def edit(m):
            if rng.random() < 0.2:
                m["live"] = value
                return
            key = str(rng.choice(sorted(m["live"])))
            if rng.random() < 0.3:
                m["live"].pop(key)
            else:
                m["live"][key] = value

        _edit_json(run / schema.POOL_MANIFEST, edit)
    elif kind == "setting":
        key = str(rng.choice(["gamma", "delta", "pp_conv", "window", "unknown", "budget"]))
        _live(lambda live: live["settings"].update({key: value}))(run)
    elif kind == "text":
        f = record if rng.random() < 0.5 else run / schema.POOL_MANIFEST
        text = f.read_text()
        f.write_text(
            str(rng.choice(["", "{", "[]", "null", "7", text[: int(rng.integers(len(text)))]]))
        )
    else:
        path = run / schema.trace_file_name(int(rng.integers(2)))
        t = pq.read_table(path)
        rows = t.to_pylist()
        j = int(rng.integers(len(rows)))
        if rng.random() < 0.5:
            rows.pop(j)
        else:
            rows[j]["trace_idx"] = int(rng.choice([-1, 99, rows[-1]["trace_idx"]]))
        pq.write_table(pa.Table.from_pylist(rows, schema=t.schema), path)
    return kind


@pytest.mark.slow
def test_fuzz_damaged_live_runs_never_give_a_traceback(tmp_path, small_run):
    """Random damage to records, manifests and trace files: `mars replay` exits 0 (or 1, naming
    the questions that differ) or 2 with one line; resuming `mars solve` exits 0 or 2 with one
    line. Never a traceback."""
    rng = np.random.default_rng(19)
    runner = CliRunner()
    outcomes = {0: 0, 1: 0, 2: 0}
    for trial in range(LIVE_FUZZ_TRIALS):
        run = _copy(small_run, tmp_path / f"r{trial}")
        kind = _fuzz_live(rng, run)
        for command in (["replay", str(run)], ["solve", "--out", str(run), *SMALL_CLI]):
            res = runner.invoke(app, command)
            case = (trial, kind, command[0], res.output)
            assert res.exception is None or isinstance(res.exception, SystemExit), (
                case,
                "".join(traceback.format_exception(*res.exc_info)),
            )
            if res.exit_code == 2:
                assert res.output.startswith("error: ") and res.output.count("\n") == 1, case
            elif res.exit_code == 1:
                assert command[0] == "replay" and "questions replay exactly" in res.output, case
            else:
                assert res.exit_code == 0, case
            if command[0] == "replay":
                outcomes[res.exit_code] += 1
    assert outcomes[2] > LIVE_FUZZ_TRIALS // 2  # most damage is detected


@pytest.mark.parametrize("name", LIVE_KEYS)
def test_every_live_setting_is_taken_at_its_default(name):
    """Each setting `mars solve`, `mars serve` and `mars.Stopper` take is accepted at its declared
    default, words as well as numbers (`--guard` was refused as "not a number")."""
    from mars.method.settings import SPECS

    default = SPECS[name].default
    assert getattr(live_settings(8, 4, 0, 2048, 8192, {name: default}), name) == default
    mars.Stopper("sc-mars-cal", n_traces=4, grid=[2048, 4096], **{name: default})
