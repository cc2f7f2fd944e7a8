"""Fuzzing the server protocol (mars/engines/server/): fake servers whose answers hypothesis
draws.

The servers are the fakes of ``tests/data/servers.py`` (llama.cpp, vLLM, SGLang and a text-only
llama-cpp-python), honest until an example changes their answers: a valid answer with parts
replaced, removed or retyped (NaN, ±inf, huge integers, strings with escape sequences, deep
lists, the API key echoed back), bytes that are no JSON, error statuses with any body.  Whatever
comes back, the backend either reads it into traces that hold up (lengths within what was asked,
finite confidences, one per token, ids of the tokenizer's vocabulary) or refuses it with one
printable line that shows neither the API key nor the URL's password — never another exception,
and the next honest answer is read as if nothing had happened.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

httpx = pytest.importorskip("httpx")

from mars.engines.endpoint import printable  # noqa: E402
from mars.engines.server import ServerBackend  # noqa: E402
from mars.errors import MarsError  # noqa: E402
from mars.store.problems import Problem  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "data"
_spec = importlib.util.spec_from_file_location("fake_servers", DATA / "servers.py")
fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake)

KEY = "s3cret-Key-Zq7"
PASSWORD = "pw-Secret-9x"
#: the server, with the key in $MARS_API_KEY; or its URL holding a password (one Authorization
#: header: one or the other)
URL, URL_WITH_PASSWORD = "http://toy:8000", f"http://alice:{PASSWORD}@toy:8000"
Q = Problem(qid=3, question="What is 2 + 3?", answer="5", dataset="toy")
KINDS = ("llama.cpp", "vllm", "sglang", "llama-cpp-python")
#: the fast loop fuzzes the two token-level protocols most servers speak; every kind is fuzzed by
#: the whole suite (the other two are marked slow)
FUZZED_KINDS = [
    k if k in ("llama.cpp", "vllm") else pytest.param(k, marks=pytest.mark.slow) for k in KINDS
]
SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# -- what a hostile server may send ------------------------------------------------------------

_text = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [KEY, PASSWORD, "\x1b[2J\x1b]0;x\x07", "\u202e", "NaN", "-1.5", "token_id:3", "<|im_end|>"]
    ),
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2**31, 2**63, 10**9, len(fake.VOCAB), fake.EOS]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, 1e-300, -9999.0, 5.0]),
    _text,
)
JSON = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_text, inner, max_size=4)),
    max_leaves=12,
)


def _paths(tree, prefix=()):
    """Every place in a JSON tree (a path of keys and indices)."""
    yield prefix
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from _paths(v, (*prefix, i))


def _apply(tree, path, op, value):
    """The tree with the node at ``path`` replaced by ``value``, removed, or its list emptied,
    doubled or cut (``op``)."""
    if not path:
        return value if op == "replace" else tree
    parent = tree
    for k in path[:-1]:
        parent = parent[k]
    k = path[-1]
    node = parent[k]
    if op == "replace":
        parent[k] = value
    elif op == "remove":
        del parent[k]
    elif isinstance(node, list):
        parent[k] = {"empty": [], "double": node + node, "cut": node[: len(node) // 2]}[op]
    else:
        parent[k] = value
    return tree


@st.composite
def mutations(draw):
    """A change of a valid answer: one to three of its nodes replaced, removed or retyped."""
    steps = []
    for _ in range(draw(st.integers(1, 3))):
        pick = draw(st.floats(0, 1, exclude_max=True))
        op = draw(st.sampled_from(["replace", "replace", "remove", "empty", "double", "cut"]))
        steps.append((pick, op, draw(JSON)))

    def change(out, body):
        for pick, op, value in steps:
            paths = list(_paths(out))
            out = _apply(out, paths[int(pick * len(paths))], op, copy.deepcopy(value))
        return out

    return change


#: what a completion request is answered with: None (honestly), a change of the valid answer,
#: or (status, bytes) sent as they are
ANSWERS = st.one_of(
    mutations(),
    st.tuples(st.sampled_from([200, 400, 401, 404, 422, 500, 503]), st.binary(max_size=64)),
    st.tuples(
        st.sampled_from([200, 400, 500]),
        JSON.map(lambda v: json.dumps(v).encode()),
    ),
    st.tuples(st.just(200), st.just(b'{"choices": [{"text": "' + b"[" * 5000)),  # truncated
    st.tuples(st.just(200), st.just(b"[" * 100_000 + b"]" * 100_000)),  # deeper than a parser
)


class Hostile:
    """A fake server of ``kind`` (``api_key`` required, if any) whose completion answers go
    through :attr:`answer` once set."""

    def __init__(self, kind: str, api_key: str | None = KEY):
        self.server = fake.FakeServer(kind, api_key=api_key, mangle=self._mangle)
        self.answer = None
        self.inner = self.server.transport()
        self.path = self.server.completion_path()

    def _mangle(self, out, body):
        return self.answer(out, body) if callable(self.answer) else out

    async def handle(self, request):
        if request.url.path == self.path and isinstance(self.answer, tuple):
            status, content = self.answer
            return httpx.Response(status, content=content)
        return await self.inner.handle_async_request(request)

    def transport(self):
        return httpx.MockTransport(self.handle)


def assert_shown_safely(exc: BaseException, secret: str) -> None:
    """One printable line that does not show ``secret`` (the key or password in use)."""
    msg = str(exc)
    assert msg and "\n" not in msg and msg == printable(msg, 100_000), repr(msg)
    assert secret not in msg, msg


def assert_traces_hold(batch, max_tokens: int) -> None:
    for j in range(batch.n):
        r = batch.result(j)
        assert 0 <= r.length <= max_tokens
        ids = np.asarray(r.token_ids)
        assert len(ids) == r.length and ((ids >= 0) & (ids < len(fake.VOCAB))).all()
        assert r.confs is not None and len(r.confs) == r.length
        assert np.isfinite(np.asarray(r.confs, np.float64)).all()


def run_question(be: ServerBackend, seed: int, max_tokens: int = 8):
    batch = be.start(Q, 2, seed)
    batch.advance(max_tokens // 2)
    running = np.flatnonzero(~np.asarray(batch.ended))
    probes = batch.probe(running) if running.size else []
    assert len(probes) == running.size
    batch.advance(max_tokens)
    return batch


@pytest.fixture
def with_key(monkeypatch):
    monkeypatch.setenv("MARS_API_KEY", KEY)


@pytest.mark.parametrize("kind", FUZZED_KINDS)
def test_any_answer_is_read_or_refused_in_one_safe_line(kind, with_key):
    hostile = Hostile(kind)
    be = ServerBackend(
        base_url=URL,
        transport=hostile.transport(),
        tokenizer=fake.tokenizer(),
        max_tokens=8,
        retries=0,
        timeout=20,
    )
    honest = run_question(be, 0)

    @SETTINGS
    @given(answer=ANSWERS, seed=st.integers(0, 3))
    def check(answer, seed):
        hostile.answer = answer
        try:
            batch = run_question(be, seed)
        except MarsError as exc:
            assert_shown_safely(exc, KEY)
        else:
            assert_traces_hold(batch, 8)
        finally:
            hostile.answer = None

    check()
    again = run_question(be, 0)  # nothing a hostile answer did lingers
    assert [again.token_ids(j) for j in range(2)] == [honest.token_ids(j) for j in range(2)]


@pytest.mark.parametrize("kind", FUZZED_KINDS)
def test_any_connect_time_answer_connects_or_is_refused_in_one_safe_line(kind):
    """The listing of models, the server's report, the tokenizer check and the trial request,
    each answered by hypothesis: a backend that generates sound traces, or one line."""
    probe = fake.FakeServer(kind)
    info = [*probe.info(), "/v1/models", "/tokenize", "/extras/tokenize"]

    @SETTINGS
    @given(
        where=st.sampled_from([*info, "trial"]),
        answer=st.one_of(mutations(), st.tuples(st.sampled_from([200, 404, 500]), JSON)),
    )
    def check(where, answer):
        hostile = Hostile(kind, api_key=None)
        inner = hostile.server.transport()

        async def handle(request):
            path = request.url.path
            if where == "trial" and path == hostile.path:
                hostile.answer = answer if callable(answer) else None
                if isinstance(answer, tuple):
                    return httpx.Response(answer[0], content=json.dumps(answer[1]).encode())
            elif path == where:
                r = await inner.handle_async_request(request)
                if isinstance(answer, tuple):
                    return httpx.Response(answer[0], content=json.dumps(answer[1]).encode())
                out = answer(json.loads(await r.aread()), None)
                return httpx.Response(200, content=json.dumps(out).encode())
            if path == hostile.path:
                hostile.answer = None
            return await inner.handle_async_request(request)

        try:
            be = ServerBackend(
                base_url=URL_WITH_PASSWORD,
                transport=httpx.MockTransport(handle),
                tokenizer=fake.tokenizer(),
                max_tokens=8,
                retries=0,
                timeout=20,
            )
        except MarsError as exc:
            assert_shown_safely(exc, PASSWORD)
            return
        try:
            batch = run_question(be, 1)
        except MarsError as exc:
            assert_shown_safely(exc, PASSWORD)
        else:
            assert_traces_hold(batch, 8)
        finally:
            be.close()

    check()
