"""The request bodies of a MARS request, typed (pydantic): what a client may send, checked in one
pass, and each refusal mapped to the one line the command line would say (:func:`refusal`).

The ``mars`` object forbids keys it does not know; an OpenAI body names the fields ``mars serve``
reads, and those it cannot honour (:data:`UNSUPPORTED`), accepted only with a value that asks for
nothing; the other OpenAI fields (``frequency_penalty`` of 0, ``n`` of a pass-through…) are left
to the upstream or ignored. Values are strict (JSON's types: ``true`` is no number, ``4.0`` no
count of traces). What depends on the server (the methods, the formats, the knobs' ranges) is
checked by :func:`mars.serve.requests.read_question`, which maps a valid body to a question.
"""

from __future__ import annotations

from typing import Annotated, Any

from annotated_types import Len
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
)
from pydantic_core import PydanticCustomError

from ..engines.endpoint import shown
from ..method.settings import LIVE_KEYS, MAX_SEED

#: Request fields a MARS request cannot honour (the traces are plain text generations, sampled
#: with temperature and top-p only), each with the values that ask for nothing and are accepted.
UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "logprobs": (None, False),
    "top_logprobs": (None,),
    "echo": (None, False),
    "best_of": (None, 1),
    "suffix": (None, ""),
    "tools": (None, []),
    "functions": (None, []),
    "tool_choice": (None, "none"),
    "function_call": (None, "none"),
    "response_format": (None, {"type": "text"}),
    "logit_bias": (None, {}),
    "presence_penalty": (None, 0),
    "frequency_penalty": (None, 0),
    "repetition_penalty": (None, 1),
}
_STRICT = ConfigDict(strict=True)


class _MarsFields(BaseModel):
    """The ``mars`` object's own keys (the method's knobs are added below, one field each).
    A key left out takes the server's default (see ``model_fields_set``); given, even as
    ``null``, it is checked."""

    model_config = ConfigDict(strict=True, extra="forbid")

    method: str = ""
    traces: Annotated[int | None, Field(ge=1)] = None
    warmup: Annotated[int, Field(ge=0)] = 0
    spacing: Annotated[int, Field(ge=1)] = 1
    return_traces: bool = False
    ground_truth: str = ""
    answer_format: str = ""
    audit: bool = False


#: The ``mars`` object: its keys, then one field per knob (:data:`LIVE_KEYS`), any JSON value
#: (the settings declarations check them, in the command line's words).
MarsObject: type[_MarsFields] = create_model(  # type: ignore[call-overload, unused-ignore]
    "MarsObject", __base__=_MarsFields, **dict.fromkeys(LIVE_KEYS, (Any, None))
)
#: The ``mars`` object's keys besides the method's knobs.
MARS_KEYS = tuple(_MarsFields.model_fields)


class Message(BaseModel):
    """One chat message: a role and text (its other keys are the template's)."""

    model_config = ConfigDict(strict=True, extra="allow")

    role: str
    content: str


class _Body(BaseModel):
    """What both routes read of a MARS request."""

    model_config = _STRICT

    model: str | None = None
    n: Annotated[int | None, Field(ge=1)] = None
    max_tokens: Annotated[int | None, Field(ge=1)] = None
    max_completion_tokens: Annotated[int | None, Field(ge=1)] = None
    seed: Annotated[int | None, Field(ge=0, le=MAX_SEED)] = None
    temperature: Annotated[float | None, Field(gt=0, allow_inf_nan=False)] = None
    top_p: Annotated[float | None, Field(gt=0, le=1, allow_inf_nan=False)] = None
    stop: str | list[str] | None = None
    stream: Any = False  # truthy or not, as OpenAI reads it
    stream_options: Any = None
    user: Any = None
    mars: MarsObject | None = None  # type: ignore[valid-type]
    logprobs: Any = None
    top_logprobs: Any = None
    echo: Any = None
    best_of: Any = None
    suffix: Any = None
    tools: Any = None
    functions: Any = None
    tool_choice: Any = None
    function_call: Any = None
    response_format: Any = None
    logit_bias: Any = None
    presence_penalty: Any = None
    frequency_penalty: Any = None
    repetition_penalty: Any = None

    @field_validator("mars", mode="before")
    @classmethod
    def _no_options(cls, v: Any) -> Any:
        """An empty ``mars`` (``{}``, ``[]``, ``0``, ``false``) asks for the defaults."""
        return v if v else None

    @field_validator(*UNSUPPORTED)
    @classmethod
    def _neutral(cls, v: Any, info) -> Any:
        if not _neutral(v, UNSUPPORTED[info.field_name]):
            raise PydanticCustomError("unsupported", "not supported in a MARS request")
        return v

    @property
    def include_usage(self) -> bool:
        so = self.stream_options
        return isinstance(so, dict) and bool(so.get("include_usage"))

    @property
    def options(self) -> _MarsFields:
        """The ``mars`` object (empty when the body has none)."""
        return self.mars if self.mars is not None else MarsObject()


class CompletionBody(_Body):
    """``POST /v1/completions``: one prompt (a string, or a list of one)."""

    prompt: str | Annotated[list[str], Len(1, 1)]


class ChatBody(_Body):
    """``POST /v1/chat/completions``: a non-empty conversation of text messages."""

    messages: Annotated[list[Message], Len(1)]


