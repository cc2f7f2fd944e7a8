"""MARS: margin-adversarial risk-controlled stopping for parallel LLM test-time scaling.

The library's face is :class:`mars.Stopper` (with :class:`mars.Warmup` and
:class:`mars.Decision`, from :mod:`mars.live.stepper`, and :class:`mars.Calibration`, from
:mod:`mars.method.learned`): one method deciding on one question, checkpoint by checkpoint, fed by
any generation loop (docs/library.md). They are imported on first use, so ``import mars`` stays
cheap for the command line.
"""

__version__ = "0.1.0"

__all__ = ["Calibration", "Decision", "Stopper", "Warmup", "__version__"]


_LAZY = ("Decision", "Stopper", "Warmup")


def __getattr__(name: str):
    if name in _LAZY:
        from .live import stepper

        return getattr(stepper, name)
    if name == "Calibration":
        from .method.learned import Calibration

        return Calibration
    raise AttributeError(f"module 'mars' has no attribute {name!r}")


def __dir__() -> list[str]:
    """What ``dir(mars)`` and completion show: the lazy names too (they are not loaded yet)."""
    return sorted({*globals(), *__all__})
