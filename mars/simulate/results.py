"""Simulation outputs: per-iteration and per-question CSVs, overall.json, a summary table.

``DIR/<method>/per_iteration.csv``, ``per_question.csv`` (first columns exactly
``qid,accuracy,tokens_mean,baseline_tokens_mean,savings_pct,stop_position_mean``) and
``overall.json``. Every method directory of a run is written complete to a temporary sibling
before any is renamed into place, so a failed run (a full disk) leaves no partial output and
earlier results stay untouched; concurrent runs into one folder take turns.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from ..method.protocol import table_row
from ..method.registry import METHODS
from ..store.atomic import folder_lock, make_dirs, make_temp_dir, naming_output, replace_dir
from ..store.provenance import checksum_of, package_versions
from ..store.schema import PER_ITERATION_COLUMNS, PER_QUESTION_LEADING_COLUMNS
from .runs import OVERALL, PER_ITERATION, PER_QUESTION


def _iteration_columns(qr, method: str) -> dict:
    r = qr.methods[method]
    reps = qr.representatives
    return {
        "qid": qr.qid,
        "iteration": np.arange(len(r.answer)),
        "answer": [reps[a] if a >= 0 else "" for a in r.answer.tolist()],
        "correct": r.correct,
        "tokens": r.tokens,
        "baseline_tokens": r.baseline,
        "stop_position": r.position,
        "stopped_by": r.stopped_by.astype(str),
        "probe_tokens": r.probe_tokens,
        "seq_tokens": r.seq_tokens,
        "longest_tokens": r.longest_tokens,
        "warmup_tokens": np.full(len(r.answer), r.warmup_tokens, dtype=np.int64),
    }


def per_iteration_frame(results, method: str) -> pd.DataFrame:
    parts = [_iteration_columns(qr, method) for qr in results]
    # one frame from the questions' columns joined (a frame per question, then concatenated,
    # costs ~1 ms a question and method); the same frame, since every question's column has the
    # same type, else frame by frame as before
    joined: dict = {}
    for name in parts[0] if parts else ():
        values = [p[name] for p in parts]
        if name == "qid" and all(type(v) is int for v in values):
            joined[name] = np.repeat(
                np.array(values, dtype=np.int64), [len(p["answer"]) for p in parts]
            )
        elif name == "answer":
            joined[name] = [a for v in values for a in v]
        elif all(isinstance(v, np.ndarray) for v in values) and (
            len({v.dtype for v in values}) == 1 or name == "stopped_by"
        ):
            joined[name] = np.concatenate(values)
        else:
            break
    else:
        if parts:
            return pd.DataFrame(joined)[PER_ITERATION_COLUMNS]
    df = pd.concat([pd.DataFrame(p) for p in parts], ignore_index=True)
    return df[PER_ITERATION_COLUMNS]


def per_question_frame(results, method: str) -> pd.DataFrame:
    rows = []
    for qr in results:
        r = qr.methods[method]
        base = r.baseline.astype(np.float64)
        ratio = np.divide(r.tokens, base, out=np.ones_like(base), where=base > 0)
        with_probe = np.divide(
            r.tokens + r.probe_tokens, base, out=np.ones_like(base), where=base > 0
        )
        paid = r.paid_tokens
        paid_ratio = np.divide(paid, base, out=np.ones_like(base), where=base > 0)
        labels = r.stopped_by.astype(str)
        rows.append(
            {
                "qid": qr.qid,
                "accuracy": float(np.mean(r.correct)),
                "tokens_mean": float(np.mean(r.tokens)),
                "baseline_tokens_mean": float(np.mean(r.baseline)),
                "savings_pct": float(100.0 * np.mean(1.0 - ratio)),
                "stop_position_mean": float(np.mean(r.position)),
                "accuracy_std": float(np.std(r.correct.astype(float), ddof=1))
                if len(r.correct) > 1
                else 0.0,
                "n_iterations": len(r.answer),
                "savings_with_probes_pct": float(100.0 * np.mean(1.0 - with_probe)),
                "probe_tokens_mean": float(np.mean(r.probe_tokens)),
                "gamma": r.gamma,
                "stopped_early": int(np.sum(labels != "budget")),
                "stopped_by_budget": int(np.sum(labels == "budget")),
                "ground_truth": qr.ground_truth,
                "answer_fallbacks": qr.answer_fallbacks,
                "seq_tokens_mean": float(np.mean(r.seq_tokens)),
                "longest_tokens_mean": float(np.mean(r.longest_tokens)),
                "warmup_tokens": int(r.warmup_tokens),
                "paid_tokens_mean": float(np.mean(paid)),
                "savings_paid_pct": float(100.0 * np.mean(1.0 - paid_ratio)),
            }
        )
    df = pd.DataFrame(rows)
    assert list(df.columns[: len(PER_QUESTION_LEADING_COLUMNS)]) == PER_QUESTION_LEADING_COLUMNS
    return df


def input_checksum(results) -> str:
    """The questions a simulation ran and their content (overall.json ``input.checksum``;
    :func:`mars.store.provenance.checksum_of`)."""
    return checksum_of({qr.qid: qr.content_hash for qr in results})


def overall(
    per_question: pd.DataFrame,
    method: str,
    settings: dict,
    checksum: str,
    source: str,
    fit: str | None = None,
    notes: list[str] | None = None,
    extra_fields: dict | None = None,
    data: dict | None = None,
) -> dict:
    inputs: dict = {"source": source, "checksum": checksum}
    if fit is not None:
        inputs["fit"] = fit  # the fit stage's artifact the switch models came from
    if data is not None:
        inputs["data"] = data  # where the traces came from (mars.store.provenance)
    extra = (
        {"notes": notes} if notes else {}
    )  # sizes that surprise (mars.method.settings.check_sizes)
    return {
        **extra,
        "method": method,
        "n_questions": len(per_question),
        "accuracy_pct": float(100.0 * per_question.accuracy.mean()),
        "savings_pct": float(per_question.savings_pct.mean()),
        "savings_with_probes_pct": _nan_to_none(per_question.savings_with_probes_pct.mean()),
        "tokens_mean": float(per_question.tokens_mean.mean()),
        "baseline_tokens_mean": float(per_question.baseline_tokens_mean.mean()),
        "stop_position_mean": float(per_question.stop_position_mean.mean()),
        "seq_tokens_mean": float(per_question.seq_tokens_mean.mean()),
        "longest_tokens_mean": float(per_question.longest_tokens_mean.mean()),
        # what a live run pays (docs/simulate.md#what-a-user-pays): the warmup it generates and
        # its probes where the pool records them, beside the paper's accounting (savings_pct)
        "savings_paid_pct": float(per_question.savings_paid_pct.mean()),
        "paid_tokens_mean": float(per_question.paid_tokens_mean.mean()),
        "warmup_tokens_mean": float(per_question.warmup_tokens.mean()),
        "paid_counts_probes": not bool(per_question.savings_with_probes_pct.isna().any()),
        "settings": settings,
        "input": inputs,
        "versions": package_versions(),
        **(extra_fields or {}),
    }


def _nan_to_none(x):
    x = float(x)
    return None if np.isnan(x) else x


def calibration_input(path, cal, checksum: str) -> dict:
    """What overall.json records of a calibration: its file and digest, the pools it was fitted
    on, and whether it saw the traces simulated (``in_sample``: a pool of the same questions)."""
    return {
        "path": str(path),
        "digest": cal.digest,
        "fitted_on": [f.get("source") for f in cal.fitted_on],
        "in_sample": any(f.get("checksum") == checksum for f in cal.fitted_on),
    }


def write_methods(
    out_dir: Path,
    methods: list[str],
    results,
    settings: dict,
    source: str,
    fit: str | None = None,
    notes: list[str] | None = None,
    data: dict | None = None,
    calibration: dict | None = None,
    accuracy_known: bool = True,
) -> list[dict]:
    """Write each method's folder; returns their overall dicts (``data``: the pool's
    :class:`~mars.store.provenance.DataSource` as a dict; ``calibration``: what the calibration
    the run read was fitted on, :func:`calibration_input`).

    Every folder is first written complete under a temporary name, so a failure (a full disk)
    replaces nothing; then, holding ``out_dir``'s lock (a concurrent run into the same folder
    waits its turn, and the folder holds one run's methods), each replaces its predecessor and
    whatever a killed writer left of it.
    """
    out_dir = Path(out_dir)
    make_dirs(out_dir)
    checksum = input_checksum(results)
    staged: list[tuple[Path, Path]] = []
    overalls = []
    try:
        for method in methods:
            final = out_dir / method
            with naming_output(final):
                tmp = make_temp_dir(out_dir, f".{method}.tmp-")
                staged.append((tmp, final))
                pq_ = per_question_frame(results, method)
                pi = per_iteration_frame(results, method)
                pi.to_csv(tmp / PER_ITERATION, index=False)
                pq_.to_csv(tmp / PER_QUESTION, index=False)
                rounds = results[0].methods[method].rounds if results else 0
                more: dict = {"rounds": rounds}
                if calibration is not None:
                    more["calibration"] = calibration
                if not accuracy_known:  # no question's answer is known: nothing was graded
                    more["accuracy_known"] = False
                if settings.get("protocol") == "parallel-probe":
                    # averaged and rounded as Parallel-Probe's evaluator prints its table
                    more["parallel_probe"] = table_row(pi, len(pq_), rounds)
                ov = overall(pq_, method, settings, checksum, source, fit, notes, more, data)
                (tmp / OVERALL).write_text(json.dumps(ov, indent=2, sort_keys=True) + "\n")
            overalls.append(ov)
        with folder_lock(out_dir):
            for tmp, final in staged:
                for litter in out_dir.glob(f".{final.name}.old-*"):  # left by a killed writer
                    shutil.rmtree(litter, ignore_errors=True)
                replace_dir(tmp, final)
    finally:
        for tmp, _ in staged:
            shutil.rmtree(tmp, ignore_errors=True)  # what was not put in place
    return overalls


def write_method(
    out_dir: Path,
    method: str,
    results,
    settings: dict,
    source: str,
    fit: str | None = None,
    notes: list[str] | None = None,
    data: dict | None = None,
) -> dict:
    """Write one method's folder (:func:`write_methods`); returns its overall dict."""
    return write_methods(out_dir, [method], results, settings, source, fit, notes, data)[0]


