"""The analyze stage (`mars analyze`): what the report draws beyond a simulation's summaries,
computed from the traces (:mod:`.driver`), written as the analysis files of
:mod:`mars.store.analysis`."""
