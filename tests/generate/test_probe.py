"""The probe stage: `mars probe` probes stored traces again, at any spacing (synthetic engine here;
the transformers and SGLang engines have their own tests)."""

from __future__ import annotations

import filecmp
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from mars.cli import app
from mars.engines.synthetic import SyntheticBackend
from mars.errors import MarsError
from mars.generate import generate_pool
from mars.generate.probe import probe_backend, probe_pool
from mars.store import schema
from mars.store.grid import Grid
from mars.store.pool import PoolError, open_pool
from mars.store.problems import load_problems
from mars.store.problems import parse_question_spec as parse_qids

runner = CliRunner()
QS = [0, 1, 2]


@pytest.fixture(scope="module")
def pools(tmp_path_factory):
    """The same 3 questions × 24 traces generated with inline probes and without probes."""
    root = tmp_path_factory.mktemp("probe")
    problems = load_problems("aime_2025")
    kw = {"questions": QS, "progress": False}
    inline = generate_pool(SyntheticBackend("qwen3-8b"), problems, 24, 5, root / "inline", **kw)
    bare = generate_pool(
        SyntheticBackend("qwen3-8b"), problems, 24, 5, root / "bare", probe="none", **kw
    )
    return root, inline, bare


def _probes(path, qid):
    return [r["probes"] for r in pq.read_table(path / schema.trace_file_name(qid)).to_pylist()]


def test_probe_positions():
    assert Grid(2048).probe_positions(5000).tolist() == [2048, 4096, 5000]
    assert Grid(2048).probe_positions(4096).tolist() == [2048, 4096]  # the end is on the grid: once
    assert Grid(2048).probe_positions(100).tolist() == [100]


def test_generation_without_probes_keeps_what_probing_needs(pools):
    _, _, bare = pools
    manifest = json.loads((bare / schema.POOL_MANIFEST).read_text())
    assert manifest["probes"] == "none" and "spacing" not in manifest
    assert all(ps == [] for ps in _probes(bare, 0))


def test_reprobing_at_the_generation_spacing_gives_the_inline_probes(pools, tmp_path):
    """Probing a probe-less pool at 2,048 gives exactly the probes inline generation wrote, plus
    each trace's terminal probe; the simulations are byte-identical."""
    _, inline, bare = pools
    out = probe_pool(
        bare,
        tmp_path / "probed",
        probe_backend(open_pool(bare).manifest),
        spacing=2048,
    )
    for qid in QS:
        rows = pq.read_table(out / schema.trace_file_name(qid)).to_pylist()
        for got, want in zip(rows, _probes(inline, qid)):
            grid = [p for p in got["probes"] if p["position"] < got["length"]]
            assert grid == want  # every field: answer, raw text, confidence, cost
            assert got["probes"][-1]["position"] == got["length"]  # the terminal probe
    args = ["-m", "all", "--budget", "16", "--iterations", "3", "--warmup", "4", "-q"]
    for name, pool in (("a", inline), ("b", out)):
        assert (
            runner.invoke(
                app, ["simulate", str(pool), *args, "--out", str(tmp_path / name)]
            ).exit_code
            == 0
        )
    for method in (tmp_path / "a").iterdir():
        assert filecmp.cmp(
            method / "per_iteration.csv",
            tmp_path / "b" / method.name / "per_iteration.csv",
            shallow=False,
        ), method.name


