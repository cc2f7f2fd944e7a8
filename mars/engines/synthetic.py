"""Synthetic reasoning-model backend: the embedded default, calibrated on real traces.

It stands in for an LLM on machines with no GPU and no model. For a question it produces reasoning
traces -- a token count, per-token confidences, a short text ending in ``\\boxed{...}`` -- and
answers probes ("what would the trace answer if stopped at token t?") through the very same
:class:`~mars.engines.base.Backend` / :class:`~mars.engines.base.TraceBatch` interface as the real
engines, so ``mars generate`` and live mode take one path through every backend.

Nothing is generated token by token. Each question gets a latent model, each trace a latent
*answer timeline* (a list of change points), and a trace "advancing" only moves its position
along that timeline. See ``docs/synthetic.md`` for the model, its parameters, the presets and the
calibration against real Qwen3-8B probe traces.

Latent model
------------
Per question (drawn from ``(seed, dataset, qid)``):

* difficulty: a stratified quantile ``u`` (a golden-ratio Weyl sequence over qids, so any 30
  consecutive questions span the whole difficulty distribution and dataset-level accuracy has
  little seed noise) through a mixture: a share ``trap_frac * (1 - skill)`` of *trap* questions
  (logit ``trap_logit + trap_sd * z``: the model reliably converges on a wrong answer) and regular
  ones (logit ``mu + difficulty_sd * z``, ``mu`` solved so that the mean P(correct) is ``skill``);
  ``p_correct`` is the sigmoid, ``hardness = 1 - p_correct``;
* the correct answer (the problem's ground truth), ``n_distractors`` popular wrong answers with
  Dirichlet weights, a share ``eta`` of one-off (idiosyncratic) wrong answers, and a pool of
  ``n_explore`` exploratory answers that traces try on the way;
* with probability ``min(1, attractor_base + attractor_rate * hardness)`` an early *attractor*:
  a wrong answer that a large share of traces hold first and abandon later (the consensus-stopping
  failure of the paper's Fig. 2); half the time (``attractor_distractor_prob``) it is the top
  distractor, so some traces also end on it;
* a median trace length that grows with hardness (its per-question noise is stratified too);
* a typical convergence point
  ``c_q = expit(conv_logit + conv_hard_slope * hardness + conv_q_sd * z)``
  as a fraction of the trace length (``z`` stratified too): easy questions are often solved within
  the first probe and then checked at length, hard ones are worked out late.

Per trace (drawn from ``SeedSequence([seed, qid, trace_idx, crc32(dataset)])`` only, so trace
``t`` is identical whatever the batch, shard or resume it is generated in):

* its final answer (correct / distractor / one-off; "no answer" with a hardness-scaled rate);
* its natural length (log-normal; wrong traces longer), cut at ``max_tokens`` -- a cut trace is
  unfinished and keeps a boxed answer only with probability ``cut_boxed_prob``;
* a convergence point ``C = f * length``: ``logit f = logit c_q + conv_trace_sd * z`` around the
  question's typical fraction ``c_q`` (traces of one question converge at similar token counts, as
  real ones do); after ``C`` the trace holds its final answer; before it, an attractor phase (if
  any) then sticky exploratory segments of mean ``seg_tokens`` tokens, each holding the trace's own
  final answer (more likely the closer to ``C``, shape ``explore_own_pow``), a pool answer or a
  one-off;
* probes read the timeline; a probe is unparseable (``None``) with probability ``err_explore``
  before ``C``, ``err_converged`` after, plus an early bump ``err_early * (t/T) exp(1 - t/T)``
  peaking at ``T = err_early_tokens``; with probability ``probe_noise`` it returns a pool answer
  instead (sampled probes are noisy). Probe
  randomness is a hash of (trace, position): probing twice, or on another grid, is consistent;
* per-token confidence: a block level (64 tokens) = ``conf_level`` + trace effect (higher for traces
  that converge early, ``conf_conv_corr``) + bonus for
  correct traces + penalty while exploring + AR(1) drift + Gaussian dips at every change of answer
  (centred ``conf_dip_lead`` tokens before it), minus an exponential per-token deficit; clipped,
  float16. Confidences are generated lazily per
  trace (only when a probe or the result needs them).

Probe cost fields are synthetic: ``prompt_tokens = question_tokens + position + 24`` (the forcing
suffix), ``cached_tokens = question_tokens + position`` (prefix cache), ``generated_tokens`` a few
tokens for the answer (50, the probe limit, when nothing parsed).
"""

