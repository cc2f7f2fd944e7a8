"""A simulation's output directory, read back: what ``mars analyze`` and ``mars report`` load.

Find `mars simulate` output directories and load them, checked.

A *run* is one directory written by ``mars simulate --out DIR``: it holds one sub-directory per
method, each with ``overall.json``, ``per_question.csv`` and ``per_iteration.csv``.
:func:`discover` finds every run under a root and labels it by its path relative to the root, a
trailing ``sim`` and a leading ``simulate`` dropped (so ``results/{model}/{dataset}/{setting}/sim``
and ``results/simulate/{model}/{dataset}/{setting}`` both work):

* ``model/dataset/setting[/more]`` → model, dataset, setting (``more`` joins the setting);
* ``model/dataset`` → setting ``default``;
* a single name → dataset = that name, model ``-``.

An explicit label (``--label model/dataset[/setting]``) replaces the part a path cannot tell.

Everything a report reads is checked when a run is loaded, before any output is written: each
``overall.json`` is a JSON object with finite numbers and valid settings, both CSVs exist with
their columns, one row per question (and per question × iteration), and agree with it. A damaged
file is one line naming it (:class:`RunError`). One run directory holds one set of sampling
settings (budget, iterations, warmup, seed, window, spacing) and one set of questions: a method
simulated with others (``mars simulate -m sc`` into a folder of budget-64 runs without
``--budget``) is refused, never put beside the others.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import MarsError, first_line
from ..method.settings import SAMPLING_KEYS, SPECS, Settings, from_dict, sampling_of
from ..store.analysis import Analysis, file_digest
from ..store.provenance import UNKNOWN, DataSource
from ..store.schema import PER_QUESTION_LEADING_COLUMNS
from ..store.userfiles import read_json_object, regular_file

DEFAULT_SETTING = "default"
UNKNOWN_MODEL = "-"


class RunError(MarsError):
    """A simulation output directory that cannot be read (damaged, inconsistent, missing)."""


#: path components that name the simulation stage, not a model, dataset or setting
STAGE_DIRS = ("sim", "simulate", "simulations")


def split_label(parts: list[str]) -> tuple[str, str, str]:
    """(model, dataset, setting) from label parts
    (a leading or trailing stage directory dropped)."""
    parts = [p for p in parts if p not in ("", ".")]
    if parts and parts[-1] in STAGE_DIRS:
        parts = parts[:-1]
    if len(parts) > 1 and parts[0] in STAGE_DIRS:
        parts = parts[1:]
    if not parts:
        raise RunError("empty label")
    if len(parts) == 1:
        return UNKNOWN_MODEL, parts[0], DEFAULT_SETTING
    if len(parts) == 2:
        return parts[0], parts[1], DEFAULT_SETTING
    return parts[0], parts[1], "/".join(parts[2:])


def parse_label(text: str) -> list[str]:
    parts = [p for p in text.strip().strip("/").split("/") if p]
    if not parts:
        raise RunError(f"label {text!r}: expected model/dataset[/setting]")
    return parts


@dataclass
class Run:
    """One simulate output directory (one model × dataset × setting), checked on load."""

    path: Path
    model: str
    dataset: str
    setting: str
    overall: dict = field(default_factory=dict)  # method -> overall.json
    _pq: dict = field(default_factory=dict, repr=False)
    _it: dict = field(default_factory=dict, repr=False)
    analysis: Analysis | None = field(default=None, repr=False)  # `mars analyze` of this run
    _digests: dict = field(default_factory=dict, repr=False)

    @property
    def label(self) -> str:
        return f"{self.model}/{self.dataset}/{self.setting}"

    @property
    def pair(self) -> tuple[str, str]:
        return self.model, self.dataset

    @property
    def methods(self) -> list[str]:
        return list(self.overall)

    def settings(self, method: str) -> dict:
        return dict(self.overall[method].get("settings") or {})

    def sim_settings(self, method: str) -> Settings:
        """The method's simulation settings as a :class:`~mars.simulate.Settings`."""
        return from_dict(self.settings(method), strict=False)

    @property
    def sampling(self) -> dict:
        """The sampling settings every method of the run shares (checked on load)."""
        return sampling_of(self.settings(self.methods[0]) if self.methods else {})

    @property
    def checksum(self) -> str | None:
        """The questions and pool content every method of the run shares (checked on load)."""
        return (self.overall[self.methods[0]].get("input") or {}).get("checksum")

    def same_samples(self, other: Run) -> bool:
        """Whether two runs drew the same bootstrap samples of the same questions."""
        return self.sampling == other.sampling and self.checksum == other.checksum

    def source(self, method: str | None = None) -> str | None:
        methods = [method] if method else self.methods
        for m in methods:
            src = (self.overall[m].get("input") or {}).get("source")
            if src:
                return str(src)
        return None

    def per_question(self, method: str) -> pd.DataFrame:
        return self._pq[method]

    def per_iteration(self, method: str) -> pd.DataFrame:
        return self._it[method]

    def data_source(self) -> DataSource:
        """Where the run's traces came from, as ``mars simulate`` recorded it (input.data)."""
        for m in self.methods:
            found = DataSource.from_dict((self.overall[m].get("input") or {}).get("data"))
            if found is not None:
                return found
        return DataSource(UNKNOWN, f"unknown: {self.path} records none (simulate it again)")

    def digest(self, method: str) -> str:
        """The digest of a method's per_iteration.csv, as an analysis records what it read."""
        if method not in self._digests:
            self._digests[method] = file_digest(self.path / method / PER_ITERATION)
        return self._digests[method]


