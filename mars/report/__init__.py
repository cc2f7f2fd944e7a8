"""Tables and figures of the MARS paper (and the ones it left out),
rendered from `mars simulate` outputs.

``render_report(results_root, out_dir)`` is what ``mars report`` runs; the pieces are
:mod:`.collect` (find and load runs), :mod:`.data` (what each table and figure shows, as data
frames), :mod:`.tables` (their cells: Markdown, LaTeX, CSV via :mod:`.fmt`, HTML via :mod:`.html`)
and :mod:`.figures` (drawing only).
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
