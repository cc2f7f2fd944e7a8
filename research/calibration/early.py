"""When to launch the rest of a sample (issue 40, item 4): paid tokens against the user's wait.

MARS2 with a calibration (no warmup) at n = 64, against plain self-consistency (every trace to its
end), for the launch policies of `mars.method.launch` and a few alternatives:

* every trace at once (``sc-mars2``), a first wave then the rest once it has ended
  (``sc-mars2-launch``), and the early launch (``sc-mars2-early``: the rest start at the first
  checkpoint where even the wave's most optimistic end — every running trace of it on the leader
  — would not stop);
* alternatives, for the choice: the early launch judged with the running traces on the answers
  they hold now (``held``), with a margin on the rule's level, launching the rest as soon as the
  first trace of the wave ends (``first-end``), and other wave sizes.

Two evaluations, the calibration never fitted on what it is evaluated on:

1. synthetic Qwen3-8B traffic (AIME 2025, the reasoning-length pools of research/beyond), the
   calibration fitted on the synthetic Qwen3-8B pools of HMMT and BRUMO 2025 (bootstrap, budget
   64, 32 iterations): what `mars serve --calibration` serves there;
2. the shared real AIME 2024 matrices (Qwen3-8B) under Parallel-Probe's protocol (budget 64 of
   128, 100 shuffles, probes every 500 tokens), the calibration fitted on synthetic Qwen3-8B pools
   of HMMT and BRUMO 2025 probed every 500 tokens (generated here once).

Columns: accuracy against SC in points, the share of (iteration) answers equal to the full
vote's, paid saving (per question, averaged, as research/calibration/study.py counts it; the
probes' tokens where the pool records them), sequential tokens (what a user waits for: the later
of the launches' ends, or the sum of waves that run one after another) against SC's (ratio of the
sums), and the per-question ratio's 90th percentile and maximum.

    python research/calibration/early.py        # about 5 minutes on 2 cores
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "beyond"))
sys.path.insert(0, str(HERE))

import common  # noqa: E402
from study import PP, aime24  # noqa: E402

from mars.fit.calibrate import calibrate_pools  # noqa: E402
from mars.method import protocol  # noqa: E402
from mars.method.launch import Early  # noqa: E402
from mars.method.registry import METHODS, Method  # noqa: E402
from mars.method.settings import Settings  # noqa: E402
from mars.simulate.driver import simulate_pool  # noqa: E402

CACHE = HERE / ".cache"
BOOT = {"budget": 64, "iterations": 32, "seed": 42, "warmup": 0}


@dataclasses.dataclass(frozen=True)
class FirstEnd(Early):
    """For the comparison: the rest launch once the first trace of the wave has ended."""

    def launch_now(self, rule, snap, wave):
        ended = ~snap.running[:, :wave] & snap.eligible[:, :wave]
        return ended.any(axis=1)


def variant(name: str, launch) -> Method:
    return dataclasses.replace(METHODS["sc-mars2-early"], name=name, launch=launch)


VARIANTS = [
    variant("early, held", Early(held=True)),
    variant("early, margin 0.5", Early(margin=0.5)),
    variant("first trace ends", FirstEnd()),
]
MAIN = ["sc", "sc-mars2", "sc-mars2-launch", "sc-mars2-early"]


def sp500_pool(dataset: str) -> Path:
    """A synthetic Qwen3-8B pool probed every 500 tokens (Parallel-Probe's grid), generated once."""
    out = CACHE / f"qwen3-8b.{dataset}.s1.sp500"
    if not (out / "pool.json").exists():
        subprocess.run(
            [
                *(sys.executable, "-m", "mars.cli", "generate", "--backend", "synthetic"),
                *("--preset", "qwen3-8b", "--problems", dataset, "--traces", "128", "--seed", "1"),
                *("--spacing", "500", "--out", str(out), "-q"),
            ],
            check=True,
        )
    return out


def measure(pool: Path, cal, settings: dict, waves=(16,)) -> list[tuple[str, int, tuple]]:
    rows = []
    for w in waves:
        methods = [METHODS[n] for n in MAIN] + VARIANTS if w == 16 else [METHODS[MAIN[-1]]]
        methods = [METHODS["sc"]] + [m for m in methods if m.name != "sc"]
        res = simulate_pool(
            pool, methods, Settings(**settings, wave_size=w), workers=2, calibration=cal
        )
        sc = [r.methods["sc"] for r in res]
        for m in methods:
            if m.name == "sc" and w != 16:
                continue
            rs = [r.methods[m.name] for r in res]
            dacc = 100 * (
                np.mean([r.correct.mean() for r in rs]) - np.mean([s.correct.mean() for s in sc])
            )
            agree = 100 * np.mean([np.mean(r.answer == s.answer) for r, s in zip(rs, sc)])
            paid = 100 * np.mean([np.mean(1 - r.paid_tokens / r.baseline) for r in rs])
            seq = sum(r.seq_tokens.sum() for r in rs) / sum(s.seq_tokens.sum() for s in sc)
            per_q = np.array([np.mean(r.seq_tokens / s.seq_tokens) for r, s in zip(rs, sc)])
            rows.append(
                (m.name, w, (dacc, agree, paid, seq, np.percentile(per_q, 90), per_q.max()))
            )
    return rows


def table(title: str, rows) -> None:
    print(f"\n{title}\n")
    print(
        "| launch | wave | Δ acc vs SC (pp) | same answer as SC % | saved, paid % | "
        "sequential × SC | per question: p90 | max |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, w, (dacc, agree, paid, seq, p90, mx) in rows:
        print(
            f"| `{name}` | {w} | {dacc:+.2f} | {agree:.1f} | {paid:.1f} | {seq:.2f} | "
            f"{p90:.2f} | {mx:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    fit = [common.ensure_pool("qwen3-8b", d, 1) for d in ("hmmt_feb_2025", "brumo_2025")]
    cal = calibrate_pools(fit)
    evaluate = common.ensure_pool("qwen3-8b", "aime_2025", 1)
    table(
        "Synthetic Qwen3-8B AIME 2025 (bootstrap, budget 64, 32 iterations), calibration fitted "
        "on synthetic HMMT + BRUMO 2025",
        measure(evaluate, cal, BOOT, waves=(16, 8, 32)),
    )
    fit = [sp500_pool(d) for d in ("hmmt_feb_2025", "brumo_2025")]
    cal = calibrate_pools(fit, protocol_name=protocol.PARALLEL_PROBE)
    cal = dataclasses.replace(cal, fitted_on=[])  # synthetic Qwen3-8B for the real one
    table(
        "Real Qwen3-8B AIME 2024 (Parallel-Probe's protocol, budget 64, 100 shuffles), "
        "calibration fitted on synthetic HMMT + BRUMO 2025 probed every 500 tokens",
        measure(aime24(), cal, {**PP, "warmup": 0}, waves=(16, 8, 32)),
    )
