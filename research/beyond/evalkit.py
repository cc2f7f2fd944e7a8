"""Offline evaluation of stop-when-score-passes rules on the exploration dataset (no re-simulation).

A rule is a boolean matrix ``stop[row, k]`` (row = question × iteration); it stops at the first
checkpoint where it holds, answering the leader there; never → the full-budget answer and cost.
"""

from __future__ import annotations

import numpy as np
from common import CACHE


class Data:
    def __init__(self, seed: int = 1, disjoint: bool = False):
        z = np.load(CACHE / f"explore.s{seed}{'.disjoint' if disjoint else ''}.npz")
        self.names = list(z["names"])
        self.features = list(z["features"])
        for k in z.files:
            if k not in ("names", "features"):
                setattr(self, k, z[k])
        self.dco = self.pipeline
        # group id per (pool, pipeline, question)
        key = self.pool * 2 + self.dco
        self.group = key  # pool × pipeline
        self.qkey = key * 1000 + self.qid

    def f(self, name: str) -> np.ndarray:
        return self.X[..., self.features.index(name)]

    def groups(self):
        """(label, row mask) per pool × pipeline."""
        out = []
        for g in np.unique(self.group):
            label = self.names[g // 2] + (" dco" if g % 2 else " sc")
            out.append((label, self.group == g))
        return out


def outcome(d: Data, stop: np.ndarray):
    """Per row: stop index (M = never), correct, tokens, disagreement with the full-budget vote."""
    stop = stop & d.mask
    any_ = stop.any(axis=1)
    k = np.where(any_, np.argmax(stop, axis=1), d.mask.shape[1])
    r = np.arange(len(k))
    kk = np.minimum(k, d.mask.shape[1] - 1)
    correct = np.where(any_, d.lead_correct[r, kk], d.final_correct)
    tokens = np.where(any_, d.tokens[r, kk], d.baseline)
    dis = np.where(any_, d.y[r, kk], False)
    return k, correct, tokens, dis


def oracle_stop(d: Data) -> np.ndarray:
    return ~d.y


def per_question(d: Data, rows: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """Mean of ``vals`` per question among ``rows``."""
    qk = d.qkey[rows]
    _u, inv = np.unique(qk, return_inverse=True)
    return np.bincount(inv, weights=vals[rows].astype(float)) / np.bincount(inv)


def summarize(d: Data, stop: np.ndarray, base_stop: np.ndarray | None = None):
    """Per pool × pipeline: accuracy, savings, full-budget accuracy, oracle savings, disagreement"""
    _k, correct, tokens, dis = outcome(d, stop)
    _, _, otok, _ = outcome(d, oracle_stop(d))
    sav = 1 - tokens / d.baseline
    osav = 1 - otok / d.baseline
    res = {}
    for label, g in d.groups():
        acc = 100 * per_question(d, g, correct).mean()
        base = 100 * per_question(d, g, d.final_correct).mean()
        s = 100 * per_question(d, g, sav).mean()
        o = 100 * per_question(d, g, osav).mean()
        res[label] = {
            "acc": acc,
            "base": base,
            "dacc": acc - base,
            "sav": s,
            "oracle": o,
            "share": s / o if o else np.nan,
            "dis": 100 * per_question(d, g, dis).mean(),
        }
    return res


def show(res: dict, title: str = "", brief: bool = False):
    if title:
        print(f"== {title}")
    ok = 0
    for label, r in res.items():
        good = r["dacc"] >= -0.5 and r["share"] >= 0.85
        ok += good
        if not brief:
            print(
                f"  {label:28s} acc {r['acc']:5.1f} ({r['dacc']:+5.1f})  "
                f"sav {r['sav']:5.1f} / {r['oracle']:5.1f} "
                f"= {100 * r['share']:5.1f}%  dis {r['dis']:4.1f}  {'OK' if good else ''}"
            )
    sc = [r for lbl, r in res.items() if lbl.endswith("sc")]
    dc = [r for lbl, r in res.items() if lbl.endswith("dco")]
    for name, rs in (("SC", sc), ("DCO", dc)):
        if rs:
            print(
                f"  {name}: mean dacc {np.mean([r['dacc'] for r in rs]):+.2f}  "
                f"min dacc {min(r['dacc'] for r in rs):+.2f}  "
                f"mean share {100 * np.mean([r['share'] for r in rs]):.1f}%  "
                f"min share {100 * min(r['share'] for r in rs):.1f}%  "
                f"ok {sum(r['dacc'] >= -0.5 and r['share'] >= 0.85 for r in rs)}/{len(rs)}"
            )
    return ok
