"""Calibration learned once (issue 40): fit on some pools, simulate MARS2 without a warmup on
others, beside the warmup-paying methods and the warmup-free baselines, paid accounting.

    python research/calibration/evaluate.py            # prints the tables
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "beyond"))

import common  # noqa: E402

from mars.method import protocol  # noqa: E402
from mars.method.arrays import load_arrays  # noqa: E402
from mars.method.learned import fit_calibration  # noqa: E402
from mars.method.registry import parse_methods  # noqa: E402
from mars.method.settings import Settings  # noqa: E402
from mars.simulate.driver import simulate_pool  # noqa: E402
from mars.store.pool import open_pool  # noqa: E402

CACHE = HERE / ".cache"


def arrays_of(path: Path, pp: bool = False):
    pool = open_pool(path)
    spacing = pool.recorded_spacing or 2048
    out = []
    for q in pool.qids:
        qd = pool.read_question(q)
        out.append(
            protocol.question_arrays(qd, spacing) if pp else load_arrays(qd, CACHE, spacing=spacing)
        )
    return pool, out


def calibrate(paths: list[Path], pp: bool = False, qids=None):
    arrs, on = [], []
    for p in paths:
        pool, a = arrays_of(p, pp)
        if qids is not None:
            a = [x for x in a if x.qid in qids]
        arrs += a
        on.append(
            {
                "source": str(p),
                "model": pool.manifest.get("model"),
                "spacing": pool.recorded_spacing,
            }
        )
    return fit_calibration(arrs, on)


def run(pool: Path, methods: str, settings: Settings, cal=None, qids=None):
    res = simulate_pool(
        pool, parse_methods(methods), settings, questions=qids, workers=2, calibration=cal
    )
    out = {}
    for m in parse_methods(methods):
        acc = np.mean([r.methods[m.name].correct.mean() for r in res]) * 100
        sav = (
            np.mean(
                [np.mean(1 - r.methods[m.name].tokens / r.methods[m.name].baseline) for r in res]
            )
            * 100
        )
        paid = (
            np.mean(
                [
                    np.mean(1 - r.methods[m.name].paid_tokens / r.methods[m.name].baseline)
                    for r in res
                ]
            )
            * 100
        )
        seq = np.mean([np.mean(r.methods[m.name].seq_tokens) for r in res])
        out[m.name] = (acc, sav, paid, seq)
    return out


def show(title, rows):
    print(f"\n{title}")
    print(f"{'method':28s} {'acc %':>7s} {'paper %':>8s} {'paid %':>7s} {'seq':>8s}")
    for name, (acc, sav, paid, seq) in rows.items():
        print(f"{name:28s} {acc:7.2f} {sav:8.1f} {paid:7.1f} {seq:8.0f}")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--alpha", type=float, default=None)
    ap.add_argument("--wave", type=int, default=16)
    args = ap.parse_args()
    real = Path("/tmp/r40/aime24-native")
    pp = Settings(
        budget=64, iterations=100, seed=0, protocol="parallel-probe", warmup=16, guard="tokens"
    )
    base = run(
        real,
        "sc,sc-mars-cal,sc-mars2,sc-mars2-launch,sc-mars2-waves,pp-main,esc,asc,oracle-first",
        pp,
    )
    show("AIME 2024 (real), PP protocol, budget 64, warmup 16 (paid)", base)
    dev = [common.ensure_pool(p, d, 1) for p in common.PRESETS for d in common.DATASETS]
    import dataclasses

    # across models and grids on purpose: the refusal of another model's pool is bypassed here
    cal = dataclasses.replace(calibrate(dev), fitted_on=[])
    kw = {"risk_alpha": args.alpha} if args.alpha else {}
    pp0 = Settings(
        budget=64,
        iterations=100,
        seed=0,
        protocol="parallel-probe",
        warmup=0,
        wave_size=args.wave,
        **kw,
    )
    show(
        "AIME 2024, calibration fitted on synthetic dev pools (no warmup)",
        run(real, "sc-mars2,sc-mars2-launch,sc-mars2-waves", pp0, cal),
    )
    # AIME 2024 two halves: fit on one, evaluate on the other
    for fit_half, eval_half in (
        (range(0, 30, 2), range(1, 30, 2)),
        (range(1, 30, 2), range(0, 30, 2)),
    ):
        cal_h = calibrate([real], pp=True, qids=set(fit_half))
        show(
            "AIME 2024 half (fit on the other half)",
            run(
                real,
                "sc,sc-mars2,sc-mars2-launch,sc-mars2-waves,pp-main",
                pp0,
                cal_h,
                list(eval_half),
            ),
        )


def synthetic_heldout(cal, alpha=None, wave=16, iterations=32, pools=None):
    """Every held-out synthetic pool (seed 3, contested ones included), bootstrap protocol,
    budget 64: SC, MARS2 with its warmup (paid), and MARS2 with the calibration (no warmup)."""
    kw = {"risk_alpha": alpha} if alpha else {}
    s16 = Settings(budget=64, iterations=iterations, seed=42, warmup=16, wave_size=wave, **kw)
    s0 = Settings(budget=64, iterations=iterations, seed=42, warmup=0, wave_size=wave, **kw)
    specs = pools or (
        [(p, d) for p in common.PRESETS for d in common.DATASETS] + list(common.CONTESTED)
    )
    rows = []
    for p, d in specs:
        path = common.ensure_pool(p, d, 3)
        a = run(path, "sc,sc-mars2,sc-mars2-launch", s16)
        b = run(path, "sc-mars2,sc-mars2-launch", s0, cal)
        rows.append((f"{common.SHORT[p]}/{d}", a, b))
        sc = a["sc"][0]
        print(
            f"{common.SHORT[p] + '/' + d:28s} sc {sc:5.1f} | "
            f"warm mars2 {a['sc-mars2'][0] - sc:+5.2f} "
            f"{a['sc-mars2'][2]:5.1f}% launch {a['sc-mars2-launch'][0] - sc:+5.2f} "
            f"{a['sc-mars2-launch'][2]:5.1f}% | cal mars2 {b['sc-mars2'][0] - sc:+5.2f} "
            f"{b['sc-mars2'][2]:5.1f}% launch {b['sc-mars2-launch'][0] - sc:+5.2f} "
            f"{b['sc-mars2-launch'][2]:5.1f}% seq {b['sc-mars2-launch'][3]:6.0f}",
            flush=True,
        )
    return rows
