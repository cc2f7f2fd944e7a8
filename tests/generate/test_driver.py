"""The generate stage's driver (generate_pool): pool writing, sharding, resume, consolidation."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from util import NoBoxed, as_format_1

from mars.cli import app, main
from mars.engines.synthetic import SyntheticBackend
from mars.errors import MarsError
from mars.generate import generate_pool
from mars.store import schema
from mars.store.consolidate import consolidate, shard_range
from mars.store.pool import PoolError, open_pool, read_trace_table
from mars.store.problems import load_problems
from mars.store.problems import parse_question_spec as parse_qids

TOY = {
    "name": "toy",
    "base": "qwen3-8b",
    "params": {"len_median": 2000.0, "max_tokens": 6144, "len_hard_slope": 0.5},
}
QS = [0, 1, 2, 3]
SPACING = 1024


def backend():
    return SyntheticBackend(TOY)


@pytest.fixture(scope="module")
def problems():
    return load_problems("aime_2025")


def gen(problems, out, seed=0, n=8, **kw):
    kw.setdefault("spacing", SPACING)
    kw.setdefault("questions", QS)
    return generate_pool(backend(), problems, n, seed, out, **kw)


def trace_bytes(pool_dir):
    return {q: (pool_dir / schema.trace_file_name(q)).read_bytes() for q in QS}


def test_generated_pool_validates(tmp_path, problems):
    out = gen(problems, tmp_path / "pool")
    pool = open_pool(out)
    assert pool.qids == QS
    m = json.loads((out / schema.POOL_MANIFEST).read_text())
    for key, val in {
        "backend": "synthetic",
        "preset": "toy",
        "seed": 0,
        "n_traces": 8,
        "spacing": SPACING,
        "max_tokens": 6144,
        "format": schema.POOL_FORMAT,
        "n_questions": 4,
    }.items():
        assert m[key] == val
    assert m["model"]
    assert not (out / ".generate.json").exists()
    for q in pool.qids:
        d = pool.read_question(q)
        assert d.n_traces == 8 and list(d.trace_idx) == list(range(8))
        assert d.has_confs and d.probe_cost is not None
        assert d.ground_truth == problems[q].answer
        assert (d.probe_positions % SPACING == 0).all()
        # probes only while running: position < length
        tr = np.repeat(np.arange(d.n_traces), np.diff(d.probe_offsets))
        assert (d.probe_positions < d.lengths[tr]).all()
        # every running trace is probed at every grid point (no gaps)
        for j in range(d.n_traces):
            pos = d.probe_positions[d.probe_offsets[j] : d.probe_offsets[j + 1]]
            expect = np.arange(SPACING, d.lengths[j], SPACING)
            assert np.array_equal(pos, expect[expect <= 6144])
    t = pq.read_table(out / schema.trace_file_name(0))
    assert t.schema.equals(schema.TRACE_FILE_SCHEMA)
    assert read_trace_table(out / schema.trace_file_name(0)).schema.equals(schema.TRACE_SCHEMA)


def test_same_seed_same_bytes_other_seed_differs(tmp_path, problems):
    a = trace_bytes(gen(problems, tmp_path / "a", seed=3))
    b = trace_bytes(gen(problems, tmp_path / "b", seed=3))
    c = trace_bytes(gen(problems, tmp_path / "c", seed=4))
    d = trace_bytes(gen(problems, tmp_path / "d", seed=3, workers=2))
    assert a == b == d
    assert all(a[q] != c[q] for q in QS)
    qa = (tmp_path / "a" / schema.POOL_QUESTIONS).read_bytes()
    assert qa == (tmp_path / "b" / schema.POOL_QUESTIONS).read_bytes()


def test_shards_consolidate_to_the_unsharded_pool(tmp_path, problems):
    whole = gen(problems, tmp_path / "whole")
    s0 = gen(problems, tmp_path / "s0", shard=0, n_shards=2)
    s1 = gen(problems, tmp_path / "s1", shard=1, n_shards=2)
    m1 = json.loads((s1 / schema.POOL_MANIFEST).read_text())
    assert m1["shard"] == {"index": 1, "n_shards": 2, "first_trace": 4, "n_traces": 4}
    merged = consolidate([s1, s0], tmp_path / "merged")  # order of the arguments does not matter
    pool = open_pool(merged)
    assert pool.qids == QS
    for q in QS:
        ta = pq.read_table(whole / schema.trace_file_name(q))
        tb = pq.read_table(merged / schema.trace_file_name(q))
        assert ta.equals(tb)
    m = json.loads((merged / schema.POOL_MANIFEST).read_text())
    assert "shard" not in m and len(m["consolidated_from"]) == 2 and m["n_traces"] == 8


def test_shards_of_format_1_and_2_consolidate_to_the_unsharded_pool(tmp_path, problems):
    """A shard written before confidences were stored as bytes merges with a newer one; the pool
    consolidated stores them as bytes, the same traces as the unsharded pool."""
    whole = gen(problems, tmp_path / "whole")
    s0 = as_format_1(gen(problems, tmp_path / "s0", shard=0, n_shards=2), tmp_path / "s0-old")
    s1 = gen(problems, tmp_path / "s1", shard=1, n_shards=2)
    old_type = pq.read_schema(s0 / schema.trace_file_name(QS[0])).field("confs").type
    assert old_type == pa.list_(pa.float16())
    merged = consolidate([s0, s1], tmp_path / "merged")
    assert json.loads((merged / schema.POOL_MANIFEST).read_text())["version"] == 2
    for q in QS:
        assert pq.read_table(whole / schema.trace_file_name(q)).equals(
            pq.read_table(merged / schema.trace_file_name(q))
        )


def test_consolidate_rejects_bad_shard_sets(tmp_path, problems):
    s0 = gen(problems, tmp_path / "s0", shard=0, n_shards=3)
    s2 = gen(problems, tmp_path / "s2", shard=2, n_shards=3)
    with pytest.raises(PoolError, match="gap"):
        consolidate([s0, s2], tmp_path / "m1")
    with pytest.raises(PoolError, match="overlaps"):
        consolidate([s0, s0], tmp_path / "m2")
    other = gen(problems, tmp_path / "o1", seed=9, shard=1, n_shards=3)
    with pytest.raises(PoolError, match="other parameters"):
        consolidate([s0, other, s2], tmp_path / "m3")
    with pytest.raises(PoolError, match="missing shards"):
        consolidate([s0], tmp_path / "m4")
    assert not (tmp_path / "m1").exists()


@pytest.fixture(scope="module")
def two_shards(problems, tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    return [gen(problems, root / f"s{i}", shard=i, n_shards=2) for i in (0, 1)]


def _damage_confs(shard, confs_of):
    """Rewrite question 0's trace file with confidences ``confs_of(list of float16 arrays)``."""
    f = shard / schema.trace_file_name(0)
    t = read_trace_table(f)
    col = confs_of([np.asarray(c, dtype=np.float16) for c in t.column("confs").to_pylist()])
    pq.write_table(t.set_column(t.column_names.index("confs"), "confs", col), f)
    return f


