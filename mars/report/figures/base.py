"""What every figure shares: the style, byte-stable saving (fixed DPI, no dates or software tags
in the metadata, a fixed SVG hash salt), the line under a figure that says what data it shows,
and :class:`FigureOut`, a figure's files, caption and the numbers it plots."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..collect import Results
from ..provenance import describe, footer

DPI = 150
FORMATS = ("png", "pdf")
RC = {
    "svg.hashsalt": "mars-report",
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "savefig.dpi": DPI,
    "figure.dpi": DPI,
    "path.simplify": False,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.title_fontsize": 8,
    "font.family": "DejaVu Sans",
}
METADATA = {
    "png": {"Software": None},
    "pdf": {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None},
    "svg": {"Date": None, "Creator": None},
}
PIPELINE_COLORS = {"SC": "#4C72B0", "DeepConf": "#DD8452"}
CORRECT_COLOR = "#2ca02c"
WRONG_COLORS = ["#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf"]
OTHER_COLOR = "#9a9a9a"
PP_COLOR = "#d62728"
MARS_COLOR = "#1f77b4"
FOOTER_COLOR = "#a0361c"
#: savings as a live run pays them (its warmup, its probes): black marks beside the paper's
PAID_COLOR = "#111111"
PAID_LABEL = "paid (warmup, probes)"
#: the thin grey line joining a point to its paid savings
PAID_LINK_COLOR = "#9a9a9a"
#: paid savings this close to the paper's (pp) round alike in the tables: nothing drawn
PAID_TOLERANCE = 0.05


def paid_differs(paper, paid) -> bool:
    """A point's paid savings are known and differ from the paper's: worth a mark of its own."""
    try:
        a, b = float(paper), float(paid)
    except (TypeError, ValueError):
        return False
    return bool(np.isfinite(a) and np.isfinite(b) and abs(a - b) >= PAID_TOLERANCE)


def paid_missing(paper: pd.Series, paid: pd.Series) -> int:
    """How many points have savings but no paid savings (runs simulated before those were
    recorded)."""
    return int(
        (
            pd.to_numeric(paper, errors="coerce").notna()
            & pd.to_numeric(paid, errors="coerce").isna()
        ).sum()
    )


def paid_missing_note(n: int) -> str:
    """The note of a figure that draws no paid savings for ``n`` of its points."""
    return (
        f"paid savings not drawn for {n} point(s): their runs were simulated before "
        "savings_paid_pct was recorded (simulate them again)"
    )


def paid_handle():
    """The legend entry of the paid marks."""
    return mpl.lines.Line2D(
        [],
        [],
        color=PAID_LINK_COLOR,
        linewidth=0.8,
        marker="D",
        markersize=3.5,
        markerfacecolor=PAID_COLOR,
        markeredgecolor=PAID_COLOR,
        label=PAID_LABEL,
    )


def draw_paid(ax, part: pd.DataFrame, zorder: float) -> bool:
    """Each point's savings as a live run pays them, where they differ from the paper's: a small
    black mark at (paid savings, the same accuracy) joined to the point by a thin grey line
    (``gid`` "paid" and "paid-link"); whether any was drawn. ``part``: ``savings_pct``,
    ``savings_paid_pct`` and ``accuracy_pct`` per point."""
    shown = part[[paid_differs(a, b) for a, b in zip(part.savings_pct, part.savings_paid_pct)]]
    if shown.empty:
        return False
    for r in shown.itertuples():
        ax.plot(
            [r.savings_pct, r.savings_paid_pct],
            [r.accuracy_pct, r.accuracy_pct],
            color=PAID_LINK_COLOR,
            linewidth=0.7,
            zorder=zorder - 1.5,
            gid="paid-link",
        )
    ax.plot(
        shown.savings_paid_pct,
        shown.accuracy_pct,
        linestyle="",
        marker="D",
        markersize=3.5,
        markerfacecolor=PAID_COLOR,
        markeredgecolor=PAID_COLOR,
        color=PAID_COLOR,
        label="_paid",
        zorder=zorder,
        gid="paid",
    )
    return True


@dataclass
class FigureOut:
    stem: str
    title: str
    caption: str
    files: list = field(default_factory=list)
    data: pd.DataFrame | None = None
    notes: list = field(default_factory=list)
    footer: str = ""  # a line drawn under the figure: what data it shows, if not real

    def label_data(self, sources: dict) -> None:
        """Say in the caption, and in the image (shared images lose their captions), what data
        the figure shows: synthetic stand-ins flagged, real sources named."""
        text = describe(sources)
        if text:
            self.caption = f"{self.caption} {text}"
        self.footer = footer(sources)


@contextlib.contextmanager
def style():
    with sns.axes_style("whitegrid"), sns.plotting_context("paper"), mpl.rc_context(RC):
        yield


def save(fig, out_dir: Path, stem: str, formats=FORMATS) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        p = out_dir / f"{stem}.{fmt}"
        fig.savefig(p, format=fmt, dpi=DPI, metadata=METADATA.get(fmt))
        paths.append(p)
    plt.close(fig)
    return paths


#: height of the strip under a figure that holds its footer (inches)
FOOTER_HEIGHT = 0.24


def _draw_footer(fig, text: str) -> None:
    """``text`` in a strip under everything: the constrained layout keeps the axes above the
    strip, and a legend placed under the axes is lifted above it too."""
    fig.draw_without_rendering()  # lay out, to find the legends under the axes
    lowest = min((ax.get_window_extent().y0 for ax in fig.get_axes()), default=0.0)
    strip = FOOTER_HEIGHT / fig.get_figheight()
    engine = fig.get_layout_engine()
    if engine is not None and hasattr(engine, "set"):
        engine.set(rect=(0, strip, 1, 1 - strip))
    for legend in fig.legends:
        if legend.get_window_extent().y1 <= lowest:
            legend.borderaxespad = FOOTER_HEIGHT * 72 / legend.prop.get_size_in_points()
    fig.text(
        0.5,
        strip / 2,
        text,
        ha="center",
        va="center",
        fontsize=7,
        color=FOOTER_COLOR,
        style="italic",
    )


def finish(fo: FigureOut, fig, out_dir, formats) -> FigureOut:
    """Draw the footer, save the figure in every format and its numbers as CSV beside it."""
    if fo.footer:
        _draw_footer(fig, fo.footer)
    fo.files = save(fig, out_dir, fo.stem, formats)
    if fo.data is not None:
        p = Path(out_dir) / f"{fo.stem}.csv"
        fo.data.to_csv(p, index=False, lineterminator="\n")
        fo.files.append(p)
    return fo


def pool_sources(results: Results, pairs) -> dict:
    """``{model: source}`` of the (model, dataset) pairs a figure shows."""
    return results.sources([results.main_run(*p) for p in dict.fromkeys(pairs)])


def placeholder(ax, msg: str) -> None:
    """An empty panel that says why it is empty."""
    ax.set_axis_off()
    ax.text(
        0.5,
        0.5,
        msg,
        ha="center",
        va="center",
        fontsize=9,
        wrap=True,
        transform=ax.transAxes,
        color="#555555",
    )


def legend_entries(axes) -> dict[str, Any]:
    """``{label: handle}`` of every labelled artist of ``axes``, first one per label."""
    out: dict[str, Any] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            out.setdefault(lab, h)
    return out