# -- a refusal in one line ---------------------------------------------------------------------


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _neutral(value: Any, accepted: tuple[Any, ...]) -> bool:
    """Whether a field's value asks for nothing (``0`` and ``0.0`` alike, ``False`` not ``0``)."""
    return any(
        a == value and (type(a) is type(value) or (_num(a) and _num(value))) for a in accepted
    )


def json_type(v: Any) -> str:
    """What a JSON value is, for a message that must not quote it (it may be huge)."""
    names = {bool: "a boolean", str: "a string", list: "a list", dict: "an object"}
    return next(
        (w for t, w in names.items() if isinstance(v, t)), "a number" if _num(v) else "null"
    )


def quoted(v: Any) -> str:
    """A value a client sent, for a message: a number or short text as it is, else its kind."""
    if _num(v) or (isinstance(v, str) and len(v) <= 40):
        return shown(v, 40) if isinstance(v, str) else repr(v)[:40]
    return json_type(v)


#: The whole numbers of a body: (name in a message, least value).
_WHOLE = {
    ("n",): ("n", 1),
    ("max_tokens",): ("max_tokens", 1),
    ("max_completion_tokens",): ("max_tokens", 1),
    ("seed",): ("seed", 0),
    ("mars", "traces"): ("mars.traces", 1),
    ("mars", "warmup"): ("mars.warmup", 0),
    ("mars", "spacing"): ("mars.spacing", 1),
}
#: The order a body's refusals are told in (the first is said): the prompt, what cannot be
#: honoured, the ``mars`` object, the sizes and the sampling.
_ORDER = (
    "prompt",
    "messages",
    *UNSUPPORTED,
    "mars",
    "mars.*",
    "mars.method",
    "n",
    "mars.traces",
    "mars.warmup",
    "mars.spacing",
    "max_completion_tokens",
    "max_tokens",
    "seed",
    "temperature",
    "top_p",
    "stop",
    "mars.return_traces",
    "mars.answer_format",
    "mars.audit",
    "mars.ground_truth",
)


def _rank(loc: tuple) -> int:
    key = ".".join(str(p) for p in loc[:2]) if loc[:1] == ("mars",) else str(loc[0])
    if key in _ORDER:
        return _ORDER.index(key)
    return _ORDER.index("mars.*") if loc[:1] == ("mars",) else len(_ORDER)


def refusal(exc: ValidationError, formats: list[str]) -> tuple[str, str | None]:
    """(message, param) of a body pydantic refused: its first refusal (in the order the fields
    are read) in the command line's words; ``formats``: the answer formats the server knows."""
    errors = sorted(exc.errors(), key=lambda e: _rank(tuple(e["loc"])))
    e = errors[0]
    loc: tuple = tuple(e["loc"])
    kind, v = e["type"], e.get("input")
    if loc[:1] == ("mars",) and len(loc) > 1 and kind == "extra_forbidden":
        unknown = sorted(str(x["loc"][1]) for x in errors if x["type"] == "extra_forbidden")
        known = ", ".join(MARS_KEYS + LIVE_KEYS)
        return f"mars: unknown keys {unknown} (known: {known})", "mars"
    if loc in _WHOLE:
        name, low = _WHOLE[loc]
        if kind == "less_than_equal":
            return f"{name} {v}: must be at most {MAX_SEED:,}", name
        return f"{name} {quoted(v)}: must be a whole number ≥ {low}", name
    key = loc[0]
    if key == "prompt":
        return "prompt: one prompt, as a string, per MARS request", "prompt"
    if key == "messages":
        if len(loc) == 1:
            return "messages: a non-empty list of messages", "messages"
        if loc[2:3] == ("content",):
            return f"messages[{loc[1]}].content: text only in a MARS request", "messages"
        return f"messages[{loc[1]}]: an object with a role and content", "messages"
    if key in UNSUPPORTED:
        return (
            f"{key}: not supported in a MARS request (its traces are plain text, sampled with "
            "temperature and top_p): leave it out, or send the request without n > 1 and "
            "without a mars object",
            key,
        )
    if key == "temperature":
        if kind == "greater_than":
            return (
                f"temperature {v:g}: the traces of a MARS request must be sampled (> 0; at 0 "
                "every trace is the same greedy one), e.g. 0.6",
                "temperature",
            )
        return f"temperature {quoted(v)}: must be a number", "temperature"
    if key == "top_p":
        if kind in ("greater_than", "less_than_equal"):
            return f"top_p {float(v)}: must lie in (0, 1]", "top_p"
        return f"top_p {quoted(v)}: must be a number", "top_p"
    if key == "stop":
        return "stop: a string or a list of strings", "stop"
    if loc == ("mars",):
        return "mars: must be an object", "mars"
    field = ".".join(map(str, loc[:2]))
    if loc == ("mars", "method"):
        return f"mars.method: must be a method's name (a string), not {json_type(v)}", field
    if loc in (("mars", "return_traces"), ("mars", "audit")):
        return f"{field}: must be true or false, not {json_type(v)}", field
    if loc == ("mars", "answer_format"):
        return (
            f"mars.answer_format {quoted(v)}: one of {', '.join(formats)} (how the traces "
            "write their final answer)",
            field,
        )
    if loc == ("mars", "ground_truth"):
        return "mars.ground_truth: must be a string", field
    if key == "model":  # a name other than the served one is a 404 before the body is read
        return f"model: must be a string, not {json_type(v)}", "model"
    return f"{field}: {e['msg']}", field