def _odd_bytes(cs):
    return pa.array([c.tobytes() + (b"\0" if j == 1 else b"") for j, c in enumerate(cs)])


def _nan(cs):
    cs[1][3] = np.nan
    return pa.array([c.tobytes() for c in cs], pa.large_binary())


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda s: _edit_manifest(s, version=99), "mars-pool format version 99 is not supported"),
        (lambda s: _edit_manifest(s, format="other"), "not a mars-pool manifest"),
        (lambda s: _damage_confs(s, _odd_bytes), "bytes (float16: 2 a token)"),
        (lambda s: _damage_confs(s, _nan), "trace 5: non-finite confidence (NaN or inf) at token"),
        (
            lambda s: _damage_confs(s, lambda cs: pa.array([[1, 2]] * len(cs))),
            "column 'confs' has type list<element: int64>",
        ),
        (
            lambda s: _damage_confs(s, lambda cs: pa.array([["a"]] * len(cs))),
            "column 'confs' has type list<element: string>",
        ),
    ],
)
def test_consolidate_checks_each_shard_as_a_pool_is_read(two_shards, tmp_path, damage, message):
    """A shard of another format or version, or with confidences a pool reader refuses (odd byte
    counts, NaN, integers, strings), is one line naming the shard; nothing is written."""
    s0, s1 = two_shards
    bad = tmp_path / "s1"
    shutil.copytree(s1, bad)
    damage(bad)
    res = CliRunner().invoke(app, ["consolidate", str(s0), str(bad), "--out", str(tmp_path / "m")])
    assert res.exit_code == 2, res.output
    assert res.output.count("\n") == 1 and message in res.output and str(bad) in res.output
    assert not (tmp_path / "m").exists()


