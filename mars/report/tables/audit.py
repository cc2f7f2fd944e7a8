"""The risk audit table: how often the certified rule's stopped answer differs from the
full-budget vote, against δ. Its numbers are :mod:`mars.report.data.audit`'."""

from __future__ import annotations

from ...method.registry import DEEPCONF, SELF_CONSISTENCY
from ..collect import Results
from ..data.audit import AUDIT_COLUMNS, audit_frame, audit_methods
from ..data.base import Reads
from ..fmt import Cell, Table, integer, num, text
from .base import method_cell, model_column


def table_risk(results: Results, command: str | None = None) -> Table:
    """Share of runs whose early-stopped answer differs from the full-budget vote, against δ."""
    reads = Reads()
    df = audit_frame(results, reads)
    blocks = list(zip(df.model, df.dataset, df.setting))
    opens = [i for i, b in enumerate(blocks) if i == 0 or b != blocks[i - 1]]
    opened = set(opens)
    models = model_column(df.model)
    rows: list[list[Cell]] = [
        [
            text(models[i] if i in opened else ""),
            text(r.block if i in opened else ""),
            method_cell(r),
            text(r.reference),
            integer(r.runs),
            integer(r.differ),
            num(r.rate_pct, 2),
            num(r.rate_upper95_pct, 2),
            num(100 * r.delta if r.certified else None, 1),
            num(r.worst_question_pct, 1),
            text(r.verdict),
        ]
        for i, r in enumerate(df.itertuples())
    ]
    notes = [
        "A run is one (question, bootstrap iteration); the full-budget vote is the pipeline's "
        f"baseline ({SELF_CONSISTENCY}, or {DEEPCONF} for DeepConf methods) on the same bootstrap "
        "sample. Rate upper = "
        "one-sided 95% Clopper–Pearson bound.",
        "The certificate bounds P(stopped answer ≠ full-budget vote) by δ when q is the true "
        "switch probability; the learned-q certified rows test it with estimated q, the calibrated "
        "rows (γ < 1) carry no guarantee.",
    ]
    if df.empty:
        notes.insert(
            0,
            f"No audited method found ({', '.join(audit_methods())} with their baseline in the "
            "same sampling settings).",
        )
    return Table(
        key="table-risk-audit",
        title="Risk audit of the certified rule",
        caption="Share of runs whose early-stopped answer differs from the full-budget vote, "
        "against the risk level δ of the certified MARS rule (Corollary 1).",
        headers=[
            "Model",
            "Dataset",
            "Method",
            "Full-budget vote",
            "Runs",
            "Differ",
            "Rate (%)",
            "Rate upper (%)",
            "δ (%)",
            "Worst question (%)",
            "Verdict",
        ],
        tex_headers=[
            "Model",
            "Dataset",
            "Method",
            "Reference",
            "Runs",
            "Differ",
            r"Rate (\%)",
            r"Upper (\%)",
            r"$\delta$ (\%)",
            r"Worst q. (\%)",
            "Verdict",
        ],
        rows=rows,
        data=df[AUDIT_COLUMNS],
        breaks=opens,
        align="llllrrrrrrl",
        notes=notes,
        commands=reads.commands(command),
        source=reads.source(results),
    )
