"""The paper's tables (1, 2, 3–5) and the new ones, built from simulate outputs only.

Every number comes from a run's ``overall.json`` (accuracy, savings, mean tokens) or is computed
from its ``per_question.csv`` / ``per_iteration.csv`` (probe tokens, the risk audit), by
:mod:`mars.report.data`; nothing is typed in. The modules here turn those frames into cells: each
builder returns a :class:`~mars.report.fmt.Table` whose ``data`` (the CSV) holds the unrounded
numbers and whose ``commands`` name the report command and the simulate runs used.
"""

from __future__ import annotations

from ..collect import Results
from ..fmt import Table
from .audit import table_risk
from .results import table_latency, table_main, table_pp, tables_full
from .stopping import table_oracle, table_oracle_share, table_probe_cost
from .switch import table_switch_models

__all__ = [
    "all_tables",
    "table_latency",
    "table_main",
    "table_oracle",
    "table_oracle_share",
    "table_pp",
    "table_probe_cost",
    "table_risk",
    "table_switch_models",
    "tables_full",
]


def all_tables(results: Results, command: str | None = None) -> list[Table]:
    """Every table of the report, in its order."""
    return [
        table_main(results, command),
        table_pp(results, command),
        *tables_full(results, command),
        table_latency(results, command),
        table_oracle(results, command),
        table_probe_cost(results, command),
        table_risk(results, command),
        table_oracle_share(results, command),
        table_switch_models(results, command),
    ]
