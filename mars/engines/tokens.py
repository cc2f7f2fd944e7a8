"""What the token-level engines share (transformers, SGLang): the prompt, the probe suffix,
per-trace seeds, answer parsing, token confidence and the engine-neutral token batch.

Both backends build the same chat-templated prompt, send the reference prober's suffix
character for character (spec §11), derive per-trace seeds the same way and keep each trace as
token ids plus per-token confidences; :class:`TokenTraceBatch` is that state, each backend adding
only how it advances and probes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import MarsError
from ..method.answers import extract_probe_answer, normalize_answer
from ..store.problems import Problem
from .base import StoredTrace, TraceBatch, TraceResult
from .models import load_tokenizer

#: The probe suffix of the reference prober, character for character (spec §11).
PROBE_SUFFIX = (
    " Considering the limited time by the user, I have to give the solution based on the thinking "
    "directly now.\n</think>\n\n\\boxed{"
)
#: New tokens a probe may generate (spec §11).
PROBE_MAX_NEW_TOKENS = 50
#: Log-probabilities averaged into a token's confidence (spec §3.1, DeepConf k = 20).
CONF_TOP_K = 20
#: A probe's ``conf``: mean token confidence of the window of this many tokens before it (spec §11).
PROBE_CONF_WINDOW = 2048
#: User message of the chat-templated prompt; ``{question}`` is replaced by the question.
DEFAULT_PROMPT_TEMPLATE = (
    "{question}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."
)
#: Lowest log-probability a token confidence takes: ln of the smallest positive float32 (2^-149).
#: Engines compute probabilities in float32; one that underflows to 0 has log −inf, which SGLang
#: clamps to the float32 minimum (−3.4e38) before returning it.  Averaged as is, such a value makes
#: the confidence ~1.7e37, +inf once stored as float16; floored here it stays finite and large (the
#: token really was that certain).
LOGPROB_FLOOR = math.log(2.0**-149)


def derive_seed(*parts: int, bits: int = 63) -> int:
    """A seed of ``bits`` bits derived from integers (numpy SeedSequence;
    stable across versions)."""
    if any(int(p) < 0 for p in parts):
        raise ValueError(f"seed parts must be non-negative, got {parts}")
    state = np.random.SeedSequence([int(p) for p in parts]).generate_state(2, np.uint32)
    value = (int(state[0]) << 32) | int(state[1])
    return value & ((1 << bits) - 1)


def user_message(question: str, template: str = DEFAULT_PROMPT_TEMPLATE) -> str:
    return template.format(question=question)


def build_prompt_text(
    tokenizer,
    question: str,
    template: str = DEFAULT_PROMPT_TEMPLATE,
    system_prompt: str | None = None,
) -> str:
    """The chat-templated prompt as text (user message, generation prompt added); a tokenizer
    without a chat template gets the bare user message and a newline."""
    messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
        {"role": "user", "content": user_message(question, template)}
    ]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return messages[-1]["content"] + "\n"


def build_prompt_ids(
    tokenizer,
    question: str,
    template: str = DEFAULT_PROMPT_TEMPLATE,
    system_prompt: str | None = None,
) -> list[int]:
    """Token ids of the chat-templated prompt (user message, generation prompt added).

    The template is rendered to text (:func:`build_prompt_text`) and tokenised without adding
    special tokens again (the template already holds them).
    """
    text = build_prompt_text(tokenizer, question, template, system_prompt)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_suffix(tokenizer, suffix: str = PROBE_SUFFIX) -> list[int]:
    """The probe suffix's token ids (``tokenizer.encode``, no special tokens; spec §11)."""
    return list(tokenizer.encode(suffix, add_special_tokens=False))


def window_conf(
    confs: Sequence[float] | np.ndarray, p: int, w: int = PROBE_CONF_WINDOW
) -> float | None:
    """Mean confidence of tokens ``[p - w, p)`` as stored (float16), NaNs ignored;
    None when empty."""
    a = max(0, p - w)
    if p <= a or len(confs) == 0:
        return None
    x = np.asarray(confs[a:p], np.float64).astype(np.float16).astype(np.float64)
    x = x[~np.isnan(x)]
    return float(x.mean()) if x.size else None


