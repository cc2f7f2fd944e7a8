"""Baseline methods per pool and question (SC and DeepConf pipelines), cached as JSON.

python research/beyond/baselines.py [--seed 1] [--disjoint]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from common import CACHE, baselines, contexts, pools


def run(seed: int, disjoint: bool = False) -> dict:
    path = CACHE / f"baselines.s{seed}{'.disjoint' if disjoint else ''}.json"
    out = json.loads(path.read_text()) if path.exists() else {}
    for spec in pools(seed):
        if spec.name in out:
            continue
        t0 = time.time()
        per_q = {}
        for ctx in contexts(spec, disjoint=disjoint):
            per_q[ctx.arr.qid] = {p: baselines(ctx, p) for p in spec.pipelines}
        out[spec.name] = per_q
        path.write_text(json.dumps(out))
        print(f"{spec.name}: {time.time() - t0:.1f} s", flush=True)
    return out


def table(out: dict) -> None:
    for name, per_q in out.items():
        for p in next(iter(per_q.values())):
            ms = next(iter(per_q.values()))[p].keys()
            row = []
            for m in ms:
                acc = np.mean([per_q[q][p][m]["acc"] for q in per_q])
                sav = np.mean([per_q[q][p][m]["sav"] for q in per_q])
                row.append(f"{m} {acc:5.1f}/{sav:4.1f}")
            print(f"{name:28s} " + " | ".join(row))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--disjoint", action="store_true")
    a = ap.parse_args()
    table(run(a.seed, a.disjoint))
