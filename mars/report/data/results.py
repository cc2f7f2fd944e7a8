"""The results tables' numbers: accuracy and savings of calibrated MARS against the full-budget
votes (Table 1), Parallel-Probe at every u found against MARS (Table 2), every method of every run
per model (Tables 3–5) and every method on both cost axes (total and sequential tokens).

Every number is a run's ``overall.json``; each frame has one row per table row, the columns of the
table's CSV first, then what the table shows beside the numbers (labels, blocks, marks).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ...method.registry import (
    CALIBRATED_MARS,
    PIPELINES,
    PROBE_PRUNING_STOP,
    PROBE_STOP,
    SELF_CONSISTENCY,
)
from ...method.settings import SPECS
from ..collect import Results, Run
from ..names import is_baseline, method_label, method_order
from .base import Reads, number, runs_fewer_traces, vote_share


# -- Table 1 --------------------------------------------------------------------------------------
def main_pipelines() -> list[tuple[str, str]]:
    """(full-budget vote, calibrated MARS) of every pipeline: Table 1's column groups."""
    return [(base, CALIBRATED_MARS.of(base)) for base in PIPELINES]


def main_columns() -> list[str]:
    cols = ["model", "dataset"]
    for base, mars in main_pipelines():
        cols += [
            f"{base}.accuracy_pct",
            f"{mars}.accuracy_pct",
            f"{mars}.savings_pct",
            f"{mars}.savings_paid_pct",
        ]
    return cols


def main_frame(results: Results, reads: Reads | None = None) -> pd.DataFrame:
    """Table 1: per pool, each pipeline's full-budget and calibrated MARS accuracy and MARS's
    savings, the paper's and paid (pools with none of them left out)."""
    reads = Reads() if reads is None else reads
    pipes = main_pipelines()
    data = []
    for pair in results.pairs:
        ov = {m: reads(results.find(*pair, m), m) for pipe in pipes for m in pipe}
        if not any(ov.values()):
            continue
        rec: dict[str, Any] = {"model": pair[0], "dataset": pair[1]}
        for m in ov:
            rec[f"{m}.accuracy_pct"] = number(ov[m], "accuracy_pct")
        for _, mars in pipes:
            rec[f"{mars}.savings_pct"] = number(ov[mars], "savings_pct")
            # what a live run pays (its warmup, its probes); None for a run simulated before
            rec[f"{mars}.savings_paid_pct"] = number(ov[mars], "savings_paid_pct")
        data.append(rec)
    return pd.DataFrame(data, columns=main_columns())


# -- Table 2 --------------------------------------------------------------------------------------
def pp_methods() -> tuple[str, str, str]:
    """Table 2's methods: Parallel-Probe as the MARS reference emulates it, with its authors'
    pruning, and calibrated MARS (self-consistency votes)."""
    return (
        PROBE_STOP.of(SELF_CONSISTENCY),
        PROBE_PRUNING_STOP.of(SELF_CONSISTENCY),
        CALIBRATED_MARS.of(SELF_CONSISTENCY),
    )


def pp_runs(results: Results, model: str, dataset: str, method: str) -> dict[int, Run]:
    """``{u: run}`` of a Parallel-Probe method, the main setting winning ties."""
    out: dict[int, Run] = {}
    for r in results.comparable_runs(model, dataset):
        if method in r.overall:
            u = int(r.settings(method).get("pp_conv", SPECS["pp_conv"].default))
            out.setdefault(u, r)
    return out


def pp_variants(results: Results) -> list[tuple[str, int]]:
    """(method, u) of every Parallel-Probe column group: each u any pool holds."""
    pp, pruning, _ = pp_methods()
    variants = []
    for method in (pp, pruning):
        us = sorted({u for pair in results.pairs for u in pp_runs(results, *pair, method)})
        variants += [(method, u) for u in us]
    return variants


def pp_columns(variants: list[tuple[str, int]]) -> list[str]:
    mars = pp_methods()[2]
    return (
        ["model", "dataset"]
        + [f"{m}-u{u}.{k}" for m, u in variants for k in ("accuracy_pct", "savings_pct")]
        + [f"{mars}.accuracy_pct", f"{mars}.savings_pct"]
    )


def pp_frame(results: Results, reads: Reads | None = None) -> pd.DataFrame:
    """Table 2: per pool, accuracy and savings of Parallel-Probe at every u (both variants) and of
    calibrated MARS (pools with none of them left out)."""
    reads = Reads() if reads is None else reads
    mars = pp_methods()[2]
    variants = pp_variants(results)
    data = []
    for pair in results.pairs:
        rec: dict[str, Any] = {"model": pair[0], "dataset": pair[1]}
        accs = []
        for method, u in variants:
            ov = reads(pp_runs(results, *pair, method).get(u), method)
            rec[f"{method}-u{u}.accuracy_pct"] = number(ov, "accuracy_pct")
            rec[f"{method}-u{u}.savings_pct"] = number(ov, "savings_pct")
            accs.append(rec[f"{method}-u{u}.accuracy_pct"])
        ov = reads(results.find(*pair, mars), mars)
        rec[f"{mars}.accuracy_pct"] = number(ov, "accuracy_pct")
        rec[f"{mars}.savings_pct"] = number(ov, "savings_pct")
        accs.append(rec[f"{mars}.accuracy_pct"])
        if all(a is None for a in accs):
            continue
        data.append(rec)
    return pd.DataFrame(data, columns=pp_columns(variants))


