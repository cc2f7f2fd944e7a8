"""The points of the two figures that put every method side by side: accuracy against savings
(the frontier) and against total and sequential tokens (latency).

Each point is a (run, method) of the runs that drew a pool's main samples, with the family its
mark is coloured by and the SC method whose mark a DeepConf method takes (DCO + MARS is drawn as
MARS), so both figures and their CSVs name every point alike.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from ...method.registry import (
    CONSENSUS,
    CONVERGENCE_EXIT,
    MARS,
    MARS_CERTIFIED,
    METHODS,
    ORACLE_FIRST_STOP,
    PARALLEL_PROBE,
    PIPELINES,
    PROBE_CONTROLLER,
    RISK,
    SELF_CONSISTENCY,
)
from ..collect import Results, Run
from ..names import method_label, method_order

#: the families marks are coloured by
FAMILIES = (
    "full budget",
    "MARS",
    "Parallel-Probe",
    "consensus",
    "convergence exit",
    "sample more",
    "oracle",
    "other",
)
#: the family of an early-stopping rule (by its kind); the rest is said by the method itself
RULE_FAMILIES = {
    rule.kind: family
    for family, rules in (
        ("MARS", (MARS, MARS_CERTIFIED, RISK)),
        ("Parallel-Probe", (PARALLEL_PROBE, PROBE_CONTROLLER)),
        ("consensus", (CONSENSUS,)),
        ("convergence exit", (CONVERGENCE_EXIT,)),
    )
    for rule in rules
}


def mark_family(method: str) -> str:
    """The family a method's mark is coloured by."""
    m = METHODS.get(method)
    if m is None:
        return "other"
    if m.is_baseline:
        return "full budget"
    if m.reads_future:
        return "oracle"
    if m.rule.samples_more:
        return "sample more"
    return RULE_FAMILIES.get(m.rule.kind, "other")


def sc_counterpart(method: str) -> str:
    """The SC pipeline's method with the same rule and q as ``method`` (itself when it is an SC
    method or has none): the method whose mark and name a DeepConf method is drawn with."""
    m = METHODS.get(method)
    if m is None or m.baseline == SELF_CONSISTENCY:
        return method
    for other in METHODS.values():
        if other.baseline == SELF_CONSISTENCY and (
            other.rule,
            other.q,
            other.launch,
            other.width,
        ) == (m.rule, m.q, m.launch, m.width):
            return other.name
    return method


def _point(results: Results, pair: tuple[str, str], run: Run, method: str) -> dict:
    """What every point of both figures says of a (run, method)."""
    m = METHODS.get(method)
    base = m.baseline if m is not None else SELF_CONSISTENCY
    twin = sc_counterpart(method)
    return {
        "model": pair[0],
        "dataset": pair[1],
        "setting": run.setting,
        "pipeline": PIPELINES[base],
        "method": method,
        "label": method_label(method, run.settings(method))[0],
        "mark": method_label(twin, run.settings(method))[0],
        "counterpart": twin,
        "family": mark_family(method),
    }


def _points(
    results: Results, keep: Callable[[Run, str], bool]
) -> list[tuple[tuple[str, str], Run, str]]:
    """(pair, run, method) of every method ``keep(run, method)`` admits, pool by pool: the runs
    that drew each pool's main samples, the main setting first, methods in report order."""
    out = []
    for pair in results.pairs:
        for run in results.comparable_runs(*pair):
            out += [(pair, run, m) for m in method_order(list(run.methods)) if keep(run, m)]
    return out


# -- the frontier: every early-stopping method against the oracle-first stop ------------------
FRONTIER_COLUMNS = [
    "model",
    "dataset",
    "setting",
    "pipeline",
    "method",
    "label",
    "mark",
    "counterpart",
    "family",
    "pp_conv",
    "accuracy_pct",
    "savings_pct",
    "savings_paid_pct",
    "savings_against",
    "baseline_accuracy_pct",
    "oracle_savings_pct",
]


def _stops_early(method: str) -> bool:
    """On the frontier: a method that may stop early and reads nothing of the future."""
    m = METHODS.get(method)
    return m is not None and not m.is_baseline and not m.reads_future


