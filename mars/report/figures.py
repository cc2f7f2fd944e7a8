"""The paper's figures (1 left/right, 2, 4) from simulate outputs and, where needed, the trace pool.

Every figure is written as PNG and PDF (byte-stable for the same input: fixed DPI, no dates or
software tags in the metadata, a fixed SVG hash salt) next to a CSV of the numbers it plots.
Figures that need trace-level data (1 right, 2, 4 c–d) rebuild the simulator's own question
context from the pool named in ``overall.json`` (or ``--pool``) and say so when it is missing.
"""

from __future__ import annotations

import contextlib
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import matplotlib

matplotlib.use("Agg")
import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from scipy import stats

from ..candidates import (
    CANDIDATES,
    MARS_SC,
    PP_SC,
    example_candidates,
    pp_failure_candidates,
)
from ..method.registry import (
    CALIBRATED_MARS,
    FIXED_GAMMA_MARS,
    ORACLE_FIRST_STOP,
    ORACLE_Q_MARS,
    PIPELINES,
    SELF_CONSISTENCY,
)
from ..store.analysis import EXAMPLE, PP_FAILURE, Trajectory
from .collect import Results, Run
from .provenance import describe, footer

DPI = 150
FORMATS = ("png", "pdf")
RC = {
    "svg.hashsalt": "mars-report",
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "savefig.dpi": DPI,
    "figure.dpi": DPI,
    "path.simplify": False,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.title_fontsize": 8,
    "font.family": "DejaVu Sans",
}
METADATA = {
    "png": {"Software": None},
    "pdf": {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None},
    "svg": {"Date": None, "Creator": None},
}
PIPELINE_COLORS = {"SC": "#4C72B0", "DeepConf": "#DD8452"}
CORRECT_COLOR = "#2ca02c"
WRONG_COLORS = ["#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf"]
OTHER_COLOR = "#9a9a9a"
PP_COLOR = "#d62728"
MARS_COLOR = "#1f77b4"
FOOTER_COLOR = "#a0361c"


@dataclass
class FigureOut:
    stem: str
    title: str
    caption: str
    files: list = field(default_factory=list)
    data: pd.DataFrame | None = None
    notes: list = field(default_factory=list)
    footer: str = ""  # a line drawn under the figure: what data it shows, if not real

    def label_data(self, sources: dict) -> None:
        """Say in the caption, and in the image (shared images lose their captions), what data
        the figure shows: synthetic stand-ins flagged, real sources named."""
        text = describe(sources)
        if text:
            self.caption = f"{self.caption} {text}"
        self.footer = footer(sources)


@contextlib.contextmanager
def style():
    with sns.axes_style("whitegrid"), sns.plotting_context("paper"), mpl.rc_context(RC):
        yield


def save(fig, out_dir: Path, stem: str, formats=FORMATS) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        p = out_dir / f"{stem}.{fmt}"
        fig.savefig(p, format=fmt, dpi=DPI, metadata=METADATA.get(fmt))
        paths.append(p)
    plt.close(fig)
    return paths


#: height of the strip under a figure that holds its footer (inches)
FOOTER_HEIGHT = 0.24


def _draw_footer(fig, text: str) -> None:
    """``text`` in a strip under everything: the constrained layout keeps the axes above the
    strip, and a legend placed under the axes is lifted above it too."""
    fig.draw_without_rendering()  # lay out, to find the legends under the axes
    lowest = min((ax.get_window_extent().y0 for ax in fig.get_axes()), default=0.0)
    strip = FOOTER_HEIGHT / fig.get_figheight()
    engine = fig.get_layout_engine()
    if engine is not None and hasattr(engine, "set"):
        engine.set(rect=(0, strip, 1, 1 - strip))
    for legend in fig.legends:
        if legend.get_window_extent().y1 <= lowest:
            legend.borderaxespad = FOOTER_HEIGHT * 72 / legend.prop.get_size_in_points()
    fig.text(
        0.5,
        strip / 2,
        text,
        ha="center",
        va="center",
        fontsize=7,
        color=FOOTER_COLOR,
        style="italic",
    )


