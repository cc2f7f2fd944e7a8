"""Tables and figures of the MARS paper (and the ones it left out),
rendered from `mars simulate` outputs.

``render_report(results_root, out_dir)`` is what ``mars report`` runs; the pieces are
:mod:`.collect` (find and load runs), :mod:`.tables`, :mod:`.figures`, :mod:`.tradeoff`
(in-process simulation sweeps) and :mod:`.trace` (vote shares, MARS slack, learned vs oracle q).
"""

from .collect import ReportError, Results, collect, discover
from .render import Report, render_report, report_command

__all__ = [
    "Report",
    "ReportError",
    "Results",
    "collect",
    "discover",
    "render_report",
    "report_command",
]
