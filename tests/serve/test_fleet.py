"""Several ``mars serve`` processes on one ``--record`` folder (mars/serve/record.py): questions
numbered without collision and nothing lost, whether the writers are threads of one process,
recorders of one process or processes; a process killed at any point of a write (every durable
step of a write is a rename: killed before and after each) leaves every pool readable, its
numbers unique and ``mars replay`` exact, and the next writer goes on; two proxies under mixed
traffic record every answered question exactly once (the soak, bounded, 127.0.0.1)."""

from __future__ import annotations

import json
import os
import pickle
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

pytest.importorskip("starlette")

from serving import serving

from mars.live import replay_run
from mars.serve.record import Recorder
from mars.serve.requests import Defaults
from mars.store.pool import open_pool
from serve.common import SMALL, fake_upstreams, fakes, wait_for

REPO = Path(__file__).resolve().parents[2]
WRITER = Path(__file__).with_name("fleet_writer.py")
FAST = Defaults(method="sc-mars-cal", traces=8, warmup=4, spacing=2048, max_tokens=16384)


@pytest.fixture(scope="module")
def question(tmp_path_factory) -> Path:
    """``Recorder.add``'s arguments for one question the synthetic engine answered, pickled."""
    seen: list = []
    real = Recorder.add

    def spy(self, *args):
        seen.append(args)
        return real(self, *args)

    Recorder.add = spy  # type: ignore[method-assign]
    try:
        folder = tmp_path_factory.mktemp("one")
        with serving(["synthetic"], FAST, record=str(folder / "rec")) as running:
            r = httpx.post(
                running.url + "/v1/completions",
                json={"prompt": "What is 2 + 2?", "n": 8, "seed": 3},
                timeout=120,
            )
            assert r.status_code == 200, r.text
    finally:
        Recorder.add = real  # type: ignore[method-assign]
    params, table, summary, row, _ = seen[0]
    path = folder / "question.pickle"
    path.write_bytes(pickle.dumps((params, table, summary, row)))
    return path


def _args(question: Path) -> tuple:
    return pickle.loads(question.read_bytes())


def _check(root: Path, texts: list[str]) -> list[int]:
    """The record's one pool holds exactly ``texts`` (in any order), numbered 0…n-1, readable,
    every question replayed exactly; no temporary file or folder left of a finished write. The
    numbers."""
    pools = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(pools) == 1, pools
    pool = open_pool(pools[0])
    assert pool.qids == list(range(len(texts)))
    held = sorted(pool.read_question(q).question for q in pool.qids)
    assert held == sorted(texts)
    assert all(r["match"] for r in replay_run(pools[0]))
    assert not [p for p in root.iterdir() if ".tmp-" in p.name]
    return pool.qids


def test_two_recorders_in_threads_number_without_collision(question, tmp_path):
    """Two recorders on one folder (two proxies' worth: only the folder's lock between them),
    two threads each, appending at once."""
    params, table, summary, row = _args(question)
    root = tmp_path / "rec"
    recorders = [Recorder(root), Recorder(root)]

    def write(w: int) -> list[int]:
        rec = recorders[w % 2]
        return [
            rec.add(params, table, summary, {**row, "question": f"w{w} {k}"}).qid for k in range(6)
        ]

    with ThreadPoolExecutor(4) as pool:
        numbers = [q for qs in pool.map(write, range(4)) for q in qs]
    assert sorted(numbers) == list(range(24))
    _check(root, [f"w{w} {k}" for w in range(4) for k in range(6)])


def _writer(root: Path, question: Path, tag: str, count: int, *kill) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(root), str(question), tag, str(count), *map(str, kill)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_two_processes_record_into_one_folder_without_collision(question, tmp_path):
    root = tmp_path / "rec"
    procs = [_writer(root, question, tag, 8) for tag in ("a", "b")]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    numbers = [int(line.split()[1]) for out, _ in outs for line in out.splitlines()]
    assert sorted(numbers) == list(range(16))
    _check(root, [f"{tag} {k}" for tag in ("a", "b") for k in range(8)])


#: where a writer is killed: the rename that puts a file of its second question in place (or,
#: ``pool``, a new pool's folder, its first question), just before or just after it; and how
#: many of its questions the pool then holds
KILLS = [
    *[
        pytest.param(1, what, when, 1, id=f"{what}-{when}")
        for what in ("traces", "record", "questions")
        for when in ("before", "after")
        if (what, when) != ("questions", "after")
    ],
    pytest.param(1, "questions", "after", 2, id="questions-after"),  # the table names it: kept
    pytest.param(1, "manifest", "before", 2, id="manifest-before"),
    pytest.param(1, "manifest", "after", 2, id="manifest-after"),
    pytest.param(0, "pool", "before", 0, id="new-pool-before"),
    pytest.param(0, "pool", "after", 1, id="new-pool-after"),
]


