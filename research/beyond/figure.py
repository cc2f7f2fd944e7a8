"""Accuracy vs token savings on the real Qwen3-8B AIME 2024 traces (and the synthetic development
pools, averaged): MARS, MARS-cal, the certified rule, Parallel-Probe, MARS2 over its risk level α
(the shipped α marked), and the oracle bound as a vertical line.

    python research/beyond/figure.py     # → docs/figures/beyond-tradeoff.png
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from common import CACHE
from evalkit import Data, summarize
from methods2 import V1_ALPHA

ALPHA_SC, ALPHA_DCO = V1_ALPHA["sc"], V1_ALPHA["dco"]

ROOT = Path(__file__).resolve().parents[2]
ALPHAS = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3]


def main() -> None:
    d = Data(1)
    score = np.load(CACHE / "score.final.s1.npy")
    curves = {a: summarize(d, score <= a) for a in ALPHAS}
    base = json.loads((CACHE / "baselines.s1.json").read_text())
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    panels = [
        ("real/aime24 sc", "SC, real Qwen3-8B AIME 2024", "sc", ALPHA_SC),
        ("sc", "SC, synthetic development pools (mean of 12)", "sc", ALPHA_SC),
        ("dco", "DeepConf, synthetic development pools (mean of 12)", "dco", ALPHA_DCO),
    ]
    markers = {
        "sc-mars": "s",
        "sc-mars-cal": "D",
        "sc-mars-cert": "^",
        "sc-pp": "v",
        "dco-mars-cal": "D",
    }
    for ax, (key, title, pipe, a_ship) in zip(axes, panels):
        if key.startswith("real"):
            pools = ["real/aime24"]
        else:
            pools = [p for p in base if not p.startswith("real")]

        def mean_of(method, field, pipe=pipe, pools=pools):
            return np.mean(
                [np.mean([base[p][q][pipe][method][field] for q in base[p]]) for p in pools]
            )

        full = mean_of(pipe, "acc")
        orc = mean_of("oracle-first" if pipe == "sc" else "oracle-dco-first", "sav")
        lo = -3.0
        colors = {
            "sc-mars": "C0",
            "sc-mars-cal": "C1",
            "sc-mars-cert": "C2",
            "sc-pp": "C4",
            "dco-mars-cal": "C1",
        }
        methods = (
            ["sc-mars", "sc-mars-cal", "sc-mars-cert", "sc-pp"]
            if pipe == "sc"
            else ["dco-mars-cal"]
        )
        for m in methods:
            x, y = mean_of(m, "sav"), mean_of(m, "acc") - full
            shown = max(y, lo + 0.15)
            label = m if y >= lo else f"{m} ({y:+.1f} pp, off scale)"
            ax.plot(x, shown, markers[m], ms=8, color=colors[m], label=label)
        labels = [
            k
            for k in curves[ALPHAS[0]]
            if (
                k == key
                if key.startswith("real")
                else k.endswith(" " + pipe) and not k.startswith("real")
            )
        ]
        xs = [np.mean([curves[a][k]["sav"] for k in labels]) for a in ALPHAS]
        ys = [np.mean([curves[a][k]["dacc"] for k in labels]) for a in ALPHAS]
        name = "sc-mars2" if pipe == "sc" else "dco-mars2"
        ax.plot(xs, ys, "o-", color="C3", ms=4, label=f"{name} (α {ALPHAS[0]:g} … {ALPHAS[-1]:g})")
        i = ALPHAS.index(a_ship)
        ax.plot(xs[i], ys[i], "*", ms=16, color="C3", label=f"{name}, shipped α = {a_ship:g}")
        ax.axvline(orc, color="k", ls="--", lw=1, label="oracle-first savings")
        ax.axvline(0.85 * orc, color="k", ls=":", lw=1, label="85 % of the oracle")
        ax.axhline(-0.5, color="grey", ls=":", lw=1)
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_ylim(lo, 1.0)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("token savings vs the full budget (%)")
        ax.set_ylabel("accuracy − full-budget accuracy (pp)")
        ax.legend(fontsize=7, loc="center left")
    fig.tight_layout()
    out = ROOT / "docs" / "figures" / "beyond-tradeoff.png"
    fig.savefig(out, dpi=130)
    print(out)


if __name__ == "__main__":
    main()
