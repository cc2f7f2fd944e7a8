"""Importers and the exporter."""

from __future__ import annotations

import conformance as C
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from util import write_layout_pool

from mars.cli import app
from mars.store.pool import open_pool

runner = CliRunner()
PP_JSON = C.SHARED / "data" / "parallel-probe-qwen3-8b" / "aime24.json"
needs_shared = pytest.mark.skipif(not PP_JSON.exists(), reason="../shared not present")


@pytest.fixture(scope="module")
def imported_pp(tmp_path_factory):
    out = tmp_path_factory.mktemp("pp") / "pool"
    res = runner.invoke(app, ["import", "parallel-probe", str(PP_JSON), str(out)])
    assert res.exit_code == 0, res.output
    return out


@needs_shared
@pytest.mark.reference
def test_parallel_probe_import_equals_fixture_pool(imported_pp):
    ours, ref = open_pool(imported_pp), open_pool(C.FIXTURES / "pp-aime24" / "pool.parquet")
    assert ours.qids == ref.qids
    for qid in ref.qids:
        a, b = ours.read_question(qid), ref.read_question(qid)
        assert a.ground_truth == b.ground_truth
        assert np.array_equal(a.trace_idx, b.trace_idx)
        assert np.array_equal(a.lengths, b.lengths)
        assert a.final_answers == b.final_answers
        assert np.array_equal(a.probe_offsets, b.probe_offsets)
        assert np.array_equal(a.probe_positions, b.probe_positions)
        sa = [a.probe_strings[c] if c >= 0 else None for c in a.probe_codes]
        sb = [b.probe_strings[c] if c >= 0 else None for c in b.probe_codes]
        assert sa == sb
        assert not a.has_confs  # the fixture's constant 1.0 confidences stand for "none"


@needs_shared
@pytest.mark.reference
@pytest.mark.slow
def test_simulating_imported_pool_gives_fixture_results(imported_pp, tmp_path):
    for folder in ("sc", "sc-mars-cal", "sc-pp-u3"):
        s = C.fixture_settings("pp-aime24", folder)
        method = C.FOLDER_METHOD[folder]
        args = [
            "simulate",
            str(imported_pp),
            "-m",
            method,
            "--out",
            str(tmp_path / folder),
            "--budget",
            str(s.budget),
            "--iterations",
            str(s.iterations),
            "--pp-conv",
            str(s.pp_conv),
            "--ucb-z",
            str(s.ucb_z),
            "-q",
        ]
        assert runner.invoke(app, args).exit_code == 0
        args[1] = str(C.FIXTURES / "pp-aime24" / "pool.parquet")
        args[5] = str(tmp_path / (folder + "-ref"))
        assert runner.invoke(app, args).exit_code == 0
        a = (tmp_path / folder / method / "per_iteration.csv").read_text()
        b = (tmp_path / (folder + "-ref") / method / "per_iteration.csv").read_text()
        assert a == b
        n, bad = (
            len(C.reference("pp-aime24", folder)),
            C.compare_pool("pp-aime24", [folder])[folder],
        )
        assert len(bad) < 0.06 * n


def test_export_then_simulate_roundtrip(tmp_path):
    pool = write_layout_pool(tmp_path / "p", seed=2, n_questions=2)
    out = tmp_path / "pub.parquet"
    assert runner.invoke(app, ["export", str(pool), str(out)]).exit_code == 0
    t = pq.read_table(out)
    assert t.schema.names == [
        "qid",
        "trace_idx",
        "ground_truth",
        "extracted_answer",
        "confs",
        "probes",
    ]
    res = []
    for src, name in ((pool, "a"), (out, "b")):
        r = runner.invoke(
            app,
            [
                "simulate",
                str(src),
                "-m",
                "sc,sc-mars-cal,dco-mars-cal",
                "--out",
                str(tmp_path / name),
                "--budget",
                "16",
                "--iterations",
                "4",
                "-q",
            ],
        )
        assert r.exit_code == 0, r.output
        df = pd.read_csv(tmp_path / name / "dco-mars-cal" / "per_iteration.csv")
        res.append(df.drop(columns="probe_tokens"))  # the published schema has no probe cost
    pd.testing.assert_frame_equal(res[0], res[1])
    # re-import the exported file
    assert (
        runner.invoke(app, ["import", "mars-parquet", str(out), str(tmp_path / "re")]).exit_code
        == 0
    )
    assert open_pool(tmp_path / "re").read_question(1).n_traces == 40


