"""The probe grid: a checkpoint every ``spacing`` tokens, up to ``max_tokens`` where a run has a
cap.

One value, checked once where it enters (an option, a request field, a pool's manifest) and
passed whole: the positions generation probes at, the probe stage probes, an import maps to,
the simulator reads and the live loop decides at are all this grid's, so they cannot drift
apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import MarsError, UsageError
from .schema import CHECKPOINT_SPACING

__all__ = ["MIN_SPACING", "Grid", "GridError"]

#: the finest grid: a checkpoint every token
MIN_SPACING = 1


class GridError(MarsError):
    """A spacing or token cap that makes no grid (worded with the names the caller gave)."""


def _whole(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


@dataclass(frozen=True)
class Grid:
    """Checkpoints at ``spacing``, 2·spacing, … (≤ ``max_tokens``; None: no cap, a pool's
    grid, which its traces' lengths bound)."""

    spacing: int = CHECKPOINT_SPACING
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        problem = _problem(self.spacing, self.max_tokens, "spacing", "max_tokens")
        if problem is not None:
            raise GridError(problem)
        object.__setattr__(self, "spacing", int(self.spacing))
        if self.max_tokens is not None:
            object.__setattr__(self, "max_tokens", int(self.max_tokens))

    @classmethod
    def checked(
        cls,
        spacing: object,
        max_tokens: object = None,
        *,
        names: tuple[str, str] = ("--spacing", "--max-tokens"),
        most: int | None = None,
        error: Callable[[str], Exception] = UsageError,
    ) -> Grid:
        """The grid of values a user gave, refused in one line naming them as the user did
        (``names``: the spacing's and the cap's option or field) with ``error``; ``most``: the
        most checkpoints it may have (the live loop's bound)."""
        problem = _problem(spacing, max_tokens, *names)
        if problem is None and most is not None and max_tokens is not None:
            n = int(max_tokens) // int(spacing)  # type: ignore[call-overload]
            if n > most:
                problem = (
                    f"{names[1]} {max_tokens:,} at {names[0]} {spacing:,}: {n:,} checkpoints, "
                    f"more than {most:,} (raise {names[0]} or lower {names[1]})"
                )
        if problem is not None:
            raise error(problem)
        return cls(spacing, max_tokens)  # type: ignore[arg-type]

    @classmethod
    def of_manifest(
        cls, manifest: dict, where: object, error: Callable[[str], Exception]
    ) -> Grid | None:
        """The grid a pool's manifest records (None: none recorded), refused in one line naming
        the file (``where``) with ``error``."""
        spacing = manifest.get("spacing")
        if spacing is None:
            return None
        return cls.checked(spacing, names=(f"{where}: spacing", "max_tokens"), error=error)

    def checkpoints(self) -> np.ndarray:
        """Every checkpoint up to the cap: spacing, 2·spacing, … ≤ max_tokens."""
        if self.max_tokens is None:
            raise ValueError("a grid without a token cap has no last checkpoint")
        return self.upto(self.max_tokens)

    def upto(self, tokens: int) -> np.ndarray:
        """The checkpoints at or below ``tokens``."""
        return self.first(max(int(tokens), 0) // self.spacing)

    def first(self, n: int) -> np.ndarray:
        """The first ``n`` checkpoints."""
        return self.spacing * np.arange(1, int(n) + 1, dtype=np.int64)

    def at(self, k) -> np.ndarray:
        """Where checkpoint ``k`` lies, counting from 1 (0: the start), elementwise."""
        return np.asarray(k, dtype=np.int64) * self.spacing

    def index(self, positions) -> np.ndarray:
        """The 0-based checkpoint index of positions on the grid, elementwise."""
        return np.asarray(positions, dtype=np.int64) // self.spacing - 1

    def count_below(self, lengths) -> np.ndarray:
        """How many checkpoints lie strictly below each length (a trace is probed there while it
        runs; at its length it has ended)."""
        return np.maximum(np.asarray(lengths, dtype=np.int64) - 1, 0) // self.spacing

    def below(self, length: int) -> np.ndarray:
        """The checkpoints strictly below ``length``."""
        return self.first(int(self.count_below(length)))

    def probe_positions(self, length: int) -> np.ndarray:
        """Where a trace of ``length`` tokens is probed: the checkpoints below its length, then
        its length itself (the terminal probe; once, when the length is on the grid)."""
        return np.append(self.below(length), np.int64(length))

    def on_grid(self, positions) -> np.ndarray:
        """Which of ``positions`` are checkpoints (a multiple of the spacing, not negative)."""
        pos = np.asarray(positions)
        return (pos % self.spacing == 0) & (pos >= 0)


def _problem(spacing: object, max_tokens: object, sname: str, cname: str) -> str | None:
    """What is wrong with a grid, in one line naming its values as ``sname`` and ``cname``."""
    if not _whole(spacing) or spacing < MIN_SPACING:  # type: ignore[operator]
        return (
            f"{sname} {_shown(spacing)}: must be a whole number of tokens, at least {MIN_SPACING}"
        )
    if max_tokens is None:
        return None
    if not _whole(max_tokens):
        return f"{cname} {_shown(max_tokens)}: must be a whole number of tokens"
    if max_tokens < spacing:  # type: ignore[operator]
        return f"{sname} {spacing}: no checkpoint within {cname} {max_tokens}"
    return None


def _shown(v: object) -> str:
    """A value as a refusal shows it: a whole number as written (a huge one by its size: Python
    cannot write one of thousands of digits), anything else as Python writes it, cut to 40."""
    if _whole(v):
        n = int(v)  # type: ignore[call-overload]
        return str(n) if abs(n) < 10**40 else f"(a {n.bit_length() * 0.30103:.0f}-digit number)"
    return repr(v)[:40]
