"""Where a pool's traces came from: synthetic stand-ins or real traces, and from where.

A pool's ``pool.json`` says what made its traces: the synthetic engine and the preset it imitates,
a real engine and model, or an import of published data. ``mars simulate`` records this
:class:`DataSource` in every ``overall.json`` (``input.data``), so the report can say what its
data is without opening the pool, and a shared table of synthetic data never reads as a real
model's results. Results also record the packages they were computed with
(:func:`package_versions`) and the content of the questions they read (:func:`checksum_of`).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ..errors import DISTRIBUTION, MarsError
from . import schema

SYNTHETIC = "synthetic"
REAL = "real"
UNKNOWN = "unknown"
KINDS = (SYNTHETIC, REAL, UNKNOWN)


@dataclass(frozen=True)
class DataSource:
    """Where a pool's traces came from: ``kind`` (synthetic, real or unknown) and a phrase."""

    kind: str
    text: str

    @property
    def synthetic(self) -> bool:
        return self.kind == SYNTHETIC

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "text": self.text}

    @classmethod
    def from_dict(cls, d: object) -> DataSource | None:
        """The source an ``overall.json`` records; None for a missing or malformed entry."""
        if not isinstance(d, dict):
            return None
        kind, text = d.get("kind"), d.get("text")
        if kind not in KINDS or not isinstance(text, str) or not text:
            return None
        return cls(kind, text)


def _imitated_model(imitates: str) -> str:
    """The model id a preset's ``imitates`` starts with (``Qwen/Qwen3-8B, thinking mode`` →
    ``Qwen/Qwen3-8B``)."""
    return imitates.split(",")[0].split(" (")[0].strip()


def pool_source(pool: Path | None, given: str | None = None) -> DataSource:
    """The source of the traces in ``pool`` (None: not found; ``given``: the path the results
    name, for the message)."""
    from .userfiles import read_manifest

    if pool is None:
        return DataSource(UNKNOWN, f"unknown: its pool {given or '(none recorded)'} is not found")
    pool = Path(pool)
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


#: the distributions whose versions a result records (this package by its distribution name)
PACKAGES = (DISTRIBUTION, "numpy", "scipy", "pandas", "pyarrow", "math-verify")


@functools.cache
def package_versions() -> dict:
    """Versions of the packages results depend on (looked up once per process: each lookup
    scans the installed distributions)."""
    out: dict[str, str | None] = {}
    for p in PACKAGES:
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            out[p] = None
    return out


def checksum_of(content_hashes: dict[int, str]) -> str:
    """The questions a result was computed from and their content: ``{qid: content hash}``
    digested (overall.json ``input.checksum``)."""
    h = hashlib.blake2b(digest_size=16)
    for qid in sorted(content_hashes):
        h.update(f"{qid}:{content_hashes[qid]};".encode())
    return h.hexdigest()
