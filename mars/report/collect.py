"""Find `mars simulate` output directories and load them into tidy tables.

A *run* is one directory written by ``mars simulate --out DIR``: it holds one sub-directory per
method, each with ``overall.json``, ``per_question.csv`` and ``per_iteration.csv``.
:func:`discover` finds every run under a root and labels it by its path relative to the root, a
trailing ``sim`` and a leading ``simulate`` dropped (so ``results/{model}/{dataset}/{setting}/sim``
and ``results/simulate/{model}/{dataset}/{setting}`` both work):

* ``model/dataset/setting[/more]`` → model, dataset, setting (``more`` joins the setting);
* ``model/dataset`` → setting ``default``;
* a single name → dataset = that name, model ``-``.

An explicit label (``--label model/dataset[/setting]``) replaces the part a path cannot tell.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..errors import MarsError
from ..settings import Settings, from_dict

DEFAULT_SETTING = "default"
UNKNOWN_MODEL = "-"


class ReportError(MarsError):
    """Bad report input (no results, a malformed label, ...)."""


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
        raise ReportError("empty label")
    if len(parts) == 1:
        return UNKNOWN_MODEL, parts[0], DEFAULT_SETTING
    if len(parts) == 2:
        return parts[0], parts[1], DEFAULT_SETTING
    return parts[0], parts[1], "/".join(parts[2:])


def parse_label(text: str) -> list[str]:
    parts = [p for p in text.strip().strip("/").split("/") if p]
    if not parts:
        raise ReportError(f"label {text!r}: expected model/dataset[/setting]")
    return parts


@dataclass
class Run:
    """One simulate output directory (one model × dataset × setting)."""

    path: Path
    model: str
    dataset: str
    setting: str
    overall: dict = field(default_factory=dict)  # method -> overall.json
    _pq: dict = field(default_factory=dict, repr=False)
    _it: dict = field(default_factory=dict, repr=False)

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

    def source(self, method: str | None = None) -> str | None:
        methods = [method] if method else self.methods
        for m in methods:
            src = (self.overall[m].get("input") or {}).get("source")
            if src:
                return str(src)
        return None

    def per_question(self, method: str) -> pd.DataFrame:
        if method not in self._pq:
            df = pd.read_csv(
                self.path / method / "per_question.csv",
                keep_default_na=True,
                dtype={"ground_truth": str},
            )
            self._pq[method] = df.sort_values("qid", kind="stable").reset_index(drop=True)
        return self._pq[method]

    def per_iteration(self, method: str) -> pd.DataFrame:
        if method not in self._it:
            df = pd.read_csv(
                self.path / method / "per_iteration.csv",
                dtype={"answer": str, "stopped_by": str},
                keep_default_na=False,
                na_values={"probe_tokens": [""]},
            )
            df["correct"] = df["correct"].astype(str).str.lower().isin(("true", "1"))
            self._it[method] = df.sort_values(["qid", "iteration"], kind="stable").reset_index(
                drop=True
            )
        return self._it[method]


def _method_dirs(path: Path) -> list[Path]:
    try:
        children = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []
    return [c for c in children if (c / "overall.json").is_file()]


def is_run_dir(path: Path) -> bool:
    return bool(_method_dirs(Path(path)))


def load_run(path: Path, model: str, dataset: str, setting: str) -> Run:
    run = Run(path=Path(path), model=model, dataset=dataset, setting=setting)
    for d in _method_dirs(Path(path)):
        try:
            ov = json.loads((d / "overall.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ReportError(f"{d / 'overall.json'}: unreadable ({exc})") from None
        name = ov.get("method") or d.name
        if name != d.name:
            name = d.name  # the directory decides (a copied directory keeps its own name)
        run.overall[name] = ov
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
        raise ReportError(f"{root}: no such directory")
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
        dirnames[:] = [d for d in dirnames if not (here / d / "overall.json").is_file()]
    return found


@dataclass
class Results:
    """All runs of a report, with lookups by (model, dataset, method)."""

    runs: list[Run]
    main_setting: str = DEFAULT_SETTING

    def __post_init__(self):
        labels = [r.label for r in self.runs]
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise ReportError(
                f"two result directories share the label {dup[0]!r}; pass --label to tell them "
                "apart"
            )
        self.runs = sorted(self.runs, key=lambda r: (r.model, _dataset_key(r.dataset), r.setting))

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """(model, dataset) pairs in report order."""
        return list(dict.fromkeys(r.pair for r in self.runs))

    @property
    def models(self) -> list[str]:
        return list(dict.fromkeys(r.model for r in self.runs))

    def runs_of(self, model: str, dataset: str) -> list[Run]:
        """The runs of a pair, the main setting first."""
        runs = [r for r in self.runs if r.pair == (model, dataset)]
        return sorted(
            runs, key=lambda r: (r.setting != self.main_setting, -len(r.methods), r.setting)
        )

    def main_run(self, model: str, dataset: str) -> Run:
        return self.runs_of(model, dataset)[0]

    def find(self, model: str, dataset: str, method: str) -> Run | None:
        """The run holding ``method`` for a pair, preferring the main setting."""
        for r in self.runs_of(model, dataset):
            if method in r.overall:
                return r
        return None

    def overall_frame(self) -> pd.DataFrame:
        """One row per (model, dataset, setting, method)
        with the overall.json numbers and settings."""
        rows = []
        for r in self.runs:
            for m, ov in r.overall.items():
                row = {
                    "model": r.model,
                    "dataset": r.dataset,
                    "setting": r.setting,
                    "method": m,
                    "run_dir": str(r.path),
                }
                for k in (
                    "n_questions",
                    "accuracy_pct",
                    "savings_pct",
                    "savings_with_probes_pct",
                    "tokens_mean",
                    "baseline_tokens_mean",
                    "stop_position_mean",
                ):
                    row[k] = ov.get(k)
                for k, v in (ov.get("settings") or {}).items():
                    row[f"settings.{k}"] = v
                row["source"] = (ov.get("input") or {}).get("source")
                rows.append(row)
        return pd.DataFrame(rows)


_DATASET_ORDER = ("brumo", "aime", "hmmt")


def _dataset_key(name: str):
    """The paper's dataset order (BRUMO, AIME, HMMT) first, then alphabetical."""
    low = name.lower()
    for i, p in enumerate(_DATASET_ORDER):
        if low.startswith(p):
            return (i, low)
    return (len(_DATASET_ORDER), low)