def test_import_refuses_existing_output(tmp_path):
    pool = write_layout_pool(tmp_path / "p", n_questions=1)
    res = runner.invoke(app, ["import", "parallel-probe", str(tmp_path / "x.json"), str(pool)])
    assert res.exit_code == 2 and "already exists" in res.output


@pytest.mark.parametrize("existing", ["file", "dangling symlink"])
def test_export_refuses_existing_output_as_import_does(tmp_path, existing):
    """`mars export POOL FILE` used to replace FILE (e.g. the authors' release) silently."""
    pool = write_layout_pool(tmp_path / "p", n_questions=1)
    out = tmp_path / "release.parquet"
    if existing == "file":
        out.write_bytes(b"the authors' release")
    else:
        out.symlink_to(tmp_path / "nowhere")
    res = runner.invoke(app, ["export", str(pool), str(out)])
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert f"{out}: already exists (refusing to overwrite)" in res.output
    assert out.is_symlink() if existing != "file" else out.read_bytes() == b"the authors' release"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p", "release.parquet"]


# -- issue 13: imports validate first, pickles run no code ---------------------------------------

import json as _json  # noqa: E402
import pickle  # noqa: E402

import pytest  # noqa: E402


def _pp_file(tmp_path, **edit):
    branch = [["5", "ERR", "7", "7"], 2100, "7"]
    item = {"question": "?", "gold_answer": "7", "probe_freq": 500, "each_branch": [branch] * 3}
    item.update(edit)
    path = tmp_path / "pp.json"
    path.write_text(_json.dumps([item]))
    return path


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            {"each_branch": [[["5"], 10**12, "7"]]},
            "claims 1,000,000,000,000 tokens, but its 1 probes",
        ),
        ({"each_branch": [[["5"], -5, "7"]]}, "token count -5 is not a whole number"),
        ({"probe_freq": 0}, "probe_freq 0 is not a whole number of tokens from 1 to"),
        ({"probe_freq": 10**30}, "probe_freq 1000000000000000000000000000000 is not a whole"),
        ({"probe_freq": -500}, "probe_freq -500"),
        ({"each_branch": [["5", 100, "7"]]}, "branch is not [probe_list, tokens, final]"),
        ({"each_branch": [[[5], 100, "7"]]}, "answers must be strings"),
        # a probe every 10^15 tokens covered a claim of 10^16 (its 2,048-grid hung): the probe
        # spacing and the length are bounded by the longest trace a pool may hold
        (
            {"probe_freq": 10**15, "each_branch": [[["5"] * 10, 10**16, "7"]]},
            "probe_freq 1000000000000000 is not a whole number of tokens from 1 to 16,777,216",
        ),
        (
            {"probe_freq": 2**24, "each_branch": [[["5"] * 10, 40 * 2**24, "7"]]},
            "claims 671,088,640 tokens, more than a trace may hold (16,777,216)",
        ),
        ({"question": 5}, "question 0: its question text is 5, not a string"),
        ({"question": ["a", "b"]}, "its question text is a list, not a string"),
        ({"gold_answer": None}, "gold_answer is null, not a string or a whole number"),
        ({"gold_answer": [7]}, "gold_answer is a list, not a string"),
        ({"gold_answer": {"a": 7}}, "gold_answer is an object, not a string"),
        ({"gold_answer": True}, "gold_answer is true, not a string"),
        ({"gold_answer": 7.5}, "gold_answer is 7.5, not a string"),
    ],
)
def test_parallel_probe_import_validates_before_work(tmp_path, edit, message):
    """A claimed length of 10^12 tokens is refused at once (it was imported for 688 s and killed
    at 22.8 GB); negative counts and probe_freq <= 0 are refused, not imported."""
    import time

    t0 = time.perf_counter()
    res = runner.invoke(
        app, ["import", "parallel-probe", str(_pp_file(tmp_path, **edit)), str(tmp_path / "out")]
    )
    assert res.exit_code == 2 and message in res.output and res.output.count("\n") == 1
    assert not (tmp_path / "out").exists()
    assert time.perf_counter() - t0 < 10


