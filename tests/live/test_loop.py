"""Live MARS (mars.live, `mars solve` / `mars replay`) on the synthetic backend.

The central check: re-simulating a live run's own records (its N traces and its warmup, no
resampling) gives the live run's answer, stop position and tokens exactly, for every live method."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from live.common import (
    LIVE_METHODS,
    QIDS,
    _assert_same_run,
    _StopsAfterWarmup,
)
from mars.live import live_grid, live_method, plan_for, replay_run, solve, solve_pool
from mars.method.answers import group_answers_online
from mars.simulate.driver import SimulationError
from mars.store import schema
from mars.store.pool import PoolError, open_pool


@pytest.fixture(scope="module")
def mars_run(tmp_path_factory, backend, problems):
    out = tmp_path_factory.mktemp("live") / "run"
    rows = solve_pool(
        backend,
        problems,
        out,
        plan_for(backend, "sc-mars-cal", n_traces=48, warmup=16, seed=3),
        questions=QIDS,
        compare_full=True,
    )
    return out, rows


#: the methods whose rules stop single traces while the others run on
STOPS_SINGLE_TRACES = {"sc-pp-faithful", "pp-main", "pp-main-keep", "sc-sac"}


@pytest.mark.parametrize(
    "method",
    [
        m if m in ("sc", "sc-mars-cal") else pytest.param(m, marks=pytest.mark.slow)
        for m in LIVE_METHODS
    ],
)
def test_replay_of_live_records_is_exact(tmp_path, backend, problems, method):
    out = tmp_path / method
    rows = solve_pool(
        backend,
        problems,
        out,
        plan_for(backend, method, n_traces=32, warmup=16, seed=1),
        questions=QIDS[:5],
    )
    again = replay_run(out)
    assert [r["qid"] for r in again] == QIDS[:5]
    for r, live in zip(again, rows):
        assert r["match"], r
        assert r["replay"]["tokens"] == live["tokens"]
        assert live["replay_ok"]
    pool = open_pool(out)
    for live in rows:
        q = pool.read_question(live["qid"])
        main = q.trace_idx >= 16
        assert (
            int(q.lengths[main].sum()) == live["tokens"]
        )  # tokens = what the main traces generated
        stopped = np.isin(q.trace_idx, live["stopped_traces"])
        # rules that stop single traces (prunes, per-trace exits) stop them live too
        if live["stopped_by"] == "budget" and method not in STOPS_SINGLE_TRACES:
            assert not stopped.any()
        if method == "sc":
            assert live["stopped_by"] == "budget" and not stopped.any()


@pytest.mark.slow
def test_live_mars_stops_early_and_keeps_the_full_answer(mars_run):
    out, rows = mars_run
    tokens = sum(r["tokens"] for r in rows)
    full = sum(r["full"]["tokens"] for r in rows)
    assert tokens < 0.9 * full
    assert sum(r["answer"] == r["full"]["answer"] for r in rows) >= len(rows) - 1
    early = [r for r in rows if r["stopped_by"] == "margin" and r["stopped_traces"]]
    assert early
    pool = open_pool(out)
    for r in early:
        q = pool.read_question(r["qid"])
        stopped = np.isin(q.trace_idx, r["stopped_traces"])
        # a stopped trace holds exactly the tokens it had at the stop, no final answer,
        # its last probe there
        assert (q.lengths[stopped] == r["stop_position"]).all()
        assert all(q.final_answers[j] is None for j in np.flatnonzero(stopped))
        last = q.probe_positions[q.probe_offsets[1:][stopped] - 1]
        assert (last == r["stop_position"]).all()
        assert (q.lengths[~stopped & (q.trace_idx >= 16)] <= r["stop_position"]).all()


@pytest.mark.slow
def test_live_outputs_files_and_simulate_reads_them(mars_run, tmp_path):
    out, _rows = mars_run
    manifest = json.loads((out / schema.POOL_MANIFEST).read_text())
    assert manifest["live"]["method"] == "sc-mars-cal" and manifest["n_traces"] == 64
    lines = (out / "live.csv").read_text().splitlines()
    assert len(lines) == 1 + len(QIDS) and lines[0].startswith("qid,method,answer")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "mars.cli",
            "simulate",
            str(out),
            "--method",
            "sc,sc-mars-cal",
            "--budget",
            "32",
            "--iterations",
            "4",
            "--out",
            str(tmp_path / "sim"),
            "-q",
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "sim" / "sc-mars-cal" / "overall.json").exists()


def test_same_seed_same_run_and_resume_after_interruption(tmp_path, backend, problems, mars_run):
    ref_out, _ = mars_run
    out = tmp_path / "run"
    seen = []

    def boom(run):
        seen.append(run.qid)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        solve_pool(
            backend,
            problems,
            out,
            plan_for(backend, "sc-mars-cal", n_traces=48, warmup=16, seed=3),
            questions=QIDS,
            compare_full=True,
            on_question=boom,
        )
    assert (
        not (out / schema.POOL_MANIFEST).exists() and len(list((out / "live").glob("q*.json"))) == 3
    )
    with pytest.raises(PoolError, match="other parameters"):
        solve_pool(
            backend,
            problems,
            out,
            plan_for(backend, "sc-mars", n_traces=48, warmup=16, seed=3),
            questions=QIDS,
        )
    solve_pool(
        backend,
        problems,
        out,
        plan_for(backend, "sc-mars-cal", n_traces=48, warmup=16, seed=3),
        questions=QIDS,
        compare_full=True,
    )
    _assert_same_run(out, ref_out, QIDS)


def test_a_live_runs_traces_are_its_tables_rows(tmp_path, backend, problems):
    """What ``mars serve`` answers from (``LiveRun.traces``) is what the run's table is built
    from: the same rows, warmup then main, a stopped trace as stopped — whether the warmup ran
    or was kept by an interrupted run and read back."""
    from mars.engines.generate import records_to_table

    p = problems[2]
    plan = plan_for(backend, "sc-mars-cal", n_traces=24, warmup=8, seed=0)
    kept = tmp_path / "warmup.parquet"
    with pytest.raises(KeyboardInterrupt):
        solve(_StopsAfterWarmup(backend, qid=p.qid), p, plan, warmup_file=kept)
    assert kept.is_file()
    ran, resumed = solve(backend, p, plan), solve(backend, p, plan, warmup_file=kept)
    for run in (ran, resumed):
        assert len(run.traces) == 8 + 24
        assert records_to_table(p.qid, 0, run.traces).to_pylist() == run.table.to_pylist()
    assert resumed.table.equals(ran.table)


def test_an_interrupted_question_resumes_after_its_warmup(tmp_path, backend, problems, mars_run):
    ref_out, _ = mars_run
    out, qids = tmp_path / "run", QIDS[:3]
    engine = _StopsAfterWarmup(backend, qid=qids[1])
    plan = plan_for(engine, "sc-mars-cal", n_traces=48, warmup=16, seed=3)
    kw = {"questions": qids, "compare_full": True}
    with pytest.raises(KeyboardInterrupt):
        solve_pool(engine, problems, out, plan, **kw)
    kept = out / "live" / f"q{qids[1]:06d}.warmup.parquet"
    assert engine.warmups == qids[:2] and kept.exists()
    assert not (out / "live" / f"q{qids[0]:06d}.warmup.parquet").exists()  # its question ended
    engine.warmups.clear()
    solve_pool(engine, problems, out, plan, **kw)
    assert engine.warmups == qids[2:] and not list((out / "live").glob("*.parquet"))
    _assert_same_run(out, ref_out, qids)  # identical to the uninterrupted run


def test_other_seed_other_run(backend, problems):
    a = solve(backend, problems[2], plan_for(backend, "sc-mars-cal", n_traces=24, warmup=8, seed=0))
    b = solve(backend, problems[2], plan_for(backend, "sc-mars-cal", n_traces=24, warmup=8, seed=1))
    assert not a.table.equals(b.table)


@pytest.mark.slow
def test_tampered_record_is_caught(tmp_path, mars_run):
    src, _ = mars_run
    out = tmp_path / "run"
    shutil.copytree(src, out)
    path = out / "live" / f"q{QIDS[0]:06d}.json"
    rec = json.loads(path.read_text())
    rec["tokens"] += 1
    path.write_text(json.dumps(rec))
    assert [r["match"] for r in replay_run(out)] == [False] + [True] * (len(QIDS) - 1)
    res = subprocess.run(
        [sys.executable, "-m", "mars.cli", "replay", str(out)], capture_output=True, text=True
    )
    assert res.returncode == 1 and f"question {QIDS[0]}" in res.stderr


@pytest.mark.parametrize(
    "method,msg",
    [
        ("dco-mars-cal", "DeepConf"),
        ("sc-mars-oracle", "future"),
        ("oracle-first", "future"),
        ("nope", "unknown method"),
    ],
)
def test_methods_that_cannot_run_live_are_refused(method, msg):
    with pytest.raises((SimulationError, ValueError), match=msg):
        live_method(method)


@pytest.mark.slow
def test_cli_errors_are_one_line_and_leave_nothing(tmp_path):
    out = tmp_path / "x"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "mars.cli",
            "solve",
            "--problems",
            "aime_2025",
            "--questions",
            "0",
            "--method",
            "dco-mars",
            "--out",
            str(out),
            "-q",
        ],
        capture_output=True,
        text=True,
    )
    assert (
        res.returncode == 2
        and res.stderr.startswith("error: method dco-mars")
        and res.stderr.count("\n") == 1
    )
    assert not out.exists()
    res = subprocess.run(
        [sys.executable, "-m", "mars.cli", "replay", str(tmp_path)], capture_output=True, text=True
    )
    assert res.returncode == 2 and "not a pool directory" in res.stderr


SYMBOLIC = [
    "\\frac{1}{2}",
    "0.5",
    "1/2",
    "x+1",
    "1+x",
    "\\sqrt{2}",
    "2^{1/2}",
    "7",
    "07",
    "7.0",
    "\\pi",
    "3.14",
]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(SYMBOLIC), min_size=1, max_size=14), st.integers(0, 14))
def test_online_groups_never_change_an_earlier_answer(strings, cut):
    """The groups of a prefix are the first groups of the whole, so a live run's ids stay valid."""
    whole = group_answers_online(strings)
    part = group_answers_online(strings[:cut])
    assert part.representatives == whole.representatives[: len(part.representatives)]
    for s in strings[:cut]:
        assert part.index[s] == whole.index[s]


