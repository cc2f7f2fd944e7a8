"""Pool reading and validation: every bad input gives one clear line, exit code 2, no output."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from util import write_layout_pool, write_published_pool

from mars import schema
from mars.cli import app
from mars.pool import PoolError, open_pool

runner = CliRunner()


def run_cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def assert_rejected(tmp_path, pool, *needles, method="sc"):
    out = tmp_path / "out"
    res = run_cli(
        "simulate", pool, "-m", method, "--out", out, "--budget", 8, "--iterations", 2, "-q"
    )
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, res.output
    for needle in needles:
        assert needle in res.output, res.output
    assert not out.exists()


def test_layout_roundtrip_and_per_question_reads(tmp_path):
    path = write_layout_pool(tmp_path / "p", seed=1, n_questions=3)
    pool = open_pool(path)
    assert pool.qids == [0, 1, 2]
    q = pool.read_question(1)
    assert q.n_traces == 40 and q.has_confs
    assert (np.diff(q.conf_offsets) == q.lengths).all()
    assert (q.probe_positions % 2048 == 0).all()


def test_published_reader_matches_layout(tmp_path):
    pub = write_published_pool(tmp_path / "p.parquet", seed=4, n_questions=2)
    q = open_pool(pub).read_question(1)
    assert q.n_traces == 40 and list(q.trace_idx) == list(range(40))


def _hook(fn):
    def hook(rows):
        fn(rows)
        return rows

    return hook


def test_duplicate_trace(tmp_path):
    pool = write_published_pool(
        tmp_path / "p.parquet", n_questions=1, rows_hook=lambda rows: [*rows, dict(rows[3])]
    )
    assert_rejected(tmp_path, pool, "p.parquet", "question 0", "trace 3", "duplicate")


def test_non_contiguous_trace_ids(tmp_path):
    pool = write_published_pool(
        tmp_path / "p.parquet",
        n_questions=1,
        rows_hook=_hook(lambda rows: rows[5].update(trace_idx=77)),
    )
    assert_rejected(tmp_path, pool, "question 0", "not contiguous")


def test_running_trace_without_probe(tmp_path):
    def drop(rows):
        r = next(r for r in rows if len(r["probes"]) >= 2)
        r["probes"] = r["probes"][:1]

    pool = write_published_pool(tmp_path / "p.parquet", n_questions=1, rows_hook=_hook(drop))
    assert_rejected(tmp_path, pool, "question 0", "trace", "no probe at checkpoint")


def test_nan_confidence(tmp_path):
    def poison(rows):
        c = np.asarray(rows[2]["confs"], dtype=np.float16).copy()
        c[10] = np.nan
        rows[2]["confs"] = c

    pool = write_published_pool(tmp_path / "p.parquet", n_questions=1, rows_hook=_hook(poison))
    assert_rejected(tmp_path, pool, "question 0", "trace 2", "non-finite confidence")


def test_wrong_column_type(tmp_path):
    path = write_published_pool(tmp_path / "p.parquet", n_questions=1)
    t = pq.read_table(path)
    t = t.set_column(
        t.schema.get_field_index("trace_idx"),
        "trace_idx",
        pa.array([str(i) for i in range(t.num_rows)]),
    )
    pq.write_table(t, path)
    assert_rejected(tmp_path, path, "p.parquet", "trace_idx", "type")


def test_missing_column(tmp_path):
    path = write_published_pool(tmp_path / "p.parquet", n_questions=1)
    pq.write_table(pq.read_table(path).drop(["probes"]), path)
    assert_rejected(tmp_path, path, "missing column 'probes'")


def test_empty_pool(tmp_path):
    path = tmp_path / "empty.parquet"
    pq.write_table(pa.Table.from_pylist([], schema=schema.PUBLISHED_SCHEMA), path)
    assert_rejected(tmp_path, path, "empty.parquet", "empty pool")


def test_not_a_pool(tmp_path):
    (tmp_path / "junk.parquet").write_text("not parquet")
    assert_rejected(tmp_path, tmp_path / "junk.parquet", "junk.parquet", "not a readable parquet")
    assert_rejected(tmp_path, tmp_path / "nope", "no such file")


def test_budget_not_sensible(tmp_path):
    pool = write_published_pool(tmp_path / "p.parquet", n_questions=1)
    out = tmp_path / "out"
    res = run_cli("simulate", pool, "--out", out, "--budget", 10**8, "-q")
    assert res.exit_code == 2 and "--budget" in res.output and not out.exists()


def test_unknown_method_and_question(tmp_path):
    pool = write_published_pool(tmp_path / "p.parquet", n_questions=1)
    assert_rejected(tmp_path, pool, "unknown method", method="nope")
    res = run_cli("simulate", pool, "--out", tmp_path / "out", "--questions", "5", "-q")
    assert res.exit_code == 2 and "no question 5" in res.output


def test_dco_without_confidences_is_refused_cleanly(tmp_path):
    pool = write_layout_pool(tmp_path / "p", n_questions=1, confs=False)
    assert_rejected(tmp_path, pool, "dco", "confidences", method="sc,dco")


def test_layout_confs_length_mismatch(tmp_path):
    path = write_layout_pool(tmp_path / "p", n_questions=1)
    f = path / schema.trace_file_name(0)
    t = pq.read_table(f)
    lengths = t.column("length").to_numpy().copy()
    lengths[4] += 1
    pq.write_table(t.set_column(t.schema.get_field_index("length"), "length", pa.array(lengths)), f)
    with pytest.raises(PoolError, match="trace 4"):
        open_pool(path).read_question(0)


def test_bad_manifest(tmp_path):
    path = write_layout_pool(tmp_path / "p", n_questions=1)
    (path / schema.POOL_MANIFEST).write_text("{")
    assert_rejected(tmp_path, path, "pool.json", "invalid JSON")
    (path / schema.POOL_MANIFEST).write_text(json.dumps({"format": "other"}))
    assert_rejected(tmp_path, path, "not a mars-pool")


def test_existing_results_survive_a_failed_run(tmp_path):
    pool = write_layout_pool(tmp_path / "p", n_questions=1, confs=False)
    out = tmp_path / "out"
    assert (
        run_cli(
            "simulate", pool, "-m", "sc", "--out", out, "--budget", 8, "--iterations", 2, "-q"
        ).exit_code
        == 0
    )
    before = (out / "sc" / "per_iteration.csv").read_bytes()
    res = run_cli(
        "simulate", pool, "-m", "sc,dco", "--out", out, "--budget", 8, "--iterations", 2, "-q"
    )
    assert res.exit_code == 2
    assert (out / "sc" / "per_iteration.csv").read_bytes() == before
    assert not (out / "dco").exists()