def _finish(fo: FigureOut, fig, out_dir, formats) -> FigureOut:
    if fo.footer:
        _draw_footer(fig, fo.footer)
    fo.files = save(fig, out_dir, fo.stem, formats)
    if fo.data is not None:
        p = Path(out_dir) / f"{fo.stem}.csv"
        fo.data.to_csv(p, index=False, lineterminator="\n")
        fo.files.append(p)
    return fo


def _sources(results: Results, pairs) -> dict:
    """``{model: source}`` of the (model, dataset) pairs a figure shows."""
    return results.sources([results.main_run(*p) for p in dict.fromkeys(pairs)])


def _placeholder(ax, msg: str):
    ax.set_axis_off()
    ax.text(
        0.5,
        0.5,
        msg,
        ha="center",
        va="center",
        fontsize=9,
        wrap=True,
        transform=ax.transAxes,
        color="#555555",
    )


def _ci(values: np.ndarray, level: float = 0.95) -> tuple[float, float, float, float]:
    """(mean, sd, low, high) with a t interval across questions."""
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


# -- per-question summaries -----------------------------------------------------------------------
#: what Fig. 1 (right) and Fig. 2 trace: calibrated MARS on self-consistency votes, against the
#: full-budget and fixed-γ MARS and Parallel-Probe of the same pipeline
#: the name the report gives the oracle-first stop (its self-consistency method)
ORACLE_FIRST = ORACLE_FIRST_STOP.of(SELF_CONSISTENCY)
FIG1_METHODS = {title: CALIBRATED_MARS.of(p) for p, title in PIPELINES.items()}
GAMMA_PAIRS = {
    title: (CALIBRATED_MARS.of(p), FIXED_GAMMA_MARS.of(p)) for p, title in PIPELINES.items()
}
#: oracle q − learned q, both pipelines at γ = 1 (one panel, one γ: DeepConf has no calibrated
#: oracle-q method)
ORACLE_PAIRS = {
    title: (ORACLE_Q_MARS.of(p), FIXED_GAMMA_MARS.of(p)) for p, title in PIPELINES.items()
}


def savings_summary(results: Results, methods: dict = FIG1_METHODS) -> pd.DataFrame:
    """Mean per-question savings and its 95 % CI across questions,
    per (model, dataset, pipeline)."""
    rows = []
    for model, dataset in results.pairs:
        for pipeline, method in methods.items():
            run = results.find(model, dataset, method)
            if run is None:
                continue
            v = run.per_question(method)["savings_pct"].to_numpy(float)
            mean, sd, lo, hi = _ci(v)
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
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "model",
            "dataset",
            "setting",
            "pipeline",
            "method",
            "n_questions",
            "mean",
            "sd",
            "ci_low",
            "ci_high",
        ],
    )


def _differences(pairs: dict) -> str:
    """``a − b, c − d``: the method pairs a panel subtracts, for its caption."""
    return ", ".join(f"{a} − {b}" for a, b in pairs.values())


def paired_difference(results: Results, pairs: dict, column: str = "savings_pct") -> pd.DataFrame:
    """Per-question difference a − b of ``column`` (same run), mean and 95 % CI
    per (model, dataset, pipeline)."""
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
            mean, sd, lo, hi = _ci(d)
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
        columns=[
            "model",
            "dataset",
            "setting",
            "pipeline",
            "method_a",
            "method_b",
            "n_questions",
            "mean",
            "sd",
            "ci_low",
            "ci_high",
        ],
    )


