"""The engines' own counters, read from their Prometheus ``GET /metrics``: what mars's counts
(:mod:`mars.serve.reconcile`) are reconciled with, and the running count a stop is timed by.

One reading per wire protocol (:data:`READINGS`), each naming the engine's series for

* ``generated``: tokens generated (vLLM ``vllm:generation_tokens_total``, llama.cpp
  ``llamacpp:tokens_predicted_total``), aborted requests' tokens included by both;
* ``prompt``, ``cached``, ``computed``: prompt tokens, those found in the prefix cache, and those
  computed (the difference). vLLM counts every prompt token (``vllm:prompt_tokens_total``) and
  the cached ones apart (``vllm:prompt_tokens_cached_total``, as its answers' ``cached_tokens``;
  ``hits``: ``vllm:prefix_cache_hits_total``, its prefix cache's); llama.cpp counts the computed
  ones (``llamacpp:prompt_tokens_total``, "excluding cached tokens") and the cached ones apart
  (``llamacpp:prompt_tokens_cached_total``);
* ``running`` and ``waiting``: requests being generated now, and queued.

llama.cpp serves ``/metrics`` only when started with ``--metrics``. SGLang's names are its
documented ones (``--enable-metrics``), not pinned by a test here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

PATH = "/metrics"


class EngineMetricsUnavailable(Exception):
    """The engine's counters cannot be read (no ``/metrics``, an answer that is not Prometheus
    text, a kind of server whose series are not known)."""


@dataclass(frozen=True)
class Reading:
    """The series of one kind of engine: each a sample name (its labels summed over)."""

    generated: str
    running: str
    waiting: str
    #: prompt tokens served from the cache: the first of these the engine has
    cached: tuple[str, ...]
    #: the prefix cache's hits (tokens), where the engine counts them apart
    hits: str | None = None
    prompt: str | None = None  # every prompt token (vLLM, SGLang) ...
    computed: str | None = None  # ... or only those computed (llama.cpp)


#: The series each kind of server (:attr:`mars.engines.server.Protocol.kind`) is read by.
READINGS: dict[str, Reading] = {
    "vllm": Reading(
        generated="vllm:generation_tokens_total",
        running="vllm:num_requests_running",
        waiting="vllm:num_requests_waiting",
        # per request, as usage.prompt_tokens_details.cached_tokens (vLLM 0.11 on); the prefix
        # cache's hits before
        cached=("vllm:prompt_tokens_cached_total", "vllm:prefix_cache_hits_total"),
        hits="vllm:prefix_cache_hits_total",
        prompt="vllm:prompt_tokens_total",
    ),
    "llama.cpp": Reading(
        generated="llamacpp:tokens_predicted_total",
        running="llamacpp:requests_processing",
        waiting="llamacpp:requests_deferred",
        cached=("llamacpp:prompt_tokens_cached_total",),
        computed="llamacpp:prompt_tokens_total",
    ),
    "sglang": Reading(
        generated="sglang:generation_tokens_total",
        running="sglang:num_running_reqs",
        waiting="sglang:num_queue_reqs",
        cached=("sglang:cached_tokens_total",),
        prompt="sglang:prompt_tokens_total",
    ),
}


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


def parse(kind: str, text: str) -> EngineCounters:
    """The counters of a server of ``kind`` from its ``/metrics`` text."""
    r = READINGS.get(kind)
    if r is None:
        raise EngineMetricsUnavailable(f"the counters of a {kind} server are not known")
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
    if status != 200:
        hint = " (llama-server: start it with --metrics)" if status in (404, 501) else ""
        raise EngineMetricsUnavailable(f"GET {PATH}: HTTP {status}{hint}")
    return parse(backend.protocol.kind, text)
