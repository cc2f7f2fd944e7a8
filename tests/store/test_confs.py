"""Confidences in trace files: bytes in format 2, lists in format 1, the same numbers from both."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from util import as_format_1, write_layout_pool

from mars import cli
from mars.errors import MarsError
from mars.store import confs, schema
from mars.store.pool import PoolError, open_pool

LISTS = pa.array([[1.5, 2.0], None, [], [0.25, 3, 4], [65504, -0.0]], pa.list_(pa.float16()))


def _decoded(col) -> tuple[list, list]:
    offsets, values = confs.decode(col, "here")
    assert values.dtype == np.float16
    return offsets.tolist(), values.tolist()


def test_bytes_and_lists_decode_alike_in_every_arrow_shape():
    stored = confs.encode(LISTS)
    assert stored.type == confs.STORED_TYPE and stored.null_count == 1
    assert stored[0].as_py() == np.array([1.5, 2.0], "<f2").tobytes()
    expect = ([0, 2, 2, 2, 5, 7], [1.5, 2.0, 0.25, 3.0, 4.0, 65504.0, -0.0])
    shapes = [
        LISTS,
        stored,
        stored.cast(pa.binary()),
        pa.chunked_array([stored.slice(0, 3), stored.slice(3)]),
    ]
    for col in shapes:
        assert _decoded(col) == expect
    assert _decoded(stored.slice(3)) == ([0, 3, 5], expect[1][2:])
    assert confs.as_lists(stored).equals(LISTS)
    assert confs.encode(stored) is stored  # already stored: nothing rewritten
    assert _decoded(pa.nulls(3)) == ([0, 0, 0, 0], [])


def test_a_null_rows_bytes_are_not_its_own():
    """A writer may leave bytes under a null row; they belong to no trace."""
    data = np.array([1, 2, 3], "<f2").tobytes()
    col = pa.LargeBinaryArray.from_buffers(
        confs.STORED_TYPE,
        3,
        [
            pa.py_buffer(np.packbits([1, 0, 1], bitorder="little")),
            pa.py_buffer(np.array([0, 2, 4, 6])),
            pa.py_buffer(data),
        ],
    )
    assert _decoded(col) == ([0, 1, 1, 2], [1.0, 3.0])


def test_damaged_confidences_are_one_line_naming_the_trace():
    odd = pa.array([b"\x00<", b"\x00<\x00"], confs.STORED_TYPE)
    with pytest.raises(MarsError, match=r"^f: trace 11: confs of 3 bytes"):
        confs.decode(odd, "f", first_row=10)
    with pytest.raises(MarsError, match="null inside confs"):
        confs.decode(pa.array([[1.0, None]], pa.list_(pa.float16())), "f")
    with pytest.raises(MarsError, match="expected lists of float16 or bytes"):
        confs.decode(pa.array(["x"]), "f")


def test_a_format_1_pool_reads_as_its_format_2_copy(tmp_path):
    new = write_layout_pool(tmp_path / "new", seed=3, n_questions=3)
    old = as_format_1(new, tmp_path / "old")
    f = schema.trace_file_name(0)
    assert pq.read_schema(old / f).field("confs").type == pa.list_(pa.float16())
    assert pq.read_schema(new / f).field("confs").type == confs.STORED_TYPE
    a, b = open_pool(old), open_pool(new)
    for qid in a.qids:
        qa, qb = a.read_question(qid), b.read_question(qid)
        assert np.array_equal(qa.conf_offsets, qb.conf_offsets)
        assert np.array_equal(qa.conf_values.view(np.uint16), qb.conf_values.view(np.uint16))
        assert qa.content_hash() == qb.content_hash()
        assert a.has_confs(qid) and b.has_confs(qid)
    runs = []
    for pool in (old, new):
        out = tmp_path / f"sim-{pool.name}"
        args = ["simulate", str(pool), "-m", "sc,dco,sc-mars-cal", "--budget", "16"]
        res = CliRunner().invoke(cli.app, [*args, "--iterations", "4", "--out", str(out), "-q"])
        assert res.exit_code == 0, res.output
        runs.append(
            {m.name: (m / "per_iteration.csv").read_bytes() for m in out.iterdir() if m.is_dir()}
        )
    assert runs[0] == runs[1] and len(runs[0]) == 3


def test_a_damaged_trace_is_one_line_and_nothing_is_written(tmp_path):
    pool = write_layout_pool(tmp_path / "pool", seed=1, n_questions=2)
    f = pool / schema.trace_file_name(1)
    t = pq.read_table(f)
    col = t["confs"].to_pylist()
    col[2] = col[2][:-1]  # a byte short
    t = t.set_column(t.column_names.index("confs"), "confs", pa.array(col, confs.STORED_TYPE))
    pq.write_table(t, f)
    with pytest.raises(PoolError, match=rf"^{f}: trace 2: confs of \d+ bytes"):
        open_pool(pool).read_question(1)
    out = tmp_path / "out"
    args = ["simulate", str(pool), "-m", "sc", "--budget", "8", "--iterations", "2"]
    res = CliRunner().invoke(cli.app, [*args, "--out", str(out), "-q"])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "trace 2: confs of" in res.output
    assert not out.exists()


def test_confidences_of_another_type_are_one_line(tmp_path):
    pool = write_layout_pool(tmp_path / "pool", seed=1, n_questions=1)
    f = pool / schema.trace_file_name(0)
    t = pq.read_table(f)
    text = pa.array(["x"] * t.num_rows)
    pq.write_table(t.set_column(t.column_names.index("confs"), "confs", text), f)
    out = tmp_path / "out"
    args = ["simulate", str(pool), "-m", "sc", "--budget", "8", "--iterations", "2"]
    res = CliRunner().invoke(cli.app, [*args, "--out", str(out), "-q"])
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert f"{f}: column 'confs' has type string, expected float16 bytes or lists" in res.output
    assert not out.exists()
