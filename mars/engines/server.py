"""Server backend: generation and probes through a running inference server over HTTP.

``--backend server --base-url URL`` drives a server someone already runs: llama.cpp's
``llama-server``, vLLM or SGLang.  The traces are token ids on our side, as with the in-process
engines (:class:`~mars.engines.tokens.TokenTraceBatch`): every request is a **token-id prompt**, so
a continuation is exactly the trace so far and the server's prefix cache serves it.  A server
whose OpenAI-compatible ``/v1/completions`` takes **text prompts only** (llama-cpp-python's) gets
the prompt's text + the trace's text so far instead (:class:`TextTraceBatch`, below).

* **Connect** (the constructor, before any generation): ``GET /v1/models`` names the served
  models and, through ``owned_by``, the kind of server (``server=`` overrides); the model asked
  for must be served (none asked and one served: that one).  The server's own report follows
  (llama.cpp ``/props``, SGLang ``/get_server_info``, vLLM ``/version``): context length, version.
  The tokenizer (``tokenizer=``, default the model path the server reports, else the served name)
  is loaded here and must tokenize a sample text as the server does (``/tokenize``).  A trial
  request of two tokens with top-20 log-probabilities must come back with 20 per token.  Each
  failure — connection refused, a URL that is no such server, an unknown model, a tokenizer that
  disagrees, fewer than 20 log-probabilities — is one line (:class:`ServerError`).
* **Requests**, one per trace (a server reports a request's cached tokens per request), run
  concurrently on a private event loop with at most ``concurrency`` in flight (default: the
  server's slots for llama.cpp, 32 otherwise).  A 408/429/5xx answer, a timeout (``timeout``
  seconds per request) or a lost connection is retried ``retries`` times with exponential
  backoff (``Retry-After`` honoured, at most :data:`MAX_BACKOFF` s), then the run stops with one
  line; any other error answer stops it at once.  Nothing waits without a bound, and no answer
  is read past a bound of bytes set by what its request asked for (:func:`answer_limit`: far
  above any real answer; a larger one is refused as it streams in).
* **What an answer may hold**: token ids of the tokenizer's vocabulary, log-probabilities that
  are numbers at most 0 (``-inf`` counts as the floor); anything else — an id the tokenizer does
  not have, ``+inf``, a string, an entry of another shape — is one line naming the server.  A
  log-probability the server did not send (``null``, NaN, a missing entry) is stood in for: the
  token takes the confidence of the token before it (0 at a trace's start).  Each stand-in is
  counted (:attr:`~mars.engines.base.TraceResult.stood_in`; the pool's ``pool.json`` records the
  sum as ``stood_in_confs`` and ``mars generate``/``solve`` say it).  A question for which the
  server left out more than :data:`MAX_STOOD_IN_SHARE` of its tokens' log-probabilities (beyond
  :data:`STOOD_IN_FREE`) is refused: its confidences would be made up.  llama.cpp's documented
  omissions (a token after which the text ends inside a character) are stood in for and counted
  but not refused: text the vocabulary spells in bytes (emoji for SmolLM2) has many.
* **advance(target)**: ``prompt + trace so far`` → ``target − length`` new tokens, the sampling of
  the run, top-20 log-probabilities, and a seed derived from (seed, qid, trace_idx, length):
  every request of a trace has its own seed, so a trace is a function of the seed and the
  checkpoint grid.  Whether the server repeats it bit for bit is the server's matter
  (``describe()["reproducible"]``).  The server ends a trace at EOS (its ``finish``), which counts
  as a token of the trace.
* **Text prompts** (:class:`OpenAITextProtocol`, ``prompt_mode`` ``"text"`` in the provenance): a
  server of no known kind (``owned_by``) is sent one token-id prompt at connect; one that refuses
  it (llama-cpp-python: HTTP 500, a validation error, not retried) and takes a text prompt with
  top-20 log-probabilities is driven in text (``server=openai`` skips the question; one that takes
  token ids is refused: how ids are read back depends on which server it is).  Each request is the
  chat template's text (as the token-id prompt is built; without the BOS the server adds itself)
  + the trace's text so far (its ids decoded); the answer's text is tokenized here — token ids,
  lengths and checkpoints are ours — and a trace keeps at most the tokens it asked for (cut where
  the text is whole) and asks again for any missing, so it lands on the checkpoint grid.  The
  server re-tokenizes prompt + text at every request, so a trace's token boundaries at a
  checkpoint can differ from an uninterrupted generation's.  Confidences: see
  :func:`_text_top_confidence` and :func:`_text_confs` (exact where the server's token has our
  token's text and its top 20 can be told; otherwise taken from the server's token over the same
  characters, or over fewer entries, and counted in ``stats["approx_confs"]``).  No cached tokens.
* **probe(idx)**: ``prompt + trace[:p] + suffix``, ≤ ``probe_max_new_tokens`` tokens, seed
  (seed, qid, trace_idx, p), no log-probabilities; the server's prompt, cached and completion
  token counts go into the probe record.  ``stop`` sends nothing more: no request is in flight
  between checkpoints, so a stopped trace costs the server nothing after its last request.  A
  request given up on mid-flight (timeout, a failed sibling, Ctrl-C) is cancelled, which closes
  its connection: vLLM aborts it then.  Probes whose prompts come back mostly uncached (a server
  without a prefix cache re-reads every trace) are said once, in one line
  (:meth:`ServerBackend.check_probe_cache`).
* **The probe stage** (:meth:`ServerBackend.reprobe`): each trace's probes go in position order
  (each prefix extends the previous one, so the server's cache holds it), traces concurrently.
* **Confidence** of a token = −mean of its 20 top log-probabilities (spec §3.1,
  :func:`~mars.engines.tokens.token_confidence`); a response with fewer than 20 for a token is
  refused (the statistic is never silently changed; text prompts: above).  Which distribution:
  llama.cpp and vLLM (its default ``--logprobs-mode``) report ``log_softmax(logits)``, SGLang
  ``log_softmax(logits / temperature)`` unless started with ``SGLANG_RETURN_ORIGINAL_LOGPROB=1``;
  ``describe()`` records it, since confidence thresholds do not carry over between the two.

Per server (:class:`Protocol`; the shapes are pinned by ``tests/test_backend_server.py``):

* **llama.cpp** — native ``POST /completion`` (``prompt`` ids, ``n_predict``, ``n_probs``,
  ``seed``, ``return_tokens``, ``cache_prompt``, the sampler chain temperature → top-k → top-p →
  min-p as vLLM and SGLang apply it, so the server's default penalties and min-p 0.05 are off);
  its OpenAI route returns no token ids.  Cached tokens: ``timings.cache_n``.  llama.cpp leaves
  out the log-probabilities of a token that ends inside a multi-byte character; such tokens get
  a NaN confidence (matched by id from the end of each run).
* **vLLM** — ``POST /v1/completions`` with ``return_token_ids`` and
  ``return_tokens_as_token_ids`` (top log-probabilities keyed by id: two tokens that decode alike
  do not collide).  Cached tokens: ``usage.prompt_tokens_details.cached_tokens``, only when the
  server runs with ``--enable-prompt-tokens-details`` (else not recorded).  Needs
  ``--max-logprobs`` ≥ 20 (its default is 20).  Run in CI against vLLM 0.32's CPU build
  (``tests/test_backend_vllm.py``: the facts relied on here, asserted on the live server).
* **SGLang** — native ``POST /generate`` (``input_ids``, ``sampling_seed``,
  ``top_logprobs_num``), read by :func:`mars.engines.sglang.parse_generation`; cached tokens:
  ``meta_info.cached_tokens``.  Seeds hold only when the server runs with
  ``--enable-deterministic-inference``.
* **openai** (text prompts; llama-cpp-python 0.3.36 read and run) — ``POST /v1/completions`` with
  a text ``prompt``, ``max_tokens``, ``logprobs: 20``, ``seed``, ``temperature``, ``top_p``,
  ``top_k``, ``min_p`` 0 and ``repeat_penalty`` 1 (llama-cpp-python's defaults are 0.05 and 1.1),
  applied in the server's order (llama-cpp-python: top-k, top-p, min-p, then temperature);
  ``/extras/tokenize`` for the tokenizer check.  One request in flight by default for
  llama-cpp-python, which runs one at a time.

The API key, if any, is read from the environment variable ``api_key_env`` (default
``MARS_API_KEY``) and sent as a bearer token; it is never recorded, and never shown: a key a
header cannot carry (a line break, a space, a control or non-ASCII character) is refused naming
the variable, before any request.  Credentials in the URL (``http://user:pass@host``) go as basic
authentication (not with a key: one Authorization header) and are shown as ``***`` in every
message; a server's own text is shown printable only (:mod:`mars.engines.endpoint`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import math
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Coroutine, Sequence, Sized
from dataclasses import dataclass
from itertools import accumulate
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from ..errors import MarsError, install_hint
from ..store.problems import Problem
from . import cancel
from .base import Backend, GeneratorInfo, ProbeResult, StoredTrace
from .endpoint import api_key, check_base_url, printable, redact, shown
from .tokenizer import (
    SERVER,
    SERVER_TOKENIZERS,
    ServerTokenizer,
    describe_source,
    load_local,
    missing_modules,
    tokenizer_needs,
)
from .tokens import (
    CONF_TOP_K,
    DEFAULT_PROMPT_TEMPLATE,
    PROBE_MAX_NEW_TOKENS,
    PROBE_SUFFIX,
    TokenProbing,
    TokenTraceBatch,
    build_prompt_ids,
    build_prompt_text,
    check_context,
    derive_seed,
    encode_suffix,
    load_tokenizer,
    parse_probe,
    prefix_text,
    token_confidence,
    window_conf,
)

__all__ = [
    "PROTOCOLS",
    "Completion",
    "ServerBackend",
    "ServerError",
    "ServerTraceBatch",
    "generation_seed",
    "probe_seed",
]

log = logging.getLogger(__name__)

#: HTTP statuses worth another try: the server is busy, overloaded, restarting or timed out.
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
#: Longest wait between two tries (seconds), whatever ``Retry-After`` asks.
MAX_BACKOFF = 30.0
#: Deadline (seconds) of the connect-time questions (models, server report, tokenizer check).
INFO_TIMEOUT = 30.0
#: Seeds fit 31 bits: llama.cpp reads a request's seed as a 32-bit integer in which all ones
#: means "random".
SEED_BITS = 31
_GEN_SALT = 0x5E4E0  # separates generation seeds from probe seeds
_PROBE_SALT = 0x9B0BE
#: A sample the tokenizer must split as the server does (digits, LaTeX, non-ASCII, the suffix).
TOKENIZER_SAMPLE = "Let x = 3.25; then \\frac{x}{2} ≤ 1.7 — naïve 中文 é." + PROBE_SUFFIX
#: Probes that found less than this share of what they could reuse in the server's prefix cache
#: (the prompt and trace the server has already seen) are said to come back mostly uncached ...
UNCACHED_SHARE = 0.5
#: ... once their reusable prompt tokens reach this many (one line, once per backend).
UNCACHED_MIN_TOKENS = 256
#: What a served model's ``owned_by`` says about the server.
OWNED_BY = {"llamacpp": "llama.cpp", "vllm": "vllm", "sglang": "sglang"}
#: What llama-cpp-python's server says it is owned by (``/v1/models``).
LLAMA_CPP_PYTHON_OWNER = "me"
#: ``prompt_mode`` of a server that takes token-id prompts, and of one that takes text only.
TOKEN_IDS, TEXT = "token ids", "text"
#: A reported log-probability above this is none (0 is certainty; servers round).
LOGPROB_MAX = 1e-3
#: A question's traces may have at most this share of their confidences stood in for (a token
#: the server sent no usable log-probabilities for takes the confidence of the token before it),
#: beyond :data:`STOOD_IN_FREE` tokens: more, and the confidences would be made up, not measured.
MAX_STOOD_IN_SHARE = 0.05
STOOD_IN_FREE = 8
#: The most bytes an answer may take: a frame (an error page, the answer's fields), per token
#: (or character) of the prompt (a server may echo it: vLLM its ids, llama.cpp its text), then
#: per token asked for — its id and text, and with log-probabilities 20 entries each up to a
#: long token's text (a llama.cpp entry spells its bytes too).  Far above any real answer; a
#: larger one is refused as it streams in, never read whole.
ANSWER_FRAME_BYTES = 1 << 20
ANSWER_PROMPT_BYTES = 64
ANSWER_TOKEN_BYTES = 2 << 10
ANSWER_LOGPROB_TOKEN_BYTES = 32 << 10
#: The most bytes a connect-time answer (models, server report, tokenizer check) may take.
INFO_ANSWER_BYTES = 16 << 20


def answer_limit(max_new: int, logprobs: bool, prompt: Sized = ()) -> int:
    """The most bytes an answer of ``max_new`` tokens after ``prompt`` (token ids or text) may
    take (:data:`ANSWER_FRAME_BYTES`)."""
    per = ANSWER_LOGPROB_TOKEN_BYTES if logprobs else ANSWER_TOKEN_BYTES
    return ANSWER_FRAME_BYTES + len(prompt) * ANSWER_PROMPT_BYTES + int(max_new) * per


class ServerError(MarsError):
    """The server is unreachable, refuses, or answers what the backend cannot use (one line)."""


class ServerUnavailable(ServerError):
    """A request failed every try (no connection, timeouts, busy or failing answers): the server
    is down or overloaded, not refusing the request (another replica may take it)."""


def generation_seed(seed: int, qid: int, trace_idx: int, start: int) -> int:
    """Seed of the request that continues trace (seed, qid, trace_idx) from ``start`` tokens."""
    return derive_seed(seed, qid, trace_idx, start, _GEN_SALT, bits=SEED_BITS)


def probe_seed(seed: int, qid: int, trace_idx: int, position: int) -> int:
    """Seed of the probe of trace (seed, qid, trace_idx) at ``position`` (inline and stage)."""
    return derive_seed(seed, qid, trace_idx, position, _PROBE_SALT, bits=SEED_BITS)


@dataclass
class Completion:
    """One request's answer, whatever the server: the generated ids (EOS included), their
    confidences (None when not asked), whether the model ended the text (EOS), and its counts."""

    ids: list[int]
    confs: list[float] | None
    finished: bool
    text: str
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int
    #: text prompts only: whether the text is whole after each token (False inside a character
    #: whose bytes several tokens carry), None unless asked for
    whole: list[bool] | None = None
    #: text prompts only: whether each confidence is the token's own top 20 (False: taken from
    #: another token of the server's, or over fewer entries), None unless asked for
    exact: list[bool] | None = None
    #: text prompts only: the server's own count of the tokens it generated (None: not reported)
    server_tokens: int | None = None


@dataclass
class Sampling:
    temperature: float
    top_p: float
    top_k: int  # 0: off
    min_p: float | None


def _one_line(text: object, limit: int = 200) -> str:
    """A server's (or a client library's) text as one printable line, URL credentials hidden."""
    return printable(redact(text), limit)


def _int(value: object, what: str) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (isinstance(value, float) and (not math.isfinite(value) or value != int(value)))
    ):
        raise ServerError(f"the server answered {what} = {shown(value, 40)}, not a whole number")
    return int(value)


def _dig(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]…`` where every level is a dict, else None: a server's report may be any
    JSON."""
    for k in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(k)
    return obj


