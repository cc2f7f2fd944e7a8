"""The analyze stage (`mars analyze`): what the report draws beyond a simulation's summaries,
computed from the traces (:mod:`.driver`: :func:`analyze`), written as the analysis files of
:mod:`mars.store.analysis`."""

from .driver import analyze

__all__ = ["analyze"]
