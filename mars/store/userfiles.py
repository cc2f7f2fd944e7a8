"""Reading the files a user can edit or replace: regular files only, JSON whose every failure is
one line.

Pool, shard, probe and fit manifests, simulation results, live records, presets and imported JSON
are read here (writing is :mod:`mars.store.atomic`). Whatever stands in such a file's place — a
directory, a FIFO (opening it would block forever), a socket, a symlink loop, text that is not
UTF-8, broken JSON, JSON nested deeper than :data:`MAX_DEPTH`, an integer past Python's digit
limit — becomes one :class:`~mars.errors.MarsError` (or the caller's subclass) naming the file,
never a traceback or a hang.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from ..errors import MarsError

__all__ = [
    "MAX_DEPTH",
    "parse_json",
    "read_json",
    "read_json_object",
    "read_manifest",
    "regular_file",
]

#: Deepest nesting of arrays/objects accepted; ours nest 4 deep, and anything near Python's
#: recursion limit would fail later in whatever compares or writes the value.
MAX_DEPTH = 64

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def regular_file(
    path: str | Path, error: type[MarsError] = MarsError, missing: str | None = None
) -> Path:
    """``path`` if it is (or links to) a regular file, else ``error`` saying what it is.

    Checked before opening, since opening a FIFO waits for a writer. ``missing`` replaces the
    message for a path that does not exist.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise error(missing or f"{path}: no such file") from None
    except OSError as exc:  # a symlink loop, a path through a file, no permission
        raise error(f"{path}: unreadable ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "a special file")
        raise error(f"{path}: {kind}, not a regular file")
    return Path(path)


def parse_json(text: str | bytes, where: str, error: type[MarsError] = MarsError) -> Any:
    """JSON of ``text`` (read from ``where``), or one ``error`` line naming ``where``."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    too_deep = error(f"{where}: invalid JSON (nested more than {MAX_DEPTH} levels deep)")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{where}: invalid JSON ({exc})") from None
    except RecursionError:
        raise too_deep from None
    except ValueError:  # an integer past sys.get_int_max_str_digits()
        raise error(f"{where}: invalid JSON (a number with too many digits)") from None
    if _depth_exceeds(value, MAX_DEPTH):
        raise too_deep
    return value


def read_json(
    path: str | Path, error: type[MarsError] = MarsError, missing: str | None = None
) -> Any:
    """The JSON value of the regular file ``path`` (:func:`regular_file`, :func:`parse_json`)."""
    path = regular_file(path, error, missing)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise error(f"{path}: unreadable ({exc.strerror or exc})") from None
    return parse_json(raw, str(path), error)


def read_json_object(
    path: str | Path, error: type[MarsError] = MarsError, missing: str | None = None
) -> dict:
    """:func:`read_json` of a file that must hold a JSON object."""
    value = read_json(path, error, missing)
    if not isinstance(value, dict):
        raise error(f"{path}: not a JSON object")
    return value


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists/dicts deeper than ``limit`` (iteratively: no recursion)."""
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def read_manifest(
    path: Path,
    fmt: str,
    error: type[MarsError],
    missing: str,
    version: int | tuple[int, ...] | None = None,
    remedy: str = "",
) -> dict:
    """A directory's JSON manifest of format ``fmt`` (and ``version``, or one of them, when
    given); ``missing`` is the error without one, ``remedy`` what to do about another version."""
    manifest = read_json(path, error, missing)
    if not isinstance(manifest, dict) or manifest.get("format") != fmt:
        raise error(f"{path}: not a {fmt} manifest")
    versions = (version,) if isinstance(version, int) else version
    if versions is not None and manifest.get("version") not in versions:
        readable = " and ".join(str(v) for v in versions)
        raise error(
            f"{path}: {fmt} format version {manifest.get('version')!r} is not supported "
            f"(this mars reads version {readable}){'; ' + remedy if remedy else ''}"
        )
    return manifest
