"""What a client asks: an OpenAI request body read into one question and how to solve it.

A request is a **MARS request** when it asks for ``n`` > 1 or carries a ``mars`` object (what the
``openai`` client's ``extra_body={"mars": {...}}`` sends); any other request passes through to an
upstream unchanged. The ``mars`` object names the traces, warmup, method, spacing and the method's
knobs (:data:`mars.method.settings.LIVE_KEYS`); what it leaves out comes from the server's
defaults (``mars serve``'s options, themselves the settings declarations' defaults). Everything is
checked here, before any work, with the command line's own one-line messages (the same functions
check both): a bad body is an HTTP 400 carrying that line.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import MarsError, UsageError
from ..live import live_grid, live_settings
from ..method.registry import DEFAULT_METHOD, Method, live_method
from ..method.settings import LIVE_KEYS, SPECS
from ..store.schema import CHECKPOINT_SPACING

#: The routes a question can come by, and the OpenAI object each answers with.
COMPLETIONS, CHAT = "completions", "chat"
#: Keys of the ``mars`` object besides the method's knobs.
MARS_KEYS = ("method", "traces", "warmup", "spacing", "return_traces", "ground_truth")
#: Request fields a MARS request cannot honour (the traces are plain text generations).
UNSUPPORTED = ("logprobs", "top_logprobs", "echo", "best_of", "suffix", "tools", "functions")
#: The largest seed a request may give (the engines derive 31-bit seeds from it).
MAX_SEED = 2**63 - 1


class BadRequest(MarsError):
    """A request body the server refuses (HTTP 400, one line)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Defaults:
    """How a MARS request is solved unless it says otherwise (``mars serve``'s options)."""

    method: str = DEFAULT_METHOD
    traces: int = 64
    warmup: int = SPECS["warmup"].default
    spacing: int = CHECKPOINT_SPACING
    max_tokens: int | None = None  # None: the upstream's cap
    knobs: dict = field(default_factory=dict)
    max_traces: int = 1024  # n / traces at most (warmup apart)
    seed: int = 0  # the traces' seed of a request that gives none
    temperature: float | None = None  # None: the upstream backend's
    top_p: float | None = None

    def check(self) -> Defaults:
        """The defaults are checked as a request is (one line naming the option)."""
        live_method(self.method)
        if self.max_traces < 1:
            raise UsageError(f"--max-traces {self.max_traces}: must be at least 1")
        if self.traces > self.max_traces:
            raise UsageError(f"--traces {self.traces}: more than --max-traces {self.max_traces}")
        live_settings(
            self.traces, self.warmup, 0, self.spacing, self.max_tokens or self.spacing, self.knobs
        )
        return self


@dataclass(frozen=True)
class Question:
    """One MARS request, checked: what to solve and how."""

    kind: str  # COMPLETIONS or CHAT
    model: str | None  # as the client named it
    prompt: str | None  # completions: the prompt text
    messages: list[dict] | None  # chat: the conversation
    method: Method
    traces: int
    warmup: int
    spacing: int
    max_tokens: int | None  # None: the server's default
    knobs: dict
    seed: int
    seeded: bool  # the client gave the seed
    temperature: float | None
    top_p: float | None
    stream: bool
    include_usage: bool
    return_traces: bool
    ground_truth: str
    stop: tuple[str, ...]
    user: str | None

    def with_max_tokens(self, max_tokens: int) -> Question:
        """The question with its token cap fixed (checked against its grid)."""
        live_grid(self.spacing, max_tokens)
        return replace(self, max_tokens=int(max_tokens))

    def settings(self) -> dict:
        """What decides (recorded with the pool): method, sizes, grid, knobs."""
        return {
            "method": self.method.name,
            "traces": self.traces,
            "warmup": self.warmup,
            "spacing": self.spacing,
            "max_tokens": self.max_tokens,
            "knobs": dict(sorted(self.knobs.items())),
        }


def is_mars_request(body: dict) -> bool:
    """A request MARS solves: ``n`` > 1 or a ``mars`` object."""
    n = body.get("n")
    many = isinstance(n, int) and not isinstance(n, bool) and n > 1
    return many or body.get("mars") is not None


