"""The risk audit of the certified rule: how often the early-stopped answer differs from the
full-budget vote on the same bootstrap sample, against the risk level δ the rule certifies
(Corollary 1), with a one-sided Clopper–Pearson upper bound on that rate.

The certified methods are audited, and calibrated MARS beside them (γ < 1: no guarantee). A run
is one (question, bootstrap iteration); the reference is the method's pipeline's full-budget
vote, from the same run or one that drew the same samples.
"""

from __future__ import annotations

import pandas as pd

from ...method.audit import clopper_pearson_upper, risk_target
from ...method.registry import CALIBRATED_MARS, MARS_CERTIFIED, METHODS, RISK
from ...method.settings import SPECS, same_sampling
from ..collect import Results, Run
from ..names import family_baseline, method_label
from .base import Reads

AUDIT_COLUMNS = [
    "model",
    "dataset",
    "setting",
    "method",
    "reference",
    "reference_run",
    "certified",
    "delta",
    "runs",
    "differ",
    "rate_pct",
    "rate_upper95_pct",
    "worst_question_pct",
    "questions_over_delta",
]


def certified(method: str) -> bool:
    """The method stops by the certified rule (its risk is bounded by δ)."""
    m = METHODS.get(method)
    return m is not None and m.rule == MARS_CERTIFIED


def audit_methods() -> list[str]:
    """The certified rule's methods, then calibrated MARS (no guarantee, audited beside them)."""
    return [name for name in METHODS if certified(name)] + CALIBRATED_MARS.members()


def reference_run(results: Results, run: Run, method: str) -> Run | None:
    """The run holding the method's full-budget vote on the same samples (its own first)."""
    base = family_baseline(method)
    s = run.settings(method)
    for r in [run, *results.runs_of(run.model, run.dataset)]:
        if base in r.overall and same_sampling(s, r.settings(base)):
            return r
    return None


__all__ = [
    "AUDIT_COLUMNS",
    "PROMISE_COLUMNS",
    "audit_frame",
    "audit_methods",
    "certified",
    "clopper_pearson_upper",
    "promise_frame",
    "promised",
    "reference_run",
    "risk_audit",
    "verdict",
]


def _differ(results: Results, run: Run, method: str) -> tuple[Run, pd.Series, pd.Series] | None:
    """(the reference run, whether each run's stopped answer differs from the full-budget vote
    of its sample, its question) of a method, None without a reference."""
    ref = reference_run(results, run, method)
    if ref is None:
        return None
    base = family_baseline(method)
    a = run.per_iteration(method)[["qid", "iteration", "answer"]]
    b = ref.per_iteration(base)[["qid", "iteration", "answer"]]
    j = a.merge(b, on=["qid", "iteration"], suffixes=("", "_full"), validate="one_to_one")
    return ref, j["answer"] != j["answer_full"], j["qid"]


def risk_audit(results: Results) -> pd.DataFrame:
    """Per (run, audited method): runs whose stopped answer differs from the full-budget vote,
    their rate with its upper bound, the worst question's rate and the questions above δ."""
    recs = []
    for run in results.runs:
        for method in [m for m in audit_methods() if m in run.overall]:
            found = _differ(results, run, method)
            if found is None:
                continue
            ref, differ, qid = found
            base = family_baseline(method)
            per_q = differ.groupby(qid).mean()
            n, k = len(differ), int(differ.sum())
            delta = run.settings(method).get("delta", SPECS["delta"].default)
            recs.append(
                {
                    "model": run.model,
                    "dataset": run.dataset,
                    "setting": run.setting,
                    "method": method,
                    "reference": base,
                    "reference_run": str(ref.path),
                    "certified": certified(method),
                    "delta": float(delta),
                    "runs": n,
                    "differ": k,
                    "rate_pct": 100.0 * k / n if n else float("nan"),
                    "rate_upper95_pct": 100.0 * clopper_pearson_upper(k, n),
                    "worst_question_pct": 100.0 * float(per_q.max())
                    if len(per_q)
                    else float("nan"),
                    "questions_over_delta": int((per_q > delta).sum()),
                }
            )
    return pd.DataFrame(recs, columns=AUDIT_COLUMNS)


def verdict(row) -> str:
    """``holds`` or ``violated`` for a certified method's audit row (its rate against δ), ``no
    guarantee`` for the others."""
    if not row.certified:
        return "no guarantee"
    return "holds" if row.rate_pct <= 100 * row.delta else "violated"


def audit_frame(results: Results, reads: Reads | None = None) -> pd.DataFrame:
    """The risk audit and what its table shows beside it: each row's block (its pool, with the
    setting where a pool has several and what differs in its samples), the method's labels and
    the verdict."""
    reads = Reads() if reads is None else reads
    df = risk_audit(results)
    shown = []
    n_settings = df.groupby(["model", "dataset"]).setting.nunique() if len(df) else None
    for r in df.itertuples():
        assert n_settings is not None  # df has rows
        run = next(
            x
            for x in results.runs
            if (x.model, x.dataset, x.setting) == (r.model, r.dataset, r.setting)
        )
        reads(run, r.method)
        reads(next(x for x in results.runs if str(x.path) == r.reference_run), r.reference)
        md, tex = method_label(r.method, run.settings(r.method))
        ds = f"{r.dataset} · {r.setting}" if n_settings[(r.model, r.dataset)] > 1 else r.dataset
        if results.sampling_difference(run):
            ds += f" ({results.sampling_difference(run)})"
        shown.append({"block": ds, "label": md, "label_tex": tex, "verdict": verdict(r)})
    return pd.concat(
        [df, pd.DataFrame(shown, columns=["block", "label", "label_tex", "verdict"])], axis=1
    )


#: what :func:`promise_frame` holds: a method's promised risk against the rate it realised
PROMISE_COLUMNS = [
    "model",
    "dataset",
    "setting",
    "method",
    "reference",
    "promise",
    "promised_pct",
    "runs",
    "differ",
    "rate_pct",
    "rate_upper95_pct",
]


def promised(method: str) -> bool:
    """The method states the risk it takes: MARS2's α, the certified rule's δ."""
    m = METHODS.get(method)
    return m is not None and m.rule in (RISK, MARS_CERTIFIED)


def promise_frame(results: Results) -> pd.DataFrame:
    """Per (run, method that states its risk) with its full-budget vote on the same samples:
    the risk it promises (its own setting, :func:`mars.method.audit.risk_target`) and the rate
    at which its stopped answer differed from that vote, with the one-sided 95 % bound."""
    recs = []
    for run in results.runs:
        for method in [m for m in run.overall if promised(m)]:
            found = _differ(results, run, method)
            if found is None:
                continue
            _, differ, _ = found
            target, source = risk_target(METHODS[method], run.settings(method))
            n, k = len(differ), int(differ.sum())
            recs.append(
                {
                    "model": run.model,
                    "dataset": run.dataset,
                    "setting": run.setting,
                    "method": method,
                    "reference": family_baseline(method),
                    "promise": source,
                    "promised_pct": 100.0 * target,
                    "runs": n,
                    "differ": k,
                    "rate_pct": 100.0 * k / n if n else float("nan"),
                    "rate_upper95_pct": 100.0 * clopper_pearson_upper(k, n),
                }
            )
    return pd.DataFrame(recs, columns=PROMISE_COLUMNS)
