"""Simulator benchmark: the reference methods from a cold start, time and peak memory.

    python benchmarks/bench_simulate.py            # 10 questions × 1,024 traces (≈18k tokens)
    python benchmarks/bench_simulate.py --scaling  # + per-question cost at 1,024 / 2,048 /
                                                   #   4,096 traces
    python benchmarks/bench_simulate.py --paper    # 30 questions × 4,096 traces, every method
    python benchmarks/bench_simulate.py --cold-only --runs 3 --against /tmp/old
                                                   # side by side with another checkout
    python benchmarks/bench_simulate.py --paper --published --runs 2 --against . \
        --against-pool benchmarks/out/pool-30x4096-v2
                                                   # the published parquet against the pool

Besides the cold run it times the fit stage (`mars fit`, fresh process) and `mars simulate --fit`
on its output (arrays and switch models read, nothing refitted), checks that both give the
same per-iteration results, and times the 14 methods plus the two beyond-the-paper rules
(`sc-mars2`, `dco-mars2`, docs/beyond.md) on the same fit to give their share of the time.
`--cold-only` times the cold run alone; `--paper` is the paper-scale case (`--questions 30
--traces 4096 --method all --workers 2 --cold-only`).

`--against DIR` runs the `mars` of another checkout of this repository (e.g. a `git worktree` of an
older commit) on the same pool (or `--against-pool`, e.g. the same traces in the pool format
the older checkout reads), alternating with this one run by run (`--runs`), so both sides
see the same machine load. Each cold measurement runs `mars simulate` in a fresh process (no
cache) and reports wall and CPU seconds (user + system of every process of the command), the
peak RSS of its largest process and the peak of all its processes together (sampled every 50
ms), summed as RSS (a page the forked workers share counted in each) and as PSS (shared pages
split between their sharers: the memory they hold together).

`--published` simulates the pool exported to the authors' published parquet schema (`mars export`,
written once beside it) instead: with `--against .` and `--against-pool` the pool folder, the same
traces read from both layouts, side by side (the published schema keeps no probe cost, so the
comparison leaves `probe_tokens` out).

The pool is generated once with our synthetic backend (DeepSeek-R1-8B preset on AIME 2025, traces of
about 18k tokens with per-token confidences) into benchmarks/out/ (`--out`), a folder per pool
format version; 10 × 1,024 traces take 400 MB, 30 × 4,096 4.7 GB and about 3 minutes to generate.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"


def build_pool(path: Path, n_questions: int, n_traces: int) -> Path:
    if (path / "pool.json").exists():
        return path
    from mars.engines.synthetic import SyntheticBackend
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
    )
    print(f"generated {path.name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return path


def export_pool(pool: Path, path: Path) -> Path:
    """The pool in the published parquet schema (`mars export`), written once."""
    if not path.exists():
        t0 = time.perf_counter()
        run_mars(["export", str(pool), str(path)])
        print(f"exported {path.name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return path


def disk_mb(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 1e6
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def run_simulate(
    pool: Path, out: Path, workers: int, extra=(), methods="reference", code: Path | None = None
) -> dict:
    if out.exists():  # no method folder of an earlier run left to compare
        import shutil

        shutil.rmtree(out)
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
        ],
        code,
    )


# Runs a command and prints its own children's peak RSS (KiB): RUSAGE_CHILDREN of this process
# would be the maximum over every command run so far, not this command's.
_PEAK = (
    "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)"
)


def _tree_memory(pid: int) -> tuple[int, int]:
    """Bytes resident in process ``pid`` and all its descendants now, summed two ways: RSS
    (pages shared by forked workers counted in each) and PSS (each shared page split between its
    sharers: what they hold together); (0, 0) once it is gone."""
    try:
        import psutil
    except ImportError:  # no sampling without psutil (snakemake brings it)
        return 0, 0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0, 0
    rss = pss = 0
    for p in procs:
        try:
            info = p.memory_full_info()
            rss += info.rss
            pss += getattr(info, "pss", info.rss)
        except psutil.Error:
            pass
    return rss, pss


def run_mars(args: list[str], code: Path | None = None) -> dict:
    """One `mars` command in a fresh process (of the checkout ``code``, default this one): wall
    and CPU seconds, peak RSS of its largest process and of all its processes together."""
    cmd = [sys.executable, "-c", _PEAK, sys.executable, "-m", "mars.cli", *args]
    code = HERE.parent if code is None else code  # its own mars first on the path
    env = {**os.environ, "PYTHONPATH": str(code)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env, cwd=code)
    peak_total = [0, 0]

    def sample() -> None:
        while proc.poll() is None:
            rss, pss = _tree_memory(proc.pid)
            peak_total[0], peak_total[1] = max(peak_total[0], rss), max(peak_total[1], pss)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"{' '.join(args[:2])} failed ({proc.returncode}):\n{stderr}")
    *messages, peak_kib = stderr.rstrip("\n").split("\n")
    if messages:
        print("\n".join(messages), file=sys.stderr)
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 2),
        "peak_rss_mb": round(int(peak_kib) / 1024, 1),
        "peak_total_rss_mb": round(peak_total[0] / 2**20, 1),
        "peak_total_pss_mb": round(peak_total[1] / 2**20, 1),
    }


def same_results(a: Path, b: Path) -> bool:
    """Every method's per-iteration results byte-identical in two output directories."""
    return all(
        (a / m.name / "per_iteration.csv").read_bytes() == (m / "per_iteration.csv").read_bytes()
        for m in b.iterdir()
        if m.is_dir()
    )


