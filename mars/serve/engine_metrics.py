"""The engines' own counters, read from their Prometheus ``GET /metrics``: what mars's counts
(:mod:`mars.serve.reconcile`) are reconciled with, and the running count a stop is timed by.

Each server's protocol says where its counters are
(:attr:`~mars.engines.server.Protocol.metrics_reading`, a
:class:`~mars.engines.server.protocol.MetricsReading`); read here as

* ``generated``: tokens generated, aborted requests' tokens included;
* ``prompt``, ``cached``, ``computed``: prompt tokens, those found in the prefix cache, and those
  computed (the difference), whichever two of them the server counts; ``hits``: its prefix
  cache's hits, where it counts them apart (else ``cached``);
* ``running`` and ``waiting``: requests being generated now, and queued.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:
    from ..engines.server import Protocol

PATH = "/metrics"


class EngineMetricsUnavailable(Exception):
    """The engine's counters cannot be read (no ``/metrics``, an answer that is not Prometheus
    text, a kind of server whose series are not known)."""


@dataclass(frozen=True)
class EngineCounters:
    """One reading of an engine's counters (see the module docstring)."""

    generated: float
    prompt: float
    cached: float
    computed: float
    running: float
    waiting: float
    hits: float

    def minus(self, before: EngineCounters) -> dict[str, float]:
        """The counters' growth since ``before`` (the gauges as they are now)."""
        return {
            "generated": self.generated - before.generated,
            "prompt": self.prompt - before.prompt,
            "cached": self.cached - before.cached,
            "computed": self.computed - before.computed,
            "hits": self.hits - before.hits,
            "running": self.running,
            "waiting": self.waiting,
        }


def samples(text: str) -> dict[str, float]:
    """Each sample's name → its value summed over its labels (Prometheus text format)."""
    out: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[s.name] = out.get(s.name, 0.0) + float(s.value)
    except ValueError as exc:
        raise EngineMetricsUnavailable(f"not Prometheus text ({exc})") from None
    return out


def parse(protocol: Protocol | type[Protocol], text: str) -> EngineCounters:
    """The counters of a server of ``protocol`` from its ``/metrics`` text."""
    r = protocol.metrics_reading
    if r is None:
        raise EngineMetricsUnavailable(f"the counters of a {protocol.kind} server are not known")
    got = samples(text)
    if r.generated not in got or r.running not in got:
        raise EngineMetricsUnavailable(f"no {r.generated} in its {PATH}")
    cached = next((got[name] for name in r.cached if name in got), 0.0)
    if r.computed is not None:
        computed = got.get(r.computed, 0.0)
        prompt = computed + cached
    else:
        assert r.prompt is not None
        prompt = got.get(r.prompt, 0.0)
        computed = prompt - cached
    return EngineCounters(
        generated=got[r.generated],
        prompt=prompt,
        cached=cached,
        computed=computed,
        running=got[r.running],
        waiting=got.get(r.waiting, 0.0),
        hits=got.get(r.hits, 0.0) if r.hits is not None else cached,
    )


def read_engine(backend: Any, timeout: float = 5.0) -> EngineCounters:
    """The counters of the server behind ``backend`` (a :class:`~mars.engines.server.
    ServerBackend`): ``GET /metrics`` with its key, on its own connection pool."""
    try:
        status, text = backend.http.get_text(PATH, timeout=timeout)
    except (OSError, TimeoutError) as exc:
        raise EngineMetricsUnavailable(str(exc)) from None
    protocol = backend.protocol
    if status != 200:
        reading = protocol.metrics_reading
        hint = ""
        if status in (404, 501) and reading is not None and reading.flag:
            hint = f" (start the {protocol.kind} server with {reading.flag})"
        raise EngineMetricsUnavailable(f"GET {PATH}: HTTP {status}{hint}")
    return parse(protocol, text)
