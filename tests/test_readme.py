"""README: the Quick start is exactly two commands and CI runs the second one verbatim, and its
Python recipe runs (tests/test_docs.py checks its `mars` commands and links, as for docs/)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [ln for ln in block.splitlines() if ln.strip()]


def test_quick_start_has_two_commands_and_ci_runs_the_test_one():
    cmds = quick_start_commands()
    assert len(cmds) == 2
    assert "snakemake --cores 2" in cmds[0]
    assert "pytest" in cmds[1]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert cmds[1] in ci


def test_readme_says_how_to_put_the_commands_on_path():
    """After the Quick start `mars` and `snakemake` are in .venv/bin only: README says so."""
    text = (ROOT / "README.md").read_text()
    after = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert ". .venv/bin/activate" in after


def test_measured_numbers_of_the_default_run_are_stated_once():
    """The embedded default's time and disk are measured numbers: stated in README only, so
    no second copy can disagree (docs/workflow.md's job count is checked against a dry run)."""
    docs = [ROOT / "docs" / "workflow.md", ROOT / "config" / "README.md"]
    docs += sorted((ROOT / "config").glob("*.yaml"))
    for path in docs:
        text = path.read_text()
        assert not re.search(r"CPU[- ]min|\d GB of disk", text), path
    assert len(re.findall(r"CPU-min", (ROOT / "README.md").read_text())) == 1


def test_readme_is_short():
    """README is recipes; details live in docs/ (issue 32: at most 250 lines)."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def test_the_python_recipes_run(tmp_path):
    """Each Python block of README, pasted into a fresh interpreter, runs."""
    code = blocks("python")
    assert code
    for block in code:
        r = subprocess.run(
            [sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        assert r.returncode == 0, r.stderr[-2000:]
    # the Stopper recipe's traces agree from the first checkpoint on: MARS stops there
    assert "stop at 2048 tokens: 7" in r.stdout
