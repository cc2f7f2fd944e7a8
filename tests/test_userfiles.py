"""The reader of user-editable files: every way a file can be wrong is one line naming it."""

from __future__ import annotations

import json
import os
import re

import pytest

from mars.errors import MarsError
from mars.pool import PoolError
from mars.userfiles import MAX_DEPTH, parse_json, read_json, read_json_object, regular_file


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
