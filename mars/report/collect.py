"""The runs of a report together: lookups by model, dataset, method and setting, the datasets
in report order, and each run's analysis attached. Runs are read by :mod:`mars.simulate.runs`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import MarsError
from ..method.settings import SAMPLING_KEYS
from ..simulate.runs import DEFAULT_SETTING, Run, RunError, discover, split_label
from ..store.analysis import Analysis, AnalysisError, find_analyses, read_analysis
from ..store.provenance import DataSource

__all__ = [
    "DEFAULT_SETTING",
    "ReportError",
    "Results",
    "Run",
    "RunError",
    "collect",
    "discover",
    "split_label",
]


class ReportError(MarsError):
    """Bad report input (no results, a malformed label, ...)."""


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

    def comparable_runs(self, model: str, dataset: str) -> list[Run]:
        """The runs of a pair that drew the main run's samples: the only ones a table row or a
        figure panel puts side by side (the others get their own, labelled rows)."""
        runs = self.runs_of(model, dataset)
        return [r for r in runs if r.same_samples(runs[0])]

    def sampling_difference(self, run: Run) -> str:
        """How a run's samples differ from its pair's main run ("" when they do not)."""
        main = self.main_run(*run.pair)
        diff = [
            f"{k} {run.sampling[k]}" for k in SAMPLING_KEYS if run.sampling[k] != main.sampling[k]
        ]
        if not diff and run.checksum != main.checksum:
            diff = ["other questions"]
        return ", ".join(diff)

    def source_of(self, run: Run) -> DataSource:
        """Where a run's traces came from (its pool's provenance, recorded by the simulation)."""
        return run.data_source()

    def analysis_of(self, model: str, dataset: str) -> tuple[Run, Analysis] | None:
        """The pair's analysed run (the first in report order) and its analysis."""
        for r in self.runs_of(model, dataset):
            if r.analysis is not None:
                return r, r.analysis
        return None

    def sources(self, runs: list[Run]) -> dict[str, DataSource]:
        """``{model: source}`` of runs (``model/dataset`` where a model's datasets differ)."""
        per_model: dict[str, dict[str, DataSource]] = {}
        for r in runs:
            per_model.setdefault(r.model, {})[r.dataset] = self.source_of(r)
        out = {}
        for model, by_dataset in per_model.items():
            if len(set(by_dataset.values())) == 1:
                out[model] = next(iter(by_dataset.values()))
            else:
                out.update({f"{model}/{d}": src for d, src in by_dataset.items()})
        return out

    def grids(self, runs: list[Run]) -> dict[str, int | None]:
        """``{model/dataset: spacing}`` of runs: each pool's own probe grid, as its simulation
        recorded it from the pool (None: not recorded)."""
        out: dict[str, int | None] = {}
        for r in runs:
            spacing = r.sampling.get("spacing")
            if out.get(f"{r.model}/{r.dataset}") is None:
                out[f"{r.model}/{r.dataset}"] = None if spacing is None else int(spacing)
        return out

    def model_title(self, model: str) -> str:
        """A model's name as figures title it: marked when all its data is synthetic."""
        sources = [self.source_of(r) for r in self.runs if r.model == model]
        return f"{model} (synthetic)" if sources and all(s.synthetic for s in sources) else model

    def find(self, model: str, dataset: str, method: str) -> Run | None:
        """The run holding ``method`` for a pair among the comparable ones, preferring the main
        setting."""
        for r in self.comparable_runs(model, dataset):
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
    paths: list[Path],
    labels: list[str] | None = None,
    main_setting: str = DEFAULT_SETTING,
    analyses: list[Path] | None = None,
) -> Results:
    """Runs under every path; ``labels[i]`` (if given) labels ``paths[i]``; the analyses
    (``mars analyze``) under ``analyses`` and ``paths``, each attached to the run it analysed."""
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
    results = Results(runs, main_setting=main_setting)
    for a in analyses or []:
        if not Path(a).is_dir():
            raise ReportError(f"--analysis {a}: no such directory")
    found_dirs = [d for p in [*(analyses or []), *paths] for d in find_analyses(Path(p))]
    unique = {os.path.abspath(d): d for d in reversed(found_dirs)}  # the first path given wins
    for d in sorted(unique.values(), key=found_dirs.index):
        try:
            attach(results, read_analysis(d))
        except AnalysisError as exc:
            raise ReportError(str(exc)) from None
    return results


def attach(results: Results, analysis: Analysis) -> None:
    """Attach an analysis to the run it was made from: the run whose per_iteration files have the
    digests it recorded. An analysis of a run that was simulated again since is refused (its
    trajectories would not be the tables' samples); one of a run not in the report is left out."""
    f = analysis.path / "analysis.json"
    for run in results.runs:
        if not analysis.inputs or not all(m in run.overall for m in analysis.inputs):
            continue
        if all(run.digest(m) == d for m, d in analysis.inputs.items()):
            if run.analysis is not None:
                raise ReportError(
                    f"{f}: a second analysis of {run.label} (the first: {run.analysis.path})"
                )
            run.analysis = analysis
            return
    stale = next((r for r in results.runs if analysis.is_of(r.label, r.path)), None)
    if stale is not None:
        raise ReportError(
            f"{f}: made from other simulation results than {stale.path} holds now (it was "
            "simulated again since): run `mars analyze` again"
        )
