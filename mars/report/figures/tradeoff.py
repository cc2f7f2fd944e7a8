"""The accuracy–savings trade-off: one panel per pool with a curve per swept knob and the single
points beside them, each also as a live run pays it (its warmup, its probes: a thin dashed curve of
the curve's colour, a small black mark by a single point). Its curves are
:mod:`mars.report.data.tradeoff`'; nothing here simulates."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from ...method.registry import SWEEP_POINTS
from ...method.settings import SPECS
from ..collect import Results
from ..data.tradeoff import tradeoff_frames, tradeoff_points
from .base import (
    FORMATS,
    PAID_COLOR,
    PAID_LABEL,
    FigureOut,
    draw_paid,
    finish,
    legend_entries,
    paid_differs,
    paid_handle,
    paid_missing,
    paid_missing_note,
    style,
)

#: the single points' markers and colours (full-budget vote, calibrated MARS, oracle-first)
POINT_MARKS = dict(zip(SWEEP_POINTS, (("X", "#222222"), ("*", "#1f77b4"), ("D", "#7f7f7f"))))


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _differs(df) -> list[bool]:
    return [paid_differs(a, b) for a, b in zip(df.savings_pct, df.savings_paid_pct)]


def _paid_curve(ax, sub, color) -> bool:
    """A curve as a live run pays it, where that differs from the paper's: a thin dashed curve of
    its colour through the paid points, each a small black mark (``gid`` "paid"); whether it was
    drawn."""
    known = sub[sub.savings_paid_pct.notna()]
    if not any(_differs(known)):
        return False
    ax.plot(
        known.savings_paid_pct,
        known.accuracy_pct,
        linewidth=0.9,
        linestyle="--",
        color=color,
        marker="D",
        markersize=2.5,
        markerfacecolor=PAID_COLOR,
        markeredgecolor=PAID_COLOR,
        zorder=2,
        gid="paid",
    )
    return True


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
        "tradeoff section makes them). Those savings are the paper's (the warmup free); thin "
        "dashed curves of the same colour, and small black diamonds joined to the single points "
        "by grey lines, are the same savings as a live run pays them (the question's warmup "
        "traces, for a method that reads one, and the probes where the pool records their "
        "cost), drawn where the two differ. The numbers (paid: savings_paid_pct), and the "
        "setting of each point, are in fig-tradeoff.csv.",
        data=data,
    )
    fo.label_data(results.sources([r for r in results.runs if r.pair in set(frames)]))
    missing = paid_missing(data.savings_pct, data.savings_paid_pct)
    if missing:
        fo.notes.append(paid_missing_note(missing))
    paid_shown = False
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
                paid_shown |= _paid_curve(ax, sub, palette[fam])
            singles = df[df.param.isna()]
            paid_shown |= draw_paid(ax, singles, zorder=5)
            for _, r in singles.iterrows():
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
            if paid_shown:
                entries[PAID_LABEL] = paid_handle()
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
