"""A soak test of ``mars serve`` (bounded in time, 127.0.0.1 only): clients mixing MARS questions
(whole and streamed), pass-through requests and clients that leave early, against two fake vLLM
replicas, past the queue's bound. At the end nothing is left running upstream or held in the
proxy, memory and open connections have not grown, and ``/metrics`` counts every status as it was
sent."""

from __future__ import annotations

import gc
import json
import os
import random
import socket
import threading
import time
from collections import Counter

import httpx
import pytest

pytest.importorskip("starlette")

from serving import serving

from serve.common import SMALL, fake_upstreams, fakes, wait_for

pytestmark = pytest.mark.slow

#: how long the clients run (seconds), and how many there are
DURATION, CLIENTS = 12.0, 6


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _leave(port: int, body: dict, after: float) -> int | None:
    """A whole-answer request whose client closes the connection after ``after`` seconds: the
    status it was answered with by then (a full queue answers at once), or None."""
    payload = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        sock.settimeout(after)
        try:
            head = sock.recv(64)
        except TimeoutError:
            return None
        return int(head.split()[1]) if head.startswith(b"HTTP/1.1 ") else None


def test_a_mixed_load_with_clients_that_leave_leaks_nothing():
    gc.collect()  # what earlier tests of this process left is closed before the counts start
    fake = fakes()
    servers = {f"http://r{i}.test": fake.FakeServer("vllm", delay=0.05) for i in range(2)}
    ups = fake_upstreams(servers)
    with serving(ups, SMALL, max_active=2, max_queue=2) as running:
        url, port = running.url, int(running.url.rsplit(":", 1)[1])
        seen: Counter = Counter()  # statuses the clients received
        left: Counter = Counter()  # requests whose client left: {"whole": n, "stream": n}
        lock = threading.Lock()
        stop_at = time.monotonic() + DURATION
        marks: list[tuple[int, float]] = []

        def client(k: int) -> None:
            rng = random.Random(k)
            with httpx.Client(timeout=60) as http:
                while time.monotonic() < stop_at:
                    kind = rng.choice(["mars", "mars-stream", "plain", "plain-stream", "leave"])
                    seed = rng.randrange(1000)
                    body = {"prompt": f"What is {seed} + 1?", "seed": seed, "max_tokens": 32}
                    if kind.startswith("mars"):
                        body["n"] = 4
                    if kind == "leave":
                        mars = {**body, "n": 4, "mars": {"spacing": 8}}
                        status = _leave(port, mars, 0.01 + rng.random() / 5)
                        with lock:
                            if status is None:
                                left["whole"] += 1
                            else:
                                seen[status] += 1
                        continue
                    stream = kind.endswith("stream")
                    with http.stream(
                        "POST", url + "/v1/completions", json={**body, "stream": stream}
                    ) as r:
                        if stream and r.status_code == 200 and rng.random() < 0.3:
                            next(r.iter_lines())  # the first line, then the client leaves
                            with lock:
                                seen[200] += 1
                                left["stream"] += 1
                            continue
                        r.read()
                    with lock:
                        seen[r.status_code] += 1
                    if r.status_code == 429:
                        time.sleep(0.05)

        def watch() -> None:  # the process's open files and memory, round by round
            while time.monotonic() < stop_at:
                marks.append((_open_fds(), _rss_mb()))
                time.sleep(1.0)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
        threads.append(threading.Thread(target=watch))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        state, routed = running.state, ups.router.upstreams
        wait_for(lambda: state.scheduler.active == 0 and state.scheduler.queued == 0, 30)
        wait_for(lambda: all(u.in_flight == 0 for u in routed), 30)
        wait_for(lambda: all(s.in_flight == 0 for s in servers.values()), 30)
        metrics = {
            status: running.metric("requests", route="/v1/completions", status=str(status))
            for status in (200, 429, 499)
        }
    ups.close()
    assert seen[200] > 20 and seen[429] > 0 and left["whole"] > 0 and left["stream"] > 0, (
        seen,
        left,
    )
    assert set(seen) <= {200, 429}, seen  # nothing else: no 5xx, no 4xx but the queue's
    # a client that left a whole-answer request is counted 499 if it left while its request
    # waited or ran, 429 if the queue was full when it came (the answer sent as it left); one
    # that left before the proxy read its body is not a request at all
    refused_as_it_left = metrics[429] - seen[429]
    assert metrics[200] == seen[200] and refused_as_it_left >= 0, (metrics, seen)
    assert 0 < metrics[499] and metrics[499] + refused_as_it_left <= left["whole"], (metrics, left)
    # after the first rounds (imports, threads, connection pools), nothing grows: no count rises
    # above the lowest before it (a count that falls is something of the process closed)
    fds, rss = zip(*marks[2:])
    assert max(f - min(fds[: i + 1]) for i, f in enumerate(fds)) <= 16, fds
    assert max(rss) - min(rss) < 64, rss
