"""What the token-level engines share (transformers, SGLang): the prompt, the probe suffix,
per-trace seeds, answer parsing, token confidence and the engine-neutral token batch.

Both backends build the same chat-templated prompt, send the reference prober's suffix
character for character (spec §11), derive per-trace seeds the same way and keep each trace as
token ids plus per-token confidences; :class:`TokenTraceBatch` is that state, each backend adding
only how it advances and probes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..answers import extract_boxed, extract_probe_answer, normalize_answer
from ..errors import MarsError
from ..problems import Problem
from .base import TraceBatch, TraceResult

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


def build_prompt_ids(
    tokenizer,
    question: str,
    template: str = DEFAULT_PROMPT_TEMPLATE,
    system_prompt: str | None = None,
) -> list[int]:
    """Token ids of the chat-templated prompt (user message, generation prompt added).

    The template is rendered to text and tokenised without adding special tokens again (the
    template already holds them).  A tokenizer without a chat template gets the bare user message.
    """
    messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
        {"role": "user", "content": user_message(question, template)}
    ]
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    else:
        text = messages[-1]["content"] + "\n"
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


def parse_answer(text: str | None) -> str | None:
    """Final answer of a trace's text: last ``\\boxed{…}``, normalised."""
    return normalize_answer(extract_boxed(text or ""))


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

    def result(self, j: int) -> TraceResult:
        j = int(j)
        text = self._text(j)
        return TraceResult(
            length=len(self._ids[j]),
            final_answer=parse_answer(text),
            finished=bool(self._eos[j]),
            confs=self.confs_so_far(j),
            text=text,
            token_ids=np.asarray(self._ids[j], dtype=np.int32),
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
