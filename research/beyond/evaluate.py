"""Final evaluation of sc-mars2 / dco-mars2 through the simulator, against the first version of the
rule (issue 14), the paper's methods and the oracle.

    python research/beyond/evaluate.py --set dev          # synthetic development pools (seed 1)
    python research/beyond/evaluate.py --set heldout      # held out for this version (seed 3)
    python research/beyond/evaluate.py --set heldout2     # held out for the first version (seed 2)
    python research/beyond/evaluate.py --set contested    # the contested stress tests (seed 1)
    python research/beyond/evaluate.py --set contested3   # the same presets, held out (seed 3)
    python research/beyond/evaluate.py --set real         # real Qwen3-8B AIME 2024 (SC only)
    python research/beyond/evaluate.py --set dev --disjoint   # bootstrap from non-warmup traces

Writes research/beyond/results/eval.{set}[.disjoint].{json,md}. Probe-inclusive savings: the
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
from common import BASELINES, REAL_POOL, PoolSpec, contested_pools, contexts, method_summary, pools

from mars.method.registry import get_method
from mars.method.walk import run_method

OUT = Path(__file__).resolve().parent / "results"
PROBE_EST = 30.0  # tokens per probe for the real pool (synthetic: suffix 24 + a few answer tokens)
NEW = {"sc": methods2.SC_MARS2, "dco": methods2.DCO_MARS2}
V1 = "first version"
SETS = {
    "dev": lambda: pools(1, real=False),
    "heldout": lambda: pools(3, real=False),
    "heldout2": lambda: pools(2, real=False),
    "contested": lambda: contested_pools(1),
    "contested3": lambda: contested_pools(3),
    "real": lambda: [PoolSpec("real/aime24", REAL_POOL, "qwen3-8b-real", "aime_2024", False)],
}


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
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in s.items()}


def evaluate(specs, disjoint: bool = False) -> dict:
    out = {}
    for spec in specs:
        t0 = time.time()
        rows = {}
        for ctx in contexts(spec, disjoint=disjoint):
            per = {}
            pipes = [p for p in spec.pipelines if p == "sc" or ctx.arr.has_confs]
            for p in pipes:
                res = {name: run_method(ctx, get_method(name)) for name in BASELINES[p]}
                t1 = time.perf_counter()
                res[NEW[p].name] = run_method(ctx, NEW[p])
                dt = time.perf_counter() - t1
                res[V1] = methods2.run_first_version(ctx, p)
                full = res[p]
                d = {}
                for name, r in res.items():
                    d[name] = summary(ctx, r) if name != p else {**method_summary(r), "sav_p": 0.0}
                    d[name]["dis"] = round(100 * methods2.disagreement(r, full), 4)
                d[NEW[p].name]["seconds"] = round(dt, 4)
                per[p] = d
            rows[int(ctx.arr.qid)] = per
        out[spec.name] = rows
        print(f"{spec.name}: {time.time() - t0:.1f} s", flush=True)
    return out


def table(out: dict) -> tuple[list[dict], str]:
    lines = [
        "| pool | pipeline | full budget | MARS2 (Δ) | savings | w/ probes | oracle | share | "
        "first version (Δ) / savings / share | MARS-cal (Δ) / savings / share | goal |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    recs = []
    for name, rows in out.items():
        qs = list(rows)
        for p in rows[qs[0]]:
            new = NEW[p].name
            cal = "sc-mars-cal" if p == "sc" else "dco-mars-cal"
            orc = "oracle-first" if p == "sc" else "oracle-dco-first"

            def mean(m, k, rows=rows, p=p, qs=qs):
                return float(np.mean([rows[q][p][m][k] for q in qs if p in rows[q]]))

            base, acc, sav, savp, osav = (
                mean(p, "acc"),
                mean(new, "acc"),
                mean(new, "sav"),
                mean(new, "sav_p"),
                mean(orc, "sav"),
            )
            cacc, csav = mean(cal, "acc"), mean(cal, "sav")
            vacc, vsav = mean(V1, "acc"), mean(V1, "sav")
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
                "v1_acc": vacc,
                "v1_sav": vsav,
                "v1_share": vsav / osav,
                "v1_ok": vacc >= base - 0.5 and vsav / osav >= 0.85,
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
                f"{savp:.1f}{est} | {osav:.1f} | {100 * share:.0f} % | "
                f"{vacc:.1f} ({vacc - base:+.1f}) / {vsav:.1f} / {100 * vsav / osav:.0f} % | "
                f"{cacc:.1f} ({cacc - base:+.1f}) / {csav:.1f} / {100 * csav / osav:.0f} % | "
                f"{'yes' if ok else 'no'} |"
            )
    for p in ("sc", "dco"):
        rs = [r for r in recs if r["pipeline"] == p]
        if rs:
            for tag, a, sh, okk in (
                ("MARS2", "acc", "share", "ok"),
                ("first version", "v1_acc", "v1_share", "v1_ok"),
            ):
                lines.append(
                    f"\n{p}, {tag}: goal met in {sum(r[okk] for r in rs)}/{len(rs)}; mean Δacc "
                    f"{np.mean([r[a] - r['base'] for r in rs]):+.2f} "
                    f"(min {min(r[a] - r['base'] for r in rs):+.2f}); "
                    f"mean share {100 * np.mean([r[sh] for r in rs]):.1f} % "
                    f"(min {100 * min(r[sh] for r in rs):.1f} %)"
                )
    lines.append(coin_flips(out))
    return recs, "\n".join(lines)


def coin_flips(out: dict, lo: float = 25.0, hi: float = 75.0) -> str:
    """Questions whose full-budget vote is about a coin flip (its accuracy in [lo, hi] %): how the
    rules do there, question by question (the failure mode of issue 23)."""
    lines = [
        f"\nQuestions whose full-budget accuracy is within {lo:g}–{hi:g} % (coin flips):\n",
        "| pool | q | pipeline | full budget | MARS2 | first version | MARS-cal |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    worst = {}
    for name, rows in out.items():
        for q, per in rows.items():
            for p, d in per.items():
                base = d[p]["acc"]
                if not lo <= base <= hi:
                    continue
                cal = "sc-mars-cal" if p == "sc" else "dco-mars-cal"
                new, v1 = d[NEW[p].name]["acc"], d[V1]["acc"]
                worst.setdefault(p, []).append((new - base, v1 - base))
                lines.append(
                    f"| {name} | {q} | {p} | {base:.0f} | {new:.0f} | {v1:.0f} | "
                    f"{d[cal]['acc']:.0f} |"
                )
    for p, v in worst.items():
        a = np.array(v)
        lines.append(
            f"\n{p}: {len(a)} coin-flip questions; MARS2 mean Δ {a[:, 0].mean():+.1f} pp (worst "
            f"{a[:, 0].min():+.1f}), first version mean Δ {a[:, 1].mean():+.1f} pp (worst "
            f"{a[:, 1].min():+.1f})"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", choices=sorted(SETS), default="dev")
    ap.add_argument("--disjoint", action="store_true")
    a = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    tag = f"{a.set}{'.disjoint' if a.disjoint else ''}"
    res = evaluate(SETS[a.set](), a.disjoint)
    (OUT / f"eval.{tag}.json").write_text(json.dumps(res))
    _, md = table(res)
    (OUT / f"eval.{tag}.md").write_text(md + "\n")
    print(md)
