"""MARS: margin-adversarial risk-controlled stopping for parallel LLM test-time scaling.

The library's face is :class:`mars.Stopper` (with :class:`mars.Warmup` and :class:`mars.Decision`,
from :mod:`mars.stepper`): one method deciding on one question, checkpoint by checkpoint, fed by
any generation loop (docs/library.md). They are imported on first use, so ``import mars`` stays
cheap for the command line.
"""

__version__ = "0.1.0"

__all__ = ["Decision", "Stopper", "Warmup", "__version__"]


def __getattr__(name: str):
    if name in ("Decision", "Stopper", "Warmup"):
        from . import stepper

        return getattr(stepper, name)
    raise AttributeError(f"module 'mars' has no attribute {name!r}")