def parse_probe(completion: str | None) -> str | None:
    """Answer of a probe completion (generated after ``…\\boxed{``), normalised."""
    return normalize_answer(extract_probe_answer(completion))


def token_confidence(logprobs_top: Sequence[float] | None) -> float:
    """−mean of a token's top-k log-probabilities, rounded to 3 decimals (NaN when empty or None;
    spec §3.1).  Log-probabilities below :data:`LOGPROB_FLOOR` (−inf, or an engine's clamp value
    such as −3.4e38) count as the floor, so the confidence is never infinite."""
    if logprobs_top is None or not len(logprobs_top):
        return float("nan")
    lp = np.maximum(np.asarray(logprobs_top, np.float64), LOGPROB_FLOOR)
    return round(-float(np.mean(lp)), 3)


def finite_confs(confs: Sequence[float], before: Sequence[float]) -> list[float]:
    """A request's token confidences, finite: a token the server sent no log-probabilities for
    (llama.cpp: the text ends inside a multi-byte character after it; an SGLang position
    without top log-probabilities; NaN here) takes the
    confidence of the token before it (``before``: the trace's so far), or 0, the lowest, at a
    trace's start. A pool holds finite confidences only; stats["missing_confs"] counts these."""
    out = list(confs)
    for i, v in enumerate(out):
        if math.isnan(v):
            out[i] = out[i - 1] if i else (before[-1] if len(before) else 0.0)
    return out


def check_context(backend, problem: Problem, prompt_len: int | None = None) -> None:
    """Refuse, before any generation, a question whose longest request would not fit the model.

    The longest request of a question is a probe at the last checkpoint before the token cap:
    prompt + up to ``max_tokens`` trace tokens + the probe suffix + the probe's new tokens; a trace
    itself needs at most prompt + ``max_tokens``.  ``backend.context_budget()`` gives the most
    tokens one request may hold and where that limit comes from (None, or no such method: no
    check).
    """
    budget_of = getattr(backend, "context_budget", None)
    budget = budget_of() if callable(budget_of) else None
    if budget is None:
        return
    limit, source = budget
    if prompt_len is None:
        prompt_len = len(backend.prompt_ids(problem.question))
    suffix, probe = len(backend.suffix_ids), int(backend.probe_max_new_tokens)
    need = prompt_len + int(backend.max_tokens) + suffix + probe
    if need <= limit:
        return
    room = limit - prompt_len - suffix - probe
    fix = f"use --max-tokens {room} or less" if room > 0 else "the prompt alone is too long"
    raise MarsError(
        f"question {problem.qid}: prompt {prompt_len} + max tokens {backend.max_tokens} + "
        f"probe suffix {suffix} + probe tokens {probe} = {need} tokens, more than {source} "
        f"allows ({limit}): {fix}"
    )


class TokenTraceBatch(TraceBatch):
    """What the token-level engines' batches share (transformers, SGLang): per-trace token ids and
    confidences, end of text, stops, and the trace record decoded from the ids."""

    def __init__(self, backend, problem: Problem, n: int, seed: int, first_trace: int):
        self.backend = backend
        self.problem = problem
        self.n = int(n)
        self.seed = int(seed)
        self.first_trace = int(first_trace)
        self.prompt = backend.prompt_ids(problem.question)
        if self.n:
            check_context(backend, problem, len(self.prompt))
        self._ids: list[list[int]] = [[] for _ in range(self.n)]
        self._confs: list[list[float]] = [[] for _ in range(self.n)]
        self._eos = np.zeros(self.n, bool)
        self._stopped = np.zeros(self.n, bool)
        self._has_confs = True
        #: per trace: confidences stood in for missing log-probabilities (:meth:`_add_confs`)
        self._stood_in = np.zeros(self.n, np.int64)

    @property
    def lengths(self) -> np.ndarray:
        return np.array([len(x) for x in self._ids], np.int64)

    @property
    def ended(self) -> np.ndarray:
        return self._eos | self._stopped | (self.lengths >= self.backend.max_tokens)

    def stop(self, idx) -> None:
        self._stopped[np.asarray(idx, np.int64)] = True

    def _probe_targets(self, idx) -> np.ndarray:
        """The traces to probe, as an index array; probing a trace that has ended is an error."""
        idx = np.asarray(idx, np.int64)
        if idx.size and self.ended[idx].any():
            raise ValueError("probe() of a trace that has ended")
        return idx

    def _text(self, j: int) -> str:
        return self.backend.tokenizer.decode(self._ids[j], skip_special_tokens=True)

    def _add_confs(self, j: int, confs: Sequence[float]) -> None:
        """Extend trace ``j``'s confidences with a request's, NaNs stood in for
        (:func:`finite_confs`) and counted."""
        self._stood_in[j] += sum(1 for v in confs if math.isnan(v))
        self._confs[j].extend(finite_confs(confs, self._confs[j]))

    def result(self, j: int) -> TraceResult:
        j = int(j)
        text = self._text(j)
        return TraceResult(
            length=len(self._ids[j]),
            final_answer=self.backend.final_answer(text),
            finished=bool(self._eos[j]),
            confs=self.confs_so_far(j),
            text=text,
            token_ids=np.asarray(self._ids[j], dtype=np.int32),
            stood_in=int(self._stood_in[j]),
        )

    def confs_so_far(self, j: int) -> np.ndarray | None:
        return (
            np.asarray(self._confs[int(j)], np.float64).astype(np.float16)
            if self._has_confs
            else None
        )

    def token_ids(self, j: int) -> list[int]:
        """Generated token ids of trace ``j`` so far (EOS included when generated)."""
        return list(self._ids[int(j)])


