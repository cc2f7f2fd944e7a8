"""The single-question figures: Fig. 1 (right), one question's vote shares and MARS's minimum
slack with its stop, and Fig. 2, a question where Parallel-Probe's consensus stop errs and MARS
does not. The samples, and their trajectories, are :mod:`mars.report.data.examples`'."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from ...store.analysis import Trajectory
from ..collect import Results
from ..data.examples import (
    MARS_SC,
    PP_SC,
    pick_example,
    pick_pp_failure,
    pp_failure_frame,
    saved_pct,
    stop_agrees,
    top_answers,
)
from .base import (
    CORRECT_COLOR,
    FORMATS,
    MARS_COLOR,
    OTHER_COLOR,
    PP_COLOR,
    WRONG_COLORS,
    FigureOut,
    finish,
    placeholder,
    style,
)


def _answer_colors(tr: Trajectory, keep: list[int]) -> dict:
    colors, w = {}, 0
    for a in keep:
        if tr.correct[a]:
            colors[a] = CORRECT_COLOR
        else:
            colors[a] = WRONG_COLORS[w % len(WRONG_COLORS)]
            w += 1
    return colors


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
            placeholder(
                ax1,
                f"needs {MARS_SC} results and their analysis\n(mars analyze, or pass --analysis)",
            )
            ax2.set_axis_off()
            fo.notes.append(f"skipped: no {MARS_SC} run with an analysis (mars analyze)")
            return finish(fo, fig, out_dir, formats)
        tr = ex.trajectory
        row = ex.stop(MARS_SC)
        _share_panel(ax1, tr, top_answers(tr))
        x = tr.positions / 1000
        stopped = row.stopped_by != "budget"
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
                + f", saves {saved_pct(row):.0f}% of tokens",
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
    if not stop_agrees(tr, row):
        fo.notes.append(
            "warning: the analysis's stop differs from per_iteration.csv (analysed with other "
            "settings?)"
        )
    return finish(fo, fig, out_dir, formats)


def fig_pp_failure(results: Results, out_dir: Path, formats=FORMATS) -> FigureOut:
    """Fig. 2: one sample's vote shares, where Parallel-Probe and MARS stop and what they say."""
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
            placeholder(
                ax,
                f"needs {PP_SC} and {MARS_SC} results in one run\n"
                "and its analysis (mars analyze, or pass --analysis)",
            )
            fo.notes.append(f"skipped: no run holding {PP_SC} and {MARS_SC} with an analysis")
            return finish(fo, fig, out_dir, formats)
        tr = ex.trajectory
        _share_panel(ax, tr, top_answers(tr))
        rows = {"Parallel-Probe": ex.stop(PP_SC), "MARS": ex.stop(MARS_SC)}
        pp_first = rows["Parallel-Probe"].stop_position <= rows["MARS"].stop_position
        for name, method, color in (
            ("Parallel-Probe", PP_SC, PP_COLOR),
            ("MARS", MARS_SC, MARS_COLOR),
        ):
            r = rows[name]
            early = r.stopped_by != "budget"
            pos = r.stop_position / 1000
            ax.axvline(pos, color=color, linestyle="--", linewidth=1.6, zorder=4)
            verdict = "correct" if r.correct else "wrong"
            what = f"{name} stops" if early else f"{name}: full budget"
            u = ex.run.settings(method).get("pp_conv") if method == PP_SC else None
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
        if ex.fallback:
            head += "\n(no consensus-stopping failure here: the largest PP-vs-MARS gap is shown)"
        fig.suptitle(head, fontsize=9)
    fo.data = pp_failure_frame(ex)
    fo.caption += f" Question {ex.qid} of {ex.run.model}/{ex.run.dataset}: {ex.reason}."
    return finish(fo, fig, out_dir, formats)
