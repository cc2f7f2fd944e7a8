"""The configs as shipped, on a fresh checkout with the data where they say: config/pools.yaml
and config/parallel-probe.yaml (needs ../shared/data)."""

from __future__ import annotations

import csv
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from mars.report.fmt import read_table_csv
from workflow.common import (
    REPO,
    _env,
    _printed_html_command,
    _run_as_printed,
    job_stats,
    slow,
)

PP_DATA = REPO.parent / "shared" / "data" / "parallel-probe-qwen3-8b" / "aime24.json"


WORKFLOW_FILES = ("Snakefile", "workflow", "config", "profiles")


def _fresh_checkout(dest: Path) -> Path:
    """What a fresh clone brings for the workflow: its tracked (and new, not ignored) files."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z", "--", *WORKFLOW_FILES],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        src = REPO / name.decode()
        if src.is_file():
            (dest / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name.decode())
    return dest


@pytest.mark.reference
@pytest.mark.skipif(not PP_DATA.is_file(), reason="needs ../shared/data (Parallel-Probe traces)")
@slow
def test_pools_config_as_shipped(tmp_path):
    """config/pools.yaml, run with the command in its header on a fresh checkout where the
    default's report already stands, with the data placed where the config says: the pools get
    their own report (methods: all without the DeepConf methods the data cannot run), the
    default's report stays, and the printed HTML command works as printed."""
    clone = _fresh_checkout(tmp_path / "clone")
    config = clone / "config" / "pools.yaml"
    data = clone / yaml.safe_load(config.read_text())["imports"][0]["path"]
    data.parent.mkdir(parents=True)
    shutil.copy2(PP_DATA, data)
    default_report = clone / "results" / "report" / "report.md"
    default_report.parent.mkdir(parents=True)
    default_report.write_text("the embedded default's report\n")
    header = re.search(r"^#\s+(snakemake .+)$", config.read_text(), re.M).group(1)
    assert header == "snakemake --cores 4 --configfile config/pools.yaml"
    r = subprocess.run(
        shlex.split(header),
        cwd=clone,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-4000:]
    assert job_stats(r.stdout) == {
        "import_pool": 1,
        "fit": 1,
        "simulate": 1,
        "analyze": 1,
        "report": 1,
        "run_config": 1,
        "all": 1,
    }
    assert default_report.read_text() == "the embedded default's report\n"
    report = clone / "results" / "report-pools"
    table1 = (report / "tables" / "table1-main.md").read_text()
    assert re.search(r"\| qwen3-8b \| aime_2024 \| \d+\.\d \| \d+\.\d \| \d+\.\d%", table1)
    log = clone / "results" / "logs" / "simulate" / "qwen3-8b" / "aime_2024" / "default.log"
    note = log.read_text().splitlines()[0]
    assert note.startswith("note: --method all leaves out dco, dco-mars,") and "confidences" in note
    sims = clone / "results" / "simulate" / "qwen3-8b" / "aime_2024" / "default"
    assert (sims / "sc-mars-cal" / "overall.json").is_file() and not (sims / "dco").exists()
    printed = _printed_html_command(r.stdout)
    done = _run_as_printed(printed, clone)
    assert done.returncode == 0, done.stdout + done.stderr
    html = (clone / "results" / "report-pools.html").read_text()
    assert "qwen3-8b/aime_2024" in html and "System Message" not in html  # docutils' warnings


@pytest.mark.reference
@pytest.mark.skipif(not PP_DATA.is_file(), reason="needs ../shared/data (Parallel-Probe traces)")
@slow
def test_parallel_probe_config_reproduces_their_table_and_reruns_in_part(tmp_path):
    """config/parallel-probe.yaml as shipped: their matrices imported at their own spacing, their
    protocol (no fit job: it reads none), their seven printed rows in the report's latency table;
    a changed wave size reruns that setting's simulation and the report, nothing else."""
    clone = _fresh_checkout(tmp_path / "clone")
    config = clone / "config" / "parallel-probe.yaml"
    data = clone / yaml.safe_load(config.read_text())["imports"][0]["path"]
    data.parent.mkdir(parents=True)
    shutil.copy2(PP_DATA, data)
    header = re.search(r"^#\s+(snakemake .+)$", config.read_text(), re.M).group(1)
    assert header == "snakemake --cores 4 --configfile config/parallel-probe.yaml"

    def run(*extra):
        r = subprocess.run(
            [*shlex.split(header), *extra],
            cwd=clone,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=900,
        )
        assert r.returncode == 0, r.stdout[-4000:]
        return job_stats(r.stdout)

    assert run() == {
        "import_pool": 1,
        "simulate": 3,
        "report": 1,
        "run_config": 1,
        "all": 1,
    }
    report = clone / "results" / "report-parallel-probe"
    lat = read_table_csv(report / "tables" / "table-latency.csv")
    main = lat[lat.setting == "default"].set_index("method")
    with open(PP_DATA.parent / "aime24_raw.csv") as f:
        printed = {(r["Solver"], r["Strategy"]): r for r in csv.DictReader(f)}
    rows = {
        "single-sac": ("GreedySolver", "ConvergenceProbeStrategy"),
        "sc": ("MajorityVoteSolver", "FullReadStrategy"),
        "esc": ("ESCSolver", "FullReadStrategy"),
        "asc": ("ASCSolver", "FullReadStrategy"),
        "sc-sac": ("MajorityVoteSolver", "ConvergenceProbeStrategy"),
        "pp-main-keep": ("GreedySolver", "ParallelESTPruning"),
        "pp-main": ("GreedySolver", "ParallelESTPruningBurstMajorityOnActiveBranches"),
    }
    for method, key in rows.items():
        got = main.loc[method]
        want = printed[key]
        assert (got.pp_Acc, got.pp_Cost, got.pp_Seq_Cost) == (
            float(want["Acc"]),
            int(want["Cost"]),
            int(want["Seq_Cost"]),
        ), method
    assert {"sc-mars-cal", "sc-mars2-waves"} <= set(main.index)
    overlay = tmp_path / "waves.yaml"
    overlay.write_text(
        "simulation:\n  settings:\n"
        "    default: {protocol: parallel-probe}\n"
        "    waves-8: {protocol: parallel-probe, wave_size: 4, methods: [sc, sc-mars2-waves]}\n"
        "    waves-32: {protocol: parallel-probe, wave_size: 32, methods: [sc, sc-mars2-waves]}\n"
    )
    assert run("--configfile", str(config), str(overlay)) == {
        "simulate": 1,
        "report": 1,
        "run_config": 1,
        "all": 1,
    }