def test_a_native_import_names_a_probe_freq_that_is_not_a_number(tmp_path):
    """probe_freq "500" beside 500: the question whose probe_freq is text is named, not "different
    probe_freq values ['500', '500']"."""
    item = _json.loads(_pp_file(tmp_path).read_text())[0]
    src = tmp_path / "mixed.json"
    src.write_text(_json.dumps([item, {**item, "probe_freq": "500"}]))
    args = ["import", "parallel-probe", str(src), str(tmp_path / "out"), "--spacing", "native"]
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert "question 1: probe_freq '500' is not a positive whole number of tokens" in res.output
    src.write_text(_json.dumps([item, {**item, "probe_freq": 400}]))
    res = runner.invoke(app, args)
    assert "different probe_freq values [400, 500]" in res.output


def test_parallel_probe_import_reads_no_probe_before_the_first(tmp_path):
    """A grid finer than the source's probes: a checkpoint before the first probe has no answer
    (it read the last probe, from the trace's end), later ones the last probe read by then; a
    whole-number gold answer is its digits."""
    from mars.store.pool import open_pool

    branch = [["5", "6", "7"], 12_500, "7"]
    src = _pp_file(tmp_path, probe_freq=4000, gold_answer=7, each_branch=[branch])
    res = runner.invoke(app, ["import", "parallel-probe", str(src), str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    q = open_pool(tmp_path / "out").read_question(0)
    got = [
        (int(p), q.probe_strings[c] if c >= 0 else None)
        for p, c in zip(q.probe_positions, q.probe_codes)
    ]
    assert got == [
        (2048, None),  # before the first probe (at 4,000): no answer
        (4096, "5"),
        (6144, "5"),
        (8192, "6"),
        (10240, "6"),
        (12288, "7"),
        (12500, "7"),  # the trace's end: its final answer
    ]
    assert q.ground_truth == "7"


def _authors_pickle(path, protocol):
    """A pickle shaped like the authors' aggregated_traces.pkl (numpy float16 confidences)."""
    data = {}
    rng = np.random.default_rng(0)
    for t in range(6):
        length = 3000 + 100 * t
        data[(0, t)] = {
            "qid": 0,
            "trace_idx": t,
            "ground_truth": "7",
            "extracted_answer": "7" if t % 3 else "5",
            "confs": (rng.random(length) * 5 + 10).astype(np.float16),
            "probes": {
                2048: {"answer": "5", "is_correct": False, "raw_text": "x", "avg_conf": 1.0},
                length: {"answer": "7", "is_correct": True, "raw_text": "y", "avg_conf": None},
            },
        }
    path.write_bytes(pickle.dumps(data, protocol=protocol))
    return path


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_authors_pickle_imports_with_the_restricted_unpickler(tmp_path, protocol):
    src = _authors_pickle(tmp_path / "a.pkl", protocol)
    res = runner.invoke(app, ["import", "mars-pickle", str(src), str(tmp_path / "pool")])
    assert res.exit_code == 0, res.output
    q = open_pool(tmp_path / "pool").read_question(0)
    assert (
        q.n_traces == 6 and q.has_confs and q.lengths.tolist() == [3000 + 100 * t for t in range(6)]
    )


class _Evil:
    def __reduce__(self):
        import os

        return (os.system, (f"touch {_Evil.marker}",))


def test_crafted_pickle_runs_no_code(tmp_path):
    """A pickle whose loading runs a shell command is refused before the command runs."""
    _Evil.marker = tmp_path / "pwned"
    src = tmp_path / "evil.pkl"
    src.write_bytes(pickle.dumps({(0, 0): _Evil()}))
    res = runner.invoke(app, ["import", "mars-pickle", str(src), str(tmp_path / "pool")])
    assert res.exit_code == 2 and "refusing to load posix.system" in res.output
    assert "--trust-pickle" in res.output
    assert not _Evil.marker.exists() and not (tmp_path / "pool").exists()
    assert "--trust-pickle" in runner.invoke(app, ["import", "--help"], terminal_width=200).output


def test_trust_pickle_loads_other_types(tmp_path):
    """--trust-pickle is Python's own unpickler: a benign type the restricted one refuses loads."""
    import datetime

    src = _authors_pickle(tmp_path / "a.pkl", 4)
    data = pickle.loads(src.read_bytes())
    data[(0, 0)]["when"] = datetime.date(2026, 11, 23)
    src.write_bytes(pickle.dumps(data))
    res = runner.invoke(app, ["import", "mars-pickle", str(src), str(tmp_path / "p1")])
    assert res.exit_code == 2 and "refusing to load datetime.date" in res.output
    res = runner.invoke(
        app, ["import", "mars-pickle", str(src), str(tmp_path / "p2"), "--trust-pickle"]
    )
    assert res.exit_code == 0, res.output
