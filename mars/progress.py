"""Progress bars for long work (rich, on stderr; off with ``--quiet`` or when not wanted)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

T = TypeVar("T")

console = Console(stderr=True)


def progress_bar(disable: bool = False) -> Progress:
    """A progress display for stderr (``with progress_bar() as p: task = p.add_task(...)``)."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=disable,
    )


def track(
    iterable: Iterable[T], total: int | None, description: str, enabled: bool = True
) -> Iterator[T]:
    """Iterate with a progress bar (none when not ``enabled``)."""
    if not enabled:
        yield from iterable
        return
    with progress_bar() as p:
        task = p.add_task(description, total=total)
        for item in iterable:
            yield item
            p.advance(task)