def same_shared_results(a: Path, b: Path, ignore: tuple[str, ...] = ()) -> dict:
    """Methods both output directories hold, and whether each one's per-iteration rows are equal
    on the columns both versions write (an older checkout may write fewer), but ``ignore``."""
    import csv

    out = {}
    for m in sorted(p.name for p in b.iterdir() if p.is_dir() and (a / p.name).is_dir()):
        with open(a / m / "per_iteration.csv") as fa, open(b / m / "per_iteration.csv") as fb:
            ra, rb = list(csv.DictReader(fa)), list(csv.DictReader(fb))
        cols = [c for c in (ra[0] if ra else {}) if c in (rb[0] if rb else {}) and c not in ignore]
        out[m] = len(ra) == len(rb) and all(
            [x[c] for c in cols] == [y[c] for c in cols] for x, y in zip(ra, rb)
        )
    return out


def cold_runs(
    pool: Path,
    a: argparse.Namespace,
    methods: str,
    against: Path | None,
    against_pool: Path | None = None,
) -> tuple[dict, dict | None]:
    """``a.runs`` cold runs (alternating with ``against``'s when given): every run and the
    median of each figure, for this checkout and the other."""
    mine: list[dict] = []
    theirs: list[dict] = []
    for i in range(a.runs):
        if against is not None:
            r = run_simulate(
                (against_pool or pool).resolve(),
                a.out / "sim-against",
                a.workers,
                (),
                methods,
                against,
            )
            theirs.append(r)
            print(f"against run {i + 1}", json.dumps(r), file=sys.stderr)
        r = run_simulate(pool, a.out / "sim-main", a.workers, (), methods)
        mine.append(r)
        print(f"this checkout run {i + 1}", json.dumps(r), file=sys.stderr)

    def summary(runs: list[dict]) -> dict:
        keys = ("wall_s", "cpu_s", "peak_rss_mb", "peak_total_rss_mb", "peak_total_pss_mb")
        return {
            "median": {k: round(statistics.median(r[k] for r in runs), 2) for k in keys},
            "runs": runs,
        }

    return summary(mine), (summary(theirs) if theirs else None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=10)
    ap.add_argument("--traces", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--method", default="reference", help="methods of the cold run")
    ap.add_argument("--scaling", action="store_true")
    ap.add_argument("--paper", action="store_true", help="30 × 4,096 traces, every method, cold")
    ap.add_argument("--cold-only", action="store_true", help="the cold run alone")
    ap.add_argument("--runs", type=int, default=1, help="cold runs (the median is reported)")
    ap.add_argument("--against", type=Path, help="another checkout run side by side")
    ap.add_argument(
        "--against-pool",
        type=Path,
        help="the pool the other checkout reads (default: this one's), e.g. the same traces in "
        "the pool format it reads",
    )
    ap.add_argument(
        "--published",
        action="store_true",
        help="simulate the pool exported to the published parquet schema (written once)",
    )
    ap.add_argument("--out", type=Path, default=OUT, help="pools and outputs")
    a = ap.parse_args()
    if a.paper:
        a.questions, a.traces, a.method, a.workers, a.cold_only = 30, 4096, "all", 2, True
    a.out.mkdir(parents=True, exist_ok=True)
    against = a.against.resolve() if a.against else None
    report: dict = {"host_cpus": os.cpu_count(), "load_before": os.getloadavg()}
    from mars.store.schema import POOL_FORMAT_VERSION

    name = f"pool-{a.questions}x{a.traces}-v{POOL_FORMAT_VERSION}"
    pool = build_pool(a.out / name, a.questions, a.traces)
    if a.published:
        pool = export_pool(pool, a.out / f"pool-{a.questions}x{a.traces}.parquet")
    main, other = cold_runs(pool, a, a.method, against, a.against_pool)
    report["main"] = {
        "pool": pool.name,
        "disk_mb": round(disk_mb(pool), 1),
        "method": a.method,
        "workers": a.workers,
        **main,
    }
    if other is not None:
        report["against"] = {"checkout": str(against), **other}
        ignore = ("probe_tokens",) if a.published else ()
        same = same_shared_results(a.out / "sim-against", a.out / "sim-main", ignore)
        report["against"]["methods_compared"] = len(same)
        report["against"]["identical"] = all(same.values())
        report["against"]["differing"] = [m for m, ok in same.items() if not ok]
    print("cold", json.dumps(report["main"]["median"]), file=sys.stderr)
    if not a.cold_only:
        fit = a.out / "fit-main"
        if fit.exists():
            import shutil

            shutil.rmtree(fit)
        report["fit"] = run_mars(
            ["fit", str(pool), "--out", str(fit), "--workers", str(a.workers), "-q"]
        )
        report["with_fit"] = run_simulate(
            pool, a.out / "sim-fit", a.workers, ["--fit", str(fit)], a.method
        )
        report["with_fit"]["identical"] = same_results(a.out / "sim-main", a.out / "sim-fit")
        print(
            "fit",
            json.dumps(report["fit"]),
            "simulate --fit",
            json.dumps(report["with_fit"]),
            file=sys.stderr,
        )
        report["with_mars2"] = run_simulate(
            pool,
            a.out / "sim-mars2",
            a.workers,
            ["--fit", str(fit)],
            f"{a.method},sc-mars2,dco-mars2",
        )
        report["with_mars2"]["added_share"] = round(
            report["with_mars2"]["wall_s"] / report["with_fit"]["wall_s"] - 1, 3
        )
        print("+ sc-mars2, dco-mars2", json.dumps(report["with_mars2"]), file=sys.stderr)
    if a.scaling:
        for n in (1024, 2048, 4096):
            p = build_pool(a.out / f"pool-2x{n}-v{POOL_FORMAT_VERSION}", 2, n)
            r = run_simulate(p, a.out / f"sim-2x{n}", 1)
            r["per_question_s"] = round(r["wall_s"] / 2, 2)
            report[f"2x{n}"] = {"disk_mb": round(disk_mb(p), 1), **r}
            print(n, json.dumps(report[f"2x{n}"]), file=sys.stderr)
    report["load_after"] = os.getloadavg()
    (a.out / f"bench_simulate-{a.questions}x{a.traces}.json").write_text(
        json.dumps(report, indent=2) + "\n"
    )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
