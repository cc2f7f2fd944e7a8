"""What the data of a report is, said once in every table, figure and index.

Each run's ``overall.json`` records where its traces came from (``input.data``, a
:class:`~mars.store.provenance.DataSource` written by ``mars simulate`` from the pool's
``pool.json``): the synthetic engine and the preset it imitates, a real engine and model, or an
import of published data. The report says so, so a shared table or figure of synthetic data never
reads as a real model's results.
"""

from __future__ import annotations

from ..store.provenance import REAL, SYNTHETIC, UNKNOWN, DataSource

__all__ = ["REAL", "SYNTHETIC", "UNKNOWN", "DataSource", "describe", "describe_grids", "footer"]


def describe(sources: dict[str, DataSource]) -> str:
    """One sentence on the data of ``{model: source}``, synthetic stand-ins first and flagged."""
    models: dict[DataSource, list[str]] = {}
    for model, src in sources.items():
        models.setdefault(src, []).append(model)
    by_kind: dict[str, list[str]] = {}
    for src, names in models.items():
        link = {SYNTHETIC: " are " if len(names) > 1 else " is ", REAL: " from "}
        by_kind.setdefault(src.kind, []).append(
            ", ".join(names) + link.get(src.kind, ": ") + src.text
        )
    out = []
    if SYNTHETIC in by_kind:
        out.append(
            "Synthetic data, not the named models' results: " + "; ".join(by_kind[SYNTHETIC]) + "."
        )
    if REAL in by_kind:
        out.append("Data: " + "; ".join(by_kind[REAL]) + ".")
    if UNKNOWN in by_kind:
        out.append("Data source of " + "; ".join(by_kind[UNKNOWN]) + ".")
    return " ".join(out)


def footer(sources: dict[str, DataSource]) -> str:
    """A figure's own line on its data (a shared image loses its caption): synthetic and unknown
    sources only."""
    synthetic = [m for m, s in sources.items() if s.synthetic]
    unknown = [m for m, s in sources.items() if s.kind == UNKNOWN]
    out = []
    if synthetic and len(synthetic) == len(sources):
        out.append(
            "Synthetic data: mars's synthetic engine imitating the named models, not their results"
        )
    elif synthetic:
        out.append(
            f"Synthetic data for {', '.join(synthetic)} (mars's synthetic engine), "
            "not real-model results"
        )
    if unknown:
        out.append(f"data source unknown for {', '.join(unknown)}")
    return "; ".join(out)


def describe_grids(grids: dict[str, int | None]) -> str:
    """One sentence on the probe grid of each pool (``{model/dataset: spacing}``, as its runs
    recorded it from the pool's manifest; None: not recorded): a pool imported at its own
    spacing is described by it, not by a default."""
    by_spacing: dict[int, list[str]] = {}
    for pair, spacing in grids.items():
        if spacing is not None:
            by_spacing.setdefault(int(spacing), []).append(pair)
    if not by_spacing:
        return ""
    if len(by_spacing) == 1:
        (spacing,) = by_spacing
        return f"Probe grid: a checkpoint every {spacing:,} tokens."
    parts = [f"every {s:,} tokens ({', '.join(pairs)})" for s, pairs in sorted(by_spacing.items())]
    return "Probe grids: a checkpoint " + "; ".join(parts) + "."