def _bars(ax, df: pd.DataFrame, datasets: list[str], ylabel: str, labels: bool = True):
    """Grouped bars (dataset × pipeline) with 95 % CI error bars, drawn on the seaborn theme."""
    pipelines = [p for p in PIPELINE_COLORS if p in set(df.pipeline)]
    width = 0.8 / max(len(pipelines), 1)
    labelled = set()
    for j, p in enumerate(pipelines):
        sub = df[df.pipeline == p].set_index("dataset")
        for i, ds in enumerate(datasets):
            if ds not in sub.index:
                continue
            r = sub.loc[ds]
            x = i - 0.4 + width * (j + 0.5)
            ax.bar(
                x,
                r["mean"],
                width=width * 0.92,
                color=PIPELINE_COLORS[p],
                label=None if p in labelled else p,
                zorder=2,
            )
            labelled.add(p)
            if not np.isnan(r["ci_low"]):
                ax.errorbar(
                    x,
                    r["mean"],
                    yerr=[[r["mean"] - r["ci_low"]], [r["ci_high"] - r["mean"]]],
                    fmt="none",
                    ecolor="#222222",
                    elinewidth=1,
                    capsize=3,
                    zorder=3,
                )
            if labels:
                top = r["ci_high"] if not np.isnan(r["ci_high"]) else r["mean"]
                y = max(top, r["mean"], 0)
                ax.annotate(
                    f"{r['mean']:.1f}",
                    (x, y),
                    xytext=(0, 2),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
    ax.grid(axis="x", visible=False)
    ax.set_xticks(range(len(datasets)))
    ax.set_xticklabels(datasets)
    ax.set_xlim(-0.6, len(datasets) - 0.4)
    ax.set_ylabel(ylabel)
    ax.axhline(0, color="#444444", linewidth=0.8, zorder=1)


def _legend_entries(axes) -> dict:
    out: dict[str, Any] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            out.setdefault(lab, h)
    return out


def _stop_label(ax, x: float, text: str, color: str, side: str = "left"):
    """A label just above the axes at data x (clear of the curves)."""
    ax.annotate(
        text,
        (x, 1.0),
        xycoords=("data", "axes fraction"),
        xytext=(3 if side == "left" else -3, 3),
        textcoords="offset points",
        ha=side,
        va="bottom",
        fontsize=7.5,
        color=color,
    )


def _draw_model_panels(
    fig, df: pd.DataFrame, results: Results, ylabel: str, title: str, legend: bool = True
):
    """One bar panel per model (datasets on x, SC/DeepConf bars) into a figure or subfigure."""
    models = [m for m in results.models if m in set(df.model)]
    n = max(len(models), 1)
    widths = [max(sum(1 for (m, _) in results.pairs if m == model), 1) for model in models] or [1]
    axes = fig.subplots(1, n, sharey=True, squeeze=False, gridspec_kw={"width_ratios": widths})
    for ax, model in zip(axes[0], models):
        sub = df[df.model == model]
        datasets = [d for (m, d) in results.pairs if m == model and d in set(sub.dataset)]
        _bars(ax, sub, datasets, ylabel if ax is axes[0][0] else "")
        ax.set_title(results.model_title(model), fontsize=9)
    if not models:
        _placeholder(axes[0][0], "no data")
    handles = _legend_entries(axes[0])
    if handles and legend:
        fig.legend(
            list(handles.values()),
            list(handles),
            title="voting",
            loc="outside lower center",
            ncol=len(handles),
            frameon=False,
        )
    # a title no wider than its figure (one model: a narrow figure)
    inches = fig.get_figwidth() if hasattr(fig, "get_figwidth") else fig.figure.get_figwidth()
    fig.suptitle(textwrap.fill(title, max(30, int(inches * 11))), fontsize=10)
    # head-room for the value labels
    ymin, ymax = axes[0][0].get_ylim()
    axes[0][0].set_ylim(min(ymin, 0), ymax + 0.08 * (ymax - min(ymin, 0)))
    return axes[0]


def _panels_width(results: Results, df: pd.DataFrame) -> float:
    models = [m for m in results.models if m in set(df.model)]
    ndata = sum(1 for (m, _) in results.pairs if m in models)
    return 1.2 + 1.3 * max(ndata, 1) + 0.5 * max(len(models), 1)


def _model_panels(df: pd.DataFrame, results: Results, ylabel: str, title: str):
    fig = plt.figure(figsize=(max(_panels_width(results, df), 4.5), 3.0), layout="constrained")
    _draw_model_panels(fig, df, results, ylabel, title)
    return fig


def fig_savings(results: Results, out_dir: Path, formats=FORMATS) -> FigureOut:
    """Fig. 1 left: savings of calibrated MARS per model × dataset, SC and DeepConf, 95 % CI."""
    df = savings_summary(results)
    with style():
        fig = _model_panels(
            df,
            results,
            "token savings (%)",
            "Token savings of calibrated MARS (mean over questions, 95% CI)",
        )
    fo = FigureOut(
        "fig1-left-savings",
        "Fig. 1 (left): token savings per model and dataset",
        "Mean per-question token savings of calibrated MARS under self-consistency "
        f"({FIG1_METHODS['SC']}) and DeepConf Online ({FIG1_METHODS['DeepConf']}) voting; error "
        "bars are 95% t-intervals across questions.",
        data=df,
    )
    if df.empty:
        fo.notes.append(f"no {' or '.join(FIG1_METHODS.values())} results")
    fo.label_data(_sources(results, zip(df.model, df.dataset)))
    return _finish(fo, fig, out_dir, formats)


# -- Fig. 1 right: one question's vote shares and slack -------------------------------------------
@dataclass
class Example:
    run: Run
    trajectory: Trajectory
    reason: str = ""

    @property
    def qid(self) -> int:
        return self.trajectory.qid

    @property
    def iteration(self) -> int:
        return self.trajectory.iteration


def _answer_colors(tr: Trajectory, keep: list[int]) -> dict:
    colors, w = {}, 0
    for a in keep:
        if tr.correct[a]:
            colors[a] = CORRECT_COLOR
        else:
            colors[a] = WRONG_COLORS[w % len(WRONG_COLORS)]
            w += 1
    return colors


def _top_answers(tr: Trajectory, n: int = 4) -> list[int]:
    peak = tr.shares.max(axis=0)
    order = [int(a) for a in np.argsort(-peak, kind="stable") if peak[a] > 0]
    keep = order[:n]
    for a in [tr.final_answer] + [int(a) for a in np.flatnonzero(tr.correct)]:
        if 0 <= a < len(peak) and peak[a] > 0 and a not in keep:
            keep.append(a)
    return keep


def _share_panel(ax, tr: Trajectory, keep: list[int]):
    x = tr.positions / 1000
    colors = _answer_colors(tr, keep)
    for a in keep:
        lab = _short(tr.representatives[a]) + (" (correct)" if tr.correct[a] else "")
        ax.plot(
            x,
            100 * tr.shares[:, a],
            marker="o",
            markersize=3,
            linewidth=1.6,
            color=colors[a],
            label=lab,
        )
    other = 100 * (1 - tr.shares[:, keep].sum(axis=1))
    if (other > 0.5).any():
        ax.plot(x, other, linestyle=":", linewidth=1.2, color=OTHER_COLOR, label="other answers")
    ax.set_ylabel("vote share (%)")
    ax.set_ylim(-2, 102)


def _short(s: str, n: int = 18) -> str:
    s = str(s)
    return s if len(s) <= n else s[: n - 1] + "…"


#: how many of the best candidates, over every pool, :func:`pick_example` and
#: :func:`pick_pp_failure` look at (each analysis keeps as many of its own)
EXAMPLE_LOADS = CANDIDATES


def _analysed(results: Results, method: str):
    """(pair order, run, analysis) of every pair whose analysed run holds ``method``."""
    for order, pair in enumerate(results.pairs):
        found = results.analysis_of(*pair)
        if found is not None and method in found[0].overall:
            yield order, found[0], found[1]


def pick_example(results: Results) -> Example | None:
    """The Fig. 1 (right) question: the one an analysis was asked for (``mars analyze
    --example``), else chosen to show the mechanism: MARS waits while the vote is contested and
    stops once its answer is safe.

    Automatic choice, over every analysed pair: the iteration-0 samples where sc-mars-cal stops
    early with the correct answer, not at the first checkpoint, in order of the tokens they save
    (then report order); the first of the :data:`EXAMPLE_LOADS` that save most whose answer did not
    lead at the first checkpoint (it overtook the early leader), else the one that saves most.
    """
    analysed = list(_analysed(results, MARS_SC))
    for _, run, an in analysed:
        if an.example_spec is not None and an.of(EXAMPLE):
            return Example(run, an.of(EXAMPLE)[0], "chosen by mars analyze --example")
    cands = []  # (-saved, pair index, qid, run, trajectory)
    for order, run, an in analysed:
        for r in example_candidates(run).head(EXAMPLE_LOADS).itertuples():
            tr = an.trajectory(EXAMPLE, int(r.qid), 0)
            if tr is not None:
                cands.append((-float(r.saved), order, int(r.qid), run, tr))
    cands.sort(key=lambda c: c[:3])
    for _, _, _, run, tr in cands[:EXAMPLE_LOADS]:
        if tr.overtook:
            return Example(
                run,
                tr,
                "of the samples where MARS stops early and correctly (iteration 0 of every "
                "question), the one saving the most tokens whose answer overtook the first "
                "checkpoint's leader",
            )
    if cands:
        return Example(
            cands[0][3],
            cands[0][4],
            "of the samples where MARS stops early and correctly after at least one checkpoint "
            "where it could not (iteration 0 of every question), the one saving the most tokens "
            f"(none of the {min(len(cands), EXAMPLE_LOADS)} saving most had its answer overtake "
            "the first checkpoint's leader)",
        )
    return None


def fig_example(results: Results, out_dir: Path, formats=FORMATS) -> FigureOut:
    """Fig. 1 right: vote shares across checkpoints and the minimum slack, stop marked."""
    fo = FigureOut(
        "fig1-right-example",
        "Fig. 1 (right): MARS on one question",
        "Top: vote share of each answer across checkpoints (one bootstrap sample, self-consistency "
        "votes). Bottom: minimum slack of the MARS test (the binding challenger's margin minus its "
        f"adversarial threshold, in votes); MARS ({MARS_SC}) stops at the first checkpoint where "
        "the slack is positive for every challenger (and, at checkpoint 0, the leader matches the "
        "warmup majority).",
    )
    ex = pick_example(results)
    if ex is not None:
        fo.label_data(results.sources([ex.run]))
    with style():
        fig, (ax1, ax2) = plt.subplots(
            2,
            1,
            figsize=(6.0, 4.8),
            sharex=True,
            layout="constrained",
            gridspec_kw={"height_ratios": [3, 2]},
        )
        if ex is None:
            _placeholder(
                ax1,
                f"needs {MARS_SC} results and their analysis\n(mars analyze, or pass --analysis)",
            )
            ax2.set_axis_off()
            fo.notes.append(f"skipped: no {MARS_SC} run with an analysis (mars analyze)")
            return _finish(fo, fig, out_dir, formats)
        tr = ex.trajectory
        row = ex.run.per_iteration(MARS_SC)
        row = row[(row.qid == ex.qid) & (row.iteration == ex.iteration)].iloc[0]
        keep = _top_answers(tr)
        _share_panel(ax1, tr, keep)
        x = tr.positions / 1000
        stopped = row.stopped_by != "budget"
        saved = 100 * (1 - row.tokens / row.baseline_tokens) if row.baseline_tokens else 0.0
        for ax in (ax1, ax2):
            if stopped:
                ax.axvline(
                    row.stop_position / 1000,
                    color="#333333",
                    linestyle="--",
                    linewidth=1.2,
                    zorder=1,
                )
        ax1.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=True, title="answer")
        xs = row.stop_position / 1000
        side = "left" if xs < 0.6 * x.max() else "right"
        if stopped:
            _stop_label(
                ax1,
                xs,
                f"MARS stops → {_short(row.answer)} "
                + ("(correct)" if row.correct else "(wrong)")
                + f", saves {saved:.0f}% of tokens",
                "#222222",
                side,
            )
        else:
            _stop_label(ax1, x.max(), "MARS never stops early (full budget)", "#222222", "right")
        fig.suptitle(
            f"{results.model_title(ex.run.model)} / {ex.run.dataset}\nquestion {ex.qid}, "
            "bootstrap sample "
            f"{ex.iteration} (calibrated γ = {tr.gamma:.2f})",
            fontsize=9,
        )
        ok = np.isfinite(tr.slack)
        ax2.axhline(0, color="#444444", linewidth=0.9)
        ax2.plot(
            x[ok],
            tr.slack[ok],
            marker="o",
            markersize=3,
            color=MARS_COLOR,
            linewidth=1.6,
            label="minimum slack",
        )
        ax2.fill_between(
            x[ok],
            0,
            tr.slack[ok],
            where=tr.slack[ok] > 0,
            color=CORRECT_COLOR,
            alpha=0.15,
            interpolate=True,
            label="all challengers certified",
        )
        ax2.fill_between(
            x[ok],
            0,
            tr.slack[ok],
            where=tr.slack[ok] <= 0,
            color=PP_COLOR,
            alpha=0.10,
            interpolate=True,
            label="not yet safe",
        )
        k = tr.stop_k
        if k < len(x):
            ax2.plot(
                [x[k]],
                [tr.slack[k]],
                marker="*",
                markersize=11,
                color="#222222",
                zorder=5,
                label="stop",
            )
        ax2.set_ylabel("min slack (votes)")
        ax2.set_xlabel("tokens per trace at the checkpoint (thousands)")
        ax2.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=True, fontsize=7)
    fo.data = tr.frame()
    fo.caption += (
        f" Question {ex.qid} of {ex.run.model}/{ex.run.dataset}, bootstrap sample {ex.iteration}: "
        f"{ex.reason}."
    )
    if (tr.positions[min(k, len(x) - 1)] != row.stop_position) or (stopped != (k < len(x))):
        fo.notes.append(
            "warning: the analysis's stop differs from per_iteration.csv (analysed with other "
            "settings?)"
        )
    return _finish(fo, fig, out_dir, formats)


