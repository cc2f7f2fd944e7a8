"""The two figures that put every method side by side: accuracy against token savings (the
frontier) and against total and sequential tokens (latency).

Each method — and each setting of it a run holds (Parallel-Probe at u = 3 and at u = 4) — is one
mark, the same in both figures and named in the legend: its colour says its family (MARS,
Parallel-Probe, consensus, convergence exits, methods that sample more, full-budget votes,
oracles), its shape tells the family's members apart, hollow where a shape is already taken. Each
pool is a block with one set of axes per pipeline (SC, DeepConf), so that neither pipeline's
accuracy decides the other's axis; a DeepConf method takes the mark of its SC counterpart (DCO +
MARS is drawn as MARS). Every pool's main run is drawn with the runs that drew its samples (the
other settings of the same pool); runs drawn with other samples (trade-off sweeps) are left to
fig-tradeoff.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..method.registry import (
    CALIBRATED_MARS,
    CONSENSUS,
    CONVERGENCE_EXIT,
    MARS,
    MARS_CERTIFIED,
    METHODS,
    ORACLE_FIRST_STOP,
    PARALLEL_PROBE,
    PIPELINES,
    PROBE_CONTROLLER,
    RISK,
)
from .collect import Results, Run
from .figures import (
    FORMATS,
    MARS_COLOR,
    ORACLE_FIRST,
    PP_COLOR,
    FigureOut,
    _finish,
    _sources,
    style,
)
from .names import method_label, method_order

SELF_CONSISTENCY = next(iter(PIPELINES))

#: a mark's colour: the method's family
FAMILY_COLORS = {
    "full budget": "#222222",
    "MARS": MARS_COLOR,
    "Parallel-Probe": PP_COLOR,
    "consensus": "#8c564b",
    "convergence exit": "#2ca02c",
    "sample more": "#9467bd",
    "oracle": "#8a8a8a",
    "other": "#bcbd22",
}
#: the family of an early-stopping rule (by its kind); the rest is said by the method itself
RULE_FAMILIES = {
    rule.kind: family
    for family, rules in (
        ("MARS", (MARS, MARS_CERTIFIED, RISK)),
        ("Parallel-Probe", (PARALLEL_PROBE, PROBE_CONTROLLER)),
        ("consensus", (CONSENSUS,)),
        ("convergence exit", (CONVERGENCE_EXIT,)),
    )
    for rule in rules
}
#: a mark's shape: a method starts at the shape of its place in the registry (so it keeps its mark
#: from figure to figure) and takes the next one its colour has free
#: (no hexagon, pentagon or octagon: at six points they are circles)
MARKERS = ("o", "s", "D", "^", "v", "<", ">", "P", "X")
#: calibrated MARS, the headline, is a star
HEADLINE_MARKER = "*"


def mark_family(method: str) -> str:
    """The family a method's mark is coloured by."""
    m = METHODS.get(method)
    if m is None:
        return "other"
    if m.is_baseline:
        return "full budget"
    if m.reads_future:
        return "oracle"
    if m.rule.samples_more:
        return "sample more"
    return RULE_FAMILIES.get(m.rule.kind, "other")


def sc_counterpart(method: str) -> str:
    """The SC pipeline's method with the same rule and q as ``method`` (itself when it is an SC
    method or has none): the method whose mark and name a DeepConf method is drawn with."""
    m = METHODS.get(method)
    if m is None or m.baseline == SELF_CONSISTENCY:
        return method
    for other in METHODS.values():
        if other.baseline == SELF_CONSISTENCY and (
            other.rule,
            other.q,
            other.waves,
            other.width,
        ) == (m.rule, m.q, m.waves, m.width):
            return other.name
    return method


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


def _point(results: Results, pair: tuple[str, str], run: Run, method: str) -> dict:
    """What every point of both figures says of a (run, method)."""
    m = METHODS.get(method)
    base = m.baseline if m is not None else SELF_CONSISTENCY
    twin = sc_counterpart(method)
    return {
        "model": pair[0],
        "dataset": pair[1],
        "setting": run.setting,
        "pipeline": PIPELINES[base],
        "method": method,
        "label": method_label(method, run.settings(method))[0],
        "mark": method_label(twin, run.settings(method))[0],
        "counterpart": twin,
        "family": mark_family(method),
    }


def _points(results: Results, keep) -> list[tuple[tuple[str, str], Run, str]]:
    """(pair, run, method) of every method ``keep(run, method)`` admits, pool by pool: the runs
    that drew each pool's main samples, the main setting first, methods in report order."""
    out = []
    for pair in results.pairs:
        for run in results.comparable_runs(*pair):
            out += [(pair, run, m) for m in method_order(list(run.methods)) if keep(run, m)]
    return out


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


# -- the frontier: every early-stopping method against the oracle-first stop ------------------
FRONTIER_COLUMNS = [
    "model",
    "dataset",
    "setting",
    "pipeline",
    "method",
    "label",
    "mark",
    "counterpart",
    "family",
    "pp_conv",
    "accuracy_pct",
    "savings_pct",
    "savings_against",
    "baseline_accuracy_pct",
    "oracle_savings_pct",
]