def test_reprobing_at_another_spacing_without_regenerating(pools, tmp_path):
    _, inline, bare = pools
    res = runner.invoke(
        app, ["probe", str(bare), "--out", str(tmp_path / "p1024"), "--spacing", "1024", "-q"]
    )
    assert res.exit_code == 0, res.output
    pool = open_pool(tmp_path / "p1024")
    assert pool.grid == Grid(1024) and pool.manifest["probe"]["spacing"] == 1024
    for qid in QS:
        a, b = open_pool(inline).read_question(qid), pool.read_question(qid)
        assert np.array_equal(a.lengths, b.lengths) and a.final_answers == b.final_answers
        assert set(b.probe_positions[b.probe_positions % 2048 == 0]) >= set(a.probe_positions)
    res = runner.invoke(
        app,
        [
            "simulate",
            str(tmp_path / "p1024"),
            "-m",
            "sc-mars-cal",
            "--budget",
            "16",
            "--iterations",
            "2",
            "--warmup",
            "4",
            "--out",
            str(tmp_path / "s"),
            "-q",
        ],
    )
    assert res.exit_code == 0
    out = json.loads((tmp_path / "s" / "sc-mars-cal" / "overall.json").read_text())
    assert out["settings"]["spacing"] == 1024


def test_interrupted_probing_resumes_to_the_same_bytes(pools, tmp_path, monkeypatch):
    _, _, bare = pools
    be = probe_backend(open_pool(bare).manifest)
    clean = probe_pool(bare, tmp_path / "clean", be, spacing=1024)

    class Boom(RuntimeError):
        pass

    real = be.reprobe
    calls = []

    def dies_on_the_second(*args, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise Boom
        return real(*args, **kw)

    monkeypatch.setattr(be, "reprobe", dies_on_the_second)
    with pytest.raises(Boom):
        probe_pool(bare, tmp_path / "run", be, spacing=1024)
    assert not (tmp_path / "run" / schema.POOL_MANIFEST).exists()
    monkeypatch.setattr(be, "reprobe", real)
    probe_pool(bare, tmp_path / "run", be, spacing=1024)
    for qid in QS:
        name = schema.trace_file_name(qid)
        assert (clean / name).read_bytes() == (tmp_path / "run" / name).read_bytes()


def test_other_settings_into_the_same_folder(pools, tmp_path):
    _, _, bare = pools
    be = probe_backend(open_pool(bare).manifest)
    out = probe_pool(bare, tmp_path / "p", be, spacing=2048)
    with pytest.raises(PoolError, match="with other parameters"):
        probe_pool(bare, out, be, spacing=1024)
    probe_pool(bare, out, be, spacing=1024, replace=True)
    assert open_pool(out).grid == Grid(1024)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--spacing", "0"], "--spacing 0: must be a whole number of tokens, at least 1"),
        (["--spacing", "10000000"], "beyond the longest trace"),
        (["--backend", "nope"], "unknown backend 'nope'"),
        (["--temperature", "0.3"], "the synthetic backend has no --temperature"),
        (["--questions", "99"], "no question 99"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(pools, tmp_path, args, message):
    _, _, bare = pools
    out = tmp_path / "o"
    res = runner.invoke(app, ["probe", str(bare), "--out", str(out), *args])
    assert res.exit_code == 2 and message in res.output and res.output.count("\n") == 1
    assert not out.exists()


def test_damaged_confidences_are_named_with_their_file(pools, tmp_path):
    """A trace whose confidences hold an odd byte count: the file and the trace are named."""
    import shutil

    import pyarrow as pa

    _, _, bare = pools
    src = shutil.copytree(bare, tmp_path / "damaged")
    path = src / schema.trace_file_name(QS[0])
    t = pq.read_table(path)
    i = t.column_names.index("confs")
    col = t.column("confs").to_pylist()
    col[1] = col[1] + b"x"
    pq.write_table(t.set_column(i, t.schema.field("confs"), pa.array(col, pa.large_binary())), path)
    res = runner.invoke(app, ["probe", str(src), "--out", str(tmp_path / "o"), "-q"])
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert f"{path}: trace 1: confs of" in res.output
    assert not (tmp_path / "o").exists()


def test_only_pools_written_by_generation(tmp_path):
    from util import write_published_pool

    path = write_published_pool(tmp_path / "p.parquet", n_questions=1)
    res = runner.invoke(app, ["probe", str(path), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "reads a pool directory written by `mars generate`" in res.output


def test_synthetic_engine_probes_only_its_own_traces(pools):
    _, _, bare = pools
    manifest = dict(open_pool(bare).manifest, preset="qwen3-32b")
    be = probe_backend(manifest)
    with pytest.raises(MarsError, match="probe with the generator's preset and seed"):
        probe_pool(bare, bare.parent / "wrong", be, spacing=2048)


# -- issue 19: the same command again is a no-op; a refusal while probing leaves nothing ---------


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("qids", ["0,1", "0-2"])
def test_the_same_finished_command_again_does_nothing(pools, tmp_path, replace, qids):
    """Was refused as "a finished pool probing with other parameters"."""
    _, _, bare = pools
    out = tmp_path / "p"
    args = ["probe", str(bare), "--out", str(out), "--spacing", "1024", "--questions", qids, "-q"]
    assert runner.invoke(app, args).exit_code == 0
    files = {f: (f.read_bytes(), f.stat().st_mtime_ns) for f in out.rglob("*.*")}
    res = runner.invoke(app, [*args, *(["--replace"] * replace)])
    assert res.exit_code == 0, res.output
    for f, (data, mtime) in files.items():  # nothing written again (pool.json only touched)
        assert f.read_bytes() == data and (f.stat().st_mtime_ns == mtime or f.name == "pool.json")
    assert open_pool(out).qids == parse_qids(qids)
    other = runner.invoke(app, [*args[:4], "--spacing", "2048", "-q"])
    assert other.exit_code == 2 and "with other parameters" in other.output


def _edit_trace(pool, qid: int) -> None:
    """Make the first trace of a question longer than the engine rebuilds it."""
    import pyarrow as pa

    path = pool / schema.trace_file_name(qid)
    table = pq.read_table(path)
    lengths = table["length"].to_pylist()
    lengths[0] += 10_000
    i = table.column_names.index("length")
    pq.write_table(table.set_column(i, "length", pa.array(lengths, pa.int32())), path)


@pytest.mark.parametrize("damage", ["edited seed", "second question"])
def test_a_refusal_found_while_probing_leaves_nothing_behind(pools, tmp_path, monkeypatch, damage):
    """Found only once probing runs (here: traces that are not what the engine rebuilds from the
    pool's seed), a refusal used to leave `.probe.json` and `traces/` in --out, and the corrected
    command into the same folder was refused. Now the folder is as before the command."""
    import shutil

    _, _, bare = pools
    src = shutil.copytree(bare, tmp_path / "src")
    manifest = src / schema.POOL_MANIFEST
    good = manifest.read_text()
    trace_file = src / schema.trace_file_name(1)
    good_trace = trace_file.read_bytes()
    if damage == "edited seed":
        manifest.write_text(json.dumps(dict(json.loads(good), seed=6)))
    else:
        _edit_trace(src, 1)
    out = tmp_path / "p"
    args = ["probe", str(src), "--out", str(out), "-q"]
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "probe with the generator's preset and seed" in res.output
    assert not out.exists()
    # an interrupted run keeps its place: a refusal undoes only what the refused command wrote
    manifest.write_text(good)
    trace_file.write_bytes(good_trace)
    be = probe_backend(open_pool(src).manifest)
    real = be.reprobe

    def interrupted_at_question_1(problem, *rest):
        if problem.qid == 1:
            raise KeyboardInterrupt
        return real(problem, *rest)

    monkeypatch.setattr(be, "reprobe", interrupted_at_question_1)
    with pytest.raises(KeyboardInterrupt):
        probe_pool(src, out, be)
    before = {p: p.read_bytes() for p in out.rglob("*.*")}
    assert len(before) == 2  # the record and question 0
    _edit_trace(src, 1)
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "question 1, trace 0" in res.output
    assert {p: p.read_bytes() for p in out.rglob("*.*")} == before
    trace_file.write_bytes(good_trace)
    assert runner.invoke(app, args).exit_code == 0
    assert open_pool(out).qids == QS