# -- Fig. 2: consensus stopping vs MARS on a hard question ----------------------------------------
def pick_pp_failure(results: Results):
    """A question whose early leader is wrong and later overtaken, where PP errs more than MARS.

    Candidates, over every analysed pair holding both: questions where sc-pp's accuracy is below
    sc-mars-cal's (largest gap first, then report order); within one, the first bootstrap sample
    where PP is wrong and MARS right; accepted when that sample's checkpoint-0 leader differs from
    its full-budget vote. Returns (example, gap); the largest gap when none is accepted.
    """
    cands = []
    for order, run, an in _analysed(results, MARS_SC):
        if PP_SC not in run.overall:
            continue
        for r in pp_failure_candidates(run).head(EXAMPLE_LOADS).itertuples():
            tr = an.trajectory(PP_FAILURE, int(r.qid), int(r.iteration))
            if tr is not None:
                cands.append((-r.gap, order, int(r.qid), run, tr, r.accuracy_pp, r.accuracy_mars))
    cands.sort(key=lambda c: c[:3])
    fallback = None
    for neg_gap, _, _, run, tr, acc_pp, acc_mars in cands[:EXAMPLE_LOADS]:
        if -neg_gap > 0 and tr.lead[0] != tr.final_answer:
            reason = (
                f"{PP_SC} is right in {100 * acc_pp:.0f}% of samples, {MARS_SC} in "
                f"{100 * acc_mars:.0f}%; the checkpoint-0 leader is not the full-budget vote"
            )
            return Example(run, tr, reason)
        if fallback is None:
            fallback = Example(
                run,
                tr,
                "no question where the early leader is overtaken and PP loses accuracy; showing "
                f"the largest PP-vs-MARS accuracy gap ({100 * -neg_gap:+.0f} pp)",
            )
    return fallback


