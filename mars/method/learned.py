"""What MARS learns once, across questions, instead of a warmup per question.

MARS2 (:mod:`mars.method.riskstop`) reads, for every question, 16 warmup traces run to completion
before its main traces start: who leaves an answer at each checkpoint, and where they land. A
served question pays for them — at 64 traces about what the stop saves, and they delay the main
traces by a whole trace. But what they tell is mostly not about the question: how often a trace
holding the leading answer at 8,000 tokens later leaves it is a property of the model and the kind
of task, learned as well from the traffic already seen. A :class:`Calibration` holds it, fitted
once on pools (:func:`fit_calibration`) and read by the rule at every checkpoint, with no warmup:

* **leaving** — a running trace holding answer a at checkpoint k ends elsewhere at a rate ρ that
  depends on where it is (tokens generated), the share of the answered traces holding a, and
  whether a leads. Across the fitted questions the rate of a cell varies from question to
  question; that spread (a beta distribution fitted to the per-question rates by moments) is the
  uncertainty all of a's holders in one question share, as MARS2's posterior over ρ_ka is;
* **landing** — a trace that leaves, and a trace not yet launched, ends on answer x in proportion
  to what this question's traces say of x: the traces that have ended on x, and those holding x
  now weighted by their chance to stay, plus a pseudo-count per answer and one for an answer no
  trace holds yet (:func:`landing`).

The risk is then MARS2's (:func:`mars.method.riskstop.predictive_risk`), its landing a posterior
per sample.

The paper's MARS rules read two more things of a warmup, learned once here as well:

* **the switch model** q — one :class:`~mars.method.qmodel.SwitchModel` fitted on the first
  ``warmup`` traces of every fitted question (the rows each question's own warmup would give,
  pooled), on a trace's own dynamics only: position, flips, streak (the confidence columns are
  zeroed, so it serves a server that sends no log-probabilities, and a pool without confidences);
* **γ** — 1, the margin test's own bound. A question's calibrated γ (reference-protocol §7) fits
  that question's warmup; pooled over questions, none below 1 kept the accuracy: fitted on
  synthetic Qwen3-8B HMMT and evaluated on BRUMO at budget 64, the 0.9 quantile of the questions'
  own γ (0.76) cost 10.5 points, and even their largest, 0.77 for one pool of README's default
  run, cost 6.3 points (research/calibration/results/paper-mars.md).

With no warmup there is no warmup majority for the probe-0 guard to confirm a leader with; in its
place no stop comes before :data:`mars.method.stopping.GUARD_BEFORE` tokens (the guard by
tokens' reach), where the paper's grid has its second checkpoint.

A calibration records what it was fitted on — the pools, their model, their probe grid — and is
refused for a pool of another model or grid (:meth:`Calibration.check_for`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import MarsError
from .arrays import QuestionArrays
from .features import FEATURE_NAMES
from .qmodel import SwitchModel

#: the file kind of a calibration (``mars calibrate --out``)
KIND = "mars-calibration"
VERSION = 1
#: where a cell's edges lie: tokens generated, and the share of the answered traces holding the
#: answer
POSITION_EDGES = (0, 1000, 2000, 4000, 6000, 8000, 12000, 16000, 24000)
SHARE_EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 0.95)
#: pseudo-holders a cell's pooled rate is shrunk by, towards its position's rate (few rows)
SHRINK = 20.0
#: bounds of a cell's population concentration κ (rate ~ Beta(κm, κ(1 − m)))
KAPPA_MIN, KAPPA_MAX = 0.5, 200.0
#: pseudo-counts of the landing posterior: per answer a trace holds or ended on, and for an
#: answer no trace holds yet
PRIOR, OTHER = 0.5, 1.0


#: the traces of each fitted question the switch model and γ are fitted on: a warmup's worth
FIT_WARMUP = 16
#: the γ of the paper's calibrated rule reading a calibration: the margin test's own bound (module
#: docstring: no pooled γ below it kept the accuracy)
POOLED_GAMMA = 1.0
#: the switch-model columns a calibration leaves out (zeroed): checkpoint confidence and its trend
CONF_COLUMNS = (1, 4)


def dynamics(X: np.ndarray) -> np.ndarray:
    """Switch-model features with the confidence columns zeroed (a trace's own dynamics)."""
    X = np.array(X, dtype=np.float64, copy=True)
    X[..., list(CONF_COLUMNS)] = 0.0
    return X


class DynamicsModel:
    """A calibration's switch model: predicts from a trace's dynamics whatever features it is
    given (the confidence columns zeroed first), as the per-question model's
    ``predict_proba``."""

    def __init__(self, model: SwitchModel):
        self.model = model

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return self.model.predict_proba(dynamics(X))


class CalibrationError(MarsError):
    """A calibration that is unreadable, or made for other traces (one line)."""


@dataclass(frozen=True)
class Calibration:
    """Leaving rates by cell (position bin × share bin × leads), fitted across questions."""

    #: [P, S, 2] pooled leaving rate m and population concentration κ of each cell
    rate: np.ndarray
    kappa: np.ndarray
    #: [P, S, 2] running holders the cell was fitted on (0: the cell took its position's rate)
    holders: np.ndarray
    position_edges: tuple[int, ...] = POSITION_EDGES
    share_edges: tuple[float, ...] = SHARE_EDGES
    #: what it was fitted on: pools (source, model, spacing, questions, digest), in order
    fitted_on: list[dict] = field(default_factory=list)
    #: the pooled switch model's parameters (:meth:`SwitchModel.fitted_params`; None: a file of
    #: MARS2 alone, from before the paper's rules read one)
    switch: dict | None = None
    #: the paper's calibrated rule's γ, learned once (None: as ``switch``)
    gamma: float | None = None

    def switch_model(self) -> DynamicsModel | None:
        """The pooled switch model (None: the file holds none)."""
        if self.switch is None:
            return None
        return DynamicsModel(SwitchModel.from_params(self.switch, len(FEATURE_NAMES)))

    # -- use -------------------------------------------------------------------------------

    def cells(self, position: int, shares: np.ndarray, leads: np.ndarray) -> tuple:
        """The cell index (p, s, l) of answers with ``shares`` at ``position`` tokens."""
        p = int(np.searchsorted(self.position_edges, position, side="right") - 1)
        s = np.searchsorted(self.share_edges, shares, side="right") - 1
        return p, np.clip(s, 0, len(self.share_edges) - 1), leads.astype(np.int64)

    def leaving(
        self, position: int, shares: np.ndarray, leads: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The leaving rate of a holder of each answer (its shares and whether it leads, any
        shape) at ``position`` tokens, and the standard deviation of that rate across questions."""
        p, s, lead = self.cells(position, shares, leads)
        m = self.rate[p][s, lead]
        k = self.kappa[p][s, lead]
        return m, np.sqrt(m * (1 - m) / (k + 1))

    @property
    def model(self) -> str:
        models = sorted({str(f.get("model") or "") for f in self.fitted_on})
        return ",".join(models)

    @property
    def spacings(self) -> set[int]:
        """The probe grids' spacings of the pools it was fitted on."""
        return {int(f["spacing"]) for f in self.fitted_on if f.get("spacing") is not None}

    def check_for(
        self, manifest: dict, source: str, protocol: str | None = None, what: str = "a pool of"
    ) -> None:
        """Refuse a pool of another model, or probed on another grid, than the pools this
        calibration was fitted on, or an evaluation under another protocol (its answers grouped
        otherwise) (one line)."""
        fitted_protocols = {str(f["protocol"]) for f in self.fitted_on if f.get("protocol")}
        if protocol is not None and fitted_protocols and protocol not in fitted_protocols:
            raise CalibrationError(
                f"--protocol {protocol}: the calibration was fitted under "
                f"{', '.join(sorted(fitted_protocols))} (mars calibrate --protocol {protocol})"
            )
        model = str(manifest.get("model") or "")
        known = {str(f.get("model") or "") for f in self.fitted_on}
        if model and known - {""} and model not in known:
            raise CalibrationError(
                f"{source}: {what} model {model!r}; the calibration was fitted on "
                f"{', '.join(sorted(known))} (fit one on this model's traces: mars calibrate)"
            )
        spacing = manifest.get("spacing")
        fitted = self.spacings
        if spacing is not None and fitted and spacing not in fitted:
            raise CalibrationError(
                f"{source}: probed every {spacing} tokens; the calibration was fitted on probes "
                f"every {', '.join(map(str, sorted(fitted)))} tokens"
            )

    # -- the file --------------------------------------------------------------------------

    def to_json(self) -> dict:
        return {
            "kind": KIND,
            "version": VERSION,
            "position_edges": list(self.position_edges),
            "share_edges": list(self.share_edges),
            "rate": np.round(self.rate, 6).tolist(),
            "kappa": np.round(self.kappa, 6).tolist(),
            "holders": self.holders.astype(int).tolist(),
            "fitted_on": self.fitted_on,
            **({"switch": self.switch} if self.switch is not None else {}),
            **({"gamma": self.gamma} if self.gamma is not None else {}),
        }

    @property
    def digest(self) -> str:
        text = json.dumps(self.to_json(), sort_keys=True).encode()
        return hashlib.blake2b(text, digest_size=8).hexdigest()

    def save(self, path: str | Path) -> Path:
        from ..store.atomic import write_json_atomic

        return write_json_atomic(path, self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """A calibration file, checked (one line naming it otherwise)."""
        from ..store.userfiles import read_json_object

        d = read_json_object(Path(path), CalibrationError)
        if d.get("kind") != KIND:
            raise CalibrationError(f"{path}: not a calibration of `mars calibrate`")
        if d.get("version") != VERSION:
            raise CalibrationError(
                f"{path}: calibration version {d.get('version')!r}, not {VERSION}"
            )
        try:
            pe = tuple(int(x) for x in d["position_edges"])
            se = tuple(float(x) for x in d["share_edges"])
            shape = (len(pe), len(se), 2)
            arrays = {k: np.asarray(d[k], dtype=np.float64) for k in ("rate", "kappa", "holders")}
            fitted_on = list(d["fitted_on"])
            switch, gamma = d.get("switch"), d.get("gamma")
            if switch is not None:
                SwitchModel.from_params(switch, len(FEATURE_NAMES))
            if gamma is not None and not (
                isinstance(gamma, int | float) and not isinstance(gamma, bool) and 0 <= gamma <= 1
            ):
                raise ValueError(f"gamma {gamma!r} is not a number in [0, 1]")
        except (KeyError, TypeError, ValueError) as exc:
            raise CalibrationError(f"{path}: a field is missing or malformed ({exc})") from None
        for name, a in arrays.items():
            if a.shape != shape or not np.isfinite(a).all():
                raise CalibrationError(f"{path}: {name} is not {shape} finite numbers")
        if ((arrays["rate"] < 0) | (arrays["rate"] > 1)).any() or (arrays["kappa"] <= 0).any():
            raise CalibrationError(f"{path}: a rate outside [0, 1] or a concentration ≤ 0")
        return cls(
            arrays["rate"], arrays["kappa"], arrays["holders"], pe, se, fitted_on, switch,
            None if gamma is None else float(gamma),
        )  # fmt: skip


def answer_shares(ids: np.ndarray, n_answers: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of answer ids [R, B] (-1: none): each answer's share of the answered traces
    [R, A] and the leader [R] (-1: no answer)."""
    R = ids.shape[0]
    counts = np.zeros((R, max(n_answers, 1)))
    rows, cols = np.nonzero(ids >= 0)
    np.add.at(counts, (rows, ids[rows, cols]), 1.0)
    total = counts.sum(axis=1, keepdims=True)
    share = np.divide(counts, total, out=np.zeros_like(counts), where=total > 0)
    lead = np.where(total[:, 0] > 0, counts.argmax(axis=1), -1)
    return share, lead


def fit_calibration(
    questions: Iterable[QuestionArrays], fitted_on: Sequence[dict] = ()
) -> Calibration:
    """The leaving rates of every cell, pooled over the questions' traces (all of them: each
    question's answered traces give the shares), with each cell's spread across questions; and
    the paper's rules' switch model and γ (:func:`fit_switch_and_gamma`)."""
    P, S = len(POSITION_EDGES), len(SHARE_EDGES)
    h_by_q: list[np.ndarray] = []
    d_by_q: list[np.ndarray] = []
    arrays = list(questions)
    for arr in arrays:
        h = np.zeros((P, S, 2))
        d = np.zeros((P, S, 2))
        ids, final = arr.ids, arr.final_ids
        running = arr.run_lengths[:, None] > arr.grid[None, :]
        share, lead = answer_shares(ids.T, arr.n_answers)  # per checkpoint
        for k, pos in enumerate(arr.grid):
            hold = running[:, k] & (ids[:, k] >= 0) & (final >= 0)
            if not hold.any():
                continue
            a = ids[hold, k]
            p = int(np.searchsorted(POSITION_EDGES, pos, side="right") - 1)
            s = np.clip(np.searchsorted(SHARE_EDGES, share[k, a], side="right") - 1, 0, S - 1)
            lead_flag = (a == lead[k]).astype(np.int64)
            np.add.at(h[p], (s, lead_flag), 1.0)
            np.add.at(d[p], (s, lead_flag), (final[hold] != a).astype(np.float64))
        h_by_q.append(h)
        d_by_q.append(d)
    if not h_by_q:
        raise CalibrationError("no question to calibrate on")
    H, D = np.stack(h_by_q), np.stack(d_by_q)  # [Q, P, S, 2]
    h, d = H.sum(axis=0), D.sum(axis=0)
    # a position's rate (all shares, both roles), then each cell shrunk towards it
    pos_rate = (d.sum(axis=(1, 2)) + 1.0) / (h.sum(axis=(1, 2)) + 2.0)
    rate = (d + SHRINK * pos_rate[:, None, None]) / (h + SHRINK)
    # the spread across questions: the variance of the per-question rates (weighted by holders)
    # beyond what their binomial sampling explains, by moments
    with np.errstate(invalid="ignore", divide="ignore"):
        r_q = np.where(H > 0, D / H, 0.0)
        w = H / np.maximum(h, 1e-12)[None]
        var = (w * (r_q - rate[None]) ** 2).sum(axis=0)
        n_q = (H > 0).sum(axis=0)
        binom = rate * (1 - rate) * (n_q / np.maximum(h, 1e-12))
        between = np.maximum(var - binom, 1e-6)
        kappa = rate * (1 - rate) / between - 1.0
    kappa = np.where(n_q >= 3, kappa, KAPPA_MIN)  # too few questions to tell: the widest
    kappa = np.clip(np.nan_to_num(kappa, nan=KAPPA_MIN), KAPPA_MIN, KAPPA_MAX)
    switch, gamma = fit_switch_and_gamma(arrays)
    return Calibration(rate, kappa, h, fitted_on=list(fitted_on), switch=switch, gamma=gamma)


def fit_switch_and_gamma(
    questions: Sequence[QuestionArrays], warmup: int = FIT_WARMUP
) -> tuple[dict | None, float | None]:
    """The paper's rules' switch model and γ, learned once: the model fitted on the first
    ``warmup`` traces of every question that ended on an answer (their dynamics, pooled), and
    :data:`POOLED_GAMMA`."""
    from .features import question_features, switch_labels

    X, y = [], []
    for arr in questions:
        warm = np.flatnonzero(arr.final_ids >= 0)[:warmup]  # traces that ended on an answer
        if not len(warm):
            continue
        X.append(dynamics(question_features(arr, warm)).reshape(-1, len(FEATURE_NAMES)))
        y.append(switch_labels(arr, warm).reshape(-1))
    if not X:
        return None, None
    Xa, ya = np.concatenate(X), np.concatenate(y)
    if ya.min() == ya.max():  # one class: nothing to learn a switch from
        return None, None
    return SwitchModel().fit(Xa, ya).fitted_params(), POOLED_GAMMA


def landing(
    ids: np.ndarray,
    eligible: np.ndarray,
    running: np.ndarray,
    stay: np.ndarray,
    n_answers: int,
) -> np.ndarray:
    """Dirichlet parameters of where a trace that leaves, or is not yet launched, ends, per row
    [R, A+1]: the row's traces that ended on each answer, those holding it now weighted by their
    chance to stay, :data:`PRIOR` per answer present and :data:`OTHER` on the last slot (an answer
    no trace holds yet)."""
    R = ids.shape[0]
    out = np.zeros((R, n_answers + 1))
    held = eligible & (ids >= 0) & ~running
    w = np.where(running, stay, 1.0)
    rows, cols = np.nonzero(held)
    np.add.at(out, (rows, ids[rows, cols]), w[rows, cols])
    present = np.zeros((R, n_answers + 1), dtype=bool)
    present[rows, ids[rows, cols]] = True
    out[:, :n_answers] += np.where(present[:, :n_answers], PRIOR, 0.0)
    out[:, -1] = OTHER
    return out
