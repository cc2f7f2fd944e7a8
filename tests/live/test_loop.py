"""Live MARS (mars.live, `mars solve` / `mars replay`) on the synthetic backend.

The central check: re-simulating a live run's own records (its N traces and its warmup, no
resampling) gives the live run's answer, stop position and tokens exactly, for every live method.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import traceback

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner
from util import NoBoxed

from mars.cli import app
from mars.engines.synthetic import SyntheticBackend
from mars.errors import UsageError
from mars.live import MAX_CHECKPOINTS, live_grid, live_method, solve, solve_pool
from mars.live.replay import replay
from mars.method.answers import group_answers_online
from mars.method.registry import live_methods
from mars.simulate.driver import SimulationError
from mars.store import schema
from mars.store.atomic import LOCK_NAME, folder_lock
from mars.store.pool import PoolError, open_pool
from mars.store.problems import load_problems

LIVE_METHODS = live_methods()  # every method that can run live, from the registry
QIDS = [0, 1, 2, 4, 5, 8, 13, 27]


@pytest.fixture(scope="module")
def backend():
    return SyntheticBackend("qwen3-8b")


@pytest.fixture(scope="module")
def problems():
    return load_problems("aime_2025")


@pytest.fixture(scope="module")
def mars_run(tmp_path_factory, backend, problems):
    out = tmp_path_factory.mktemp("live") / "run"
    rows = solve_pool(
        backend,
        problems,
        out,
        "sc-mars-cal",
        n_traces=48,
        warmup=16,
        seed=3,
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
        method,
        n_traces=32,
        warmup=16,
        seed=1,
        questions=QIDS[:5],
    )
    again = replay(out)
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


@pytest.mark.slow
def _assert_same_run(out, ref_out, qids):
    """The live runs in ``out`` and ``ref_out`` wrote the same traces and records (wall times
    apart) for ``qids``."""
    for q in qids:
        name = schema.trace_file_name(q)
        assert pq.read_table(out / name).equals(pq.read_table(ref_out / name))
        a = json.loads((out / "live" / f"q{q:06d}.json").read_text())
        b = json.loads((ref_out / "live" / f"q{q:06d}.json").read_text())
        for d in (a, b):
            d.pop("wall_s"), (d.get("full") or {}).pop("wall_s", None)
        assert a == b


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
            "sc-mars-cal",
            n_traces=48,
            warmup=16,
            seed=3,
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
            "sc-mars",
            n_traces=48,
            warmup=16,
            seed=3,
            questions=QIDS,
        )
    solve_pool(
        backend,
        problems,
        out,
        "sc-mars-cal",
        n_traces=48,
        warmup=16,
        seed=3,
        questions=QIDS,
        compare_full=True,
    )
    _assert_same_run(out, ref_out, QIDS)


class _StopsAfterWarmup:
    """The synthetic engine, interrupted when the main traces of question ``qid`` would start
    (once); counts the warmup batches it starts."""

    def __init__(self, inner, qid: int):
        self.inner, self.qid, self.warmups, self.fired = inner, qid, [], False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def start(self, problem, n, seed, first_trace=0):
        if first_trace == 0:
            self.warmups.append(problem.qid)
        elif problem.qid == self.qid and not self.fired:
            self.fired = True
            raise KeyboardInterrupt
        return self.inner.start(problem, n, seed, first_trace=first_trace)


def test_an_interrupted_question_resumes_after_its_warmup(tmp_path, backend, problems, mars_run):
    ref_out, _ = mars_run
    out, qids = tmp_path / "run", QIDS[:3]
    engine = _StopsAfterWarmup(backend, qid=qids[1])
    kw = {"n_traces": 48, "warmup": 16, "seed": 3, "questions": qids, "compare_full": True}
    with pytest.raises(KeyboardInterrupt):
        solve_pool(engine, problems, out, "sc-mars-cal", **kw)
    kept = out / "live" / f"q{qids[1]:06d}.warmup.parquet"
    assert engine.warmups == qids[:2] and kept.exists()
    assert not (out / "live" / f"q{qids[0]:06d}.warmup.parquet").exists()  # its question ended
    engine.warmups.clear()
    solve_pool(engine, problems, out, "sc-mars-cal", **kw)
    assert engine.warmups == qids[2:] and not list((out / "live").glob("*.parquet"))
    _assert_same_run(out, ref_out, qids)  # identical to the uninterrupted run


def _edit_rows(path, edit):
    """Rewrite a kept warmup's rows through ``edit(rows)``, its metadata kept."""
    t = pq.read_table(path)
    rows = t.to_pylist()
    edit(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=t.schema), path)


