"""Trace-affine routing (mars/serve/upstreams.py, ``Router``): every request of a trace — each
checkpoint's continuation and each probe — goes to the replica that holds the trace's prefix; a
question's traces are spread evenly over the replicas, the same way for the same replicas and
seed whatever the order they were given in; a replica that fails moves its traces (once in the
log), and they stay where they went; passed-through requests take the least loaded replica;
``--affinity-header`` sends each trace's key upstream.

The replicas are the fake servers of ``tests/data/servers.py``, each with its own prefix cache,
so what a probe finds cached tells where its trace was before."""

from __future__ import annotations

import logging
import re
from collections import Counter, defaultdict

import httpx
import pytest

pytest.importorskip("starlette")

from serving import serving

from mars.errors import UsageError
from mars.serve.options import ROUTINGS
from mars.serve.requests import Defaults
from mars.serve.upstreams import (
    Router,
    Upstream,
    Upstreams,
    affinity_key,
    question_key,
)
from serve.common import fake_upstreams, fakes

HEADER = "X-Mars-Trace"
#: eight traces, no warmup, a checkpoint every 8 tokens, at most 32: every trace probed 3 times
EIGHT = Defaults(method="sc", traces=8, warmup=0, spacing=8, max_tokens=32)
BODY = {"prompt": "What is 2 + 3?", "n": 8, "seed": 5}


def _replicas(n: int, **knobs) -> dict:
    fake = fakes()
    return {f"http://r{i}.test": fake.FakeServer("vllm", **knobs) for i in range(n)}


def _spy(servers: dict) -> dict[str, list[str | None]]:
    """Per replica URL, the affinity header of every completion request it got, in order."""
    seen: dict[str, list[str | None]] = defaultdict(list)
    for url, server in servers.items():
        handler = server.handler

        async def spy(request, handler=handler, url=url):
            if request.url.path == "/v1/completions":
                seen[url].append(request.headers.get(HEADER))
            return await handler(request)

        server.handler = spy
    return seen


def _where(seen: dict[str, list[str | None]]) -> dict[str, set[str]]:
    """Per trace key, the replicas its requests went to."""
    out: dict[str, set[str]] = defaultdict(set)
    for url, keys in seen.items():
        for k in keys:
            assert k is not None  # every trace request carries its key
            out[k].add(url)
    return out


