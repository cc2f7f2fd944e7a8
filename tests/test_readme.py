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
