"""The analysis stage's files: what the report draws beyond simulation summaries.

``mars analyze`` reads a pool, its fit and one simulation run, and writes into one folder::

    analysis.json           what was analysed (the run's label, its pool and fit, a digest of each
                            per_iteration.csv read) and the trajectories of the candidate example
                            questions (Fig. 1 right) and consensus-stopping failures (Fig. 2)
    q_calibration.csv       learned against oracle switch probability, per bin and per checkpoint
    switch_models.csv       the fit stage's switch model of each question at the run's warmup

Everything here is plain data (no pool reader, no simulator), so ``mars report`` reads it with
nothing else installed, and checks it against the simulation it is drawn beside: a run simulated
again after its analysis is refused, never drawn with the old trajectories.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import MarsError
from .userfiles import read_json_object

ANALYSIS_FORMAT = "mars-analysis/1"
ANALYSIS_FILE = "analysis.json"
Q_CALIBRATION_FILE = "q_calibration.csv"
SWITCH_MODELS_FILE = "switch_models.csv"
#: what an analysis folder holds (all of it replaced by the next analysis into the folder)
ANALYSIS_ENTRIES = frozenset({ANALYSIS_FILE, Q_CALIBRATION_FILE, SWITCH_MODELS_FILE})
#: trajectory purposes: the Fig. 1 example candidates and the Fig. 2 failure candidates
EXAMPLE = "example"
PP_FAILURE = "pp-failure"
PURPOSES = (EXAMPLE, PP_FAILURE)
#: q_calibration.csv: one row per bin (kind ``bin``) or per checkpoint position (``checkpoint``)
Q_CALIBRATION_COLUMNS = ["kind", "bin", "lo", "hi", "position", "n", "q_learned_mean",
                         "q_oracle_rate", "n_questions"]  # fmt: skip
SWITCH_MODEL_COLUMNS = ["qid", "warmup", "n_rows", "n_positive", "log_loss", "brier"]


class AnalysisError(MarsError):
    """A damaged or stale analysis folder (one line naming the file)."""


def file_digest(path: Path) -> str:
    """The digest an analysis records of a simulation file it read (and the report checks)."""
    return hashlib.blake2b(Path(path).read_bytes(), digest_size=16).hexdigest()


@dataclass
class Trajectory:
    """One bootstrap sample of one question under self-consistency votes, checkpoint by checkpoint:
    each answer's vote share, the leader, the MARS test's minimum slack and binding challenger,
    and whether the simulator's rule fires there."""

    qid: int
    iteration: int
    purpose: str
    positions: np.ndarray  # [m] checkpoint positions (tokens)
    shares: np.ndarray  # [m, n_answers] vote share of each answer
    lead: np.ndarray  # [m] leader id (-1 none)
    slack: np.ndarray  # [m] minimum slack of the MARS test (NaN where it has none)
    binding: np.ndarray  # [m] binding challenger id (mars.method.stopping.UNSEEN: the unseen one)
    fires: np.ndarray  # [m] the rule fires here (margin test and probe-0 guard)
    gamma: float
    final_answer: int  # full-budget vote of the sample
    representatives: list
    correct: np.ndarray  # [n_answers]

    @property
    def stop_k(self) -> int:
        """First checkpoint where the rule fires; len(positions) when it never does."""
        hit = np.flatnonzero(self.fires)
        return int(hit[0]) if len(hit) else len(self.positions)

    @property
    def overtook(self) -> bool:
        """The answer at the stop did not lead at the first checkpoint (it overtook the early
        leader): what makes a question show the mechanism."""
        k = self.stop_k
        return k < len(self.positions) and bool(self.lead[0] != self.lead[k])

    def frame(self) -> pd.DataFrame:
        """One row per checkpoint and answer with a vote: the numbers a figure plots."""
        rows: list[dict] = []
        for k, p in enumerate(self.positions):
            rows.extend(
                {
                    "qid": self.qid,
                    "iteration": self.iteration,
                    "checkpoint": k,
                    "position": int(p),
                    "answer": self.representatives[a],
                    "correct": bool(self.correct[a]),
                    "share": float(self.shares[k, a]),
                    "leader": self.representatives[self.lead[k]] if self.lead[k] >= 0 else "",
                    "slack": float(self.slack[k]),
                    "fires": bool(self.fires[k]),
                }
                for a in np.flatnonzero(self.shares[k] > 0)
            )
        return pd.DataFrame(rows)

    def to_dict(self) -> dict:
        """Plain JSON, the answers no checkpoint votes for left out (ids renumbered)."""
        keep = np.flatnonzero(
            (self.shares > 0).any(axis=0)
            | (np.arange(self.shares.shape[1]) == self.final_answer)
            | np.isin(np.arange(self.shares.shape[1]), self.lead)
        )
        new = np.full(self.shares.shape[1] + 1, -1, dtype=np.int64)
        new[keep] = np.arange(len(keep))

        def renumber(ids: np.ndarray) -> list[int]:  # answer ids; the negative codes as they are
            return [int(new[i]) if i >= 0 else int(i) for i in ids]

        return {
            "qid": int(self.qid),
            "iteration": int(self.iteration),
            "purpose": self.purpose,
            "positions": [int(p) for p in self.positions],
            "shares": [[float(x) for x in row[keep]] for row in self.shares],
            "lead": renumber(self.lead),
            "slack": [None if not math.isfinite(x) else float(x) for x in self.slack],
            "binding": renumber(self.binding),
            "fires": [bool(x) for x in self.fires],
            "gamma": float(self.gamma),
            "final_answer": renumber(np.array([self.final_answer]))[0],
            "representatives": [str(self.representatives[a]) for a in keep],
            "correct": [bool(self.correct[a]) for a in keep],
        }

    @classmethod
    def from_dict(cls, d: dict) -> Trajectory:
        """The inverse of :meth:`to_dict`; malformed entries raise ``ValueError``/``KeyError``/
        ``TypeError`` (the reader turns them into one line)."""
        positions = np.asarray(d["positions"], dtype=np.int64)
        m = len(positions)
        reps = [str(r) for r in d["representatives"]]
        shares = np.asarray(d["shares"], dtype=np.float64).reshape(m, len(reps))
        arrays = {
            "lead": np.asarray(d["lead"], dtype=np.int64),
            "slack": np.array([np.nan if x is None else x for x in d["slack"]], dtype=np.float64),
            "binding": np.asarray(d["binding"], dtype=np.int64),
            "fires": np.asarray(d["fires"], dtype=bool),
        }
        for name, a in arrays.items():
            if a.shape != (m,):
                raise ValueError(f"{name} has {len(a)} entries for {m} checkpoints")
        correct = np.asarray(d["correct"], dtype=bool)
        if correct.shape != (len(reps),) or not np.isfinite(shares).all():
            raise ValueError("answers and shares do not match")
        if d["purpose"] not in PURPOSES:
            raise ValueError(f"purpose {d['purpose']!r}")
        return cls(
            qid=int(d["qid"]),
            iteration=int(d["iteration"]),
            purpose=str(d["purpose"]),
            positions=positions,
            shares=shares,
            gamma=float(d["gamma"]),
            final_answer=int(d["final_answer"]),
            representatives=reps,
            correct=correct,
            **arrays,
        )


