"""What every wire protocol shares: the request a server is asked, the :class:`Completion` read
from its answer, and the checks every answer's fields go through (a server's answer may be any
JSON: whole numbers, log-probabilities at most 0, reports dug out level by level).  One module per
server builds on it (docs/backends.md, "Servers": the table of each server's fields)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..endpoint import printable, redact, shown
from ..tokens import (
    CONF_TOP_K,
    derive_seed,
    token_confidence,
)
from .errors import ServerError

log = logging.getLogger(__name__)

#: Seeds fit 31 bits: llama.cpp reads a request's seed as a 32-bit integer in which all ones
#: means "random".
SEED_BITS = 31
_GEN_SALT = 0x5E4E0  # separates generation seeds from probe seeds
_PROBE_SALT = 0x9B0BE
#: ``prompt_mode`` of a server that takes token-id prompts, and of one that takes text only.
TOKEN_IDS, TEXT = "token ids", "text"
#: A reported log-probability above this is none (0 is certainty; servers round).
LOGPROB_MAX = 1e-3


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


def one_line(text: object, limit: int = 200) -> str:
    """A server's (or a client library's) text as one printable line, URL credentials hidden."""
    return printable(redact(text), limit)


def read_int(value: object, what: str) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (isinstance(value, float) and (not math.isfinite(value) or value != int(value)))
    ):
        raise ServerError(f"the server answered {what} = {shown(value, 40)}, not a whole number")
    return int(value)


def dig(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]…`` where every level is a dict, else None: a server's report may be any
    JSON."""
    for k in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(k)
    return obj


def reported_count(value: Any) -> int | None:
    """A positive whole number a server reports (a context length, its slots), else None: not
    known."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        return None
    return int(value) if value >= 1 else None


def reported_label(value: Any) -> str | None:
    """A text a server reports about itself (its version), printable; None if it is no text."""
    return printable(value) or None if isinstance(value, str) else None


def reported_path(value: Any) -> str | None:
    """A path a server reports (where it loaded its model from), None if it is no text."""
    return value if isinstance(value, str) and value and "\x00" not in value else None


def read_logprob(value: object, where: str) -> float:
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


def read_logprobs(values: object, where: str) -> list[float]:
    """A token's top log-probabilities (:func:`read_logprob` each)."""
    if not isinstance(values, (list, tuple)):
        raise ServerError(
            f"{where}: top log-probabilities that are not a list ({shown(values, 40)})"
        )
    return [read_logprob(v, where) for v in values]


def top_confidence(values: Sequence[Any], where: str) -> float:
    """Confidence from one token's top log-probabilities: exactly :data:`CONF_TOP_K` of them (the
    highest when the server adds the sampled token to its top k); NaN when any is missing."""
    lps = read_logprobs(values, where)
    if len(lps) < CONF_TOP_K:
        raise ServerError(
            f"{where}: {len(lps)} top log-probabilities for a token, not {CONF_TOP_K} "
            "(the confidence is the mean of 20)"
        )
    if any(math.isnan(x) for x in lps):
        return math.nan
    return token_confidence(sorted(lps, reverse=True)[:CONF_TOP_K])


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