from __future__ import annotations

import copy
import math
import os
import re
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy import optimize, signal, special

from ..errors import MarsError
from ..store.problems import Problem
from ..store.userfiles import read_json_object
from .base import Backend, GeneratorInfo, ProbeResult, StoredTrace, TraceBatch, TraceResult

PRESET_DIR = Path(__file__).resolve().parent.parent / "data" / "presets"
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

_BLOCK = 64  # tokens per confidence block
_MAXSEG = 40  # exploratory segments per trace
_NU = 16 + 2 * _MAXSEG  # uniforms per trace
_UNIQ = 1 << 44  # answer codes >= _UNIQ are one-off answers (code - _UNIQ = salt)
_PROBE_SUFFIX_TOKENS = 24
_PROBE_MAX_NEW = 50
_GOLDEN = 0.6180339887498949
_SILVER = 0.41421356237309515
_PLASTIC = 0.7548776662466927  # 1 / the plastic number
_M64 = (1 << 64) - 1
_UNPARSED = ("Let me", "\\frac{", "I think the", "the answer is", "\\text{", "")


# ---------------------------------------------------------------------------------------------
# Presets


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


# ---------------------------------------------------------------------------------------------
# Answers


def _split64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    x = np.asarray(x, np.uint64) + np.uint64(0x9E3779B97F4A7C15)  # array ops wrap silently
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _unif(h: np.ndarray) -> np.ndarray:
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


_INT_RE = re.compile(r"-?\d+")
_NUM_RE = re.compile(r"\d+")


def wrong_answer(truth: str, salt: int) -> str:
    """A plausible wrong answer for ground truth ``truth``, deterministic in ``salt``.

    Integers (AIME style) give integers: a near miss, a small factor or digit slip, or another
    value of the same size (0..999 for AIME-sized answers). Other answers (LaTeX) get one of their
    numbers perturbed. Never returns ``truth`` itself.
    """
    truth = truth.strip()
    salt = int(salt)
    for attempt in range(16):
        h = _split64((salt * 0x2545F4914F6CDD1D + attempt) & _M64)
        mode, r = h % 10, h >> 8
        if _INT_RE.fullmatch(truth):
            g = int(truth)
            hi = 1000 if 0 <= g < 1000 else max(10, 10 ** len(str(abs(g))))
            if mode < 4:
                v = g + (1 + r % 12) * (1 if (r >> 5) & 1 else -1)
            elif mode < 6:
                v = [
                    g * 2,
                    g // 2,
                    g + 100,
                    g - 100,
                    g * 3,
                    g // 3,
                    g + 1000 // 10,
                    int(str(abs(g))[::-1] or 0),
                ][r % 8]
            else:
                v = r % hi
            if g >= 0:
                v = abs(v) % (hi if hi > 10 else 1000)
            cand = str(v)
        else:
            nums = list(_NUM_RE.finditer(truth))
            if nums:
                m = nums[r % len(nums)]
                n = int(m.group())
                v = [
                    n + 1,
                    max(0, n - 1),
                    n * 2,
                    n + 2 + (r >> 8) % 7,
                    (r >> 4) % (10 ** len(m.group()) or 10),
                ][mode % 5]
                cand = truth[: m.start()] + str(v) + truth[m.end() :]
            else:
                cand = f"{2 + r % 8}{truth}" if mode < 5 else f"{truth}+{1 + r % 9}"
        if cand != truth:
            return cand
    return truth + "+1"


# ---------------------------------------------------------------------------------------------
# Question latents


@dataclass
class QuestionLatent:
    qid: int
    dataset: str
    truth: str
    p_correct: float
    hardness: float
    len_median: float
    eta: float  # share of one-off answers among wrong ones
    p_none: float
    distractor_w: np.ndarray  # [K], descending
    explore_w: np.ndarray  # [E + (attractor in pool)]
    explore_codes: np.ndarray
    attractor: int  # answer code, -1 when none
    attractor_share: float
    conv_frac: float  # the question's typical convergence point as a fraction of the trace length
    vocab: dict  # code -> answer string (codes < _UNIQ)
    question_tokens: int