OVERALL = "overall.json"
PER_QUESTION = "per_question.csv"
PER_ITERATION = "per_iteration.csv"
#: overall.json numbers the tables read: finite numbers, and the per_question.csv column whose
#: mean (over questions; × 100 for accuracy) each one is
OVERALL_MEANS = {
    "accuracy_pct": ("accuracy", 100.0),
    "savings_pct": ("savings_pct", 1.0),
    "tokens_mean": ("tokens_mean", 1.0),
    "baseline_tokens_mean": ("baseline_tokens_mean", 1.0),
    "stop_position_mean": ("stop_position_mean", 1.0),
}
#: numbers that may be null (a pool without probe costs)
OVERALL_NULLABLE = ("savings_with_probes_pct",)
#: per_question.csv / per_iteration.csv columns the report reads: numbers (whole numbers first),
#: and those that may be empty
PQ_WHOLE = ("qid",)
PQ_NUMBERS = (*PER_QUESTION_LEADING_COLUMNS[1:], "probe_tokens_mean")
PQ_NULLABLE = ("probe_tokens_mean",)
IT_WHOLE = ("qid", "iteration", "tokens", "baseline_tokens", "stop_position")
IT_NUMBERS = ("probe_tokens",)
IT_NULLABLE = ("probe_tokens",)
_TRUTH = {"true": True, "1": True, "false": False, "0": False}


