"""The generate stage (`mars generate`, `mars probe`): a trace pool written question by question,
probed inline or not (:mod:`.driver`: :func:`generate_pool`), and a pool's stored traces probed
again at any spacing, with any probe model (:mod:`.probe`: :func:`probe_pool`, the engine that
probes chosen by :func:`probe_backend`). The engines and the batch driver they share
(:func:`mars.engines.generate.run_batch`) are the engines layer's."""

from .driver import generate_pool
from .probe import probe_backend, probe_pool

__all__ = ["generate_pool", "probe_backend", "probe_pool"]
