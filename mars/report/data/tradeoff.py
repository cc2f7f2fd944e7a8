"""Accuracy–savings trade-off curves, from ordinary simulations.

Each method that declares a sweep (:attr:`mars.method.registry.Method.sweep`: γ for MARS with a
fixed γ, u for Parallel-Probe, the share for consensus stopping, δ for the certified rule, ...) is a
curve through the runs of one pool that hold it, drew the same samples and differ only in swept
knobs; the full-budget vote, calibrated MARS and the oracle stop are single points. Each point has
its savings as the paper counts them and as a live run pays them (``savings_paid_pct``: its warmup
and its probes charged). The workflow's ``tradeoff`` section makes such runs
(:func:`mars.method.registry.sweep_settings`), cached and sharded like every simulation; nothing
here simulates.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ...method.registry import METHODS, SWEEP_POINTS, swept_methods
from ..collect import Results, Run
from ..names import method_label

#: a curve needs this many values of its knob (two points are a line, not a trade-off)
MIN_POINTS = 3
#: what the single points are called (full-budget vote, calibrated MARS, oracle-first)
POINT_LABELS = dict(zip(SWEEP_POINTS, ("full-budget vote", "MARS, calibrated γ", "oracle stop")))


def _swept_params() -> set[str]:
    return {METHODS[m].sweep.param for m in swept_methods()}  # type: ignore[union-attr]


def _group_key(run: Run) -> tuple:
    """Runs whose points may share a curve: the same samples of the same questions, every
    setting but the swept knobs equal."""
    swept = _swept_params()
    s = run.settings(run.methods[0])
    return (run.checksum, tuple(sorted((k, repr(v)) for k, v in s.items() if k not in swept)))


def _row(run: Run, method: str, family: str, param: str | None, value) -> dict:
    ov = run.overall[method]
    s = run.settings(method)
    return {
        "family": family,
        "method": method,
        "param": param,
        "value": value,
        "accuracy_pct": float(ov["accuracy_pct"]),
        "savings_pct": float(ov["savings_pct"]),
        # what a live run pays (its warmup, its probes); NaN for a run simulated before
        "savings_paid_pct": float("nan")
        if ov.get("savings_paid_pct") is None
        else float(ov["savings_paid_pct"]),
        "n_questions": int(ov["n_questions"]),
        "iterations": s.get("iterations"),
        "budget": s.get("budget"),
        "setting": run.setting,
    }


def tradeoff_frame(runs: list[Run]) -> pd.DataFrame:
    """The curves (at least :data:`MIN_POINTS` values of a knob) and single points of runs that
    may share a curve; the first run holding a point gives it."""
    rows = []
    for method in swept_methods():
        sweep = METHODS[method].sweep
        assert sweep is not None
        points: dict[Any, dict] = {}
        for run in runs:
            if method in run.overall:
                value = sweep.effective(run.settings(method))  # a window over the budget is it
                points.setdefault(value, _row(run, method, sweep.title, sweep.param, value))
        if len(points) >= MIN_POINTS:
            rows += sorted(points.values(), key=lambda r: r["value"])
    if rows:
        for method in SWEEP_POINTS:
            holder = next((r for r in runs if method in r.overall), None)
            if holder is not None:
                label = POINT_LABELS.get(method) or method_label(method)[0]
                rows.append(_row(holder, method, label, None, None))
    return pd.DataFrame(rows)


def tradeoff_frames(results: Results) -> dict[tuple[str, str], pd.DataFrame]:
    """Per pool, the group of runs with the most curve points (the main setting's on a tie)."""
    frames = {}
    for pair in results.pairs:
        groups: dict[tuple, list[Run]] = {}
        for run in results.runs_of(*pair):
            groups.setdefault(_group_key(run), []).append(run)
        best = None
        for runs in groups.values():
            df = tradeoff_frame(runs)
            n = int(df.param.notna().sum()) if len(df) else 0
            if n and (best is None or n > best[0]):
                best = (n, df)
        if best is not None:
            frames[pair] = best[1]
    return frames


def tradeoff_points(frames: dict[tuple[str, str], pd.DataFrame]) -> pd.DataFrame:
    """Every pool's curves and points in one frame, each row with its pool."""
    return pd.concat(
        [f.assign(model=k[0], dataset=k[1]) for k, f in frames.items()], ignore_index=True
    )
