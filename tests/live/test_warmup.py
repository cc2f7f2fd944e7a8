"""A live run's kept warmup (mars/live/warmup.py): damaged, of another problem set, left by a run
stopped between record and removal, fuzzed, without final answers, or no warmup file at all; each
is one line, and the file is kept."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from util import NoBoxed

from live.common import (
    _assert_same_run,
    _StopsAfterWarmup,
)
from mars.live import plan_for, replay_run, solve, solve_pool
from mars.store import schema
from mars.store.pool import PoolError
from mars.store.problems import load_problems


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
    kw = {"n_traces": 8, "warmup": 16, "seed": 3}
    with pytest.raises(KeyboardInterrupt):
        solve_pool(engine, problems, out, plan_for(engine, "sc", **kw), questions=[1])
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
        solve_pool(engine, problems, out, plan_for(engine, "sc", **kw), questions=[1])
    assert str(kept) in str(err.value) and "remove it" in str(err.value)
    assert len(str(err.value).splitlines()) == 1
    assert (kept.read_bytes() if kept.is_file() else None) == before


def test_a_kept_warmup_of_another_problem_set_is_refused(tmp_path, backend, problems):
    """Question 1's warmup kept by an AIME run, copied into a BRUMO run of the same engine, seed
    and grid: refused (it used to be taken, moving the BRUMO question's stop)."""
    kw = {"n_traces": 8, "warmup": 16, "seed": 3}
    brumo = load_problems("brumo_2025")
    for probs, out in ((problems, tmp_path / "aime"), (brumo, tmp_path / "brumo")):
        with pytest.raises(KeyboardInterrupt):
            solve_pool(
                _StopsAfterWarmup(backend, qid=1),
                probs,
                out,
                plan_for(backend, "sc", **kw),
                questions=[1],
            )
    kept = tmp_path / "brumo" / "live" / "q000001.warmup.parquet"
    shutil.copy(tmp_path / "aime" / "live" / "q000001.warmup.parquet", kept)
    before = kept.read_bytes()
    with pytest.raises(PoolError, match="warmup traces of another question 1") as err:
        solve_pool(backend, brumo, tmp_path / "brumo", plan_for(backend, "sc", **kw), questions=[1])
    assert str(kept) in str(err.value) and "remove it" in str(err.value)
    assert kept.read_bytes() == before
    kept.unlink()  # as the message says: the question then runs its own warmup
    solve_pool(backend, brumo, tmp_path / "brumo", plan_for(backend, "sc", **kw), questions=[1])
    assert replay_run(tmp_path / "brumo")[0]["match"]


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
    out, kw = tmp_path / "run", {"n_traces": 8, "warmup": 4, "seed": 2}
    last = case != "a question left"
    with monkeypatch.context() as m:
        m.setattr("mars.live.loop.write_json_atomic", _StopsAfterRecord(qid=1 if last else 0))
        with pytest.raises(KeyboardInterrupt):
            solve_pool(backend, problems, out, plan_for(backend, "sc", **kw), questions=[0, 1])
    kept = out / "live" / f"q00000{int(last)}.warmup.parquet"
    assert kept.exists()
    if case == "a finished run":
        data = kept.read_bytes()
        solve_pool(backend, problems, out, plan_for(backend, "sc", **kw), questions=[0, 1])
        kept.write_bytes(data)
        assert (out / schema.POOL_MANIFEST).exists()
    (out / "live" / ".q000000.json.tmp-99999").write_text("{")  # a killed writer's half file
    solve_pool(backend, problems, out, plan_for(backend, "sc", **kw), questions=[0, 1])
    assert sorted(p.name for p in (out / "live").iterdir()) == ["q000000.json", "q000001.json"]
    assert [r["match"] for r in replay_run(out)] == [True, True]


WARM_KW = {"n_traces": 8, "warmup": 4, "seed": 3}


@pytest.fixture(scope="module")
def kept_warmup(tmp_path_factory, backend, problems):
    """A run interrupted after question 1's warmup (its kept warmup file), and the same run
    uninterrupted."""
    root = tmp_path_factory.mktemp("kept")
    with pytest.raises(KeyboardInterrupt):
        solve_pool(
            _StopsAfterWarmup(backend, qid=1),
            problems,
            root / "cut",
            plan_for(backend, "sc-mars-cal", **WARM_KW),
            questions=[1],
        )
    solve_pool(
        backend, problems, root / "ref", plan_for(backend, "sc-mars-cal", **WARM_KW), questions=[1]
    )
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
        solve_pool(
            backend, problems, out, plan_for(backend, "sc-mars-cal", **WARM_KW), questions=[1]
        )
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
        be = Watching()
        run = solve(be, problems[1], plan_for(be, "sc-mars-cal", n_traces=8, warmup=4, seed=0))
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
