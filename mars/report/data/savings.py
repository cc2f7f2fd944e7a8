"""Per-question savings with 95 % t-intervals across questions: calibrated MARS's per pool and
pipeline (Fig. 1 left), and the paired differences of the ablations (Fig. 4 a–b: what γ
calibration adds, what oracle q would add), with Fig. 4's learned-vs-oracle q beside them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from ...method.registry import CALIBRATED_MARS, FIXED_GAMMA_MARS, ORACLE_Q_MARS, PIPELINES
from ..collect import Results
from .switch import q_calibration_frames

#: what Fig. 1 (left) shows: calibrated MARS of every pipeline
FIG1_METHODS = {title: CALIBRATED_MARS.of(p) for p, title in PIPELINES.items()}
#: Fig. 4 (a): calibrated γ − γ = 1, per pipeline
GAMMA_PAIRS = {
    title: (CALIBRATED_MARS.of(p), FIXED_GAMMA_MARS.of(p)) for p, title in PIPELINES.items()
}
#: Fig. 4 (b): oracle q − learned q, both pipelines at γ = 1 (one panel, one γ: DeepConf has no
#: calibrated oracle-q method)
ORACLE_PAIRS = {
    title: (ORACLE_Q_MARS.of(p), FIXED_GAMMA_MARS.of(p)) for p, title in PIPELINES.items()
}
CI_COLUMNS = ["n_questions", "mean", "sd", "ci_low", "ci_high"]


def t_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float, float, float]:
    """(mean, sd, low, high) with a t interval across questions (NaN values left out)."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    n = len(v)
    if n == 0:
        return (np.nan,) * 4
    mean = float(v.mean())
    if n < 2:
        return mean, np.nan, np.nan, np.nan
    sd = float(v.std(ddof=1))
    h = float(stats.t.ppf(0.5 + level / 2, n - 1) * sd / np.sqrt(n))
    return mean, sd, mean - h, mean + h


def savings_summary(results: Results, methods: dict = FIG1_METHODS) -> pd.DataFrame:
    """Mean per-question savings and its 95 % CI across questions, per (model, dataset,
    pipeline)."""
    rows = []
    for model, dataset in results.pairs:
        for pipeline, method in methods.items():
            run = results.find(model, dataset, method)
            if run is None:
                continue
            pq = run.per_question(method)
            v = pq["savings_pct"].to_numpy(float)
            mean, sd, lo, hi = t_interval(v)
            # what a live run pays (its warmup, its probes): absent from runs simulated before
            paid = (
                float(pq["savings_paid_pct"].mean()) if "savings_paid_pct" in pq else float("nan")
            )
            rows.append(
                {
                    "model": model,
                    "dataset": dataset,
                    "setting": run.setting,
                    "pipeline": pipeline,
                    "method": method,
                    "n_questions": len(v),
                    "mean": mean,
                    "sd": sd,
                    "ci_low": lo,
                    "ci_high": hi,
                    "paid_mean": paid,
                }
            )
    return pd.DataFrame(
        rows,
        columns=["model", "dataset", "setting", "pipeline", "method", *CI_COLUMNS, "paid_mean"],
    )


def paired_difference(results: Results, pairs: dict, column: str = "savings_pct") -> pd.DataFrame:
    """Per-question difference a − b of ``column`` (same run), mean and 95 % CI per (model,
    dataset, pipeline)."""
    rows = []
    for model, dataset in results.pairs:
        for pipeline, (a, b) in pairs.items():
            run = next(
                (
                    r
                    for r in results.comparable_runs(model, dataset)
                    if a in r.overall and b in r.overall
                ),
                None,
            )
            if run is None:
                continue
            qa = run.per_question(a)[["qid", column]]
            qb = run.per_question(b)[["qid", column]]
            j = qa.merge(qb, on="qid", suffixes=("_a", "_b"))
            d = (j[f"{column}_a"] - j[f"{column}_b"]).to_numpy(float)
            mean, sd, lo, hi = t_interval(d)
            rows.append(
                {
                    "model": model,
                    "dataset": dataset,
                    "setting": run.setting,
                    "pipeline": pipeline,
                    "method_a": a,
                    "method_b": b,
                    "n_questions": len(d),
                    "mean": mean,
                    "sd": sd,
                    "ci_low": lo,
                    "ci_high": hi,
                }
            )
    return pd.DataFrame(
        rows,
        columns=["model", "dataset", "setting", "pipeline", "method_a", "method_b", *CI_COLUMNS],
    )


@dataclass
class Ablations:
    """Fig. 4's panels: (a) what γ calibration adds, (b) what oracle q adds at γ = 1 (per-question
    differences), (c–d) learned against oracle q (None without an analysis)."""

    gamma: pd.DataFrame
    oracle: pd.DataFrame
    bins: pd.DataFrame | None
    checkpoints: pd.DataFrame | None

    def frame(self) -> pd.DataFrame:
        """Every panel's numbers, one frame (``panel`` a–d)."""
        parts = [self.gamma, self.oracle]
        if self.bins is not None and self.checkpoints is not None:
            parts += [self.bins.assign(panel="c"), self.checkpoints.assign(panel="d")]
        return pd.concat(parts, ignore_index=True)


def ablations(results: Results) -> Ablations:
    """Fig. 4's numbers."""
    bins, cps = q_calibration_frames(results)
    return Ablations(
        paired_difference(results, GAMMA_PAIRS).assign(panel="a"),
        paired_difference(results, ORACLE_PAIRS).assign(panel="b"),
        bins,
        cps,
    )
