"""Final evaluation of sc-mars2 / dco-mars2 through the simulator, against baselines and the oracle.

    python research/beyond/evaluate.py                 # dev pools (seed 1) + real AIME 2024
    python research/beyond/evaluate.py --seed 2        # held-out synthetic pools (seed 2) + real
    python research/beyond/evaluate.py --disjoint      # bootstrap from non-warmup traces only

Writes research/beyond/results/eval.s{seed}[.disjoint].{json,md}. Probe-inclusive savings: the
synthetic pools record probe cost; the real pool does not, so it is estimated with the synthetic
pools' mean cost per probe (PROBE_EST tokens, stated in the table).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import methods2
import numpy as np
from common import BASELINES, contexts, method_summary, pools

from mars.methods import get_method
from mars.simulate import run_method

OUT = Path(__file__).resolve().parent / "results"
PROBE_EST = (
    30.0  # tokens per probe for the real pool (synthetic pools: suffix 24 + a few answer tokens)
)
NEW = {"sc": methods2.SC_MARS2, "dco": methods2.DCO_MARS2}


def probe_estimate(ctx, res) -> np.ndarray:
    """Probe tokens per iteration when the pool has no probe cost: PROBE_EST per running trace per
    checkpoint up to the decision (the simulator's accounting, with a constant cost)."""
    arr, S = ctx.arr, ctx.samples
    grid = arr.grid
    m = len(grid)
    stop_k = np.searchsorted(grid, res.position)
    stop_k = np.where(res.stopped_by == "budget", m - 1, stop_k)
    run = arr.run_lengths[S]
    probed = (grid[None, None, :] < run[:, :, None]) & (
        np.arange(m)[None, None, :] <= stop_k[:, None, None]
    )
    return PROBE_EST * probed.sum(axis=(1, 2))


def summary(ctx, res) -> dict:
    s = method_summary(res)
    if np.isnan(res.probe_tokens).any():  # the pool records no probe cost: estimate it
        s["sav_p"] = 100 * np.mean(1 - (res.tokens + probe_estimate(ctx, res)) / res.baseline)
        s["probe_est"] = True
    return s


def evaluate(seed: int, disjoint: bool = False, real: bool = True) -> dict:
    out = {}
    for spec in pools(seed, real=real):
        t0 = time.time()
        rows = {}
        for ctx in contexts(spec, disjoint=disjoint):
            per = {}
            for p in spec.pipelines:
                res = {name: run_method(ctx, get_method(name)) for name in BASELINES[p]}
                t1 = time.perf_counter()
                res[NEW[p].name] = run_method(ctx, NEW[p])
                dt = time.perf_counter() - t1
                full = res[p]
                d = {}
                for name, r in res.items():
                    d[name] = summary(ctx, r) if name != p else {**method_summary(r), "sav_p": 0.0}
                    d[name]["dis"] = 100 * float(np.mean(r.answer != full.answer))
                d[NEW[p].name]["seconds"] = dt
                per[p] = d
            rows[int(ctx.arr.qid)] = per
        out[spec.name] = rows
        print(f"{spec.name}: {time.time() - t0:.1f} s", flush=True)
    return out


def table(out: dict) -> tuple[list[dict], str]:
    lines = [
        "| pool | pipeline | full-budget acc | MARS2 acc (Δ) | MARS2 savings | w/ probes | "
        "oracle savings | "
        "share of oracle | MARS-cal acc (Δ) / savings / share | goal |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    recs = []
    for name, rows in out.items():
        qs = list(rows)
        for p in rows[qs[0]]:
            new = NEW[p].name
            cal = "sc-mars-cal" if p == "sc" else "dco-mars-cal"
            orc = "oracle-first" if p == "sc" else "oracle-dco-first"

            def mean(m, k, rows=rows, p=p, qs=qs):
                return float(np.mean([rows[q][p][m][k] for q in qs]))

            base, acc, sav, savp, osav = (
                mean(p, "acc"),
                mean(new, "acc"),
                mean(new, "sav"),
                mean(new, "sav_p"),
                mean(orc, "sav"),
            )
            cacc, csav = mean(cal, "acc"), mean(cal, "sav")
            share = sav / osav
            ok = acc >= base - 0.5 and share >= 0.85
            est = " (est.)" if rows[qs[0]][p][new].get("probe_est") else ""
            rec = {
                "pool": name,
                "pipeline": p,
                "base": base,
                "acc": acc,
                "sav": sav,
                "sav_p": savp,
                "oracle": osav,
                "share": share,
                "cal_acc": cacc,
                "cal_sav": csav,
                "cal_share": csav / osav,
                "ok": ok,
                "dis": mean(new, "dis"),
                "seconds": mean(new, "seconds"),
            }
            recs.append(rec)
            lines.append(
                f"| {name} | {p} | {base:.1f} | {acc:.1f} ({acc - base:+.1f}) | {sav:.1f} | "
                f"{savp:.1f}{est} | "
                f"{osav:.1f} | {100 * share:.0f} % | {cacc:.1f} ({cacc - base:+.1f}) / "
                f"{csav:.1f} / "
                f"{100 * csav / osav:.0f} % | {'yes' if ok else 'no'} |"
            )
    for p in ("sc", "dco"):
        rs = [r for r in recs if r["pipeline"] == p]
        if rs:
            lines.append(
                f"\n{p}: goal met in {sum(r['ok'] for r in rs)}/{len(rs)}; mean Δacc "
                f"{np.mean([r['acc'] - r['base'] for r in rs]):+.2f} "
                f"(min {min(r['acc'] - r['base'] for r in rs):+.2f}); "
                f"mean share {100 * np.mean([r['share'] for r in rs]):.1f} % "
                f"(min {100 * min(r['share'] for r in rs):.1f} %)"
            )
    return recs, "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--disjoint", action="store_true")
    a = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    tag = f"s{a.seed}{'.disjoint' if a.disjoint else ''}"
    res = evaluate(a.seed, a.disjoint)
    (OUT / f"eval.{tag}.json").write_text(json.dumps(res))
    _, md = table(res)
    (OUT / f"eval.{tag}.md").write_text(md + "\n")
    print(md)
