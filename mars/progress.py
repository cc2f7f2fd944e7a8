"""Progress of long stages: the library reports it, only the command line draws it.

Every stage function (``generate_pool``, ``probe_pool``, ``fit_pool``, ``simulate_pool``,
``solve_pool``) takes ``progress``: a :data:`Progress` callback, called as ``progress(0, total)``
once the stage knows how many questions it has to do, then ``progress(done, total)`` after each.
The command line passes a rich bar (:func:`bar`, on stderr; off with ``--quiet``); a library
caller passes its own callback, or nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

#: ``progress(done, total)``: questions done so far, out of ``total``
Progress = Callable[[int, int], None]


def counted(items: Iterable[T], total: int, progress: Progress | None) -> Iterator[T]:
    """Iterate ``items`` (``total`` of them), reporting each one done to ``progress``."""
    if progress:
        progress(0, total)
    for done, item in enumerate(items, 1):
        yield item
        if progress:
            progress(done, total)


def counter(total: int, progress: Progress | None) -> Callable[[], None]:
    """A callable that reports one more unit done each time it is called (for workers that
    finish in their own order)."""
    done = 0
    if progress:
        progress(0, total)

    def tick() -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total)

    return tick


@contextlib.contextmanager
def bar(description: str, disable: bool = False) -> Iterator[Progress]:
    """A rich progress bar on stderr as a :data:`Progress` callback (the command line's). It
    appears with the first report, so a stage that refuses its input before any work prints
    nothing but its error."""
    display = None
    task = None

    def update(done: int, total: int) -> None:
        nonlocal display, task
        if disable:
            return
        if display is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            display = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            display.start()
            task = display.add_task(description, total=total)
        assert task is not None
        display.update(task, completed=done, total=total)

    try:
        yield update
    finally:
        if display is not None:
            display.stop()