def summary_table(overalls: list[dict]):
    """A rich table: one row per method."""
    from rich.table import Table

    t = Table(title="MARS simulation summary (mean over questions)")
    for col in (
        "method",
        "accuracy %",
        "savings %",
        "w/ probes %",
        "paid %",
        "tokens/question",
        "sequential tokens",
        "stop position",
    ):
        t.add_column(col, justify="right" if col != "method" else "left", no_wrap=True)
    narrow: dict[str, int] = {}
    for ov in overalls:
        wp = ov["savings_with_probes_pct"]
        m = METHODS.get(ov["method"])
        mark = ""
        if m is not None and m.width is not None:
            narrow[ov["method"]] = m.width
            mark = "†"
        t.add_row(
            ov["method"],
            f"{ov['accuracy_pct']:.1f}" if ov.get("accuracy_known", True) else "n/a",
            f"{ov['savings_pct']:.1f}{mark}",
            "–" if wp is None else f"{wp:.1f}",
            f"{ov['savings_paid_pct']:.1f}{'' if ov['paid_counts_probes'] else '‡'}",
            f"{ov['tokens_mean']:,.0f}",
            f"{ov['seq_tokens_mean']:,.0f}",
            f"{ov['stop_position_mean']:,.0f}",
        )
    captions = [
        "paid %: what a live run pays — the question's warmup (for the methods that read one), "
        "its main traces and its probes — against the full-budget vote; savings %: the paper's "
        "accounting (the warmup free, probes not counted)"
    ]
    if any(not ov.get("accuracy_known", True) for ov in overalls):
        captions.append(
            "accuracy n/a: the pool records no question's answer (served traffic; attach the "
            "targets with --answers)"
        )
    if any(not ov["paid_counts_probes"] for ov in overalls):
        captions.append("‡ the pool records no probe costs: the warmup and main traces only")
    if narrow:  # as the report's tables say it: savings of its own traces, not of the vote
        runs = ", ".join(
            f"{name} runs {w} trace{'s' if w != 1 else ''}" for name, w in narrow.items()
        )
        captions.append(
            f"† {runs} of each sample: savings against those run to the end, not against the "
            "full-budget vote (compare tokens/question)"
        )
    t.caption = "\n".join(captions)
    return t
