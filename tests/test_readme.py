"""README's Quick start: exactly two commands, and CI runs the second one verbatim."""

from __future__ import annotations

import re
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
    after = text.split("## Quick start", 1)[1].split("## What is here", 1)[0]
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
