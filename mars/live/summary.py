"""What a live run cost and saved: ``live.csv`` and the table `mars solve` prints.

Two accountings, side by side:

* the paper's: the tokens the N main traces generated against the same N traces run to the end
  (``saved``). The warmup (run once per question) and the probes are apart, as in the paper;
* what a live user pays: the main traces, the warmup traces and the probe tokens together, against
  the same N traces run to the end (``saved_paid``; negative when the overhead outweighs the
  stop).

"The same N traces run to the end" is the question's own tokens when no trace was stopped early
(it saves nothing, by definition), and otherwise the ``--compare-full`` run's (unknown without
it). A question whose answer is not known is not graded (accuracy n/a).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from ..method.registry import get_method
from ..store.atomic import write_atomic

COLUMNS = (
    "qid",
    "method",
    "answer",
    "correct",
    "stopped_by",
    "stop_position",
    "tokens",
    "warmup_tokens",
    "probe_tokens",
    "gamma",
    "n_stopped",
    "wall_main_s",
    "full_tokens",
    "full_wall_s",
    "full_answer",
    "full_correct",
    "full_budget_tokens",
    "saved",
    "saved_paid",
    "replay_ok",
)


def full_budget_tokens(rec: dict) -> int | None:
    """The tokens of the question's N traces run to their end: its own when none was stopped
    early, else the ``--compare-full`` run's (None without one)."""
    if not rec["stopped_traces"]:
        return int(rec["tokens"])
    full = rec.get("full")
    return int(full["tokens"]) if full else None


def paid_tokens(rec: dict) -> int:
    """What the question cost a live user: main traces, warmup traces and probes (where the
    engine reports them)."""
    return int(rec["tokens"]) + int(rec["warmup_tokens"]) + int(rec["probe_tokens"] or 0)


def _saving(spent: int, full: int | None) -> float | None:
    if full is None:
        return None
    if full == 0:
        return 0.0
    return 1 - spent / full


def write_csv(path: Path, records: list[dict]) -> None:
    """``live.csv``: one row per question (:data:`COLUMNS`)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for s in records:
        full = s.get("full") or {}
        budget = full_budget_tokens(s)
        saved, paid = _saving(s["tokens"], budget), _saving(paid_tokens(s), budget)
        w.writerow(
            [
                s["qid"],
                s["method"],
                s["answer"],
                s["correct"],
                s["stopped_by"],
                s["stop_position"],
                s["tokens"],
                s["warmup_tokens"],
                s["probe_tokens"],
                s["gamma"],
                len(s["stopped_traces"]),
                s["wall_s"]["main"],
                full.get("tokens"),
                full.get("wall_s"),
                full.get("answer"),
                full.get("correct"),
                budget,
                None if saved is None else round(saved, 6),
                None if paid is None else round(paid, 6),
                s["replay_ok"],
            ]
        )
    write_atomic(path, lambda p: p.write_text(buf.getvalue()))


@dataclass
class Summary:
    """The table `mars solve` prints (``header``, ``rows`` of strings) and the lines under it."""

    header: tuple[str, ...]
    rows: list[tuple[str, ...]]
    lines: list[str]


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:.0%}"


def _mark(correct: bool | None) -> str:
    return "?" if correct is None else "✓" if correct else "✗"


def _accuracy(values: list) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "n/a (no answer known)"
    acc = f"{sum(known) / len(known):.1%}"
    return acc if len(known) == len(values) else f"{acc} of the {len(known)} with a known answer"


def summarize(records: list[dict]) -> Summary:
    """The per-question table and the closing lines of a live run's records."""
    header = (
        "q",
        "answer",
        "ok",
        "stopped",
        "at",
        "tokens",
        "full",
        "saved",
        "paid saved",
        "wall",
        "full wall",
    )
    rows: list[tuple[str, ...]] = []
    for r in records:
        full = r.get("full") or {}
        budget = full_budget_tokens(r)
        rows.append(
            (
                str(r["qid"]),
                str(r["answer"]),
                _mark(r["correct"]),
                r["stopped_by"],
                str(r["stop_position"] or ""),
                f"{r['tokens']:,}",
                "" if budget is None else f"{budget:,}",
                _pct(_saving(r["tokens"], budget)),
                _pct(_saving(paid_tokens(r), budget)),
                f"{r['wall_s']['main']:.1f}s",
                f"{full['wall_s']:.1f}s" if full else "",
            )
        )
    return Summary(header, rows, closing_lines(records))


def closing_lines(records: list[dict]) -> list[str]:
    """Accuracy, tokens and both savings of the run; why a run saved nothing where it can say."""
    n = len(records)
    if not n:
        return ["no questions"]
    tokens = sum(r["tokens"] for r in records)
    warm = sum(r["warmup_tokens"] for r in records)
    probes = [r["probe_tokens"] for r in records]
    probe_text = (
        f"probes {sum(probes):,}"
        if all(p is not None for p in probes)
        else "probes not reported by the engine"
    )
    lines = [
        f"{n} questions, accuracy {_accuracy([r['correct'] for r in records])}, tokens "
        f"{tokens:,} (+ warmup {warm:,}, {probe_text})"
    ]
    budgets = [full_budget_tokens(r) for r in records]
    if any(b is None for b in budgets):
        lines.append(
            "saved: n/a (a question stopped early; --compare-full runs its traces to the end to "
            "measure it)"
        )
    else:
        full = sum(b for b in budgets if b is not None)
        paid = sum(paid_tokens(r) for r in records)
        overhead = "warmup and probe" if all(p is not None for p in probes) else "warmup"
        lines.append(
            f"saved {_pct1(_saving(tokens, full))} of the {full:,} tokens the same traces take to "
            f"their end (main traces: the paper's accounting); with the {overhead} tokens a live "
            f"run also pays: {_pct1(_saving(paid, full))}"
        )
    if all(r.get("full") for r in records):
        ft = sum(r["full"]["tokens"] for r in records)
        lines.append(
            f"run to completion (--compare-full): {ft:,} tokens, accuracy "
            f"{_accuracy([r['full']['correct'] for r in records])}"
        )
    why = _why_nothing_saved(records)
    if why:
        lines.append(why)
    return lines


def _pct1(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _why_nothing_saved(records: list[dict]) -> str | None:
    """A run in which no question stopped early, where the reason is its settings."""
    if any(r["stopped_traces"] for r in records):
        return None
    method = get_method(records[0]["method"])
    warmup = records[0]["warmup"]
    if method.is_baseline:
        return f"{method.name} never stops early: it is the full-budget baseline"
    if warmup == 0 and method.q == "learned":
        return (
            f"no question stopped early: with --warmup 0 there is no switch model, so q = 1 "
            f"(every running trace may still change its answer) and {method.name} cannot "
            "certify a leader before the traces end; run warmup traces (--warmup 16 in the paper)"
        )
    return None
