"""Which term of sc-mars2's risk costs the savings? Drop one at a time (issue 23).

    python research/beyond/terms.py    # → results/terms.md

On the development pools (12 regular + 3 contested, seed 1), at the shipped priors, the risk of
mars.method.riskstop.predictive_risk with one ingredient changed:

* ``union → max``: the largest challenger's tail instead of the union bound's sum (a lower bound
  of P(some challenger wins): the most a tighter bound could gain);
* ``no landing variance``: without G² · Var(D_L − D_c), the Dirichlet uncertainty of where
  leavers land;
* ``no shared-rate variance``: without the leaving rates' shared uncertainty (the holders' terms
  that grow with their square).

Each is a diagnostic, not a candidate: the last two drop uncertainties that are real, the first
is not a bound. The rows show where the caution sits and what each part buys on contested pools.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import tune
from common import (
    contested_pools,
    contexts,
    pool_effect,
    pools,
    regular_and_contested,
    walked,
)

from mars.method import riskstop

OUT = Path(__file__).resolve().parent / "results"
ALPHAS = [0.02, 0.05, 0.1, 0.2]
ORIGINAL = riskstop.predictive_risk
EDITS = {
    "shipped": None,
    "union → max": ("np.minimum(p.sum(axis=2), 1.0)", "p.max(axis=2)"),
    "no landing variance": ("if conc is not None:  # + Qt²", "if False:  # + Qt²"),
    "no shared-rate variance": (
        "    if shared is not None:\n        # ∂E",
        "    if False:\n        # ∂E",
    ),
}


def variant(edit):
    """predictive_risk with one source edit (asserted to apply)."""
    if edit is None:
        return ORIGINAL
    src = inspect.getsource(ORIGINAL)
    assert edit[0] in src, edit
    ns = dict(riskstop.__dict__)
    exec(src.replace(edit[0], edit[1]), ns)
    return ns["predictive_risk"]


def outcomes(ctx, fns) -> dict:
    w = walked(ctx, "sc")
    out = w.baseline()
    for name, fn in fns.items():
        rl = tune.rule(ctx, "sc", riskstop.KAPPA, riskstop.TAU)
        riskstop.predictive_risk = fn
        try:
            risk = np.stack([np.where(s.has_votes, rl.risk(s), 1.0) for s in w.snaps], axis=1)
        finally:
            riskstop.predictive_risk = ORIGINAL
        for a in ALPHAS:
            out[f"{name}/{a}"] = w.stop_at(risk, a)[:2]
    return out


def main() -> str:
    fns = {name: variant(edit) for name, edit in EDITS.items()}
    res = {}
    for spec in pools(1, real=False) + contested_pools(1):
        res[spec.name] = [outcomes(ctx, fns) for ctx in contexts(spec)]
        print(spec.name, flush=True)
    lines = [
        "Development pools, shipped priors (κ = 4, τ = 4); per α: the 12 regular pools' mean share "
        "of oracle-first's savings (worst pool) / the worst regular Δacc (pp) / contested aime, "
        "hmmt, flat Δacc (pp). `research/beyond/terms.py`.\n",
        "| risk | " + " | ".join(f"α = {a:g}" for a in ALPHAS) + " |",
        "|---|" + "---|" * len(ALPHAS),
    ]
    for name in fns:
        cells = []
        for a in ALPHAS:
            per = {pool: pool_effect(qs, f"{name}/{a}") for pool, qs in res.items()}
            reg, con = regular_and_contested(per)
            cells.append(
                f"{np.mean([v[1] for v in reg]):.1f} ({min(v[1] for v in reg):.1f}) / "
                f"{min(v[0] for v in reg):+.2f} / " + " ".join(f"{v[0]:+.1f}" for v in con)
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    md = "\n".join(lines)
    OUT.mkdir(exist_ok=True)
    (OUT / "terms.md").write_text(md + "\n")
    return md


if __name__ == "__main__":
    print(main())
