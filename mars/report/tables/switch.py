"""The switch models table: what the fit stage learned, per pool. Its numbers are
:mod:`mars.report.data.switch`'."""

from __future__ import annotations

from ...store.schema import SWITCH_FEATURES
from ..collect import Results
from ..data.base import Reads
from ..data.switch import switch_models_frame
from ..fmt import Cell, Table, integer, is_missing, num, pct, tex_escape, text


def _coefficient(mean, sd) -> Cell:
    return text("–" if is_missing(mean) else f"{mean:+.2f} ± {sd:.2f}")


def table_switch_models(results: Results, command: str | None = None) -> Table:
    """What the fit stage learned: the per-question switch models, summarised per pool."""
    reads = Reads()
    df = switch_models_frame(results, reads)
    rows: list[list[Cell]] = [
        [
            text(rec["model"]),
            text(rec["dataset"]),
            integer(rec["questions"]),
            integer(rec["rows_mean"]),
            pct(100 * rec["switch_share"]),
            num(rec["log_loss"], 3),
            num(rec["brier"], 3),
            *(_coefficient(rec[f"coef_{n}_mean"], rec[f"coef_{n}_sd"]) for n in SWITCH_FEATURES),
        ]
        for rec in df.to_dict("records")
    ]
    notes = (
        []
        if len(df)
        else ["No analysis with a fit (`mars analyze --fit`; the workflow always makes one)."]
    )
    headers = [
        "Model",
        "Dataset",
        "Questions",
        "Rows",
        "Switch share",
        "Log-loss",
        "Brier",
        *(f"β {n.replace('_', ' ')}" for n in SWITCH_FEATURES),
    ]
    return Table(
        key="table-switch-models",
        title="Switch models of the fit stage",
        caption="Per pool: the per-question switch models q (L2 logistic regression on the "
        "warmup traces × checkpoints, Platt-scaled; `mars fit`): training rows per question, the "
        "share of rows whose answer differs from the trace's final one, in-sample log-loss and "
        "Brier score, and the coefficients on standardised features (mean ± sd over questions).",
        headers=headers,
        tex_headers=[tex_escape(h) for h in headers],
        rows=rows,
        data=df,
        notes=notes,
        commands=reads.commands(command),
        source=reads.source(results),
    )
