"""The two figures that put every method side by side: accuracy against token savings (the
frontier) and against total and sequential tokens (latency). Their points are
:mod:`mars.report.data.comparison`'.

Each method — and each setting of it a run holds (Parallel-Probe at u = 3 and at u = 4) — is one
mark, the same in both figures and named in the legend: its colour says its family (MARS,
Parallel-Probe, consensus, convergence exits, methods that sample more, full-budget votes,
oracles), its shape tells the family's members apart, hollow where a shape is already taken. Each
pool is a block with one set of axes per pipeline (SC, DeepConf), so that neither pipeline's
accuracy decides the other's axis; a DeepConf method takes the mark of its SC counterpart (DCO +
MARS is drawn as MARS). Every pool's main run is drawn with the runs that drew its samples (the
other settings of the same pool); runs drawn with other samples (trade-off sweeps) are left to
fig-tradeoff. Beside each savings as the paper counts them, the frontier draws them as a live run
pays them (the warmup, the probes): a small black mark joined to the method's by a grey line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ...method.registry import CALIBRATED_MARS, METHODS, PIPELINES
from ..collect import Results
from ..data.comparison import FAMILIES, frontier_points, latency_points, mark_family
from ..names import ORACLE_FIRST
from .base import (
    FORMATS,
    MARS_COLOR,
    PP_COLOR,
    FigureOut,
    draw_paid,
    finish,
    paid_differs,
    paid_handle,
    paid_missing,
    paid_missing_note,
    pool_sources,
    style,
)

#: a mark's colour: the method's family (:data:`mars.report.data.comparison.FAMILIES`)
FAMILY_COLORS = dict(
    zip(
        FAMILIES,
        ("#222222", MARS_COLOR, PP_COLOR, "#8c564b", "#2ca02c", "#9467bd", "#8a8a8a", "#bcbd22"),
    )
)
#: a mark's shape: a method starts at the shape of its place in the registry (so it keeps its mark
#: from figure to figure) and takes the next one its colour has free
#: (no hexagon, pentagon or octagon: at six points they are circles)
MARKERS = ("o", "s", "D", "^", "v", "<", ">", "P", "X")
#: calibrated MARS, the headline, is a star
HEADLINE_MARKER = "*"


@dataclass(frozen=True)
class Mark:
    """How one method (at one setting) is drawn."""

    marker: str
    color: str
    hollow: bool = False

    def style(self) -> dict:
        """``Axes.plot`` keywords drawing the points with this mark."""
        return {
            "linestyle": "",
            "marker": self.marker,
            "markersize": 10.5 if self.marker == HEADLINE_MARKER else 6.0,
            "markerfacecolor": "none" if self.hollow else self.color,
            "markeredgecolor": self.color if self.hollow else "white",
            "markeredgewidth": 1.1 if self.hollow else 0.5,
            "color": self.color,
        }

    def handle(self, label: str):
        """The legend entry of this mark."""
        return mpl.lines.Line2D([], [], label=label, **self.style())


def assign_marks(keys: Iterable[tuple[str, str]]) -> dict[str, Mark]:
    """``{label: Mark}`` for ``(method, label)`` pairs in order (a method's main setting first):
    each label its family's colour and the first shape, filled then hollow, that no earlier label
    of that colour has, starting at the method's own (calibrated MARS: a star)."""
    order = list(METHODS)
    headline = set(CALIBRATED_MARS.members())
    taken: set[tuple[str, str, bool]] = set()
    marks: dict[str, Mark] = {}
    for method, label in keys:
        if label in marks:
            continue
        color = FAMILY_COLORS[mark_family(method)]
        start = order.index(method) if method in order else len(order)
        shapes = [MARKERS[(start + i) % len(MARKERS)] for i in range(len(MARKERS))]
        if method in headline:
            shapes.insert(0, HEADLINE_MARKER)
        free = [(s, h) for h in (False, True) for s in shapes if (s, color, h) not in taken]
        shape, hollow = free[0] if free else (shapes[0], True)
        taken.add((shape, color, hollow))
        marks[label] = Mark(shape, color, hollow)
    return marks


def _marks_of(df: pd.DataFrame, results: Results) -> dict[str, Mark]:
    """The marks of a figure's points: the main setting's methods first, in report order."""
    main = df.setting == results.main_setting
    ordered = pd.concat([df[main], df[~main]])
    return assign_marks(zip(ordered.counterpart, ordered.mark))


#: the narrowest figure (inches): the legend's three columns fit
MIN_WIDTH = 10.0


def _cells(n: int, cols: int, cell_w: float, cell_h: float, legend_rows: int):
    """A figure of ``n`` blocks (one per pool), ``cols`` to a row, with room under them for a
    legend of ``legend_rows`` rows."""
    cols = max(1, min(cols, n))
    rows = max(1, -(-n // cols))
    fig = plt.figure(  # wide enough for the legend's three columns, whatever the pools
        figsize=(max(cols * cell_w, MIN_WIDTH), rows * cell_h + 0.35 + 0.17 * legend_rows),
        layout="constrained",
    )
    subfigs = fig.subfigures(rows, cols, squeeze=False, wspace=0.02, hspace=0.02)
    return fig, list(subfigs.flat)


def _legend(fig, marks: dict[str, Mark], extra: list, ncol: int = 3) -> None:
    handles = [mark.handle(label) for label, mark in marks.items()] + extra
    fig.legend(handles=handles, loc="outside lower center", ncol=ncol, frameon=False, fontsize=7)


def _legend_rows(n_entries: int, ncol: int = 3) -> int:
    return -(-n_entries // ncol)


def _pool_title(results: Results, model: str, dataset: str) -> str:
    return f"{results.model_title(model)} · {dataset}"


def _draw(ax, part: pd.DataFrame, x: str, marks: dict[str, Mark]) -> None:
    """Every point of ``part`` at (``x``, accuracy), with its mark."""
    for label, group in part.groupby("mark", sort=False):
        mark = marks[str(label)]
        on_top = mark.marker == HEADLINE_MARKER or mark.color == FAMILY_COLORS["full budget"]
        ax.plot(
            group[x], group.accuracy_pct, label=label, zorder=4 if on_top else 3, **mark.style()
        )


def _none(ax, pipeline: str) -> None:
    """The panel of a pipeline a pool has no results of (no per-token confidences: no DeepConf)."""
    ax.set_axis_off()
    ax.text(0.5, 0.5, f"no {pipeline} results", ha="center", va="center", fontsize=8)


def _fit_accuracy(ax, values: np.ndarray) -> None:
    """An accuracy axis that holds every value (a little room above and below)."""
    values = values[np.isfinite(values)]
    if not len(values):
        return
    lo, hi = float(values.min()), float(values.max())
    pad = max(1.0, 0.08 * (hi - lo))
    ax.set_ylim(lo - pad, hi + pad)


def fig_frontier(results: Results, out_dir: Path, formats=FORMATS) -> FigureOut:
    """Accuracy against savings of every early-stopping method, one block per pool with one
    panel per pipeline: the full-budget accuracy (dotted) and the oracle-first savings (dashed)."""
    df = frontier_points(results)
    fo = FigureOut(
        "fig-frontier",
        f"Accuracy–savings of every stopping rule against the {ORACLE_FIRST} stop",
        "Per model × dataset and pipeline (SC left, DeepConf right): mean accuracy against mean "
        "per-question token savings of every early-stopping method, one mark per method and "
        "setting (the legend; a DeepConf method takes its SC counterpart's mark: MARS there is "
        "DCO + MARS). Colour: the family (MARS blue, Parallel-Probe red, consensus brown, "
        "convergence exits green, methods that sample more purple). Dotted lines: the "
        f"pipeline's full-budget accuracy; dashed lines: the savings of its {ORACLE_FIRST} stop "
        "(the first checkpoint whose leader is the full-budget vote). No rule that always "
        f"returns the full-budget answer can save more than {ORACLE_FIRST}; a rule that "
        "sometimes returns another answer can, so it is a reference point, not a bound. Every "
        "savings is against the full-budget vote, also for a method that runs fewer traces than "
        "the budget (one trace with a convergence exit: the tables give its savings against "
        "that trace). Those savings are the paper's (the warmup free); a small black diamond "
        "joined to a mark by a thin grey line is the same method's savings as a live run pays "
        "them (the question's warmup traces, for a method that reads one, and the probes where "
        "the pool records their cost), drawn where the two differ. Each "
        "pool's main run and the runs that drew its samples; the numbers (paid: "
        "savings_paid_pct) are in fig-frontier.csv.",
        data=df,
    )
    pairs = list(dict.fromkeys(zip(df.model, df.dataset)))
    pipes = [p for p in PIPELINES.values() if (df.pipeline == p).any()]
    marks = _marks_of(df, results)
    lines = [
        mpl.lines.Line2D([], [], color="#555555", linestyle=":", label="full-budget accuracy"),
        mpl.lines.Line2D([], [], color="#555555", linestyle="--", label=f"{ORACLE_FIRST} savings"),
    ]
    paid_shown = any(paid_differs(a, b) for a, b in zip(df.savings_pct, df.savings_paid_pct))
    if paid_shown:
        lines.append(paid_handle())
    missing = paid_missing(df.savings_pct, df.savings_paid_pct)
    if missing:
        fo.notes.append(paid_missing_note(missing))
    with style():
        width = 0.4 + 2.6 * max(len(pipes), 1)
        fig, cells = _cells(len(pairs), 2, width, 3.0, _legend_rows(len(marks) + len(lines)))
        if not pairs:
            ax = cells[0].subplots()
            ax.set_axis_off()
            ax.text(0.5, 0.5, "no early-stopping results", ha="center", va="center")
            fo.notes.append("no early-stopping results")
        for cell, (model, dataset) in zip(cells, pairs):
            sub = df[(df.model == model) & (df.dataset == dataset)]
            axes = cell.subplots(1, len(pipes), squeeze=False)[0]
            cell.suptitle(_pool_title(results, model, dataset), fontsize=9)
            for i, (ax, pipe) in enumerate(zip(axes, pipes)):
                part = sub[sub.pipeline == pipe]
                if part.empty:
                    _none(ax, pipe)
                    continue
                base, orc = part.baseline_accuracy_pct.iloc[0], part.oracle_savings_pct.iloc[0]
                ys = part.accuracy_pct.to_numpy(float)
                if not pd.isna(base):
                    ax.axhline(base, color="#555555", linestyle=":", linewidth=1, zorder=1)
                    ys = np.append(ys, float(base))
                if not pd.isna(orc):
                    ax.axvline(orc, color="#555555", linestyle="--", linewidth=1, zorder=1)
                _draw(ax, part, "savings_pct", marks)
                draw_paid(ax, part, zorder=3.5)
                _fit_accuracy(ax, ys)
                ax.set_title(f"{pipe} pipeline", fontsize=8)
                ax.set_xlabel("token savings (%)")
                ax.set_ylabel("accuracy (%)" if i == 0 else "")
        _legend(fig, marks, lines)
    fo.label_data(pool_sources(results, pairs))
    return finish(fo, fig, out_dir, formats)


def _tokens(value: float, _pos=None) -> str:
    """A token count in a tick label: 300, 30k, 1.5M."""
    for scale, unit in ((1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:g}{unit}"
    return f"{value:g}"


def _token_axis(ax, values: np.ndarray) -> None:
    """A log axis where the tokens span a decade or more (ticks at 1 and 3 of each decade), else
    a linear one with thousands."""
    values = values[np.isfinite(values) & (values > 0)]
    if len(values) and values.max() > 10 * values.min():
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(mpl.ticker.LogLocator(base=10, subs=(1.0, 3.0)))
        ax.xaxis.set_major_formatter(mpl.ticker.FuncFormatter(_tokens))
        ax.xaxis.set_minor_formatter(mpl.ticker.NullFormatter())
    else:
        ax.xaxis.set_major_formatter(mpl.ticker.StrMethodFormatter("{x:,.0f}"))
        ax.xaxis.set_major_locator(mpl.ticker.MaxNLocator(3))


def fig_latency(results: Results, out_dir: Path, formats=FORMATS) -> FigureOut:
    """Accuracy against total and against sequential tokens, one block per pool with one row per
    pipeline, every method one mark."""
    df = latency_points(results)
    fo = FigureOut(
        "fig-latency",
        "Accuracy against total and sequential tokens",
        "Per model × dataset, one row per pipeline (SC, DeepConf): mean accuracy against mean "
        "total tokens per question (left) and against mean sequential tokens, what a user waits "
        "for (right). Every method is one mark (the legend; a DeepConf method takes its SC "
        "counterpart's mark): full-budget votes black, methods that stop running traces (MARS "
        "blue, Parallel-Probe red, consensus brown), per-trace convergence exits green, methods "
        "that sample more traces one round after another (Adaptive-Consistency, ESC) purple, "
        "oracle stops grey. Each accuracy axis holds every method of its pipeline. Sampling more "
        "saves total tokens and costs latency. Each pool's main run and the runs that drew its "
        "samples; the numbers are in fig-latency.csv.",
        data=df,
    )
    pairs = list(dict.fromkeys(zip(df.model, df.dataset)))
    pipes = [p for p in PIPELINES.values() if (df.pipeline == p).any()]
    marks = _marks_of(df, results)
    with style():
        height = 0.5 + 2.3 * max(len(pipes), 1)
        fig, cells = _cells(len(pairs), 2, 5.6, height, _legend_rows(len(marks)))
        if not pairs:
            ax = cells[0].subplots()
            ax.set_axis_off()
            ax.text(0.5, 0.5, "no results with sequential tokens", ha="center", va="center")
            fo.notes.append("no results with sequential tokens")
        for cell, (model, dataset) in zip(cells, pairs):
            sub = df[(df.model == model) & (df.dataset == dataset)]
            axes = cell.subplots(len(pipes), 2, squeeze=False)
            title = _pool_title(results, model, dataset)
            protocols = sorted(set(sub.protocol) - {"bootstrap"})
            if protocols:
                title += f" ({', '.join(protocols)} protocol)"
            cell.suptitle(title, fontsize=9)
            for r, (row, pipe) in enumerate(zip(axes, pipes)):
                part = sub[sub.pipeline == pipe]
                if part.empty:
                    for ax in row:
                        _none(ax, pipe)
                    continue
                for ax, col, xlabel in (
                    (row[0], "tokens_mean", "total tokens per question"),
                    (row[1], "seq_tokens_mean", "sequential tokens per question"),
                ):
                    _draw(ax, part, col, marks)
                    _fit_accuracy(ax, part.accuracy_pct.to_numpy(float))
                    _token_axis(ax, part[col].to_numpy(float))
                    ax.set_xlabel(xlabel if r == len(pipes) - 1 else "")
                    ax.set_ylabel(f"{pipe}: accuracy (%)")
        _legend(fig, marks, [])
    fo.label_data(pool_sources(results, pairs))
    return finish(fo, fig, out_dir, formats)
