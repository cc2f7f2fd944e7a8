"""Fig. 1 (left), calibrated MARS's savings per pool, and Fig. 4, the ablations: bars with 95 %
CIs, one panel per model, datasets on x, one bar per pipeline (SC, DeepConf); Fig. 4 (c–d) the
learned against the oracle switch probability. Their numbers are :mod:`mars.report.data.savings`'.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import cast

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..collect import Results
from ..data.savings import FIG1_METHODS, GAMMA_PAIRS, ORACLE_PAIRS, ablations, savings_summary
from .base import (
    FORMATS,
    PAID_COLOR,
    PAID_LABEL,
    PIPELINE_COLORS,
    FigureOut,
    finish,
    legend_entries,
    placeholder,
    pool_sources,
    style,
)


def _differences(pairs: dict) -> str:
    """``a − b, c − d``: the method pairs a panel subtracts, for its caption."""
    return ", ".join(f"{a} − {b}" for a, b in pairs.values())


def _bars(ax, df: pd.DataFrame, datasets: list[str], ylabel: str, labels: bool = True):
    """Grouped bars (dataset × pipeline) with 95 % CI error bars, drawn on the seaborn theme."""
    pipelines = [p for p in PIPELINE_COLORS if p in set(df.pipeline)]
    width = 0.8 / max(len(pipelines), 1)
    labelled = set()
    for j, p in enumerate(pipelines):
        sub = df[df.pipeline == p].set_index("dataset")
        for i, ds in enumerate(datasets):
            if ds not in sub.index:
                continue
            r = sub.loc[ds]
            x = i - 0.4 + width * (j + 0.5)
            ax.bar(
                x,
                r["mean"],
                width=width * 0.92,
                color=PIPELINE_COLORS[p],
                label=None if p in labelled else p,
                zorder=2,
            )
            labelled.add(p)
            if not np.isnan(r["ci_low"]):
                ax.errorbar(
                    x,
                    r["mean"],
                    yerr=[[r["mean"] - r["ci_low"]], [r["ci_high"] - r["mean"]]],
                    fmt="none",
                    ecolor="#222222",
                    elinewidth=1,
                    capsize=3,
                    zorder=3,
                )
            paid = r.get("paid_mean", np.nan)
            if not np.isnan(paid):  # what a live run pays: a black mark on the bar
                ax.plot(
                    x,
                    paid,
                    marker="D",
                    markersize=4,
                    color=PAID_COLOR,
                    linestyle="none",
                    label=None if "paid" in labelled else PAID_LABEL,
                    zorder=4,
                )
                labelled.add("paid")
            if labels:
                top = r["ci_high"] if not np.isnan(r["ci_high"]) else r["mean"]
                y = max(top, r["mean"], 0)
                ax.annotate(
                    f"{r['mean']:.1f}",
                    (x, y),
                    xytext=(0, 2),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
    ax.grid(axis="x", visible=False)
    ax.set_xticks(range(len(datasets)))
    ax.set_xticklabels(datasets)
    ax.set_xlim(-0.6, len(datasets) - 0.4)
    ax.set_ylabel(ylabel)
    ax.axhline(0, color="#444444", linewidth=0.8, zorder=1)


def _draw_model_panels(
    fig, df: pd.DataFrame, results: Results, ylabel: str, title: str, legend: bool = True
):
    """One bar panel per model (datasets on x, SC/DeepConf bars) into a figure or subfigure."""
    models = [m for m in results.models if m in set(df.model)]
    n = max(len(models), 1)
    widths = [max(sum(1 for (m, _) in results.pairs if m == model), 1) for model in models] or [1]
    axes = fig.subplots(1, n, sharey=True, squeeze=False, gridspec_kw={"width_ratios": widths})
    for ax, model in zip(axes[0], models):
        sub = df[df.model == model]
        datasets = [d for (m, d) in results.pairs if m == model and d in set(sub.dataset)]
        _bars(ax, sub, datasets, ylabel if ax is axes[0][0] else "")
        ax.set_title(results.model_title(model), fontsize=9)
    if not models:
        placeholder(axes[0][0], "no data")
    handles = legend_entries(axes[0])
    if handles and legend:
        fig.legend(
            list(handles.values()),
            list(handles),
            title="voting",
            loc="outside lower center",
            ncol=len(handles),
            frameon=False,
        )
    # a title no wider than its figure (one model: a narrow figure)
    inches = fig.get_figwidth() if hasattr(fig, "get_figwidth") else fig.figure.get_figwidth()
    fig.suptitle(textwrap.fill(title, max(30, int(inches * 11))), fontsize=10)
    # head-room for the value labels
    ymin, ymax = axes[0][0].get_ylim()
    axes[0][0].set_ylim(min(ymin, 0), ymax + 0.08 * (ymax - min(ymin, 0)))
    return axes[0]


def _panels_width(results: Results, df: pd.DataFrame) -> float:
    models = [m for m in results.models if m in set(df.model)]
    ndata = sum(1 for (m, _) in results.pairs if m in models)
    return 1.2 + 1.3 * max(ndata, 1) + 0.5 * max(len(models), 1)


def _model_panels(df: pd.DataFrame, results: Results, ylabel: str, title: str):
    fig = plt.figure(figsize=(max(_panels_width(results, df), 4.5), 3.0), layout="constrained")
    _draw_model_panels(fig, df, results, ylabel, title)
    return fig


def fig_savings(results: Results, out_dir: Path, formats=FORMATS) -> FigureOut:
    """Fig. 1 left: savings of calibrated MARS per model × dataset, SC and DeepConf, 95 % CI."""
    df = savings_summary(results)
    with style():
        fig = _model_panels(
            df,
            results,
            "token savings (%)",
            "Token savings of calibrated MARS (mean over questions, 95% CI)",
        )
    fo = FigureOut(
        "fig1-left-savings",
        "Fig. 1 (left): token savings per model and dataset",
        "Mean per-question token savings of calibrated MARS under self-consistency "
        f"({FIG1_METHODS['SC']}) and DeepConf Online ({FIG1_METHODS['DeepConf']}) voting, as the "
        "paper counts them (bars; error bars are 95% t-intervals across questions) and as a live "
        "run pays them (black diamonds: the question's warmup and the probes charged).",
        data=df,
    )
    if df.empty:
        fo.notes.append(f"no {' or '.join(FIG1_METHODS.values())} results")
    fo.label_data(pool_sources(results, zip(df.model, df.dataset)))
    return finish(fo, fig, out_dir, formats)


def fig_ablations(results: Results, out_dir: Path, formats=FORMATS) -> FigureOut:
    """Fig. 4: (a) savings from γ calibration, (b) savings gap oracle − learned q,
    (c–d) learned vs oracle q."""
    ab = ablations(results)
    gam, orc, bins, cps = ab.gamma, ab.oracle, ab.bins, ab.checkpoints
    fo = FigureOut(
        "fig4-ablations",
        "Fig. 4: γ calibration and the learned switch model",
        "(a) Savings added by per-question γ calibration over γ = 1 "
        f"({_differences(GAMMA_PAIRS)}; mean per-question difference, 95% CI). (b) Savings gap "
        "of oracle q over learned q, both pipelines at γ = 1 "
        f"({_differences(ORACLE_PAIRS)}). "
        "(c) Calibration of the learned switch probability: held-out running traces binned by "
        "learned q against the share that actually switch before the end (oracle q). (d) Mean "
        "learned q against the oracle switch rate at each checkpoint position.",
    )
    with style():
        wa, wb = _panels_width(results, gam), _panels_width(results, orc)
        ha, hb = (0.3 if gam.empty else 1.0), (0.3 if orc.empty else 1.0)
        if wa + wb <= 16:  # (a) beside (b): a figure a screen can show whole
            width = max(wa + wb, 10.0)
            fig = plt.figure(figsize=(width, 3.2 * max(ha, hb) + 3.6), layout="constrained")
            upper, bottom = cast(np.ndarray, fig.subfigures(2, 1, height_ratios=[max(ha, hb), 1.1]))
            top, mid = cast(np.ndarray, upper.subfigures(1, 2, width_ratios=[wa, wb]))
        else:  # many pools: (a) above (b)
            width = max(wa, wb, 9.0)
            fig = plt.figure(figsize=(width, 2.8 * (ha + hb) + 3.6), layout="constrained")
            # three rows: an array of subfigures (the stub's return type also allows a single one)
            top, mid, bottom = cast(np.ndarray, fig.subfigures(3, 1, height_ratios=[ha, hb, 1.25]))
        for sf, df, title, pairs in (
            (top, gam, "(a) savings gained by γ calibration over γ = 1", GAMMA_PAIRS),
            (mid, orc, "(b) savings gap at γ = 1: oracle q − learned q", ORACLE_PAIRS),
        ):
            if df.empty:
                ax = sf.subplots()
                placeholder(
                    ax,
                    "needs the paired methods ("
                    + ", ".join(f"{a} & {b}" for a, b in pairs.values())
                    + ")",
                )
                sf.suptitle(title, fontsize=10)
            else:
                _draw_model_panels(sf, df, results, "Δ savings (pp)", title, legend=sf is top)
        ax_c, ax_d = bottom.subplots(1, 2)
        if bins is None or cps is None:
            for ax, t in (
                (ax_c, "(c) calibration of the learned switch model"),
                (ax_d, "(d) learned vs oracle q per checkpoint"),
            ):
                placeholder(ax, "needs an analysis\n(mars analyze, or pass --analysis)")
                ax.set_title(t)
            fo.notes.append("panels c–d skipped: no analysis (mars analyze)")
        else:
            models = list(dict.fromkeys(bins.model))
            datasets = list(dict.fromkeys(d for _, d in results.pairs if d in set(bins.dataset)))
            b = bins.dropna(subset=["q_learned_mean"])
            ax_c.plot(
                [0, 1],
                [0, 1],
                color="#666666",
                linestyle="--",
                linewidth=0.9,
                label="perfect calibration",
            )
            sns.lineplot(
                data=b,
                x="q_learned_mean",
                y="q_oracle_rate",
                hue="model",
                style="dataset",
                markers=True,
                dashes=True,
                ax=ax_c,
                hue_order=models,
                style_order=datasets,
                estimator=None,
                sort=True,
                markersize=5,
                legend=False,
            )
            ax_c.set_xlim(0, 1)
            ax_c.set_ylim(0, 1)
            ax_c.set_xlabel("learned q (bin mean)")
            ax_c.set_ylabel("observed switch rate (oracle q)")
            ax_c.set_title("(c) calibration of the learned switch model")
            ax_d.plot([0, 1], [0, 1], color="#666666", linestyle="--", linewidth=0.9)
            sns.scatterplot(
                data=cps,
                x="q_oracle_rate",
                y="q_learned_mean",
                hue="model",
                style="dataset",
                ax=ax_d,
                hue_order=models,
                style_order=datasets,
                s=28,
                alpha=0.85,
                legend="brief",
            )
            ax_d.set_xlim(0, 1)
            ax_d.set_ylim(0, 1)
            ax_d.set_xlabel("oracle switch rate at the checkpoint")
            ax_d.set_ylabel("mean learned q at the checkpoint")
            ax_d.set_title("(d) learned vs oracle q, one point per checkpoint")
            h, lab = ax_d.get_legend_handles_labels()
            ax_d.legend().remove()
            bottom.legend(h, lab, loc="outside right upper", frameon=False, fontsize=7)
            nq = sorted(set(bins.n_questions))
            fo.notes.append(
                f"panels c–d use the first {', '.join(map(str, nq))} question(s) of each pool "
                "(mars analyze --q-questions), held-out (non-warmup) running traces"
            )
    fo.data = ab.frame()
    fo.label_data(pool_sources(results, zip(fo.data.model, fo.data.dataset)))
    return finish(fo, fig, out_dir, formats)
