"""The fit directory (``mars fit --out FIT``): its format, and :class:`FitDir`, its reader.

FIT/ layout::

    fit.json                 provenance: pool, spacing, window, final answers (absent: the
                             traces' own), warmup sizes, per-question hashes
    models.parquet           one row per question × warmup size (mars.store.schema.MODEL_SCHEMA);
                             its metadata records the spacing, window, final answers and arrays
                             version of the fit
    q000007-<key>.npz        the question's arrays: the fit directory is an array cache, read
                             through the one reader `simulate --cache` uses (mars.method.arrays)

Everything is checked against what it is loaded *for*: an array file only serves the question
whose content and settings its key names (anything else is rebuilt), a model row only the question
whose content hash it records, with the spacing, window and warmup it was fitted with; model
parameters must be finite numbers of the right shapes. A damaged models file is one line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import MarsError
from ..method.arrays import ARRAYS_VERSION, QuestionArrays, load_arrays
from ..method.features import FEATURE_NAMES
from ..method.qmodel import QuestionFit, SwitchModel
from ..method.settings import Settings
from ..store import schema
from ..store.pool import Pool, QuestionData, read_manifest
from ..store.schema import FINALS

MODEL_NAME = "switch"
#: 2: models.parquet records the spacing and window it was fitted with (FIT_SETTINGS_KEY);
#: 3: answer groups of ARRAYS_VERSION 4 (the switch labels follow them);
#: 4: questions' content hashes by SHA-256 (QuestionData.content_hash), no longer BLAKE2b
FIT_VERSION = 4
#: Parquet metadata key of models.parquet: what its models were fitted on (fit_key()).
FIT_SETTINGS_KEY = b"mars.fit"
MODEL_PARAMS = ("mean", "scale", "intercept", "coef", "platt_a", "platt_b")


class FitError(MarsError):
    """A fit directory that does not match the pool or the settings of a simulation."""


def fit_key(spacing: int, window: int, finals: str = FINALS[0]) -> dict:
    """What fitted models depend on besides the traces: the grid, the confidence window, the
    final answers (named only when not the traces' own, so fits made before they could be chosen
    still read) and the arrays' version (answer groups, hence the switch labels)."""
    key: dict = {"spacing": spacing, "window": window, "arrays": ARRAYS_VERSION}
    if finals != FINALS[0]:
        key["finals"] = finals
    return key


@dataclass(frozen=True)
class FitSettings:
    """What the fit stage's artifact depends on (the settings with ``fit=True``)."""

    warmups: tuple[int, ...]
    window: int
    spacing: int
    finals: str = FINALS[0]


