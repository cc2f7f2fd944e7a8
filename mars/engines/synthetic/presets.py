"""The synthetic engine's parameters (:data:`PARAMS`, declared once with their meaning) and
its presets: bundled JSON files calibrated on real traces, or a file of the user's own."""

from __future__ import annotations

import copy
import os
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy import optimize, special

from ...errors import MarsError
from ...store.userfiles import read_json_object

PRESET_DIR = Path(__file__).resolve().parents[2] / "data" / "presets"
DEFAULT_PRESET = "qwen3-8b"

#: Every parameter of the latent model, its default and its meaning. Presets override a subset;
#: a preset's ``datasets`` section overrides per dataset (matched by name prefix, e.g. "hmmt").
PARAMS: dict[str, tuple[float, str]] = {
    # answers and difficulty
    "skill": (0.75, "mean over questions of P(a trace's latent final answer is correct)"),
    "difficulty_sd": (1.5, "sd of the correctness logit of regular questions"),
    "trap_frac": (
        0.8,
        "trap questions (the model mostly converges on a wrong answer) make up "
        "trap_frac * (1 - skill) of the questions",
    ),
    "trap_logit": (-3.0, "mean correctness logit of trap questions"),
    "trap_sd": (1.0, "sd of the correctness logit of trap questions"),
    "none_rate": (0.08, "P(a finished trace has no parseable final answer), times hardness"),
    "unique_rate": (0.25, "mean share of one-off answers among a question's wrong final answers"),
    "n_distractors": (4, "popular wrong answers per question"),
    "distractor_alpha": (
        0.6,
        "Dirichlet concentration of distractor weights (small: one dominates)",
    ),
    # length
    "len_median": (6000.0, "median length (tokens) of a correct trace on an easy question"),
    "len_hard_slope": (1.2, "log median length grows by len_hard_slope * hardness ** len_hard_pow"),
    "len_hard_pow": (
        0.5,
        "concavity of that growth (< 1: lengths rise fast from easy to middling)",
    ),
    "len_question_sd": (0.25, "per-question log-sd of the median length"),
    "len_trace_sd": (0.3, "within-question log-sd of trace length"),
    "len_wrong_shift": (0.5, "log length ratio of wrong over correct traces"),
    "min_tokens": (1000, "shortest trace"),
    "max_tokens": (41472, "token cap; longer traces are cut (unfinished)"),
    "cut_boxed_prob": (
        0.9,
        "P(a cut trace still has a boxed answer: the answer it held at the cap)",
    ),
    # dynamics
    "conv_logit": (
        0.5,
        "mean logit of a question's convergence point as a fraction of the natural length",
    ),
    "conv_hard_slope": (1.0, "its change per unit hardness (hard questions are worked out later)"),
    "conv_q_sd": (
        1.2,
        "sd over questions of that logit (some questions are solved at once, then checked)",
    ),
    "conv_trace_sd": (
        0.6,
        "sd over a question's traces of the logit of their convergence fraction",
    ),
    "seg_tokens": (1500.0, "mean tokens an exploratory answer is held (sticky exploration)"),
    "explore_own_final": (
        0.25,
        "mean P(an exploratory segment holds the trace's final answer) before the convergence "
        "point; grows from 0 at token 0 as (t / C) ** explore_own_pow",
    ),
    "explore_own_pow": (
        1.0,
        "shape of that growth (1: linear, to twice the mean at C; larger: the final answer turns "
        "up only shortly before C)",
    ),
    "explore_unique": (0.15, "P(an exploratory segment holds a one-off answer)"),
    "n_explore": (5, "exploratory answers per question"),
    "explore_alpha": (0.8, "Dirichlet concentration of the exploratory answer weights"),
    "attractor_base": (
        0.2,
        "P(question has an early wrong attractor) = min(1, base + rate * hardness)",
    ),
    "attractor_rate": (
        1.5,
        "P(question has an early wrong attractor) = min(1, base + rate * hardness)",
    ),
    "attractor_share_lo": (0.5, "share of traces starting on the attractor ~ U(lo, hi)"),
    "attractor_share_hi": (0.95, "share of traces starting on the attractor ~ U(lo, hi)"),
    "attractor_release_lo": (0.3, "attractor released at U(lo, hi) x convergence point"),
    "attractor_release_hi": (1.0, "attractor released at U(lo, hi) x convergence point"),
    "attractor_release_tokens": (
        0.0,
        "0: as above; > 0: the attractor is a guess made while reading the problem, released at "
        "U(lo, hi) x this many tokens (x the trace's length if shorter) whatever its convergence "
        "point, which comes after the release",
    ),
    "attractor_distractor_prob": (
        0.5,
        "P(the attractor is the top distractor, not an exploration-only answer)",
    ),
    # probes
    "err_explore": (0.07, "P(unparseable probe) before the convergence point"),
    "err_converged": (0.015, "P(unparseable probe) after the convergence point"),
    "err_early": (
        0.05,
        "extra P(unparseable probe) early in a trace: err_early * (t/T) exp(1 - t/T) ...",
    ),
    "err_early_tokens": (
        2000.0,
        "... peaking at T tokens (rises from 0: the first tokens restate the problem)",
    ),
    "probe_noise": (0.03, "P(a probe returns a pool answer instead of the current one)"),
    # confidence (DeepConf token confidence: -mean of top-20 logprobs, larger = more peaked)
    "conf_level": (17.0, "block confidence level (the top of the token distribution)"),
    "conf_token_scale": (3.5, "scale of the exponential per-token deficit"),
    "conf_trace_sd": (0.6, "per-trace sd of the level"),
    "conf_conv_corr": (
        0.0,
        "correlation of the per-trace level with how early the trace converges (fluent traces find "
        "their answer sooner)",
    ),
    "conf_correct_bonus": (0.3, "level bonus of traces whose final answer is correct"),
    "conf_hard_slope": (-1.0, "level change per unit hardness"),
    "conf_explore_penalty": (-0.8, "level change before the convergence point"),
    "conf_ar_phi": (0.97, "AR(1) coefficient of the level drift, per 64-token block"),
    "conf_ar_sd": (0.5, "stationary sd of the level drift"),
    "conf_dip_depth": (2.5, "mean depth of the dip at a change of answer"),
    "conf_dip_tokens": (300.0, "width (sd, tokens) of the dip"),
    "conf_dip_lead": (
        0.0,
        "tokens by which the dip's centre precedes the change of answer (doubt comes before the "
        "revision)",
    ),
    "conf_floor": (0.1, "smallest token confidence"),
    "conf_ceil": (25.0, "largest token confidence"),
}
_INT_PARAMS = {"n_distractors", "n_explore", "min_tokens", "max_tokens"}


