"""Accuracy–savings trade-off curves, drawn from ordinary simulations.

Each method that declares a sweep (:attr:`mars.method.registry.Method.sweep`: γ for MARS with a
fixed γ, u for Parallel-Probe, the share for consensus stopping, δ for the certified rule, ...) is a
curve through the runs of one pool that hold it, drew the same samples and differ only in swept
knobs; the full-budget vote, calibrated MARS and the oracle stop are single points. The workflow's
``tradeoff`` section makes such runs (:func:`mars.method.registry.sweep_settings`), cached and
sharded like every simulation; nothing here simulates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..method.registry import METHODS, SWEEP_POINTS, swept_methods
from ..method.settings import SPECS
from .collect import Results, Run
from .figures import FORMATS, FigureOut, _finish, style
from .names import method_label

#: a curve needs this many values of its knob (two points are a line, not a trade-off)
MIN_POINTS = 3
#: the single points' markers and colours (full-budget vote, calibrated MARS, oracle-first)
POINT_MARKS = dict(zip(SWEEP_POINTS, (("X", "#222222"), ("*", "#1f77b4"), ("D", "#7f7f7f"))))
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


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def fig_tradeoff(results: Results, out_dir: Path, formats=FORMATS) -> FigureOut | None:
    """Accuracy against savings per sweep, one panel per pool with a curve; None when no pool
    has one."""
    frames = tradeoff_frames(results)
    if not frames:
        return None
    labels = list(frames)
    data = pd.concat(
        [f.assign(model=k[0], dataset=k[1]) for k, f in frames.items()], ignore_index=True
    )
    fo = FigureOut(
        "fig-tradeoff",
        "Accuracy–savings trade-off",
        "Accuracy against mean per-question token savings when each rule's knob is swept (MARS "
        "with a fixed γ, the certified rule's δ, Parallel-Probe's u, the consensus share), with "
        "the full-budget vote, calibrated MARS and the oracle stop as single points: ordinary "
        "simulations of one pool at settings that differ only in the swept knobs (the workflow's "
        "tradeoff section makes them). The numbers, and the setting of each point, are in "
        "fig-tradeoff.csv.",
        data=data,
    )
    fo.label_data(results.sources([r for r in results.runs if r.pair in set(frames)]))
    palette = dict(
        zip(list(dict.fromkeys(data.family)) if len(data) else [], sns.color_palette("tab10"))
    )
    with style():
        n = max(len(labels), 1)
        fig, axes = plt.subplots(
            1, n, figsize=(max(1.0 + 4.2 * n, 10.0), 5.2), squeeze=False, layout="constrained"
        )
        for ax, label in zip(axes[0], labels):
            df = data[(data.model == label[0]) & (data.dataset == label[1])]
            curves = df[df.param.notna()]
            for fam, sub in curves.groupby("family", sort=False):
                sub = sub.sort_values("value")
                param = sub.param.iloc[0]
                sym = SPECS[param].symbol or param if param in SPECS else param
                vals = ", ".join(_fmt(v) for v in sub.value)
                ax.plot(
                    sub.savings_pct,
                    sub.accuracy_pct,
                    linewidth=1.4,
                    color=palette[fam],
                    zorder=2,
                    label=f"{fam} ({sym} = {vals})",
                )
                # marker size grows with the knob's value:
                # the curve's direction without text clutter
                ax.scatter(
                    sub.savings_pct,
                    sub.accuracy_pct,
                    s=np.linspace(10, 60, len(sub)),
                    color=palette[fam],
                    edgecolor="white",
                    linewidth=0.5,
                    zorder=3,
                )
            for _, r in df[df.param.isna()].iterrows():
                mk, col = POINT_MARKS.get(r.method, ("s", "#444444"))
                ax.scatter(
                    [r.savings_pct],
                    [r.accuracy_pct],
                    marker=mk,
                    s=110 if mk == "*" else 50,
                    color=col,
                    zorder=5,
                    label=r.family,
                    edgecolor="white",
                    linewidth=0.5,
                )
            r0 = df.iloc[0]
            ax.set_title(
                f"{label[0]}/{label[1]}: {int(r0.n_questions)} questions × "
                f"{int(r0.iterations)} samples, "
                f"budget {int(r0.budget)}",
                fontsize=9,
            )
            ax.set_xlabel("token savings (%)")
            ax.set_ylabel("accuracy (%)")
            lo, hi = df.accuracy_pct.min(), df.accuracy_pct.max()
            pad = max(2.0, 0.08 * (hi - lo))
            ax.set_ylim(max(lo - pad, -1), min(hi + pad, 101))
        if labels:
            entries: dict[str, Any] = {}
            for ax in axes[0]:
                for h, lab in zip(*ax.get_legend_handles_labels()):
                    entries.setdefault(lab, h)
            fig.legend(
                list(entries.values()),
                list(entries),
                loc="outside lower center",
                ncol=2,
                frameon=False,
                fontsize=7,
                title="marker size grows with the swept value",
                title_fontsize=7,
            )
        else:
            axes[0][0].set_axis_off()
    return _finish(fo, fig, out_dir, formats)