def _whole(value: Any, name: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise BadRequest(f"{name} {value!r}: must be a whole number ≥ {low}", name)
    return value


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadRequest(f"{name} {value!r}: must be a number", name)
    return float(value)


def prompt_seed(text: str) -> int:
    """A question's id for the engines' per-trace seeds: the same prompt and seed give the same
    traces (31 bits of the prompt's digest)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 33


def read_question(body: Any, kind: str, defaults: Defaults) -> Question:
    """The question of a MARS request body, every field checked (:class:`BadRequest`)."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    prompt: str | None = None
    messages: list[dict] | None = None
    if kind == COMPLETIONS:
        p = body.get("prompt")
        if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
            p = p[0]
        if not isinstance(p, str):
            raise BadRequest("prompt: one prompt, as a string, per MARS request", "prompt")
        prompt = p
    else:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages: a non-empty list of messages", "messages")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise BadRequest(f"messages[{i}]: an object with a role and content", "messages")
            if not isinstance(m.get("content"), str):
                raise BadRequest(f"messages[{i}].content: text only in a MARS request", "messages")
    for key in UNSUPPORTED:
        if body.get(key) not in (None, False):
            raise BadRequest(f"{key}: not supported in a MARS request", key)
    opts = body.get("mars") or {}
    if not isinstance(opts, dict):
        raise BadRequest("mars: must be an object", "mars")
    unknown = sorted(set(opts) - set(MARS_KEYS) - set(LIVE_KEYS))
    if unknown:
        raise BadRequest(
            f"mars: unknown keys {unknown} (known: {', '.join(MARS_KEYS + LIVE_KEYS)})", "mars"
        )
    try:
        method = live_method(opts.get("method", defaults.method))
    except MarsError as exc:
        raise BadRequest(str(exc), "mars.method") from None
    n = body.get("n")
    n = None if n is None else _whole(n, "n", 1)
    traces = opts.get("traces")
    traces = None if traces is None else _whole(traces, "mars.traces", 1)
    if traces is not None and n is not None and n > 1 and n != traces:
        raise BadRequest(f"n {n} and mars.traces {traces} disagree (give one)", "n")
    if traces is None:
        traces = n if n is not None and n > 1 else defaults.traces
    if traces > defaults.max_traces:
        raise BadRequest(
            f"{'n' if n == traces else 'mars.traces'} {traces}: more than this server's "
            f"--max-traces {defaults.max_traces}",
            "n",
        )
    warmup = _whole(opts.get("warmup", defaults.warmup), "mars.warmup")
    spacing = _whole(opts.get("spacing", defaults.spacing), "mars.spacing", 1)
    knobs = {**defaults.knobs, **{k: v for k, v in opts.items() if k in LIVE_KEYS}}
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = defaults.max_tokens if max_tokens is None else _whole(max_tokens, "max_tokens", 1)
    seed = body.get("seed")
    seeded = seed is not None
    seed = defaults.seed if seed is None else _whole(seed, "seed")
    if seed > MAX_SEED:
        raise BadRequest(f"seed {seed}: must be below 2^63", "seed")
    try:
        live_settings(traces, warmup, 0, spacing, max_tokens or spacing, knobs)
    except MarsError as exc:
        raise BadRequest(str(exc), "mars") from None
    temperature = body.get("temperature", defaults.temperature)
    temperature = None if temperature is None else _number(temperature, "temperature")
    if temperature is not None and temperature <= 0:
        raise BadRequest(
            f"temperature {temperature:g}: the traces of a MARS request must be sampled (> 0; "
            "at 0 every trace is the same greedy one), e.g. 0.6",
            "temperature",
        )
    top_p = body.get("top_p", defaults.top_p)
    top_p = None if top_p is None else _number(top_p, "top_p")
    if top_p is not None and not 0 < top_p <= 1:
        raise BadRequest(f"top_p {top_p}: must lie in (0, 1]", "top_p")
    stop = body.get("stop")
    stops: tuple[str, ...] = ()
    if isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = tuple(stop)
    elif stop is not None:
        raise BadRequest("stop: a string or a list of strings", "stop")
    truth = opts.get("ground_truth", "")
    if not isinstance(truth, str):
        raise BadRequest("mars.ground_truth: must be a string", "mars.ground_truth")
    stream_options = body.get("stream_options") or {}
    user = body.get("user")
    return Question(
        kind=kind,
        model=body.get("model") if isinstance(body.get("model"), str) else None,
        prompt=prompt,
        messages=messages,
        method=method,
        traces=traces,
        warmup=warmup,
        spacing=spacing,
        max_tokens=max_tokens,
        knobs=knobs,
        seed=seed,
        seeded=seeded,
        temperature=temperature,
        top_p=top_p,
        stream=bool(body.get("stream")),
        include_usage=isinstance(stream_options, dict)
        and bool(stream_options.get("include_usage")),
        return_traces=bool(opts.get("return_traces", False)),
        ground_truth=truth,
        stop=stops,
        user=user if isinstance(user, str) else None,
    )
