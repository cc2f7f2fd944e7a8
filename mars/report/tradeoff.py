"""Accuracy–savings trade-off curves: the simulator run in-process over a grid of settings.

Each :class:`Sweep` varies one :class:`~mars.simulate.Settings` field for one method (γ for MARS
with a fixed γ, u for Parallel-Probe, the share for consensus stopping, δ for the certified rule):
by default one per method that declares what it sweeps (:attr:`mars.method.registry.Method.sweep`).
Runs that share settings are simulated together (one bootstrap draw, one q-model per question),
and the per-question arrays are cached across runs, so a grid costs little more than its
simulations. Keep it cheap with few questions / iterations.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..method.registry import (
    CALIBRATED_MARS,
    METHODS,
    ORACLE_FIRST_STOP,
    PIPELINES,
    SELF_CONSISTENCY,
    get_method,
    method_order,
)
from ..method.settings import SPECS
from ..results import per_question_frame
from ..simulate import QuestionContext, QuestionResult, Settings, run_method
from . import trace
from .figures import FORMATS, FigureOut, _finish, style
from .provenance import pool_source


@dataclass(frozen=True)
class Sweep:
    family: str
    method: str
    param: str  # a Settings field
    values: tuple


def default_sweeps() -> tuple[Sweep, ...]:
    """A curve for every method that declares a sweep, in the report's method order."""
    declared = {name: m.sweep for name, m in METHODS.items() if m.sweep is not None}
    return tuple(
        Sweep(declared[n].title, n, declared[n].param, declared[n].values)
        for n in method_order(declared)
    )


#: single points at the base settings (self-consistency votes): family, method, marker, color
POINT_MARKS = (
    (f"full-budget {PIPELINES[SELF_CONSISTENCY]}", SELF_CONSISTENCY, "X", "#222222"),
    ("MARS, calibrated γ", CALIBRATED_MARS.of(SELF_CONSISTENCY), "*", "#1f77b4"),
    ("oracle stop (first)", ORACLE_FIRST_STOP.of(SELF_CONSISTENCY), "D", "#7f7f7f"),
)
POINTS = tuple((family, method) for family, method, _, _ in POINT_MARKS)


def run_tradeoff(
    pool,
    base: Settings,
    sweeps=None,
    points=POINTS,
    questions: list[int] | None = None,
    cache_dir=None,
) -> pd.DataFrame:
    """One row per (family, value): accuracy and savings (means over questions, as overall.json).

    Settings that only change a stopping rule's knob (γ, δ, u, share, ...) share each question's
    bootstrap samples and warmup q-model through
    :meth:`~mars.simulate.QuestionContext.with_settings`, which is exactly what a fresh simulation
    would rebuild.
    """
    sweeps = default_sweeps() if sweeps is None else sweeps
    jobs: dict[Settings, list] = {}
    for sw in sweeps:
        for v in sw.values:
            s = base.replace(**{sw.param: SPECS[sw.param].type(v)}).validate()
            jobs.setdefault(s, []).append((sw.family, sw.method, sw.param, v))
    for family, method in points:
        jobs.setdefault(base.validate(), []).append((family, method, None, None))
    p = trace.pool_of(pool)
    qids = list(p.qids if questions is None else questions)
    per_settings: dict[Settings, list] = {s: [] for s in jobs}
    for qid in qids:
        contexts: dict[tuple, QuestionContext] = {}
        for s, entries in jobs.items():
            arr = trace.load_question(pool, qid, s, cache_dir)
            key = s.sampling_key()
            if key not in contexts:
                contexts[key] = QuestionContext(arr, s)
            ctx = contexts[key].with_settings(s)
            res = QuestionResult(
                qid=arr.qid,
                ground_truth=arr.ground_truth,
                representatives=arr.representatives,
                content_hash=arr.content_hash,
            )
            for method in dict.fromkeys(m for _, m, _, _ in entries):
                res.methods[method] = run_method(ctx, get_method(method))
            per_settings[s].append(res)
    rows = []
    for s, entries in jobs.items():
        for family, method, param, v in entries:
            pq = per_question_frame(per_settings[s], method)
            rows.append(
                {
                    "family": family,
                    "method": method,
                    "param": param,
                    "value": v,
                    "accuracy_pct": float(100 * pq.accuracy.mean()),
                    "savings_pct": float(pq.savings_pct.mean()),
                    "n_questions": len(pq),
                    "iterations": s.iterations,
                    "budget": s.budget,
                }
            )
    order = {sw.family: i for i, sw in enumerate(sweeps)}
    df = pd.DataFrame(rows)
    df["_o"] = df.family.map(order).fillna(len(order))
    df = df.sort_values(["_o", "family", "value"], kind="stable", na_position="last").drop(
        columns="_o"
    )
    return df.reset_index(drop=True)


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def fig_tradeoff(
    frames: dict, out_dir: Path, formats=FORMATS, sources: dict | None = None
) -> FigureOut:
    """Accuracy against savings per sweep, one panel per pool label (``sources``: the
    :class:`~mars.report.provenance.DataSource` of each label's pool)."""
    labels = list(frames)
    data = (
        pd.concat([f.assign(label=k) for k, f in frames.items()], ignore_index=True)
        if frames
        else pd.DataFrame()
    )
    fo = FigureOut(
        "fig-tradeoff",
        "Accuracy–savings trade-off",
        "Accuracy against mean per-question token savings when each rule's knob is swept (MARS "
        "with a fixed γ, the certified rule's δ, Parallel-Probe's u, the consensus share), with "
        "the full-budget vote, calibrated MARS and the oracle stop as single points. Simulated "
        "in-process on few questions and iterations; see tradeoff.csv.",
        data=data,
    )
    fo.label_data(sources or {})
    palette = dict(
        zip(list(dict.fromkeys(data.family)) if len(data) else [], sns.color_palette("tab10"))
    )
    with style():
        n = max(len(labels), 1)
        fig, axes = plt.subplots(
            1, n, figsize=(1.0 + 4.2 * n, 4.6), squeeze=False, layout="constrained"
        )
        for ax, label in zip(axes[0], labels):
            df = data[data.label == label]
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
            marks = {method: (mk, col) for _, method, mk, col in POINT_MARKS}
            for _, r in df[df.param.isna()].iterrows():
                mk, col = marks.get(r.method, ("s", "#444444"))
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
                f"{label}: {int(r0.n_questions)} questions × {int(r0.iterations)} samples, "
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


def parse_tradeoff_spec(spec: str) -> tuple[str, str]:
    """``label=POOL`` or ``POOL`` (label = the pool's name)."""
    if "=" in spec:
        label, path = spec.split("=", 1)
        return label, path
    p = Path(spec)
    name = p.parent.name if p.name in ("pool.parquet", "pool") else p.stem
    return name or "pool", spec


def tradeoff_all(
    specs: list[str],
    out_dir: Path,
    budget: int = 128,
    iterations: int = 8,
    max_questions: int | None = None,
    cache_dir=None,
    formats=FORMATS,
    sweeps=None,
) -> FigureOut:
    frames, sources = {}, {}
    for spec in specs:
        label, path = parse_tradeoff_spec(spec)
        sources[label] = pool_source(Path(path), path)
        base = Settings(budget=budget, iterations=iterations)
        questions = trace.pool_of(path).qids[:max_questions] if max_questions else None
        frames[label] = run_tradeoff(
            path, base, sweeps=sweeps, questions=questions, cache_dir=cache_dir
        )
    return fig_tradeoff(frames, out_dir, formats, sources)
