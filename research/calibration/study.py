"""A calibration learned once (issue 40): MARS2 without a warmup per question, out of sample.

Three evaluations, every number paid as a live run pays it (the warmup, where a method reads one):

1. real Qwen3-8B AIME 2024 (Parallel-Probe's protocol: budget 64 of 128 traces, 100 shuffles,
   probes every 500 tokens), the methods that pay a warmup and those that need none;
2. the same, the calibration fitted on one half of its questions and evaluated on the other
   (both ways): out of sample on real traces;
3. the synthetic held-out pools (seed 3: every preset × dataset and the contested stress tests,
   bootstrap, budget 64), the calibration fitted on the development pools (seed 1).

    python research/calibration/study.py        # about 10 minutes on 2 cores
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "beyond"))

import common  # noqa: E402

from mars.fit.calibrate import calibrate_pools  # noqa: E402
from mars.method import protocol  # noqa: E402
from mars.method.learned import fit_calibration  # noqa: E402
from mars.method.registry import parse_methods  # noqa: E402
from mars.method.settings import Settings  # noqa: E402
from mars.simulate.driver import simulate_pool  # noqa: E402
from mars.store.pool import open_pool  # noqa: E402

SHARED = HERE.parents[2] / "shared" / "data" / "parallel-probe-qwen3-8b" / "aime24.json"
CACHE = HERE / ".cache"
PP = {"budget": 64, "iterations": 100, "seed": 0, "protocol": "parallel-probe"}
BOOT = {"budget": 64, "iterations": 32, "seed": 42}
PAYING = "sc,sc-mars-cal,sc-mars2,sc-mars2-launch,sc-mars2-waves"
FREE = "pp-main,esc,asc,oracle-first"
CALIBRATED = "sc-mars2,sc-mars2-launch"


def aime24() -> Path:
    """The shared AIME 2024 traces as a pool on their own 500-token probes."""
    out = CACHE / "aime24-native"
    if not (out / "pool.json").exists():
        from mars.store.published import import_parallel_probe

        import_parallel_probe(SHARED, out, spacing=None)
    return out


def run(pool: Path, methods: str, cal=None, qids=None, **settings) -> dict:
    """(accuracy %, paper's savings %, paid savings %, sequential tokens) per method."""
    res = simulate_pool(
        pool,
        parse_methods(methods),
        Settings(**settings),
        questions=qids,
        workers=2,
        calibration=cal,
    )
    out = {}
    for m in parse_methods(methods):
        rs = [r.methods[m.name] for r in res]
        out[m.name] = (
            100 * np.mean([r.correct.mean() for r in rs]),
            100 * np.mean([np.mean(1 - r.tokens / r.baseline) for r in rs]),
            100 * np.mean([np.mean(1 - r.paid_tokens / r.baseline) for r in rs]),
            float(np.mean([np.mean(r.seq_tokens) for r in rs])),
        )
    return out


def table(title: str, rows: dict, base: str = "sc") -> None:
    print(f"\n{title}\n")
    print("| method | accuracy % | Δ vs SC (pp) | saved, paper's % | saved, paid % | sequential |")
    print("|---|---:|---:|---:|---:|---:|")
    sc = rows[base][0] if base in rows else float("nan")
    for name, (acc, sav, paid, seq) in rows.items():
        print(f"| `{name}` | {acc:.2f} | {acc - sc:+.2f} | {sav:.1f} | {paid:.1f} | {seq:,.0f} |")


def halves(pool: Path) -> None:
    """Fit on one half of AIME 2024's questions, evaluate on the other, both ways."""
    qids = open_pool(pool).qids
    parts = (qids[0::2], qids[1::2])
    for fit_on, evaluate in (parts, parts[::-1]):
        p = open_pool(pool)
        arrays = [protocol.question_arrays(p.read_question(q), 500) for q in fit_on]
        meta = {"source": str(pool), "spacing": 500, "protocol": "parallel-probe"}
        cal = fit_calibration(arrays, [{**meta, "questions": len(fit_on)}])
        rows = run(pool, "sc,pp-main", None, evaluate, warmup=16, **PP)
        rows.update(run(pool, CALIBRATED, cal, evaluate, warmup=0, **PP))
        rows.update(
            {
                f"{k} (warmup 16)": v
                for k, v in run(pool, CALIBRATED, None, evaluate, warmup=16, **PP).items()
            }
        )
        first = "even" if fit_on == parts[0] else "odd"
        table(
            f"AIME 2024, calibration fitted on the {first} questions, evaluated on the others", rows
        )


def synthetic() -> None:
    """The held-out synthetic pools, the calibration fitted on the development pools."""
    dev = [common.ensure_pool(p, d, 1) for p in common.PRESETS for d in common.DATASETS]
    cal = dataclasses.replace(calibrate_pools(dev), fitted_on=[])  # across the presets' models
    print("\nSynthetic held-out pools (seed 3), calibration fitted on the development pools\n")
    print(
        "| pool | SC % | MARS2, warmup 16: Δ pp / paid % | launch, warmup 16 | "
        "MARS2, calibrated | launch, calibrated | launch's sequential |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    specs = [(p, d) for p in common.PRESETS for d in common.DATASETS] + list(common.CONTESTED)
    for p, d in specs:
        path = common.ensure_pool(p, d, 3)
        a = run(path, "sc,sc-mars2,sc-mars2-launch", warmup=16, **BOOT)
        b = run(path, CALIBRATED, cal, warmup=0, **BOOT)
        sc = a["sc"][0]

        def cell(r, sc=sc):
            return f"{r[0] - sc:+.2f} / {r[2]:.1f}"

        print(
            f"| {common.SHORT[p]}/{d} | {sc:.1f} | {cell(a['sc-mars2'])} | "
            f"{cell(a['sc-mars2-launch'])} | {cell(b['sc-mars2'])} | "
            f"{cell(b['sc-mars2-launch'])} | {b['sc-mars2-launch'][3]:,.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    pool = aime24()
    rows = run(pool, f"{PAYING},{FREE}", warmup=16, guard="tokens", **PP)
    table("AIME 2024 (real Qwen3-8B), Parallel-Probe's protocol, budget 64, warmup 16", rows)
    halves(pool)
    synthetic()