def _probe_shift(rows):
    rows[3]["probes"][0]["position"] += 1


def _longer(rows):
    rows[2]["length"] += 1


def _past_cap(rows):
    rows[5]["length"] = 10**9


def _other_final(rows):
    rows[0]["final_answer"] = "12345"


def _confs_cut(rows):
    rows[1]["confs"] = rows[1]["confs"][:-2]


@pytest.mark.parametrize(
    "damage, msg",
    [
        (lambda p: p.write_bytes(b"PAR1 not parquet"), "not a warmup file of this run"),
        (lambda p: (p.unlink(), p.mkdir()), "a directory, not a warmup file"),
        (lambda p: _edit_rows(p, _probe_shift), r"damaged warmup traces \(trace 3 is not probed"),
        (lambda p: _edit_rows(p, _longer), r"damaged warmup traces \(.*trace 2: .* confidences"),
        (lambda p: _edit_rows(p, _past_cap), "damaged warmup traces"),
        (lambda p: _edit_rows(p, _confs_cut), "damaged warmup traces"),
        (lambda p: _edit_rows(p, _other_final), "rows are not those the run kept"),
        ({"problem": "0" * 24}, "warmup traces of another question 1"),
        (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "not a warmup file"),
        ({"qid": 2}, "not question 1's 16 warmup traces"),
        ({"seed": 4, "spacing": 1024}, r"kept by a run with other settings \(seed, spacing\)"),
        ("fewer rows", "rows are not question 1's warmup traces 0..15"),
    ],
)
def test_a_damaged_kept_warmup_is_one_line_and_kept(tmp_path, backend, problems, damage, msg):
    out = tmp_path / "run"
    engine = _StopsAfterWarmup(backend, qid=1)
    kw = {"n_traces": 8, "warmup": 16, "seed": 3, "questions": [1]}
    with pytest.raises(KeyboardInterrupt):
        solve_pool(engine, problems, out, "sc", **kw)
    kept = out / "live" / "q000001.warmup.parquet"
    if isinstance(damage, dict):  # what the file says made it
        t = pq.read_table(kept)
        info = json.loads(t.schema.metadata[b"mars.live.warmup"])
        meta = {b"mars.live.warmup": json.dumps({**info, **damage}).encode()}
        pq.write_table(t.replace_schema_metadata(meta), kept)
    elif damage == "fewer rows":
        t = pq.read_table(kept)
        pq.write_table(t.slice(0, 15).replace_schema_metadata(t.schema.metadata), kept)
    else:
        damage(kept)
    before = kept.read_bytes() if kept.is_file() else None
    with pytest.raises(PoolError, match=msg) as err:
        solve_pool(engine, problems, out, "sc", **kw)
    assert str(kept) in str(err.value) and "remove it" in str(err.value)
    assert len(str(err.value).splitlines()) == 1
    assert (kept.read_bytes() if kept.is_file() else None) == before