def collect(
    paths: list[Path], labels: list[str] | None = None, main_setting: str = DEFAULT_SETTING
) -> Results:
    """Runs under every path; ``labels[i]`` (if given) labels ``paths[i]``."""
    labels = list(labels or [])
    if labels and len(labels) != len(paths):
        raise ReportError(
            f"{len(labels)} --label for {len(paths)} result paths: give one per path, in order"
        )
    runs: list[Run] = []
    for i, p in enumerate(paths):
        found = discover(Path(p), labels[i] if labels else None)
        if not found:
            raise ReportError(f"{p}: no simulate output under it (no <method>/overall.json)")
        runs += found
    return Results(runs, main_setting=main_setting)


def resolve_pool(run: Run, method: str | None = None, overrides: dict | None = None) -> Path | None:
    """The trace pool of a run: ``--pool`` override,
    else overall.json's input.source if it exists."""
    overrides = overrides or {}
    for key in (
        f"{run.model}/{run.dataset}/{run.setting}",
        f"{run.model}/{run.dataset}",
        run.dataset,
    ):
        if key in overrides:
            return Path(overrides[key])
    src = run.source(method)
    if not src:
        return None
    p = Path(src)
    candidates = (
        [p] if p.is_absolute() else [Path.cwd() / p] + [a / p for a in run.path.resolve().parents]
    )
    for c in candidates:
        if c.exists():
            return c
    return None


def parse_pool_overrides(items: list[str] | None) -> dict:
    """``model/dataset=PATH`` (or ``dataset=PATH``) → {label: path}."""
    out = {}
    for it in items or []:
        if "=" not in it:
            raise ReportError(f"--pool {it!r}: expected model/dataset=PATH")
        key, path = it.split("=", 1)
        out["/".join(parse_label(key))] = path
    return out
