"""The type check judges our code, whatever optional engine (and release of it) is installed.

``mypy mars`` must give the same verdict with the `transformers` / `sglang` extras installed, not
installed, or installed in a release whose typing changed: pyproject.toml has mypy skip the
engines' modules (they are ``Any``), and the tools that judge the code are bounded in version.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

#: Top-level modules of each optional engine extra (distribution names differ from module names).
ENGINE_MODULES = {
    "transformers": ["torch", "transformers", "gguf", "accelerate"],
    "sglang": ["sglang"],
}


def _skipped_modules() -> set[str]:
    skipped: set[str] = set()
    for override in PYPROJECT["tool"]["mypy"].get("overrides", []):
        if override.get("follow_imports") == "skip":
            mods = override["module"]
            skipped.update([mods] if isinstance(mods, str) else mods)
    return skipped


def test_every_optional_engine_is_skipped_by_the_type_check():
    extras = PYPROJECT["project"]["optional-dependencies"]
    skipped = _skipped_modules()
    for extra, modules in ENGINE_MODULES.items():
        dists = {re.split(r"[<>=!~\[ ]", d)[0] for d in extras[extra]}
        assert dists <= set(modules), f"extra {extra!r} has distributions {dists - set(modules)}"
        for mod in modules:
            assert {mod, f"{mod}.*"} <= skipped, f"mypy reads {mod} when it is installed"


def test_every_engine_module_the_package_imports_is_declared():
    declared = {m for mods in ENGINE_MODULES.values() for m in mods}
    imported = set()
    for path in (ROOT / "mars").rglob("*.py"):
        for line in path.read_text().splitlines():
            m = re.match(r"\s*(?:import|from)\s+([A-Za-z_]\w*)", line)
            if m:
                imported.add(m.group(1))
    optional = imported & {"torch", "transformers", "gguf", "accelerate", "sglang", "vllm"}
    assert optional <= declared


def test_the_tools_that_judge_the_code_are_bounded():
    for req in PYPROJECT["project"]["optional-dependencies"]["test"]:
        name = re.split(r"[<>=!~\[ ]", req)[0]
        if name in {"ruff", "mypy", "snakefmt"}:
            assert "<" in req, f"{req}: a new release would be adopted by surprise"


def _mypy(tmp_path: Path, *args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, **(env_extra or {})}
    cmd = [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), *args, "mars"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_mypy_passes_without_any_installed_package(tmp_path):
    """As in a venv without the extras (nor anything else): every third-party import is Any."""
    if shutil.which("mypy") is None and not (Path(sys.executable).parent / "mypy").exists():
        pytest.skip("mypy is not installed")
    res = _mypy(tmp_path, "--no-site-packages")
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.slow
def test_mypy_passes_whatever_the_engines_typing(tmp_path):
    """Engines whose every name is typed as something unusable (a release whose typing changed):
    the verdict does not change, because the check never reads them."""
    if shutil.which("mypy") is None and not (Path(sys.executable).parent / "mypy").exists():
        pytest.skip("mypy is not installed")
    stubs = tmp_path / "stubs"
    for mods in ENGINE_MODULES.values():
        for mod in mods:
            (stubs / mod).mkdir(parents=True)
            (stubs / mod / "__init__.pyi").write_text("def __getattr__(name: str) -> None: ...\n")
    res = _mypy(tmp_path, env_extra={"MYPYPATH": str(stubs)})
    assert res.returncode == 0, res.stdout + res.stderr