@dataclass
class Analysis:
    """An analysis folder, read and checked (:func:`read_analysis`)."""

    path: Path
    label: str  # model/dataset/setting of the analysed run
    inputs: dict  # method -> digest of the per_iteration.csv it read
    example_spec: dict | None  # {"qid", "iteration"} when the example was chosen by hand
    trajectories: list[Trajectory]
    q_calibration: pd.DataFrame
    switch_models: pd.DataFrame
    run: str | None = None  # the analysed run's folder, as `mars analyze` was given it

    def is_of(self, run_label: str, run_path: Path) -> bool:
        """Whether this analysis was made of the run ``run_label`` at ``run_path`` (its current
        contents aside): the same label, or the same folder (a run's label depends on the root it
        is found under; its folder does not)."""
        if run_label == self.label:
            return True
        if self.run is None:
            return False
        try:
            return os.path.samefile(self.run, run_path)
        except OSError:  # moved or gone: only the label can tell
            return False

    def trajectory(self, purpose: str, qid: int, iteration: int) -> Trajectory | None:
        return next(
            (
                t
                for t in self.trajectories
                if t.purpose == purpose and t.qid == qid and t.iteration == iteration
            ),
            None,
        )

    def of(self, purpose: str) -> list[Trajectory]:
        return [t for t in self.trajectories if t.purpose == purpose]


def is_analysis_dir(path: Path) -> bool:
    return (Path(path) / ANALYSIS_FILE).is_file()


def read_analysis(path: Path) -> Analysis:
    """An analysis folder with every file checked (one line naming a damaged one)."""
    path = Path(path)
    f = path / ANALYSIS_FILE
    meta = read_json_object(f, AnalysisError, "missing")
    if meta.get("format") != ANALYSIS_FORMAT:
        raise AnalysisError(f"{f}: format {meta.get('format')!r}, not {ANALYSIS_FORMAT!r}")
    label, inputs = meta.get("label"), meta.get("inputs")
    if not isinstance(label, str) or label.count("/") != 2:
        raise AnalysisError(f"{f}: label {label!r} is not model/dataset/setting")
    if not isinstance(inputs, dict) or not all(isinstance(v, str) for v in inputs.values()):
        raise AnalysisError(f"{f}: inputs is not a map of method to digest")
    spec = meta.get("example_spec")
    if spec is not None and not (
        isinstance(spec, dict) and all(isinstance(spec.get(k), int) for k in ("qid", "iteration"))
    ):
        raise AnalysisError(f"{f}: example_spec {spec!r} is not {{qid, iteration}}")
    raw = meta.get("trajectories")
    if not isinstance(raw, list):
        raise AnalysisError(f"{f}: trajectories is not a list")
    trajectories = []
    for i, d in enumerate(raw):
        try:
            trajectories.append(Trajectory.from_dict(d))
        except (KeyError, TypeError, ValueError) as exc:
            raise AnalysisError(f"{f}: trajectory {i} is malformed ({exc})") from None
    run = meta.get("run")
    return Analysis(
        path=path,
        run=run if isinstance(run, str) else None,
        label=label,
        inputs=dict(inputs),
        example_spec=spec,
        trajectories=trajectories,
        q_calibration=_read_table(path / Q_CALIBRATION_FILE, Q_CALIBRATION_COLUMNS),
        switch_models=_read_table(path / SWITCH_MODELS_FILE, SWITCH_MODEL_COLUMNS),
    )


def _read_table(path: Path, columns: list[str]) -> pd.DataFrame:
    try:
        df = pd.read_csv(path)
    except FileNotFoundError:
        raise AnalysisError(f"{path}: missing") from None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise AnalysisError(f"{path}: unreadable ({str(exc).splitlines()[0]})") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise AnalysisError(f"{path}: no column {missing[0]!r}")
    return df


def find_analyses(root: Path) -> list[Path]:
    """Every analysis folder at or under ``root``, in path order."""
    root = Path(root)
    if is_analysis_dir(root):
        return [root]
    return sorted(p.parent for p in root.rglob(ANALYSIS_FILE) if p.is_file())
