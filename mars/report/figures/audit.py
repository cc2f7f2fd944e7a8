"""Promised against realised risk: per method that states the risk it takes, the rate at which its
stopped answer differed from the full-budget vote of the same samples, against that risk. Its
numbers are :func:`mars.report.data.audit.promise_frame`'s."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import seaborn as sns

from ..collect import Results
from ..data.audit import promise_frame
from .base import FORMATS, FigureOut, finish, style


def fig_promise(results: Results, out_dir: Path, formats=FORMATS) -> FigureOut | None:
    """Realised against promised risk per method and pool (the diagonal: the promise kept
    exactly); None when no run holds a method that states its risk beside its full-budget
    vote."""
    df = promise_frame(results)
    if df.empty:
        return None
    fo = FigureOut(
        "fig-promise",
        "Promised against realised risk",
        "Per pool and method that states the risk it takes (MARS2: its α; the certified rule: "
        "its δ): the share of runs — a question and a bootstrap sample — whose early-stopped "
        "answer differs from the full-budget vote of the same sample (dot), and its one-sided "
        "95 % Clopper–Pearson upper bound (bar), against the promised risk. Under the diagonal "
        "the promise is kept on these samples. `mars audit` gives the same numbers, and on served "
        "traffic `mars serve --audit-rate` measures them live. The numbers are in "
        "fig-promise.csv.",
        data=df,
    )
    shown = set(zip(df.model, df.dataset, df.setting))
    fo.label_data(
        results.sources([r for r in results.runs if (r.model, r.dataset, r.setting) in shown])
    )
    with style():
        fig, ax = plt.subplots(figsize=(6.2, 5.0), layout="constrained")
        methods = list(dict.fromkeys(df.method))
        palette = dict(zip(methods, sns.color_palette("tab10", len(methods))))
        pools = list(dict.fromkeys(zip(df.model, df.dataset)))
        # a mark per pool, the marks again past the eighth pool (the default run has nine)
        marks = {pool: "osD^vP*X"[i % 8] for i, pool in enumerate(pools)}
        top = max(float(df.rate_upper95_pct.max()), float(df.promised_pct.max())) * 1.1 + 0.5
        # points of one promised value side by side, not on top of one another
        rank = df.groupby("promised_pct").cumcount().to_numpy()
        count = df.groupby("promised_pct").promised_pct.transform("size").to_numpy()
        dodge = (rank - (count - 1) / 2) * top * 0.015
        for i, r in enumerate(df.itertuples()):
            colour, mark = palette[r.method], marks[(r.model, r.dataset)]
            ax.errorbar(
                [r.promised_pct + dodge[i]],
                [r.rate_pct],
                yerr=[[0.0], [max(r.rate_upper95_pct - r.rate_pct, 0.0)]],
                fmt=mark,
                color=colour,
                ecolor=colour,
                capsize=3,
                markersize=6,
                label=f"{r.method} · {r.model}/{r.dataset}",
            )
        ax.plot([0, top], [0, top], linestyle="--", color="#777777", linewidth=1, zorder=0)
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_xlabel("promised risk (%)")
        ax.set_ylabel("answers different from the full-budget vote (%)")
        fig.legend(loc="outside lower center", ncol=2, frameon=False, fontsize=7)
    return finish(fo, fig, out_dir, formats)