class FitDir:
    """A fit directory, read by simulations: arrays and switch models per question."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        mf = self.path / schema.FIT_MANIFEST
        self.manifest = read_manifest(
            mf,
            schema.FIT_FORMAT,
            FitError,
            f"{self.path}: not a fit directory (no {schema.FIT_MANIFEST}; run `mars fit`)",
            FIT_VERSION,
            "fit again (`mars fit`; in the workflow `snakemake --forcerun fit`)",
        )
        try:
            self.spacing = int(self.manifest["spacing"])
            self.window = int(self.manifest["window"])
            self.finals = str(self.manifest.get("finals", FINALS[0]))
            if self.finals not in FINALS:
                raise ValueError(f"finals {self.finals!r}")
            self.warmups = [int(w) for w in self.manifest["warmups"]]
            self.hashes = {int(q): str(h) for q, h in dict(self.manifest["questions"]).items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise FitError(f"{mf}: missing or bad field ({exc})") from None
        self.models_file = self.path / schema.FIT_MODELS
        self.rows: dict[tuple[int, int], dict] = {}
        self.models: dict[tuple[int, int], SwitchModel | None] = {}
        for row in self._read_models():
            key = (row["qid"], row["warmup"])
            where = f"{self.models_file}: question {key[0]}, warmup {key[1]}"
            if key in self.rows:
                raise FitError(f"{where}: two rows")
            try:
                self.models[key] = self._check_row(row)
            except ValueError as exc:
                raise FitError(f"{where}: {exc}") from None
            self.rows[key] = row

    def _read_models(self) -> list[dict]:
        """The rows of models.parquet, every column present with its type (nulls checked per row),
        fitted with this directory's spacing and window."""
        f = self.models_file
        try:
            table = pq.read_table(f, page_checksum_verification=True)
        except Exception as exc:  # any reader failure is a bad fit directory
            raise FitError(
                f"{f}: unreadable ({str(exc).splitlines()[0] if str(exc) else exc})"
            ) from None
        try:
            recorded = json.loads((table.schema.metadata or {})[FIT_SETTINGS_KEY])
        except (KeyError, ValueError, RecursionError):
            recorded = None
        expected = fit_key(self.spacing, self.window, self.finals)
        if recorded != expected:
            raise FitError(
                f"{f}: fitted on {recorded}, but {schema.FIT_MANIFEST} and this mars read "
                f"{expected} (rerun `mars fit`)"
            )
        columns = []
        for field in schema.MODEL_SCHEMA:
            if field.name not in table.column_names:
                raise FitError(f"{f}: missing column {field.name!r}")
            col = table.column(field.name)
            try:
                columns.append(col.cast(field.type))
            except (pa.ArrowException, TypeError, ValueError):
                raise FitError(
                    f"{f}: column {field.name!r} has type {col.type}, expected {field.type}"
                ) from None
        return pa.table(columns, names=schema.MODEL_SCHEMA.names).to_pylist()

    def _check_row(self, row: dict) -> SwitchModel | None:
        """Check one row of models.parquet (ValueError naming the problem); its model, if any."""
        required = [f.name for f in schema.MODEL_SCHEMA if not f.nullable]
        for name in required:
            if row[name] is None:
                raise ValueError(f"{name} is null")
        for name in ("qid", "warmup", "n_rows", "n_positive", "n_answers"):
            if row[name] < 0:
                raise ValueError(f"{name} {row[name]} is negative")
        for name in ("n_traces", "n_checkpoints"):
            if row[name] < 1:
                raise ValueError(f"{name} {row[name]} is not positive")
        if row["model"] != MODEL_NAME:
            raise ValueError(f"model {row['model']!r}, expected {MODEL_NAME!r}")
        if row["warmup"] not in self.warmups:
            raise ValueError(f"not one of the warmup sizes {schema.FIT_MANIFEST} lists")
        if self.hashes.get(row["qid"]) != row["content_hash"]:
            raise ValueError(
                f"content hash differs from {schema.FIT_MANIFEST}'s (rerun `mars fit`)"
            )
        warm = row["warmup_traces"]
        outside = [t for t in warm if t is None or not 0 <= t < row["n_traces"]]
        if len(warm) > row["warmup"] or outside:
            raise ValueError(f"warmup traces {warm[:4]}… are not {row['warmup']} of the traces")
        if row["n_rows"] != len(warm) * row["n_checkpoints"] or row["n_positive"] > row["n_rows"]:
            raise ValueError(
                f"n_rows {row['n_rows']}, n_positive {row['n_positive']} do not fit "
                f"{len(warm)} warmup traces × {row['n_checkpoints']} checkpoints"
            )
        for name in ("log_loss", "brier"):
            if row[name] is not None and not (np.isfinite(row[name]) and row[name] >= 0):
                raise ValueError(f"{name} {row[name]!r} is not a finite number ≥ 0")
        if not warm:  # no warmup traces: no model (q = 1 everywhere)
            present = [n for n in MODEL_PARAMS if row[n] is not None]
            if present:
                raise ValueError(f"{present[0]} is set, but a fit without warmup has no model")
            return None
        return SwitchModel.from_params(row, n_features=len(FEATURE_NAMES))

    def check(self, pool: Pool, settings: Settings, qids: Iterable[int]) -> None:
        """Refuse, before any work, a simulation whose settings or questions the fit lacks."""
        where = str(self.path)
        if settings.window != self.window:
            raise FitError(
                f"{where}: fitted with --window {self.window}, the simulation asks "
                f"{settings.window}"
            )
        if settings.finals != self.finals:
            raise FitError(
                f"{where}: fitted with --finals {self.finals}, the simulation asks "
                f"{settings.finals} (fit again with `mars fit --finals {settings.finals}`)"
            )
        if settings.spacing != self.spacing:
            raise FitError(
                f"{where}: fitted on the {self.spacing}-token grid, the simulation uses "
                f"{settings.spacing}"
            )
        if settings.warmup not in self.warmups:
            raise FitError(
                f"{where}: no switch models for --warmup {settings.warmup} (fitted: "
                f"{', '.join(map(str, self.warmups))}; run `mars fit --warmup {settings.warmup}`)"
            )
        for q in qids:
            if (int(q), settings.warmup) not in self.rows:
                raise FitError(
                    f"{where}: question {q} was not fitted (run `mars fit` on {pool.source})"
                )

    def arrays(self, q: QuestionData, settings: Settings) -> QuestionArrays:
        """The question's arrays from the fit: the cached file if it holds this question's arrays
        at the fit's settings, else rebuilt in memory (the fit directory is not written to)."""
        return load_arrays(q, self.path, self.spacing, self.window, store=False)

    def question(self, q: QuestionData, arr: QuestionArrays, warmup: int) -> QuestionFit:
        """The fitted switch model of question ``q`` (whose arrays are ``arr``); it must have been
        fitted on the traces the pool holds now."""
        row = self.rows.get((q.qid, int(warmup)))
        if row is None:
            raise FitError(
                f"{self.path}: question {q.qid} has no switch model for --warmup {warmup}"
            )
        if arr.qid != q.qid or arr.content_hash != row["content_hash"]:
            raise FitError(
                f"{self.path}: question {q.qid} was fitted on other traces than the pool holds "
                "now (rerun `mars fit`)"
            )
        shape = ("n_traces", "n_checkpoints", "n_answers")
        if [row[k] for k in shape] != [arr.n_traces, arr.n_checkpoints, arr.n_answers]:
            raise FitError(
                f"{self.models_file}: question {q.qid}: fitted on {row['n_traces']} traces × "
                f"{row['n_checkpoints']} checkpoints, {row['n_answers']} answers; the pool has "
                f"{arr.n_traces} × {arr.n_checkpoints}, {arr.n_answers} (rerun `mars fit`)"
            )
        model = self.models[(q.qid, int(warmup))]
        return QuestionFit(
            warm=np.asarray(row["warmup_traces"], dtype=np.int64),
            model=model,
            n_rows=int(row["n_rows"]),
            n_positive=int(row["n_positive"]),
            log_loss=float("nan") if row["log_loss"] is None else float(row["log_loss"]),
            brier=float("nan") if row["brier"] is None else float(row["brier"]),
        )