def _edit_manifest(shard, **changes):
    f = shard / schema.POOL_MANIFEST
    f.write_text(json.dumps({**json.loads(f.read_text()), **changes}))


def test_resume_after_deleting_a_question(tmp_path, problems):
    out = gen(problems, tmp_path / "s", shard=1, n_shards=2)
    before = trace_bytes(out)
    (out / schema.trace_file_name(2)).unlink()
    gen(problems, tmp_path / "s", shard=1, n_shards=2)
    assert trace_bytes(out) == before
    assert (out / schema.POOL_MANIFEST).exists()


def test_resume_after_interruption(tmp_path, problems):
    clean = trace_bytes(gen(problems, tmp_path / "clean"))

    class Boom(RuntimeError):
        pass

    def die_after_two(qid, table):
        if qid == 1:
            raise Boom

    with pytest.raises(Boom):
        gen(problems, tmp_path / "run", on_question=die_after_two)
    run = tmp_path / "run"
    assert (run / ".generate.json").exists() and not (run / schema.POOL_MANIFEST).exists()
    assert sorted(p.name for p in (run / "traces").iterdir()) == [
        "q000000.parquet",
        "q000001.parquet",
    ]
    seen = []
    gen(problems, run, on_question=lambda q, t: seen.append(q))
    assert seen == [2, 3]  # finished questions are skipped
    assert trace_bytes(run) == clean
    open_pool(run)


def test_other_questions_are_refused_saying_what_to_do(tmp_path, problems):
    """Issue 35 (10): a finished or interrupted pool and a run with other --questions: the line
    names what differs, the questions it holds and the ways on."""
    out = gen(problems, tmp_path / "p")
    interrupted = tmp_path / "i"
    with pytest.raises(RuntimeError):
        gen(problems, interrupted, questions=[0, 1, 2, 5], on_question=_stop_after_one)
    for folder, held in ((out, "0-3"), (interrupted, "0-2,5")):
        with pytest.raises(PoolError) as caught:
            gen(problems, folder, questions=[0, 1, 7])
        (line,) = str(caught.value).splitlines()
        assert "with other parameters (problems_digest, qids): to keep it, rerun with its " in line
        assert line.endswith(
            f"parameters (its questions: --questions {held}); for these, choose another --out; "
            "to replace it, delete the folder"
        )


def _stop_after_one(qid, table):
    raise RuntimeError("interrupted")


def test_refuses_other_parameters_or_foreign_dirs(tmp_path, problems):
    out = gen(problems, tmp_path / "p")
    with pytest.raises(PoolError, match="other parameters"):
        gen(problems, out, seed=1)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "x.txt").write_text("hi")
    with pytest.raises(PoolError, match="refusing"):
        gen(problems, foreign)
    with pytest.raises(ValueError, match="not in problems"):
        generate_pool(backend(), problems, 4, 0, tmp_path / "q", questions=[99])


def test_shard_ranges():
    assert [shard_range(10, s, 3) for s in range(3)] == [(0, 3), (3, 6), (6, 10)]
    with pytest.raises(ValueError):
        shard_range(10, 3, 3)
    assert parse_qids("0-2,5") == [0, 1, 2, 5] and parse_qids(None) is None


def test_cli(tmp_path):
    out = tmp_path / "cli"
    assert (
        main(
            [
                "generate",
                "--backend",
                "synthetic",
                "--preset",
                "qwen3-32b",
                "--problems",
                "brumo_2025",
                "--traces",
                "4",
                "--seed",
                "2",
                "--out",
                str(out),
                "--questions",
                "0-1",
                "--max-tokens",
                "8192",
                "--quiet",
            ]
        )
        == 0
    )
    pool = open_pool(out)
    assert (
        pool.qids == [0, 1]
        and pool.manifest["preset"] == "qwen3-32b"
        and pool.manifest["max_tokens"] == 8192
    )
    assert pool.read_question(1).lengths.max() <= 8192
    s = [
        main(
            [
                "generate",
                "--problems",
                "brumo_2025",
                "--traces",
                "4",
                "--out",
                str(tmp_path / f"s{i}"),
                "--questions",
                "0",
                "--shard",
                str(i),
                "--n-shards",
                "2",
                "--no-confs",
                "--quiet",
            ]
        )
        for i in range(2)
    ]
    assert s == [0, 0]
    assert (
        main(
            [
                "consolidate",
                "--out",
                str(tmp_path / "m"),
                str(tmp_path / "s0"),
                str(tmp_path / "s1"),
            ]
        )
        == 0
    )
    d = open_pool(tmp_path / "m").read_question(0)
    assert d.n_traces == 4 and not d.has_confs
    shutil.rmtree(tmp_path / "m")


