"""The simulate stage (`mars simulate`): the stopping simulation of a pool (:mod:`.driver`:
:func:`simulate_pool`), its outputs written (:mod:`.results`) and read back (:mod:`.runs`,
:mod:`.candidates`: the samples the report's single-question figures show). The walk itself is the
method layer's (:mod:`mars.method.walk`).

:func:`simulate_pool` is imported on first use, so the analysis and the report, reading runs, do
not load the simulator."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .driver import simulate_pool

__all__ = ["simulate_pool"]


def __getattr__(name: str):
    if name == "simulate_pool":
        from .driver import simulate_pool

        return simulate_pool
    raise AttributeError(f"module 'mars.simulate' has no attribute {name!r}")


def __dir__() -> list[str]:
    """What ``dir()`` and completion show: the lazy names too (they are not loaded yet)."""
    return sorted({*globals(), *__all__})