def test_online_groups_merge_equivalent_answers():
    g = group_answers_online(["\\frac{1}{2}", "0.5", "7", "7.0", "x+1", "1+x"])
    assert g.index["0.5"] == g.index["\\frac{1}{2}"] and g.index["7"] == g.index["7.0"]
    assert g.index["x+1"] == g.index["1+x"] and len(g) == 3


def test_a_question_whose_traces_all_end_before_the_first_checkpoint_is_decided():
    """Every trace ends before the first checkpoint (a short answer, a server's EOS): no probe
    at all, and the vote of the final answers decides (this indexed past the probe table)."""
    from mars.live import decide, live_settings
    from mars.method.registry import get_method
    from mars.store.pool import question_from_table

    n = 4
    table = pa.table(
        {
            "qid": [0] * n,
            "trace_idx": list(range(n)),
            "final_answer": ["5", "5", None, "7"],
            "length": [12, 16, 13, 41],
            "finished": [True] * n,
            "confs": [None] * n,
            "probes": [[]] * n,
            "text": [None] * n,
            "token_ids": [None] * n,
        },
        schema=schema.TRACE_SCHEMA,
    )
    q = question_from_table(table, 0, "<test>", published=False, ground_truth="5")
    grid = live_grid(256, 512).checkpoints()
    res, arr = decide(
        q, get_method("sc"), live_settings(n, 0, 0, 256, 512, {}), grid, 0, np.zeros(n, bool)
    )
    assert arr.representatives[int(res.answer[0])] == "5" and bool(res.correct[0])


