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
from mars.pool import open_pool

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
