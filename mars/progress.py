"""Progress of long stages: the library reports it, only the command line draws it.

Every stage function (``generate_pool``, ``probe_pool``, ``fit_pool``, ``simulate_pool``,
``solve_pool``) takes ``progress``: a :data:`Progress` callback, called as ``progress(0, total)``
once the stage knows how many questions it has to do, then ``progress(done, total)`` after each.
The command line passes a rich bar (:func:`bar`, on stderr; off with ``--quiet``); a library
caller passes its own callback, or nothing.

A question on a real engine can take minutes, so the stages that drive one (``generate_pool`` in
one process, ``solve_pool``) also take ``detail``: a :data:`Detail` callback, called with a line
saying what the current question is doing (its phase, the checkpoint reached, the traces still
running). The bar shows it beside the count (``bar(...).detail``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

#: ``progress(done, total)``: questions done so far, out of ``total``
Progress = Callable[[int, int], None]
#: ``detail(text)``: what the current question is doing now (one short line)
Detail = Callable[[str], None]


def prefixed(detail: Detail | None, prefix: str) -> Detail | None:
    """``detail`` with ``prefix`` before every line (None stays None)."""
    if detail is None:
        return None
    return lambda text: detail(f"{prefix}{text}")


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


class Bar:
    """A rich progress bar on stderr (the command line's): called as a :data:`Progress`, its
    :meth:`detail` a :data:`Detail` shown on a line of its own under the bar (cut to the
    terminal's width). It appears with the first report, so a stage that refuses its input before
    any work prints nothing but its error."""

    def __init__(self, description: str, disable: bool = False):
        self.description, self.disable = description, disable
        self.display: Any = None
        self.task: Any = None
        self.text = ""

    def __call__(self, done: int, total: int) -> None:
        if self.disable:
            return
        if self.display is None:
            self.display = _display(self)
            self.display.start()
            self.task = self.display.add_task(self.description, total=total)
        self.display.update(self.task, completed=done, total=total)

    def detail(self, text: str) -> None:
        self.text = text  # drawn at the display's next refresh (ten a second)

    def close(self) -> None:
        if self.display is not None:
            self.display.stop()


def _display(shown: Bar) -> Any:
    """rich's progress display for ``shown``: the bar, then its detail line."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.progress import Progress as RichProgress
    from rich.text import Text

    class WithDetail(RichProgress):
        def get_renderables(self):
            yield self.make_tasks_table(self.tasks)
            if shown.text:
                yield Text(shown.text, no_wrap=True, overflow="ellipsis", style="dim")

    return WithDetail(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )


@contextlib.contextmanager
def bar(description: str, disable: bool = False) -> Iterator[Bar]:
    """A :class:`Bar` for the duration of a stage."""
    shown = Bar(description, disable)
    try:
        yield shown
    finally:
        shown.close()