def test_a_kept_warmup_of_another_problem_set_is_refused(tmp_path, backend, problems):
    """Question 1's warmup kept by an AIME run, copied into a BRUMO run of the same engine, seed
    and grid: refused (it used to be taken, moving the BRUMO question's stop)."""
    kw = {"n_traces": 8, "warmup": 16, "seed": 3, "questions": [1]}
    brumo = load_problems("brumo_2025")
    for probs, out in ((problems, tmp_path / "aime"), (brumo, tmp_path / "brumo")):
        with pytest.raises(KeyboardInterrupt):
            solve_pool(_StopsAfterWarmup(backend, qid=1), probs, out, "sc", **kw)
    kept = tmp_path / "brumo" / "live" / "q000001.warmup.parquet"
    shutil.copy(tmp_path / "aime" / "live" / "q000001.warmup.parquet", kept)
    before = kept.read_bytes()
    with pytest.raises(PoolError, match="warmup traces of another question 1") as err:
        solve_pool(backend, brumo, tmp_path / "brumo", "sc", **kw)
    assert str(kept) in str(err.value) and "remove it" in str(err.value)
    assert kept.read_bytes() == before
    kept.unlink()  # as the message says: the question then runs its own warmup
    solve_pool(backend, brumo, tmp_path / "brumo", "sc", **kw)
    assert replay(tmp_path / "brumo")[0]["match"]


class _StopsAfterRecord:
    """Interrupts a live run right after question ``qid``'s record is written, before its kept
    warmup is removed."""

    def __init__(self, qid: int):
        self.qid = qid

    def __call__(self, path, obj):
        from mars.store.atomic import write_json_atomic

        write_json_atomic(path, obj)
        if path.name == f"q{self.qid:06d}.json":
            raise KeyboardInterrupt


@pytest.mark.parametrize("case", ["a question left", "the last question", "a finished run"])
def test_a_run_stopped_between_record_and_warmup_removal_leaves_no_warmup(
    tmp_path, backend, problems, monkeypatch, case
):
    """The kept warmup of a question whose record was written is litter: the next run of the
    same command removes it, whether questions are left to do, none is, or the run had finished
    (as an older version left it)."""
    out, kw = tmp_path / "run", {"n_traces": 8, "warmup": 4, "seed": 2, "questions": [0, 1]}
    last = case != "a question left"
    with monkeypatch.context() as m:
        m.setattr("mars.live.loop.write_json_atomic", _StopsAfterRecord(qid=1 if last else 0))
        with pytest.raises(KeyboardInterrupt):
            solve_pool(backend, problems, out, "sc", **kw)
    kept = out / "live" / f"q00000{int(last)}.warmup.parquet"
    assert kept.exists()
    if case == "a finished run":
        data = kept.read_bytes()
        solve_pool(backend, problems, out, "sc", **kw)
        kept.write_bytes(data)
        assert (out / schema.POOL_MANIFEST).exists()
    (out / "live" / ".q000000.json.tmp-99999").write_text("{")  # a killed writer's half file
    solve_pool(backend, problems, out, "sc", **kw)
    assert sorted(p.name for p in (out / "live").iterdir()) == ["q000000.json", "q000001.json"]
    assert [r["match"] for r in replay(out)] == [True, True]


WARM_KW = {"n_traces": 8, "warmup": 4, "seed": 3, "questions": [1]}


