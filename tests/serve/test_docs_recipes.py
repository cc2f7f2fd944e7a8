"""docs/serve.md's recipes run as written: every command of its shell blocks and its Python
snippet, in the page's order, against a real llama.cpp ``llama-server`` (SmolLM2-135M on CPU),
and its vLLM CPU recipe against vLLM's CPU build.

Only what a 2-core machine needs changes, each swap listed in :data:`SWAPS` (ports, folders, the
model file, sizes, the audit rate that makes a handful of questions audit at all) or in the
recipe's own step below; the commands, their options and their order are the page's. A command
the page adds or changes without this test knowing how to run it fails the test
(:func:`test_every_command_of_the_page_is_run`).
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("openai")
pytest.importorskip("starlette")

from conftest import need_vllm_server, vllm_module
from engines.server.common import _free_port, _gguf, _llama_server, need_llama_server

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "serve.md"
#: vLLM's OpenAI server module (the CPU wheel's `vllm` command does not start: docs/serve.md)
VLLM_SERVER = "vllm.entrypoints.openai.api_server"

#: (pattern, replacement) on every command and the Python snippet: what a 2-core machine and a
#: temporary folder need, nothing that changes what a command does
SWAPS = [
    (r"--parallel 16 -c 262144", "--parallel 4 -c 8192 --threads 1 --threads-batch 1"),
    (r"max_tokens=8192", "max_tokens=64"),  # SmolLM2 at ~100 tokens/s on 2 cores
    (r'"spacing": 512', '"spacing": 16'),  # its checkpoints within those 64
    (r"--audit-rate 0\.05", "--audit-rate 1"),  # a handful of questions, every one audited
    # SmolLM2 writes no \boxed{} final answer: its traces' last probes stand in
    (r"-m sc,sc-mars2 ", "-m sc,sc-mars2 --finals last-probe "),
    (r"n=32,", "n=4,"),
    (r"max_gen_toks=4096", "max_gen_toks=64"),
    (r"--tasks gsm8k_cot_zeroshot", "--tasks arithmetic_cot_local --include_path TASKS"),
]


def blocks() -> list[tuple[str, str]]:
    """The page's fenced blocks that are meant to run: (language, text)."""
    return [
        (lang, text)
        for lang, text in re.findall(r"```(sh|bash|python)\n(.*?)```", PAGE.read_text(), re.S)
    ]


def commands(text: str) -> list[str]:
    """A shell block's commands: continuations joined, comments dropped."""
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            out.append(re.sub(r"\s+", " ", line))
    return out


def swapped(text: str, **names: str) -> str:
    for pat, rep in SWAPS:
        text = re.sub(pat, rep, text)
    for name, value in names.items():
        text = text.replace(name, value)
    return text