def _count(value: Any) -> int | None:
    """A positive whole number a server reports (a context length, its slots), else None: not
    known."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        return None
    return int(value) if value >= 1 else None


def _label(value: Any) -> str | None:
    """A text a server reports about itself (its version), printable; None if it is no text."""
    return printable(value) or None if isinstance(value, str) else None


def _path(value: Any) -> str | None:
    """A path a server reports (where it loaded its model from), None if it is no text."""
    return value if isinstance(value, str) and value and "\x00" not in value else None


def _logprob(value: object, where: str) -> float:
    """One reported log-probability: a number at most 0 (−inf is the floor's matter), or NaN
    when the server sent none (``null``, NaN: counted and stood in for by the trace).  +inf, a
    positive number, a string or any other value is one line."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ServerError(f"{where}: a log-probability that is not a number ({shown(value, 40)})")
    try:
        x = float(value)
    except OverflowError:  # an integer past a float's range
        x = math.inf if value > 0 else -math.inf
    if x > LOGPROB_MAX:
        raise ServerError(f"{where}: a log-probability of {x:g}, above 0 (not a log-probability)")
    return x


def _logprobs(values: object, where: str) -> list[float]:
    """A token's top log-probabilities (:func:`_logprob` each)."""
    if not isinstance(values, (list, tuple)):
        raise ServerError(
            f"{where}: top log-probabilities that are not a list ({shown(values, 40)})"
        )
    return [_logprob(v, where) for v in values]


def _top_confidence(values: Sequence[Any], where: str) -> float:
    """Confidence from one token's top log-probabilities: exactly :data:`CONF_TOP_K` of them (the
    highest when the server adds the sampled token to its top k); NaN when any is missing."""
    lps = _logprobs(values, where)
    if len(lps) < CONF_TOP_K:
        raise ServerError(
            f"{where}: {len(lps)} top log-probabilities for a token, not {CONF_TOP_K} "
            "(the confidence is the mean of 20)"
        )
    if any(math.isnan(x) for x in lps):
        return math.nan
    return token_confidence(sorted(lps, reverse=True)[:CONF_TOP_K])


# ---------------------------------------------------------------------------------------------
# Protocols: how each server is asked, and how its answers read


class Protocol:
    """How one kind of server is asked for a completion and how its answer reads."""

    kind = ""
    path = ""
    #: how prompts are sent: :data:`TOKEN_IDS` or :data:`TEXT`
    prompt_mode = TOKEN_IDS
    #: which distribution the reported log-probabilities are of
    logprobs_mode = ""
    #: how a per-request seed is honoured
    seeds = ""

    def __init__(self, model: str):
        self.model = model

    def info_paths(self) -> tuple[str, ...]:
        """GET endpoints whose JSON goes into the server report (missing ones are skipped)."""
        return ()

    def tokenize(self, text: str) -> tuple[str, dict]:
        """The request that tokenizes ``text`` without special tokens."""
        return "/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False}

    def body(
        self, prompt: Any, max_new: int, s: Sampling, seed: int | None, logprobs: bool
    ) -> dict:
        """The request of ``max_new`` tokens after ``prompt`` (token ids, or text for a
        :data:`TEXT` server)."""
        raise NotImplementedError

    def parse(self, out: Any, max_new: int, logprobs: bool) -> Completion:
        raise NotImplementedError

    def context_length(self, report: dict) -> int | None:
        return None

    def version(self, report: dict) -> str | None:
        return None

    def model_path(self, report: dict) -> str | None:
        """Where the server loaded its model from, when it says (a tokenizer source)."""
        return None

    def reproducible(self, report: dict) -> str:
        return "not guaranteed: depends on the server"

    @staticmethod
    def _check_length(c: Completion, max_new: int, where: str) -> Completion:
        n = len(c.ids)
        if n > max_new or (not c.finished and n != max_new):
            raise ServerError(
                f"{where}: {n} tokens for {max_new} asked"
                + ("" if n > max_new else " without an end of text (is the context full?)")
            )
        if c.confs is not None and len(c.confs) != n:
            raise ServerError(f"{where}: {len(c.confs)} log-probability entries for {n} tokens")
        if c.completion_tokens != n:
            raise ServerError(f"{where}: completion tokens {c.completion_tokens} for {n} tokens")
        return c


class LlamaCppProtocol(Protocol):
    """llama.cpp's ``llama-server``, native ``/completion`` (token ids and cache counts)."""

    kind = "llama.cpp"
    path = "/completion"
    logprobs_mode = "log_softmax(logits) (llama.cpp n_probs, before sampling)"
    seeds = "per request (the request's sampler RNG)"
    #: the sampler chain of vLLM and SGLang (temperature first), nothing else
    SAMPLERS = ("temperature", "top_k", "top_p", "min_p")

    def info_paths(self) -> tuple[str, ...]:
        return ("/props",)

    def tokenize(self, text: str) -> tuple[str, dict]:
        # special tokens written in the text (``</think>``) are parsed, as transformers does
        return "/tokenize", {"content": text, "add_special": False, "parse_special": True}

    def body(
        self, ids: list[int], max_new: int, s: Sampling, seed: int | None, logprobs: bool
    ) -> dict:
        body: dict[str, Any] = {
            "prompt": list(ids),
            "n_predict": int(max_new),
            "temperature": s.temperature,
            "top_k": s.top_k,
            "top_p": s.top_p,
            "min_p": float(s.min_p or 0.0),
            "samplers": list(self.SAMPLERS),
            "cache_prompt": True,
            "return_tokens": True,
            "stream": False,
        }
        if seed is not None:
            body["seed"] = int(seed)
        if logprobs:
            body["n_probs"] = CONF_TOP_K
            body["post_sampling_probs"] = False
        return body

    def parse(self, out: Any, max_new: int, logprobs: bool) -> Completion:
        where = "llama.cpp /completion"
        if not isinstance(out, dict) or not isinstance(out.get("tokens"), list):
            raise ServerError(f"{where}: no token ids in the answer (a llama-server too old?)")
        ids = [_int(t, "a token id") for t in out["tokens"]]
        stop = out.get("stop_type")
        if stop not in ("eos", "limit"):
            raise ServerError(f"{where}: unexpected stop_type {stop!r}")
        if out.get("truncated"):
            raise ServerError(f"{where}: the request did not fit the slot's context")
        confs = None
        if logprobs:
            probs = out.get("completion_probabilities")
            if not isinstance(probs, list):
                raise ServerError(f"{where}: no completion_probabilities in the answer")
            confs = _align_llama_confs(ids, probs, where)
        timings = out.get("timings")
        cached = timings.get("cache_n") if isinstance(timings, dict) else None
        prompt = out.get("tokens_evaluated")
        c = Completion(
            ids=ids,
            confs=confs,
            finished=stop == "eos",
            text=str(out.get("content") or ""),
            prompt_tokens=None if prompt is None else _int(prompt, "tokens_evaluated"),
            cached_tokens=None if cached is None else _int(cached, "timings.cache_n"),
            completion_tokens=_int(out.get("tokens_predicted", len(ids)), "tokens_predicted"),
        )
        return self._check_length(c, max_new, where)

    def context_length(self, report):
        n = _dig(report, "/props", "default_generation_settings", "n_ctx")
        return _count(n if n is not None else _dig(report, "model", "meta", "n_ctx"))

    def version(self, report):
        return _label(_dig(report, "/props", "build_info"))

    def model_path(self, report):
        return _path(_dig(report, "/props", "model_path"))

    def reproducible(self, report):
        return (
            "per-request seeds are honoured; llama.cpp's logits are not bit-identical across "
            "batch compositions and cache states, so a repeated run may differ"
        )


def _align_llama_confs(ids: list[int], probs: list, where: str) -> list[float]:
    """Confidences of ``ids`` from llama.cpp's ``completion_probabilities``.

    llama.cpp sends no entry for a token after which the text ends inside a multi-byte
    character; the entry of the token that completes it follows.  Entries are matched to
    tokens by id from the end, each to the latest token of its id not yet matched: the entry of
    a character belongs to the last token of its run.  Unmatched tokens get NaN.
    """
    confs = [float("nan")] * len(ids)
    k = len(probs) - 1
    for j in range(len(ids) - 1, -1, -1):
        if k < 0:
            break
        entry = probs[k]
        if not isinstance(entry, dict) or not isinstance(entry.get("top_logprobs"), list):
            raise ServerError(f"{where}: a completion_probabilities entry without top_logprobs")
        if _int(entry.get("id"), "a token id") != ids[j]:
            continue
        tops = entry["top_logprobs"]
        for e in tops:
            if not isinstance(e, dict) or "logprob" not in e:
                raise ServerError(
                    f"{where}: a top log-probability entry that is not an object with a logprob "
                    f"({shown(e, 40)})"
                )
        confs[j] = _top_confidence([e["logprob"] for e in tops], where)
        k -= 1
    if k >= 0:
        raise ServerError(f"{where}: log-probabilities of tokens it did not generate")
    return confs


class VLLMProtocol(Protocol):
    """vLLM's OpenAI-compatible ``/v1/completions`` with its token-id extensions."""

    kind = "vllm"
    path = "/v1/completions"
    logprobs_mode = (
        "the server's --logprobs-mode (default raw_logprobs: log_softmax(logits)), clamped at -9999"
    )
    seeds = "per request (a generator per request)"

    def info_paths(self) -> tuple[str, ...]:
        return ("/version",)

    def body(
        self, ids: list[int], max_new: int, s: Sampling, seed: int | None, logprobs: bool
    ) -> dict:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": list(ids),
            "max_tokens": int(max_new),
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k or -1,
            "min_p": float(s.min_p or 0.0),
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "n": 1,
            "stream": False,
            "return_token_ids": True,
            "skip_special_tokens": True,
        }
        if seed is not None:
            body["seed"] = int(seed)
        if logprobs:
            body["logprobs"] = CONF_TOP_K
            body["return_tokens_as_token_ids"] = True
        return body

    def parse(self, out: Any, max_new: int, logprobs: bool) -> Completion:
        where = "vLLM /v1/completions"
        choices = out.get("choices") if isinstance(out, dict) else None
        if not isinstance(choices, list) or len(choices) != 1:
            raise ServerError(f"{where}: expected one choice in the answer")
        ch = choices[0]
        if not isinstance(ch, dict) or not isinstance(ch.get("token_ids"), list):
            raise ServerError(f"{where}: no token_ids (a vLLM without return_token_ids?)")
        ids = [_int(t, "a token id") for t in ch["token_ids"]]
        finish = ch.get("finish_reason")
        if finish not in ("stop", "length"):
            raise ServerError(f"{where}: unexpected finish_reason {finish!r}")
        if finish == "stop" and ch.get("stop_reason") is not None:
            raise ServerError(f"{where}: stopped by {ch['stop_reason']!r}, not end of text")
        confs = None
        if logprobs:
            lp = ch.get("logprobs")
            top = lp.get("top_logprobs") if isinstance(lp, dict) else None
            if not isinstance(top, list):
                raise ServerError(f"{where}: no top_logprobs in the answer")
            bad = next((t for t in top if t is not None and not isinstance(t, dict)), None)
            if bad is not None:
                raise ServerError(
                    f"{where}: a top log-probabilities entry that is not a dict ({shown(bad, 40)})"
                )
            confs = [
                float("nan") if t is None else _top_confidence(list(t.values()), where) for t in top
            ]
        usage = out.get("usage") if isinstance(out.get("usage"), dict) else {}
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        prompt = usage.get("prompt_tokens")
        c = Completion(
            ids=ids,
            confs=confs,
            finished=finish == "stop",
            text=str(ch.get("text") or ""),
            prompt_tokens=None if prompt is None else _int(prompt, "usage.prompt_tokens"),
            cached_tokens=None if cached is None else _int(cached, "cached_tokens"),
            completion_tokens=_int(
                usage.get("completion_tokens", len(ids)), "usage.completion_tokens"
            ),
        )
        return self._check_length(c, max_new, where)

    def context_length(self, report):
        return _count(_dig(report, "model", "max_model_len"))

    def version(self, report):
        return _label(_dig(report, "/version", "version"))

    def model_path(self, report):
        return _path(_dig(report, "model", "root"))

    def reproducible(self, report):
        return (
            "per-request seeds are honoured: a request the server runs alone repeats bit for bit "
            "(--concurrency 1), but beside other requests its log-probabilities move (by up to "
            "0.5 nats on vLLM 0.32's CPU build) and its tokens can part from the same request run "
            "alone; bit-exact repeats in batches need VLLM_BATCH_INVARIANT=1 (GPU backends only), "
            "the same hardware and version"
        )