@pytest.fixture(scope="module")
def kept_warmup(tmp_path_factory, backend, problems):
    """A run interrupted after question 1's warmup (its kept warmup file), and the same run
    uninterrupted."""
    root = tmp_path_factory.mktemp("kept")
    with pytest.raises(KeyboardInterrupt):
        solve_pool(
            _StopsAfterWarmup(backend, qid=1), problems, root / "cut", "sc-mars-cal", **WARM_KW
        )
    solve_pool(backend, problems, root / "ref", "sc-mars-cal", **WARM_KW)
    return root / "cut", root / "ref"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def _warmup_damage(draw):
    """One random change to a kept warmup file: its metadata, a row, or its bytes."""
    kind = draw(st.sampled_from(["meta key", "meta text", "row", "rows", "bytes"]))
    if kind == "meta key":
        key = draw(
            st.sampled_from(
                [
                    "qid",
                    "problem",
                    "warmup",
                    "seed",
                    "spacing",
                    "max_tokens",
                    "engine",
                    "wall_s",
                    "rows",
                    "other",
                ]
            )
        )
        return kind, (key, draw(st.none() | _JSON), draw(st.booleans()))
    if kind == "meta text":
        return kind, draw(st.binary(max_size=20) | _JSON.map(lambda v: json.dumps(v).encode()))
    if kind == "row":
        column = draw(
            st.sampled_from(
                [
                    "qid",
                    "trace_idx",
                    "final_answer",
                    "length",
                    "finished",
                    "position",
                    "answer",
                    "confs",
                ]
            )
        )
        value = {
            "qid": st.integers(-2, 3),
            "trace_idx": st.integers(-2, 5),
            "final_answer": st.none() | st.text(max_size=3),
            "length": st.integers(0, 40000),
            "finished": st.booleans(),
            "position": st.integers(-1, 40000),
            "answer": st.none() | st.text(max_size=3),
            "confs": st.none() | st.lists(st.floats(width=16), max_size=4),
        }[column]
        return kind, (draw(st.integers(0, 3)), column, draw(value))
    if kind == "rows":
        return kind, draw(st.sampled_from(["drop", "duplicate", "reverse"]))
    return kind, (draw(st.floats(0, 1)), draw(st.integers(0, 255)))


def _damage_warmup(path, kind, how):
    if kind == "meta key":
        key, value, drop = how
        t = pq.read_table(path)
        info = json.loads(t.schema.metadata[b"mars.live.warmup"])
        if drop:
            info.pop(key, None)
        else:
            info[key] = value
        meta = {**t.schema.metadata, b"mars.live.warmup": json.dumps(info).encode()}
        pq.write_table(t.replace_schema_metadata(meta), path)
    elif kind == "meta text":
        t = pq.read_table(path)
        pq.write_table(
            t.replace_schema_metadata({**t.schema.metadata, b"mars.live.warmup": how}), path
        )
    elif kind == "row":
        j, column, value = how

        def edit(rows):
            if column in ("position", "answer"):
                if rows[j]["probes"]:
                    rows[j]["probes"][0][column] = value
            elif column == "confs" and value is not None:
                rows[j]["confs"] = np.asarray(value, np.float16).tobytes()
            else:
                rows[j][column] = value

        try:
            _edit_rows(path, edit)
        except (pa.ArrowException, OverflowError):
            pass  # a value the file's schema cannot hold: nothing written
    elif kind == "rows":
        t = pq.read_table(path)
        idx = {"drop": [0, 1, 2], "duplicate": [0, 1, 2, 3, 3], "reverse": [3, 2, 1, 0]}[how]
        pq.write_table(t.take(idx), path)
    else:
        at, byte = how
        data = bytearray(path.read_bytes())
        data[min(int(at * len(data)), len(data) - 1)] = byte
        path.write_bytes(bytes(data))


@settings(max_examples=40, deadline=None)
@given(damage=_warmup_damage())
def test_fuzz_kept_warmup_files(tmp_path_factory, backend, problems, kept_warmup, damage):
    """Any change to a kept warmup file: the run refuses it in one line naming the file and
    saying to remove it (the file left as it was), or it resumes with the uninterrupted run's
    records. Never a traceback, never another run's result."""
    cut, ref = kept_warmup
    out = tmp_path_factory.mktemp("fuzz") / "run"
    shutil.copytree(cut, out)
    kept = out / "live" / "q000001.warmup.parquet"
    _damage_warmup(kept, *damage)
    before = kept.read_bytes()
    try:
        solve_pool(backend, problems, out, "sc-mars-cal", **WARM_KW)
    except PoolError as exc:
        msg = str(exc)
        assert len(msg.splitlines()) == 1 and msg.startswith(f"{kept}: ") and "remove it" in msg
        assert kept.read_bytes() == before
    else:
        _assert_same_run(out, ref, [1])


