"""The typed request bodies of ``mars serve`` (issue 39, item 3): a body pydantic refuses is said in
the command line's one line, naming the request's field; what only the server knows is checked by
``read_question``; the OpenAI shapes answered are exactly the ones written before they were
typed."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pydantic")

from mars.serve.bodies import MARS_KEYS, refusal
from mars.serve.requests import (
    CHAT,
    COMPLETIONS,
    BadRequest,
    Defaults,
    read_question,
    read_request,
)
from mars.serve.responses import chunk, completion, error_body

FAST = Defaults(traces=16, warmup=4, spacing=2048, max_tokens=16384)


def _said(body: dict, kind: str = COMPLETIONS) -> tuple[str, str | None]:
    """(message, param) of a refused body, whichever check refuses it."""
    from pydantic import ValidationError

    try:
        read_question(read_request(body, kind), kind, FAST)
    except ValidationError as exc:
        return refusal(exc, list(FAST.answer_formats))
    except BadRequest as exc:
        return str(exc), exc.param
    raise AssertionError(f"{body} was accepted")


@pytest.mark.parametrize(
    ("body", "message", "param"),
    [
        ({"n": True}, "n a boolean: must be a whole number ≥ 1", "n"),
        ({"n": 0}, "n 0: must be a whole number ≥ 1", "n"),
        ({"n": 4, "mars": {"traces": 4.0}}, "mars.traces 4.0: must be a whole number ≥ 1", None),
        ({"mars": {"warmup": None}}, "mars.warmup null: must be a whole number ≥ 0", None),
        ({"mars": {"spacing": "64"}}, "mars.spacing '64': must be a whole number ≥ 1", None),
        ({"mars": {}, "max_completion_tokens": -1}, "max_tokens -1: must be a whole number", None),
        ({"mars": {}, "seed": 2**40}, "seed 1099511627776: must be at most 4,294,967,295", None),
        ({"mars": {}, "temperature": "hot"}, "temperature 'hot': must be a number", None),
        ({"mars": {}, "top_p": 0}, "top_p 0.0: must lie in (0, 1]", None),
        ({"mars": {}, "stop": [1]}, "stop: a string or a list of strings", None),
        ({"mars": {"audit": 1}}, "mars.audit: must be true or false, not a number", None),
        ({"mars": {"ground_truth": 7}}, "mars.ground_truth: must be a string", None),
        ({"mars": {"answer_format": 3}}, "mars.answer_format 3: one of boxed", None),
        ({"mars": {"answer_format": "nope"}}, "mars.answer_format 'nope': one of boxed", None),
        ({"mars": "sc"}, "mars: must be an object", "mars"),
        ({"mars": {"zz": 1, "bogus": 2}}, "mars: unknown keys ['bogus', 'zz'] (known: ", "mars"),
        (
            {"mars": {"method": None}},
            "mars.method: must be a method's name (a string), not null",
            None,
        ),
        ({"mars": {"gamma": "x"}}, "live setting gamma='x': must be a number", "mars"),
        ({"mars": {}, "echo": True}, "echo: not supported in a MARS request", None),
    ],
)
def test_a_refused_body_is_one_line_naming_the_field(body, message, param):
    said, named = _said({"prompt": "x", **body})
    assert said.startswith(message) and "\n" not in said, said
    assert named == (param or message.split(" ")[0].rstrip(":")), named
    assert "--" not in said or "mars" == named  # a knob is the command line's own line


def test_the_first_refusal_is_the_one_the_body_is_read_in_order_of():
    """Several mistakes: the prompt before what cannot be honoured, that before the ``mars``
    object, that before the sizes and the sampling."""
    bad = {"n": "x", "temperature": -1, "mars": {"bogus": 1}, "logprobs": 3}
    assert _said({"prompt": 5, **bad})[1] == "prompt"
    assert _said({"prompt": "x", **bad})[1] == "logprobs"
    assert _said({"prompt": "x", **bad, "logprobs": None})[1] == "mars"
    assert _said({"prompt": "x", "n": "x", "temperature": -1})[1] == "n"


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([], "messages: a non-empty list of messages"),
        ("hi", "messages: a non-empty list of messages"),
        (["hi"], "messages[0]: an object with a role and content"),
        ([{"role": "user", "content": "a"}, {"content": "b"}], "messages[1]: an object with a"),
        ([{"role": "user", "content": [{"type": "image"}]}], "messages[0].content: text only"),
    ],
)
def test_a_chat_body_names_the_message_it_refuses(messages, message):
    said, param = _said({"messages": messages, "n": 4}, CHAT)
    assert said.startswith(message) and param == "messages"


def test_a_valid_body_is_read_with_the_servers_defaults_where_it_says_nothing():
    body = {
        "messages": [{"role": "user", "content": "2 + 3?", "name": "ann"}],
        "n": 8,
        "temperature": None,  # null: the upstream's own
        "stop": "\n\n",
        "stream": 1,
        "stream_options": {"include_usage": True},
        "mars": {"spacing": 512, "gamma": 0.3, "return_traces": True},
        "presence_penalty": 0.0,  # neutral: accepted
        "response_format": {"type": "text"},
        "some_future_openai_field": {"x": 1},  # not mars's: ignored
    }
    q = read_question(read_request(body, CHAT), CHAT, FAST)
    assert q.messages == body["messages"] and q.prompt is None
    assert (q.traces, q.warmup, q.spacing, q.max_tokens) == (8, 4, 512, 16384)
    assert q.knobs == {"gamma": 0.3} and q.return_traces and q.stop == ("\n\n",)
    assert q.temperature is None and q.stream and q.include_usage and q.spacing_given
    assert q.settings.spacing == 512 and q.settings.gamma == 0.3
    plan = q.plan()
    assert plan.traces == 8 and plan.warmup == 4 and plan.checkpoints[-1] == 16384 // 512 * 512
    assert MARS_KEYS[0] == "method" and "audit" in MARS_KEYS


def test_the_openai_shapes_are_the_ones_written_before_they_were_typed():
    """Fields in OpenAI's order; one not given left out, one given as None written as null."""
    usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    whole = completion(CHAT, "id", "m", "5", "stop", usage, {"answer": "5"}, None)
    assert list(whole) == ["id", "object", "created", "model", "choices", "usage", "mars"]
    assert whole["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "5"},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    traces = [{"text": "t", "finished": False, "trace": 1}]
    text = completion(COMPLETIONS, "id", "m", "5", "stop", usage, {}, traces)["choices"]
    assert text[1] == {
        "index": 1,
        "text": "t",
        "logprobs": None,
        "finish_reason": "length",
        "mars": {"finished": False, "trace": 1},
    }
    first = chunk(CHAT, "id", "m", role=True, text="", mars={"phase": "queued"})
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert list(first) == ["id", "object", "created", "model", "choices", "mars"]
    last = chunk(COMPLETIONS, "id", "m", usage=usage, no_choices=True)
    assert last["choices"] == [] and last["usage"] == usage and "mars" not in last
    assert json.dumps(error_body(400, "bad", "invalid_request", "n")) == json.dumps(
        {
            "error": {
                "message": "bad",
                "type": "invalid_request_error",
                "param": "n",
                "code": "invalid_request",
            }
        }
    )