class SGLangProtocol(Protocol):
    """SGLang's native ``/generate`` (token ids, seeds, ``meta_info.cached_tokens``)."""

    kind = "sglang"
    path = "/generate"
    logprobs_mode = (
        "log_softmax(logits / temperature) (SGLang's default; log_softmax(logits) if the "
        "server runs with SGLANG_RETURN_ORIGINAL_LOGPROB=1)"
    )
    seeds = "sampling_seed per request (honoured under --enable-deterministic-inference)"

    def info_paths(self) -> tuple[str, ...]:
        return ("/get_server_info", "/get_model_info")

    def body(
        self, ids: list[int], max_new: int, s: Sampling, seed: int | None, logprobs: bool
    ) -> dict:
        sp: dict[str, Any] = {
            "max_new_tokens": int(max_new),
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k or -1,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
        }
        if s.min_p:
            sp["min_p"] = float(s.min_p)
        if seed is not None:
            sp["sampling_seed"] = int(seed)
        body: dict[str, Any] = {"input_ids": list(ids), "sampling_params": sp, "stream": False}
        if logprobs:
            body.update(return_logprob=True, top_logprobs_num=CONF_TOP_K, logprob_start_len=-1)
        return body

    def parse(self, out: Any, max_new: int, logprobs: bool) -> Completion:
        from .sglang import EngineOutputError, parse_generation

        where = "SGLang /generate"
        meta = out.get("meta_info") if isinstance(out, dict) else None
        top = meta.get("output_top_logprobs") if isinstance(meta, dict) else None
        confs = None
        if logprobs:  # read first: parse_generation reads them without asking what they are
            if not isinstance(top, list):
                raise ServerError(f"{where}: no top log-probabilities for every token")
            for e in top:
                for x in [e] if e and not isinstance(e, list) else e or []:
                    if not isinstance(x, list) or not x:
                        raise ServerError(
                            f"{where}: a top log-probability entry that is not a list "
                            f"({shown(x, 40)})"
                        )
            confs = [
                float("nan") if not e else _top_confidence([x[0] for x in e], where) for e in top
            ]
        try:
            g = parse_generation(out, max_new)
        except EngineOutputError as exc:
            raise ServerError(f"{where}: {_one_line(exc)}") from None
        except (TypeError, ValueError, KeyError, IndexError, OverflowError) as exc:
            raise ServerError(f"{where}: a malformed answer ({_one_line(exc, 80)})") from None
        if confs is not None and len(confs) != len(g["ids"]):
            raise ServerError(f"{where}: no top log-probabilities for every token")
        text = g["text"]
        c = Completion(
            ids=g["ids"],
            confs=confs,
            finished=g["finish"] == "stop",
            text="" if text is None else str(text),
            prompt_tokens=g["prompt_tokens"],
            cached_tokens=g["cached_tokens"],
            completion_tokens=g["completion_tokens"],
        )
        return self._check_length(c, max_new, where)

    def context_length(self, report):
        n = _count(_dig(report, "model", "max_model_len"))
        return n or _count(_dig(report, "/get_server_info", "context_length"))

    def version(self, report):
        return _label(_dig(report, "/get_server_info", "version"))

    def model_path(self, report):
        tok = _path(_dig(report, "/get_model_info", "tokenizer_path"))
        return tok or _path(_dig(report, "/get_model_info", "model_path"))

    def reproducible(self, report):
        det = _dig(report, "/get_server_info", "enable_deterministic_inference")
        if det is True:
            return "yes: the server runs with deterministic inference (seeds honoured)"
        return (
            "no: the server does not report --enable-deterministic-inference, so SGLang ignores "
            "the seeds"
        )


# ---------------------------------------------------------------------------------------------
# Text prompts: a server whose /v1/completions takes only text (llama-cpp-python's server)


def _token_ends(tokenizer, ids: Sequence[int]) -> tuple[list[int], list[bool]]:
    """Where each token's text ends in ``decode(ids)`` (in characters), and whether the text is
    whole there: a token that ends inside a character (its bytes carried by several tokens)
    adds nothing until the token that completes it.  One short decode per token."""
    ends: list[int] = []
    whole: list[bool] = []
    base = pos = 0
    last = len(ids) - 1
    for k in range(len(ids)):
        piece = tokenizer.decode(list(ids[base : k + 1]), skip_special_tokens=True)
        if k < last and piece.endswith("\ufffd"):  # inside a character: wait for the rest
            ends.append(pos + len(piece.rstrip("\ufffd")))
            whole.append(False)
            continue
        pos += len(piece)
        base = k + 1
        ends.append(pos)
        whole.append(True)
    return ends, whole


def _text_top_confidence(top: Any, sampled: Any, top_k: int, where: str) -> tuple[float, bool]:
    """(confidence, exact) from one token's ``top_logprobs`` entry of an OpenAI text-completion
    answer.

    The entry is a dict keyed by the decoded token string: tokens that decode alike (a space and
    a space followed by the first byte of a character, which llama-cpp-python decodes dropping
    the byte) share one key, which keeps the later, lower log-probability; and the server adds the
    sampled token (k + 1 entries when it is not among the top k).  So more than 20 entries: no
    key was shared, the 20 highest are the top 20.  Exactly 20: the top 20 when the sampled token
    is among them, which is certain when sampling keeps only the top ``top_k`` ≤ 20 tokens or
    when its log-probability is above the lowest entry.  Otherwise (fewer than 20: a shared key)
    the top 20 cannot be told, and the confidence is −mean of the (at most 20) highest entries
    sent, marked not exact.
    """
    if not isinstance(top, dict):
        raise ServerError(
            f"{where}: a top log-probabilities entry that is not a dict ({shown(top, 40)})"
        )
    values = sorted(_logprobs(list(top.values()), where), reverse=True)
    if any(math.isnan(v) for v in values):
        return math.nan, False
    n = len(values)
    exact = n > CONF_TOP_K
    if n == CONF_TOP_K:
        exact = 0 < top_k <= CONF_TOP_K
        if not exact and isinstance(sampled, (int, float)) and not isinstance(sampled, bool):
            exact = float(sampled) > values[-1]
    return token_confidence(values[:CONF_TOP_K]), exact


def _server_spans(lp: dict, n: int, text: str, where: str) -> list[tuple[int, int]]:
    """Each returned token's characters in ``text``, from ``text_offset`` (relative to the
    first token's, whatever the server counts from), else from the lengths of ``tokens``."""
    offsets = lp.get("text_offset")
    if isinstance(offsets, list) and len(offsets) == n:
        starts = [_int(x, "a text_offset") for x in offsets]
        starts = [x - starts[0] for x in starts] if n else []
    else:
        tokens = lp.get("tokens")
        if not isinstance(tokens, list) or len(tokens) != n:
            raise ServerError(f"{where}: neither text_offset nor tokens for every log-probability")
        starts = list(accumulate([0] + [len(str(t)) for t in tokens[:-1]])) if n else []
    spans = list(zip(starts, [*starts[1:], len(text)]))
    if any(a > b or a < 0 for a, b in spans):
        raise ServerError(f"{where}: text offsets that do not fit the returned text")
    return spans


