"""What the workflow's tests share: Snakemake in a subprocess (``python -m snakemake``) against the
repository's Snakefile with ``--directory`` pointing at a temporary directory, so nothing is
written into the checkout. The rules call ``mars``: the interpreter's bin directory is put first
on PATH."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SNAKEFILE = REPO / "Snakefile"
BIN = Path(sys.executable).parent
TEST_CONFIG = REPO / "config" / "test.yaml"
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


slow = pytest.mark.slow  # a real Snakemake process (seconds to minutes)


def _env(extra_path: Path | None = None) -> dict:
    env = dict(os.environ)
    parts = ([str(extra_path)] if extra_path else []) + [str(BIN), env.get("PATH", "")]
    env["PATH"] = os.pathsep.join(parts)
    env.pop("SNAKEMAKE_PROFILE", None)
    return env


def smk_command(
    workdir: Path,
    *args,
    configfile: Path | None = None,
    profile: str | Path = "none",
    cores: int | None = 2,
) -> list[str]:
    """The snakemake command line :func:`smk` runs."""
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(SNAKEFILE),
        "--directory",
        str(workdir),
        "--workflow-profile",
        str(profile),
        "--printshellcmds",
    ]
    cmd += [
        str(a) for a in args
    ]  # before the nargs options --configfile (and -R's values end there)
    if configfile is not None:
        cmd += ["--configfile", str(configfile)]
    if cores is not None:
        cmd += ["--cores", str(cores)]
    return cmd


def smk(
    workdir: Path,
    *args,
    configfile: Path | None = None,
    profile: str | Path = "none",
    path: Path | None = None,
    check: bool = True,
    cores: int | None = 2,
    timeout: int = 600,
) -> subprocess.CompletedProcess:
    """Run snakemake on the repository's Snakefile in ``workdir``; stdout and stderr together."""
    cmd = smk_command(workdir, *args, configfile=configfile, profile=profile, cores=cores)
    r = subprocess.run(
        cmd,
        cwd=workdir,
        env=_env(path),
        capture_output=False,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    if check and r.returncode != 0:
        raise AssertionError(
            f"snakemake failed (rc {r.returncode}): {' '.join(cmd)}\n{r.stdout[-6000:]}"
        )
    return r


def job_stats(out: str) -> dict[str, int]:
    """The "Job stats" table of a snakemake run (rule -> count), without the total."""
    lines = out.splitlines()
    try:
        i = lines.index("Job stats:")
    except ValueError:
        return {}
    stats = {}
    for line in lines[i + 3 :]:
        m = re.fullmatch(r"(\S+)\s+(\d+)", line.strip())
        if not m:
            break
        stats[m.group(1)] = int(m.group(2))
    stats.pop("total", None)
    return stats


def write_config(path: Path, base: Path | dict = TEST_CONFIG, **changes) -> Path:
    cfg = yaml.safe_load(base.read_text()) if isinstance(base, Path) else dict(base)
    for key, value in changes.items():
        cfg[key] = value
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def tiny_config(tmp: Path, **changes) -> Path:
    """config/test.yaml with ``changes``."""
    cfg = yaml.safe_load(TEST_CONFIG.read_text())
    cfg.update(changes)
    return write_config(tmp / "config.yaml", cfg)


def job_blocks(out: str, rule: str) -> list[str]:
    """The text of each job of ``rule`` printed by a (dry) run."""
    blocks = re.split(r"\n(?=\s*\[[A-Z][a-z]{2} .*\]\n)", out)
    return [b for b in blocks if re.search(rf"^\s*(local)?rule {re.escape(rule)}:$", b, re.M)]


def _printed_html_command(out: str) -> str:
    return re.search(r"^HTML report: (.+)$", out, re.M).group(1)


def _run_as_printed(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """A printed command in a shell without the environment on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SNAKEMAKE", "VIRTUAL_ENV"))}
    env["PATH"] = "/usr/bin:/bin"
    return subprocess.run(
        command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
