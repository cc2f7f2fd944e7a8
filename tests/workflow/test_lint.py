"""The workflow passes Snakemake's lint (but the deliberate conda lint) and snakefmt."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from workflow.common import (
    BIN,
    REPO,
    SNAKEFILE,
    TEST_CONFIG,
    slow,
    smk,
)

# ---------------------------------------------------------------------------------------------
# lint and format


@slow
def test_lint_only_the_deliberate_conda_lint(tmp_path):
    """`snakemake --lint` finds nothing but the per-rule conda lint (one environment:
    mars's own)."""
    r = smk(tmp_path, "--lint", configfile=TEST_CONFIG, check=False, cores=None)
    lints = re.findall(r"^\s+\* (.+?):?$", r.stdout, re.M)
    assert lints, r.stdout[-3000:]
    assert set(lints) == {"Specify a conda environment or container for each rule."}, r.stdout[
        -3000:
    ]


def test_snakefmt():
    snakefmt = shutil.which("snakefmt", path=str(BIN)) or shutil.which("snakefmt")
    if snakefmt is None:
        pytest.skip("snakefmt is not installed")
    files = [str(SNAKEFILE), str(REPO / "workflow")]
    r = subprocess.run([snakefmt, "--check", *files], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
