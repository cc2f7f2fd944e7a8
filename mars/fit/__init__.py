"""The fit stage (`mars fit`): every question's arrays and switch model, fitted once
(:mod:`mars.fit.driver`: :func:`fit_pool`), written as a fit directory that simulations read
(:mod:`mars.fit.fitdir`).

:func:`fit_pool` is imported on first use, so a simulation reading a fit directory does not load
the fitter."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .driver import fit_pool

__all__ = ["fit_pool"]


def __getattr__(name: str):
    if name == "fit_pool":
        from .driver import fit_pool

        return fit_pool
    raise AttributeError(f"module 'mars.fit' has no attribute {name!r}")


def __dir__() -> list[str]:
    """What ``dir()`` and completion show: the lazy names too (they are not loaded yet)."""
    return sorted({*globals(), *__all__})
