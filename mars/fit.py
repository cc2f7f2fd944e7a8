"""The fit stage: every question's arrays and switch model, fitted once, read by every simulation.

``mars fit POOL --out FIT`` computes, per question, the simulator's arrays (answer groups,
checkpoint grid, confidence statistics) and fits the learned switch model q on the fixed warmup
traces (reference-protocol §6: five features, L2 logistic regression, Platt scaling), for each
warmup size asked for. ``mars simulate POOL --fit FIT`` reads both and never refits; its results
are identical to a simulation that fits on the fly.

FIT/ layout::

    fit.json                 provenance: pool, spacing, window, warmup sizes, per-question hashes
    models.parquet           one row per question × warmup size (mars.schema.MODEL_SCHEMA)
    q000007-<key>.npz        the question's arrays (the cache `simulate --cache` also reads)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import schema
from .arrays import QuestionArrays, arrays_path, build_arrays, load_arrays, read_cached
from .atomic import write_atomic, write_json_atomic
from .errors import MarsError
from .features import FEATURE_NAMES
from .pool import Pool, QuestionData, open_pool, read_manifest
from .qmodel import QuestionFit, SwitchModel, fit_question
from .settings import Settings, resolve_spacing
from .workers import process_pool

MODEL_NAME = "switch"


class FitError(MarsError):
    """A fit directory that does not match the pool or the settings of a simulation."""


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


def fit_pool(
    pool_path: str | Path,
    out: str | Path,
    warmups: Sequence[int] = (16,),
    window: int = 2048,
    spacing: int | None = None,
    questions: Iterable[int] | None = None,
    workers: int = 1,
    progress: Callable[[], None] | None = None,
) -> pa.Table:
    """Fit every requested question of a pool into ``out``; returns the models table.

    Arrays already cached in ``out`` (same question content and settings) are reused, so an
    interrupted fit resumes; ``models.parquet`` and ``fit.json`` are replaced atomically, the
    manifest last.
    """
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
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(str(pool_path), q, str(out), fs) for q in qids]
    rows: list[dict] = []
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            rows += _fit_one(job)
            if progress:
                progress()
    else:
        with process_pool(min(workers, len(jobs), os.cpu_count() or 1)) as ex:
            for r in ex.map(_fit_one, jobs):
                rows += r
                if progress:
                    progress()
    table = pa.Table.from_pylist(rows, schema=schema.MODEL_SCHEMA)
    write_atomic(out / schema.FIT_MODELS, lambda p: pq.write_table(table, p, compression="zstd"))
    manifest = {
        "format": schema.FIT_FORMAT,
        "version": 1,
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
        )
        try:
            self.spacing = int(self.manifest["spacing"])
            self.window = int(self.manifest["window"])
            self.warmups = [int(w) for w in self.manifest["warmups"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise FitError(f"{mf}: missing or bad field ({exc})") from None
        models = self.path / schema.FIT_MODELS
        try:
            rows = pq.read_table(models).to_pylist()
        except Exception as exc:  # any reader failure is a bad fit directory
            raise FitError(
                f"{models}: unreadable ({str(exc).splitlines()[0] if str(exc) else exc})"
            ) from None
        self.rows = {(int(r["qid"]), int(r["warmup"])): r for r in rows}

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
        """The question's arrays from the fit (rebuilt in memory if the cached file is damaged)."""
        arr = read_cached(arrays_path(self.path, q, self.spacing, self.window))
        return arr if arr is not None else build_arrays(q, self.spacing, self.window)

    def question(self, arr: QuestionArrays, warmup: int) -> QuestionFit:
        """The fitted switch model of a question; its traces must be the ones it was fitted on."""
        row = self.rows.get((arr.qid, int(warmup)))
        if row is None:
            raise FitError(
                f"{self.path}: question {arr.qid} has no switch model for --warmup {warmup}"
            )
        if row["content_hash"] != arr.content_hash:
            raise FitError(
                f"{self.path}: question {arr.qid} was fitted on other traces than the pool holds "
                "now (rerun `mars fit`)"
            )
        model = None if row["coef"] is None else SwitchModel.from_params(row)
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
