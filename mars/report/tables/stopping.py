"""Every early-stopping method against the oracle stops, and what the probes cost: the oracle
bounds table (calibrated MARS), the share of oracle-first's savings (every method) and the
probe-cost table. Their numbers are :mod:`mars.report.data.stopping`'."""

from __future__ import annotations

from ...method.registry import PIPELINES
from ..collect import Results
from ..data.base import Reads
from ..data.stopping import (
    PROBE_COST_COLUMNS,
    SHOWN,
    oracle_bounds_frame,
    oracle_families,
    oracle_share_frame,
    probe_cost_frame,
)
from ..fmt import Cell, Table, integer, num, pct, tex_escape, text
from ..names import ORACLE_FIRST
from .base import breaks_by_model, method_cell, model_column, narrow_mark, narrow_notes


def table_oracle(results: Results, command: str | None = None) -> Table:
    """MARS beside the oracle stopping rules: how much of oracle-first's saving it gets."""
    reads = Reads()
    df = oracle_bounds_frame(results, reads)
    rows = []
    for model, rec in zip(model_column(df.model) if len(df) else [], df.to_dict("records")):
        cells = [text(model), text(rec["dataset"])]
        for mars, first, last in oracle_families():
            cells += [
                num(rec[f"{mars}.savings_pct"]),
                num(rec[f"{first}.savings_pct"]),
                num(rec[f"{last}.savings_pct"]),
                pct(rec[f"{mars}.share_of_oracle_pct"], 0),
            ]
        rows.append(cells)
    return Table(
        key="table-oracle-bounds",
        title="MARS against the oracle stopping rules",
        caption="Token savings (%) of calibrated MARS and of the two oracle stopping rules, which "
        "know the full-budget vote: first = stop at the first checkpoint whose leader equals it, "
        "absorbing = stop one checkpoint after the last checkpoint whose leader differs. Share = "
        f"MARS savings / {ORACLE_FIRST} savings. Oracle-first is the most a rule that always "
        "returns the full-budget answer can save; a rule that sometimes returns another answer "
        "can save more (a share above 100 %).",
        headers=["Model", "Dataset"] + ["MARS", "Oracle first", "Oracle absorbing", "Share"] * 2,
        groups=[("", 2, None), *((title, 4, None) for title in PIPELINES.values())],
        rows=rows,
        data=df,
        breaks=breaks_by_model(df.model) if len(df) else [],
        align="ll" + "r" * 8,
        commands=reads.commands(command),
        source=reads.source(results),
    )


def _pool_cells(r, model: str) -> list[Cell]:
    """A stopping method's first cells: its pool on the pool's first row, then the method."""
    return [text(model if r.first else ""), text(r.dataset if r.first else ""), method_cell(r)]


def table_oracle_share(results: Results, command: str | None = None) -> Table:
    """Every early-stopping method against its pipeline's oracle-first savings and full-budget
    accuracy."""
    reads = Reads()
    df = oracle_share_frame(results, reads)
    models = model_column(df.model) if len(df) else []
    rows: list[list[Cell]] = [
        [
            *_pool_cells(r, model),
            num(r.accuracy_pct),
            num(r.accuracy_delta_pp),
            num(r.savings_pct, mark=narrow_mark(r)),
            num(r.savings_with_probes_pct),
            num(r.oracle_savings_pct),
            pct(r.share_of_oracle_pct, 0),
        ]
        for model, r in zip(models, df.itertuples())
    ]
    headers = [
        "Model",
        "Dataset",
        "Method",
        "Accuracy",
        "Δ acc (pp)",
        "Savings",
        "Savings w/ probes",
        "Oracle-first savings",
        f"Share of {ORACLE_FIRST}",
    ]
    return Table(
        key="table-oracle-share",
        title=f"Share of {ORACLE_FIRST}'s savings, every method",
        caption="Accuracy (%) and its difference from the method's full-budget baseline (SC or "
        "DeepConf, pp), token savings (%) without and with the probes' tokens, the savings of the "
        f"{ORACLE_FIRST} stop of the same pipeline (first checkpoint whose leader is the "
        "full-budget vote) and each method's savings as a share of it. Oracle-first is not a "
        "bound: a rule that sometimes returns another answer than the full-budget vote can stop "
        "earlier (a share above 100 %). The goal of MARS2 (docs/beyond.md): Δ ≥ −0.5 pp and "
        "share ≥ 85 %.",
        headers=headers,
        tex_headers=[tex_escape(h) for h in headers],
        rows=rows,
        data=df.drop(columns=SHOWN, errors="ignore"),
        breaks=[i for i, first in enumerate(df["first"]) if first] if len(df) else [],
        align="lll" + "r" * 6,
        notes=narrow_notes(df),
        commands=reads.commands(command),
        source=reads.source(results),
    )


def table_probe_cost(results: Results, command: str | None = None) -> Table:
    """Savings with and without the probes' own tokens, for every early-stopping method."""
    reads = Reads()
    df = probe_cost_frame(results, reads)
    rows: list[list[Cell]] = [
        [
            *_pool_cells(r, model),
            num(r.savings_pct, mark=narrow_mark(r)),
            num(r.savings_with_probes_pct),
            num(r.probe_cost_pp, 2),
            integer(r.probe_tokens_mean),
        ]
        for model, r in zip(model_column(df.model), df.itertuples())
    ]
    notes = narrow_notes(df)
    if len(df) and df.savings_with_probes_pct.isna().all():
        notes.append(
            "No run records probe costs (published pools carry none); generate a pool with "
            "`mars generate` to measure them."
        )
    return Table(
        key="table-probe-cost",
        title="Probe cost: savings with and without the probes' tokens",
        caption="Token savings (%) without and with the probe completions charged (each probe's "
        "prompt tokens not served from the prefix cache plus its generated tokens); probe cost = "
        "the difference in percentage points; probe tokens = mean per question. The paper excludes "
        "probe tokens.",
        headers=[
            "Model",
            "Dataset",
            "Method",
            "Savings",
            "Savings w/ probes",
            "Probe cost (pp)",
            "Probe tokens",
        ],
        rows=rows,
        data=df[PROBE_COST_COLUMNS],
        breaks=[i for i, first in enumerate(df["first"]) if first],
        align="lllrrrr",
        notes=notes,
        commands=reads.commands(command),
        source=reads.source(results),
    )