# -- issue 13: settings checked before the output is claimed; recoverable folders ---------------


@pytest.mark.parametrize(
    "change, message",
    [
        ({"spacing": 0}, "--spacing 0"),
        ({"seed": -1}, "--seed -1"),
        ({"max_tokens": 0}, "--max-tokens 0"),
        ({"n": 1_000_000_000}, "--traces 1000000000"),
        ({"max_tokens": 512}, "--spacing 1024: no checkpoint within --max-tokens 512"),
    ],
)
def test_bad_settings_leave_no_blocking_folder(tmp_path, problems, change, message):
    """Refused before `out` is claimed, so the corrected command into the same folder works."""
    out = tmp_path / "p"
    kw = {"n": 4, "seed": 0, **change}
    n, seed = kw.pop("n"), kw.pop("seed")
    with pytest.raises(MarsError, match=re.escape(message)):
        gen(problems, out, seed=seed, n=n, **kw)
    assert not out.exists()
    gen(problems, out, n=4)
    assert open_pool(out).qids == QS


def test_cli_rejects_absurd_generation_before_work(tmp_path):
    out = tmp_path / "o"
    for args, message in (
        (["--traces", "1000000000"], "--traces 1000000000: must be between 1 and"),
        (["--traces", "4", "--max-tokens", "0"], "--max-tokens 0: must be ≥ 1"),
    ):
        res = CliRunner().invoke(
            app,
            ["generate", "--problems", "aime_2025", "--questions", "0", "--out", str(out), *args],
        )
        assert res.exit_code == 2 and message in res.output and res.output.count("\n") == 1
        assert not out.exists()


def test_deleted_completion_marker_is_recoverable(tmp_path, problems):
    """A workflow manager running as root deletes pool.json to regenerate with other settings:
    `mars generate` refuses clearly (the traces stay), and the original settings resume."""
    out = gen(problems, tmp_path / "shard", shard=0, n_shards=2)
    before = trace_bytes(out)
    manifest = (out / schema.POOL_MANIFEST).read_bytes()
    (out / schema.POOL_MANIFEST).unlink()
    with pytest.raises(PoolError, match=r"holds a generation with other parameters \(n_traces, "):
        gen(problems, out, n=6, shard=0, n_shards=2)
    assert trace_bytes(out) == before  # nothing lost
    gen(problems, out, shard=0, n_shards=2)  # the reverted settings: no regeneration needed
    assert trace_bytes(out) == before
    assert (out / schema.POOL_MANIFEST).read_bytes() == manifest


@pytest.mark.parametrize(
    "max_tokens, why",
    [
        (None, r"8 finished without one: does the prompt ask for the answer in \\boxed\{\}\?"),
        (2048, "all were cut at --max-tokens 2,048 first"),
    ],
)
def test_a_question_without_final_answers_is_said_at_once(
    tmp_path, problems, caplog, max_tokens, why
):
    """Traces that end without a \\boxed{} answer make a pool nothing can vote on: said as the
    first question ends, not found out at simulate time."""
    heard = []
    with caplog.at_level("WARNING", logger="mars.engines.generate"):
        generate_pool(
            NoBoxed(SyntheticBackend("qwen3-8b")),
            problems,
            8,
            0,
            tmp_path / "pool",
            questions=[1, 2],
            max_tokens=max_tokens,
            on_question=lambda qid, _t: heard.append((qid, caplog.text)),
        )
    first = heard[0][1]
    assert "question 1: none of its 8 traces ended with a \\boxed{} final answer" in first
    assert re.search(why, first) and "question 2" not in first
    caplog.clear()
    generate_pool(SyntheticBackend("qwen3-8b"), problems, 8, 0, tmp_path / "ok", questions=[0])
    assert "boxed" not in caplog.text
