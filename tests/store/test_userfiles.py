"""The reader of user-editable files: every way a file can be wrong is one line naming it."""

from __future__ import annotations

import json
import os
import re

import pytest
from util import unblocking_fifo, write_layout_pool

from mars.engines.factory import _env_options
from mars.engines.synthetic import load_preset
from mars.errors import MarsError
from mars.store import schema
from mars.store.consolidate import consolidate
from mars.store.pool import PoolError, open_pool
from mars.store.problems import load_problems
from mars.store.published import import_pool
from mars.store.userfiles import MAX_DEPTH, parse_json, read_json, read_json_object, regular_file
from mars.store.write import PoolDirWriter


def test_reads_json_and_objects(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"a": [1, {"b": None}], "c": "caf\u00e9"}))
    assert read_json(path) == {"a": [1, {"b": None}], "c": "caf\u00e9"}
    assert read_json_object(path)["c"] == "caf\u00e9"
    assert regular_file(path) == path


@pytest.mark.parametrize(
    "text, needle",
    [
        ("{", "invalid JSON (Expecting property name"),
        ("[" * 100_000 + "]" * 100_000, f"nested more than {MAX_DEPTH} levels deep"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "levels deep"),
        ('{"a": ' + "9" * 5001 + "}", "a number with too many digits"),
        (b'{"a": "caf\xe9"}', "not UTF-8 text (invalid continuation byte at byte 10)"),
    ],
)
def test_bad_json_is_one_line_naming_the_file(tmp_path, text, needle):
    path = tmp_path / "m.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(MarsError) as err:
        read_json(path)
    assert str(err.value).startswith(f"{path}: ") and needle in str(err.value)
    assert "\n" not in str(err.value)


def test_nesting_up_to_the_limit_is_read():
    deep = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert parse_json(deep, "<s>") == json.loads(deep)


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda p: p.mkdir(), "a directory, not a regular file"),
        (lambda p: os.mkfifo(p), "a FIFO, not a regular file"),
        (lambda p: p.symlink_to(p.name), "unreadable (Too many levels of symbolic links)"),
        (lambda p: p.symlink_to("absent"), "no such file"),
        (lambda p: None, "no such file"),
    ],
)
def test_what_is_not_a_regular_file_is_refused_without_opening(tmp_path, make, needle):
    path = tmp_path / "m.json"
    make(path)
    with pytest.raises(MarsError, match=re.escape(needle)):
        read_json(path)


def test_the_callers_error_type_and_missing_message(tmp_path):
    path = tmp_path / "m.json"
    with pytest.raises(PoolError, match=r"^no manifest here$"):
        read_json(path, PoolError, "no manifest here")
    path.write_text("[1]")
    with pytest.raises(PoolError, match="not a JSON object"):
        read_json_object(path, PoolError)


# -- every reader of a user-editable JSON file goes through the hardened one -------------------

DAMAGE = {
    "deep": lambda p: p.write_text("[" * 100_000 + "]" * 100_000),
    "digits": lambda p: p.write_text('{"n_traces": ' + "7" * 5001 + "}"),
    "directory": lambda p: p.mkdir(),
    "symlink-loop": lambda p: p.symlink_to(p.name),
}


def _readers(tmp_path):
    """(file, call that reads it) for each reader of a user-editable JSON file."""
    pool = write_layout_pool(tmp_path / "pool", n_questions=1)
    (pool / schema.POOL_MANIFEST).unlink()
    shard = tmp_path / "shard"
    shard.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    return {
        "pool manifest": (pool / schema.POOL_MANIFEST, lambda: open_pool(pool)),
        "shard manifest": (
            shard / schema.POOL_MANIFEST,
            lambda: consolidate([shard], tmp_path / "merged"),
        ),
        "generation record": (
            run / ".generate.json",
            lambda: PoolDirWriter(run, {"seed": 1}).start([0]),
        ),
        "synthetic preset": (
            tmp_path / "preset.json",
            lambda: load_preset(tmp_path / "preset.json"),
        ),
        "Parallel-Probe import": (
            tmp_path / "pp.json",
            lambda: import_pool("parallel-probe", tmp_path / "pp.json", tmp_path / "imported"),
        ),
        "problems file": (tmp_path / "p.jsonl", lambda: load_problems(tmp_path / "p.jsonl")),
    }


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize(
    "reader",
    [
        "pool manifest",
        "shard manifest",
        "generation record",
        "synthetic preset",
        "Parallel-Probe import",
        "problems file",
    ],
)
def test_every_reader_refuses_a_damaged_file_in_one_line(tmp_path, reader, damage):
    path, read = _readers(tmp_path)[reader]
    DAMAGE[damage](path)
    with pytest.raises(MarsError) as err:
        read()
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


def test_backend_options_from_the_environment_are_parsed_safely(monkeypatch):
    monkeypatch.setenv("MARS_BACKEND_OPTIONS", "[" * 100_000 + "]" * 100_000)
    with pytest.raises(MarsError, match=r"^MARS_BACKEND_OPTIONS: invalid JSON"):
        _env_options()


@pytest.mark.parametrize("fmt", ["mars-pickle", "parallel-probe"])
def test_an_import_source_that_is_a_fifo_is_refused_before_opening(tmp_path, fmt):
    with unblocking_fifo(tmp_path / "source") as fifo:
        with pytest.raises(MarsError, match="a FIFO, not a regular file"):
            import_pool(fmt, fifo, tmp_path / "imported")


def test_a_problems_file_that_is_a_fifo_is_refused_before_opening(tmp_path):
    with unblocking_fifo(tmp_path / "p.jsonl") as fifo:
        with pytest.raises(MarsError, match="a FIFO, not a regular file"):
            load_problems(fifo)
