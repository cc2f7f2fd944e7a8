"""Writing outputs safely: a folder's lock, and what a full disk is reported as."""

from __future__ import annotations

import errno
import fcntl
import multiprocessing as mp
import os
import time

from util import small_disk

from mars.store.atomic import LOCK_NAME, disk_full_message, folder_lock, write_text_atomic


def _hold(folder, log, start):
    start.wait()
    with folder_lock(folder):
        with open(log, "a") as f:
            f.write(f"in {time.monotonic()}\n")
        time.sleep(0.2)
        with open(log, "a") as f:
            f.write(f"out {time.monotonic()}\n")


def test_folder_lock_makes_writers_take_turns(tmp_path):
    ctx = mp.get_context("fork")
    start = ctx.Barrier(3)
    log = tmp_path / "log"
    procs = [ctx.Process(target=_hold, args=(tmp_path, log, start)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    events = [line.split()[0] for line in log.read_text().splitlines()]
    assert events == ["in", "out"] * 3  # never two inside at once
    assert sorted(os.listdir(tmp_path)) == ["log"]  # the lock file is gone


def test_folder_lock_on_a_file_system_without_locks(tmp_path, monkeypatch):
    """flock refused (NFS mounted nolock, some FUSE): the writer goes ahead, unlocked."""

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with folder_lock(tmp_path):
        assert (tmp_path / LOCK_NAME).exists()
    assert os.listdir(tmp_path) == []


def test_full_disk_names_the_output_not_its_temporary_name(tmp_path):
    with small_disk(tmp_path / "disk", "4k") as disk:
        target = disk / "out.txt"
        try:
            write_text_atomic(target, "x" * 10_000)
        except OSError as exc:
            msg = disk_full_message(exc)
        else:
            raise AssertionError("the disk did not fill up")
        assert msg == (
            f"{target}: no space left on the disk mounted at {disk} (4.0 KiB free of 4.0 KiB): "
            "free some space and run the command again"
        )
        assert os.listdir(disk) == []
    assert disk_full_message(OSError(errno.EACCES, "Permission denied")) is None
