"""Pool reading and validation (mars.store.pool): every bad input gives one clear line, exit code 2,
no output."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from util import unblocking_fifo, write_layout_pool, write_published_pool

from mars.cli import app
from mars.store import schema
from mars.store.pool import PoolError, open_pool

runner = CliRunner()


def run_cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def assert_rejected(tmp_path, pool, *needles, method="sc"):
    out = tmp_path / "out"
    res = run_cli(
        "simulate",
        pool,
        "-m",
        method,
        "--out",
        out,
        "--budget",
        8,
        "--warmup",
        4,
        "--iterations",
        2,
        "-q",
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


def _manifest_damage(path, how):
    """Put ``how`` in the place of ``path`` (a pool's pool.json)."""
    manifest = json.loads(path.read_text())
    if how == "deep":
        path.write_text('{"format": "mars-pool", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    elif how == "digits":
        path.write_text(json.dumps(manifest)[:-1] + ', "spacing": ' + "1" * 5001 + "}")
    elif how == "directory":
        path.unlink()
        path.mkdir()
    elif how == "symlink-loop":
        path.unlink()
        path.symlink_to(path.name)
    else:
        manifest.pop("version")
        if how != "version-missing":
            manifest["version"] = int(how.split("-")[1])
        path.write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "how, needle",
    [
        ("deep", "nested more than 64 levels deep"),
        ("digits", "a number with too many digits"),
        ("directory", "a directory, not a regular file"),
        ("symlink-loop", "unreadable (Too many levels of symbolic links)"),
        ("version-3", "format version 3 is not supported"),
        ("version-missing", "format version None is not supported"),
    ],
)
def test_damaged_manifest_is_one_line(tmp_path, how, needle):
    """Whatever stands in pool.json's place is one line naming it, never a traceback."""
    pool = write_layout_pool(tmp_path / "p", n_questions=1)
    _manifest_damage(pool / schema.POOL_MANIFEST, how)
    assert_rejected(tmp_path, pool, "pool.json", needle)


@pytest.mark.parametrize(
    "name", [schema.POOL_MANIFEST, schema.POOL_QUESTIONS, schema.trace_file_name(1)]
)
def test_a_fifo_in_place_of_a_pool_file_is_refused_before_opening(tmp_path, name):
    pool = write_layout_pool(tmp_path / "p", n_questions=2)
    with unblocking_fifo(pool / name):
        assert_rejected(tmp_path, pool, name, "a FIFO, not a regular file")


def test_a_published_pool_that_is_a_fifo_is_refused_before_opening(tmp_path):
    with unblocking_fifo(tmp_path / "pub.parquet") as fifo:
        assert_rejected(tmp_path, fifo, "pub.parquet", "a FIFO, not a regular file")


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
        "simulate",
        pool,
        "-m",
        "sc,dco",
        "--out",
        out,
        "--budget",
        8,
        "--warmup",
        4,
        "--iterations",
        2,
        "-q",
    )
    assert res.exit_code == 2
    assert (out / "sc" / "per_iteration.csv").read_bytes() == before
    assert not (out / "dco").exists()


# -- issue 13: inputs that were silently wrong or crashed ------------------------------------------


def _rewrite_trace_file(pool, qid, edit):
    """Apply ``edit(table) -> table`` to one question's trace file of a layout pool."""
    path = pool / schema.trace_file_name(qid)
    pq.write_table(edit(pq.read_table(path)), path)
    return path


def test_trace_file_holding_another_questions_rows(tmp_path):
    """traces/q000001.parquet with question 2's rows is refused, not simulated as question 1."""
    pool = write_layout_pool(tmp_path / "p", n_questions=3)
    (pool / schema.trace_file_name(2)).replace(pool / schema.trace_file_name(1))
    assert_rejected(tmp_path, pool, "q000001.parquet", "holds rows of question 2")


def test_two_probes_at_one_position(tmp_path):
    pool = write_layout_pool(tmp_path / "p", n_questions=1)

    def dup(t):
        rows = t.to_pylist()
        first = rows[0]["probes"][0]
        rows[0]["probes"].append({**first, "answer": "999"})
        return pa.Table.from_pylist(rows, schema=t.schema)

    _rewrite_trace_file(pool, 0, dup)
    assert_rejected(tmp_path, pool, "trace 0", "two probes at position 2048")


def test_probe_after_the_trace_end(tmp_path):
    pool = write_layout_pool(tmp_path / "p", n_questions=1)

    def late(t):
        rows = t.to_pylist()
        rows[3]["probes"].append({**rows[3]["probes"][0], "position": 102_400})
        return pa.Table.from_pylist(rows, schema=t.schema)

    _rewrite_trace_file(pool, 0, late)
    assert_rejected(tmp_path, pool, "trace 3", "probe at position 102400 after the trace's end")


def test_negative_question_id(tmp_path):
    path = tmp_path / "pub.parquet"
    write_published_pool(
        path, n_questions=1, rows_hook=lambda rows: [{**r, "qid": -3} for r in rows]
    )
    assert_rejected(tmp_path, path, "question id -3 is negative")


def test_corrupted_zstd_page(tmp_path):
    """A damaged compressed page is one line naming the file, not an OSError traceback."""
    pool = write_layout_pool(tmp_path / "p", n_questions=1)
    path = pool / schema.trace_file_name(0)
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 64):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    assert_rejected(tmp_path, pool, "q000000.parquet")


FUZZ_TRIALS = 60