def list_presets() -> list[str]:
    """Names of the bundled presets."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.json"))


def load_preset(preset: str | dict | Path) -> dict:
    """A preset as a dict, with its ``base`` chain merged in.

    ``preset`` is a bundled name (``qwen3-8b``), a path to a JSON file, or a dict of the same
    shape: ``{"name", "model", "imitates", "description", "base", "params": {...},
    "datasets": {prefix: {...}}}``.
    """
    if isinstance(preset, dict):
        p = copy.deepcopy(preset)
    else:
        path = Path(preset)
        if not (path.suffix == ".json" and os.path.lexists(path)):
            path = PRESET_DIR / f"{preset}.json"
        if not os.path.lexists(path):
            raise MarsError(
                f"unknown synthetic preset {preset!r} (bundled: {', '.join(list_presets())})"
            )
        p = read_json_object(path)
        p.setdefault("name", path.stem)
    base = p.pop("base", None)
    if base:
        b = load_preset(base)
        params = {**b.get("params", {}), **p.get("params", {})}
        datasets = copy.deepcopy(b.get("datasets", {}))
        for k, v in p.get("datasets", {}).items():
            datasets[k] = {**datasets.get(k, {}), **v}
        b.pop("calibration", None)
        p = {**b, **p, "params": params, "datasets": datasets}
    p.setdefault("params", {})
    p.setdefault("datasets", {})
    unknown = set(p["params"]) | {k for d in p["datasets"].values() for k in d}
    unknown -= set(PARAMS)
    if any("max_tokens" in d for d in p["datasets"].values()):
        raise MarsError(
            f"preset {p.get('name')!r}: max_tokens is a model property, not a dataset one"
        )
    if unknown:
        raise MarsError(f"preset {p.get('name')!r}: unknown parameters {sorted(unknown)}")
    return p


def resolve_params(preset: dict, dataset: str = "", **overrides) -> dict:
    """Defaults <- preset params <- preset.datasets[longest matching prefix] <- overrides
    (not None)."""
    out = {k: v for k, (v, _) in PARAMS.items()}
    out.update(preset.get("params", {}))
    keys = [k for k in preset.get("datasets", {}) if dataset == k or dataset.startswith(k)]
    if keys:
        out.update(preset["datasets"][max(keys, key=len)])
    out.update({k: v for k, v in overrides.items() if v is not None})
    for k in _INT_PARAMS:
        out[k] = int(out[k])
    return out


@lru_cache(maxsize=256)
def _mu_for_skill(
    skill: float, sd: float, trap_rate: float = 0.0, trap_logit: float = -3.0, trap_sd: float = 1.0
) -> float:
    """Logit location of the regular questions so that the mean P(correct) over all questions,
    traps included, is ``skill`` (Gauss-Hermite expectations; clipped when out of reach)."""
    skill = min(max(float(skill), 1e-4), 1 - 1e-4)
    x, w = np.polynomial.hermite_e.hermegauss(64)
    w = w / w.sum()
    trap_mean = float(np.dot(w, special.expit(trap_logit + trap_sd * x)))

    def f(mu):
        return (
            trap_rate * trap_mean
            + (1 - trap_rate) * float(np.dot(w, special.expit(mu + sd * x)))
            - skill
        )

    lo, hi = -30.0, 30.0
    if f(lo) >= 0:
        return lo
    if f(hi) <= 0:
        return hi
    return float(optimize.brentq(f, lo, hi))


def trap_share(prm: dict) -> float:
    """Share of trap questions: ``trap_frac * (1 - skill)`` (so SC accuracy follows skill)."""
    return min(0.9, max(0.0, prm["trap_frac"] * (1 - prm["skill"])))


def question_logit(u: float, prm: dict) -> float:
    """Correctness logit of a question at difficulty quantile ``u`` (small u = hard).

    A mixture: with probability :func:`trap_share` a *trap* question (the model converges on a wrong
    answer: logit ``trap_logit + trap_sd * z``), else a regular one
    (``mu(skill) + difficulty_sd * z``), laid out as one quantile function so stratified ``u`` spans
    both components.
    """
    t = trap_share(prm)
    if u < t:
        return prm["trap_logit"] + prm["trap_sd"] * float(
            special.ndtri(min(max(u / t, 1e-9), 1 - 1e-9))
        )
    mu = _mu_for_skill(prm["skill"], prm["difficulty_sd"], t, prm["trap_logit"], prm["trap_sd"])
    return mu + prm["difficulty_sd"] * float(
        special.ndtri(min(max((u - t) / (1 - t), 1e-9), 1 - 1e-9))
    )
