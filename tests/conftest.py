"""Fixtures more than one test module uses: a live vLLM server.

``vllm_server`` (session-scoped) is a real vLLM server on CPU serving SmolLM2-135M-Instruct
(``tests/vllm_server.py``): the one at ``$MARS_VLLM_URL`` when set (CI starts it in the
background while other tests run; the fixture waits until it is ready), else one started here
from the build ``python3 tests/vllm_server.py build`` left in its cache, stopped at the end of
the session. Tests that use it are marked ``vllm_server``; without a build they skip, unless
``MARS_REQUIRE_VLLM_SERVER=1`` (CI), which makes it a failure. The handle has ``url``,
``model_dir`` (the served model's folder: its tokenizer loads in a second) and ``metrics()``
(the server's ``/metrics``, summed by name). ``vllm_uncached_server`` is the same without the
prefix cache (``$MARS_VLLM_UNCACHED_URL``, else started here).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

REQUIRE_VLLM_ENV = "MARS_REQUIRE_VLLM_SERVER"
VLLM_URL_ENV = "MARS_VLLM_URL"
#: a second server, started without the prefix cache (``serve --no-prefix-caching``)
VLLM_UNCACHED_URL_ENV = "MARS_VLLM_UNCACHED_URL"


def vllm_module():
    """``tests/vllm_server.py`` (not a package module: loaded from its file)."""
    spec = importlib.util.spec_from_file_location(
        "vllm_server", Path(__file__).resolve().parent / "vllm_server.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def vllm_missing() -> str | None:
    """Why no vLLM server can run for the tests (None: one can)."""
    for pkg in ("httpx", "transformers"):
        if importlib.util.find_spec(pkg) is None:
            return f"{pkg} is not installed (the server backend needs it)"
    if vllm_module().built() is None:
        return "no vLLM build (python3 tests/vllm_server.py build makes one)"
    return None


def need_vllm_server() -> None:
    """Skip without a vLLM build, unless CI requires one."""
    why = vllm_missing()
    if why is not None:
        if os.environ.get(REQUIRE_VLLM_ENV) == "1":
            pytest.fail(f"{REQUIRE_VLLM_ENV}=1 but {why}")
        pytest.skip(why)


def _vllm(tmp_path_factory, url_env: str, prefix_caching: bool):
    need_vllm_server()
    vs = vllm_module()
    folder = vs.built()
    url = os.environ.get(url_env)
    if url:
        yield vs.VLLMServer.attach(url, folder)
        return
    run_dir = tmp_path_factory.mktemp("vllm")
    server = vs.VLLMServer(folder, run_dir, prefix_caching=prefix_caching).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    yield from _vllm(tmp_path_factory, VLLM_URL_ENV, prefix_caching=True)


@pytest.fixture(scope="session")
def vllm_uncached_server(tmp_path_factory):
    yield from _vllm(tmp_path_factory, VLLM_UNCACHED_URL_ENV, prefix_caching=False)