def _ask(running, body: dict = BODY) -> dict:
    r = httpx.post(running.url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["mars"]


def test_every_request_of_a_trace_goes_to_one_replica_and_the_traces_are_spread():
    servers = _replicas(2)
    ups = fake_upstreams(servers, affinity_header=HEADER)
    seen = _spy(servers)  # after the checks at start
    with serving(ups, EIGHT) as running:
        _ask(running)
    ups.close()
    where = _where(seen)
    assert len(where) == 8 and all(len(at) == 1 for at in where.values()), where
    per_replica = Counter(next(iter(at)) for at in where.values())
    assert sorted(per_replica.values()) == [4, 4], per_replica  # spread evenly
    # each key is the question's, then the trace's index: 0..7, every one of them
    question = {k.split("-")[0] for k in where}
    assert len(question) == 1 and re.fullmatch(r"[0-9a-f]{16}", question.pop())
    assert sorted(int(k.split("-")[1]) for k in where) == list(range(8))


def test_two_replicas_trace_affine_recompute_what_one_replica_does():
    """Each replica's prefix cache serves its traces' probes as one replica's would: the
    probes' uncached prompt tokens are the same (their traces' tokens are the seed's, wherever
    they run)."""

    def uncached(n: int) -> tuple[int, str]:
        ups = fake_upstreams(_replicas(n))
        with serving(ups, EIGHT) as running:
            m = _ask(running)
        ups.close()
        return m["tokens"]["probe_prompts_uncached"], m["answer"]

    one, answer = uncached(1)
    assert one > 0 and uncached(2) == (one, answer)


def test_placement_is_the_same_for_the_same_replicas_and_seed_in_any_order():
    def placement(urls: list[str], seed: int) -> dict[str, str]:
        servers = _replicas(3)
        ups = fake_upstreams({u: servers[u] for u in urls}, affinity_header=HEADER)
        seen = _spy(servers)
        with serving(ups, EIGHT) as running:
            _ask(running, {**BODY, "seed": seed})
        ups.close()
        return {k: next(iter(at)) for k, at in _where(seen).items()}

    urls = [f"http://r{i}.test" for i in range(3)]
    first = placement(urls, 5)
    assert placement(urls[::-1], 5) == first  # another run, the replicas given in another order
    assert sorted(Counter(first.values()).values()) == [2, 3, 3]
    other = placement(urls, 6)  # another seed: another question key, other places
    assert set(other) != set(first)


def test_a_replica_that_fails_moves_its_traces_once_and_they_stay(monkeypatch, caplog):
    """Replica r0 fails (every try) after its first requests: it is marked down in one log line,
    its traces go on on r1 from their token ids and the question is answered; the traces r1 held
    stay there, and no trace comes back to r0 once it is up again."""
    monkeypatch.setattr("mars.serve.upstreams.REVIVE_S", float("inf"))
    servers = _replicas(2)
    ups = fake_upstreams(servers, affinity_header=HEADER, retries=0)
    seen = _spy(servers)
    bad = servers["http://r0.test"]
    handler = bad.handler
    calls = [0]

    async def failing(request):
        if request.url.path == "/v1/completions":
            calls[0] += 1
            if calls[0] > 4:  # past the first checkpoint's four requests
                await handler(request)  # seen (the spy), then refused
                return httpx.Response(503, json={"error": {"message": "gone"}})
        return await handler(request)

    bad.handler = failing
    with caplog.at_level(logging.WARNING), serving(ups, EIGHT) as running:
        m = _ask(running)
        assert m["answer"] is not None
        r0, r1 = ups.router.upstreams
        assert not r0.up and r1.up
        down = [r for r in caplog.records if "is down" in r.getMessage()]
        assert len(down) == 1 and "continued from their token ids" in down[0].getMessage()
        before = _where(seen)
        held = Counter(frozenset(at) for at in before.values())
        both = frozenset({"http://r0.test", "http://r1.test"})
        # r1's four traces never moved; r0's four moved to r1, unless they ended before it failed
        assert held[frozenset({"http://r1.test"})] == 4 and held[both] >= 1, before
        assert held[both] + held[frozenset({"http://r0.test"})] == 4, before
        # r0 back: a new question is spread over both again
        r0.up = True
        seen.clear()
        calls[0] = -10_000
        _ask(running, {**BODY, "seed": 9})
        assert sorted(Counter(next(iter(at)) for at in _where(seen).values()).values()) == [4, 4]
    ups.close()


def _stub(url: str) -> Upstream:
    return Upstream(url, backend=None)  # type: ignore[arg-type]


def test_the_router_deals_a_questions_traces_evenly_and_questions_too():
    ups = [_stub(f"http://r{i}.test") for i in range(3)]
    router = Router(ups)
    for seed, qid in [(0, 1), (7, 123456), (2**31 - 1, 99)]:
        homes = Counter(router.home((seed, qid, t)) for t in range(32))
        assert max(homes.values()) - min(homes.values()) <= 1, homes
    # one replica per question: every trace of a question at one, questions spread
    by_question = Router(ups, routing="question")
    assert len({by_question.home((0, 1, t)) for t in range(32)}) == 1
    starts = Counter(by_question.home((0, q, 0)) for q in range(3000))
    assert min(starts.values()) > 900, starts


def test_a_moved_trace_stays_where_it_went_and_new_traces_go_home():
    ups = [_stub(f"http://r{i}.test") for i in range(2)]
    router = Router(ups)
    placed: dict = {}
    key = next((0, 1, t) for t in range(8) if router.home((0, 1, t)) == 0)
    assert router._pick(set(), key, placed) is ups[0]
    router.mark_down(ups[0], "test")
    assert router._pick(set(), key, placed) is ups[1] and placed[key] == 1
    ups[0].up = True
    assert router._pick(set(), key, placed) is ups[1]  # its prefix is there now
    other = next((0, 1, t) for t in range(8, 16) if router.home((0, 1, t)) == 0)
    assert router._pick(set(), other, placed) is ups[0]


def test_passed_through_requests_take_the_least_loaded_replica():
    """They count in the load the router keeps (trace requests included) and go where it is
    least, whatever the routing of the traces."""
    for routing in ROUTINGS:
        ups = [_stub(f"http://r{i}.test") for i in range(2)]
        router = Router(ups, routing=routing)
        key = (0, 1, 0)
        home = router._pick(set(), key, {})  # a trace request, in flight
        _, u = router.take()
        assert u is not home and home.in_flight == 1 and u.in_flight == 1
        router.give_back(u)
        assert u.in_flight == 0


def test_load_routing_is_the_least_loaded_replica():
    ups = [_stub(f"http://r{i}.test") for i in range(2)]
    router = Router(ups, routing="load")
    first = router._pick(set(), (0, 1, 0), {})
    assert router._pick(set(), (0, 1, 0), {}) is not first


def test_the_affinity_key_names_the_question_and_the_trace():
    assert affinity_key((3, 17, 5)) == f"{question_key(3, 17):016x}-5"
    assert question_key(3, 17) == question_key(3, 17) != question_key(4, 17)


def test_a_single_upstream_router_gets_the_key_and_passed_through_requests_none():
    """The deployment behind a router of one's own: one upstream URL, the key in a header."""
    servers = _replicas(1)
    ups = fake_upstreams(servers, affinity_header="X-Affinity")
    heard: list = []
    server = servers["http://r0.test"]
    handler = server.handler

    async def spy(request):
        if request.url.path == "/v1/completions":
            body = request.content
            heard.append((request.headers.get("x-affinity"), b'"logprobs"' in body))
        return await handler(request)

    server.handler = spy
    with serving(ups, EIGHT) as running:
        _ask(running)
        heard.clear()
        r = httpx.post(
            running.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 4}, timeout=60
        )
        assert r.status_code == 200, r.text
    ups.close()
    assert heard == [(None, False)]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"routing": "nearest"}, "--routing nearest: must be one of trace, question, load"),
        ({"affinity_header": "X Trace"}, "not a header name of its own"),
        ({"affinity_header": "Authorization"}, "not a header name of its own"),
    ],
)
def test_bad_routing_options_are_one_line_before_any_connection(options, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        Upstreams(["http://nowhere.invalid:1"], **options)