def test_docs_name_every_live_method_and_its_knobs():
    """docs/live.md sends the reader to the generated table of methods (it once kept a table of
    its own that listed 7 of 11), whose live rows are the registry's live methods, each knob a
    live setting; and it no longer says a checkpoint rebuilds the arrays."""
    from pathlib import Path

    from maint_tools.gen_docs import methods_table
    from mars.method.settings import LIVE_KEYS, SPECS

    text = (Path(__file__).resolve().parents[2] / "docs" / "live.md").read_text()
    assert "(methods.md#the-methods)" in text
    rows = re.findall(r"^\| \**`([\w-]+)`\**( \|.*)\| yes \|$", methods_table(), re.M)
    assert sorted(name for name, _ in rows) == sorted(LIVE_METHODS)
    flags = {f for _, row in rows for f in re.findall(r"`(--[\w-]+)`", row)}
    assert flags and flags <= {SPECS[k].flag for k in LIVE_KEYS}
    assert "rebuilds the question's arrays" not in text


@pytest.mark.parametrize("calibrated", [False, True], ids=["warmup", "calibration"])
def test_a_launch_at_a_time_live_replays_exactly(tmp_path, backend, problems, calibrated):
    """sc-mars2-launch live: a first wave of wave_size traces, the rest only if it ends without
    a stop; a trace never launched costs nothing and is recorded with no tokens; the records
    re-decide exactly — with its warmup, and with a calibration instead (no warmup at all)."""
    from util import write_layout_pool

    from mars.fit.calibrate import calibrate_pools

    cal = None
    if calibrated:
        cal = calibrate_pools([write_layout_pool(tmp_path / "fit", seed=2, n_questions=4)])
    warmup = 0 if calibrated else 8
    out = tmp_path / "run"
    rows = solve_pool(
        backend,
        problems,
        out,
        plan_for(
            backend,
            "sc-mars2-launch",
            n_traces=32,
            warmup=warmup,
            seed=1,
            calibration=cal,
            wave_size=8,
        ),
        questions=QIDS[:4],
    )
    assert all(r["match"] for r in replay_run(out))
    pool = open_pool(out)
    if calibrated:
        assert pool.manifest["live"]["calibration"] == cal.digest
        assert (out / "calibration.json").is_file()
    for live in rows:
        q = pool.read_question(live["qid"])
        main = q.lengths[warmup:]
        assert int(main.sum()) == live["tokens"] and live["warmup_tokens"] == (
            0 if calibrated else int(q.lengths[:warmup].sum())
        )
        unlaunched = main[8:] == 0
        # the second wave either ran (no trace of it empty) or never started (all of it empty)
        assert unlaunched.all() or not unlaunched.any()
        if unlaunched.all():
            assert live["stopped_by"] != "budget"


