"""The simulate stage (`mars simulate`): the stopping simulation of a pool (:mod:`.driver`), its
outputs written (:mod:`.results`) and read back (:mod:`.runs`, :mod:`.candidates`: the samples
the report's single-question figures show). The walk itself is the method layer's
(:mod:`mars.method.walk`)."""
