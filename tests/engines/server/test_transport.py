"""The server transport (mars/engines/server/transport.py, retry.py, errors.py): the retry policy
(backoff with jitter, Retry-After, a log line per retry) and the typed errors, against a real
socket that refuses and a tiny HTTP server run by the test."""

from __future__ import annotations

import json
import logging
import random
import socket
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("httpx")

from mars.engines.server import (
    Http,
    RetryPolicy,
    ServerBusy,
    ServerConnectionError,
    ServerError,
    ServerStatusError,
    ServerTimeout,
    ServerUnavailable,
)
from mars.engines.server.retry import parse_retry_after
from mars.errors import MarsError

KEY, PASSWORD = "sk-t0p-s3cret", "pa55w0rd"


def test_the_backoff_doubles_less_a_jitter_within_its_bounds_and_the_cap():
    policy = RetryPolicy(retries=8, backoff=0.5, jitter=0.25, max_wait=3.0, rng=random.Random(1))
    for attempt in range(8):
        base = min(0.5 * 2**attempt, 3.0)
        waits = [policy.wait(attempt) for _ in range(400)]
        assert all(0.75 * base <= w <= base for w in waits), attempt
        assert max(waits) - min(waits) > 0.2 * base  # jittered: not all alike
    still = RetryPolicy(backoff=0.5, jitter=0.0)
    assert [still.wait(k) for k in range(3)] == [0.5, 1.0, 2.0]
    with pytest.raises(ValueError):
        RetryPolicy(jitter=1.5)


def test_retry_after_decides_the_wait_in_seconds_or_as_a_date_capped():
    policy = RetryPolicy(backoff=0.5, max_wait=30.0)
    assert policy.wait(0, "7") == 7.0 and policy.wait(3, "0") == 0.0
    assert policy.wait(0, "3600") == 30.0  # never longer than the cap
    assert 0.375 <= policy.wait(0, "soon") <= 0.5  # unreadable: the backoff
    now = time.time()
    assert parse_retry_after(formatdate(now + 12, usegmt=True), now=now) == pytest.approx(12, 1)
    assert parse_retry_after(formatdate(now - 60, usegmt=True), now=now) == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("-3") == 0.0


class Script(BaseHTTPRequestHandler):
    """Answers each request with the next step of the server's ``script``: (status, headers,
    delay); the answer's body echoes the request's Authorization header, as a careless server's
    error page may."""

    def do_GET(self):
        steps = self.server.script  # type: ignore[attr-defined]
        status, headers, delay = steps.pop(0) if len(steps) > 1 else steps[0]
        self.server.seen.append(self.headers.get("Authorization"))  # type: ignore[attr-defined]
        time.sleep(delay)
        body = json.dumps({"error": f"busy; you sent {self.headers.get('Authorization')}"})
        try:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
            pass

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def serve():
    made = []

    def start(*script):
        srv = ThreadingHTTPServer(("127.0.0.1", 0), Script)
        srv.script, srv.seen = list(script), []  # type: ignore[attr-defined]
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        made.append(srv)
        return srv

    yield start
    for srv in made:
        srv.shutdown()
        srv.server_close()


def client(url: str, retries: int = 2, **kw) -> Http:
    policy = RetryPolicy(retries=retries, backoff=0.01, rng=random.Random(0))
    return Http(url, retry=policy, secrets=[KEY, PASSWORD], **kw)


def get(http: Http, path: str = "/x", **kw):
    try:
        return http.run(lambda: http.request("GET", path, **kw))
    finally:
        http.close()


