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


#: The trace a request belongs to: (seed, qid, trace index), as its seeds are drawn.
TraceKey = tuple[int, int, int]


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


@dataclass(frozen=True)
class MetricsReading:
    """Where a server's own counters are in its Prometheus ``GET /metrics``: each a sample name
    (its labels summed over), read by ``mars serve`` (:mod:`mars.serve.engine_metrics`) to
    reconcile its counts with the engine's and to time a stop's drain."""

    #: tokens generated, aborted requests' tokens included
    generated: str
    #: requests being generated now, and queued
    running: str
    waiting: str
    #: prompt tokens served from the prefix cache: the first of these the server has
    cached: tuple[str, ...]
    #: the prefix cache's hits (tokens), where the server counts them apart from ``cached``
    hits: str | None = None
    #: every prompt token ...
    prompt: str | None = None
    #: ... or, where the server counts those instead, only the prompt tokens it computed
    computed: str | None = None
    #: the flag the server is started with to serve ``/metrics`` (None: it always does)
    flag: str | None = None


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
    """How one kind of server is asked for a completion and how its answer reads, and everything
    else that differs by server: what it calls itself, how many requests it takes at once,
    whether its tokenizer can be asked over HTTP, whether ``mars serve`` streams to it and where
    its counters are.  Each
    default here is what a server that says nothing more gets; a server's module overrides what
    differs (docs/backends.md, "Add a server")."""

    #: the name ``server=`` takes and the manifest records (the key of :data:`.connect.PROTOCOLS`)
    kind = ""
    path = ""
    #: how prompts are sent: :data:`TOKEN_IDS` or :data:`TEXT`
    prompt_mode = TOKEN_IDS
    #: which distribution the reported log-probabilities are of
    logprobs_mode = ""
    #: how a per-request seed is honoured
    seeds = ""
    #: what the server's ``/v1/models`` cards say in ``owned_by``: how ``server=auto`` knows it
    owned_by: tuple[str, ...] = ()
    #: whether the server's own tokenizer can be asked over HTTP (``tokenizer=server``,
    #: :class:`mars.engines.tokenizer.ServerTokenizer`), as :meth:`tokenize`, :meth:`detokenize`
    #: and :meth:`apply_template` say
    serves_tokenizer = False
    #: whether ``mars serve`` streams its requests to the server (one that stops a request only
    #: when its stream closes, so that a cancelled question stops there at once); each stream is
    #: read back into the unstreamed answer by :meth:`merge_stream`
    streamed = False
    #: whether the server leaves out the log-probabilities of a token after which the text ends
    #: inside a multi-byte character (no fault of its own, so not counted against it:
    #: :meth:`~.batches.ServerTraceBatch._count_missing`)
    omits_logprobs_inside_characters = False
    #: where its own counters are in its ``/metrics`` (None: not known, so ``mars serve`` does
    #: not reconcile with them)
    metrics_reading: MetricsReading | None = None

    def __init__(self, model: str):
        self.model = model

    def info_paths(self) -> tuple[str, ...]:
        """GET endpoints whose JSON goes into the server report (missing ones are skipped)."""
        return ()

    def default_concurrency(self, report: dict) -> int | None:
        """Requests in flight when ``--concurrency`` is not given (None: the backend's 32)."""
        return None

    def trial_hint(self, message: str) -> str:
        """What to add to the line that says the server refused the connect-time trial (a
        token-id prompt with 20 top log-probabilities), from the server's error message."""
        return ""

    @staticmethod
    def merge_stream(events: list) -> Any:
        """The answer the server gives unstreamed, from the events of its stream
        (:attr:`streamed` servers)."""
        raise NotImplementedError

    @staticmethod
    def streamed_tokens(events: list) -> int:
        """The tokens the events of a stream cut short carry (:attr:`streamed` servers): what
        ``mars serve`` received of a request it stopped."""
        return 0

    # -- the server's own tokenizer (:attr:`serves_tokenizer`) ---------------------------------

    def tokenize(self, text: str, add_special_tokens: bool = False) -> tuple[str, dict]:
        """The request that tokenizes ``text`` (without special tokens unless asked)."""
        return "/tokenize", {
            "model": self.model,
            "prompt": text,
            "add_special_tokens": add_special_tokens,
        }

    def tokens_of(self, out: Any) -> Any:
        """The tokens of a :meth:`tokenize` answer (ids, or objects with an ``id``)."""
        return out.get("tokens") if isinstance(out, dict) else None

    def detokenize(self, ids: list[int]) -> tuple[str, dict]:
        """The request that gives back the text of ``ids``."""
        return "/detokenize", {"model": self.model, "tokens": ids}

    def text_of(self, out: dict) -> Any:
        """The text of a :meth:`detokenize` answer."""
        return out.get("prompt")

    def chat_template(self, report: dict) -> str | None:
        """The chat template the server applies, or a word for it (None: none known, so the
        prompt is the question as it is)."""
        return None

    def n_vocab(self, report: dict) -> Any:
        """The vocabulary size the server reports (None: it does not say)."""
        return None

    def bos_eos(self, report: dict) -> tuple[Any, Any]:
        """The texts of the begin- and end-of-text tokens the server reports (None: not said)."""
        return None, None

    def special_markup(self, tokenizer: Any, report: dict) -> tuple[str, set[int]]:
        """Where the special tokens show: a text whose special-token markup (``<|im_start|>``...)
        is read as special tokens, and the ids ``add_special_tokens`` adds.  ``tokenizer`` is the
        :class:`~mars.engines.tokenizer.ServerTokenizer` being made (its ids of the texts given
        above are known)."""
        return "", set()

    def apply_template(
        self, tokenizer: Any, messages: list[dict], add_generation_prompt: bool, tokenize: bool
    ) -> Any:
        """The conversation as the server's chat template writes it (text, or its ids), asked
        through ``tokenizer.ask(path, body)``."""
        raise NotImplementedError

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