def fig_pp_failure(results: Results, out_dir: Path, formats=FORMATS) -> FigureOut:
    fo = FigureOut(
        "fig2-pp-failure",
        "Fig. 2: consensus stopping fails on a hard question",
        "Vote shares across checkpoints of one bootstrap sample of a question whose early leader "
        "is wrong and later overtaken; dashed lines mark where Parallel-Probe's consensus rule "
        f"({PP_SC}) and MARS ({MARS_SC}) stop, and the answers they return.",
    )
    ex = pick_pp_failure(results)
    if ex is not None:
        fo.label_data(results.sources([ex.run]))
    with style():
        fig, ax = plt.subplots(figsize=(6.0, 3.4), layout="constrained")
        if ex is None:
            _placeholder(
                ax,
                f"needs {PP_SC} and {MARS_SC} results in one run\n"
                "and its analysis (mars analyze, or pass --analysis)",
            )
            fo.notes.append(f"skipped: no run holding {PP_SC} and {MARS_SC} with an analysis")
            return _finish(fo, fig, out_dir, formats)
        tr, pp_run = ex.trajectory, ex.run
        keep = _top_answers(tr)
        _share_panel(ax, tr, keep)
        rows = {}
        for name, run, method in (
            ("Parallel-Probe", pp_run, PP_SC),
            ("MARS", ex.run, MARS_SC),
        ):
            it = run.per_iteration(method)
            rows[name] = it[(it.qid == ex.qid) & (it.iteration == ex.iteration)].iloc[0]
        pp_first = rows["Parallel-Probe"].stop_position <= rows["MARS"].stop_position
        for name, run, method, color in (
            ("Parallel-Probe", pp_run, PP_SC, PP_COLOR),
            ("MARS", ex.run, MARS_SC, MARS_COLOR),
        ):
            r = rows[name]
            early = r.stopped_by != "budget"
            pos = r.stop_position / 1000
            ax.axvline(pos, color=color, linestyle="--", linewidth=1.6, zorder=4)
            verdict = "correct" if r.correct else "wrong"
            what = f"{name} stops" if early else f"{name}: full budget"
            u = run.settings(method).get("pp_conv") if method == PP_SC else None
            if u is not None:
                what += f" (u={u})"
            side = "right" if (name == "Parallel-Probe") == pp_first else "left"
            _stop_label(ax, pos, f"{what}\n→ {_short(r.answer)} ({verdict})", color, side)
        ax.set_xlabel("tokens per trace at the checkpoint (thousands)")
        ax.legend(
            loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=True, title="answer", fontsize=7
        )
        head = (
            f"{results.model_title(ex.run.model)} / {ex.run.dataset}\nquestion {ex.qid}, "
            f"bootstrap sample {ex.iteration}"
        )
        if ex.reason.startswith("no question"):
            head += "\n(no consensus-stopping failure here: the largest PP-vs-MARS gap is shown)"
        fig.suptitle(head, fontsize=9)
    fo.data = tr.frame().assign(
        pp_stop=rows["Parallel-Probe"].stop_position, mars_stop=rows["MARS"].stop_position
    )
    fo.caption += f" Question {ex.qid} of {ex.run.model}/{ex.run.dataset}: {ex.reason}."
    return _finish(fo, fig, out_dir, formats)