# -- Tables 3-5 -----------------------------------------------------------------------------------
FULL_COLUMNS = [
    "model",
    "dataset",
    "setting",
    "method",
    "label",
    "accuracy_pct",
    "tokens_mean",
    "savings_pct",
    "savings_paid_pct",
]
#: beside the numbers: the block a row opens (its first row) and the method's LaTeX label; for a
#: method on fewer traces than the budget, its tokens as a share of the full-budget vote's
SHOWN = ["block", "first", "label_tex", "narrow", "vote_share_pct"]


def full_frame(results: Results, model: str, reads: Reads | None = None) -> pd.DataFrame:
    """Tables 3–5: every method of every run of a model, run by run (a run on other samples than
    its pool's main run says what differs), methods in report order. A full-budget vote has no
    savings."""
    reads = Reads() if reads is None else reads
    data = []
    for pair in [p for p in results.pairs if p[0] == model]:
        runs = results.runs_of(*pair)
        for run in runs:
            block = pair[1] if len(runs) == 1 else f"{pair[1]} · {run.setting}"
            if results.sampling_difference(run):  # never mixed silently with the others
                block += f" ({results.sampling_difference(run)})"
            for i, method in enumerate(method_order(run.methods)):
                ov = reads(run, method)
                md, tex = method_label(method, run.settings(method))
                narrow = runs_fewer_traces(method)
                data.append(
                    {
                        "model": model,
                        "dataset": pair[1],
                        "setting": run.setting,
                        "method": method,
                        "label": md,
                        "accuracy_pct": number(ov, "accuracy_pct"),
                        "tokens_mean": number(ov, "tokens_mean"),
                        "savings_pct": None if is_baseline(method) else number(ov, "savings_pct"),
                        "savings_paid_pct": None
                        if is_baseline(method)
                        else number(ov, "savings_paid_pct"),
                        "block": block,
                        "first": i == 0,
                        "label_tex": tex,
                        "narrow": narrow,
                        "vote_share_pct": vote_share(results, pair, run, method)
                        if narrow
                        else None,
                    }
                )
    return pd.DataFrame(data, columns=FULL_COLUMNS + SHOWN)


# -- both axes: total and sequential tokens -------------------------------------------------------
#: Parallel-Probe's printed columns, for runs under its evaluation protocol
PP_PRINTED = ("Acc", "Cost", "Seq_Cost")
LATENCY_COLUMNS = [
    "model",
    "dataset",
    "setting",
    "protocol",
    "method",
    "label",
    "accuracy_pct",
    "tokens_mean",
    "seq_tokens_mean",
    *(f"pp_{k}" for k in PP_PRINTED),
]


def latency_frame(results: Results, reads: Reads | None = None) -> pd.DataFrame:
    """Every method of every run: accuracy, total and sequential tokens, and, for runs under
    Parallel-Probe's protocol, the row that protocol prints (``printed``)."""
    reads = Reads() if reads is None else reads
    data = []
    for pair in results.pairs:
        runs = results.runs_of(*pair)
        for run in runs:
            protocol = run.settings(run.methods[0]).get("protocol") if run.methods else None
            block = f"{pair[0]} · {pair[1]}"
            if len(runs) > 1:
                block += f" · {run.setting}"
            if protocol and protocol != "bootstrap":
                block += f" ({protocol} protocol)"
            for i, method in enumerate(method_order(run.methods)):
                ov = reads(run, method)
                md, tex = method_label(method, run.settings(method))
                pp = (ov or {}).get("parallel_probe") or {}
                data.append(
                    {
                        "model": pair[0],
                        "dataset": pair[1],
                        "setting": run.setting,
                        "protocol": protocol,
                        "method": method,
                        "label": md,
                        "accuracy_pct": number(ov, "accuracy_pct"),
                        "tokens_mean": number(ov, "tokens_mean"),
                        "seq_tokens_mean": number(ov, "seq_tokens_mean"),
                        **{f"pp_{k}": pp.get(k) for k in PP_PRINTED},
                        "block": block,
                        "first": i == 0,
                        "label_tex": tex,
                        "printed": bool(pp),
                    }
                )
    return pd.DataFrame(data, columns=[*LATENCY_COLUMNS, "block", "first", "label_tex", "printed"])