# ---------------------------------------------------------------------------------------------
# The probe stage: a generation's stored token ids as the probe model's input

#: What the probe stage's provenance says when the generator's token ids go in as they are.
SAME_IDS = "token ids as generated"


def vocab_digest(tokenizer) -> str | None:
    """A digest of a tokenizer's vocabulary (every token and its id, added tokens included), None
    when the tokenizer cannot list it.  Equal digests: an id names the same token for both."""
    get = getattr(tokenizer, "get_vocab", None)
    if not callable(get):
        return None
    items = sorted((int(i), str(t)) for t, i in get().items())
    blob = json.dumps(items, ensure_ascii=False, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()[:32]


def local_path(path: str | os.PathLike | None) -> str | None:
    """``path`` made absolute when it names a local file or folder (model directory, GGUF file),
    else as given (a hub id)."""
    if path is None:
        return None
    p = os.fspath(path)
    return os.path.abspath(p) if os.path.exists(p) else p


def prefix_text(tokenizer, ids: Sequence[int] | np.ndarray, d: int) -> str:
    """Text of the first ``d`` generated tokens, special tokens skipped (as a trace's text).

    A character whose bytes the cut at ``d`` splits decodes to U+FFFD; it is left out (the text
    ends at the last whole character), as the full trace's text shows that character instead.
    """
    head = [int(t) for t in ids[: d + 4]]
    text = tokenizer.decode(head[:d], skip_special_tokens=True)
    if d < len(ids) and text.endswith("\ufffd"):
        ahead = tokenizer.decode(head, skip_special_tokens=True)
        k = len(text)
        while k and text[k - 1] == "\ufffd" and ahead[k - 1 : k] != "\ufffd":
            k -= 1
        text = text[:k]
    return text


@dataclass
class GeneratorTokens:
    """How a generation's stored token ids reach the probe model.

    ``tokenizer`` is None when the probe model's vocabulary is the generator's: the ids go in as
    they are.  Otherwise it is the generator's tokenizer: each prefix ``ids[:d]`` is decoded with
    it (:func:`prefix_text`) and encoded with the probe model's tokenizer.
    """

    key: tuple
    source: str  # the generator's model, as its pool names it
    tokenizer: Any = None

    @property
    def same_ids(self) -> bool:
        return self.tokenizer is None

    def describe(self) -> str:
        return SAME_IDS if self.same_ids else f"re-encoded from {self.source}"

    def prefixes(self, ids: np.ndarray, positions, probe_tokenizer) -> list[np.ndarray]:
        """The probe model's token ids of the prefix at each position (generator tokens)."""
        ids = np.asarray(ids)
        if self.same_ids:
            return [ids[: int(d)] for d in positions]
        texts = [prefix_text(self.tokenizer, ids, int(d)) for d in positions]
        if not texts:
            return []
        # one batched call: a fast tokenizer encodes the texts in parallel
        encoded = probe_tokenizer(texts, add_special_tokens=False)["input_ids"]
        return [np.asarray(e, np.int64) for e in encoded]


def _generator_key(manifest: dict, override) -> tuple:
    return (
        manifest.get("backend"),
        manifest.get("model_path") or manifest.get("model"),
        manifest.get("gguf_file"),
        manifest.get("tokenizer_vocab"),
        override if isinstance(override, (str, os.PathLike)) or override is None else id(override),
    )


def _load(path, gguf: str | None = None):
    try:
        return load_tokenizer(os.fspath(path), gguf)
    except (OSError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise MarsError(
            f"cannot load the generator's tokenizer from {os.fspath(path)!r} ({first}): pass "
            "generator_tokenizer=PATH (MARS_BACKEND_OPTIONS)"
        ) from None


def resolve_generator(backend, manifest: dict, override=None) -> GeneratorTokens:
    """How ``backend`` (the probe model) takes the token ids of the generation ``manifest``.

    The vocabularies are compared by :func:`vocab_digest`: the one the generation recorded
    (``tokenizer_vocab``), else the generator's tokenizer loaded from the recorded model path
    (``model_path``, else ``model``, with ``gguf_file``), or from ``override`` (a tokenizer or its
    path) when given.  The same model path as the probe model's needs no comparison.
    """
    if manifest.get("backend") == "synthetic":
        raise MarsError(
            "synthetic traces hold no real tokens: probe them with the synthetic backend"
        )
    key = _generator_key(manifest, override)
    source = str(manifest.get("model") or manifest.get("model_path") or "the generator")
    own = backend.vocab_digest()
    path, gguf = manifest.get("model_path") or manifest.get("model"), manifest.get("gguf_file")
    tok = None
    if override is not None:
        tok = _load(override) if isinstance(override, (str, os.PathLike)) else override
    elif manifest.get("tokenizer_vocab") is not None and own is not None:
        if manifest["tokenizer_vocab"] == own:
            return GeneratorTokens(key, source)
    elif path is not None and (local_path(path), gguf) == backend.model_source():
        return GeneratorTokens(key, source)
    if tok is None:
        if not path:
            raise MarsError(
                "the pool does not say which model generated it: pass generator_tokenizer=PATH"
            )
        tok = _load(str(path), gguf)
    if own is not None and vocab_digest(tok) == own:
        return GeneratorTokens(key, source)
    return GeneratorTokens(key, source, tok)


def check_probe_fits(
    backend, problem: Problem, trace_idx: int, position: int, prefix_len: int, prompt_len: int
) -> None:
    """Refuse (one line) a probe of a stored trace that would not fit the probe model: prompt +
    the prefix (``prefix_len`` probe-model tokens for the ``position`` generated ones) + the probe
    suffix + the probe's new tokens must fit ``backend.context_budget()``."""
    budget = backend.context_budget()
    if budget is None:
        return
    limit, source = budget
    suffix, probe = len(backend.suffix_ids), int(backend.probe_max_new_tokens)
    need = prompt_len + prefix_len + suffix + probe
    if need <= limit:
        return
    trace = (
        f"{prefix_len} trace tokens"
        if prefix_len == position
        else f"{prefix_len} trace tokens (re-encoded)"
    )
    raise MarsError(
        f"question {problem.qid}, trace {trace_idx}: the probe at position {position} needs "
        f"prompt {prompt_len} + {trace} + probe suffix {suffix} + probe tokens {probe} = {need} "
        f"tokens, more than {source} allows ({limit}): probe with a model of a longer context"
    )


def _check_token_ids(problem: Problem, trace_idx: int, ids, limit: int, whose: str) -> None:
    """Refuse (one line) stored token ids outside the vocabulary that reads them."""
    ids = np.asarray(ids)
    bad = np.flatnonzero((ids < 0) | (ids >= limit))
    if bad.size:
        raise MarsError(
            f"question {problem.qid}, trace {trace_idx}: token id {int(ids[bad[0]])} at "
            f"position {int(bad[0])} is outside {whose} vocabulary (0..{limit - 1})"
        )


class TokenProbing:
    """The probe stage on a token-level engine (transformers, SGLang): which generation's tokens
    it probes, how they reach the probe model, and whether the probes fit its context.

    The probe's prompt is always the probe model's own chat template of the question (the
    reference prober's way); the trace's tokens are the generator's ids as they are when both
    vocabularies are equal, else its text re-encoded (:class:`GeneratorTokens`).
    """

    tokenizer: Any
    suffix_ids: list[int]
    probe_max_new_tokens: int
    generator_tokenizer: Any = None
    _generator: GeneratorTokens | None = None
    _vocab: tuple[str | None] | None = None

    def prompt_ids(self, question: str) -> list[int]:
        raise NotImplementedError

    def context_budget(self) -> tuple[int, str] | None:
        raise NotImplementedError

    def model_source(self) -> tuple[str | None, str | None]:
        """(model path as :func:`local_path` gives it, GGUF file name or None)."""
        raise NotImplementedError

    def vocab_digest(self) -> str | None:
        """:func:`vocab_digest` of the model's tokenizer (computed once)."""
        if self._vocab is None:
            self._vocab = (vocab_digest(self.tokenizer),)
        return self._vocab[0]

    def token_id_limit(self) -> int:
        """How many token ids the probe model takes (its vocabulary)."""
        return len(self.tokenizer)

    def bind_generator(self, manifest: dict) -> GeneratorTokens:
        """Probe the traces of the generation ``manifest`` (its pool manifest): decide, once, how
        its token ids reach this model (loading the generator's tokenizer if need be)."""
        key = _generator_key(manifest, self.generator_tokenizer)
        if self._generator is None or self._generator.key != key:
            self._generator = resolve_generator(self, manifest, self.generator_tokenizer)
        return self._generator

    def probe_input(self) -> str | None:
        """ "token ids as generated", "re-encoded from <generator>", or None before a generation
        is bound."""
        return None if self._generator is None else self._generator.describe()

    def check_probe_context(
        self,
        problem: Problem,
        trace_idx: int,
        length: int,
        token_ids: np.ndarray | None = None,
    ) -> None:
        """One-line :class:`MarsError` naming the question, trace and position when the probe at
        a stored trace's end (``length`` generated tokens) cannot fit the probe model.  When the
        tokens are re-encoded their count is known from ``token_ids`` only; without them the
        check is left to :meth:`probe_plan`, before the question's first forward pass."""
        gen = self._generator
        if gen is not None and not gen.same_ids:
            if token_ids is None:
                return
            d = len(gen.prefixes(np.asarray(token_ids), [length], self.tokenizer)[0])
        else:
            d = int(length)
        check_probe_fits(
            self, problem, trace_idx, int(length), d, len(self.prompt_ids(problem.question))
        )

    def probe_plan(
        self,
        problem: Problem,
        traces: Sequence[StoredTrace],
        positions: Sequence[np.ndarray],
        manifest: dict,
    ) -> tuple[GeneratorTokens, list[int], list[list[np.ndarray]]]:
        """(how tokens go in, the probe prompt, each trace's prefix ids at each position), every
        trace's token ids checked (there, as long as the trace, in the vocabulary that reads them)
        and every probe against the probe model's context first."""
        gen = self.bind_generator(manifest)
        prompt = self.prompt_ids(problem.question)
        limit = self.token_id_limit() if gen.same_ids else len(gen.tokenizer)
        whose = "the probe model's" if gen.same_ids else "the generator's"
        plan = []
        for t, pos in zip(traces, positions):
            pos = np.asarray(pos, np.int64)
            if t.token_ids is None:
                raise MarsError(
                    f"question {problem.qid}, trace {t.trace_idx}: no token ids to probe"
                )
            if len(t.token_ids) != t.length:
                raise MarsError(
                    f"question {problem.qid}, trace {t.trace_idx}: {len(t.token_ids)} token ids "
                    f"for length {t.length}"
                )
            _check_token_ids(problem, t.trace_idx, t.token_ids, limit, whose)
            if pos.size and (pos[0] < 0 or pos[-1] > t.length or (np.diff(pos) <= 0).any()):
                raise ValueError(f"trace {t.trace_idx}: positions must rise within 0..length")
            pre = gen.prefixes(t.token_ids, pos, self.tokenizer)
            if pre:
                k = int(np.argmax([len(x) for x in pre]))
                check_probe_fits(self, problem, t.trace_idx, int(pos[k]), len(pre[k]), len(prompt))
            plan.append(pre)
        return gen, prompt, plan
