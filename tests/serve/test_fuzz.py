"""Fuzzing the request body of ``mars serve`` (hypothesis): bodies drawn over the OpenAI schema and
the ``mars`` object — each field left out, given a plausible value, or any JSON value (NaN, huge
numbers, lone surrogates, deep lists) — on both routes, streamed or not. Every body is answered
with a 2xx or an OpenAI error object with a 4xx, never a 5xx; a 200 stream never carries an
error event and ends with ``[DONE]``."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

pytest.importorskip("starlette")

from serving import serving

from mars.method.registry import METHODS
from mars.method.settings import LIVE_KEYS
from mars.serve.requests import Defaults

pytestmark = pytest.mark.slow

#: small questions: a valid body costs milliseconds on the synthetic engine
DEFAULTS = Defaults(method="sc", traces=4, warmup=0, spacing=2048, max_tokens=4096, max_traces=8)

_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["\ud800", "a\udfff", "\x1b[31m", "sc", "tokens", "0.5", ""]),
)
_json = st.recursive(
    _leaf,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=8,
)
_small = st.integers(min_value=0, max_value=10)


#: the fields of the ``mars`` object drawn, and of the body; one of either may be replaced by any
#: JSON value (or an unknown key added)
MARS_FIELDS = {
    "method": st.sampled_from([*sorted(METHODS), "nope"]),
    "traces": _small,
    "warmup": st.integers(min_value=0, max_value=4),
    "spacing": st.integers(min_value=16, max_value=4096),
    "return_traces": st.booleans(),
    "ground_truth": st.text(max_size=4),
    **{k: st.floats(min_value=-1, max_value=5) | _small for k in LIVE_KEYS[:4]},
}
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant"]), "content": st.text(max_size=20)}
)
#: what every drawn body has: a prompt for either route, and n > 1 (a MARS request)
REQUIRED = {
    "prompt": st.text(max_size=30),
    "messages": st.lists(_message, min_size=1, max_size=3),
    "n": st.integers(min_value=2, max_value=8),
}
BODY_FIELDS = {
    "model": st.just("synthetic:qwen3-8b"),
    "max_tokens": st.integers(min_value=2048, max_value=8192),
    "temperature": st.floats(min_value=0.1, max_value=2),
    "top_p": st.floats(min_value=0.1, max_value=1),
    "stop": st.lists(st.text(max_size=3), max_size=3),
    "seed": st.integers(min_value=0, max_value=2**63 - 1),  # over 2^32 - 1: a 400
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    "user": st.text(max_size=5),
    "presence_penalty": st.sampled_from([0, 0.0, 0.5]),
    "response_format": st.sampled_from([{"type": "text"}, {"type": "json_object"}]),
    "mars": st.fixed_dictionaries({}, optional=MARS_FIELDS),
}


def _mutate(body: dict, where: tuple[str, str] | None, value) -> dict:
    """``body`` with one field (of the body, or of its ``mars`` object) replaced by any JSON."""
    if where is None:
        return body
    part, key = where
    if part == "mars":
        return {**body, "mars": {**(body.get("mars") or {}), key: value}}
    return {**body, key: value}


_body = st.builds(
    _mutate,
    st.fixed_dictionaries(REQUIRED, optional=BODY_FIELDS),
    st.none()
    | st.tuples(st.just("body"), st.sampled_from([*REQUIRED, *BODY_FIELDS, "logprobs", "tools"]))
    | st.tuples(st.just("mars"), st.sampled_from([*MARS_FIELDS, "bogus"])),
    _json,
)


@pytest.fixture(scope="module")
def server():
    with serving(["synthetic"], DEFAULTS) as running, httpx.Client(timeout=120) as http:
        yield running, http


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(body=_body, route=st.sampled_from(["/v1/completions", "/v1/chat/completions"]))
def test_every_body_is_answered_or_refused_as_openai_does(server, body, route):
    running, http = server
    raw = json.dumps(body).encode()  # NaN as NaN, lone surrogates as \ud800 escapes
    with http.stream(
        "POST", running.url + route, content=raw, headers={"Content-Type": "application/json"}
    ) as r:
        text = r.read().decode()
    event(f"HTTP {r.status_code}")
    assert r.status_code < 500, text
    if r.status_code >= 400:
        err = json.loads(text)["error"]
        assert set(err) == {"message", "type", "param", "code"}
        assert err["message"] and "\n" not in err["message"] and "Traceback" not in err["message"]
        return
    if r.headers["content-type"].startswith("text/event-stream"):
        assert '"error"' not in text and text.rstrip().endswith("data: [DONE]"), text[-300:]
    else:
        assert "choices" in json.loads(text)
