"""The fit stage: every question's arrays and switch model, fitted once, read by every simulation.

``mars fit POOL --out FIT`` computes, per question, the simulator's arrays (answer groups,
checkpoint grid, confidence statistics) and fits the learned switch model q on the fixed warmup
traces (reference-protocol §6: five features, L2 logistic regression, Platt scaling), for each
warmup size asked for. ``mars simulate POOL --fit FIT`` reads both and never refits; its results
are identical to a simulation that fits on the fly.

FIT/ layout::

    fit.json                 provenance: pool, spacing, window, warmup sizes, per-question hashes
    models.parquet           one row per question × warmup size (mars.store.schema.MODEL_SCHEMA);
    its
                             metadata records the spacing, window and arrays version of the fit
    q000007-<key>.npz        the question's arrays: the fit directory is an array cache, read
                             through the one reader `simulate --cache` uses (mars.method.arrays)

Everything is checked against what it is loaded *for*: an array file only serves the question
whose content and settings its key names (anything else is rebuilt), a model row only the question
whose content hash it records, with the spacing, window and warmup it was fitted with; model
parameters must be finite numbers of the right shapes. A damaged models file is one line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import MarsError
from .method.arrays import ARRAYS_VERSION, QuestionArrays, load_arrays
from .method.features import FEATURE_NAMES
from .method.qmodel import QuestionFit, SwitchModel, fit_question
from .method.qmodel import preload as preload_fit
from .method.settings import Settings, check_warmup, resolve_spacing
from .progress import Progress, counter
from .store import schema
from .store.atomic import write_atomic, write_json_atomic
from .store.pool import Pool, QuestionData, open_pool, read_manifest
from .workers import map_largest_first, process_pool

MODEL_NAME = "switch"
#: 2: models.parquet records the spacing and window it was fitted with (FIT_SETTINGS_KEY);
#: 3: answer groups of ARRAYS_VERSION 4 (the switch labels follow them);
#: 4: questions' content hashes by SHA-256 (QuestionData.content_hash), no longer BLAKE2b
FIT_VERSION = 4
#: Parquet metadata key of models.parquet: what its models were fitted on (fit_key()).
FIT_SETTINGS_KEY = b"mars.fit"
_MODEL_PARAMS = ("mean", "scale", "intercept", "coef", "platt_a", "platt_b")


class FitError(MarsError):
    """A fit directory that does not match the pool or the settings of a simulation."""


def fit_key(spacing: int, window: int) -> dict:
    """What fitted models depend on besides the traces: the grid, the confidence window and the
    arrays' version (answer groups, hence the switch labels)."""
    return {"spacing": spacing, "window": window, "arrays": ARRAYS_VERSION}


@dataclass(frozen=True)
class FitSettings:
    """What the fit stage's artifact depends on (the settings with ``fit=True``)."""

    warmups: tuple[int, ...]
    window: int
    spacing: int


def _model_row(arr: QuestionArrays, warmup: int, fit: QuestionFit) -> dict:
    row = {
        "qid": arr.qid,
        "model": MODEL_NAME,
        "warmup": int(warmup),
        "warmup_traces": [int(t) for t in fit.warm],
        "content_hash": arr.content_hash,
        "n_traces": arr.n_traces,
        "n_checkpoints": arr.n_checkpoints,
        "n_answers": arr.n_answers,
        "n_rows": fit.n_rows,
        "n_positive": fit.n_positive,
        "log_loss": None if fit.model is None else fit.log_loss,
        "brier": None if fit.model is None else fit.brier,
        "mean": None,
        "scale": None,
        "intercept": None,
        "coef": None,
        "platt_a": None,
        "platt_b": None,
    }
    if fit.model is not None:
        row.update(fit.model.fitted_params())
    return row


def _fit_one(args) -> list[dict]:
    pool_path, qid, out, fs = args
    pool = open_pool(pool_path)
    arr = load_arrays(pool.read_question(qid), out, spacing=fs.spacing, window=fs.window)
    return [_model_row(arr, w, fit_question(arr, arr.warmup_ids(w))) for w in fs.warmups]


def check_fit(
    pool_path: str | Path,
    warmups: Sequence[int] = (16,),
    window: int = 2048,
    spacing: int | None = None,
    questions: Iterable[int] | None = None,
) -> tuple[FitSettings, list[int]]:
    """Refuse, before any work, a fit whose settings or questions cannot be fitted; its settings
    and questions."""
    pool = open_pool(pool_path)
    warmups = tuple(sorted({int(w) for w in warmups}))
    if not warmups:
        raise FitError("no --warmup size given")
    for w in warmups:
        Settings(warmup=w, window=window, spacing=spacing).validate()
    fs = FitSettings(
        warmups, int(window), resolve_spacing(spacing, pool.recorded_spacing, pool.source)
    )
    qids = list(pool.qids if questions is None else questions)
    missing = sorted(set(qids) - set(pool.qids))
    if missing:
        raise FitError(
            f"{pool.source}: no question {missing[0]} (questions: {pool.qids[0]}..{pool.qids[-1]})"
        )
    check_warmup(warmups[-1], pool.trace_counts(qids), pool.source)
    return fs, qids