def _vote_savings(
    results: Results, pair: tuple[str, str], run: Run, method: str
) -> tuple[float, float | None] | None:
    """The savings of a method that runs fewer traces than the budget (single-sac) against its
    pipeline's full-budget vote on the same samples — what every other point's savings are
    against — as the simulator averages them (per question, then across questions), the paper's
    and paid (its main traces, its warmup and its probes; None for a run simulated before paid
    savings were recorded); None when the vote's run is not there."""
    base = METHODS[method].baseline
    vote_run = results.find(*pair, base)
    if vote_run is None:
        return None
    mine = run.per_iteration(method)
    vote = vote_run.per_iteration(base)[["qid", "iteration", "tokens"]]
    both = mine.merge(vote.rename(columns={"tokens": "tokens_vote"}), on=["qid", "iteration"])
    if len(both) != len(mine) or not (both.tokens_vote > 0).all():
        return None

    def mean_saved(tokens: pd.Series) -> float:
        saved = 1.0 - tokens / both.tokens_vote
        return float(100.0 * saved.groupby(both.qid).mean().mean())

    paid = None
    if run.overall[method].get("savings_paid_pct") is not None and "warmup_tokens" in both:
        probes = both.probe_tokens.fillna(0.0) if "probe_tokens" in both else 0.0
        paid = mean_saved(both.tokens + both.warmup_tokens + probes)
    return mean_saved(both.tokens), paid


def _probe_rule(method: str) -> bool:
    """The method stops by Parallel-Probe's consensus rule (its u is a point's setting)."""
    return METHODS[method].rule.kind == PARALLEL_PROBE.kind


def frontier_points(results: Results) -> pd.DataFrame:
    """(accuracy, savings) of every early-stopping method of the runs that drew each pool's
    main samples, with its pipeline's full-budget accuracy and oracle-first savings."""
    rows = []
    for pair, run, method in _points(results, lambda run, m: _stops_early(m)):
        ov = run.overall[method]
        savings, against = ov.get("savings_pct"), "full-budget vote"
        # what a live run pays (its warmup, its probes); None for a run simulated before
        paid = ov.get("savings_paid_pct")
        if METHODS[method].width is not None:  # its own savings are against its few traces
            vote = _vote_savings(results, pair, run, method)
            if vote is None:
                against = "own traces"
            else:
                savings, paid = vote
        base = METHODS[method].baseline
        base_run = results.find(*pair, base)
        orc = ORACLE_FIRST_STOP.of(base)
        orc_run = results.find(*pair, orc)
        rows.append(
            {
                **_point(results, pair, run, method),
                "pp_conv": run.settings(method).get("pp_conv") if _probe_rule(method) else None,
                "accuracy_pct": ov.get("accuracy_pct"),
                "savings_pct": savings,
                "savings_paid_pct": paid,
                "savings_against": against,
                "baseline_accuracy_pct": None
                if base_run is None
                else base_run.overall[base].get("accuracy_pct"),
                "oracle_savings_pct": None
                if orc_run is None
                else orc_run.overall[orc].get("savings_pct"),
            }
        )
    return pd.DataFrame(rows, columns=FRONTIER_COLUMNS)


# -- latency: accuracy against total and sequential tokens ---------------------------------------
LATENCY_COLUMNS = [
    "model",
    "dataset",
    "setting",
    "protocol",
    "pipeline",
    "method",
    "label",
    "mark",
    "counterpart",
    "family",
    "accuracy_pct",
    "tokens_mean",
    "seq_tokens_mean",
]


def latency_points(results: Results) -> pd.DataFrame:
    """(accuracy, total tokens, sequential tokens) of every method of the runs that drew each
    pool's main samples (simulations made before the sequential axis have none)."""
    rows = []
    for pair, run, method in _points(
        results, lambda run, m: run.overall[m].get("seq_tokens_mean") is not None
    ):
        ov = run.overall[method]
        rows.append(
            {
                **_point(results, pair, run, method),
                "protocol": run.settings(method).get("protocol") or "bootstrap",
                "accuracy_pct": ov.get("accuracy_pct"),
                "tokens_mean": ov.get("tokens_mean"),
                "seq_tokens_mean": ov.get("seq_tokens_mean"),
            }
        )
    return pd.DataFrame(rows, columns=LATENCY_COLUMNS)
