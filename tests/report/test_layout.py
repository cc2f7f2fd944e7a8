"""The report's layout: what a table or figure shows is computed in mars/report/data, which
(with the tables' cells in mars/report/tables) runs without matplotlib; the drawing modules in
mars/report/figures read no run; no module reaches into another's private names; none is over
800 lines."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPORT = Path(__file__).resolve().parents[2] / "mars" / "report"
DRAWING = ("matplotlib", "seaborn")


def modules(*parts: str) -> list[Path]:
    return sorted((REPORT.joinpath(*parts)).rglob("*.py"))


def imported(path: Path) -> set[str]:
    """Every module a file imports (relative ones as written, with their dots)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            out.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_no_module_is_over_800_lines():
    long = {
        p.relative_to(REPORT): n for p in modules() if (n := len(p.read_text().splitlines())) > 800
    }
    assert not long


def test_no_private_name_is_imported_from_another_module():
    found = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or node.level):
                found += [(path.name, a.name) for a in node.names if a.name.startswith("_")]
    assert not found


def test_data_and_tables_import_nothing_that_draws():
    for path in modules("data") + modules("tables"):
        bad = {m for m in imported(path) if m.split(".")[0] in DRAWING or "figures" in m}
        assert not bad, (path, bad)


def test_drawing_modules_read_no_run():
    """A figure's numbers come from its data module: the drawing reads no run's files."""
    reads = {"overall", "per_question", "per_iteration", "analysis", "analysis_of"}
    for path in modules("figures"):
        found = {
            node.attr
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Attribute) and node.attr in reads
        }
        assert not found, (path.name, found)


@pytest.mark.slow
def test_every_frame_and_table_without_matplotlib(tree):
    """With matplotlib and seaborn unimportable, every data module's frames and every table are
    computed, and a report without figures is written."""
    results, _, _ = tree
    code = f"""
import json, sys
for name in {DRAWING!r}:
    sys.modules[name] = None  # import fails
import importlib, pkgutil
import mars.report.data as data, mars.report.tables as tables
for pkg in (data, tables):
    for m in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{{pkg.__name__}}.{{m.name}}")
from pathlib import Path
from mars.report import collect, render_report
from mars.report.data import audit, comparison, savings, stopping, switch, tradeoff, twoaxis
from mars.report.data import results as results_
from mars.report.tables import all_tables
res = collect([Path({str(results)!r})])
frames = {{
    "main": results_.main_frame(res),
    "pp": results_.pp_frame(res),
    "latency": results_.latency_frame(res),
    **{{f"full {{m}}": results_.full_frame(res, m) for m in res.models}},
    "oracle bounds": stopping.oracle_bounds_frame(res),
    "oracle share": stopping.oracle_share_frame(res),
    "probe cost": stopping.probe_cost_frame(res),
    "audit": audit.audit_frame(res),
    "switch models": switch.switch_models_frame(res),
    "savings": savings.savings_summary(res),
    "ablations": savings.ablations(res).frame(),
    "frontier": comparison.frontier_points(res),
    "latency points": comparison.latency_points(res),
    "two axis": twoaxis.two_axis_points(res),
    **{{str(k): f for k, f in tradeoff.tradeoff_frames(res).items()}},
}}
tables = all_tables(res)
render_report([Path({str(results)!r})], Path({str(results.parent / "no-figures")!r}),
              figures=False)
drawing = [m for m in sys.modules if m.startswith(("matplotlib", "seaborn", "mars.report.fig"))]
print(json.dumps({{
    "rows": {{k: len(f) for k, f in frames.items()}},
    "tables": len(tables),
    "drawing": [m for m in drawing if sys.modules[m] is not None],
}}))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["drawing"] == [] and out["tables"] == 10
    # the hand-made tree has no analysis, no sequential tokens and no sweep
    empty = {k for k, n in out["rows"].items() if not n}
    assert empty == {"switch models", "latency points", "two axis"}
