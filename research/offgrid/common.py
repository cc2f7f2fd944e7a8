"""Shared plumbing of the off-grid drivers: pools at several probe spacings, both protocols.

Pools (128 traces per question, budget 64): the real Qwen3-8B AIME 2024 traces (Parallel-Probe's,
probes every 500 tokens) imported at their own spacing and mapped onto 1,024- and 2,048-token
grids; synthetic pools of the ``qwen3-8b`` preset and of the early-guess question kind
(``presets/early-guess.json``) generated at the same three spacings. Protocols: the MARS paper's
bootstrap (64 iterations, seed 42) and Parallel-Probe's (100 shuffles, seed 0).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mars.method import protocol
from mars.method.arrays import load_arrays
from mars.method.registry import get_method
from mars.method.settings import Settings, pool_settings
from mars.method.walk import MethodRun, QuestionContext
from mars.store.pool import open_pool

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
REAL_JSON = HERE.parents[1].parent / "shared" / "data" / "parallel-probe-qwen3-8b" / "aime24.json"
PRESET_DIRS = (HERE / "presets", HERE.parent / "beyond" / "presets")  # ours, issue 23's
SPACINGS = (500, 1024, 2048)
PROTOCOLS = {
    "bootstrap": Settings(budget=64, iterations=64, warmup=16, seed=42),
    "parallel-probe": Settings(
        budget=64, iterations=100, warmup=16, seed=0, protocol="parallel-probe"
    ),
}
N_TRACES = 128
SHORT = {"qwen3-8b": "q8b", "early-guess": "guess"}


@dataclass(frozen=True)
class PoolSpec:
    name: str  # e.g. "real/aime24/500", "q8b/aime_2025/s1/500"
    path: Path
    spacing: int


def _run(args: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "mars.cli", *args], check=True, stdout=subprocess.DEVNULL)


def real_pool(spacing: int) -> PoolSpec:
    """The real AIME 2024 traces at their own 500-token probes or mapped onto a coarser grid."""
    out = CACHE / "pools" / f"real.aime24.{spacing}"
    if not (out / "pool.json").exists():
        mapped = "native" if spacing == 500 else str(spacing)
        _run(["import", "parallel-probe", str(REAL_JSON), str(out), "--spacing", mapped])
    return PoolSpec(f"real/aime24/{spacing}", out, spacing)


def synthetic_pool(preset: str, dataset: str, seed: int, spacing: int) -> PoolSpec:
    """A synthetic pool, generated once (deterministic in preset, dataset, seed, spacing)."""
    out = CACHE / "pools" / f"{preset}.{dataset}.s{seed}.{spacing}"
    if not (out / "pool.json").exists():
        file = next(
            (d / f"{preset}.json" for d in PRESET_DIRS if (d / f"{preset}.json").exists()), None
        )
        _run(
            [
                "generate",
                "--backend",
                "synthetic",
                "--preset",
                str(file) if file is not None else preset,
                "--problems",
                dataset,
                "--traces",
                str(N_TRACES),
                "--seed",
                str(seed),
                "--spacing",
                str(spacing),
                "--no-confs",
                "--out",
                str(out),
                "-q",
            ]
        )
    return PoolSpec(f"{SHORT.get(preset, preset)}/{dataset}/s{seed}/{spacing}", out, spacing)


def contexts(spec: PoolSpec, proto: str) -> list[QuestionContext]:
    """One context per question under protocol ``proto`` (a key of :data:`PROTOCOLS`)."""
    pool = open_pool(spec.path)
    s = pool_settings(pool, PROTOCOLS[proto])
    out = []
    for qid in pool.qids:
        q = pool.read_question(qid)
        if proto == "parallel-probe":
            arr = protocol.question_arrays(q, s.spacing)
        else:
            arr = load_arrays(q, CACHE / "arrays", spacing=s.spacing, window=s.window)
        out.append(QuestionContext.sample(arr, s))
    return out


def run(ctx: QuestionContext, method: str, **settings):
    """One method on one question, with other (stopping) settings if given."""
    if settings:
        ctx = ctx.with_settings(ctx.s.replace(**settings))
    return MethodRun(ctx, get_method(method)).run()


@dataclass
class Totals:
    """A method on a pool, as Parallel-Probe's table reports it: accuracy (%), total and
    sequential tokens per question (means over questions and iterations)."""

    acc: float
    tokens: float
    seq: float

    @classmethod
    def of(cls, results: list) -> Totals:
        return cls(
            100 * float(np.mean([r.correct.mean() for r in results])),
            float(np.mean([r.tokens.mean() for r in results])),
            float(np.mean([r.seq_tokens.mean() for r in results])),
        )

    def against(self, sc: Totals) -> dict:
        """Δacc (pp), total tokens saved (%) and sequential tokens, against SC's."""
        return {
            "dacc": self.acc - sc.acc,
            "saved": 100 * (1 - self.tokens / sc.tokens),
            "seq": self.seq,
        }
