"""The OpenAI shapes ``mars serve`` answers in: completions, chat completions, their stream
chunks and error objects (``{"error": {"message", "type", "param", "code"}}``)."""

from __future__ import annotations

import json
import time
import uuid

from pydantic import BaseModel

from .requests import CHAT

#: error types by HTTP status, as OpenAI names them
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    409: "conflict_error",
    429: "rate_limit_error",
    499: "cancelled",
    500: "server_error",
    502: "upstream_error",
    503: "upstream_error",
}


class _Shape(BaseModel):
    """An answer's shape: the fields it was given, in their declared order (a field not given is
    left out of the JSON; one given as None is ``null``)."""

    def json_object(self) -> dict:
        return self.model_dump(exclude_unset=True)


class ErrorDetail(_Shape):
    message: str
    type: str
    param: str | None
    code: str


class ErrorBody(_Shape):
    """An OpenAI error object."""

    error: ErrorDetail


class Usage(_Shape):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatMessage(_Shape):
    role: str
    content: str


class Choice(_Shape):
    """One choice of a whole answer (completions: ``text``; chat: ``message``); a returned
    trace's carries its ``mars`` view."""

    index: int
    text: str | None = None
    message: ChatMessage | None = None
    logprobs: None = None
    finish_reason: str | None = None
    mars: dict | None = None


class Completion(_Shape):
    """A whole answer: ``text_completion`` or ``chat.completion``."""

    id: str
    object: str
    created: int
    model: str
    choices: list[Choice]
    usage: dict
    mars: dict


class Delta(_Shape):
    role: str | None = None
    content: str | None = None


class ChunkChoice(_Shape):
    index: int
    text: str | None = None
    delta: Delta | None = None
    logprobs: None = None
    finish_reason: str | None = None


class Chunk(_Shape):
    """One stream chunk."""

    id: str
    object: str
    created: int
    model: str
    choices: list[ChunkChoice]
    mars: dict | None = None
    usage: dict | None = None


def error_body(status: int, message: str, code: str, param: str | None = None) -> dict:
    detail = ErrorDetail(
        message=message, type=ERROR_TYPES.get(status, "server_error"), param=param, code=code
    )
    return ErrorBody(error=detail).json_object()


def new_id(kind: str) -> str:
    return ("chatcmpl-" if kind == CHAT else "cmpl-") + uuid.uuid4().hex[:24]


def completion(
    kind: str,
    rid: str,
    model: str,
    content: str,
    finish_reason: str,
    usage: dict,
    mars: dict,
    traces: list[dict] | None = None,
) -> dict:
    """A whole answer: the answer as choice 0, the traces after it when asked for."""
    choices = [_choice(kind, 0, content, finish_reason)]
    for i, t in enumerate(traces or (), start=1):
        c = _choice(kind, i, t["text"], "stop" if t["finished"] else "length")
        c.mars = {k: v for k, v in t.items() if k != "text"}
        choices.append(c)
    return Completion(
        id=rid,
        object="chat.completion" if kind == CHAT else "text_completion",
        created=int(time.time()),
        model=model,
        choices=choices,
        usage=usage,
        mars=mars,
    ).json_object()


def _choice(kind: str, index: int, text: str, finish_reason: str) -> Choice:
    if kind == CHAT:
        return Choice(
            index=index,
            message=ChatMessage(role="assistant", content=text),
            logprobs=None,
            finish_reason=finish_reason,
        )
    return Choice(index=index, text=text, logprobs=None, finish_reason=finish_reason)


def chunk(
    kind: str,
    rid: str,
    model: str,
    *,
    text: str | None = None,
    role: bool = False,
    finish_reason: str | None = None,
    mars: dict | None = None,
    usage: dict | None = None,
    no_choices: bool = False,
) -> dict:
    """One stream chunk: a piece of the answer, a progress report (``mars``), the finish, or
    the usage (no choices)."""
    choices = []
    if not no_choices:
        if kind == CHAT:
            delta = Delta(role="assistant") if role else Delta()
            if text is not None:
                delta.content = text
            choice = ChunkChoice(index=0, delta=delta)
        else:
            choice = ChunkChoice(index=0, text=text or "")
        choice.logprobs = None
        choice.finish_reason = finish_reason
        choices.append(choice)
    out = Chunk(
        id=rid,
        object="chat.completion.chunk" if kind == CHAT else "text_completion",
        created=int(time.time()),
        model=model,
        choices=choices,
    )
    if mars is not None:
        out.mars = mars
    if usage is not None:
        out.usage = usage
    return out.json_object()


def sse(data: dict | str) -> bytes:
    """One server-sent event."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()
