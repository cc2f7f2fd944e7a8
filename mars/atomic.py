"""Writing outputs safely: atomic files, and output locations checked before any work.

A file is written to a temporary name in its own folder and renamed over the target
(``os.replace``), so a reader never sees half a file and an interrupted writer leaves the old one.
:func:`output_dir` checks an output folder *before* the work that fills it (an existing file, a
path under a file or an unwritable place is a one-line :class:`~mars.errors.MarsError`) and
removes the folder again if the work fails and it is still empty; :func:`check_apart` refuses an
output that is, holds or lies inside one of the command's inputs.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from .errors import MarsError

#: Permissions of the folders we create (group/other may read, as any ordinary output).
DIR_MODE = 0o755


def umask_mode(mode: int = 0o777) -> int:
    """``mode`` under the process umask: what ``mkdir`` would give (``mkdtemp`` gives 0700)."""
    current = os.umask(0)
    os.umask(current)
    return mode & ~current


def make_temp_dir(parent: Path, prefix: str) -> Path:
    """A hidden temporary folder in ``parent`` with ordinary permissions, to be renamed into
    place when complete (a plain ``tempfile.mkdtemp`` folder would keep mode 0700)."""
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    tmp.chmod(umask_mode())
    return tmp


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` on a temporary sibling of ``path``, then rename it to ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_atomic(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_json_atomic(path: str | Path, obj: object) -> Path:
    return write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def make_dirs(path: Path) -> None:
    """``mkdir -p`` with mode 0755 (independent of a restrictive umask for the leaf)."""
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)


def check_output_dir(path: str | Path, what: str = "--out") -> None:
    """Refuse an output folder that cannot be created or written, before any work.

    An existing file, a path under a file, or a folder we may not write to is an error naming
    the path. Nothing is created.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise MarsError(f"{what} {path}: exists and is not a directory")
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise MarsError(f"{what} {path}: {probe} is a file, not a directory")
    _probe_writable(probe, f"{what} {path}")


def _probe_writable(folder: Path, what: str) -> None:
    """Create and remove a file in ``folder``: file modes do not bind root, read-only or
    pseudo file systems (``/sys``, ``/proc``) refuse anyway."""
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".mars-write-test-"):
            pass
    except OSError as exc:
        raise MarsError(f"{what}: cannot write in {folder} ({exc.strerror or exc})") from None


@contextlib.contextmanager
def output_dir(path: str | Path, what: str = "--out") -> Iterator[Path]:
    """Create the output folder ``path`` before the work (checked, one-line errors) and remove it
    again if the work raises and the folder is still empty (nothing partial left behind)."""
    path = Path(path)
    check_output_dir(path, what)
    created = not path.exists()
    try:
        make_dirs(path)
    except OSError as exc:
        raise MarsError(f"{what} {path}: cannot create it ({exc.strerror or exc})") from None
    try:
        yield path
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                path.rmdir()  # only if empty
        raise


#: (name, path) pairs of what a command reads.
Inputs = Iterable[tuple[str, str | Path | None]]


def check_apart(
    out: str | Path, inputs: Inputs, what: str = "--out", *, inside_ok: bool = False
) -> None:
    """Refuse an output that is one of the command's inputs, lies inside one or holds one, before
    any work (writing, resuming or replacing it would destroy what is read).

    ``inputs`` are (name, path) pairs; None and paths that do not exist are skipped. Paths are
    compared by the file system (symlinks, relative paths, ``..``, bind mounts, case-insensitive
    names). ``inside_ok``: an output inside an input is allowed (a report under its results root).
    """
    out = Path(out)
    for name, given in inputs:
        if given is None or not os.path.exists(given):
            continue
        if _within(out, Path(given)):
            if _within(Path(given), out):
                how = "is"
            elif inside_ok:
                continue
            else:
                how = "lies inside"
        elif _within(Path(given), out):
            how = "holds"
        else:
            continue
        raise MarsError(f"{what} {out}: {how} {name} {given}; write outputs apart from inputs")


def _within(path: Path, folder: Path) -> bool:
    """Whether ``path`` (existing or not) is ``folder`` or lies below it, on the file system."""
    try:
        target = folder.stat()
        resolved = path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
        return False
    for p in (resolved, *resolved.parents):
        try:
            st = p.stat()
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            return True
    return False


def check_output_file(path: str | Path, what: str = "output") -> None:
    """Refuse an output file whose folder cannot be created or written, or that is a folder."""
    path = Path(path)
    if path.is_dir():
        raise MarsError(f"{what} {path}: is a directory")
    if path.parent.is_dir():
        _probe_writable(path.parent, f"{what} {path}")
    else:
        check_output_dir(path.parent, what)
