"""The accuracy–savings trade-off: one panel per pool with a curve per swept knob and the single
points beside them. Its curves are :mod:`mars.report.data.tradeoff`'; nothing here simulates."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from ...method.registry import SWEEP_POINTS
from ...method.settings import SPECS
from ..collect import Results
from ..data.tradeoff import tradeoff_frames, tradeoff_points
from .base import FORMATS, FigureOut, finish, legend_entries, style

#: the single points' markers and colours (full-budget vote, calibrated MARS, oracle-first)
POINT_MARKS = dict(zip(SWEEP_POINTS, (("X", "#222222"), ("*", "#1f77b4"), ("D", "#7f7f7f"))))


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def fig_tradeoff(results: Results, out_dir: Path, formats=FORMATS) -> FigureOut | None:
    """Accuracy against savings per sweep, one panel per pool with a curve; None when no pool
    has one."""
    frames = tradeoff_frames(results)
    if not frames:
        return None
    labels = list(frames)
    data = tradeoff_points(frames)
    fo = FigureOut(
        "fig-tradeoff",
        "Accuracy–savings trade-off",
        "Accuracy against mean per-question token savings when each rule's knob is swept (MARS "
        "with a fixed γ, the certified rule's δ, Parallel-Probe's u, the consensus share), with "
        "the full-budget vote, calibrated MARS and the oracle stop as single points: ordinary "
        "simulations of one pool at settings that differ only in the swept knobs (the workflow's "
        "tradeoff section makes them). The numbers, and the setting of each point, are in "
        "fig-tradeoff.csv.",
        data=data,
    )
    fo.label_data(results.sources([r for r in results.runs if r.pair in set(frames)]))
    palette = dict(
        zip(list(dict.fromkeys(data.family)) if len(data) else [], sns.color_palette("tab10"))
    )
    with style():
        n = max(len(labels), 1)
        fig, axes = plt.subplots(
            1, n, figsize=(max(1.0 + 4.2 * n, 10.0), 5.2), squeeze=False, layout="constrained"
        )
        for ax, label in zip(axes[0], labels):
            df = data[(data.model == label[0]) & (data.dataset == label[1])]
            curves = df[df.param.notna()]
            for fam, sub in curves.groupby("family", sort=False):
                sub = sub.sort_values("value")
                param = sub.param.iloc[0]
                sym = SPECS[param].symbol or param if param in SPECS else param
                vals = ", ".join(_fmt(v) for v in sub.value)
                ax.plot(
                    sub.savings_pct,
                    sub.accuracy_pct,
                    linewidth=1.4,
                    color=palette[fam],
                    zorder=2,
                    label=f"{fam} ({sym} = {vals})",
                )
                # marker size grows with the knob's value:
                # the curve's direction without text clutter
                ax.scatter(
                    sub.savings_pct,
                    sub.accuracy_pct,
                    s=np.linspace(10, 60, len(sub)),
                    color=palette[fam],
                    edgecolor="white",
                    linewidth=0.5,
                    zorder=3,
                )
            for _, r in df[df.param.isna()].iterrows():
                mk, col = POINT_MARKS.get(r.method, ("s", "#444444"))
                ax.scatter(
                    [r.savings_pct],
                    [r.accuracy_pct],
                    marker=mk,
                    s=110 if mk == "*" else 50,
                    color=col,
                    zorder=5,
                    label=r.family,
                    edgecolor="white",
                    linewidth=0.5,
                )
            r0 = df.iloc[0]
            ax.set_title(
                f"{label[0]}/{label[1]}: {int(r0.n_questions)} questions × "
                f"{int(r0.iterations)} samples, "
                f"budget {int(r0.budget)}",
                fontsize=9,
            )
            ax.set_xlabel("token savings (%)")
            ax.set_ylabel("accuracy (%)")
            lo, hi = df.accuracy_pct.min(), df.accuracy_pct.max()
            pad = max(2.0, 0.08 * (hi - lo))
            ax.set_ylim(max(lo - pad, -1), min(hi + pad, 101))
        if labels:
            entries = legend_entries(axes[0])
            fig.legend(
                list(entries.values()),
                list(entries),
                loc="outside lower center",
                ncol=2,
                frameon=False,
                fontsize=7,
                title="marker size grows with the swept value",
                title_fontsize=7,
            )
        else:
            axes[0][0].set_axis_off()
    return finish(fo, fig, out_dir, formats)
