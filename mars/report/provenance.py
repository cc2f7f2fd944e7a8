"""What the data of a report is: synthetic stand-ins or real traces, and from where.

A run's traces come from the pool its ``overall.json`` names (or ``--pool``); the pool's
``pool.json`` says what made them: the synthetic engine and the preset it imitates, a real
engine and model, or an import of published data. Every table, figure and index the report
writes says so, so a shared table or figure of synthetic data never reads as a real model's
results.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import MarsError
from ..store import schema

SYNTHETIC = "synthetic"
REAL = "real"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class DataSource:
    """Where a pool's traces came from: ``kind`` (synthetic, real or unknown) and a phrase."""

    kind: str
    text: str

    @property
    def synthetic(self) -> bool:
        return self.kind == SYNTHETIC


def _imitated_model(imitates: str) -> str:
    """The model id a preset's ``imitates`` starts with (``Qwen/Qwen3-8B, thinking mode`` →
    ``Qwen/Qwen3-8B``)."""
    return imitates.split(",")[0].split(" (")[0].strip()


def pool_source(pool: Path | None, given: str | None = None) -> DataSource:
    """The source of the traces in ``pool`` (None: not found; ``given``: the path the results
    name, for the message)."""
    from ..store.pool import read_manifest

    if pool is None:
        return DataSource(UNKNOWN, f"unknown: its pool {given or '(none recorded)'} is not found")
    if not pool.is_dir():
        return DataSource(UNKNOWN, f"the trace file {pool.name} (which records no provenance)")
    try:
        m = read_manifest(pool / schema.POOL_MANIFEST, schema.POOL_FORMAT, MarsError, "missing")
    except MarsError:
        return DataSource(UNKNOWN, f"unknown: the pool {pool} has no readable provenance")
    backend, model = m.get("backend"), m.get("model_path") or m.get("model")
    if backend == "synthetic":
        preset = m.get("preset") or "?"
        imitates = _imitated_model(str(m.get("imitates") or preset))
        return DataSource(
            SYNTHETIC, f"mars's synthetic engine imitating {imitates} (preset {preset})"
        )
    if m.get("imported_from"):
        what = f"an {m['imported_from']} import of {Path(str(m.get('source') or '?')).name}"
        return DataSource(REAL, what + (f", model {model}" if model else ""))
    if backend:
        return DataSource(REAL, f"a {backend} run of {model or 'an unnamed model'}")
    return DataSource(UNKNOWN, f"unknown: the pool {pool} records no engine")


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
