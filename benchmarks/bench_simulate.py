"""Simulator benchmark: all 14 reference methods from a cold start, time and peak memory.

    python benchmarks/bench_simulate.py            # 10 questions × 1,024 traces (≈15k tokens)
    python benchmarks/bench_simulate.py --scaling  # + per-question cost at 1,024 / 2,048 /
                                                   #   4,096 traces

Besides the cold run it times the fit stage (`mars fit`, fresh process) and `mars simulate --fit`
on its output (arrays and switch models read, nothing refitted), checks that both give the
same per-iteration results, and times the 14 methods plus the two beyond-the-paper rules
(`sc-mars2`, `dco-mars2`, docs/beyond.md) on the same fit to give their share of the time.

The pool is generated once with our synthetic backend (DeepSeek-R1-8B preset on AIME 2025, traces of
about 15k tokens with per-token confidences) into benchmarks/out/. Each measurement runs
`mars simulate` in a fresh process (cold: no cache) and reads its peak RSS from the OS.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"


def build_pool(path: Path, n_questions: int, n_traces: int) -> Path:
    if (path / "pool.json").exists():
        return path
    from mars.backends.synthetic import SyntheticBackend
    from mars.generate import generate_pool

    backend = SyntheticBackend("deepseek-r1-0528-qwen3-8b")
    t0 = time.perf_counter()
    generate_pool(
        backend,
        "aime_2025",
        n_traces,
        seed=1,
        out=path,
        questions=range(n_questions),
        progress=True,
    )
    print(f"generated {path.name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return path


def disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def run_simulate(pool: Path, out: Path, workers: int, extra=(), methods="reference") -> dict:
    return run_mars(
        [
            "simulate",
            str(pool),
            "-m",
            methods,
            "--out",
            str(out),
            "--workers",
            str(workers),
            "-q",
            *extra,
        ]
    )


# Runs a command and prints its own children's peak RSS (KiB): RUSAGE_CHILDREN of this process
# would be the maximum over every command run so far, not this command's.
_PEAK = (
    "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)"
)


def run_mars(args: list[str]) -> dict:
    """One `mars` command in a fresh process: wall and CPU seconds, peak RSS of its processes."""
    cmd = [sys.executable, "-c", _PEAK, sys.executable, "-m", "mars.cli", *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, check=True, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    *messages, peak_kib = done.stderr.rstrip("\n").split("\n")
    if messages:
        print("\n".join(messages), file=sys.stderr)
    return {
        "wall_s": round(wall, 2),
        "peak_rss_mb": round(int(peak_kib) / 1024, 1),
        "cpu_s": round((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=10)
    ap.add_argument("--traces", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--scaling", action="store_true")
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    report = {}
    pool = build_pool(OUT / f"pool-{a.questions}x{a.traces}", a.questions, a.traces)
    report["main"] = {
        "pool": pool.name,
        "disk_mb": round(disk_mb(pool), 1),
        **run_simulate(pool, OUT / "sim-main", a.workers),
    }
    print(json.dumps(report["main"]), file=sys.stderr)
    fit = OUT / "fit-main"
    if fit.exists():
        import shutil

        shutil.rmtree(fit)
    report["fit"] = run_mars(
        ["fit", str(pool), "--out", str(fit), "--workers", str(a.workers), "-q"]
    )
    report["with_fit"] = run_simulate(pool, OUT / "sim-fit", a.workers, ["--fit", str(fit)])
    report["with_fit"]["identical"] = all(
        (OUT / "sim-main" / m.name / "per_iteration.csv").read_bytes()
        == (m / "per_iteration.csv").read_bytes()
        for m in (OUT / "sim-fit").iterdir()
        if m.is_dir()
    )
    print(
        "fit",
        json.dumps(report["fit"]),
        "simulate --fit",
        json.dumps(report["with_fit"]),
        file=sys.stderr,
    )
    report["with_mars2"] = run_simulate(
        pool, OUT / "sim-mars2", a.workers, ["--fit", str(fit)], "reference,sc-mars2,dco-mars2"
    )
    report["with_mars2"]["added_share"] = round(
        report["with_mars2"]["wall_s"] / report["with_fit"]["wall_s"] - 1, 3
    )
    print("14 methods + sc-mars2, dco-mars2", json.dumps(report["with_mars2"]), file=sys.stderr)
    if a.scaling:
        for n in (1024, 2048, 4096):
            p = build_pool(OUT / f"pool-2x{n}", 2, n)
            r = run_simulate(p, OUT / f"sim-2x{n}", 1)
            r["per_question_s"] = round(r["wall_s"] / 2, 2)
            report[f"2x{n}"] = {"disk_mb": round(disk_mb(p), 1), **r}
            print(n, json.dumps(report[f"2x{n}"]), file=sys.stderr)
    (OUT / "bench_simulate.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
