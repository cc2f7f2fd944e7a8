"""Parallel-Probe's table on its own data: time of the reproduction, and every cell checked.

    python benchmarks/bench_protocol.py        # ../shared/data/parallel-probe-qwen3-8b/aime24.json

Imports the probe matrices at their native spacing (`mars import parallel-probe --spacing
native`), then runs the seven rows of the authors' AIME 2024 CSV (100 shuffles × 64 of 128 traces
× 30 questions) with `mars simulate --protocol parallel-probe`, each step in a fresh process; prints
wall time, CPU time (user + system of the child) and peak RSS, and whether every printed cell
equals the CSV's. `--methods` adds methods to the timed run (e.g. the MARS family).
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "shared" / "data" / "parallel-probe-qwen3-8b"
ROWS = {  # their CSV's (solver, strategy) → our method
    ("GreedySolver", "ConvergenceProbeStrategy"): "single-sac",
    ("MajorityVoteSolver", "FullReadStrategy"): "sc",
    ("ESCSolver", "FullReadStrategy"): "esc",
    ("ASCSolver", "FullReadStrategy"): "asc",
    ("MajorityVoteSolver", "ConvergenceProbeStrategy"): "sc-sac",
    ("GreedySolver", "ParallelESTPruning"): "pp-main-keep",
    ("GreedySolver", "ParallelESTPruningBurstMajorityOnActiveBranches"): "pp-main",
}


def timed(cmd: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one command in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA / "aime24.json")
    ap.add_argument("--csv", type=Path, default=DATA / "aime24_raw.csv")
    ap.add_argument("--methods", default="", help="more methods to run in the same command")
    args = ap.parse_args()
    mars = [sys.executable, "-m", "mars.cli"]
    methods = list(ROWS.values()) + [m for m in args.methods.split(",") if m]
    with tempfile.TemporaryDirectory() as tmp:
        pool, out = Path(tmp) / "pool", Path(tmp) / "sim"
        imp = timed(
            [*mars, "import", "parallel-probe", str(args.data), str(pool), "--spacing", "native"]
        )
        protocol = ["--protocol", "parallel-probe", "--budget", "64", "--iterations", "100"]
        where = [str(pool), "-m", ",".join(methods), "--out", str(out), "-q"]
        sim = timed([*mars, "simulate", *where, *protocol, "--seed", "0", "--workers", "2"])
        print(f"import --spacing native: {imp[0]:.2f} s wall, {imp[1]:.2f} s CPU, {imp[2]:.0f} MB")
        print(
            f"simulate, {len(methods)} methods × 100 shuffles × 30 questions: "
            f"{sim[0]:.2f} s wall, {sim[1]:.2f} s CPU, {sim[2]:.0f} MB peak"
        )
        ok = True
        with open(args.csv) as f:
            for row in csv.DictReader(f):
                method = ROWS[row["Solver"], row["Strategy"]]
                got = json.loads((out / method / "overall.json").read_text())["parallel_probe"]
                want = {"Acc": float(row["Acc"]), "Cost": int(row["Cost"])}
                want["Seq_Cost"] = int(row["Seq_Cost"])
                same = all(got[k] == v for k, v in want.items())
                ok &= same
                print(
                    f"  {method:14s} Acc {got['Acc']:6.2f}  Cost {got['Cost']:>7,}  "
                    f"Seq_Cost {got['Seq_Cost']:>6,}  seq {got['Seq']:>7,}  "
                    f"{'= CSV' if same else f'≠ CSV {want}'}"
                )
    print("every cell equals the CSV" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