def test_each_retry_is_one_log_line_naming_the_server_and_why_and_retry_after_is_honoured(
    serve, caplog
):
    srv = serve((503, {"Retry-After": "0.3"}, 0), (429, {}, 0), (200, {}, 0))
    url = f"http://127.0.0.1:{srv.server_port}"
    http = client(url, headers={"Authorization": f"Bearer {KEY}"})
    t0 = time.perf_counter()
    with caplog.at_level(logging.INFO, logger="mars.engines.server"):
        status, _ = get(http)
    assert status == 200 and http.stats == {"requests": 3, "retries": 2}
    assert time.perf_counter() - t0 >= 0.3  # the server's Retry-After, not the 0.01 s backoff
    lines = [r.getMessage() for r in caplog.records if "trying again" in r.getMessage()]
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"the server at {url}: HTTP 503 (busy; you sent Bearer ***)")
    assert "trying again in 0.3 s (try 2 of 3)" in lines[0]
    assert "HTTP 429" in lines[1] and "GET /x" in lines[1] and "(try 3 of 3)" in lines[1]
    assert KEY not in caplog.text and srv.seen == [f"Bearer {KEY}"] * 3  # sent, never shown


def test_credentials_in_the_url_are_sent_but_never_logged_nor_raised(serve, caplog):
    srv = serve((503, {}, 0))
    http = client(f"http://mars:{PASSWORD}@127.0.0.1:{srv.server_port}", retries=1)
    with (
        caplog.at_level(logging.INFO, logger="mars.engines.server"),
        pytest.raises(ServerBusy) as err,
    ):
        get(http)
    assert srv.seen[0].startswith("Basic ")  # sent as basic authentication
    token = srv.seen[0].removeprefix("Basic ")
    for text in (caplog.text, str(err.value)):
        assert PASSWORD not in text and token not in text and "***" in text


def test_a_refused_connection_is_a_retryable_connection_error(caplog):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: the kernel refuses
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        with (
            caplog.at_level(logging.INFO, logger="mars.engines.server"),
            pytest.raises(
                ServerConnectionError, match="failed 3 times on /x: connection failed"
            ) as err,
        ):
            get(client(url))
        assert err.value.retryable and isinstance(err.value, ServerUnavailable)
        assert isinstance(err.value, MarsError) and "\n" not in str(err.value)
        assert sum("connection refused" in r.getMessage() for r in caplog.records) == 2
        with pytest.raises(ServerConnectionError, match="cannot connect to the server at"):
            get(client(url), retry_connect=False)  # at connect time: at once, no retry


def test_an_error_status_is_a_status_error_retryable_only_when_busy(serve):
    srv = serve((400, {}, 0))
    http = client(f"http://127.0.0.1:{srv.server_port}")
    with pytest.raises(ServerStatusError, match=r"/v1/x: HTTP 400: busy") as err:
        http.run(lambda: http.post("/v1/x", {}, 1 << 20, "a request"))
    http.close()
    assert err.value.status == 400 and not err.value.retryable
    assert not isinstance(err.value, ServerUnavailable) and http.stats["retries"] == 0
    srv = serve((503, {}, 0))
    with pytest.raises(ServerBusy, match="failed 3 times on /x: HTTP 503") as busy:
        get(client(f"http://127.0.0.1:{srv.server_port}"))
    assert busy.value.status == 503 and busy.value.retryable
    assert isinstance(busy.value, ServerStatusError) and isinstance(busy.value, ServerUnavailable)


def test_a_server_that_does_not_answer_in_time_is_a_timeout(serve):
    srv = serve((200, {}, 1.0))
    http = client(f"http://127.0.0.1:{srv.server_port}", retries=1, timeout=0.2)
    t0 = time.perf_counter()
    with pytest.raises(ServerTimeout, match=r"failed 2 times on /x: no answer within 0\.2 s") as e:
        get(http)
    assert time.perf_counter() - t0 < 2 and e.value.retryable
    assert isinstance(e.value, ServerError) and not isinstance(e.value, ServerStatusError)


def test_a_reworded_error_keeps_its_type_and_status():
    err = ServerBusy("HTTP 503 Bearer x", status=503).retold("HTTP 503 Bearer ***")
    assert type(err) is ServerBusy and err.status == 503 and err.retryable
    assert str(err) == "HTTP 503 Bearer ***"
