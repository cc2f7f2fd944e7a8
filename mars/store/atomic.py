"""Writing outputs safely: atomic files, and output locations checked before any work.

A file is written to a temporary name in its own folder and renamed over the target
(``os.replace``), so a reader never sees half a file and an interrupted writer leaves the old one.
:func:`output_dir` checks an output folder *before* the work that fills it (an existing file, a
path under a file or an unwritable place is a one-line :class:`~mars.errors.MarsError`) and
removes the folder again if the work fails and it is still empty; :func:`check_apart` refuses an
output that is, holds or lies inside one of the command's inputs.

A folder is made complete under a temporary name and swapped in by :func:`replace_dir`;
:func:`folder_lock` makes concurrent writers into one folder take turns. A full disk (or quota)
while writing is one line naming the output and the disk (:func:`disk_full_message`, which the
command line prints): the writers here record which output they were writing
(:func:`naming_output`) and remove their temporary files.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..errors import MarsError

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
        with naming_output(path):
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
        with naming_output(path):
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


#: A full disk, a full quota.
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


@contextlib.contextmanager
def naming_output(path: str | Path) -> Iterator[None]:
    """Record ``path`` as the output being written in a full-disk error raised inside (Python's
    and pyarrow's writes name no file, or a temporary one); the innermost output wins."""
    try:
        yield
    except OSError as exc:
        if exc.errno in DISK_FULL and getattr(exc, "_mars_output", None) is None:
            setattr(exc, "_mars_output", str(path))  # noqa: B010 - OSError has no such field
        raise


def disk_full_message(exc: BaseException) -> str | None:
    """The one line for a full disk or quota, naming the output and the disk (its mount point,
    size and the space free now); None for any other error."""
    if not isinstance(exc, OSError) or exc.errno not in DISK_FULL:
        return None
    path = getattr(exc, "_mars_output", None) or exc.filename
    if path is None:
        return f"no space left on device while writing an output ({exc.strerror or exc})"
    path = _final_name(Path(path))
    mount = _mount_point(Path(os.path.abspath(path)))
    try:
        usage = shutil.disk_usage(mount)
        space = f"{_size(usage.free)} free of {_size(usage.total)}"
    except OSError:
        space = "size unknown"
    full = "disk quota exceeded" if exc.errno == errno.EDQUOT else "no space left"
    return (
        f"{path}: {full} on the disk mounted at {mount} ({space}): free some space and "
        "run the command again"
    )


def _final_name(path: Path) -> Path:
    """``path`` with every temporary name of ours (``.NAME.tmp-…``, see :func:`write_atomic`)
    replaced by the NAME it is renamed to when complete."""
    return Path(*(TEMP_NAME.sub(r"\1", part) for part in path.parts))


#: The temporary name of an output NAME (a file or a folder) while it is written.
TEMP_NAME = re.compile(r"^\.(.+)\.tmp-[^/]*$")


def _mount_point(path: Path) -> Path:
    while not path.exists() and path.parent != path:
        path = path.parent
    while not os.path.ismount(path) and path.parent != path:
        path = path.parent
    return path


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError  # unreachable


def replace_dir(
    new: Path, target: Path, name: str | Path | None = None, what: str = "--out"
) -> None:
    """Rename the complete folder ``new`` to ``target``, moving an existing ``target`` aside
    first and deleting it after. Each rename is atomic; concurrent writers each leave a whole
    folder (the last one wins) and no moved-aside folder is left behind. ``name``: the folder as
    the user gave it, for messages."""
    name = name or target
    aside: list[Path] = []
    try:
        for _ in range(100):
            try:
                os.rename(new, target)  # onto a missing or empty folder
                return
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise MarsError(
                        f"{what} {name}: cannot put it in place ({exc.strerror or exc})"
                    ) from None
            old = make_temp_dir(target.parent, f".{target.name}.old-")
            aside.append(old)
            try:
                os.rename(target, old)
            except FileNotFoundError:
                pass  # another writer moved it first
            except OSError as exc:
                raise MarsError(
                    f"{what} {name}: cannot replace it ({exc.strerror or exc})"
                ) from None
        raise MarsError(f"{what} {name}: replaced by other writers 100 times in a row")
    finally:
        for old in aside:
            shutil.rmtree(old, ignore_errors=True)


LOCK_NAME = ".mars-lock"
#: flock's answers on file systems without locks (NFS mounted nolock, some FUSE).
NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS})


@contextlib.contextmanager
def folder_lock(folder: Path, busy: Callable[[], object] | None = None) -> Iterator[None]:
    """Hold ``folder``'s lock: writers into one folder take turns (``flock`` on a lock file,
    which also works across NFS clients; on a file system without locks they do not, and
    :func:`replace_dir` still leaves whole folders). The file is removed when released; a waiter
    that then holds a removed file's lock takes the new file's instead. ``busy`` is called once
    if another writer holds the lock (before waiting for it)."""
    path = Path(folder) / LOCK_NAME
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if busy is not None:
                    busy()
                    busy = None
                fcntl.flock(fd, fcntl.LOCK_EX)
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        except OSError as exc:
            if exc.errno not in NO_LOCKS:
                os.close(fd)
                raise
            same = True
        except BaseException:
            os.close(fd)
            raise
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)