@pytest.mark.slow  # ten processes started and killed: about 18 s
@pytest.mark.parametrize("kill_at, what, when, kept", KILLS)
def test_a_process_killed_mid_write_leaves_the_pool_readable(
    question, tmp_path, kill_at, what, when, kept
):
    """Writer A is SIGKILLed in the middle of a question's write while writer B waits for the
    record's lock: every pool stays readable with unique numbers and replays exactly, B takes
    the lock when A dies and writes its questions under the next free numbers (over any file A
    left without its row), and a stale temporary file or folder of A's misleads no one."""
    root = tmp_path / "rec"
    ready = Path(f"{root}.a.ready")
    a = _writer(root, question, "a", 3, kill_at, what, when)
    wait_for(lambda: ready.exists() or a.poll() is not None, 120)
    assert a.poll() is None, a.communicate()
    if any(p.is_dir() and not p.name.startswith(".") for p in root.iterdir()):
        pool = next(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        assert open_pool(pool).qids == list(range(kept))  # while A hangs, as after
        assert all(r["match"] for r in replay_run(pool))
    else:
        assert kept == 0
    b = _writer(root, question, "b", 2)
    time.sleep(1.0)  # B waits for the lock A holds
    assert b.poll() is None
    os.kill(a.pid, signal.SIGKILL)
    a.communicate(timeout=30)
    out, err = b.communicate(timeout=300)
    assert b.returncode == 0, err
    assert [int(line.split()[1]) for line in out.splitlines()] == [kept, kept + 1]
    _check(root, [f"a {k}" for k in range(kept)] + ["b 0", "b 1"])


def _leave(port: int, body: dict, after: float) -> int | None:
    """A whole-answer request whose client closes the connection after ``after`` seconds."""
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


@pytest.mark.slow
def test_two_proxies_on_one_record_record_every_answered_question_once(tmp_path):
    """A soak (bounded, 127.0.0.1): two proxies in front of the same two fake replicas, recording
    into one folder, clients mixing whole and streamed MARS questions, passed-through requests
    and clients that leave early. Every question answered is in the pool once, under the number
    its answer names, with its prompt; nothing else is there but questions whose client left;
    numbers unique, replay exact, nothing left running upstream or held in a proxy."""
    fake = fakes()
    servers = {f"http://r{i}.test": fake.FakeServer("vllm", delay=0.02) for i in range(2)}
    ups = [fake_upstreams(servers), fake_upstreams(servers)]
    root = tmp_path / "rec"
    answered: list[tuple[str, int, str]] = []  # (pool, number, prompt)
    left, statuses = Counter(), Counter()
    lock = threading.Lock()
    with (
        serving(ups[0], SMALL, record=str(root), max_active=3) as one,
        serving(ups[1], SMALL, record=str(root), max_active=3) as two,
    ):
        stop_at = time.monotonic() + 10.0

        def client(k: int) -> None:
            rng = random.Random(k)
            running = (one, two)[k % 2]
            port = int(running.url.rsplit(":", 1)[1])
            with httpx.Client(timeout=60) as http:
                i = 0
                while time.monotonic() < stop_at:
                    i += 1
                    prompt = f"Client {k} asks question {i}: what is {i} + {k}?"
                    kind = rng.choice(["mars", "mars", "stream", "plain", "leave"])
                    body = {"prompt": prompt, "seed": 7, "max_tokens": 32}  # one pool
                    if kind == "leave":
                        status = _leave(port, {**body, "n": 4}, 0.01 + rng.random() / 10)
                        with lock:
                            left["left" if status is None else status] += 1
                        continue
                    if kind == "plain":
                        r = http.post(running.url + "/v1/completions", json=body)
                        with lock:
                            statuses[r.status_code] += 1
                        continue
                    stream = kind == "stream"
                    body = {**body, "n": 4, "stream": stream}
                    with http.stream("POST", running.url + "/v1/completions", json=body) as r:
                        text = r.read().decode()
                    with lock:
                        statuses[r.status_code] += 1
                    if r.status_code != 200:
                        continue
                    if stream:
                        events = [
                            json.loads(line[6:])
                            for line in text.splitlines()
                            if line.startswith("data: {")
                        ]
                        mars = [e["mars"] for e in events if "record" in e.get("mars", {})][-1]
                    else:
                        mars = json.loads(text)["mars"]
                    _, _, _, _, pool, qid = mars["record"].split("/")
                    with lock:
                        answered.append((pool, int(qid), prompt))

        threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for running in (one, two):
            state = running.state
            wait_for(lambda s=state: s.scheduler.active == 0 and s.scheduler.queued == 0, 30)
            assert running.metric("record_failures") == 0
        for u in ups:
            wait_for(lambda u=u: all(x.in_flight == 0 for x in u.router.upstreams), 30)
        wait_for(lambda: all(s.in_flight == 0 for s in servers.values()), 30)
    for u in ups:
        u.close()
    assert set(statuses) == {200}, statuses
    assert len(answered) > 20 and left["left"] > 0, (len(answered), left)
    keys = [(p, q) for p, q, _ in answered]
    assert len(set(keys)) == len(keys)  # no number given twice
    by_pool: dict[str, dict[int, str]] = {}  # one pool: every question of one way of solving
    for p, q, prompt in answered:
        by_pool.setdefault(p, {})[q] = prompt
    recorded = 0
    for name, mine in by_pool.items():
        pool = open_pool(root / name)
        assert pool.qids == list(range(len(pool.qids)))
        for q, prompt in mine.items():
            assert pool.read_question(q).question == prompt
        recorded += len(pool.qids)
        assert all(r["match"] for r in replay_run(root / name))
    assert len(by_pool) == 1
    # beyond the answered ones, only questions whose client left after they were recorded
    assert len(answered) <= recorded <= len(answered) + left["left"]