def test_a_warmup_without_final_answers_is_said_before_the_main_traces(backend, problems, caplog):
    """A question whose warmup traces all end without a \\boxed{} answer is said as the warmup
    ends, before its main traces start (and again once they ran to their end)."""
    engine, heard = NoBoxed(backend), []

    class Watching:
        def __getattr__(self, name):
            return getattr(engine, name)

        def start(self, problem, n, seed, first_trace=0):
            heard.append((first_trace, caplog.text))
            return engine.start(problem, n, seed, first_trace=first_trace)

    with caplog.at_level("WARNING", logger="mars.engines.generate"):
        run = solve(Watching(), problems[1], "sc-mars-cal", n_traces=8, warmup=4, seed=0)
    assert heard[0] == (0, "") and heard[1][0] == 4
    assert "question 1: none of its 4 warmup traces ended with a \\boxed{}" in heard[1][1]
    assert "none of its 8 traces that ran to their end" in caplog.text and run.answer is None


def test_a_kept_warmup_that_is_no_warmup_file_says_what_it_is(tmp_path):
    """A directory where the warmup file goes, or a trace file with no warmup record: one line
    saying so (not a bytes literal), naming it, with the remedy."""
    from mars.live.warmup import read_warmup

    made_by = {"qid": 1, "warmup": 2}
    kept = tmp_path / "q000001.warmup.parquet"
    kept.mkdir()
    with pytest.raises(PoolError) as err:
        read_warmup(kept, made_by)
    msg = str(err.value)
    assert msg.startswith(f"{kept}: a directory, not a warmup file") and "remove it" in msg
    kept.rmdir()
    pq.write_table(pa.table({"qid": [1]}), kept)
    with pytest.raises(PoolError) as err:
        read_warmup(kept, made_by)
    msg = str(err.value)
    assert "b'" not in msg and "records no warmup" in msg and "remove it" in msg


def test_other_seed_other_run(backend, problems):
    a = solve(backend, problems[2], "sc-mars-cal", n_traces=24, warmup=8, seed=0)
    b = solve(backend, problems[2], "sc-mars-cal", n_traces=24, warmup=8, seed=1)
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
    assert [r["match"] for r in replay(out)] == [False] + [True] * (len(QIDS) - 1)
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


# -- damaged records and manifests (issue 19, item 11) -------------------------------------------

SMALL = {"n_traces": 8, "warmup": 4, "seed": 2, "questions": [0, 1], "progress": False}
SMALL_CLI = ["--problems", "aime_2025", "--questions", "0,1", "--traces", "8", "--warmup", "4"]
SMALL_CLI += ["--seed", "2", "-q"]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory, backend, problems):
    out = tmp_path_factory.mktemp("small") / "run"
    solve_pool(backend, problems, out, "sc-mars-cal", **SMALL)
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
    out, kw = tmp_path / "run", {**SMALL, "questions": [0, 1, 2]}

    def stop_after_two(run):
        if run.qid == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        solve_pool(backend, problems, out, "sc-mars-cal", on_question=stop_after_two, **kw)
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
    solve_pool(backend, problems, out, "sc-mars-cal", **kw)
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
    assert replay(both)[0]["match"] and not (both / LOCK_NAME).exists()


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
    assert len(live_grid(2048, 2048 * MAX_CHECKPOINTS)) == MAX_CHECKPOINTS
    with pytest.raises(UsageError, match="checkpoints, more than"):
        live_grid(2048, 2048 * (MAX_CHECKPOINTS + 1))
    with pytest.raises(UsageError, match="checkpoints, more than"):
        solve_pool(
            backend, problems, tmp_path / "o", "sc-mars-cal", **{**SMALL, "max_tokens": 10**15}
        )
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
    grid = live_grid(256, 512)
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
