"""Every early-stopping method against its pipeline's oracle stops and full-budget vote, and what
the probes cost: the numbers of the oracle tables and the probe-cost table.

An early-stopping method is one that may stop before the budget and is not an oracle stop (MARS
reading oracle q counts as one, a reference beside the others); the oracle stops know the
full-budget vote (first: stop at the first checkpoint whose leader is it; absorbing: one
checkpoint after the last whose leader is not).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd

from ...method.registry import CALIBRATED_MARS, ORACLE_FIRST_STOP, ORACLE_LAST_STOP, PIPELINES
from ..collect import Results, Run
from ..names import family_baseline, is_baseline, method_label, method_order
from .base import Reads, number, oracle_stop, runs_fewer_traces, vote_share


def oracle_families() -> list[tuple[str, str, str]]:
    """(calibrated MARS, oracle first, oracle absorbing) of every pipeline."""
    return [
        (CALIBRATED_MARS.of(base), ORACLE_FIRST_STOP.of(base), ORACLE_LAST_STOP.of(base))
        for base in PIPELINES
    ]


def oracle_of(method: str) -> str:
    """The oracle-first stop of a method's pipeline."""
    return ORACLE_FIRST_STOP.of(family_baseline(method))


def oracle_bounds_frame(results: Results, reads: Reads | None = None) -> pd.DataFrame:
    """Per pool, the savings of calibrated MARS and the two oracle stops of each pipeline, and
    MARS's as a share of oracle-first's (pools with none of them left out)."""
    reads = Reads() if reads is None else reads
    data = []
    for pair in results.pairs:
        rec: dict[str, Any] = {"model": pair[0], "dataset": pair[1]}
        for mars, first, last in oracle_families():
            vals = {
                m: number(reads(results.find(*pair, m), m), "savings_pct")
                for m in (mars, first, last)
            }
            share, saved, bound = None, vals[mars], vals[first]
            if saved is not None and bound is not None and bound != 0.0:
                share = 100.0 * saved / bound
            for m in (mars, first, last):
                rec[f"{m}.savings_pct"] = vals[m]
            rec[f"{mars}.share_of_oracle_pct"] = share
        if all(v is None for k, v in rec.items() if k not in ("model", "dataset")):
            continue
        data.append(rec)
    return pd.DataFrame(data)


def stopping_methods(results: Results) -> Iterator[tuple[tuple[str, str], Run, str, bool]]:
    """(pool, its main run, method, first of the pool?) for every early-stopping method."""
    for pair in results.pairs:
        run = results.main_run(*pair)
        first = True
        for method in method_order(run.methods):
            if is_baseline(method) or oracle_stop(method):
                continue
            yield pair, run, method, first
            first = False


def _shown(results: Results, pair, run: Run, method: str, first: bool) -> dict:
    """What a stopping method's row shows beside its numbers: whether it opens its pool, its
    labels and, for a method on fewer traces, its share of the vote's tokens."""
    narrow = runs_fewer_traces(method)
    md, tex = method_label(method, run.settings(method))
    return {
        "first": first,
        "label": md,
        "label_tex": tex,
        "narrow": narrow,
        "vote_share_pct": vote_share(results, pair, run, method) if narrow else None,
    }


#: beside a stopping method's numbers (:func:`_shown`)
SHOWN = ["first", "label", "label_tex", "narrow", "vote_share_pct"]


def oracle_share_frame(results: Results, reads: Reads | None = None) -> pd.DataFrame:
    """Every early-stopping method: accuracy and its difference from the full-budget vote,
    savings without and with the probes, its pipeline's oracle-first savings and its share of
    them."""
    reads = Reads() if reads is None else reads
    data = []
    for pair, run, method, first in stopping_methods(results):
        ov = reads(run, method)
        vote, orc = family_baseline(method), oracle_of(method)
        base = number(reads(results.find(*pair, vote), vote), "accuracy_pct")
        oracle = number(reads(results.find(*pair, orc), orc), "savings_pct")
        acc, sav = number(ov, "accuracy_pct"), number(ov, "savings_pct")
        delta = None if acc is None or base is None else acc - base
        data.append(
            {
                "model": pair[0],
                "dataset": pair[1],
                "method": method,
                "accuracy_pct": acc,
                "accuracy_delta_pp": delta,
                "savings_pct": sav,
                "savings_with_probes_pct": number(ov, "savings_with_probes_pct"),
                "oracle_savings_pct": oracle,
                "share_of_oracle_pct": None if sav is None or not oracle else 100.0 * sav / oracle,
                **_shown(results, pair, run, method, first),
            }
        )
    return pd.DataFrame(data)


PROBE_COST_COLUMNS = [
    "model",
    "dataset",
    "setting",
    "method",
    "savings_pct",
    "savings_with_probes_pct",
    "probe_cost_pp",
    "probe_tokens_mean",
]


def probe_cost_frame(results: Results, reads: Reads | None = None) -> pd.DataFrame:
    """Every early-stopping method: savings without and with the probes' tokens, their difference
    and the probes' mean tokens per question (None where a run records no probe costs)."""
    reads = Reads() if reads is None else reads
    data = []
    for pair, run, method, first in stopping_methods(results):
        ov = reads(run, method)
        pq = run.per_question(method)
        probe = (
            float(pq["probe_tokens_mean"].mean()) if pq["probe_tokens_mean"].notna().all() else None
        )
        s, sp = number(ov, "savings_pct"), number(ov, "savings_with_probes_pct")
        data.append(
            {
                "model": pair[0],
                "dataset": pair[1],
                "setting": run.setting,
                "method": method,
                "savings_pct": s,
                "savings_with_probes_pct": sp,
                "probe_cost_pp": None if sp is None or s is None else s - sp,
                "probe_tokens_mean": probe,
                **_shown(results, pair, run, method, first),
            }
        )
    return pd.DataFrame(data, columns=PROBE_COST_COLUMNS + SHOWN)
