"""The results tables: Table 1 (calibrated MARS against the full-budget votes), Table 2
(Parallel-Probe against MARS), Tables 3–5 (every method, one table per model) and both cost axes
(total and sequential tokens). Their numbers are :mod:`mars.report.data.results`'."""

from __future__ import annotations

from ...method.registry import PIPELINES
from ..collect import Results
from ..data.base import Reads
from ..data.results import (
    FULL_COLUMNS,
    LATENCY_COLUMNS,
    PP_PRINTED,
    full_frame,
    latency_frame,
    main_frame,
    main_pipelines,
    pp_frame,
    pp_methods,
    pp_variants,
)
from ..fmt import Cell, Table, integer, is_missing, num, pct, text
from .base import breaks_by_model, method_cell, model_column, narrow_mark, narrow_notes


def table_main(results: Results, command: str | None = None) -> Table:
    """Table 1: SC and DeepConf baselines, +MARS (calibrated) accuracy and savings."""
    reads = Reads()
    df = main_frame(results, reads)
    pipes = main_pipelines()
    rows = []
    for model, rec in zip(model_column(df.model), df.to_dict("records")):
        cells = [text(model), text(rec["dataset"])]
        for base, mars in pipes:
            cells += [
                num(rec[f"{base}.accuracy_pct"]),
                num(rec[f"{mars}.accuracy_pct"]),
                pct(rec[f"{mars}.savings_pct"]),
                pct(rec[f"{mars}.savings_paid_pct"]),
            ]
        rows.append(cells)
    return Table(
        key="table1-main",
        title="Table 1: accuracy and token savings of calibrated MARS",
        caption="Accuracy (%) and token savings for calibrated MARS "
        f"({', '.join(mars for _, mars in pipes)}). Baseline is the full-budget vote "
        f"({', '.join(base for base, _ in pipes)}); +MARS is the early-stopped vote; savings are "
        "the mean per-question token reduction against the same pipeline's baseline, as the "
        "paper counts them (the warmup free); paid: as a live run pays them (the question's "
        "warmup traces generated first, and the probes where the pool records their cost).",
        headers=["Model", "Dataset"] + ["Baseline", "+MARS", "Savings", "Paid"] * len(pipes),
        groups=[("", 2, None)] + [(title, 4, f"{title} Family") for title in PIPELINES.values()],
        rows=rows,
        data=df,
        breaks=breaks_by_model(df.model),
        align="ll" + "rrrr" * len(pipes),
        commands=reads.commands(command),
        source=reads.source(results),
    )


def table_pp(results: Results, command: str | None = None) -> Table:
    """Table 2: Parallel-Probe (every u found, emulated and with pruning) against MARS (SC)."""
    reads = Reads()
    df = pp_frame(results, reads)
    pp, pruning, mars = pp_methods()
    variants = pp_variants(results)
    rows = []
    for model, rec in zip(model_column(df.model), df.to_dict("records")):
        pairs = [(f"{m}-u{u}.accuracy_pct", f"{m}-u{u}.savings_pct") for m, u in variants]
        pairs.append((f"{mars}.accuracy_pct", f"{mars}.savings_pct"))
        best = max(rec[a] for a, _ in pairs if not is_missing(rec[a]))
        cells = [text(model), text(rec["dataset"])]
        for a, s in pairs:
            acc = rec[a]
            bold = not is_missing(acc) and round(acc, 1) == round(best, 1)
            cells += [num(acc, bold=bold), num(rec[s])]
        rows.append(cells)
    groups: list[tuple[str, int, str | None]] = [("", 2, None)]
    for method, u in variants:
        name = "PP" if method == pp else "PP + pruning"
        groups.append((f"{name} (u={u})", 2, f"{name} ($u{{=}}{u}$)"))
    groups.append(("MARS (SC)", 2, None))
    headers = ["Model", "Dataset"] + ["Acc.", "Sav."] * (len(variants) + 1)
    notes = []
    if not variants:
        notes.append(
            f"No Parallel-Probe run (method {pp}) found: run `mars simulate -m {pp} --pp-conv U` "
            "into a setting such as `pp-u4`."
        )
    if any(m == pruning for m, _ in variants):
        notes.append(
            f"PP + pruning is {pruning}: pruned traces stop voting and stop costing tokens, as "
            f"Parallel-Probe's authors define it; PP ({pp}) is the MARS reference's emulation."
        )
    notes.append("Bold: the best accuracy of the row.")
    return Table(
        key="table2-parallel-probe",
        title="Table 2: Parallel-Probe against MARS",
        caption="Comparison with Parallel-Probe (PP; stop after u equal majority answers in a "
        "row). Accuracy (%) and mean per-question token savings (%); MARS is calibrated MARS on "
        f"self-consistency ({mars}).",
        headers=headers,
        groups=groups,
        rows=rows,
        data=df,
        breaks=breaks_by_model(df.model),
        align="ll" + "r" * (len(headers) - 2),
        notes=notes,
        commands=reads.commands(command),
        source=reads.source(results),
    )


