"""Where the remaining gap is: the questions that cost MARS2 the most savings against the oracle,
and the ones where it loses accuracy, with what distinguishes them.

    python research/beyond/gaps.py [--seed 1]     # → results/gaps.s{seed}.md

Offline on the shipped rule's scores (.cache/score.final.s{seed}.npy) at the shipped α.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from common import CACHE
from evalkit import Data, oracle_stop, outcome
from methods2 import V1_ALPHA

ALPHA_SC, ALPHA_DCO = V1_ALPHA["sc"], V1_ALPHA["dco"]

OUT = Path(__file__).resolve().parent / "results"


def main(seed: int, top: int = 15) -> str:
    d = Data(seed)
    score = np.load(CACHE / f"score.final.s{seed}.npy")
    alpha = np.where(d.dco, ALPHA_DCO, ALPHA_SC)[:, None]
    k, c, t, dis = outcome(d, score <= alpha)
    ko, _, to, _ = outcome(d, oracle_stop(d))
    sav, osav = 1 - t / d.baseline, 1 - to / d.baseline
    rows = []
    for label, g in d.groups():
        for q in np.unique(d.qid[g]):
            r = g & (d.qid == q)
            rows.append(
                {
                    "pool": label,
                    "q": int(q),
                    "gap": 100 * (osav[r].mean() - sav[r].mean()) / 30,
                    "dacc": 100 * (c[r].mean() - d.final_correct[r].mean()),
                    "base": 100 * d.final_correct[r].mean(),
                    "k": k[r].mean(),
                    "ko": ko[r].mean(),
                    "wtop": d.f("w_top")[r, 0].mean(),
                    "dis": 100 * dis[r].mean(),
                }
            )
    lines = [
        f"Seed {seed}. Savings gap = the question's (oracle − MARS2) savings / 30, i.e. its "
        "share of its pool's gap in points. k = mean stop checkpoint index (64 = never), "
        "ko = oracle's; "
        "w_top = the warmup majority's share.\n"
    ]
    for pipe in ("sc", "dco"):
        rs = [r for r in rows if r["pool"].endswith(" " + pipe)]
        tot = sum(r["gap"] for r in rs)
        hard = sum(r["gap"] for r in rs if r["base"] <= 50)
        lines.append(
            f"**{pipe}**: total savings gap {tot:.1f} points summed over pools; {hard:.1f} of it "
            f"({100 * hard / max(tot, 1e-9):.0f} %) on questions whose full-budget accuracy "
            "≤ 50 %.\n"
        )
        lines += [
            "| pool | q | gap (pp) | full-budget acc | Δacc | k | ko | w_top |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in sorted(rs, key=lambda r: -r["gap"])[:top]:
            lines.append(
                f"| {r['pool']} | {r['q']} | {r['gap']:.2f} | {r['base']:.0f} | {r['dacc']:+.1f} | "
                f"{r['k']:.1f} | {r['ko']:.1f} | {r['wtop']:.2f} |"
            )
        loss = [r for r in rs if r["dacc"] < -0.05]
        lines += [
            "",
            f"Questions where {pipe} MARS2 loses accuracy ({len(loss)}):\n",
            "| pool | q | Δacc | full-budget acc | disagreement % | k | ko | w_top |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in sorted(loss, key=lambda r: r["dacc"]):
            lines.append(
                f"| {r['pool']} | {r['q']} | {r['dacc']:+.1f} | {r['base']:.0f} | {r['dis']:.1f} | "
                f"{r['k']:.1f} | {r['ko']:.1f} | {r['wtop']:.2f} |"
            )
        lines.append("")
    md = "\n".join(lines)
    OUT.mkdir(exist_ok=True)
    (OUT / f"gaps.s{seed}.md").write_text(md + "\n")
    return md


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    print(main(ap.parse_args().seed))
