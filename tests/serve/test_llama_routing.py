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


def _replicas(tmp_path, tag: str) -> list[LlamaServer]:
    """Two fresh replicas (empty caches), started side by side."""
    with ThreadPoolExecutor(2) as pool:
        started = [
            pool.submit(lambda x=x: LlamaServer(tmp_path / f"{tag}-{x}.log", slots=8).start())
            for x in "ab"
        ]
    if not all(f.exception() is None for f in started):
        for f in started:
            if f.exception() is None:
                f.result().stop()
        raise next(f.exception() for f in started if f.exception() is not None)
    return [f.result() for f in started]


def _served(tmp_path, routing: str) -> dict:
    """Two questions at once through a proxy of ``routing`` in front of two fresh replicas: the
    probes' prompt tokens the replicas had seen before (the prompt and the trace so far) and the
    share their caches served; the prompt tokens computed again, continuations and probes."""
    servers = _replicas(tmp_path, routing)
    try:
        ups = Upstreams([s.url for s in servers], routing=routing, probe_max_new_tokens=8)
        stats = ups.primary.stats
        with serving(ups, EIGHT, max_active=2) as running:
            statuses: list[int] = []

            def ask(k: int) -> None:
                topic = ["a lighthouse keeper", "a robot baker"][k]
                r = httpx.post(
                    running.url + "/v1/chat/completions",
                    json={"messages": _story(topic), "n": 8, "seed": 11 + k},
                    timeout=600,
                )
                statuses.append(r.status_code)

            threads = [threading.Thread(target=ask, args=(k,)) for k in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        ups.close()
    finally:
        for s in servers:
            s.stop()
    assert statuses == [200, 200]
    return {
        "probe_reusable": stats["probe_reusable_tokens"],
        "probe_share": stats["probe_reused_tokens"] / max(stats["probe_reusable_tokens"], 1),
        "recomputed": sum(
            stats[f"{kind}_prompt_tokens"] - stats[f"{kind}_cached_tokens"]
            for kind in ("generate", "probe")
        ),
    }


def test_a_trace_kept_on_its_replica_finds_its_prefix_cached(tmp_path):
    """The same two questions, each routing in front of its own fresh replicas."""
    need_llama_server()
    affine = _served(tmp_path, "trace")
    loaded = _served(tmp_path, "load")
    assert affine["probe_reusable"] > 0
    # every probe finds its prompt and its trace so far in its replica's cache
    assert affine["probe_share"] >= 0.9, (affine, loaded)
    assert affine["probe_share"] >= loaded["probe_share"] - 0.02, (affine, loaded)
    # llama.cpp does not repeat a run bit for bit across batch compositions: the traces may
    # differ a little between the two
    assert affine["recomputed"] <= 1.05 * loaded["recomputed"], (affine, loaded)