def _text_confs(
    ends: list[int],
    whole: list[bool],
    spans: list[tuple[int, int]],
    confs: list[tuple[float, bool]],
) -> tuple[list[float], list[bool]]:
    """Our tokens' (confidences, exact) from the server's tokens.  A token gets the confidence of
    the server's token with exactly its characters (both whole tokens after whole tokens: the same
    text, so the same token), exact when that one's is.  Where the two tokenizations part (the
    server sampled a split our tokenizer does not make; several tokens carry one character), a
    token takes the confidence of the server's token that holds its last character (a piece of a
    character: that character), not exact; none without any server token (NaN)."""
    theirs: dict[tuple[int, int], tuple[float, bool]] = {}
    for i, (a, b) in enumerate(spans):
        if b > a and (i == 0 or spans[i - 1][1] > spans[i - 1][0]):
            theirs[(a, b)] = confs[i]
    # the server's token holding each character: the last whose span starts at or before it
    covering = [i for i, (a, b) in enumerate(spans) if b > a]
    starts = [spans[i][0] for i in covering]
    out, exact = [], []
    start = 0
    for k, end in enumerate(ends):
        simple = whole[k] and (k == 0 or whole[k - 1]) and end > start
        hit = theirs.get((start, end)) if simple else None
        if hit is None:
            char = end - 1 if end > start else start
            i = int(np.searchsorted(starts, char, side="right")) - 1
            hit = (confs[covering[i]][0] if i >= 0 else float("nan"), False)
        out.append(hit[0])
        exact.append(hit[1])
        start = end
    return out, exact


class OpenAITextProtocol(Protocol):
    """An OpenAI-compatible ``/v1/completions`` that takes text prompts only (llama-cpp-python's
    server): a prompt is text, and the answer's text is tokenized here with the model's
    tokenizer (token ids, lengths; confidences matched to the server's tokens by position).  The
    backend sets :attr:`tokenizer` and :attr:`top_k` before the first request."""

    kind = "openai"
    path = "/v1/completions"
    prompt_mode = TEXT
    logprobs_mode = (
        "as the server reports them (llama-cpp-python: log_softmax(logits), before sampling)"
    )
    seeds = "per request (the request's seed; llama-cpp-python seeds the request's sampler)"
    #: the order the server applies the sampling settings in (it is not sent)
    sampler_order = "the server's (llama-cpp-python: top-k, top-p, min-p, then temperature)"
    tokenizer: Any = None
    top_k = 0

    def tokenize(self, text: str) -> tuple[str, dict]:
        # llama-cpp-python: special tokens parsed; a BOS added when the model adds one
        return "/extras/tokenize", {"model": self.model, "input": text}

    def body(
        self, prompt: Any, max_new: int, s: Sampling, seed: int | None, logprobs: bool
    ) -> dict:
        if not isinstance(prompt, str):
            raise TypeError("a text-prompt server takes text")
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": int(max_new),
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k,
            "min_p": float(s.min_p or 0.0),
            "repeat_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "n": 1,
            "echo": False,
            "stream": False,
        }
        if seed is not None:
            body["seed"] = int(seed)
        if logprobs:
            body["logprobs"] = CONF_TOP_K
        return body

    def parse(self, out: Any, max_new: int, logprobs: bool) -> Completion:
        where = "/v1/completions"
        choices = out.get("choices") if isinstance(out, dict) else None
        if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
            raise ServerError(f"{where}: expected one choice in the answer")
        ch = choices[0]
        text = ch.get("text")
        if not isinstance(text, str):
            raise ServerError(f"{where}: no text in the answer")
        finish = ch.get("finish_reason")
        if finish not in ("stop", "length"):
            raise ServerError(f"{where}: unexpected finish_reason {finish!r}")
        usage = out.get("usage") if isinstance(out.get("usage"), dict) else {}
        server_n = usage.get("completion_tokens")
        server_n = None if server_n is None else _int(server_n, "usage.completion_tokens")
        if finish == "length" and server_n is not None and server_n < max_new:
            raise ServerError(
                f"{where}: {server_n} tokens for {max_new} asked without an end of text (is the "
                "context full?)"
            )
        tok = self.tokenizer
        ids = list(tok.encode(text, add_special_tokens=False)) if text else []
        whole: list[bool] | None = None
        exact: list[bool] | None = None
        confs: list[float] | None = None
        if logprobs:
            lp = ch.get("logprobs")
            top = lp.get("top_logprobs") if isinstance(lp, dict) else None
            if not isinstance(top, list) or (text and not top):
                raise ServerError(f"{where}: no top_logprobs in the answer")
            assert isinstance(lp, dict)
            sampled = lp.get("token_logprobs")
            if not isinstance(sampled, list) or len(sampled) != len(top):
                sampled = [None] * len(top)
            theirs = [
                _text_top_confidence(t, lp_, self.top_k, where) for t, lp_ in zip(top, sampled)
            ]
            ends, whole = _token_ends(tok, ids)
            spans = _server_spans(lp, len(top), text, where)
            confs, exact = _text_confs(ends, whole, spans, theirs)
        finished = finish == "stop"
        if finished:  # the end of text, a token of the trace the server sends nothing for
            ids.append(int(tok.eos_token_id))
            if confs is not None and whole is not None and exact is not None:
                confs.append(confs[-1] if confs else float("nan"))  # the token before it
                whole.append(True)
                exact.append(False)
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        prompt = usage.get("prompt_tokens")
        return Completion(
            ids=ids,
            confs=confs,
            finished=finished,
            text=text,
            prompt_tokens=None if prompt is None else _int(prompt, "usage.prompt_tokens"),
            cached_tokens=None if cached is None else _int(cached, "cached_tokens"),
            completion_tokens=len(ids),
            whole=whole,
            exact=exact,
            server_tokens=server_n,
        )

    def reproducible(self, report):
        return (
            "per-request seeds are sent; whether they are honoured is the server's matter "
            "(llama-cpp-python honours them, runs one request at a time and repeats a run bit "
            "for bit when its requests come in the same order: one in flight; its logits depend "
            "on the prefix it reuses from the request before); prompts go as text, tokenized by "
            "the server at every request"
        )


def _text_cut(c: Completion, want: int, room: int) -> int:
    """How many of a text answer's tokens (ours) a trace takes: all when they are at most
    ``want``; else the most that fit and end on a whole character, so the next request starts
    from whole text; and when the first character alone takes more than ``want`` tokens, that
    character if it fits the trace's ``room`` (tokens left before its cap), else none."""
    n = len(c.ids)
    if n <= want:
        return n
    whole = c.whole if c.whole is not None else [True] * n
    k = next((k for k in range(want, 0, -1) if whole[k - 1]), 0)
    if k:
        return k
    k = next(k for k in range(want + 1, n + 1) if whole[k - 1])  # the last token is whole
    return k if k <= room else 0


PROTOCOLS: dict[str, type[Protocol]] = {
    p.kind: p for p in (LlamaCppProtocol, VLLMProtocol, SGLangProtocol, OpenAITextProtocol)
}


# ---------------------------------------------------------------------------------------------
# HTTP: a private event loop, bounded concurrency, bounded retries