# -- Fig. 4: ablations ----------------------------------------------------------------------------
def q_calibration_frames(results: Results):
    """(bins, checkpoints) frames of learned vs oracle q for every analysed pair."""
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


Q_COLUMNS = ["q_learned_mean", "q_oracle_rate"]


def fig_ablations(results: Results, out_dir: Path, formats=FORMATS) -> FigureOut:
    """Fig. 4: (a) savings from γ calibration, (b) savings gap oracle − learned q,
    (c–d) learned vs oracle q."""
    gam = paired_difference(results, GAMMA_PAIRS).assign(panel="a")
    orc = paired_difference(results, ORACLE_PAIRS).assign(panel="b")
    bins, cps = q_calibration_frames(results)
    fo = FigureOut(
        "fig4-ablations",
        "Fig. 4: γ calibration and the learned switch model",
        "(a) Savings added by per-question γ calibration over γ = 1 "
        f"({_differences(GAMMA_PAIRS)}; mean per-question difference, 95% CI). (b) Savings gap "
        "of oracle q over learned q, both pipelines at γ = 1 "
        f"({_differences(ORACLE_PAIRS)}). "
        "(c) Calibration of the learned switch probability: held-out running traces binned by "
        "learned q against the share that actually switch before the end (oracle q). (d) Mean "
        "learned q against the oracle switch rate at each checkpoint position.",
    )
    data = [gam, orc]
    with style():
        wa, wb = _panels_width(results, gam), _panels_width(results, orc)
        ha, hb = (0.3 if gam.empty else 1.0), (0.3 if orc.empty else 1.0)
        if wa + wb <= 16:  # (a) beside (b): a figure a screen can show whole
            width = max(wa + wb, 10.0)
            fig = plt.figure(figsize=(width, 3.2 * max(ha, hb) + 3.6), layout="constrained")
            upper, bottom = cast(np.ndarray, fig.subfigures(2, 1, height_ratios=[max(ha, hb), 1.1]))
            top, mid = cast(np.ndarray, upper.subfigures(1, 2, width_ratios=[wa, wb]))
        else:  # many pools: (a) above (b)
            width = max(wa, wb, 9.0)
            fig = plt.figure(figsize=(width, 2.8 * (ha + hb) + 3.6), layout="constrained")
            # three rows: an array of subfigures (the stub's return type also allows a single one)
            top, mid, bottom = cast(np.ndarray, fig.subfigures(3, 1, height_ratios=[ha, hb, 1.25]))
        for sf, df, title, pairs in (
            (top, gam, "(a) savings gained by γ calibration over γ = 1", GAMMA_PAIRS),
            (mid, orc, "(b) savings gap at γ = 1: oracle q − learned q", ORACLE_PAIRS),
        ):
            if df.empty:
                ax = sf.subplots()
                _placeholder(
                    ax,
                    "needs the paired methods ("
                    + ", ".join(f"{a} & {b}" for a, b in pairs.values())
                    + ")",
                )
                sf.suptitle(title, fontsize=10)
            else:
                _draw_model_panels(sf, df, results, "Δ savings (pp)", title, legend=sf is top)
        ax_c, ax_d = bottom.subplots(1, 2)
        if bins is None:
            for ax, t in (
                (ax_c, "(c) calibration of the learned switch model"),
                (ax_d, "(d) learned vs oracle q per checkpoint"),
            ):
                _placeholder(ax, "needs an analysis\n(mars analyze, or pass --analysis)")
                ax.set_title(t)
            fo.notes.append("panels c–d skipped: no analysis (mars analyze)")
        else:
            models = list(dict.fromkeys(bins.model))
            datasets = list(dict.fromkeys(d for _, d in results.pairs if d in set(bins.dataset)))
            b = bins.dropna(subset=["q_learned_mean"])
            ax_c.plot(
                [0, 1],
                [0, 1],
                color="#666666",
                linestyle="--",
                linewidth=0.9,
                label="perfect calibration",
            )
            sns.lineplot(
                data=b,
                x="q_learned_mean",
                y="q_oracle_rate",
                hue="model",
                style="dataset",
                markers=True,
                dashes=True,
                ax=ax_c,
                hue_order=models,
                style_order=datasets,
                estimator=None,
                sort=True,
                markersize=5,
                legend=False,
            )
            ax_c.set_xlim(0, 1)
            ax_c.set_ylim(0, 1)
            ax_c.set_xlabel("learned q (bin mean)")
            ax_c.set_ylabel("observed switch rate (oracle q)")
            ax_c.set_title("(c) calibration of the learned switch model")
            ax_d.plot([0, 1], [0, 1], color="#666666", linestyle="--", linewidth=0.9)
            sns.scatterplot(
                data=cps,
                x="q_oracle_rate",
                y="q_learned_mean",
                hue="model",
                style="dataset",
                ax=ax_d,
                hue_order=models,
                style_order=datasets,
                s=28,
                alpha=0.85,
                legend="brief",
            )
            ax_d.set_xlim(0, 1)
            ax_d.set_ylim(0, 1)
            ax_d.set_xlabel("oracle switch rate at the checkpoint")
            ax_d.set_ylabel("mean learned q at the checkpoint")
            ax_d.set_title("(d) learned vs oracle q, one point per checkpoint")
            h, lab = ax_d.get_legend_handles_labels()
            ax_d.legend().remove()
            bottom.legend(h, lab, loc="outside right upper", frameon=False, fontsize=7)
            nq = sorted(set(bins.n_questions))
            fo.notes.append(
                f"panels c–d use the first {', '.join(map(str, nq))} question(s) of each pool "
                "(mars analyze --q-questions), held-out (non-warmup) running traces"
            )
            data += [bins.assign(panel="c"), cps.assign(panel="d")]
    fo.data = pd.concat(data, ignore_index=True)
    fo.label_data(_sources(results, zip(fo.data.model, fo.data.dataset)))
    return _finish(fo, fig, out_dir, formats)


def all_figures(results: Results, out_dir: Path, formats=FORMATS) -> list[FigureOut]:
    """The paper's figures (the comparison figures and the trade-off are
    :mod:`mars.report.comparison`'s and :mod:`mars.report.tradeoff`'s)."""
    return [
        fig_savings(results, out_dir, formats),
        fig_example(results, out_dir, formats),
        fig_pp_failure(results, out_dir, formats),
        fig_ablations(results, out_dir, formats),
    ]
