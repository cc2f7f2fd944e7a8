"""Trace-affine routing against two real llama.cpp replicas (SmolLM2-135M on CPU): what each
replica's prefix cache serves of the probes' prompts, the traces kept on their replica
(``--routing trace``) against each request to the least loaded (``--routing load``).
benchmarks/bench_affinity.py measures the same at more traces, with wall times."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

pytest.importorskip("starlette")

from engines.server.common import LlamaServer, need_llama_server
from serving import serving

from mars.serve.requests import Defaults
from mars.serve.upstreams import Upstreams

pytestmark = [pytest.mark.slow, pytest.mark.llama_server]

#: eight traces to the cap (``sc`` never stops), a checkpoint every 16 tokens, probes of 8
EIGHT = Defaults(method="sc", traces=8, warmup=0, spacing=16, max_tokens=64)


def _story(topic: str) -> list[dict]:
    return [{"role": "user", "content": f"Write a long, detailed story about {topic}."}]


def _served(urls: list[str], routing: str, topics: list[str]) -> dict:
    """Two questions at once through a proxy of ``routing``: the probes' prompt tokens the
    replicas had seen before (the prompt and the trace so far) and the share their caches
    served; the continuations' prompt tokens and the share served."""
    ups = Upstreams(urls, routing=routing, probe_max_new_tokens=8)
    stats = ups.primary.stats
    with serving(ups, EIGHT, max_active=2) as running:
        statuses: list[int] = []

        def ask(k: int) -> None:
            r = httpx.post(
                running.url + "/v1/chat/completions",
                json={"messages": _story(topics[k]), "n": 8, "seed": 11 + k},
                timeout=600,
            )
            statuses.append(r.status_code)

        threads = [threading.Thread(target=ask, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    ups.close()
    assert statuses == [200, 200]
    return {
        "probe_reusable": stats["probe_reusable_tokens"],
        "probe_share": stats["probe_reused_tokens"] / max(stats["probe_reusable_tokens"], 1),
        "generate_share": stats["generate_cached_tokens"] / max(stats["generate_prompt_tokens"], 1),
    }


def test_a_trace_kept_on_its_replica_finds_its_prefix_cached(tmp_path):
    need_llama_server()
    with ThreadPoolExecutor(2) as pool:  # started side by side
        started = [
            pool.submit(lambda x=x: LlamaServer(tmp_path / f"{x}.log", slots=8).start())
            for x in "ab"
        ]
    if not all(f.exception() is None for f in started):
        for f in started:
            if f.exception() is None:
                f.result().stop()
        raise next(f.exception() for f in started if f.exception() is not None)
    a, b = (f.result() for f in started)
    try:
        urls = [a.url, b.url]
        # each routing its own questions: neither finds the other's traces cached
        affine = _served(urls, "trace", ["a lighthouse keeper", "a robot baker"])
        loaded = _served(urls, "load", ["a rainy city", "a river that talks"])
    finally:
        a.stop()
        b.stop()
    assert affine["probe_reusable"] > 0
    # every probe finds its prompt and its trace so far in its replica's cache
    assert affine["probe_share"] >= 0.9, (affine, loaded)
    assert affine["probe_share"] >= loaded["probe_share"] - 0.02, (affine, loaded)
    assert affine["generate_share"] >= loaded["generate_share"] - 0.02, (affine, loaded)
