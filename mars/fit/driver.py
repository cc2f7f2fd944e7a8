"""The fit stage: every question's arrays and switch model, fitted once, read by every simulation.

``mars fit POOL --out FIT`` computes, per question, the simulator's arrays (answer groups,
checkpoint grid, confidence statistics) and fits the learned switch model q on the fixed warmup
traces (reference-protocol §6: five features, L2 logistic regression, Platt scaling), for each
warmup size asked for. ``mars simulate POOL --fit FIT`` reads both and never refits; its results
are identical to a simulation that fits on the fly. The directory's format and its reader
(:class:`~mars.fit.fitdir.FitDir`): :mod:`mars.fit.fitdir`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..method.arrays import QuestionArrays, load_arrays
from ..method.features import FEATURE_NAMES
from ..method.qmodel import QuestionFit, fit_question
from ..method.qmodel import preload as preload_fit
from ..method.settings import Settings, check_warmup, pool_grid
from ..progress import Progress, counter
from ..store import schema
from ..store.atomic import write_atomic, write_json_atomic
from ..store.pool import open_pool
from ..store.schema import FINALS
from ..workers import map_largest_first, process_pool
from .fitdir import FIT_SETTINGS_KEY, FIT_VERSION, MODEL_NAME, FitError, FitSettings, fit_key


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
    q = pool.read_question(qid).with_finals(fs.finals)
    arr = load_arrays(q, out, spacing=fs.spacing, window=fs.window)
    return [_model_row(arr, w, fit_question(arr, arr.warmup_ids(w))) for w in fs.warmups]


def check_fit(
    pool_path: str | Path,
    warmups: Sequence[int] = (16,),
    window: int = 2048,
    spacing: int | None = None,
    questions: Iterable[int] | None = None,
    finals: str = FINALS[0],
) -> tuple[FitSettings, list[int]]:
    """Refuse, before any work, a fit whose settings or questions cannot be fitted; its settings
    and questions."""
    pool = open_pool(pool_path)
    warmups = tuple(sorted({int(w) for w in warmups}))
    if not warmups:
        raise FitError("no --warmup size given")
    for w in warmups:
        Settings(warmup=w, window=window, spacing=spacing, finals=finals).validate()
    grid = pool_grid(spacing, pool.grid, pool.source)
    fs = FitSettings(warmups, int(window), grid.spacing, finals)
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
    finals: str = FINALS[0],
) -> pa.Table:
    """Fit every requested question of a pool into ``out``; returns the models table.

    Arrays already cached in ``out`` (same question content and settings) are reused, so an
    interrupted fit resumes; ``models.parquet`` and ``fit.json`` are replaced atomically, the
    manifest last. ``progress(done, total)``: questions fitted (:mod:`mars.progress`).
    """
    fs, qids = check_fit(pool_path, warmups, window, spacing, questions, finals)
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
        from ..method.confstats import warm_up  # numba: imported where it runs

        warm_up()  # compiled (or loaded from its cache) once, before the workers fork
        with process_pool(min(workers, len(jobs), os.cpu_count() or 1)) as ex:
            sizes = [work.get(q, 0) for q in qids]
            rows = [row for r in map_largest_first(ex, _fit_one, jobs, sizes, tick) for row in r]
    table = pa.Table.from_pylist(rows, schema=schema.MODEL_SCHEMA)
    key = json.dumps(fit_key(fs.spacing, fs.window, fs.finals))
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
        "finals": fs.finals,
        "warmups": list(fs.warmups),
        "model": MODEL_NAME,
        "features": list(FEATURE_NAMES),
        "questions": {str(r["qid"]): r["content_hash"] for r in rows},
    }
    write_json_atomic(out / schema.FIT_MANIFEST, manifest)
    return table


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
