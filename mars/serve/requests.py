"""What a client asks: an OpenAI request body read into one question and how to solve it.

A request is a **MARS request** when it asks for ``n`` > 1 or carries a ``mars`` object (what the
``openai`` client's ``extra_body={"mars": {...}}`` sends); any other request passes through to an
upstream unchanged. The ``mars`` object names the traces, warmup, method, spacing and the method's
knobs (:data:`mars.method.settings.LIVE_KEYS`); what it leaves out comes from the server's
defaults (``mars serve``'s options, themselves the settings declarations' defaults). The body is
typed first (:mod:`mars.serve.bodies`), then what only the server knows is checked here, before
any work, with the command line's own one-line messages (the same functions check both): a bad
body is an HTTP 400 carrying that line.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from ..engines.endpoint import printable
from ..engines.options import BY_NAME as ENGINE
from ..errors import MarsError, UsageError
from ..live import live_settings
from ..live.plan import LivePlan
from ..live.stepper import MAX_CHECKPOINTS
from ..method.answers import ANSWER_FORMATS
from ..method.learned import Calibration
from ..method.registry import DEFAULT_METHOD, Method, check_calibrated, live_method
from ..method.settings import LIVE_KEYS, SPECS, Settings
from ..store.grid import Grid
from .bodies import ChatBody, CompletionBody, quoted
from .options import SERVE

#: The typed body of a MARS request, either route's.
MarsBody = CompletionBody | ChatBody

#: The routes a question can come by, and the OpenAI object each answers with.
COMPLETIONS, CHAT = "completions", "chat"
#: The deepest nesting a request body may have (OpenAI bodies, tool schemas included, are far
#: shallower): deeper is refused before anything walks it.
MAX_DEPTH = 64
#: The fewest checkpoints a question's grid has when the server picks its spacing.
MIN_CHECKPOINTS = 4


class BadRequest(MarsError):
    """A request body the server refuses (HTTP 400, one line)."""

    def __init__(self, message: str, param: str | None = None, code: str = "invalid_request"):
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass(frozen=True)
class Defaults:
    """How a MARS request is solved unless it says otherwise (``mars serve``'s options)."""

    method: str = DEFAULT_METHOD
    traces: int = SERVE["traces"].default
    warmup: int = SPECS["warmup"].default
    spacing: int = ENGINE["spacing"].default
    max_tokens: int | None = ENGINE["max_tokens"].default  # None: the upstream's cap
    knobs: dict = field(default_factory=dict)
    #: traces a request may start at most: its n (traces) and its warmup
    max_traces: int = SERVE["max_traces"].default
    seed: int = ENGINE["seed"].default  # the traces' seed of a request that gives none
    temperature: float | None = None  # None: the upstream backend's
    top_p: float | None = None
    #: learned once (``--calibration``): MARS2 reads it instead of a warmup, which is then 0
    calibration: Calibration | None = None
    mars_for: str = SERVE["mars_for"].default  # which requests are questions (--mars-for)
    #: the answer formats a request may name (mars.answer_format): the built-in ones and the
    #: server's (--answer-format NAME=REGEX), and the one a request naming none gets
    answer_formats: dict = field(default_factory=lambda: dict(ANSWER_FORMATS))
    answer_format: str = SERVE["default_answer_format"].default

    def check(self) -> Defaults:
        """The defaults are checked as a request is (one line naming the option)."""
        method = live_method(self.method)
        for name in ("traces", "max_traces", "mars_for"):
            SERVE[name].check(getattr(self, name))
        for name, regex in self.answer_formats.items():
            if regex is not None:
                answer_pattern(regex, f"--answer-format {name}")
        if self.answer_format not in self.answer_formats:
            raise UsageError(
                f"--default-answer-format {self.answer_format}: not a format "
                f"({', '.join(self.answer_formats)})"
            )
        if self.calibration is not None:
            if self.warmup:
                raise UsageError(
                    f"--warmup {self.warmup}: --calibration replaces the warmup (give 0)"
                )
            check_calibrated(method, self.calibration)
        if self.traces + self.warmup > self.max_traces:
            both = f" + --warmup {self.warmup}" if self.warmup else ""
            raise UsageError(
                f"--traces {self.traces}{both}: more than --max-traces {self.max_traces} traces"
            )
        live_settings(self.traces, self.warmup, 0, self.spacing, self.max_tokens, self.knobs)
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
    #: the walk's settings of the method, the sizes, the seed and the spacing, checked once
    settings: Settings
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
    calibration: Calibration | None = None
    #: what the server changed of the request, said in the response (``mars.notes``)
    notes: tuple[str, ...] = ()
    answer_format: str = "boxed"  # how the traces write their final answer (ANSWER_FORMATS)
    spacing_given: bool = True  # the client chose the spacing (else the server's, fitted)
    answer_pattern: re.Pattern[str] | None = None  # its pattern (None: the last \boxed{})
    #: the client asked for its answer to be audited (mars.audit: true); the server's seeded
    #: sample audits others, whatever a client says
    audit: bool = False

    def with_max_tokens(self, max_tokens: int) -> Question:
        """The question with its token cap fixed and its grid fitted to it: a spacing the
        client did not ask for is narrowed to give at least :data:`MIN_CHECKPOINTS` checkpoints
        (said in ``notes``); a grid that still cannot be is refused naming the request's fields,
        not the command line's flags."""
        spacing, notes = self.spacing, self.notes
        if not self.spacing_given and max_tokens < MIN_CHECKPOINTS * spacing:
            spacing = max(1, max_tokens // MIN_CHECKPOINTS)
            notes = (
                *notes,
                f"a checkpoint every {spacing} tokens: the server's {self.spacing} would leave "
                f"fewer than {MIN_CHECKPOINTS} in max_tokens {max_tokens} (mars.spacing sets it)",
            )
        Grid.checked(spacing, max_tokens, names=_NAMES, most=MAX_CHECKPOINTS, error=_bad_spacing)
        return replace(
            self,
            max_tokens=int(max_tokens),
            spacing=spacing,
            settings=self.settings.replace(spacing=spacing),
            notes=notes,
        )

    def plan(self) -> LivePlan:
        """How the question is solved, once its token cap is fixed (:meth:`with_max_tokens`):
        what was checked as the request was read, with its grid."""
        assert self.max_tokens is not None
        return LivePlan.capped(
            self.method, self.settings, self.knobs, self.max_tokens, self.calibration
        )


def read_body(raw: bytes) -> dict:
    """The JSON object of a request body: not JSON, not an object, nested deeper than
    :data:`MAX_DEPTH` or holding text that is not valid Unicode (a lone surrogate escape such as
    ``"\\ud800"``, which JSON allows) is a :class:`BadRequest` naming where."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise BadRequest(f"the request body is nested more than {MAX_DEPTH} deep") from None
    except ValueError:  # UnicodeDecodeError is a ValueError
        raise BadRequest("the request body is not JSON", code="invalid_json") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    stack: list[tuple[Any, str, int]] = [(body, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                bad = value[exc.start].encode("unicode_escape").decode()
                field = printable(where.split(".")[0].split("[")[0], 40) or None
                raise BadRequest(
                    f"{printable(where, 80) or 'the request body'}: holds a lone surrogate "
                    f"({bad}), not valid Unicode text",
                    field,
                ) from None
            continue
        if isinstance(value, (dict, list)) and depth >= MAX_DEPTH:
            raise BadRequest(f"the request body is nested more than {MAX_DEPTH} deep")
        if isinstance(value, dict):
            for k, v in value.items():
                stack.append((k, where or "a key", depth + 1))
                stack.append((v, f"{where}.{k}" if where else str(k), depth + 1))
        elif isinstance(value, list):
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value))
    return body


def is_mars_request(body: dict, mars_for: str = "n") -> bool:
    """A request MARS solves: one with a ``mars`` object, or (``mars_for`` ``n``, the default)
    one asking for ``n`` > 1."""
    if body.get("mars") is not None:
        return True
    n = body.get("n")
    return mars_for == "n" and isinstance(n, int) and not isinstance(n, bool) and n > 1


def answer_pattern(regex: str, what: str) -> re.Pattern[str]:
    """A format's pattern, compiled (multi-line: ``^``/``$`` at every line), one line naming
    ``what`` if it does not compile."""
    try:
        return re.compile(regex, re.MULTILINE)
    except re.error as exc:
        raise UsageError(f"{what}: not a regular expression ({exc})") from None


#: the request's names of a grid's spacing and token cap
_NAMES = ("mars.spacing", "max_tokens")


def _bad_spacing(message: str) -> BadRequest:
    return BadRequest(message, "mars.spacing")


def prompt_seed(text: str) -> int:
    """A question's id for the engines' per-trace seeds: the same prompt and seed give the same
    traces (31 bits of the prompt's digest)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 33


def read_request(body: dict, kind: str) -> MarsBody:
    """The typed body of a MARS request (:mod:`mars.serve.bodies`); what does not fit is a
    :class:`pydantic.ValidationError` (:func:`~mars.serve.bodies.refusal` says it in one line)."""
    return (CompletionBody if kind == COMPLETIONS else ChatBody).model_validate(body)


def read_question(body: MarsBody, kind: str, defaults: Defaults) -> Question:
    """The question of a MARS request's typed body: the server's defaults where it says nothing,
    then what only the server knows checked (the method, the sizes against each other and
    ``--max-traces``, the knobs, the answer format): :class:`BadRequest`."""
    opts = body.options
    given = opts.model_fields_set
    try:
        method = live_method(opts.method if "method" in given else defaults.method)
    except MarsError as exc:
        raise BadRequest(str(exc), "mars.method") from None
    n, traces = body.n, opts.traces
    if traces is not None and n is not None and n > 1 and n != traces:
        raise BadRequest(f"n {n} and mars.traces {traces} disagree (give one)", "n")
    if traces is None:
        traces = n if n is not None and n > 1 else defaults.traces
    notes: list[str] = []
    if "warmup" in given:
        warmup = opts.warmup
        if defaults.calibration is not None and warmup:
            raise BadRequest(
                f"mars.warmup {warmup}: this server decides with a calibration learned once "
                "(mars serve --calibration): no warmup (give 0, or leave it out)",
                "mars.warmup",
            )
        if warmup > traces:
            raise BadRequest(
                f"mars.warmup {warmup}: more warmup traces than the {traces} the answer is made "
                "of (they would cost more than the answer itself)",
                "mars.warmup",
            )
    else:
        warmup = defaults.warmup
        if warmup > traces:  # the server's default, adapted to a small n and said so
            notes.append(
                f"the server's warmup of {warmup} traces was cut to n = {traces} (give "
                "mars.warmup to choose it)"
            )
            warmup = traces
    if traces + warmup > defaults.max_traces:
        who = "n" if n == traces else "mars.traces"
        both = f" + mars.warmup {warmup}" if warmup else ""
        raise BadRequest(
            f"{who} {traces}{both}: more traces than this server's --max-traces "
            f"{defaults.max_traces}",
            "mars.warmup" if traces <= defaults.max_traces else who,
        )
    spacing = opts.spacing if "spacing" in given else defaults.spacing
    spacing = Grid.checked(spacing, names=_NAMES, error=_bad_spacing).spacing
    knobs = {**defaults.knobs, **{k: getattr(opts, k) for k in LIVE_KEYS if k in given}}
    given_body = body.model_fields_set
    max_tokens = (
        body.max_completion_tokens if "max_completion_tokens" in given_body else body.max_tokens
    )
    if max_tokens is None:
        max_tokens = defaults.max_tokens
    seed = defaults.seed if body.seed is None else body.seed
    try:  # the grid is checked once the token cap is known (Question.with_max_tokens)
        settings = live_settings(traces, warmup, seed, spacing, None, knobs)
    except MarsError as exc:
        raise BadRequest(str(exc), "mars") from None
    fmt = opts.answer_format if "answer_format" in given else defaults.answer_format
    if fmt not in defaults.answer_formats:
        raise BadRequest(
            f"mars.answer_format {quoted(fmt)}: one of {', '.join(defaults.answer_formats)} "
            "(how the traces write their final answer)",
            "mars.answer_format",
        )
    regex = defaults.answer_formats[fmt]
    q = Question(
        kind=kind,
        model=body.model,
        prompt=_prompt(body.prompt) if isinstance(body, CompletionBody) else None,
        messages=[m.model_dump() for m in body.messages] if isinstance(body, ChatBody) else None,
        method=method,
        traces=traces,
        warmup=warmup,
        spacing=spacing,
        spacing_given="spacing" in given,
        max_tokens=max_tokens,
        knobs=knobs,
        settings=settings,
        seed=seed,
        seeded=body.seed is not None,
        temperature=body.temperature if "temperature" in given_body else defaults.temperature,
        top_p=body.top_p if "top_p" in given_body else defaults.top_p,
        stream=bool(body.stream),
        include_usage=body.include_usage,
        return_traces=opts.return_traces,
        ground_truth=opts.ground_truth,
        stop=(body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ()),
        user=body.user if isinstance(body.user, str) else None,
        calibration=defaults.calibration,
        notes=tuple(notes),
        answer_format=fmt,
        answer_pattern=None if regex is None else answer_pattern(regex, fmt),
        audit=opts.audit,
    )
    return q if max_tokens is None else q.with_max_tokens(max_tokens)


def _prompt(prompt: str | list[str]) -> str:
    return prompt if isinstance(prompt, str) else prompt[0]
