"""A server whose OpenAI-compatible ``/v1/completions`` takes text prompts only
(llama-cpp-python's): prompts go as text, and the answer's text is tokenized here, its tokens'
confidences matched to the server's tokens by position.  What that costs (token boundaries at a
checkpoint, approximate confidences where keys collide): docs/backends.md, "Servers that take text
prompts only"."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

import numpy as np

from ..endpoint import shown
from ..tokens import (
    CONF_TOP_K,
    token_confidence,
)
from .errors import ServerError
from .protocol import TEXT, Completion, Protocol, Sampling, read_int, read_logprobs

log = logging.getLogger(__name__)


def token_ends(tokenizer, ids: Sequence[int]) -> tuple[list[int], list[bool]]:
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


def text_top_confidence(top: Any, sampled: Any, top_k: int, where: str) -> tuple[float, bool]:
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
    values = sorted(read_logprobs(list(top.values()), where), reverse=True)
    if any(math.isnan(v) for v in values):
        return math.nan, False
    n = len(values)
    exact = n > CONF_TOP_K
    if n == CONF_TOP_K:
        exact = 0 < top_k <= CONF_TOP_K
        if not exact and isinstance(sampled, (int, float)) and not isinstance(sampled, bool):
            exact = float(sampled) > values[-1]
    return token_confidence(values[:CONF_TOP_K]), exact


def server_spans(lp: dict, n: int, text: str, where: str) -> list[tuple[int, int]]:
    """Each returned token's characters in ``text``, from ``text_offset`` (relative to the
    first token's, whatever the server counts from), else from the lengths of ``tokens``."""
    offsets = lp.get("text_offset")
    if isinstance(offsets, list) and len(offsets) == n:
        starts = [read_int(x, "a text_offset") for x in offsets]
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


def text_confs(
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
    #: what llama-cpp-python's server says it is owned by (``/v1/models``); not in
    #: :attr:`owned_by`: a server of unknown kind is asked whether it takes token-id prompts
    LLAMA_CPP_PYTHON_OWNER = "me"

    def default_concurrency(self, report: dict) -> int | None:
        # llama-cpp-python runs one request at a time: more in flight only queue, and the
        # order they come in sets its cache state, hence its logits (a run would not repeat)
        card = report.get("model") or {}
        return 1 if card.get("owned_by") == self.LLAMA_CPP_PYTHON_OWNER else None

    def tokenize(self, text: str, add_special_tokens: bool = False) -> tuple[str, dict]:
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
        server_n = None if server_n is None else read_int(server_n, "usage.completion_tokens")
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
                text_top_confidence(t, lp_, self.top_k, where) for t, lp_ in zip(top, sampled)
            ]
            ends, whole = token_ends(tok, ids)
            spans = server_spans(lp, len(top), text, where)
            confs, exact = text_confs(ends, whole, spans, theirs)
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
            prompt_tokens=None if prompt is None else read_int(prompt, "usage.prompt_tokens"),
            cached_tokens=None if cached is None else read_int(cached, "cached_tokens"),
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


def text_cut(c: Completion, want: int, room: int) -> int:
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
