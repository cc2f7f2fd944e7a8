"""What the tables share: the model column shown once per model, block breaks, the method cell,
and the sign (with its note) of a method that runs fewer traces than the budget."""

from __future__ import annotations

import pandas as pd

from ...method.registry import METHODS
from ..fmt import Cell, text
from ..names import family_baseline

#: the sign of a savings cell against the method's own narrower sample, and its note
NARROW = "†"


def model_column(models) -> list[str]:
    """Each row's model cell: the model on the first of its rows, blank below."""
    out, prev = [], None
    for m in models:
        out.append(m if m != prev else "")
        prev = m
    return out


def breaks_by_model(models) -> list[int]:
    """The rows that open a model's block."""
    out, prev = [], None
    for i, m in enumerate(models):
        if m != prev:
            out.append(i)
        prev = m
    return out


def method_cell(row) -> Cell:
    """A method as the tables name it: its label (settings shown) and its name."""
    return text(f"{row.label} · `{row.method}`", tex=row.label_tex)


def narrow_mark(row) -> str:
    """:data:`NARROW` for a method on fewer traces than the budget, else ""."""
    return NARROW if row.narrow else ""


def narrow_notes(frame: pd.DataFrame) -> list[str]:
    """A note per method on fewer traces than the budget: what its savings are against, and the
    share of the full-budget vote's tokens it spends (over the table's rows)."""
    out: list[str] = []
    if not len(frame):
        return out
    spent = frame[frame.narrow & frame.vote_share_pct.notna()]
    for method, shares in spent.groupby("method", sort=False).vote_share_pct:
        m = METHODS[str(method)]
        lo, hi = float(shares.min()), float(shares.max())
        spend = f"{lo:.1f} %" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}–{hi:.1f} %"
        base = family_baseline(str(method))
        traces = "that trace" if m.width == 1 else f"those {m.width} traces"
        out.append(
            f"{NARROW} {method} runs {m.width} trace{'s' if m.width != 1 else ''} of each "
            f"sample: its savings are against {traces} run to the end, not against the "
            f"full-budget vote ({base}); it spends {spend} of {base}'s tokens."
        )
    return out
