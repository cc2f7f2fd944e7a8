"""Worker processes that die with their parent.

``simulate``, ``fit`` and generation run questions in a process pool. A plain pool outlives a
killed parent: its workers keep computing for minutes under init. :func:`process_pool` ties them
to the parent twice over: every worker asks the kernel for SIGTERM when its parent dies
(``PR_SET_PDEATHSIG``, Linux; any signal, even SIGKILL of the parent), and while the pool is
open the parent turns SIGTERM into terminating its workers and exiting with status 143. An error
raised in a worker reaches the caller as itself, once (the CLI prints its one line): the pool's
``map`` never cancels the futures it leaves behind, since Python 3.11's pool, broken by the
termination, would then die on them with a traceback of its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Worker initializer: SIGTERM kills the worker (not the parent's handler, inherited through
    fork), and arrives when the parent dies (or the worker exits now if it already has)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


def terminate_children(grace_s: float = 5.0) -> None:
    """Terminate every child process of this process (the pool's workers) and reap them; one
    that outlives SIGTERM by ``grace_s`` (stuck in a lock it inherited held from the fork, with
    a handler that never gets to run) is killed, so the pool's shutdown never waits forever."""
    children = mp.active_children()
    for p in children:
        p.terminate()
    end = time.monotonic() + grace_s
    for p in children:
        p.join(timeout=max(0.0, end - time.monotonic()))
    for p in children:
        if p.is_alive():
            p.kill()
            p.join(timeout=5)


class _Pool(ProcessPoolExecutor):
    def map(
        self,
        fn: Callable[..., T],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
    ) -> Iterator[T]:
        """Results in order, like :meth:`Executor.map`, but a failure leaves the remaining
        futures pending: the base class cancels them, and Python 3.11's pool, broken when
        :func:`process_pool` terminates its workers, then fails on the cancelled futures with
        an ``InvalidStateError`` traceback printed beside the real error (fixed in 3.12)."""
        end = None if timeout is None else time.monotonic() + timeout
        futures = [self.submit(fn, *args) for args in zip(*iterables, strict=False)]
        return (f.result(None if end is None else end - time.monotonic()) for f in futures)


def map_largest_first(
    ex: ProcessPoolExecutor,
    fn: Callable[[Any], T],
    jobs: Sequence[Any],
    sizes: Sequence[float],
    done: Callable[[], None] | None = None,
) -> list[T]:
    """``[fn(job) for job in jobs]`` on the pool ``ex``, the jobs of largest ``sizes`` started
    first (so that no worker is left with a large one at the end); the results in job order, and
    a failure as running them in order gives it: the error of the earliest failing job, raised
    as soon as every job before it has finished. ``done`` is called as each job succeeds."""
    first = sorted(range(len(jobs)), key=lambda i: -sizes[i])  # stable: ties in job order
    futures = {ex.submit(fn, jobs[i]): i for i in first}
    of = {i: f for f, i in futures.items()}
    results: list[Any] = [None] * len(jobs)
    finished = [False] * len(jobs)
    failed: list[int] = []
    for f in as_completed(futures):
        i = futures[f]
        finished[i] = True
        if f.exception() is None:
            results[i] = f.result()
            if done:
                done()
        else:
            failed.append(i)
        if failed and all(finished[: min(failed)]):
            of[min(failed)].result()  # raises it, as Executor.map would have
    return results


@contextlib.contextmanager
def process_pool(max_workers: int, mp_context: Any = None) -> Iterator[ProcessPoolExecutor]:
    """A :class:`ProcessPoolExecutor` whose workers never outlive this process.

    On SIGTERM (while the pool is open, in the main thread) the workers are terminated and the
    process exits with 143; on any other exception they are terminated before it propagates.
    """
    ex = _Pool(
        max_workers=max_workers,
        mp_context=mp_context,
        initializer=die_with_parent,
        initargs=(os.getpid(),),
    )
    previous = None
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        # start the workers (a forking pool starts them all at its first job) before the handler
        # below exists: a worker never inherits it, so SIGTERM ends one even before its
        # initializer has run
        ex.submit(int).result()

        def on_term(signum, frame):
            terminate_children()
            raise SystemExit(128 + signum)

        previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield ex
    except BaseException:
        terminate_children()
        # Wait for the pool's thread to finish with the broken pool: left running, it closes its
        # wake-up pipe while Python 3.11's exit hook writes to it ("Bad file descriptor").
        ex.shutdown(wait=True, cancel_futures=True)
        raise
    else:
        ex.shutdown(wait=True)
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
