"""Worker pools: an error raised in a worker reaches the user as the same one line."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner
from util import write_layout_pool

from mars import cli
from mars.errors import MarsError


def test_worker_error_is_the_same_one_line_with_workers(tmp_path):
    """DeepConf on a pool without confidences is refused in a worker: as one line, the one
    `--workers 1` prints (no pool traceback before it), and nothing is written."""
    pool = write_layout_pool(tmp_path / "pool", seed=1, n_questions=8, confs=False)
    args = ["simulate", str(pool), "-m", "sc,dco", "--budget", "16", "--iterations", "4"]
    args += ["--out", str(tmp_path / "out"), "-q"]
    one = CliRunner().invoke(cli.app, [*args, "--workers", "1"])
    assert one.exit_code == 2 and "needs per-token confidences" in one.output
    two = subprocess.run(
        [sys.executable, "-m", "mars.cli", *args, "--workers", "2"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert two.returncode == 2
    assert two.stderr == one.output and two.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


def _fail_first(i: int) -> int:
    if i == 0:
        raise MarsError("question 0: bad")
    time.sleep(0.05)
    return i


def test_map_raises_the_workers_error_and_leaves_no_pool_traceback(tmp_path):
    """In order, like Executor.map; the first failure propagates as itself, and the pool's own
    thread does not die on the futures left behind (Python 3.11)."""
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_workers import _fail_first\n"
        "from mars.workers import process_pool\n"
        "with process_pool(2) as ex:\n"
        "    assert list(ex.map(_fail_first, [5, 3, 1, 4], timeout=60)) == [5, 3, 1, 4]\n"
        "try:\n"
        "    with process_pool(2) as ex:\n"
        "        list(ex.map(_fail_first, range(40)))\n"
        "except ValueError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "MarsError question 0: bad\n"
    assert r.stderr == ""


def test_an_error_leaves_the_pool_thread_finished_before_exit(tmp_path):
    """The pool's thread closes its wake-up pipe when the pool breaks; Python 3.11's exit hook
    checks that pipe is open, then writes to it. A pool thread still running at exit can close it
    in between (once in CI: "OSError: Bad file descriptor" printed at exit). The window is widened
    here to 0.3 s: the pool must be finished with before the error leaves ``process_pool``."""
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import time, threading\n"
        "from concurrent.futures import process\n"
        "def wakeup(self):\n"
        "    if not self._closed:\n"
        "        time.sleep(0.3 if process._global_shutdown else 0)  # the exit hook's call\n"
        "        self._writer.send_bytes(b'')\n"
        "process._ThreadWakeup.wakeup = wakeup\n"
        "from test_workers import _fail_first\n"
        "from mars.workers import process_pool\n"
        "try:\n"
        "    with process_pool(2) as ex:\n"
        "        list(ex.map(_fail_first, range(40)))\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
        "print(sum(isinstance(t, process._ExecutorManagerThread) for t in threading.enumerate()))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "MarsError question 0: bad\n0\n"
    assert r.stderr == ""


def _sleep_then(job: tuple[str, float]) -> float:
    kind, delay = job
    time.sleep(delay)
    if kind == "fail":
        raise MarsError(f"job of {delay} s failed")
    return delay


def test_largest_first_returns_in_job_order_and_raises_the_first_jobs_error():
    """The largest jobs start first, but the results come in job order, and a failure is the
    one running the jobs in order would raise: job 0's, although job 2 (larger) failed first."""
    from mars.workers import map_largest_first, process_pool

    done = []
    with process_pool(2) as ex:
        jobs = [("ok", 0.01), ("ok", 0.2), ("ok", 0.05)]
        assert map_largest_first(ex, _sleep_then, jobs, [1, 3, 2], lambda: done.append(1)) == [
            0.01,
            0.2,
            0.05,
        ]
    assert len(done) == 3
    try:
        with process_pool(2) as ex:
            map_largest_first(
                ex, _sleep_then, [("fail", 0.3), ("ok", 0.0), ("fail", 0.0)], [1, 1, 5]
            )
    except MarsError as exc:
        assert str(exc) == "job of 0.3 s failed"
    else:
        raise AssertionError("no error")


def _deaf_or_fail(i: int) -> int:
    """Job 1 ignores SIGTERM and never ends (a worker stuck in a lock it inherited held from the
    fork: its handler never runs); job 0 fails once job 1 has started."""
    if i == 1:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(600)
    time.sleep(1)
    raise MarsError("question 0: bad")


@pytest.mark.slow
def test_a_worker_deaf_to_sigterm_is_killed_and_the_error_still_arrives(tmp_path):
    """A failing question ends the run with its one line even when another worker cannot be
    terminated: it is killed after a grace period, and nothing is left running."""
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import multiprocessing as mp\n"
        "from test_workers import _deaf_or_fail\n"
        "from mars.workers import process_pool\n"
        "try:\n"
        "    with process_pool(2) as ex:\n"
        "        list(ex.map(_deaf_or_fail, [0, 1]))\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc, len(mp.active_children()))\n"
    )
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "MarsError question 0: bad 0\n"
    assert time.monotonic() - t0 < 60