def fit_pool(
    pool_path: str | Path,
    out: str | Path,
    warmups: Sequence[int] = (16,),
    window: int = 2048,
    spacing: int | None = None,
    questions: Iterable[int] | None = None,
    workers: int = 1,
    progress: Progress | None = None,
) -> pa.Table:
    """Fit every requested question of a pool into ``out``; returns the models table.

    Arrays already cached in ``out`` (same question content and settings) are reused, so an
    interrupted fit resumes; ``models.parquet`` and ``fit.json`` are replaced atomically, the
    manifest last. ``progress(done, total)``: questions fitted (:mod:`mars.progress`).
    """
    fs, qids = check_fit(pool_path, warmups, window, spacing, questions)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(str(pool_path), q, str(out), fs) for q in qids]
    rows: list[dict] = []
    tick = counter(len(jobs), progress)
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            rows += _fit_one(job)
            tick()
    else:
        work = open_pool(pool_path).work_estimate(qids)
        preload_fit()  # the workers fork with it
        from .method.confstats import warm_up  # numba: imported where it runs

        warm_up()  # compiled (or loaded from its cache) once, before the workers fork
        with process_pool(min(workers, len(jobs), os.cpu_count() or 1)) as ex:
            sizes = [work.get(q, 0) for q in qids]
            rows = [row for r in map_largest_first(ex, _fit_one, jobs, sizes, tick) for row in r]
    table = pa.Table.from_pylist(rows, schema=schema.MODEL_SCHEMA)
    key = json.dumps(fit_key(fs.spacing, fs.window))
    stored = table.replace_schema_metadata({FIT_SETTINGS_KEY: key})
    write_atomic(
        out / schema.FIT_MODELS,
        lambda p: pq.write_table(stored, p, compression="zstd", write_page_checksum=True),
    )
    manifest = {
        "format": schema.FIT_FORMAT,
        "version": FIT_VERSION,
        "pool": str(pool_path),
        "spacing": fs.spacing,
        "window": fs.window,
        "warmups": list(fs.warmups),
        "model": MODEL_NAME,
        "features": list(FEATURE_NAMES),
        "questions": {str(r["qid"]): r["content_hash"] for r in rows},
    }
    write_json_atomic(out / schema.FIT_MANIFEST, manifest)
    return table


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
        expected = fit_key(self.spacing, self.window)
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
            present = [n for n in _MODEL_PARAMS if row[n] is not None]
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


def summary_table(table: pa.Table, title: str):
    """A rich table of the fitted models, one row per question × warmup, and the mean row: the
    training rows (warmup traces × checkpoints) and how many switch (y=1), the in-sample fit, and
    the coefficients on standardised features."""
    from rich import box
    from rich.table import Table

    short = {
        "position": "β pos",
        "confidence": "β conf",
        "flips": "β flip",
        "streak": "β run",
        "conf_trend": "β trend",
    }
    t = Table(
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        collapse_padding=True,
        title=title,
        title_justify="left",
    )
    for col in (
        "q",
        "warmup",
        "traces",
        "ckpts",
        "answers",
        "rows",
        "y=1",
        "logloss",
        "Brier",
        *(short[f] for f in FEATURE_NAMES),
    ):
        t.add_column(col, justify="right", min_width=len(col))
    rows = table.to_pylist()
    no_model = ["–"] * len(FEATURE_NAMES)  # too few warmup rows (or none) to fit a model
    for r in rows:
        t.add_row(
            str(r["qid"]),
            str(r["warmup"]),
            str(r["n_traces"]),
            str(r["n_checkpoints"]),
            str(r["n_answers"]),
            str(r["n_rows"]),
            str(r["n_positive"]),
            "–" if r["log_loss"] is None else f"{r['log_loss']:.3f}",
            "–" if r["brier"] is None else f"{r['brier']:.3f}",
            *(no_model if r["coef"] is None else (f"{v:+.2f}" for v in r["coef"])),
        )
    if rows:
        fitted = [r["coef"] for r in rows if r["coef"] is not None]
        mean = np.mean(fitted, axis=0) if fitted else None
        ll = [r["log_loss"] for r in rows if r["log_loss"] is not None]
        br = [r["brier"] for r in rows if r["brier"] is not None]
        t.add_section()
        t.add_row(
            "mean",
            "",
            "",
            "",
            "",
            f"{np.mean([r['n_rows'] for r in rows]):.0f}",
            f"{np.mean([r['n_positive'] for r in rows]):.0f}",
            f"{np.mean(ll):.3f}" if ll else "–",
            f"{np.mean(br):.3f}" if br else "–",
            *(no_model if mean is None else (f"{v:+.2f}" for v in mean)),
        )
    return t