def test_a_calibration_serves_on_its_own_grid_unless_spacing_is_given(tmp_path):
    """`mars solve --calibration` without --spacing probes on the grid the calibration was fitted
    on (a refit on served traffic serves as that traffic came); a --spacing of another grid is
    refused in one line, before any work."""
    import dataclasses

    from typer.testing import CliRunner
    from util import write_layout_pool

    from mars.cli import app
    from mars.fit.calibrate import calibrate_pools

    c = calibrate_pools([write_layout_pool(tmp_path / "fit", seed=2, n_questions=3)])
    c = dataclasses.replace(c, fitted_on=[{**f, "spacing": 1024} for f in c.fitted_on])
    cal = c.save(tmp_path / "cal.json")
    common = ["solve", "--problems", "aime_2025", "--questions", "0", "--traces", "8"]
    common += ["--max-tokens", "8192", "--calibration", str(cal), "-q"]
    res = CliRunner().invoke(app, [*common, "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    assert open_pool(tmp_path / "run").manifest["spacing"] == 1024
    res = CliRunner().invoke(app, [*common, "--spacing", "2048", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "probed every 2048 tokens" in res.output and not (tmp_path / "o").exists()


def test_the_papers_rule_with_a_calibration_runs_live_without_a_warmup_and_replays(tmp_path):
    """`mars solve -m sc-mars-cal --calibration`: no warmup generated or paid for, the rule reads
    the calibration's switch model and γ, and the run replays exactly."""
    from typer.testing import CliRunner
    from util import write_layout_pool

    from mars.cli import app
    from mars.fit.calibrate import calibrate_pools

    cal = calibrate_pools([write_layout_pool(tmp_path / "fit", seed=2, n_questions=3)])
    assert cal.switch is not None and cal.gamma is not None
    path = cal.save(tmp_path / "cal.json")
    args = ["solve", "--problems", "aime_2025", "--questions", "0-2", "--traces", "16"]
    args += ["--calibration", str(path), "-m", "sc-mars-cal", "-q", "--out", str(tmp_path / "r")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    live = open_pool(tmp_path / "r").manifest["live"]
    assert live["warmup"] == 0 and live["n_traces"] == 16 and live["calibration"] == cal.digest
    record = json.loads((tmp_path / "r" / "live" / "q000000.json").read_text())
    assert record["gamma"] == cal.gamma and record["warmup_tokens"] == 0, record
    res = CliRunner().invoke(app, ["replay", str(tmp_path / "r")])
    assert res.exit_code == 0 and "3/3 questions replay exactly" in res.output, res.output


@pytest.mark.parametrize("calibrated", [False, True], ids=["warmup", "calibration"])
def test_an_early_launch_live_replays_exactly(tmp_path, backend, problems, calibrated):
    """sc-mars2-early live: a first wave of wave_size traces, the rest launched at a checkpoint
    of it while it still runs; the records re-decide exactly (with its warmup, and with a
    calibration instead), and a trace never launched is recorded with no tokens."""
    from util import write_layout_pool

    from mars.fit.calibrate import calibrate_pools

    cal = None
    if calibrated:
        cal = calibrate_pools([write_layout_pool(tmp_path / "fit", seed=2, n_questions=4)])
    warmup = 0 if calibrated else 8
    out = tmp_path / "run"
    rows = solve_pool(
        backend,
        problems,
        out,
        plan_for(
            backend,
            "sc-mars2-early",
            n_traces=32,
            warmup=warmup,
            seed=1,
            calibration=cal,
            wave_size=8,
        ),
        questions=QIDS[:4],
    )
    assert all(r["match"] for r in replay_run(out))
    pool = open_pool(out)
    for live in rows:
        q = pool.read_question(live["qid"])
        main = q.lengths[warmup:]
        assert int(main.sum()) == live["tokens"]
        unlaunched = main[8:] == 0
        assert unlaunched.all() or not unlaunched.any()
        if unlaunched.all():
            assert live["stopped_by"] != "budget" and live["launched"] == 8


def test_an_early_launch_starts_the_rest_before_the_first_wave_ends(backend, problems):
    """Where the first wave's ended traces already rule out a stop at its end, the rest launch
    at that checkpoint, while the wave still runs: the stopper's clock shows the second launch
    before the wave's last trace ended, and the walk over the records does the same."""
    from mars.live.stepper import Stopper
    from mars.method.registry import get_method
    from mars.method.walk import MethodRun, QuestionContext

    grid = [100 * (k + 1) for k in range(8)]
    st = Stopper("sc-mars2-early", n_traces=8, grid=grid, wave_size=4)
    assert st.current == (0, 4)
    # two traces end at once on different answers, two run on: the wave's best end is 3 to 1
    # at most, too few to stop with 4 more to draw
    d = st.step(["1", "2", None, None], [False, False, True, True])
    assert not d.stop and st.current == (0, 8) and st.launched_at == 0  # two traces still run
    # the rest answer from the next checkpoint on, beside the wave's last two traces
    d = st.step(["1", "2", "1", None] + [None] * 4, [False, False, True, True] + [True] * 4)
    assert not d.stop
    while st.current is not None:
        d = st.step(["1", "2", "1", "1"] + ["1"] * 4, [False] * 8)
        if d.stop:
            break
    assert d.stop and d.answer == "1"
    # the same walk on arrays built from what the stopper saw
    ctx = QuestionContext(
        st._arrays(st.width), st.settings, np.arange(8)[None], np.zeros(0, np.int64)
    )
    run = MethodRun(ctx, get_method("sc-mars2-early"))
    run.start()
    for t in range(st.k):
        run.step(t, st._told(t))
    assert int(run.second_at[0]) == st.launched_at