def _stops_early(method: str) -> bool:
    """On the frontier: a method that may stop early and reads nothing of the future."""
    m = METHODS.get(method)
    return m is not None and not m.is_baseline and not m.reads_future


def _vote_savings(results: Results, pair: tuple[str, str], run: Run, method: str) -> float | None:
    """The savings of a method that runs fewer traces than the budget (single-sac) against its
    pipeline's full-budget vote on the same samples — what every other point's savings are
    against — as the simulator averages them (per question, then across questions); None when
    the vote's run is not there."""
    base = METHODS[method].baseline
    vote_run = results.find(*pair, base)
    if vote_run is None:
        return None
    mine = run.per_iteration(method)[["qid", "iteration", "tokens"]]
    vote = vote_run.per_iteration(base)[["qid", "iteration", "tokens"]]
    both = mine.merge(vote, on=["qid", "iteration"], suffixes=("", "_vote"))
    if len(both) != len(mine) or not (both.tokens_vote > 0).all():
        return None
    saved = 1.0 - both.tokens / both.tokens_vote
    return float(100.0 * saved.groupby(both.qid).mean().mean())


def _is_pp(method: str) -> bool:
    return METHODS[method].rule.kind == "pp"


def frontier_points(results: Results) -> pd.DataFrame:
    """(accuracy, savings) of every early-stopping method of the runs that drew each pool's
    main samples, with its pipeline's full-budget accuracy and oracle-first savings."""
    rows = []
    for pair, run, method in _points(results, lambda run, m: _stops_early(m)):
        ov = run.overall[method]
        savings, against = ov.get("savings_pct"), "full-budget vote"
        if METHODS[method].width is not None:  # its own savings are against its few traces
            vote = _vote_savings(results, pair, run, method)
            savings, against = (vote, against) if vote is not None else (savings, "own traces")
        base = METHODS[method].baseline
        base_run = results.find(*pair, base)
        orc = ORACLE_FIRST_STOP.of(base)
        orc_run = results.find(*pair, orc)
        rows.append(
            {
                **_point(results, pair, run, method),
                "pp_conv": run.settings(method).get("pp_conv") if _is_pp(method) else None,
                "accuracy_pct": ov.get("accuracy_pct"),
                "savings_pct": savings,
                "savings_against": against,
                "baseline_accuracy_pct": None
                if base_run is None
                else base_run.overall[base].get("accuracy_pct"),
                "oracle_savings_pct": None
                if orc_run is None
                else orc_run.overall[orc].get("savings_pct"),
            }
        )
    return pd.DataFrame(rows, columns=FRONTIER_COLUMNS)


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
        "that trace). Each "
        "pool's main run and the runs that drew its samples; the numbers are in "
        "fig-frontier.csv.",
        data=df,
    )
    pairs = list(dict.fromkeys(zip(df.model, df.dataset)))
    pipes = [p for p in PIPELINES.values() if (df.pipeline == p).any()]
    marks = _marks_of(df, results)
    lines = [
        mpl.lines.Line2D([], [], color="#555555", linestyle=":", label="full-budget accuracy"),
        mpl.lines.Line2D([], [], color="#555555", linestyle="--", label=f"{ORACLE_FIRST} savings"),
    ]
    with style():
        width = 0.4 + 2.6 * max(len(pipes), 1)
        fig, cells = _cells(len(pairs), 2, width, 3.0, _legend_rows(len(marks) + 2))
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
                _fit_accuracy(ax, ys)
                ax.set_title(f"{pipe} pipeline", fontsize=8)
                ax.set_xlabel("token savings (%)")
                ax.set_ylabel("accuracy (%)" if i == 0 else "")
        _legend(fig, marks, lines)
    fo.label_data(_sources(results, pairs))
    return _finish(fo, fig, out_dir, formats)


# -- latency: accuracy against total and sequential tokens ---------------------------------------
LATENCY_COLUMNS = [
    "model",
    "dataset",
    "setting",
    "protocol",
    "pipeline",
    "method",
    "label",
    "mark",
    "counterpart",
    "family",
    "accuracy_pct",
    "tokens_mean",
    "seq_tokens_mean",
]


def latency_points(results: Results) -> pd.DataFrame:
    """(accuracy, total tokens, sequential tokens) of every method of the runs that drew each
    pool's main samples (simulations made before the sequential axis have none)."""
    rows = []
    keep = lambda run, m: run.overall[m].get("seq_tokens_mean") is not None  # noqa: E731
    for pair, run, method in _points(results, keep):
        ov = run.overall[method]
        rows.append(
            {
                **_point(results, pair, run, method),
                "protocol": run.settings(method).get("protocol") or "bootstrap",
                "accuracy_pct": ov.get("accuracy_pct"),
                "tokens_mean": ov.get("tokens_mean"),
                "seq_tokens_mean": ov.get("seq_tokens_mean"),
            }
        )
    return pd.DataFrame(rows, columns=LATENCY_COLUMNS)


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
    fo.label_data(_sources(results, pairs))
    return _finish(fo, fig, out_dir, formats)
