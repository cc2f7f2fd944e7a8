"""The record folder of ``mars serve`` (mars/serve/record.py) when its writes fail: each write
failing in turn leaves the pool as it was, question numbers unique and replay exact, and the
client still gets its answer (``record: null``, one log line, a metric). Every pool reader refuses
a pool whose question numbers repeat."""

from __future__ import annotations

import errno
import importlib
import json
import logging

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

pytest.importorskip("starlette")

from serving import serving

from mars.cli import app as cli
from mars.live import replay_run
from mars.serve.record import Recorder
from mars.serve.requests import Defaults
from mars.store import schema
from mars.store.pool import PoolError, open_pool

FAST = Defaults(method="sc-mars-cal", traces=8, warmup=4, spacing=2048, max_tokens=16384)
#: each write of a question, in the order they happen: where the fault is injected
WRITES = {
    "traces": "mars.store.write.write_trace_table",
    "record": "mars.serve.record.write_json_atomic",
    "questions": "mars.store.write.write_atomic",
    "manifest": "mars.store.write.write_json_atomic",
}


def _failing(real, times: int):
    """``real``, failing with a full disk its first ``times`` calls."""
    left = [times]

    def write(*args, **kwargs):
        if left[0] > 0:
            left[0] -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    return write


def _ask(running, k: int) -> dict:
    r = httpx.post(
        running.url + "/v1/completions",
        json={"prompt": f"What is {k} + {k}?", "n": 8, "seed": 3},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    return r.json()["mars"]


@pytest.mark.parametrize("times", [1, 2], ids=["once", "rollback-too"])
@pytest.mark.parametrize("write", list(WRITES))
def test_each_record_write_failing_in_turn_leaves_the_pool_as_it_was(
    write, times, tmp_path, monkeypatch, caplog
):
    """A question whose recording fails (``times`` 2: the rollback's own write fails too, the
    disk still full) is answered with ``record: null``; the next one takes the number that was
    free; the pool reads, its numbers are unique, and every question replays exactly."""
    record = tmp_path / "rec"
    with serving(["synthetic"], FAST, record=str(record)) as running:
        first = _ask(running, 1)
        assert first["record"].endswith("/0")
        module, _, name = WRITES[write].rpartition(".")
        real = getattr(importlib.import_module(module), name)
        monkeypatch.setattr(WRITES[write], _failing(real, times))
        with caplog.at_level(logging.ERROR, logger="mars.serve"):
            failed = _ask(running, 2)
        assert failed["record"] is None and failed["replay_ok"]
        lines = [r for r in caplog.records if "not recorded" in r.getMessage()]
        assert len(lines) == 1 and "No space left on device" in lines[0].getMessage()
        assert running.metric("record_failures") == 1
        pool = record / first["record"].split("/")[-2]
        assert open_pool(pool).qids == [0]  # the pool as it was
        monkeypatch.undo()
        third = _ask(running, 3)
        assert third["record"].endswith("/1")
    p = open_pool(pool)
    assert p.qids == [0, 1]
    texts = [p.read_question(q).question for q in p.qids]
    assert "1 + 1" in texts[0] and "3 + 3" in texts[1]
    assert [row["match"] for row in replay_run(pool)] == [True, True]


def test_a_pool_whose_question_numbers_repeat_is_refused_by_every_reader(tmp_path):
    record = tmp_path / "rec"
    with serving(["synthetic"], FAST, record=str(record)) as running:
        name = _ask(running, 1)["record"].split("/")[-2]
        _ask(running, 2)
    pool = record / name
    qfile = pool / schema.POOL_QUESTIONS
    table = pq.read_table(qfile)
    qid = table.schema.get_field_index("qid")
    pq.write_table(table.set_column(qid, "qid", pa.array([0, 0], pa.int64())), qfile)
    with pytest.raises(PoolError, match="question id 0 appears more than once"):
        open_pool(pool)
    for args in (
        ["replay", str(pool)],
        [
            "simulate",
            str(pool),
            "-m",
            "sc",
            "--budget",
            "4",
            "--warmup",
            "4",
            "--iterations",
            "2",
            "--out",
            str(tmp_path / "sim"),
            "-q",
        ],
    ):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 2 and "appears more than once" in res.output, res.output
    assert not (tmp_path / "sim").exists()
    # a proxy restarted on the folder refuses the pool too, before it writes anything
    manifest = json.loads((pool / schema.POOL_MANIFEST).read_text())
    traces = pq.read_table(pool / schema.trace_file_name(0))
    with pytest.raises(PoolError, match="appears more than once"):
        Recorder(record).add(manifest["live"], traces, {}, {})
