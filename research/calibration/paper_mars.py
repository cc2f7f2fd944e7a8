"""The paper's MARS rules reading a calibration learned once (a pooled switch model and γ) instead
of a warmup per question, against the same rules with their warmup and MARS2, paid for.

    python research/calibration/paper_mars.py [--iterations 32] [--out DIR]

Fits one calibration on the synthetic Qwen3-8B pools of HMMT and BRUMO 2025 (seed 1) and
evaluates on AIME 2025 (seeds 1 and 3), which it never saw, at budget 64; then the choice of the
pooled γ: fitted on HMMT alone, evaluated on BRUMO, at each quantile of the HMMT questions' own γ
(each calibrated on the question's first 16 answered traces, as on a warmup) and at 1, kept.
Writes the tables to stdout (research/calibration/results/paper-mars.md holds them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "research" / "beyond"))

import numpy as np  # noqa: E402
from common import ensure_pool  # noqa: E402

from mars.fit.calibrate import calibrate_pools  # noqa: E402

MARS = [sys.executable, "-m", "mars"]
WITH_WARMUP = "sc,sc-mars-cal,sc-mars2,sc-mars2-launch"
WITH_CAL = "sc,sc-mars-cal,sc-mars,sc-mars2,sc-mars2-launch"


def simulate(pool: Path, out: Path, methods: str, iterations: int, cal: Path | None) -> dict:
    cmd = [*MARS, "simulate", str(pool), "--out", str(out), "--budget", "64"]
    cmd += ["--iterations", str(iterations), "-m", methods, "-q"]
    if cal is not None:
        cmd += ["--calibration", str(cal)]
    subprocess.run(cmd, check=True, cwd=ROOT)
    return {d.name: json.loads((d / "overall.json").read_text()) for d in out.iterdir()}


def row(name: str, o: dict, sc: dict) -> str:
    return (
        f"| {name} | {o['accuracy_pct'] - sc['accuracy_pct']:+.2f} | {o['savings_pct']:.1f} % | "
        f"{o['savings_paid_pct']:.1f} % | {o['seq_tokens_mean'] / sc['seq_tokens_mean']:.2f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=32)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    work = args.out or Path(tempfile.mkdtemp(prefix="paper-mars-"))
    work.mkdir(parents=True, exist_ok=True)
    pool = {d: ensure_pool("qwen3-8b", d, 1) for d in ("hmmt_feb_2025", "brumo_2025")}
    cal = work / "cal.json"
    calibrate_pools([pool["hmmt_feb_2025"], pool["brumo_2025"]]).save(cal)
    print(
        "| AIME 2025 (seed) | method | Δ accuracy vs SC (points) | saved, paper's | saved, paid "
        "| sequential × SC |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for seed in (1, 3):
        ev = ensure_pool("qwen3-8b", "aime_2025", seed)
        warm = simulate(ev, work / f"warm{seed}", WITH_WARMUP, args.iterations, None)
        once = simulate(ev, work / f"cal{seed}", WITH_CAL, args.iterations, cal)
        for m in WITH_WARMUP.split(",")[1:]:
            print(f"| {seed} " + row(f"`{m}`, warmup 16", warm[m], warm["sc"]))
        for m in WITH_CAL.split(",")[1:]:
            print(f"| {seed} " + row(f"`{m}`, calibration", once[m], once["sc"]))
    print()
    print("| pooled γ: quantile of the questions' own | γ | Δ accuracy (points) | saved, paid |")
    print("|---|---:|---:|---:|")
    ev = pool["brumo_2025"]
    fit = calibrate_pools([pool["hmmt_feb_2025"]])
    gammas = questions_gamma(pool["hmmt_feb_2025"])
    for q in (0.5, 0.75, 0.9, 1.0, None):
        gamma = 1.0 if q is None else round(float(np.quantile(gammas, q)), 2)
        path = work / f"cal-hmmt-{q}.json"
        dataclasses.replace(fit, gamma=gamma).save(path)
        r = simulate(ev, work / f"gq{q}", "sc,sc-mars-cal", args.iterations, path)
        o, sc = r["sc-mars-cal"], r["sc"]
        print(
            f"| {'1 (kept)' if q is None else q} | {gamma} | "
            f"{o['accuracy_pct'] - sc['accuracy_pct']:+.2f} | {o['savings_paid_pct']:.1f} % |"
        )


def questions_gamma(path: Path) -> list[float]:
    """Each question's own γ, calibrated on its first 16 answered traces as on a warmup."""
    from mars.method.arrays import load_arrays
    from mars.method.calibration import calibrate_gamma
    from mars.method.features import switch_labels
    from mars.store.pool import open_pool

    pool, out = open_pool(path), []
    for qid in pool.qids:
        arr = load_arrays(pool.read_question(qid), spacing=(pool.grid).spacing)
        warm = np.flatnonzero(arr.final_ids >= 0)[:16]
        ids = arr.ids[warm]
        q = switch_labels(arr, warm).astype(np.float32)
        w = np.ones(ids.shape, dtype=np.float32)
        out.append(float(calibrate_gamma(ids, arr.final_ids[warm], w, ids >= 0, q, arr.n_answers)))
    return out


if __name__ == "__main__":
    main()
