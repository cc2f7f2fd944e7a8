"""The report's figures: the paper's (1 left and right, 2, 4), both comparison figures, the
two-axis frontier and the trade-off, drawn from :mod:`mars.report.data`'s frames.

Every figure is written as PNG and PDF (byte-stable for the same input: :mod:`.base`) next to a
CSV of the numbers it plots. The modules here only draw: what a figure shows is computed by the
data module of the same name.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from pathlib import Path

from ..collect import Results
from .audit import fig_promise
from .base import FORMATS, FigureOut
from .comparison import fig_frontier, fig_latency
from .examples import fig_example, fig_pp_failure
from .savings import fig_ablations, fig_savings
from .tradeoff import fig_tradeoff
from .twoaxis import fig_two_axis

__all__ = [
    "FORMATS",
    "FigureOut",
    "all_figures",
    "fig_ablations",
    "fig_example",
    "fig_frontier",
    "fig_latency",
    "fig_pp_failure",
    "fig_promise",
    "fig_savings",
    "fig_tradeoff",
    "fig_two_axis",
]


def all_figures(results: Results, out_dir: Path, formats=FORMATS) -> list[FigureOut]:
    """Every figure of the report, in its order (the trade-off only where a pool has a curve,
    promised against realised risk only where a method states its risk beside its full-budget
    vote)."""
    figures = [
        make(results, out_dir, formats)
        for make in (
            fig_savings,
            fig_example,
            fig_pp_failure,
            fig_ablations,
            fig_frontier,
            fig_latency,
            fig_two_axis,
        )
    ]
    optional = (fig_tradeoff(results, out_dir, formats), fig_promise(results, out_dir, formats))
    return [*figures, *(f for f in optional if f is not None)]