def dataset_key(dataset: str) -> int:
    return zlib.crc32(dataset.encode()) & 0x7FFFFFFF


def question_latent(problem: Problem, seed: int, prm: dict) -> QuestionLatent:
    """The question-level latent model, deterministic in (seed, dataset, qid)."""
    dkey = dataset_key(problem.dataset)
    # stratified difficulty: golden-ratio Weyl sequence over qids with a per-(seed, dataset) offset
    u0, u1, u2 = np.random.default_rng(np.random.SeedSequence([seed, dkey], spawn_key=(2,))).random(
        3
    )
    u = min(max((u0 + problem.qid * _GOLDEN) % 1.0, 1e-6), 1 - 1e-6)
    # the per-question length and convergence noise are stratified the same way
    # (other irrational steps)
    z_len = float(special.ndtri(min(max((u1 + problem.qid * _SILVER) % 1.0, 1e-6), 1 - 1e-6)))
    z_conv = float(special.ndtri(min(max((u2 + problem.qid * _PLASTIC) % 1.0, 1e-6), 1 - 1e-6)))
    p_correct = float(special.expit(question_logit(u, prm)))
    hard = 1.0 - p_correct
    rng = np.random.default_rng(np.random.SeedSequence([seed, dkey, problem.qid], spawn_key=(1,)))
    len_median = prm["len_median"] * math.exp(
        prm["len_hard_slope"] * hard ** prm["len_hard_pow"] + prm["len_question_sd"] * z_len
    )
    ur = min(max(prm["unique_rate"], 1e-3), 0.999)
    eta = float(rng.beta(4 * ur, 4 * (1 - ur)))
    K = max(1, prm["n_distractors"])
    dw = np.sort(rng.dirichlet(np.full(K, prm["distractor_alpha"])))[::-1]
    E = max(1, prm["n_explore"])
    ew = rng.dirichlet(np.full(E, prm["explore_alpha"]))
    # a question whose answer is not known gets a stand-in the model converges on
    truth = problem.answer.strip() if problem.answer is not None else str(problem.qid + 100)
    vocab = {0: truth}
    used = {truth}
    salt = int(rng.integers(1 << 40))
    for code in range(1, 1 + K + E + 1):
        s = wrong_answer(truth, salt)
        while s in used:
            salt += 1
            s = wrong_answer(truth, salt)
        used.add(s)
        vocab[code] = s
        salt += 1
    att_u, att_kind, share_u = rng.random(3)
    attractor = -1
    if att_u < min(1.0, prm["attractor_base"] + prm["attractor_rate"] * hard):
        attractor = 1 if att_kind < prm["attractor_distractor_prob"] else 1 + K + E
    share = (
        prm["attractor_share_lo"]
        + (prm["attractor_share_hi"] - prm["attractor_share_lo"]) * share_u
    )
    explore_codes = np.arange(1 + K, 1 + K + E)
    return QuestionLatent(
        qid=problem.qid,
        dataset=problem.dataset,
        truth=truth,
        p_correct=p_correct,
        hardness=hard,
        len_median=len_median,
        eta=eta,
        p_none=min(1.0, prm["none_rate"] * hard),
        distractor_w=dw,
        explore_w=ew,
        explore_codes=explore_codes,
        attractor=attractor,
        attractor_share=share,
        conv_frac=float(
            special.expit(
                prm["conv_logit"] + prm["conv_hard_slope"] * hard + prm["conv_q_sd"] * z_conv
            )
        ),
        vocab=vocab,
        question_tokens=max(16, len(problem.question) // 3),
    )


# ---------------------------------------------------------------------------------------------
# Batch


_U_CACHE: OrderedDict[tuple, np.ndarray] = OrderedDict()
_U_CACHE_BYTES = 64 << 20


def _uniforms(seed: int, qid: int, first: int, n: int, dkey: int) -> np.ndarray:
    """The per-trace uniforms that fix every latent quantity of traces first..first+n-1: row j
    comes from ``SeedSequence([seed, qid, first + j, dkey])`` alone (read-only; the most recent
    ones are cached, up to 64 MB, for repeated starts such as calibration searches)."""
    key = (seed, qid, first, n, dkey)
    U = _U_CACHE.get(key)
    if U is not None:
        _U_CACHE.move_to_end(key)
        return U
    U = np.empty((n, _NU))
    for j in range(n):
        U[j] = np.random.default_rng(np.random.SeedSequence([seed, qid, first + j, dkey])).random(
            _NU
        )
    U.flags.writeable = False
    _U_CACHE[key] = U
    total = sum(u.nbytes for u in _U_CACHE.values())
    while total > _U_CACHE_BYTES and len(_U_CACHE) > 1:
        total -= _U_CACHE.popitem(last=False)[1].nbytes
    return U


class SyntheticTraceBatch(TraceBatch):
    """Traces of one question; every latent quantity is fixed at start, advancing moves a cursor."""

    def __init__(
        self, backend: SyntheticBackend, problem: Problem, n: int, seed: int, first_trace: int
    ):
        self.n = int(n)
        self.problem = problem
        self.seed = int(seed)
        self.first_trace = int(first_trace)
        prm = self.params = backend.params_for(problem.dataset)
        self.with_confs = backend.with_confs
        self.q = q = question_latent(problem, seed, prm)
        self._dkey = dataset_key(problem.dataset)
        n = self.n
        self._U = U = _uniforms(self.seed, problem.qid, self.first_trace, n, self._dkey)

        # final answers
        u0 = U[:, 0]
        correct = u0 < q.p_correct
        uw = np.clip((u0 - q.p_correct) / max(1e-12, 1 - q.p_correct), 0, 1 - 1e-12)
        unique = ~correct & (uw < q.eta)
        ud = np.clip((uw - q.eta) / max(1e-12, 1 - q.eta), 0, 1 - 1e-12)
        dcum = np.cumsum(q.distractor_w)
        dist_idx = np.minimum(np.searchsorted(dcum / dcum[-1], ud, side="right"), len(dcum) - 1)
        final = np.where(correct, 0, 1 + dist_idx).astype(np.int64)
        salts = (U[:, 2] * (1 << 40)).astype(np.int64)
        final = np.where(unique, _UNIQ + salts, final)
        self._final = final
        self._correct = correct
        self._none = U[:, 7] < q.p_none

        # lengths
        loglen = (
            math.log(q.len_median)
            + prm["len_wrong_shift"] * (~correct)
            + prm["len_trace_sd"] * special.ndtri(np.clip(U[:, 3], 1e-12, 1 - 1e-12))
        )
        natural = np.maximum(np.rint(np.exp(loglen)), prm["min_tokens"]).astype(np.int64)
        self.max_tokens = cap = int(prm["max_tokens"])
        self._natural = natural
        self._Lfin = np.minimum(natural, cap)
        self._cut = natural > cap
        # convergence point: the question's typical fraction, logit-normal spread over its traces
        z_conv = special.ndtri(np.clip(U[:, 4], 1e-12, 1 - 1e-12))
        conv = special.expit(special.logit(q.conv_frac) + prm["conv_trace_sd"] * z_conv) * natural

        # answer timeline: optional attractor segment, exploratory segments, then the final answer
        attracted = (q.attractor >= 0) & (U[:, 5] < q.attractor_share)
        release = (
            prm["attractor_release_lo"]
            + (prm["attractor_release_hi"] - prm["attractor_release_lo"]) * U[:, 6]
        )
        guess = prm["attractor_release_tokens"]
        if guess > 0:  # a guess made while reading, held for a number of tokens (a shorter
            # trace leaves it as far into its length) and left before the trace converges
            rel = np.minimum(guess, natural) * release
            conv = np.where(attracted, np.maximum(conv, rel), conv)
        else:
            rel = conv * release
        self._conv = conv
        offset = np.where(attracted, rel, 0.0)
        dur = -np.log1p(-U[:, 16 : 16 + _MAXSEG]) * prm["seg_tokens"]
        starts = offset[:, None] + np.concatenate(
            [np.zeros((n, 1)), np.cumsum(dur[:, :-1], axis=1)], axis=1
        )
        ua = U[:, 16 + _MAXSEG : 16 + 2 * _MAXSEG]
        pu = prm["explore_unique"]
        kp = max(prm["explore_own_pow"], 1e-3)
        rel_t = np.clip(starts / np.maximum(conv, 1.0)[:, None], 0.0, 1.0)
        pf = np.minimum((kp + 1) * prm["explore_own_final"] * rel_t**kp, 1 - pu)
        ecum = np.cumsum(q.explore_w)
        ue = np.clip((ua - pf - pu) / np.maximum(1e-12, 1 - pf - pu), 0, 1 - 1e-12)
        pool = q.explore_codes[
            np.minimum(np.searchsorted(ecum / ecum[-1], ue, side="right"), len(ecum) - 1)
        ]
        seg_salt = (ua * (1 << 60)).astype(np.int64) & ((1 << 40) - 1)
        seg_code = np.where(ua < pf, final[:, None], np.where(ua < pf + pu, _UNIQ + seg_salt, pool))
        all_starts = np.concatenate([np.zeros((n, 1)), starts, conv[:, None]], axis=1)
        att_code = q.attractor if q.attractor >= 0 else 0
        all_codes = np.concatenate([np.full((n, 1), att_code), seg_code, final[:, None]], axis=1)
        valid = np.concatenate(
            [
                attracted[:, None] & (rel[:, None] > 0),
                starts < conv[:, None],
                np.ones((n, 1), bool),
            ],
            axis=1,
        )
        # a non-attracted trace whose exploration starts at 0 has an empty attractor slot (invalid)
        st = np.floor(all_starts[valid]).astype(np.int64)
        tr = np.broadcast_to(np.arange(n)[:, None], valid.shape)[valid]
        codes = all_codes[valid]
        # keep, within a trace, the last segment starting at a given token, and sort
        key = tr.astype(np.int64) * (1 << 40) + st
        order = np.argsort(key, kind="stable")
        key, codes, tr, st = key[order], codes[order], tr[order], st[order]
        keep = np.append(key[1:] != key[:-1], True)
        self._seg_key, self._seg_code, self._seg_trace, self._seg_start = (
            key[keep],
            codes[keep],
            tr[keep],
            st[keep],
        )
        self._seg_off = np.searchsorted(self._seg_trace, np.arange(n + 1))

        self._hkey = (U[:, 10] * (1 << 53)).astype(np.uint64)
        self._pos = np.zeros(n, np.int64)
        self._stopped = np.zeros(n, bool)
        self._confs: list[np.ndarray | None] = [None] * n
        self._block_cs: list[np.ndarray | None] = [None] * n
        self._strings = dict(q.vocab)

    # -- interface -----------------------------------------------------------------------------

    @property
    def lengths(self) -> np.ndarray:
        return self._pos.copy()

    @property
    def ended(self) -> np.ndarray:
        return (self._pos >= self._Lfin) | self._stopped

    def advance(self, target: int) -> None:
        run = ~self.ended
        self._pos[run] = np.maximum(self._pos[run], np.minimum(int(target), self._Lfin[run]))

    def stop(self, idx) -> None:
        self._stopped[np.asarray(idx, dtype=np.int64)] = True

    def probe(self, idx) -> list[ProbeResult]:
        idx = np.asarray(idx, dtype=np.int64)
        if idx.size == 0:
            return []
        pos = self._pos[idx]
        codes, none = self.probe_codes(idx, pos)
        qtok = self.q.question_tokens
        out = []
        for j, p, c, nn in zip(idx.tolist(), pos.tolist(), codes.tolist(), none.tolist()):
            conf = self._window_conf(j, p) if self.with_confs else None
            if nn:
                frag = _UNPARSED[int(self._hkey[j] ^ np.uint64(p)) % len(_UNPARSED)]
                out.append(
                    ProbeResult(
                        None,
                        "\\boxed{" + frag,
                        conf,
                        qtok + p + _PROBE_SUFFIX_TOKENS,
                        qtok + p,
                        _PROBE_MAX_NEW,
                    )
                )
            else:
                a = self.answer_string(c)
                out.append(
                    ProbeResult(
                        a,
                        "\\boxed{" + a + "}",
                        conf,
                        qtok + p + _PROBE_SUFFIX_TOKENS,
                        qtok + p,
                        min(_PROBE_MAX_NEW, 2 + (len(a) + 2) // 3),
                    )
                )
        return out

    def result(self, j: int) -> TraceResult:
        j = int(j)
        length = int(self._pos[j])
        complete = length >= self._Lfin[j]
        finished = bool(complete and not self._cut[j])
        code = (
            int(self.final_codes()[j]) if complete else -1
        )  # stopped early (live mode): no answer
        final = self.answer_string(code) if code >= 0 else None
        confs = self._trace_confs(j)[:length] if self.with_confs else None
        return TraceResult(
            length=length,
            final_answer=final,
            finished=finished,
            confs=confs,
            text=self._text(j, length, final),
        )

    # -- latent access (calibration, tests) ----------------------------------------------------

    def final_codes(self) -> np.ndarray:
        """Final answer code of every trace run to its end (-1: no answer). A finished trace
        answers its latent final answer unless it is a no-answer trace; a trace cut at the cap
        keeps the answer it held there with probability ``cut_boxed_prob``."""
        if getattr(self, "_final_codes", None) is None:
            fc = np.where(self._none, -1, self._final)
            idx = np.flatnonzero(self._cut)
            if idx.size:
                held = self.timeline_codes(idx, self._Lfin[idx] - 1)
                fc[idx] = np.where(self._U[idx, 8] < self.params["cut_boxed_prob"], held, -1)
            self._final_codes = fc
        return self._final_codes

    def timeline_codes(self, idx: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Answer code held by traces ``idx`` at token ``pos`` (no probe noise)."""
        q = idx.astype(np.int64) * (1 << 40) + np.asarray(pos, np.int64)
        k = np.searchsorted(self._seg_key, q, side="right") - 1
        return self._seg_code[k]

    def probe_codes(self, idx: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Probe answer codes and unparseable flags of traces ``idx`` at ``pos`` (vectorised)."""
        prm = self.params
        codes = self.timeline_codes(idx, pos)
        h1 = _mix(self._hkey[idx] ^ _mix(np.asarray(pos, np.uint64)))
        h2 = _mix(h1)
        h3 = _mix(h2)
        p = np.asarray(pos, np.float64)
        p_err = np.where(p < self._conv[idx], prm["err_explore"], prm["err_converged"]) + prm[
            "err_early"
        ] * (p / max(1.0, prm["err_early_tokens"])) * np.exp(
            1 - p / max(1.0, prm["err_early_tokens"])
        )
        none = _unif(h1) < p_err
        noisy = _unif(h2) < prm["probe_noise"]
        if noisy.any():
            ecum = np.cumsum(self.q.explore_w)
            pick = np.minimum(
                np.searchsorted(ecum / ecum[-1], _unif(h3[noisy]), side="right"), len(ecum) - 1
            )
            codes = codes.copy()
            codes[noisy] = self.q.explore_codes[pick]
        return codes, none

    def answer_string(self, code: int) -> str:
        code = int(code)
        s = self._strings.get(code)
        if s is None:
            s = self._strings[code] = wrong_answer(self.q.truth, code - _UNIQ)
        return s

    @property
    def latent(self) -> dict:
        """Latent per-trace quantities (for calibration and tests; not part of the interface)."""
        return {
            "natural_length": self._natural,
            "length": self._Lfin,
            "cut": self._cut,
            "convergence": self._conv,
            "final_code": self._final,
            "correct": self._correct,
            "no_answer": self._none,
            "p_correct": self.q.p_correct,
            "attractor": self.q.attractor,
        }

    # -- internals -------------------------------------------------------------------------------

    def _changes(self, j: int) -> np.ndarray:
        """Token positions where trace j changes its answer (excluding token 0)."""
        a, b = self._seg_off[j], self._seg_off[j + 1]
        st, cd = self._seg_start[a:b], self._seg_code[a:b]
        if st.size < 2:
            return st[:0]
        return st[1:][cd[1:] != cd[:-1]]

    def _trace_confs(self, j: int) -> np.ndarray:
        c = self._confs[j]
        if c is not None:
            return c
        prm = self.params
        L = int(self._Lfin[j])
        rng = np.random.default_rng(
            np.random.SeedSequence(
                [self.seed, self.problem.qid, self.first_trace + j, self._dkey], spawn_key=(1,)
            )
        )
        nb = -(-L // _BLOCK)
        x = (np.arange(nb) + 0.5) * _BLOCK
        rho = prm["conf_conv_corr"]
        z_t = special.ndtri(min(max(self._U[j, 9], 1e-9), 1 - 1e-9))
        if rho:
            z_t = math.sqrt(1 - rho * rho) * z_t - rho * special.ndtri(
                min(max(self._U[j, 4], 1e-12), 1 - 1e-12)
            )
        level = (
            prm["conf_level"]
            + prm["conf_trace_sd"] * z_t
            + prm["conf_correct_bonus"] * float(self._correct[j])
            + prm["conf_hard_slope"] * self.q.hardness
        )
        lv = np.full(nb, level)
        lv += prm["conf_explore_penalty"] * (x < self._conv[j])
        phi, sd = prm["conf_ar_phi"], prm["conf_ar_sd"]
        e = rng.standard_normal(nb)
        e[1:] *= sd * math.sqrt(max(0.0, 1 - phi * phi))
        e[0] *= sd
        lv += signal.lfilter([1.0], [1.0, -phi], e)
        ch = self._changes(j)
        if ch.size:
            depth = prm["conf_dip_depth"] * (0.5 + rng.random(ch.size))
            w = prm["conf_dip_tokens"]
            ch = ch - prm["conf_dip_lead"]
            lo = np.searchsorted(x, ch - 4 * w)
            hi = np.searchsorted(x, ch + 4 * w)
            for c0, d, a, b in zip(ch.tolist(), depth.tolist(), lo.tolist(), hi.tolist()):
                lv[a:b] -= d * np.exp(-0.5 * ((x[a:b] - c0) / w) ** 2)
        tok = rng.standard_exponential(nb * _BLOCK, dtype=np.float32)
        tok *= np.float32(-prm["conf_token_scale"])
        blocks = tok.reshape(nb, _BLOCK)
        blocks += lv.astype(np.float32)[:, None]
        np.clip(tok, prm["conf_floor"], prm["conf_ceil"], out=tok)
        c = self._confs[j] = tok[:L].astype(np.float16)
        # block prefix sums of the stored (float16) values: window means for probes
        bs = np.zeros(nb + 1)
        np.cumsum(
            c[: (L // _BLOCK) * _BLOCK].reshape(-1, _BLOCK).sum(axis=1, dtype=np.float64),
            out=bs[1 : L // _BLOCK + 1],
        )
        self._block_cs[j] = bs
        return c

    def _window_conf(self, j: int, p: int, w: int = 2048) -> float | None:
        """Mean confidence of tokens [p - w, p) of trace j (the probe's ``conf``)."""
        c = self._trace_confs(j)
        a = max(0, p - w)
        if p <= a:
            return None
        if a % _BLOCK == 0 and p % _BLOCK == 0 and p <= (len(c) // _BLOCK) * _BLOCK:
            bs = self._block_cs[j]
            assert bs is not None  # set by _trace_confs
            return float((bs[p // _BLOCK] - bs[a // _BLOCK]) / (p - a))
        return float(c[a:p].astype(np.float64).mean())

    def _text(self, j: int, length: int, final: str | None) -> str:
        a, b = self._seg_off[j], self._seg_off[j + 1]
        st, cd = self._seg_start[a:b], self._seg_code[a:b]
        seen = [self.answer_string(int(c)) for s, c in zip(st.tolist(), cd.tolist()) if s < length]
        path = [s for k, s in enumerate(seen) if k == 0 or s != seen[k - 1]]
        if len(path) > 8:
            path = [*path[:3], "...", *path[-4:]]
        body = (
            f"<think>[synthetic trace {self.first_trace + j} of question {self.problem.qid}: "
            f"{length} tokens; answers considered: {' -> '.join(path) or '-'}]</think>\n"
        )
        return body + (
            f"The answer is \\boxed{{{final}}}." if final is not None else "[no final answer]"
        )

    def close(self) -> None:
        self._confs = [None] * self.n
        self._block_cs = [None] * self.n


# ---------------------------------------------------------------------------------------------
# Backend


class SyntheticBackend(Backend):
    """A stand-in reasoning model, parameterised by a preset (see :data:`PARAMS`).

    ``skill`` (mean per-trace correctness over questions) and ``max_tokens`` override the preset
    for every dataset; ``params`` overrides any parameter; ``with_confs=False`` skips per-token
    confidences (fast latent-only runs, probe ``conf`` is then None).
    """

    name = "synthetic"

    def __init__(
        self,
        preset: str | dict = DEFAULT_PRESET,
        skill: float | None = None,
        max_tokens: int | None = None,
        params: dict | None = None,
        with_confs: bool = True,
    ):
        self.preset = load_preset(preset)
        self.preset_name = str(self.preset.get("name", "custom"))
        self.model = str(self.preset.get("model") or f"synthetic:{self.preset_name}")
        self.skill = skill
        self.overrides = dict(params or {})
        bad = set(self.overrides) - set(PARAMS)
        if bad:
            raise MarsError(f"unknown synthetic parameters {sorted(bad)}")
        if skill is not None and not 0 < skill < 1:
            raise MarsError(f"skill must lie in (0, 1), got {skill}")
        self._max_tokens = max_tokens
        self.with_confs = with_confs
        self.max_tokens = int(self.params_for("")["max_tokens"])

    def params_for(self, dataset: str) -> dict:
        return resolve_params(
            self.preset,
            dataset,
            **{**self.overrides, "skill": self.skill, "max_tokens": self._max_tokens},
        )

    def start(
        self, problem: Problem, n_traces: int, seed: int, first_trace: int = 0
    ) -> SyntheticTraceBatch:
        self.check_start(n_traces, seed, first_trace)
        return SyntheticTraceBatch(self, problem, n_traces, seed, first_trace)

    #: the synthetic engine rebuilds a trace from (preset, seed, question, trace): no token ids
    reprobe_needs_token_ids = False

    def reprobe(
        self,
        problem: Problem,
        traces: Sequence[StoredTrace],
        positions: Sequence[np.ndarray],
        generator: GeneratorInfo,
    ) -> list[list[ProbeResult]]:
        """Probe stored synthetic traces again at any positions.

        A synthetic trace is a deterministic function of (preset, seed, question, trace index),
        all recorded in its pool, so its latent answer path is rebuilt exactly and probed by the
        very code inline probing runs: at the generation's spacing the probes are the ones
        generation wrote. A stored trace longer than the rebuilt one is refused (another preset
        or seed than the pool's).
        """
        if not traces:
            return []
        seed = int(generator.manifest.get("seed", 0))
        idx = np.array([t.trace_idx for t in traces], np.int64)
        lo = int(idx.min())
        batch = self.start(problem, int(idx.max()) + 1 - lo, seed, first_trace=lo)
        rows = idx - lo
        lengths = np.array([t.length for t in traces], np.int64)
        finals = batch.final_codes()[rows]
        rebuilt = [batch.answer_string(c) if c >= 0 else None for c in finals.tolist()]
        # a trace with an answer ran to its end: its length and answer must be the rebuilt
        # ones; a trace without one may have been stopped early (live runs), never later
        bad = np.flatnonzero(
            (lengths > batch._Lfin[rows])
            | np.array(
                [
                    t.final_answer is not None
                    and (t.length != batch._Lfin[r] or t.final_answer != a)
                    for t, r, a in zip(traces, rows.tolist(), rebuilt)
                ],
                dtype=bool,
            )
        )
        if bad.size:
            i = int(bad[0])
            raise MarsError(
                f"question {problem.qid}, trace {int(idx[i])}: the stored trace ({int(lengths[i])} "
                f"tokens) is not what preset {self.preset_name} with seed {seed} gives "
                f"({int(batch._Lfin[rows[i]])} tokens): probe with the generator's preset and seed"
            )
        pairs = [(int(p), i) for i, ps in enumerate(positions) for p in np.asarray(ps).tolist()]
        pairs.sort()
        out: list[list[ProbeResult]] = [[] for _ in traces]
        k = 0
        while k < len(pairs):
            p = pairs[k][0]
            members = []
            while k < len(pairs) and pairs[k][0] == p:
                members.append(pairs[k][1])
                k += 1
            sel = rows[members]
            batch._pos[sel] = p
            for i, r in zip(members, batch.probe(sel)):
                out[i].append(r)
        return out

    def describe(self) -> dict:
        """Provenance for a pool manifest."""
        return {
            "backend": self.name,
            "preset": self.preset_name,
            "model": self.model,
            "imitates": self.preset.get("imitates", ""),
            "skill_override": self.skill,
            "max_tokens": self.max_tokens,
            "param_overrides": self.overrides,
            "with_confs": self.with_confs,
        }
