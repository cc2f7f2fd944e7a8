"""The latent model of the synthetic engine: per question and per trace, drawn from the seed
alone, so trace ``t`` is the same whatever the batch, shard or resume it is generated in.

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

import math
import re
import zlib
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from scipy import special

from ...store.problems import Problem
from .presets import question_logit

MAXSEG = 40  # exploratory segments per trace
NU = 16 + 2 * MAXSEG  # uniforms per trace
UNIQ = 1 << 44  # answer codes >= UNIQ are one-off answers (code - UNIQ = salt)
_GOLDEN = 0.6180339887498949
_SILVER = 0.41421356237309515
_PLASTIC = 0.7548776662466927  # 1 / the plastic number
_M64 = (1 << 64) - 1


def _split64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    x = np.asarray(x, np.uint64) + np.uint64(0x9E3779B97F4A7C15)  # array ops wrap silently
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def unif(h: np.ndarray) -> np.ndarray:
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
    vocab: dict  # code -> answer string (codes < UNIQ)
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


def uniforms(seed: int, qid: int, first: int, n: int, dkey: int) -> np.ndarray:
    """The per-trace uniforms that fix every latent quantity of traces first..first+n-1: row j
    comes from ``SeedSequence([seed, qid, first + j, dkey])`` alone (read-only; the most recent
    ones are cached, up to 64 MB, for repeated starts such as calibration searches)."""
    key = (seed, qid, first, n, dkey)
    U = _U_CACHE.get(key)
    if U is not None:
        _U_CACHE.move_to_end(key)
        return U
    U = np.empty((n, NU))
    for j in range(n):
        U[j] = np.random.default_rng(np.random.SeedSequence([seed, qid, first + j, dkey])).random(
            NU
        )
    U.flags.writeable = False
    _U_CACHE[key] = U
    total = sum(u.nbytes for u in _U_CACHE.values())
    while total > _U_CACHE_BYTES and len(_U_CACHE) > 1:
        total -= _U_CACHE.popitem(last=False)[1].nbytes
    return U
