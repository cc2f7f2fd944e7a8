"""The two-axis frontier: total tokens saved against sequential tokens, with the goal drawn.
Its points, the frontier and the goal are :mod:`mars.report.data.twoaxis`'; per pool and samples
a panel (kept points filled, the others hollow, the frontier dashed, the goal shaded) and a key
beside it."""

from __future__ import annotations

from pathlib import Path

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..collect import Results
from ..data.twoaxis import ACCURACY_TOLERANCE, LATENCY_REFERENCE, SAVED_GOAL, two_axis_points
from .base import FORMATS, MARS_COLOR, OTHER_COLOR, FigureOut, finish, pool_sources, style


def fig_two_axis(results: Results, out_dir: Path, formats=FORMATS) -> FigureOut:
    """Tokens saved against sequential tokens per pool and samples, frontier and goal drawn."""
    df = two_axis_points(results)
    fo = FigureOut(
        "fig-two-axis",
        "The two-axis frontier: total tokens saved and sequential tokens",
        "Per pool and protocol (one row per set of runs that drew the same samples), every "
        "method of those runs: total tokens saved against the full-budget vote (SC, %) and "
        f"mean sequential tokens per question, what a user waits for. Filled: accuracy within "
        f"{ACCURACY_TOLERANCE} points of SC's; hollow: further below (accuracy in the key). The "
        "dashed line joins the frontier of the filled points (none beats them on both axes); "
        f"the shaded box is the goal: at least {SAVED_GOAL:.0f} % saved and no more sequential "
        f"tokens than Parallel-Probe's controller ({LATENCY_REFERENCE}). Methods that launch "
        "traces in rounds move right and up; methods that start every trace at once sit low.",
        data=df,
    )
    panels = list(dict.fromkeys(df.panel)) if len(df) else []
    shown = panels[:6]
    heights = [max(3.4, 0.5 + 0.105 * (1 + int((df.panel == p).sum()))) for p in shown] or [3.4]
    with style():
        nrows = max(len(shown), 1)
        fig, axes = plt.subplots(
            nrows,
            2,
            figsize=(9.5, 0.6 + sum(heights)),
            squeeze=False,
            layout="constrained",
            gridspec_kw={"width_ratios": [1, 0.8], "height_ratios": heights},
        )
        if not shown:
            axes[0][0].text(0.5, 0.5, "no results with sequential tokens", ha="center")
            for ax in axes[0]:
                ax.set_axis_off()
            fo.notes.append("no results with sequential tokens")
        for (ax, key), panel in zip(axes, shown):
            sub = df[df.panel == panel]
            sub = sub[np.isfinite(sub.saved_pct.astype(float))].reset_index(drop=True)
            first = df[df.panel == panel].iloc[0]
            title = (
                f"{results.model_title(first.model)} · {first.dataset} · {first.protocol} protocol"
            )
            same_pool = df[(df.model == first.model) & (df.dataset == first.dataset)]
            if same_pool.panel.nunique() > 1:  # several samples of one pool: name the runs
                title += " · " + ", ".join(dict.fromkeys(df[df.panel == panel].setting))
            ax.set_title(_short(title), fontsize=9, loc="left")
            if len(sub) == 0:
                ax.text(0.5, 0.5, "no full-budget vote in these runs", ha="center")
                ax.set_axis_off()
            else:
                _panel(ax, sub)
            key.set_axis_off()
            lines = [f"{'':>3} {'method':<34} {'acc':>5} {'saved':>6} {'seq':>7}"]
            for i, p in sub.iterrows():
                mark = "✓" if p.goal is True else " "
                lines.append(
                    f"{i + 1:>2}{mark} {p.label[:34]:<34} {p.accuracy_pct:5.1f} "
                    f"{p.saved_pct:5.1f}% {p.seq_tokens_mean / 1e3:6.1f}k"
                )
            text = key.text(0, 1, "\n".join(lines), va="top", ha="left", fontsize=5.6)
            text.set_family("monospace")
            text.set_in_layout(False)  # the row is sized for it; the axes keep their room
    if len(shown) < len(panels):
        fo.notes.append("the first 6 pools and samples are drawn; the CSV holds them all")
    pairs = df[df.panel.isin(shown)][["model", "dataset"]].drop_duplicates()
    fo.label_data(pool_sources(results, list(pairs.itertuples(index=False, name=None))))
    return finish(fo, fig, out_dir, formats)


def _short(title: str, n: int = 90) -> str:
    return title if len(title) <= n else title[: n - 1] + "…"


def _panel(ax, sub: pd.DataFrame) -> None:
    x, y = sub.saved_pct.to_numpy(float), sub.seq_tokens_mean.to_numpy(float) / 1e3
    goal = sub.goal.dropna()
    ref = sub[sub.method == LATENCY_REFERENCE]
    if len(goal) and len(ref):
        limit = float(ref.seq_tokens_mean.iloc[0]) / 1e3
        ax.fill_between([SAVED_GOAL, 100], 1e-3, limit, color="#2ca02c", alpha=0.12, lw=0)
        ax.axhline(limit, color="#2ca02c", lw=0.6, ls=":")
        ax.axvline(SAVED_GOAL, color="#2ca02c", lw=0.6, ls=":")
    kept = sub.kept.to_numpy(bool)
    ax.scatter(x[kept], y[kept], s=28, color=MARS_COLOR, edgecolor="white", lw=0.5, zorder=3)
    ax.scatter(x[~kept], y[~kept], s=28, facecolor="none", edgecolor=OTHER_COLOR, lw=0.9, zorder=3)
    front = sub[sub.frontier].sort_values("saved_pct")
    if len(front) > 1:
        ax.step(
            front.saved_pct,
            front.seq_tokens_mean / 1e3,
            where="pre",
            color=MARS_COLOR,
            lw=0.8,
            ls="--",
            zorder=2,
        )
    for i in range(len(sub)):
        ax.annotate(str(i + 1), (x[i], y[i]), fontsize=6, xytext=(3, 2), textcoords="offset points")
    ax.set_xlim(min(-5.0, float(np.nanmin(x)) - 5) if len(x) else -5, 100)
    ys = y[np.isfinite(y) & (y > 0)]
    if len(ys) and ys.max() > 10 * ys.min():  # a decade or more (one trace per round): log
        ax.set_yscale("log")
        ax.set_ylim(ys.min() / 1.5, ys.max() * 1.5)
        ax.yaxis.set_major_formatter(mpl.ticker.StrMethodFormatter("{x:,.0f}"))
        ax.yaxis.set_minor_formatter(mpl.ticker.NullFormatter())
    else:
        ax.set_ylim(0, max(float(ys.max()) * 1.08, 1.0) if len(ys) else 1)
    ax.set_xlabel("total tokens saved against SC (%)")
    ax.set_ylabel("sequential tokens per question (k)")