class Http:
    """Requests to one server from synchronous code: a private event loop on a daemon thread
    (so it works inside a running loop too), at most ``concurrency`` requests in flight, each
    tried at most ``1 + retries`` times, each answer read up to a bound of bytes.  Messages name
    the server with its URL's credentials hidden (:attr:`shown`) and never quote ``secrets``."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: dict | None = None,
        timeout: float = 600.0,
        connect_timeout: float = 10.0,
        retries: int = 4,
        backoff: float = 0.5,
        concurrency: int = 32,
        transport: Any = None,
        secrets: Sequence[str] = (),
    ):
        self.base_url = base_url
        self.shown = redact(base_url)
        self.headers = dict(headers or {})
        self.timeout = float(timeout)
        # a connection is part of a request: it never waits longer than the request may
        self.connect_timeout = min(float(connect_timeout), self.timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.concurrency = int(concurrency)
        self.transport = transport
        self.secrets = [s for s in secrets if s]
        self.stats = {"requests": 0, "retries": 0}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid: int | None = None
        self._client: Any = None
        self._sem: asyncio.Semaphore | None = None

    # -- the loop ----------------------------------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None or self._pid != os.getpid():  # a forked child starts its own
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, daemon=True, name="mars-http").start()
            self._loop, self._pid, self._client, self._sem = loop, os.getpid(), None, None
        return self._loop

    def submit(self, make: Callable[[], Coroutine[Any, Any, Any]]) -> concurrent.futures.Future:
        """Start the coroutine ``make()`` on the loop; its future (cancelling it cancels the
        coroutine, and the requests it has in flight)."""
        return asyncio.run_coroutine_threadsafe(make(), self._ensure_loop())

    def run(self, make: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        """Run the coroutine ``make()`` on the loop and wait for it (Ctrl-C, or the cancelled
        scope of the caller (:mod:`mars.engines.cancel`), cancels it)."""
        fut = self.submit(make)
        scope = cancel.current()
        if scope is not None:
            scope.attach(fut)
        try:
            return fut.result()
        except concurrent.futures.CancelledError:
            if scope is not None and scope.cancelled:
                raise cancel.Cancelled("cancelled") from None
            raise
        except BaseException:
            fut.cancel()
            raise
        finally:
            if scope is not None:
                scope.detach(fut)

    def limit(self, concurrency: int) -> None:
        """At most ``concurrency`` requests in flight from now on."""
        self.concurrency = int(concurrency)
        if self._sem is not None:
            self._sem = asyncio.Semaphore(self.concurrency)

    def close(self) -> None:
        loop, client = self._loop, self._client
        if loop is None or self._pid != os.getpid():
            return
        if client is not None:
            asyncio.run_coroutine_threadsafe(client.aclose(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        self._loop = self._client = self._sem = None

    def _get_client(self):
        import httpx

        if self._client is None:
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                headers=self.headers,
                timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
                transport=self.transport,
                limits=httpx.Limits(max_connections=None),  # the semaphore bounds them
            )
            self._sem = asyncio.Semaphore(self.concurrency)
        return self._client

    def hide(self, text: object, limit: int = 200) -> str:
        """``text`` as one printable line, credentials and secrets hidden."""
        s = str(text)
        for secret in self.secrets:
            s = s.replace(secret, "***")
        return _one_line(s, limit)

    def message(self, out: Any) -> str:
        """The error message of a server's JSON error answer, as it may be shown (a server may
        echo what it was sent)."""
        return self.hide(_message(out)) or "no message"

    def json(self, status: int, data: bytes, url: str) -> Any:
        """The JSON of an answer; an answer of 200 that is none is one line, an error answer
        that is none becomes ``{"error": its text}``."""
        try:
            return json.loads(data)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            text = data[:4096].decode("utf-8", "replace")
            if status == 200:
                raise ServerError(
                    f"{url}: the answer is not JSON ({self.hide(text, 80)!r}): is this the "
                    "server's base URL?"
                ) from None
            return {"error": self.hide(text) or f"HTTP {status}"}

    # -- requests ----------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        *,
        retry_connect: bool = True,
        timeout: float | None = None,
        retry_status: frozenset[int] = RETRY_STATUS,
        limit: int = INFO_ANSWER_BYTES,
        asked: str = "",
        sse: bool = False,
    ) -> tuple[int, Any]:
        """(status, JSON) of ``method path``; 200 and 4xx answers come back, retryable failures
        are tried again, then one line.  ``retry_connect=False``: a connection refused or not
        made in time is one line at once (at connect time, a server that is not there).
        ``timeout``: this request's deadline instead of :attr:`timeout`.  ``retry_status``: the
        HTTP statuses tried again (the others come back).  ``limit``: the most bytes the answer
        may take (``asked``: what the request asked for, for the message); a larger answer is one
        line, read no further.  ``sse``: a successful answer is a stream of server-sent events,
        read whole (a list of their JSON objects): a streamed request is one a server stops
        working on as soon as it is cancelled (llama.cpp does not notice a non-streamed request
        go)."""
        deadline = self.timeout if timeout is None else float(timeout)
        import httpx

        client = self._get_client()
        assert self._sem is not None
        url = self.shown + path
        why = ""
        async with self._sem:
            for attempt in range(self.retries + 1):
                wait = self.backoff * 2**attempt
                try:
                    self.stats["requests"] += 1
                    async with asyncio.timeout(deadline):  # the whole answer, not per byte
                        status, data, headers = await self._exchange(
                            client, method, path, body, limit, asked or f"{method} {path}"
                        )
                except httpx.ConnectTimeout:
                    why = f"no connection within {self.connect_timeout:g} s"
                    if not retry_connect:
                        raise ServerError(
                            f"cannot connect to the server at {self.shown}: {why} (is it "
                            "running, and reachable from here?)"
                        ) from None
                except (httpx.TimeoutException, TimeoutError):
                    why = f"no answer within {deadline:g} s"
                except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
                    why = f"connection failed ({self._cause(exc)})"
                    if not retry_connect and isinstance(exc, httpx.ConnectError):
                        raise ServerError(
                            f"cannot connect to the server at {self.shown}: {self._cause(exc)} "
                            "(is it running?)"
                        ) from None
                except (httpx.HTTPError, httpx.InvalidURL) as exc:
                    raise ServerError(f"{url}: {self.hide(exc)}") from None
                else:
                    if sse and status == 200:
                        return status, _parse_sse(data, url)
                    if status not in retry_status:
                        return status, self.json(status, data, url)
                    why = f"HTTP {status} ({self.message(self.json(status, data, url))})"
                    after = _retry_after(headers.get("retry-after"))
                    if after is not None:
                        wait = after
                if attempt < self.retries:
                    self.stats["retries"] += 1
                    await asyncio.sleep(min(wait, MAX_BACKOFF))
        raise ServerUnavailable(
            f"the server at {self.shown} failed {self.retries + 1} times on {path}: {why}; "
            "rerun the same command to resume"
        )

    async def _exchange(
        self, client, method: str, path: str, body: dict | None, limit: int, asked: str
    ) -> tuple[int, bytes, Any]:
        """(status, the answer's bytes, headers), read as they stream in and refused past
        ``limit`` bytes (after decompression: the bytes held)."""
        chunks: list[bytes] = []
        size = 0
        async with client.stream(method, path, json=body) as r:
            async for chunk in r.aiter_bytes():
                size += len(chunk)
                if size > limit:
                    raise ServerError(
                        f"the server at {self.shown} sent more than {_size(limit)} for {asked} "
                        f"({method} {path}): refused, read no further (no answer to it is that "
                        "large)"
                    )
                chunks.append(chunk)
            return r.status_code, b"".join(chunks), r.headers

    async def post(self, path: str, body: dict, limit: int, asked: str, sse: bool = False) -> Any:
        """The JSON of a successful POST (``sse``: of each event of its stream); an error answer
        is one line."""
        status, out = await self.request("POST", path, body, limit=limit, asked=asked, sse=sse)
        if status != 200:
            raise ServerError(f"{self.shown}{path}: HTTP {status}: {self.message(out)}")
        return out

    def post_all(self, path: str, bodies: Sequence[dict], limits: Sequence[tuple[int, str]]):
        """POST every body concurrently (bounded; ``limits``: each answer's bound and what its
        request asked for); answers in order.  The first failure cancels the rest and is
        raised."""

        async def go():
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(self.post(path, b, *lim)) for b, lim in zip(bodies, limits)]
            return [t.result() for t in tasks]

        try:
            return self.run(go)
        except ExceptionGroup as eg:
            raise _first(eg) from None

    def _cause(self, exc: BaseException) -> str:
        """What went wrong underneath an HTTP client error, in the words that name it: TLS spoken
        to a plain-HTTP server, a host name that does not resolve, the operating system's words
        ("connection refused"), else the error's own."""
        e: BaseException | None = exc
        while e is not None:
            if isinstance(e, ssl.SSLError):
                reason = getattr(e, "reason", None) or type(e).__name__
                hint = ""
                if isinstance(e, ssl.SSLCertVerificationError):
                    hint = f": its certificate is not trusted ({self.hide(e.verify_message, 80)})"
                elif self.shown.startswith("https://"):
                    hint = (
                        "; if the server speaks plain HTTP, use "
                        f"http://{self.shown.removeprefix('https://')}"
                    )
                return f"TLS handshake failed ({reason}){hint}"
            if isinstance(e, socket.gaierror):
                host = urlsplit(self.shown).hostname or "?"
                return f"unknown host {host} ({self.hide(e.strerror or e, 80).lower()})"
            if isinstance(e, OSError) and e.errno is not None and e.errno > 0:
                return os.strerror(e.errno).lower()
            e = e.__cause__ or e.__context__
        return self.hide(exc) or type(exc).__name__


def _parse_sse(data: bytes, url: str) -> list:
    """The JSON objects of a stream of server-sent events (``data: {...}`` lines; ``[DONE]``
    ends it)."""
    events = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        try:
            events.append(json.loads(payload))
        except ValueError:
            raise ServerError(f"{url}: a streamed event that is not JSON") from None
    return events


def _url_secrets(url: str) -> list[str]:
    """What of a URL's credentials a message must never show: the password as written, as the
    client decodes it, and the basic-authentication header made of them (base64)."""
    import base64
    from urllib.parse import unquote

    parts = urlsplit(url)
    if parts.username is None:
        return []
    user, password = unquote(parts.username), unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return [s for s in (parts.password, password, token) if s]


def _asked(max_new: int) -> str:
    return f"a request of {max_new} token{'s' if max_new != 1 else ''}"


def _size(n: int) -> str:
    return f"{n / (1 << 20):.4g} MiB" if n >= 1 << 20 else f"{n / 1024:.4g} KiB"


def _first(eg: BaseExceptionGroup) -> BaseException:
    exc: BaseException = eg
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def _message(out: Any) -> str:
    """The error message of a server's JSON error answer (OpenAI, FastAPI and llama.cpp forms)."""
    if isinstance(out, dict):
        err = out.get("error", out.get("detail", out.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            return _one_line(err) or "no message"
    return _one_line(out) or "no message"


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def normalise_base_url(url: str) -> str:
    """``http://host:port`` from what a user types (a trailing ``/`` or ``/v1`` dropped);
    anything a client could not connect to is one line (:func:`~.endpoint.check_base_url`)."""
    try:
        return check_base_url(url)
    except MarsError as exc:
        raise ServerError(str(exc)) from None


# ---------------------------------------------------------------------------------------------
# The backend


class ServerBackend(TokenProbing, Backend):
    """A running inference server behind the generation interface (see the module docstring).

    Args:
        model: the served model name (``GET /v1/models``); None when the server serves one.
        base_url: the server, ``http://HOST:PORT`` (a trailing ``/v1`` is dropped).
        server: ``"auto"`` (from ``owned_by``; a server of another kind that refuses token-id
            prompts: ``"openai"``), ``"llama.cpp"``, ``"vllm"``, ``"sglang"`` (token-id prompts)
            or ``"openai"`` (an OpenAI-compatible ``/v1/completions`` given text prompts).
        api_key_env: environment variable holding the API key (sent as a bearer token).
        concurrency: requests in flight at most (default: llama.cpp's slots, 1 for
            llama-cpp-python's server, else 32).
        timeout: seconds one request may take (a generation of a checkpoint's tokens).
        connect_timeout: seconds to open a connection.
        retries: further tries of a request that timed out, lost its connection or got
            408/429/5xx; backoff 0.5 s, 1 s, 2 s, … (at most :data:`MAX_BACKOFF`).
        tokenizer: the model's tokenizer (model directory, hub id or GGUF file); default: the
            model path the server reports, else the served name.
        temperature, top_p, top_k, min_p: sampling (``top_k`` 0/None: off).
        max_tokens: token cap of a trace.
        segment: a generation request never crosses a multiple of this many tokens (None: requests
            end at the checkpoints only).  A trace depends on where its requests start (each has
            its own seed): generations cut alike — inline at spacing S, or ``--probe none`` with
            ``segment`` S — give the same traces.
        probe_max_new_tokens, probe_suffix: the probes (spec: 50 tokens, the reference suffix).
        generator_tokenizer: the probe stage only, as for the other token engines.
        prompt_template, system_prompt: the chat prompt.
        transport: an ``httpx`` async transport to use instead of the network (tests).
    """

    name = "server"

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        server: str = "auto",
        api_key_env: str = "MARS_API_KEY",
        concurrency: int | None = None,
        timeout: float = 600.0,
        connect_timeout: float = 10.0,
        retries: int = 4,
        tokenizer: Any = None,
        temperature: float = 0.6,
        top_p: float = 0.95,
        top_k: int | None = 20,
        min_p: float | None = None,
        max_tokens: int = 32768,
        segment: int | None = None,
        probe_max_new_tokens: int = PROBE_MAX_NEW_TOKENS,
        probe_suffix: str = PROBE_SUFFIX,
        generator_tokenizer: Any = None,
        prompt_template: str = DEFAULT_PROMPT_TEMPLATE,
        system_prompt: str | None = None,
        transport: Any = None,
    ):
        if base_url is None:
            raise ServerError("--backend server needs --base-url (e.g. http://127.0.0.1:8080)")
        if temperature < 0 or not 0 < top_p <= 1 or (top_k is not None and top_k < 0):
            raise ServerError(
                f"bad sampling settings: temperature={temperature}, top_p={top_p}, top_k={top_k}"
            )
        if min_p is not None and not 0 <= min_p <= 1:
            raise ServerError(f"bad sampling settings: min_p={min_p} (must be in [0, 1])")
        if max_tokens <= 0 or probe_max_new_tokens <= 0 or (segment is not None and segment <= 0):
            raise ServerError("max_tokens, segment and probe_max_new_tokens must be positive")
        if concurrency is not None and concurrency < 1:
            raise ServerError(f"--concurrency {concurrency}: must be at least 1")
        if not timeout > 0 or not connect_timeout > 0:
            raise ServerError(f"--timeout {timeout}: must be positive")
        if retries < 0:
            raise ServerError(f"retries={retries}: must be 0 or more")
        if server != "auto" and server not in PROTOCOLS:
            raise ServerError(f"server={server!r}: one of auto, {', '.join(PROTOCOLS)}")
        if "{question}" not in prompt_template:
            raise ServerError("prompt_template must contain '{question}'")
        if not probe_suffix:
            raise ServerError("the probe suffix must not be empty")
        try:
            import httpx  # noqa: F401
        except ImportError as exc:
            raise ImportError(f"the server backend needs httpx: {install_hint('server')}") from exc
        url = normalise_base_url(base_url)
        #: the server as messages name it: credentials in its URL hidden
        self.base_url = redact(url)
        self.sampling = Sampling(float(temperature), float(top_p), int(top_k or 0), min_p)
        self.max_tokens = int(max_tokens)
        self.segment = None if segment is None else int(segment)
        self.probe_max_new_tokens = int(probe_max_new_tokens)
        self.probe_suffix = str(probe_suffix)
        self.generator_tokenizer = generator_tokenizer
        self.prompt_template = prompt_template
        self.system_prompt = system_prompt
        self.api_key_env = api_key_env
        try:  # one line, before any request, if a header cannot carry it
            key = api_key(api_key_env)
        except MarsError as exc:
            raise ServerError(str(exc)) from None
        if key and urlsplit(url).username is not None:
            raise ServerError(
                f"--base-url {self.base_url} holds credentials and ${api_key_env} a key: both "
                "would go in the one Authorization header; give one of them"
            )
        self.http = Http(
            url,
            headers={"Authorization": f"Bearer {key}"} if key else None,
            timeout=timeout,
            connect_timeout=connect_timeout,
            retries=retries,
            concurrency=concurrency or 32,
            transport=transport,
            secrets=[key, *_url_secrets(url)],
        )
        #: server-reported token counts, summed (generation and probes)
        self.stats = {
            "generate_calls": 0,
            "generate_prompt_tokens": 0,
            "generate_cached_tokens": 0,
            "generate_completion_tokens": 0,
            "probe_calls": 0,
            "probe_prompt_tokens": 0,
            "probe_cached_tokens": 0,
            "probe_completion_tokens": 0,
            # probes: prompt tokens the server had seen before as a prefix (prompt + the trace so
            # far), and how many of them it served from its cache
            "probe_reusable_tokens": 0,
            "probe_reused_tokens": 0,
            "missing_confs": 0,
            # text-prompt servers: their own count of the tokens they generated (the completion
            # tokens above are ours, of the text they returned)
            "generate_server_tokens": 0,
            "probe_server_tokens": 0,
            # text-prompt servers: confidences not of the token's own top 20 (``exact``)
            "approx_confs": 0,
        }
        #: text-prompt servers: the BOS token the server puts before every text prompt (None:
        #: none, or not known), and why it refused a token-id prompt (None: not asked)
        self.server_bos: int | None = None
        self.token_ids_refused: str | None = None
        self._said_uncached = False
        try:
            self._connect(model, server, concurrency, tokenizer)
        except ServerError as exc:  # a refusal may quote the server, which may echo the key
            self.http.close()
            raise ServerError(self.http.hide(exc, 1000)) from None
        except BaseException:
            self.http.close()
            raise

    # -- connect -----------------------------------------------------------------------------

    def _get(self, path: str, *, required: bool) -> Any:
        status, out = self.http.run(
            lambda: self.http.request(
                "GET", path, retry_connect=False, timeout=min(INFO_TIMEOUT, self.http.timeout)
            )
        )
        if status == 200:
            return out
        if status in (401, 403):
            raise ServerError(
                f"the server at {self.base_url} refused the API key (HTTP {status}): set "
                f"{self.api_key_env}"
            )
        if required:
            raise ServerError(
                f"{self.base_url}{path}: HTTP {status} ({self.http.message(out)}): not an "
                "OpenAI-compatible server at this URL?"
            )
        return None

    def _connect(self, model, server, concurrency, tokenizer) -> None:
        listing = self._get("/v1/models", required=True)
        data = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(data, list) or not data:
            raise ServerError(f"{self.base_url}/v1/models lists no model")
        served = {str(m.get("id")): m for m in data if isinstance(m, dict)}
        names = sorted(served)[:20]
        if model is None:
            if len(served) != 1:
                listed = ", ".join(self.http.hide(shown(m, 60)) for m in names)
                raise ServerError(f"the server serves [{listed}]: pass --model NAME")
            model = next(iter(served))
        if model not in served:
            raise ServerError(
                f"--model {shown(model)} is not served at {self.base_url} (served: "
                f"{', '.join(self.http.hide(m, 60) for m in names)})"
            )
        self.model = str(model)
        card = served[self.model]
        detect = server == "auto" and str(card.get("owned_by", "")) not in OWNED_BY
        if server == "auto":
            # llama.cpp, vLLM and SGLang say who they are; any other server is asked at the trial
            # whether it takes token-id prompts (llama-cpp-python's, owned_by "me", does not)
            server = OWNED_BY.get(str(card.get("owned_by", "")), OpenAITextProtocol.kind)
        self.protocol = PROTOCOLS[server](self.model)
        report: dict[str, Any] = {"model": card}
        for path in self.protocol.info_paths():
            out = self._get(path, required=False)
            if isinstance(out, dict):
                report[path] = out
        self.report = report
        self.context_len = self.protocol.context_length(report)
        if concurrency is None and server == "llama.cpp":
            slots = _count(_dig(report, "/props", "total_slots"))
            if slots:
                self.http.limit(slots)
        if concurrency is None and card.get("owned_by") == LLAMA_CPP_PYTHON_OWNER:
            # llama-cpp-python runs one request at a time: more in flight only queue, and the
            # order they come in sets its cache state, hence its logits (a run would not repeat)
            self.http.limit(1)
        if detect:  # before the tokenizer: a server to refuse is refused at once
            self.token_ids_refused = self._token_ids_refused(str(card.get("owned_by", "")))
        self._load_tokenizer(tokenizer)
        self._check_tokenizer()
        if self.protocol.prompt_mode == TEXT:
            self._check_text_tokenizer()
            self._trial_text()
        else:
            self._trial()
        if not self.reproducible_seeds():
            log.warning("server backend: %s", self.describe()["reproducible"])

    def _load_tokenizer(self, tokenizer) -> None:
        """The model's tokenizer: an object given, ``server`` (the server's own), a path or hub id
        (transformers), by default the model path the server reports, else the served name.
        What a source needs is checked first (:mod:`mars.engines.tokenizer`); a default source
        whose packages are missing gives way to the server's own tokenizer where it has one."""
        #: where the tokenizer came from (a path, hub id or ``server``; None: an object given)
        self.tokenizer_source: str | None = None
        if tokenizer is not None and not isinstance(tokenizer, (str, os.PathLike)):
            self.tokenizer = tokenizer
        else:
            self._load_tokenizer_from(tokenizer)
        self.suffix_ids = encode_suffix(self.tokenizer, self.probe_suffix)
        try:  #: the ids the tokenizer has (0..vocab_size - 1), None when it cannot say
            self.vocab_size: int | None = len(self.tokenizer)
        except (TypeError, MarsError):
            self.vocab_size = None

    def _load_tokenizer_from(self, tokenizer) -> None:
        """The tokenizer of a source named (a path, hub id or ``server``), or the default one."""
        given = tokenizer is not None
        if tokenizer is None:
            reported = self.protocol.model_path(self.report)
            tokenizer = reported if reported and os.path.exists(reported) else self.model
        source = os.fspath(tokenizer)
        missing = missing_modules(tokenizer_needs(source))
        if missing and not given and self.protocol.kind in SERVER_TOKENIZERS:
            log.info(
                "server backend: the tokenizer is the server's own (/tokenize, /detokenize): %s "
                "needs %s, not installed",
                describe_source(source),
                ", ".join(missing),
            )
            source = SERVER
        elif missing:
            raise ServerError(
                f"{describe_source(source)} needs {', '.join(missing)}, which "
                f"{'is' if len(missing) == 1 else 'are'} not installed: install "
                f"{'it' if len(missing) == 1 else 'them'}, or pass tokenizer=server (the "
                "server's own, llama.cpp and vLLM) or tokenizer=PATH of a tokenizer folder in "
                "MARS_BACKEND_OPTIONS"
            )
        if source == SERVER:
            if self.protocol.prompt_mode == TEXT:
                raise ServerError(
                    "tokenizer=server: a server that takes text prompts only needs the model's "
                    "tokenizer here (pass tokenizer=PATH)"
                )
            self.tokenizer = ServerTokenizer(
                self.protocol.kind, self.model, self._tokenizer_request, self.report
            )
            self.tokenizer_source = SERVER
        else:
            try:
                if source.lower().endswith(".json") and os.path.isfile(source):
                    self.tokenizer = load_local(source)  # a tokenizers file
                else:
                    self.tokenizer = load_tokenizer(source)
            except ImportError as exc:
                raise ServerError(
                    f"{describe_source(source)} cannot be loaded ({_one_line(exc, 120)})"
                ) from None
            except (OSError, ValueError) as exc:
                raise ServerError(
                    f"cannot load the tokenizer of {self.model!r} from {source!r} "
                    f"({_one_line(exc, 120)}): pass tokenizer=PATH (a model directory, "
                    "tokenizer.json or GGUF file) or tokenizer=server in MARS_BACKEND_OPTIONS"
                ) from None
            self.tokenizer_source = os.path.abspath(source) if os.path.exists(source) else source

    def _tokenizer_request(self, path: str, body: dict) -> tuple[int, Any]:
        return self.http.run(lambda: self.http.request("POST", path, body, timeout=INFO_TIMEOUT))

    def _check_tokenizer(self) -> None:
        """The tokenizer must split a sample as the server does (when the server can say)."""
        path, body = self.protocol.tokenize(TOKENIZER_SAMPLE)
        status, out = self.http.run(
            lambda: self.http.request(
                "POST", path, body, timeout=min(INFO_TIMEOUT, self.http.timeout)
            )
        )
        if status != 200 or not isinstance(out, dict) or not isinstance(out.get("tokens"), list):
            self.tokenizer_checked = False
            return
        theirs = [
            _int(t.get("id") if isinstance(t, dict) else t, "a token id") for t in out["tokens"]
        ]
        ours = list(self.tokenizer.encode(TOKENIZER_SAMPLE, add_special_tokens=False))
        special = set(getattr(self.tokenizer, "all_special_ids", None) or ()) | {
            getattr(self.tokenizer, "bos_token_id", None)
        }
        if self.protocol.prompt_mode == TEXT and theirs[1:] == ours and theirs[0] in special:
            # llama-cpp-python tokenizes as it tokenizes a prompt: with the BOS the model adds
            self.server_bos = theirs[0]
            theirs = theirs[1:]
        if theirs != ours:
            k = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), None)
            k = min(len(theirs), len(ours)) if k is None else k
            raise ServerError(
                f"the tokenizer {self.tokenizer_source or 'given'} does not tokenize like the "
                f"server's model {self.model!r} (they part at token {k}): pass tokenizer=PATH "
                "of the served model in MARS_BACKEND_OPTIONS"
            )
        self.tokenizer_checked = True

    def _trial(self) -> None:
        """Two tokens with top-20 log-probabilities from a token-id prompt: the server takes
        token ids and returns what the traces need."""
        ids = self.prompt_ids("What is 1 + 1?")
        body = self.protocol.body(ids, 2, self.sampling, 0, logprobs=True)
        status, out = self.http.run(
            lambda: self.http.request(
                "POST",
                self.protocol.path,
                body,
                limit=answer_limit(2, True, ids),
                asked=_asked(2),
            )
        )
        if status != 200:
            raise ServerError(
                f"the {self.protocol.kind} server at {self.base_url} refused a token-id prompt "
                f"with {CONF_TOP_K} top log-probabilities (HTTP {status}: {self.http.message(out)})"
                + (
                    ": start vLLM with --max-logprobs 20 or more"
                    if self.protocol.kind == "vllm" and "logprob" in self.http.message(out).lower()
                    else ""
                )
            )
        c = self.read(out, 2, logprobs=True)
        self.reports_cached = c.cached_tokens is not None
        if not self.reports_cached:
            log.warning(
                "server backend: the server reports no cached prompt tokens (vLLM: start it with "
                "--enable-prompt-tokens-details); probe records will not have them"
            )

    def _check_text_tokenizer(self) -> None:
        """Text prompts need a tokenizer that gives back the text it encodes, piece by piece: a
        trace's text is decoded from its ids to make the next request, and the answers' text is
        encoded and its tokens' characters found by decoding them."""
        tok = self.tokenizer
        assert isinstance(self.protocol, OpenAITextProtocol)
        self.protocol.tokenizer = tok
        self.protocol.top_k = self.sampling.top_k
        if getattr(tok, "eos_token_id", None) is None:
            raise ServerError(
                "the tokenizer has no end-of-text token (eos_token_id): with a text-prompt "
                "server the end of a trace is written as that token"
            )
        ids = list(tok.encode(TOKENIZER_SAMPLE, add_special_tokens=False))
        _, whole = _token_ends(tok, ids)
        for k in [0, *(k + 1 for k, w in enumerate(whole) if w)]:
            head = tok.decode(ids[:k], skip_special_tokens=True)
            tail = tok.decode(ids[k:], skip_special_tokens=True)
            again = tok.decode(tok.encode(tail, add_special_tokens=False), skip_special_tokens=True)
            if head + tail != TOKENIZER_SAMPLE or again != tail:
                raise ServerError(
                    f"the tokenizer {self.tokenizer_source or 'given'} does not give back the "
                    f"text it encodes when cut at token {k} (a SentencePiece tokenizer's leading "
                    "space?): the server takes only text prompts, and a trace's text would change "
                    "at every request"
                )

    def _token_ids_refused(self, owner: str) -> str:
        """A server of unknown kind: a one-token request from a token-id prompt (ids any
        vocabulary has; a 500 not tried again: llama-cpp-python answers a prompt that is not
        text with a 500).  One that takes it is refused (which server it is decides how token ids
        are read back); the reason one refuses it is returned."""
        body = {"model": self.model, "prompt": [1, 2, 3], "max_tokens": 1, "temperature": 0.0}
        status, out = self.http.run(
            lambda: self.http.request(
                "POST",
                OpenAITextProtocol.path,
                body,
                retry_status=RETRY_STATUS - {500},
                limit=answer_limit(1, False),
                asked="a request of 1 token",
            )
        )
        if status == 200:
            raise ServerError(
                f"the server at {self.base_url} (owned_by {owner!r}) takes token-id prompts but "
                "does not say which server it is: pass server=vllm, sglang or llama.cpp in "
                "MARS_BACKEND_OPTIONS if it is one of them, or server=openai to send text prompts"
            )
        return f"HTTP {status}: {self.http.message(out)}"

    def _trial_text(self) -> None:
        """Two tokens with top-20 log-probabilities from a text prompt: the server takes text
        and returns what the traces need (20 log-probabilities for a token, text offsets)."""
        p = self.protocol
        body = p.body(self.prompt_text("What is 1 + 1?"), 2, self.sampling, 0, logprobs=True)
        status, out = self.http.run(
            lambda: self.http.request(
                "POST", p.path, body, limit=answer_limit(2, True, body["prompt"]), asked=_asked(2)
            )
        )
        refused = self.token_ids_refused
        if status != 200:
            raise ServerError(
                f"the server at {self.base_url} refused "
                + (f"a token-id prompt ({refused}) and " if refused else "")
                + f"a text prompt with {CONF_TOP_K} top log-probabilities (HTTP {status}: "
                f"{self.http.message(out)})"
            )
        c = self.read(out, 2, logprobs=True)
        top = out["choices"][0]["logprobs"]["top_logprobs"]
        most = max((len(t) for t in top if isinstance(t, dict)), default=0)
        if most < CONF_TOP_K:
            raise ServerError(
                f"/v1/completions: {most} top log-probabilities for a token, not {CONF_TOP_K} "
                "(the confidence is the mean of 20)"
            )
        self.reports_cached = c.cached_tokens is not None
        if not self.tokenizer_checked:  # no tokenize endpoint: the prompt's count at least
            ours = len(self.prompt_ids("What is 1 + 1?"))
            if c.prompt_tokens is not None and c.prompt_tokens not in (ours, ours + 1):
                raise ServerError(
                    f"the tokenizer {self.tokenizer_source or 'given'} counts {ours} tokens in "
                    f"a prompt the server counts {c.prompt_tokens}: pass tokenizer=PATH of the "
                    "served model in MARS_BACKEND_OPTIONS"
                )
            log.warning(
                "server backend: the server has no tokenize endpoint: the tokenizer %s is "
                "checked against the server's prompt token count only",
                self.tokenizer_source or "given",
            )
        log.info(
            "server backend: the server at %s takes text prompts only (%s): each request's "
            "prompt goes as text, and the answers' text is tokenized here",
            self.base_url,
            refused or "server=openai",
        )

    def prompt_text(self, question: str) -> str:
        """The chat-templated prompt as text, as the token-id prompt is built; without its BOS
        when the server adds one to every text prompt (so the model sees it once)."""
        text = build_prompt_text(self.tokenizer, question, self.prompt_template, self.system_prompt)
        bos = self.server_bos
        if bos is not None and self.prompt_ids(question)[:1] == [bos]:
            mark = self.tokenizer.decode([bos], skip_special_tokens=False)
            if mark and text.startswith(mark):
                text = text[len(mark) :]
        return text

    def reproducible_seeds(self) -> bool:
        return not self.protocol.reproducible(self.report).startswith("no")

    # -- interface -------------------------------------------------------------------------------

    def start(
        self, problem: Problem, n_traces: int, seed: int, first_trace: int = 0
    ) -> ServerTraceBatch:
        self.check_start(n_traces, seed, first_trace)
        cls = TextTraceBatch if self.protocol.prompt_mode == TEXT else ServerTraceBatch
        return cls(self, problem, n_traces, seed, first_trace)

    def context_budget(self) -> tuple[int, str] | None:
        if not self.context_len:
            return None
        return self.context_len, f"the server's context length {self.context_len}"

    def check_context(self, problem: Problem) -> None:
        check_context(self, problem)

    def model_source(self) -> tuple[str | None, str | None]:
        return None, None

    def prompt_ids(self, question: str) -> list[int]:
        return build_prompt_ids(self.tokenizer, question, self.prompt_template, self.system_prompt)

    def describe(self) -> dict:
        """Provenance for a pool manifest: what shapes the traces (not where the server runs, so
        a run resumes against the same server restarted elsewhere)."""
        p = self.protocol
        s = self.sampling
        text = p.prompt_mode == TEXT
        server: dict[str, Any] = {
            "kind": p.kind,
            "version": p.version(self.report),
            "request": f"POST {p.path}, {'text' if text else 'token-id'} prompts, one request "
            "per trace or probe",
            "generation_requests": "end at every checkpoint"
            + ("" if self.segment is None else f" and every multiple of {self.segment} tokens"),
            "cached_tokens": "reported" if self.reports_cached else "not reported",
        }
        sampling: dict[str, Any] = {
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k,
            "min_p": s.min_p,
            "seed": (
                f"{p.seeds}: (seed, qid, trace_idx, start) per generation request, "
                "(seed, qid, trace_idx, position) per probe"
            ),
        }
        if text:
            server["tokenization"] = (
                "each request is the prompt's text + the trace's text so far, tokenized by the "
                "server; token ids, lengths and checkpoints are the returned text tokenized here, "
                "confidences those of the server's tokens that match ours (else NaN)"
            )
            server["bos"] = (
                "added by the server to every prompt"
                if self.server_bos is not None
                else "none added"
                if self.tokenizer_checked
                else "not known"
            )
            sampling["order"] = getattr(p, "sampler_order", "the server's")
        return {
            "backend": self.name,
            "model": self.model,
            "model_path": None,
            "tokenizer": self.tokenizer_source,
            "tokenizer_vocab": self.vocab_digest(),
            "prompt_mode": p.prompt_mode,
            "server": server,
            "sampling": sampling,
            "reproducible": p.reproducible(self.report),
            "logprobs": p.logprobs_mode,
            "conf": f"-mean(top-{CONF_TOP_K} logprobs), 3 decimals, float16"
            + (
                "; text prompts: of the server's token with the same text when its top 20 can be "
                "told (no two keys shared), else that of the server's token over the token's last "
                "character, or -mean of the fewer entries sent; the end of text takes the token's "
                "before it (stats approx_confs counts them)"
                if text
                else ""
            ),
            "probe_max_new_tokens": self.probe_max_new_tokens,
            "probe_suffix": self.probe_suffix,
            "prompt_template": self.prompt_template,
            "system_prompt": self.system_prompt,
        }

    def describe_probe(self) -> dict:
        return {
            **self.describe(),
            "probe_order": "each trace's probes in position order, traces concurrently",
            "probe_input": self.probe_input(),
        }

    # -- requests ------------------------------------------------------------------------------

    def complete(
        self, requests: Sequence[tuple[list[int] | str, int, int | None]], logprobs: bool
    ) -> list[Completion]:
        """``[(prompt, max_new, seed), …]`` → the completions, concurrently (bounded); a prompt
        is token ids, or text for a text-prompt server."""
        p = self.protocol
        bodies = [p.body(ids, m, self.sampling, s, logprobs) for ids, m, s in requests]
        limits = [(answer_limit(m, logprobs, prompt), _asked(m)) for prompt, m, _ in requests]
        outs = self.http.post_all(p.path, bodies, limits)
        return [self.read(o, m, logprobs) for o, (_, m, _) in zip(outs, requests)]

    def read(self, out: Any, max_new: int, logprobs: bool) -> Completion:
        """A completion from a server's answer: read by its protocol, every token id checked
        against the tokenizer's vocabulary (an id it does not have would be stored, and the probe
        stage would crash on it).  A refusal quoting the answer hides what the server echoes of
        the key."""
        try:
            c = self.protocol.parse(out, max_new, logprobs)
        except ServerError as exc:
            raise ServerError(self.http.hide(exc, 1000)) from None
        n = self.vocab_size
        bad = next((t for t in c.ids if t < 0 or (n is not None and t >= n)), None)
        if bad is not None:
            raise ServerError(
                f"the server at {self.base_url} answered token id {bad}, outside the vocabulary "
                f"of the tokenizer (0..{n - 1 if n is not None else '…'})"
            )
        return c

    def count(self, kind: str, c: Completion, taken: int | None = None) -> None:
        """Add a request's counts to :attr:`stats` (``taken``: the tokens of the answer a trace
        kept, when it kept fewer)."""
        n = c.completion_tokens if taken is None else int(taken)
        self.stats[f"{kind}_prompt_tokens"] += c.prompt_tokens or 0
        self.stats[f"{kind}_cached_tokens"] += c.cached_tokens or 0
        self.stats[f"{kind}_completion_tokens"] += n
        if c.server_tokens is not None:
            self.stats[f"{kind}_server_tokens"] += c.server_tokens
        if c.confs is not None:
            self.stats["missing_confs"] += int(np.isnan(np.asarray(c.confs[:n], float)).sum())
        if c.exact is not None:
            self.stats["approx_confs"] += n - sum(c.exact[:n])

    def probe_result(
        self, c: Completion, request_len: int, conf: float | None, reusable: int = 0
    ) -> ProbeResult:
        """A probe's record; ``reusable``: its prompt tokens the server has seen before as a
        prefix (:meth:`check_probe_cache`)."""
        self.count("probe", c)
        if reusable and c.cached_tokens is not None:
            self.stats["probe_reusable_tokens"] += int(reusable)
            self.stats["probe_reused_tokens"] += min(int(c.cached_tokens), int(reusable))
        return ProbeResult(
            answer=parse_probe(c.text),
            raw_text="\\boxed{" + c.text,
            conf=conf,
            prompt_tokens=c.prompt_tokens if c.prompt_tokens is not None else request_len,
            cached_tokens=c.cached_tokens,
            generated_tokens=c.completion_tokens,
        )

    def check_probe_cache(self) -> None:
        """Say once, in one line, when the probes' prompts come back mostly uncached: the server
        keeps no prefix cache (vLLM without ``--enable-prefix-caching``, a model whose server
        cannot cache prefixes) or evicts it, and every probe re-reads its whole trace."""
        s = self.stats
        seen, reused = s["probe_reusable_tokens"], s["probe_reused_tokens"]
        if self._said_uncached or seen < UNCACHED_MIN_TOKENS or reused >= UNCACHED_SHARE * seen:
            return
        self._said_uncached = True
        log.warning(
            "server backend: the server's prefix cache served %.0f %% of the probes' prompt "
            "tokens it had seen before (%d of %d): each probe re-reads its trace (start vLLM "
            "with --enable-prefix-caching; llama.cpp: --parallel at least the traces in flight; "
            "docs/backends.md)",
            100 * reused / seen,
            reused,
            seen,
        )

    def reprobe(
        self,
        problem: Problem,
        traces: Sequence[StoredTrace],
        positions: Sequence[np.ndarray],
        generator: GeneratorInfo,
    ) -> list[list[ProbeResult]]:
        """Probe stored traces: each trace's probes one after another in position order (its
        next prefix extends the one the server just cached), the traces concurrently; seeds
        (seed, qid, trace_idx, position) as inline probes."""
        gen, prompt, plan = self.probe_plan(problem, traces, positions, generator.manifest)
        seed = int(generator.manifest.get("seed", 0))
        out: list[list[Any]] = [[None] * len(p) for p in positions]
        p = self.protocol
        text = self.prompt_text(problem.question) if p.prompt_mode == TEXT else None

        def request(t: StoredTrace, d: int, pre: np.ndarray) -> tuple[list[int] | str, int]:
            """(the probe's prompt, its length in our tokens)."""
            n = len(prompt) + len(pre) + len(self.suffix_ids)
            if text is None:
                return prompt + [int(x) for x in pre] + self.suffix_ids, n
            if gen.same_ids:  # a character the cut at d splits is left out, as in its text
                assert t.token_ids is not None
                trace = prefix_text(self.tokenizer, t.token_ids, d)
            else:
                trace = self.tokenizer.decode([int(x) for x in pre], skip_special_tokens=True)
            return text + trace + self.probe_suffix, n

        async def chain(i: int) -> None:
            t = traces[i]
            before = 0  # the prefix the previous probe of this trace sent (none: nothing known)
            for k, d in enumerate(np.asarray(positions[i]).tolist()):
                req, n = request(t, d, plan[i][k])
                m = self.probe_max_new_tokens
                body = p.body(
                    req, m, self.sampling, probe_seed(seed, problem.qid, t.trace_idx, d), False
                )
                limit = answer_limit(m, False, req)
                answer = await self.http.post(p.path, body, limit, _asked(m))
                c = self.read(answer, m, False)
                conf = None if t.confs is None else window_conf(t.confs, d)
                out[i][k] = self.probe_result(c, n, conf, before)
                before = len(prompt) + len(plan[i][k])

        async def go():
            async with asyncio.TaskGroup() as tg:
                for i, pos in enumerate(positions):
                    if len(pos):
                        tg.create_task(chain(i))

        try:
            self.http.run(go)
        except ExceptionGroup as eg:
            raise _first(eg) from None
        self.stats["probe_calls"] += 1
        self.check_probe_cache()
        return out

    def close(self) -> None:
        self.http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ServerTraceBatch(TokenTraceBatch):
    """``n`` traces of one question, continued checkpoint by checkpoint through the server."""

    backend: ServerBackend

    def __init__(self, backend, problem: Problem, n: int, seed: int, first_trace: int):
        super().__init__(backend, problem, n, seed, first_trace)
        #: per trace: log-probabilities the server left out for no reason it has
        #: (:meth:`_count_missing`), which :meth:`_check_stood_in` bounds
        self._missing = np.zeros(self.n, np.int64)

    def _trace(self, j: int) -> int:
        return self.first_trace + int(j)

    def advance(self, target: int) -> None:
        target = min(int(target), self.backend.max_tokens)
        while self._advance_once(target):
            pass

    def _advance_once(self, target: int) -> bool:
        """One request per running trace below ``target`` (up to it, or to the next multiple of
        ``segment``); False when none is left."""
        be = self.backend
        lengths = self.lengths
        run = np.flatnonzero(~self.ended & (lengths < target)).tolist()
        if not run:
            return False
        t0 = time.perf_counter()
        reqs = []
        for j in run:
            n = int(lengths[j])
            end = target if be.segment is None else min(target, (n // be.segment + 1) * be.segment)
            seed = generation_seed(self.seed, self.problem.qid, self._trace(j), n)
            reqs.append((self.prompt + self._ids[j], end - n, seed))
        outs = be.complete(reqs, logprobs=True)
        be.stats["generate_calls"] += 1
        for j, c in zip(run, outs):
            self._ids[j].extend(c.ids)
            assert c.confs is not None
            self._add_confs(j, c.confs)
            self._count_missing(j, c.confs)
            if c.finished:
                self._eos[j] = True
            be.count("generate", c)
        self._check_stood_in()
        log.debug("to %d: %d requests, %.2f s", target, len(run), time.perf_counter() - t0)
        return True

    def _count_missing(self, j: int, confs: Sequence[float]) -> None:
        """Count the log-probabilities trace ``j``'s last request left out (its last
        ``len(confs)`` tokens) that the server had no reason to leave out.  llama.cpp leaves out
        those of a token after which the text ends inside a multi-byte character (its
        documented behaviour: text in a script the vocabulary splits into bytes has many);
        anything else missing is the server's fault."""
        ids, base = self._ids[j], len(self._ids[j]) - len(confs)
        inside = self.backend.protocol.kind == LlamaCppProtocol.kind
        for i, v in enumerate(confs):
            if math.isnan(v) and not (inside and self._ends_inside_a_character(ids, base + i)):
                self._missing[j] += 1

    def _ends_inside_a_character(self, ids: list[int], k: int) -> bool:
        """Whether the text of ``ids`` ends inside a character after token ``k`` (a character
        takes at most 4 bytes, so the 4 tokens up to it tell)."""
        tail = self.backend.tokenizer.decode(ids[max(0, k - 3) : k + 1], skip_special_tokens=False)
        return tail.endswith("\ufffd")

    def _check_stood_in(self) -> None:
        """Refuse the question once the server left out, for no reason it has (see
        :meth:`_count_missing`), the log-probabilities of more than :data:`MAX_STOOD_IN_SHARE`
        of its tokens (beyond :data:`STOOD_IN_FREE`): its confidences would be made up, not
        measured.  Every stand-in is counted into the pool's provenance all the same."""
        n, total = int(self._missing.sum()), int(self.lengths.sum())
        if n > STOOD_IN_FREE and n > MAX_STOOD_IN_SHARE * total:
            raise ServerError(
                f"the server at {self.backend.base_url} sent no usable log-probabilities for "
                f"{n:,} of the {total:,} tokens of question {self.problem.qid} so far (more than "
                f"{MAX_STOOD_IN_SHARE * 100:g} %, the most a pool's confidences may be stood in "
                "for): its confidences would be made up; is it sending NaN?"
            )

    def probe(self, idx) -> list[ProbeResult]:
        be = self.backend
        idx = self._probe_targets(idx)
        if idx.size == 0:
            return []
        js = idx.tolist()
        pos = [len(self._ids[j]) for j in js]
        reqs = [
            (
                self.prompt + self._ids[j][:p] + be.suffix_ids,
                be.probe_max_new_tokens,
                probe_seed(self.seed, self.problem.qid, self._trace(j), p),
            )
            for j, p in zip(js, pos)
        ]
        outs = be.complete(reqs, logprobs=False)
        be.stats["probe_calls"] += 1
        # the server generated each trace so far: the prompt and the trace are its to reuse
        out = [
            be.probe_result(c, len(r[0]), window_conf(self._confs[j], p), len(self.prompt) + p)
            for j, p, r, c in zip(js, pos, reqs, outs)
        ]
        be.check_probe_cache()
        return out


class TextTraceBatch(ServerTraceBatch):
    """The traces of a text-prompt server: each request is the prompt's text + the trace's text
    so far (the server tokenizes it), and each answer's text is tokenized here, so token ids,
    lengths and the checkpoints are ours.  A request of ``m`` tokens may come back as more or
    fewer of ours: a trace keeps at most ``m`` (cut where the text is whole, the rest dropped,
    the end of text with it) and asks again for what is missing, so it still holds exactly the
    checkpoint's tokens there, with a seed of its own per request as ever."""

    def __init__(self, backend, problem: Problem, n: int, seed: int, first_trace: int):
        super().__init__(backend, problem, n, seed, first_trace)
        self.prompt_text = backend.prompt_text(problem.question)

    def _advance_once(self, target: int) -> bool:
        be = self.backend
        lengths = self.lengths
        run = np.flatnonzero(~self.ended & (lengths < target)).tolist()
        if not run:
            return False
        reqs: list[tuple[list[int] | str, int, int | None]] = []
        for j in run:
            n = int(lengths[j])
            end = target if be.segment is None else min(target, (n // be.segment + 1) * be.segment)
            seed = generation_seed(self.seed, self.problem.qid, self._trace(j), n)
            reqs.append((self.prompt_text + self._text(j), end - n, seed))
        outs = be.complete(reqs, logprobs=True)
        be.stats["generate_calls"] += 1
        for j, (_, want, _), c in zip(run, reqs, outs):
            n = len(self._ids[j])
            k = _text_cut(c, int(want), be.max_tokens - n)
            if k == 0 and not c.ids:
                raise ServerError(
                    f"the server returned no text for {want} tokens of question "
                    f"{self.problem.qid}, trace {self._trace(j)} at {n} tokens"
                )
            if k == 0:  # its next character alone would pass the token cap: it ends here
                log.warning(
                    "server backend: question %d, trace %d ends at %d tokens, its next character "
                    "being longer than the %d tokens left",
                    self.problem.qid,
                    self._trace(j),
                    n,
                    be.max_tokens - n,
                )
                self._stopped[j] = True
                continue
            assert c.confs is not None
            if np.isnan(c.confs[0]):  # an answer of the end of text alone: the confidence of the
                # trace's token before it, or 0 (the lowest) for a trace that ends at once
                c.confs[0] = self._confs[j][-1] if self._confs[j] else 0.0
            self._ids[j].extend(c.ids[:k])
            self._add_confs(j, c.confs[:k])
            self._count_missing(j, c.confs[:k])
            if c.finished and k == len(c.ids):
                self._eos[j] = True
            be.count("generate", c, k)
        self._check_stood_in()
        return True

    def probe(self, idx) -> list[ProbeResult]:
        be = self.backend
        idx = self._probe_targets(idx)
        if idx.size == 0:
            return []
        js = idx.tolist()
        pos = [len(self._ids[j]) for j in js]
        reqs: list[tuple[list[int] | str, int, int | None]] = [
            (
                self.prompt_text + self._text(j) + be.probe_suffix,
                be.probe_max_new_tokens,
                probe_seed(self.seed, self.problem.qid, self._trace(j), p),
            )
            for j, p in zip(js, pos)
        ]
        outs = be.complete(reqs, logprobs=False)
        be.stats["probe_calls"] += 1
        n = len(self.prompt) + len(be.suffix_ids)
        return [
            be.probe_result(c, n + p, window_conf(self._confs[j], p))
            for j, p, c in zip(js, pos, outs)
        ]