def _fuzz_case(rng, pool):
    """Damage a pool in one random way: flip bytes, truncate, or edit its schema or values."""
    target = pool / schema.trace_file_name(0)
    kind = rng.choice(["flip", "truncate", "manifest", "questions", "schema", "values"])
    if kind == "flip":
        f = rng.choice([target, pool / schema.POOL_QUESTIONS])
        data = bytearray(f.read_bytes())
        for i in rng.integers(0, len(data), size=int(rng.integers(1, 40))):
            data[int(i)] = int(rng.integers(0, 256))
        f.write_bytes(bytes(data))
    elif kind == "truncate":
        data = target.read_bytes()
        target.write_bytes(data[: int(rng.integers(0, len(data)))])
    elif kind == "manifest":
        (pool / schema.POOL_MANIFEST).write_text(
            rng.choice(["", "{", "[]", '{"format": "mars-pool", "spacing": -5}', "null"])
        )
    elif kind == "questions":
        t = pq.read_table(pool / schema.POOL_QUESTIONS)
        col = rng.choice(t.column_names)
        pq.write_table(t.drop_columns([col]), pool / schema.POOL_QUESTIONS)
    elif kind == "schema":
        t = pq.read_table(target)
        col = rng.choice(t.column_names)
        edit = rng.choice(["drop", "null", "string"])
        if edit == "drop":
            t = t.drop_columns([col])
        elif edit == "null":
            i = t.column_names.index(col)
            t = t.set_column(
                i,
                pa.field(col, t.schema.field(col).type),
                pa.nulls(t.num_rows, t.schema.field(col).type),
            )
        else:
            i = t.column_names.index(col)
            t = t.set_column(i, col, pa.array([str(x) for x in t.column(col).to_pylist()]))
        pq.write_table(t, target)
    else:
        t = pq.read_table(target)
        rows = t.to_pylist()
        j = int(rng.integers(0, len(rows)))
        field = rng.choice(["length", "trace_idx", "qid", "position"])
        value = int(rng.choice([-1, 0, 10**12, 2**62]))
        if field == "position" and rows[j]["probes"]:
            rows[j]["probes"][0]["position"] = value
        elif field != "position":
            rows[j][field] = value
        pq.write_table(pa.Table.from_pylist(rows, schema=t.schema), target)
    return kind


@pytest.mark.slow
def test_fuzz_damaged_pools_never_give_a_traceback(tmp_path):
    """Corrupt bytes and random schema/value edits: exit 0 with results, or exit 2 with one line."""
    rng = np.random.default_rng(13)
    clean = write_layout_pool(tmp_path / "clean", seed=4, n_questions=2, n=24)
    outcomes = {0: 0, 2: 0}
    for trial in range(FUZZ_TRIALS):
        pool = tmp_path / f"p{trial}"
        import shutil

        shutil.copytree(clean, pool)
        kind = _fuzz_case(rng, pool)
        out = tmp_path / f"o{trial}"
        res = run_cli(
            "simulate",
            pool,
            "-m",
            "sc,sc-mars-cal,dco-mars-cal",
            "--out",
            out,
            "--budget",
            8,
            "--warmup",
            4,
            "--iterations",
            2,
            "-q",
        )
        assert res.exit_code in (0, 2), (trial, kind, res.output, res.exception)
        if res.exit_code == 2:
            assert res.output.startswith("error: ") and res.output.count("\n") == 1, (
                kind,
                res.output,
            )
            assert not out.exists()
        else:
            assert (out / "sc" / "per_question.csv").is_file()
        outcomes[res.exit_code] += 1
    assert outcomes[2] > FUZZ_TRIALS // 2  # most damage is detected


def test_trace_counts_come_from_file_metadata(tmp_path):
    """What sizes are checked against before any work: rows per question, without reading
    traces; a question whose file is missing or not a regular file is left to its reader."""
    from mars.store.pool import open_pool

    layout = write_layout_pool(tmp_path / "l", n_questions=3, n=12)
    published = write_published_pool(tmp_path / "p.parquet", n_questions=3, n=12)
    for path in (layout, published):
        assert open_pool(path).trace_counts([0, 2]) == {0: 12, 2: 12}
    pool = open_pool(layout)
    (layout / schema.trace_file_name(1)).unlink()
    assert pool.trace_counts([0, 1]) == {0: 12}


def test_last_probe_finals_take_the_last_answer_a_probe_gave():
    """``with_finals("last-probe")``: a trace without a final answer takes the answer of its last
    probe that gave one (an abstaining last probe is passed over); a trace with its own keeps it;
    one whose probes never answered keeps none. The content hash covers the answers taken."""
    from mars.store.pool import QuestionData

    q = QuestionData(
        qid=0,
        ground_truth="5",
        trace_idx=np.arange(4, dtype=np.int64),
        lengths=np.array([5000, 5000, 3000, 3000], dtype=np.int64),
        final_answers=[None, "9", None, None],
        # trace 0: "5" then "6" then abstains; 1: "5" (its own "9" stands); 2: none; 3: "6"
        probe_offsets=np.array([0, 3, 4, 5, 6], dtype=np.int64),
        probe_positions=np.array([2048, 4096, 5000, 2048, 2048, 2048], dtype=np.int64),
        probe_codes=np.array([0, 1, -1, 0, -1, 1], dtype=np.int32),
        probe_strings=["5", "6"],
    )
    took = q.with_finals("last-probe")
    assert took.final_answers == ["6", "9", None, "6"]
    assert q.final_answers == [None, "9", None, None]  # the pool's question is left as it was
    assert took.content_hash() != q.content_hash() and took.meta["finals"] == "last-probe"
    assert q.with_finals("trace") is q
    with pytest.raises(ValueError, match="one of trace, last-probe"):
        q.with_finals("first-probe")
