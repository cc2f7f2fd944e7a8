"""Choose the risk level α of sc-mars2 / dco-mars2 by Learn-then-Test across development questions,
and trace the accuracy–savings frontier over α.

    python research/beyond/calibrate.py   # needs .cache/score.final.s{1,2}.npy (scores.py final)

Calibration set: the 12 synthetic development pools (seed 1; 360 questions per pipeline). The
loss of a question at α is the share of its bootstrap runs whose answer differs from the
full-budget vote (it bounds the accuracy change). The real AIME 2024 pool and the held-out
synthetic pools (seed 2) are never used here. Writes results/calibration.md and
results/frontier.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from evalkit import Data, outcome, summarize
from methods2 import V1_ALPHA

from mars.method.riskstop import learn_then_test

ALPHA_SC, ALPHA_DCO = V1_ALPHA["sc"], V1_ALPHA["dco"]

OUT = Path(__file__).resolve().parent / "results"
ALPHAS = np.array([0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3])
EPS = 0.02
DELTA = 0.1


def per_question_loss(d: Data, score: np.ndarray, alpha: float, rows: np.ndarray) -> np.ndarray:
    _, _, _, dis = outcome(d, score <= alpha)
    qk = d.qkey[rows]
    _, inv = np.unique(qk, return_inverse=True)
    return np.bincount(inv, weights=dis[rows].astype(float)) / np.bincount(inv)


def frontier(d: Data, score: np.ndarray) -> dict:
    out = {}
    for a in ALPHAS:
        res = summarize(d, score <= a)
        out[float(a)] = res
    return out


def main() -> None:
    OUT.mkdir(exist_ok=True)
    d1 = Data(1)
    s1 = np.load(d1_path(1))
    synth = ~np.char.startswith(np.array(d1.names)[d1.pool], "real")
    lines = [
        f"Learn-then-Test: loss = share of runs whose answer ≠ full-budget vote; "
        f"ε = {EPS}, δ = {DELTA}; "
        "calibration = 12 synthetic development pools (seed 1), 360 questions per pipeline.\n",
        "| pipeline | α | mean loss % | max question loss % | HB p-value | accepted |",
        "|---|---:|---:|---:|---:|:---:|",
    ]
    chosen = {}
    for p, is_dco in (("sc", False), ("dco", True)):
        rows = synth & (d1.dco == is_dco)
        losses = np.stack([per_question_loss(d1, s1, a, rows) for a in ALPHAS])
        alpha, pv = learn_then_test(ALPHAS, losses, EPS, DELTA)
        chosen[p] = alpha
        for a, l, pvi in zip(ALPHAS, losses, pv):
            lines.append(
                f"| {p} | {a:g} | {100 * l.mean():.2f} | {100 * l.max():.1f} | {pvi:.3g} | "
                f"{'yes' if alpha is not None and a <= alpha else 'no'} |"
            )
    # frontier on dev, held-out and real
    fr = {"dev": frontier(d1, s1)}
    # the shipped level: the largest admissible α at which no development pool loses more than
    # 0.5 pp of accuracy; if no admissible level does, the largest admissible one
    ship = {}
    for p in ("sc", "dco"):
        adm = [a for a in ALPHAS if chosen[p] is not None and a <= chosen[p]]
        good = [
            a
            for a in adm
            if min(
                v["dacc"]
                for k, v in fr["dev"][float(a)].items()
                if k.endswith(" " + p) and not k.startswith("real")
            )
            >= -0.5
        ]
        ship[p] = max(good) if good else (max(adm) if adm else None)
    lines.append(
        f"\nLTT-admissible up to: sc {chosen['sc']}, dco {chosen['dco']}; "
        "shipped (largest admissible α whose "
        f"worst development pool keeps accuracy within 0.5 pp, else the largest admissible): "
        f"sc {ship['sc']}, dco {ship['dco']} "
        f"(the first version's levels: SC {ALPHA_SC}, DeepConf {ALPHA_DCO})\n"
    )
    assert (ship["sc"], ship["dco"]) == (ALPHA_SC, ALPHA_DCO), (
        "the first version's levels differ from this choice"
    )
    try:
        d2 = Data(2)
        fr["heldout"] = frontier(d2, np.load(d1_path(2)))
    except FileNotFoundError:
        pass
    lines += [
        "Frontier over α (mean over pools of Δ accuracy vs the full budget, pp / "
        "share of the oracle's savings, %;"
        " worst pool in brackets):\n",
        "| α | set | SC Δacc | SC share | DCO Δacc | DCO share |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for a in ALPHAS:
        for name, f in fr.items():
            r = f[float(a)]
            cells = []
            for pp in ("sc", "dco"):
                rs = [v for k, v in r.items() if k.endswith(" " + pp) and not k.startswith("real")]
                cells.append(
                    f"{np.mean([v['dacc'] for v in rs]):+.2f} ({min(v['dacc'] for v in rs):+.2f})"
                )
                cells.append(
                    f"{100 * np.mean([v['share'] for v in rs]):.1f} "
                    f"({100 * min(v['share'] for v in rs):.1f})"
                )
            real = r.get("real/aime24 sc")
            lines.append(f"| {a:g} | {name} synthetic | " + " | ".join(cells) + " |")
            if real and name == "dev":
                lines.append(
                    f"| {a:g} | real AIME 2024 | {real['dacc']:+.2f} | "
                    f"{100 * real['share']:.1f} | – | – |"
                )
    (OUT / "calibration.md").write_text("\n".join(lines) + "\n")
    (OUT / "frontier.json").write_text(json.dumps(fr, default=float))
    print("\n".join(lines))


def d1_path(seed: int) -> Path:
    return Path(__file__).resolve().parent / ".cache" / f"score.final.s{seed}.npy"


if __name__ == "__main__":
    main()
