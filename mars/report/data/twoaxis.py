"""The two-axis frontier's points: total tokens saved against sequential tokens.

A method that stops running traces saves total tokens and latency together; one that launches
traces in rounds (sample-more rules, MARS2 in waves) trades latency for total tokens. Per pool and
protocol, every method of every run that drew the same samples (e.g. ``sc-mars2-waves`` at several
wave sizes, each its own run) is one point: total tokens saved against the full-budget vote (SC)
and the sequential tokens a user waits for; the methods within :data:`ACCURACY_TOLERANCE` points
of SC's accuracy are kept and make the frontier (the points no other kept point beats on both
axes). The goal of issue 34 — at least :data:`SAVED_GOAL` % of SC's total tokens saved, no more
sequential tokens than Parallel-Probe's controller (``pp-main``) in the same runs — is judged where
both reference methods were run.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...method.registry import METHODS, PROBE_CONTROLLER, SELF_CONSISTENCY
from ..collect import Results
from ..names import method_label

#: accuracy within this many points of SC's counts as kept
ACCURACY_TOLERANCE = 0.5
#: the goal's total tokens saved against SC (%)
SAVED_GOAL = 45.0
#: the latency reference: Parallel-Probe's main-table controller
LATENCY_REFERENCE = next(m.name for m in METHODS.values() if m.rule == PROBE_CONTROLLER)
COLUMNS = [
    "panel",
    "model",
    "dataset",
    "protocol",
    "setting",
    "method",
    "label",
    "accuracy_pct",
    "tokens_mean",
    "seq_tokens_mean",
    "saved_pct",
    "kept",
    "frontier",
    "goal",
]


def two_axis_points(results: Results) -> pd.DataFrame:
    """Every method of every run, grouped by pool and samples, placed against the group's SC:
    accuracy, total and sequential tokens, tokens saved, whether it keeps SC's accuracy, is on
    the frontier and meets the goal (NaN where the group lacks SC or the latency reference)."""
    groups: dict[tuple, list[dict]] = {}
    # pool by pool, the main setting's runs first: its panel opens the pool's
    for run in [r for pair in results.pairs for r in results.runs_of(*pair)]:
        key = (run.model, run.dataset, tuple(sorted(run.sampling.items())), run.checksum)
        for method in run.methods:
            ov = run.overall[method]
            m = METHODS.get(method)
            if ov.get("seq_tokens_mean") is None or (m is not None and m.reads_future):
                continue
            s = run.settings(method)
            groups.setdefault(key, []).append(
                {
                    "model": run.model,
                    "dataset": run.dataset,
                    "protocol": s.get("protocol") or "bootstrap",
                    "setting": run.setting,
                    "method": method,
                    "label": method_label(method, s)[0],
                    "accuracy_pct": float(ov["accuracy_pct"]),
                    "tokens_mean": float(ov["tokens_mean"]),
                    "seq_tokens_mean": float(ov["seq_tokens_mean"]),
                }
            )
    frames = []
    for panel, rows in enumerate(groups.values()):
        df = pd.DataFrame(rows)
        df.insert(0, "panel", panel)
        # a method run alike in several runs (SC beside every setting) is one point; one run
        # under other stopping settings its label does not show is told by its setting
        df = df.drop_duplicates(["method", "accuracy_pct", "tokens_mean", "seq_tokens_mean"])
        twice = df.duplicated("label", keep=False)
        df.loc[twice, "label"] = df.label[twice] + " [" + df.setting[twice] + "]"
        df = df.reset_index(drop=True)
        sc = df[df.method == SELF_CONSISTENCY]
        ref = df[df.method == LATENCY_REFERENCE]
        if len(sc):
            df["saved_pct"] = 100 * (1 - df.tokens_mean / float(sc.tokens_mean.iloc[0]))
            df["kept"] = df.accuracy_pct >= float(sc.accuracy_pct.iloc[0]) - ACCURACY_TOLERANCE
        else:
            df["saved_pct"], df["kept"] = np.nan, False
        kept = df[df.kept]
        df["frontier"] = [
            bool(r.kept)
            and not (
                (kept.saved_pct >= r.saved_pct)
                & (kept.seq_tokens_mean <= r.seq_tokens_mean)
                & ((kept.saved_pct > r.saved_pct) | (kept.seq_tokens_mean < r.seq_tokens_mean))
            ).any()
            for r in df.itertuples()
        ]
        if len(sc) and len(ref):
            limit = float(ref.seq_tokens_mean.iloc[0])
            df["goal"] = df.kept & (df.saved_pct >= SAVED_GOAL) & (df.seq_tokens_mean <= limit)
        else:
            df["goal"] = np.nan
        frames.append(df)
    return (
        pd.concat(frames, ignore_index=True)[COLUMNS] if frames else pd.DataFrame(columns=COLUMNS)
    )
