"""Progress of long stages: the library reports it, only the command line draws it.

Every stage function (``generate_pool``, ``probe_pool``, ``fit_pool``, ``simulate_pool``,
``solve_pool``) takes ``progress``: a :data:`Progress` callback, called as ``progress(0, total)``
once the stage knows how many questions it has to do, then ``progress(done, total)`` after each.
The command line passes a rich bar (:func:`bar`, on stderr; off with ``--quiet``); a library
caller passes its own callback, or nothing. Where stderr is not a terminal (a log file under
nohup, CI or SLURM) the bar is plain lines instead, which a log keeps: one per question done,
and the detail lines below, thinned out.

A question on a real engine can take minutes, so the stages that drive one (``generate_pool`` in
one process, ``solve_pool``) also take ``detail``: a :data:`Detail` callback, called with a line
saying what the current question is doing (its phase, the checkpoint reached, the traces still
running). The bar shows it beside the count (``bar(...).detail``).
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
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


#: a detail line that only says which checkpoint a phase reached (the others are always shown)
_CHECKPOINT = re.compile(r"[\d,]+ tokens, \d+ of \d+ running$")


class Bar:
    """The command line's progress on stderr, called as a :data:`Progress`; its :meth:`detail`
    is a :data:`Detail`. On a terminal, a rich progress bar with the detail on a line of its own
    under it (cut to the terminal's width). Otherwise (``plain``; by default when stderr is not
    a terminal) plain lines a log keeps, each after the time elapsed: one per question done, and
    of the detail every phase's first line, every ``every``-th checkpoint after it, and any line
    ``quiet_s`` seconds after the last one written. Nothing appears before the first report, so
    a stage that refuses its input before any work prints nothing but its error."""

    def __init__(
        self,
        description: str,
        disable: bool = False,
        *,
        plain: bool | None = None,
        every: int = 4,
        quiet_s: float = 60.0,
    ):
        self.description, self.disable = description, disable
        self.plain = (not sys.stderr.isatty()) if plain is None else plain
        self.every, self.quiet_s = every, quiet_s
        self.display: Any = None
        self.task: Any = None
        self.text = ""
        #: questions done and to do, as last reported
        self.done, self.total = 0, 0
        self.start: float | None = None
        self._last_line = 0.0
        self._phase: str | None = None
        self._skipped = 0

    def __call__(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        if self.disable:
            return
        if self.start is None:
            self.start = time.monotonic()
        if self.plain:
            self._line(self._count_text(done, total))
            return
        if self.display is None:
            self.display = _display(self)
            self.display.start()
            self.task = self.display.add_task(self.description, total=total)
        self.display.update(self.task, completed=done, total=total)

    def detail(self, text: str) -> None:
        self.text = text  # a bar draws it at its next refresh (ten a second)
        if self.disable or not self.plain:
            return
        phase = text.rsplit(": ", 1)[0] if ": " in text else ""
        shown = (
            phase != self._phase
            or not _CHECKPOINT.search(text)
            or self._skipped + 1 >= self.every
            or time.monotonic() - self._last_line >= self.quiet_s
        )
        self._phase = phase
        if shown:
            self._skipped = 0
            self._line(f"  {text}")
        else:
            self._skipped += 1

    def close(self) -> None:
        if self.display is not None:
            self.display.stop()

    def _count_text(self, done: int, total: int) -> str:
        if done == 0:
            return f"{self.description}: {total} question{'s' if total != 1 else ''} to do"
        text = f"{self.description}: {done}/{total} questions done"
        elapsed = time.monotonic() - (self.start or time.monotonic())
        if done < total:
            text += f", about {_clock(elapsed / done * (total - done))} left"
        return text

    def _line(self, text: str) -> None:
        now = time.monotonic()
        self._last_line = now
        elapsed = now - (self.start if self.start is not None else now)
        print(f"[{_clock(elapsed)}] {text}", file=sys.stderr, flush=True)


def _clock(seconds: float) -> str:
    """``h:mm:ss``."""
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


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