class Session:
    """The page's world: one upstream, the proxy the last ``mars serve`` started, a work folder."""

    def __init__(self, tmp: Path, upstream_port: int):
        self.tmp = tmp
        self.upstream_port = upstream_port
        self.proxy_port = _free_port()
        self.proxy: subprocess.Popen | None = None
        self.upstream: subprocess.Popen | None = None
        self.log = tmp / "logs"
        self.log.mkdir()
        self.ran: list[str] = []
        self.pool = ""  # the POOL of the page: the folder the last question was recorded in

    @property
    def names(self) -> dict[str, str]:
        return {
            "http://127.0.0.1:8080": f"http://127.0.0.1:{self.upstream_port}",
            "--port 8080": f"--port {self.upstream_port}",
            "http://127.0.0.1:8000": f"http://127.0.0.1:{self.proxy_port}",
            "POOL": self.pool or "POOL",
            "TASKS": str(self.tmp / "tasks"),
        }

    def run(self, cmd: str) -> subprocess.CompletedProcess | None:
        self.ran.append(cmd)
        cmd = swapped(cmd, **self.names)
        env_prefix: dict[str, str] = {}
        argv = shlex.split(cmd)
        while argv and re.fullmatch(r"\w+=\S*", argv[0]):
            key, value = argv.pop(0).split("=", 1)
            env_prefix[key] = value
        tool, args = argv[0], argv[1:]
        if tool == "llama-server":
            return self.start_llama(args)
        if tool == "python" and args[:2] == ["-m", VLLM_SERVER]:
            return self.start_vllm(args[2:], env_prefix)
        if tool == "curl":
            return self.curl(args)
        if tool == "mars" and args[0] == "serve":
            return self.start_proxy(args[1:])
        if tool == "mars":
            return self.mars(args)
        if tool == "lm_eval":
            return self.lm_eval(args)
        raise AssertionError(f"docs/serve.md: a command this test cannot run: {cmd}")

    def start_llama(self, args: list[str]) -> None:
        args = [str(_gguf()) if a == "model.gguf" else a for a in args]
        self.upstream = subprocess.Popen(
            [str(_llama_server()), *args, "--no-webui"],
            stdout=open(self.log / "llama.log", "ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_ready(f"http://127.0.0.1:{self.upstream_port}/health", self.upstream, "llama-server")

    def start_vllm(self, args: list[str], env: dict[str, str]) -> None:
        """vLLM's server module with the Python of the tests' CPU build, its model folder for
        MODEL_DIR."""
        vs = vllm_module()
        folder = vs.built()
        args = [str(folder / "model") if a == "MODEL_DIR" else a for a in args]
        self.upstream = subprocess.Popen(
            [str(vs.python_of(folder)), "-m", VLLM_SERVER, *args],
            stdout=open(self.log / "vllm.log", "ab"),
            stderr=subprocess.STDOUT,
            env={**vs.environment(self.tmp), **env},
            start_new_session=True,
        )
        vs.wait_ready(f"http://127.0.0.1:{self.upstream_port}", proc=self.upstream)

    def start_proxy(self, args: list[str]) -> None:
        self.stop_proxy()
        log = self.log / f"serve{len(self.ran)}.log"
        self.proxy = subprocess.Popen(
            [sys.executable, "-m", "mars", "serve", *args, "--port", str(self.proxy_port)],
            cwd=self.tmp,
            stdout=open(log, "ab"),
            stderr=subprocess.STDOUT,
        )
        wait_ready(f"http://127.0.0.1:{self.proxy_port}/health", self.proxy, log.name)

    def stop_proxy(self) -> None:
        if self.proxy is not None:
            self.proxy.terminate()
            self.proxy.wait(30)
            self.proxy = None

    def curl(self, args: list[str]) -> None:
        method = args[args.index("-X") + 1] if "-X" in args else "GET"
        url = next(a for a in args if a.startswith("http"))
        r = httpx.request(method, url, timeout=60)
        assert r.status_code == 200, (url, r.text)
        self.last_json = r.json()

    def mars(self, args: list[str]) -> subprocess.CompletedProcess:
        # a glob as the shell expands it, in the work folder ("DIR/*/": folders only)
        expanded = [m for a in args for m in (sorted(glob.glob(a, root_dir=self.tmp)) or [a])]
        r = subprocess.run(
            [sys.executable, "-m", "mars", *expanded],
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-2000:])
        return r

    def lm_eval(self, args: list[str]) -> subprocess.CompletedProcess:
        write_local_task(self.tmp / "tasks")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
        r = subprocess.run(
            [str(Path(sys.executable).parent / "lm_eval"), *args],
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
        )
        assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
        return r

    def python(self, code: str) -> str:
        r = subprocess.run(
            [sys.executable, "-c", swapped(code, **self.names)],
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        self.ran.append("python")
        return r.stdout

    def close(self) -> None:
        self.stop_proxy()
        if self.upstream is not None and self.upstream.poll() is None:
            os.killpg(self.upstream.pid, signal.SIGTERM)  # vLLM's server ends its engine too
            self.upstream.wait(60)


def wait_ready(url: str, proc: subprocess.Popen, name: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{name} exited with {proc.returncode}"
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{name} not ready within {timeout} s")


#: a chain-of-thought task of lm-evaluation-harness's own YAML kind, on a local file (offline):
#: gsm8k_cot_zeroshot's shape (a question, "The answer is X", exact match after a regex filter)
TASK = """\
task: arithmetic_cot_local
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "Q: {{{{question}}}}\\nA: Let's think step by step."
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["Q:"]
  do_sample: true
filter_list:
  - name: strict-match
    filter:
      - function: regex
        regex_pattern: "The answer is (\\\\-?[0-9\\\\.\\\\,]+)."
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def write_local_task(folder: Path) -> None:
    folder.mkdir(exist_ok=True)
    data = folder / "arithmetic.jsonl"
    rows = [
        {"question": "What is 2 + 3?", "answer": "5"},
        {"question": "What is 4 * 6?", "answer": "24"},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "arithmetic_cot_local.yaml").write_text(TASK.format(data=data))


def recorded_pools(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/pool.json"))


def test_every_command_of_the_page_is_run(tmp_path):
    """The llama.cpp walk below runs every block but vLLM's (its own test); the page's blocks are
    those the walk knows, in its order, so a recipe added to the page needs a step here."""
    texts = [text for _, text in blocks()]
    vllm = [t for t in texts if "vllm serve" in t or VLLM_SERVER in t]
    assert len(vllm) == 2
    walked = [t for t in texts if t not in vllm]
    first = [commands(t)[0].split()[0] if not t.startswith("from ") else "python" for t in walked]
    assert first == ["llama-server", "python", "mars", "mars", "mars", "mars", "mars"]


@pytest.mark.llama_server
def test_the_page_runs_against_llama_cpp(tmp_path):
    need_llama_server()
    pytest.importorskip("lm_eval")
    s = Session(tmp_path, _free_port())
    texts = [(lang, t) for lang, t in blocks() if "vllm serve" not in t and VLLM_SERVER not in t]
    try:
        # the opening recipe: the upstream, MARS in front of it, the Python client
        (_, start), (_, snippet), *rest = texts
        for cmd in commands(start):
            s.run(cmd)
        outs = [s.python(snippet) for _ in range(2)]  # two questions: something to calibrate on
        for out in outs:
            shown = out.strip().splitlines()[-1]
            assert "'method': 'sc-mars-cal'" in shown and "'record'" in shown, out
        pools = recorded_pools(tmp_path / "runs" / "served")
        assert len(pools) == 1, pools
        s.pool = pools[0].name

        # a calibration instead of a warmup, then the recording recipe (replay, simulate)
        (_, calibrate), (_, record), (_, audit), (_, refit), (_, lm_eval) = rest
        cmds = commands(calibrate)
        assert cmds[0].startswith("mars calibrate runs/served/*/")
        s.run(cmds[0])
        assert json.loads((tmp_path / "cal.json").read_text())
        s.run(cmds[1])
        s.run(cmds[2])
        for cmd in commands(record):
            cmd = re.sub(r"DIR/\S+", f"runs/served/{s.pool}", cmd)
            s.run(cmd)
        assert (tmp_path / "sim").is_dir()

        # the audit: every question of this proxy audited, counted live and offline
        for cmd in commands(audit)[:1]:
            s.run(cmd)
        # a calibrated server decides with no warmup: a client asks for its method, or none
        s.python(snippet.replace('"method": "sc-mars-cal", "warmup": 16, ', ""))
        deadline = time.monotonic() + 300
        while True:
            s.run(commands(audit)[1])
            if _audited(s.last_json):
                break
            assert time.monotonic() < deadline, s.last_json
            time.sleep(2)
        s.run(commands(audit)[2])
        pools = recorded_pools(tmp_path / "runs" / "served")
        audited = [p for p in pools if (p / "audited").is_dir()]
        assert audited, pools
        s.pool = audited[0].name

        # the refit from the audited traffic, then reloaded
        for cmd in commands(refit):
            s.run(cmd)

        # lm-evaluation-harness, offline, on a local task of gsm8k_cot_zeroshot's kind
        for cmd in commands(lm_eval):
            s.run(cmd)
        results = list((tmp_path / "runs" / "lm-eval").rglob("results*.json"))
        assert results, list((tmp_path / "runs").rglob("*"))
        scores = json.loads(results[0].read_text())["results"]["arithmetic_cot_local"]
        assert "exact_match,strict-match" in scores
        served = recorded_pools(tmp_path / "runs" / "gsm8k-served")
        assert served and sum(len(list((p / "live").glob("q*.json"))) for p in served) == 2
    finally:
        s.close()


def _audited(report: dict) -> bool:
    """Whether the audit endpoint counts a finished audit and none running."""
    done = sum(m["audits"] for m in report["methods"].values())
    return done > 0 and report["running"] == 0


@pytest.mark.vllm_server
def test_the_cpu_recipe_runs_against_vllm(tmp_path):
    """docs/serve.md's vLLM recipe for a CPU, as written (the tests' CPU build and its model
    folder for MODEL_DIR), a question through it; the GPU recipe's flags are ones this vLLM
    takes (its model needs a GPU)."""
    need_vllm_server()
    gpu, cpu = [t for _, t in blocks() if "vllm serve" in t or VLLM_SERVER in t]
    snippet = next(t for lang, t in blocks() if lang == "python")
    s = Session(tmp_path, _free_port())
    try:
        for cmd in commands(cpu):
            s.run(cmd)
        out = s.python(snippet)
        assert "'method': 'sc-mars-cal'" in out.strip().splitlines()[-1], out
    finally:
        s.close()
    vs = vllm_module()
    help_text = subprocess.run(
        [str(vs.python_of(vs.built())), "-m", VLLM_SERVER, "--help=all"],
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    flags = {
        f
        for cmd in commands(gpu)
        if cmd.startswith("vllm ")
        for f in re.findall(r" (--[\w-]+)", cmd)
    }
    assert flags and all(f in help_text for f in flags), flags