def _is_number(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def check_overall(path: Path, ov: dict) -> None:
    """The fields of an overall.json the report reads: numbers, settings, input."""
    for key in OVERALL_MEANS:
        if not _is_number(ov.get(key)):
            raise RunError(f"{path}: {key} is {ov.get(key)!r}, not a finite number")
    for key in OVERALL_NULLABLE:
        if ov.get(key) is not None and not _is_number(ov[key]):
            raise RunError(f"{path}: {key} is {ov[key]!r}, not a finite number or null")
    n = ov.get("n_questions")
    if not (isinstance(n, int) and not isinstance(n, bool) and n >= 1):
        raise RunError(f"{path}: n_questions is {n!r}, not a positive whole number")
    settings = ov.get("settings")
    if not isinstance(settings, dict):
        raise RunError(f"{path}: settings is {type(settings).__name__}, not a JSON object")
    for key in ("budget", "iterations"):
        if key not in settings:
            raise RunError(f"{path}: settings has no {key}")
    for key, value in settings.items():
        if key not in SPECS or value is None:
            continue
        choices = SPECS[key].choices
        if choices is not None:
            if value not in choices:
                raise RunError(f"{path}: setting {key} is {value!r}, not one of the choices")
        elif not _is_number(value):
            raise RunError(f"{path}: setting {key} is {value!r}, not a number")
    try:
        from_dict(settings, strict=False).validate()
    except MarsError as exc:
        raise RunError(f"{path}: settings: {exc}") from None
    inputs = ov.get("input", {})
    if not isinstance(inputs, dict):
        raise RunError(f"{path}: input is {type(inputs).__name__}, not a JSON object")
    for key in ("source", "checksum", "fit"):
        if inputs.get(key) is not None and not isinstance(inputs[key], str):
            raise RunError(f"{path}: input.{key} is {inputs[key]!r}, not a string")


def _read_csv(path: Path, **kwargs) -> pd.DataFrame:
    regular_file(path, RunError, f"{path}: missing")
    try:
        return pd.read_csv(path, **kwargs)
    except (OSError, ValueError) as exc:  # pandas' parser and empty-data errors are ValueErrors
        raise RunError(f"{path}: unreadable ({first_line(exc)})") from None


def _check_columns(df: pd.DataFrame, path: Path, whole, numbers, nullable) -> None:
    missing = [c for c in (*whole, *numbers) if c not in df.columns]
    if missing:
        raise RunError(f"{path}: no column {missing[0]}")
    for col in (*whole, *numbers):
        values = pd.to_numeric(df[col], errors="coerce")
        given = df[col].notna() & (df[col].astype(str) != "")
        finite = np.isfinite(values.to_numpy(float))
        bad = ~finite & (given.to_numpy() | (col not in nullable))
        if col in whole:
            bad |= finite & ((values.to_numpy(float) % 1 != 0) | (values.to_numpy(float) < 0))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            kind = "a whole number ≥ 0" if col in whole else "a finite number"
            raise RunError(
                f"{path}: row {row + 2}, column {col}: {df[col].iloc[row]!r} is not {kind}"
            )
        df[col] = values.astype(np.int64) if col in whole else values


def _load_method(run: Run, d: Path, ov: dict) -> None:
    """Read and check one method's CSVs against its overall.json."""
    n_q, iterations = ov["n_questions"], int(ov["settings"]["iterations"])
    path = d / PER_QUESTION
    pq = _read_csv(path, keep_default_na=True, dtype={"ground_truth": str})
    _check_columns(pq, path, PQ_WHOLE, PQ_NUMBERS, PQ_NULLABLE)
    if pq.qid.duplicated().any():
        raise RunError(f"{path}: question {pq.qid[pq.qid.duplicated()].iloc[0]} twice")
    if len(pq) != n_q:
        raise RunError(f"{path}: {len(pq)} questions, but overall.json says {n_q}")
    for key, (col, scale) in OVERALL_MEANS.items():
        mean = scale * float(pq[col].mean())
        if not math.isclose(ov[key], mean, rel_tol=1e-6, abs_tol=1e-6):
            raise RunError(
                f"{d / OVERALL}: {key} {ov[key]!r} disagrees with {PER_QUESTION} ({mean!r})"
            )
    path = d / PER_ITERATION
    it = _read_csv(
        path,
        dtype={"answer": str, "stopped_by": str, "correct": str},
        keep_default_na=False,
        na_values={"probe_tokens": [""]},
    )
    _check_columns(it, path, IT_WHOLE, IT_NUMBERS, IT_NULLABLE)
    for col in ("answer", "correct", "stopped_by"):
        if col not in it.columns:
            raise RunError(f"{path}: no column {col}")
    truth = it.correct.str.strip().str.lower().map(_TRUTH)
    if truth.isna().any():
        row = int(np.flatnonzero(truth.isna())[0])
        raise RunError(f"{path}: row {row + 2}, column correct: {it.correct.iloc[row]!r}")
    it["correct"] = truth.astype(bool)
    out_of_range = it.iteration >= iterations
    if out_of_range.any() or it.duplicated(["qid", "iteration"]).any():
        raise RunError(f"{path}: rows are not one per question and iteration 0-{iterations - 1}")
    if set(it.qid) != set(pq.qid) or len(it) != n_q * iterations:
        raise RunError(
            f"{path}: {len(it)} rows, not one per question of {PER_QUESTION} × {iterations} "
            "iterations"
        )
    run._pq[d.name] = pq.sort_values("qid", kind="stable").reset_index(drop=True)
    run._it[d.name] = it.sort_values(["qid", "iteration"], kind="stable").reset_index(drop=True)


def _check_one_setting(run: Run, files: dict) -> None:
    """One run directory, one set of sampling settings and questions: refuse a method simulated
    with other ones rather than put it beside the others."""

    def key(m: str) -> tuple:
        return (
            tuple(sampling_of(run.overall[m]["settings"]).values()),
            (run.overall[m].get("input") or {}).get("checksum"),
        )

    groups: dict[tuple, list[str]] = {}
    for m in run.methods:
        groups.setdefault(key(m), []).append(m)
    if len(groups) < 2:
        return
    # the largest group is the run's; name the first method outside it
    main = max(groups.values(), key=len)
    odd = next(m for m in run.methods if m not in main)
    ref = run.overall[main[0]]
    mine, theirs = sampling_of(run.overall[odd]["settings"]), sampling_of(ref["settings"])
    diff = [f"{k} {mine[k]} (theirs: {theirs[k]})" for k in SAMPLING_KEYS if mine[k] != theirs[k]]
    what = (
        "simulated with " + ", ".join(diff)
        if diff
        else "simulated on other questions or another pool (its input checksum differs)"
    )
    others = ", ".join(main[:3]) + (", …" if len(main) > 3 else "")
    raise RunError(
        f"{files[odd]}: {what}, unlike the run's other {len(main)} method(s) ({others}); one run "
        f"folder holds one set of sampling settings and questions: simulate {odd} again with "
        "theirs, or into its own folder"
    )


def _method_dirs(path: Path) -> list[Path]:
    """Sub-folders holding an overall.json (of any kind: a damaged one is refused on load)."""
    try:
        children = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []
    return [c for c in children if os.path.lexists(c / OVERALL)]


def is_run_dir(path: Path) -> bool:
    return bool(_method_dirs(Path(path)))


def load_run(path: Path, model: str, dataset: str, setting: str) -> Run:
    """A run directory, every file the report reads checked (one line naming a damaged one)."""
    run = Run(path=Path(path), model=model, dataset=dataset, setting=setting)
    files = {}
    for d in _method_dirs(Path(path)):
        ov = read_json_object(d / OVERALL, RunError)
        check_overall(d / OVERALL, ov)
        # the directory names the method (a copied directory keeps its own name)
        run.overall[d.name] = ov
        files[d.name] = d / OVERALL
    _check_one_setting(run, files)
    for d in _method_dirs(Path(path)):
        _load_method(run, d, run.overall[d.name])
    return run


def _own_label_parts(path: Path) -> list[str]:
    """Label parts of a run directory given directly: after a ``results`` component,
    else its name."""
    parts = list(Path(os.path.abspath(path)).parts)
    if parts and parts[-1] in STAGE_DIRS:
        parts = parts[:-1]
    if "results" in parts[:-1]:
        i = len(parts) - 1 - parts[::-1].index("results")
        return parts[i + 1 :]
    return parts[-1:]


def discover(root: Path, label: str | None = None) -> list[Run]:
    """Every run directory under ``root`` (``root`` itself included), labelled by its path."""
    root = Path(root)
    if not root.exists():
        raise RunError(f"{root}: no such directory")
    prefix = parse_label(label) if label else None
    found: list[Run] = []
    for dirpath, dirnames, _ in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        here = Path(dirpath)
        if not is_run_dir(here):
            continue
        rel = here.relative_to(root).parts
        if prefix is not None:
            parts = prefix + list(rel)
        elif rel:
            parts = list(rel)
        else:
            parts = _own_label_parts(here)
        model, dataset, setting = split_label(parts)
        found.append(load_run(here, model, dataset, setting))
        # method directories are leaves of a run; never descend into them
        dirnames[:] = [d for d in dirnames if not os.path.lexists(here / d / OVERALL)]
    return found