def tables_full(results: Results, command: str | None = None) -> list[Table]:
    """Appendix tables: every method of every setting, one table per model."""
    out = []
    for i, model in enumerate(results.models):
        reads = Reads()
        df = full_frame(results, model, reads)
        rows: list[list[Cell]] = [
            [
                text(r.block if r.first else ""),
                method_cell(r),
                pct(r.accuracy_pct),
                integer(r.tokens_mean),
                pct(r.savings_pct, mark=narrow_mark(r)),
                pct(r.savings_paid_pct),
            ]
            for r in df.itertuples()
        ]
        out.append(
            Table(
                key=f"table{3 + i}-full-{_slug(model)}",
                title=f"Table {3 + i}: full results for {model}",
                caption=f"Full results for {model}: every simulated method. Accuracy, mean tokens "
                "per question (all sampled traces) and mean per-question savings against the "
                "pipeline's own full-budget baseline (SC or DCO), as the paper counts them (the "
                "warmup free) and as a live run pays them (the question's warmup, for a method "
                "that reads one, and the probes where the pool records their cost).",
                headers=["Dataset", "Method", "Accuracy", "Mean tokens", "Savings", "Paid"],
                rows=rows,
                data=df[FULL_COLUMNS],
                tex_headers=["", "Method", "Accuracy", "Mean Tokens", "Savings", "Paid"],
                breaks=[i for i, first in enumerate(df["first"]) if first],
                align="llrrrr",
                notes=narrow_notes(df),
                commands=reads.commands(command),
                source=reads.source(results),
            )
        )
    return out


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-." else "-" for c in s).strip("-") or "model"


def table_latency(results: Results, command: str | None = None) -> Table:
    """Every method of every run on both cost axes: total tokens and sequential tokens (what a
    user waits for); runs under Parallel-Probe's protocol also as that protocol prints them."""
    reads = Reads()
    df = latency_frame(results, reads)
    rows: list[list[Cell]] = [
        [
            text(r.block if r.first else ""),
            method_cell(r),
            pct(r.accuracy_pct),
            integer(r.tokens_mean),
            integer(r.seq_tokens_mean),
            *(
                [num(r.pp_Acc, 2), integer(r.pp_Cost), integer(r.pp_Seq_Cost)]
                if r.printed
                else [text("–"), text("–"), text("–")]
            ),
        ]
        for r in df.itertuples()
    ]
    headers = ["Pool", "Method", "Accuracy", "Total tokens", "Sequential tokens"]
    headers += [f"{k} (PP)" for k in PP_PRINTED]
    return Table(
        key="table-latency",
        title="Both axes: total and sequential tokens of every method",
        caption="Accuracy, mean total tokens per question (every trace run, as charged by the "
        "method) and mean sequential tokens: what a user waits for — the longest trace at the "
        "stop for methods that stop running traces, the longest trace of each round summed over "
        "rounds for methods that sample more (Adaptive-Consistency one trace per round: fully "
        "sequential; ESC one window per round). Runs under Parallel-Probe's evaluation protocol "
        "also show its printed row (PP): accuracy rounded to two decimals, costs truncated, and "
        "its CSV's Seq_Cost, which is the longest started trace except for ESC (so for "
        "Adaptive-Consistency it differs from the sequential tokens)."
        + ("" if df.printed.any() else " No run here used that protocol."),
        headers=headers,
        rows=rows,
        data=df[LATENCY_COLUMNS],
        breaks=[i for i, first in enumerate(df["first"]) if first],
        align="llrrrrrr",
        commands=reads.commands(command),
        source=reads.source(results),
    )
