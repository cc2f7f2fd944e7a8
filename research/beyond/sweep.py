"""Every setting tried, on the development pools (seed 1) + real AIME 2024, over a grid of α.

    python research/beyond/scores.py NAME      # once per score (see SETTINGS), then
    python research/beyond/learned.py NAME ... # for the cross-question learned ones, then
    python research/beyond/sweep.py            # → results/sweep.md

Offline evaluation (evalkit: stop at the first checkpoint whose score ≤ α, answer its leader; the
same snapshots as the simulator). Per pipeline: mean / worst Δ accuracy over pools (pp), mean /
worst share of the oracle's savings, and how many pools meet the goal (Δacc ≥ −0.5, share ≥ 85 %).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from common import CACHE
from evalkit import Data, summarize

OUT = Path(__file__).resolve().parent / "results"
ALPHAS = [0.002, 0.01, 0.02, 0.05, 0.1, 0.2]

# name → (what it is, live-capable)
SETTINGS = {
    "mars_g1": (
        "MARS γ = 1 (paper rule, reference numbers; DeepConf with confidence weights)",
        True,
    ),
    "hgb_all": (
        "gradient-boosted P(leader ≠ final) on 21 snapshot/warmup features, leave-one-dataset-out",
        True,
    ),
    "hgb_nowarm": ("same without the warmup features", True),
    "hgb_nogmax": ("same without MARS's γ-slack feature", True),
    "hgb_snap": ("same, snapshot features only", True),
    "hgb_small": ("same, 9 features", True),
    "hgb_bayes": ("same + the predictive-risk scores as features", True),
    "bayes_q": (
        "predictive risk, q = per-question learned switch model, θ from warmup (other = 1)",
        True,
    ),
    "bayes_ws": ("predictive risk, q = 1 − warmup settledness at the checkpoint", True),
    "bayes_q1": ("predictive risk, q = 1 (every running trace re-drawn from θ)", True),
    "bayes_oracleq": (
        "predictive risk, oracle q (not live: reads the future; headroom of a better q)",
        False,
    ),
    "bq_pr0.5_ot1.0": ("predictive risk, prior 0.5", True),
    "bq_pr2.0_ot1.0": ("predictive risk, prior 2", True),
    "bq_pr1.0_ot0.5": ("predictive risk, unseen-answer mass 0.5", True),
    "bq_pr1.0_ot2.0": ("predictive risk, unseen-answer mass 2", True),
    "bq_pr1.0_ot4.0": ("predictive risk, unseen-answer mass 4", True),
    "bq_d8": ("predictive risk, 8 posterior draws", True),
    "regret_q": ("expected accuracy regret Σ_c P(F=c)(θ_c − θ_L) instead of P(F ≠ L)", True),
    "futility": (
        "predictive risk × cross-question P(final answer correct | warmup top share) (futility)",
        True,
    ),
    "bq_rho0.14_topNone": ("DeepConf: + uniform survival, final vote keeps 14 % of traces", True),
    "bq_rho0.25_topNone": ("DeepConf: + uniform survival, 25 %", True),
    "bq_rho0.14_top0.5": (
        "DeepConf: + survival 14 %, θ from the warmup's most confident half",
        True,
    ),
    "tilt1.0_rhoNone": (
        "DeepConf: θ tilted to confident warmup traces (β = 1, effective sample size)",
        True,
    ),
    "tilt2.0_rhoNone": ("DeepConf: θ tilted, β = 2", True),
    "tilt1.0_rho0.14": ("DeepConf: θ tilted β = 1 + survival 14 %", True),
    "tilt1.0_rho0.25": ("DeepConf: θ tilted β = 1 + survival 25 %", True),
    "survlr": ("DeepConf: per-trace survival from a pooled logistic model", True),
    "survlr_tilt1": ("DeepConf: pooled survival + tilted θ", True),
    "lr_dco": ("DeepConf: logistic model on risk scores + features, leave-one-dataset-out", True),
    "hgb_dco": (
        "DeepConf: gradient-boosted model on 8 features + risk, leave-one-dataset-out",
        True,
    ),
    "guard1.0_rhoNone": (
        "DeepConf: leader must be the confidence-tilted warmup favourite, β = 1",
        True,
    ),
    "guard2.0_rhoNone": ("DeepConf: favourite guard, β = 2", True),
    "guard3.0_rhoNone": ("DeepConf: favourite guard, β = 3", True),
    "guard5.0_rhoNone": ("DeepConf: favourite guard, β = 5", True),
    "guard1.0_rho0.25": ("DeepConf: favourite guard β = 1 + survival 25 %", True),
    "guard3.0_rho0.25": ("DeepConf: favourite guard β = 3 + survival 25 %", True),
    "analytic_ot1": (
        "analytic θ (posterior mean + variance) instead of 32 draws; guard β = 2",
        True,
    ),
    "analytic": ("same, unseen-answer mass 2", True),
    "final_v1": (
        "analytic, but a switcher may re-land on its own answer (P(final = a) = 1 − q + qθ_a)",
        True,
    ),
    "temper0.5": ("shipped form with the warmup counts halved (tempered posterior)", True),
    "temper0.25": ("shipped form with the warmup counts quartered", True),
    "final": (
        "**shipped**: analytic, consistent destination (P(final = a) = 1 − q), guard β = 2",
        True,
    ),
}


def load(d: Data, name: str) -> np.ndarray | None:
    if name == "mars_g1":  # stop ⇔ slack γ_max > 1 (and the probe-0 guard); expressed as a score
        ok = (d.f("gmax") > 1) & ((d.f("k") > 0) | (d.f("w_isL") > 0))
        return np.where(ok, 0.0, 1.0)
    p = CACHE / f"score.{name}.s1.npy"
    return np.load(p) if p.exists() else None


def cell(res: dict, pipe: str) -> str:
    rs = [v for k, v in res.items() if k.endswith(" " + pipe)]
    ok = sum(r["dacc"] >= -0.5 and r["share"] >= 0.85 for r in rs)
    return (
        f"{np.mean([r['dacc'] for r in rs]):+.2f} / {min(r['dacc'] for r in rs):+.2f} | "
        f"{100 * np.mean([r['share'] for r in rs]):.1f} / "
        f"{100 * min(r['share'] for r in rs):.1f} | "
        f"{ok}/{len(rs)}"
    )


def main() -> None:
    d = Data(1)
    lines = [
        "| setting | live | α | SC Δacc mean / worst | SC share mean / worst % | SC goal | "
        "DCO Δacc mean / worst | DCO share mean / worst % | DCO goal |",
        "|---|:---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, (what, live) in SETTINGS.items():
        score = load(d, name)
        if score is None:
            print(f"skip {name}: no cached score")
            continue
        for a in [0.5] if name == "mars_g1" else ALPHAS:
            res = summarize(d, score <= a)
            lines.append(
                f"| {what} | {'yes' if live else 'no'} | {'–' if name == 'mars_g1' else a} | "
                f"{cell(res, 'sc')} | {cell(res, 'dco')} |"
            )
    OUT.mkdir(exist_ok=True)
    (OUT / "sweep.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
