"""What the fit stage learned, from each pool's analysis (``mars analyze``): the per-question
switch models summarised per pool, and how the learned switch probability q compares with the
oracle one (the share of running traces that do switch before the end)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...store.schema import SWITCH_FEATURES
from ..collect import Results
from .base import Reads


def switch_models_frame(results: Results, reads: Reads | None = None) -> pd.DataFrame:
    """Per analysed pool with a fit: questions, training rows per question, the share of rows
    that switch, in-sample log-loss and Brier score, and each standardised feature's coefficient
    (mean and sd over the questions whose model was fitted)."""
    reads = Reads() if reads is None else reads
    data = []
    for pair in results.pairs:
        found = results.analysis_of(*pair)
        if found is None or not len(found[1].switch_models):
            run = results.main_run(*pair)
            if run.methods:
                reads(run, run.methods[0])  # read, found no fit: its provenance still shows
            continue
        run, df = found[0], found[1].switch_models
        reads(run, next(iter(found[1].inputs), run.methods[0]))
        names = [f"coef_{n}" for n in SWITCH_FEATURES]
        fitted = df[df[names].notna().all(axis=1)]
        coefs = fitted[names].to_numpy(dtype=float) if len(fitted) else np.zeros((0, len(names)))
        rec = {
            "model": pair[0],
            "dataset": pair[1],
            "questions": len(df),
            "rows_mean": float(df.n_rows.mean()),
            "switch_share": float((df.n_positive / df.n_rows.where(df.n_rows > 0)).mean()),
            "log_loss": float(fitted.log_loss.mean()) if len(fitted) else None,
            "brier": float(fitted.brier.mean()) if len(fitted) else None,
        }
        for k, name in enumerate(SWITCH_FEATURES):
            rec[f"coef_{name}_mean"] = float(coefs[:, k].mean()) if len(coefs) else None
            rec[f"coef_{name}_sd"] = float(coefs[:, k].std()) if len(coefs) else None
        data.append(rec)
    return pd.DataFrame(data)


#: learned and oracle q of a bin or a checkpoint
Q_COLUMNS = ["q_learned_mean", "q_oracle_rate"]


def q_calibration_frames(results: Results) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """(bins, checkpoints) frames of learned vs oracle q for every analysed pair: held-out
    running traces binned by learned q, and the means at each checkpoint position; (None, None)
    without an analysis."""
    bins, cps = [], []
    for pair in results.pairs:
        found = results.analysis_of(*pair)
        if found is None or not len(found[1].q_calibration):
            continue
        qc = found[1].q_calibration
        label = f"{pair[0]}/{pair[1]}"
        n = int(qc.n_questions.iloc[0])
        tag = {"label": label, "model": pair[0], "dataset": pair[1], "n_questions": n}
        bins.append(qc[qc.kind == "bin"][["bin", "lo", "hi", "n", *Q_COLUMNS]].assign(**tag))
        cps.append(qc[qc.kind == "checkpoint"][["position", "n", *Q_COLUMNS]].assign(**tag))
    if not bins:
        return None, None
    bins_df = pd.concat(bins, ignore_index=True).astype({"bin": int, "n": int})
    cps_df = pd.concat(cps, ignore_index=True).astype({"position": int, "n": int})
    return bins_df, cps_df
