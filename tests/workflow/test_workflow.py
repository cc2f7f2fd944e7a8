"""The Snakemake workflow: DAGs, resources, profiles, a real run, partial reruns, lint, format.

Snakemake runs in a subprocess (``python -m snakemake``) against the repository's Snakefile with
``--directory`` pointing at a temporary directory, so nothing is written into the checkout. The
rules call ``mars``: the interpreter's bin directory is put first on PATH.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from util import report_files_differ

from mars.report.fmt import read_table_csv

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


# ---------------------------------------------------------------------------------------------
# dry runs: the DAG of the default and the paper configs, resources, SLURM


def test_default_config_dag(tmp_path):
    out = smk(tmp_path, "-n").stdout
    assert "config/config.yaml" in out
    stats = job_stats(out)
    # 3 synthetic models x 3 datasets, 2 shards each; 3 simulation settings; the trade-off
    # sweep of one pool
    expected = {
        "questions": 3,
        "generate": 18,
        "probe": 18,
        "consolidate": 9,
        "fit": 9,
        "simulate": 33,  # 3 settings x 9 pools, and 6 trade-off settings of one pool
        "analyze": 9,
        "all": 1,
        "report": 1,
        "run_config": 1,
    }
    assert stats == expected
    # docs/workflow.md states the job count of this run: it is this dry run's
    stated = re.search(
        r"(\d+) jobs, `tests/test_workflow.py`", (REPO / "docs" / "workflow.md").read_text()
    )
    assert stated and int(stated.group(1)) == sum(stats.values())
    gen = job_blocks(out, "generate")
    assert len(gen) == 18
    assert all("gpu=0" in b for b in gen)  # synthetic: no GPU
    assert any("--preset qwen3-next-80b-a3b-thinking --traces 64 --n-shards 2" in b for b in gen)
    sim = job_blocks(out, "simulate")
    assert any(
        "--method all " in b and "--budget 48 --iterations 32 --warmup 16 --seed 42" in b
        for b in sim
    )
    assert any("--method sc-pp,sc-pp-faithful" in b and "--pp-conv 14" in b for b in sim)


@slow
def test_paper_config_dag_and_resources(tmp_path):
    out = smk(tmp_path, "-n", configfile=REPO / "config" / "paper.yaml").stdout
    stats = job_stats(out)
    # shards: 16 (DeepSeek-R1-8B), 32 (Qwen3-32B), 16 (Qwen3-Next) per dataset
    assert stats["generate"] == 3 * (16 + 32 + 16)
    assert stats["consolidate"] == 9 and stats["fit"] == 9 and stats["simulate"] == 27
    gen = job_blocks(out, "generate")
    nxt = [b for b in gen if "model=qwen3-next-80b," in b]
    assert len(nxt) == 3 * 16
    b = nxt[0]
    for res in ("gpu=4", "gpu_model=h100", "mem_mb=256000", "runtime=1440"):
        assert res in b
    assert (
        "--backend sglang --model Qwen/Qwen3-Next-80B-A3B-Thinking --traces 4096 --n-shards 16 "
        "--seed 42" in b
    )
    assert "--max-tokens 81920 --temperature 0.6 --top-p 0.95 --top-k 20 --tp-size 4" in b
    r1 = next(b for b in gen if "model=deepseek-r1-8b," in b)
    assert "gpu=1" in r1 and "--max-tokens 64000 --temperature 0.6 --top-p 0.95" in r1
    assert "--top-k" not in r1
    q32 = next(b for b in gen if "model=qwen3-32b," in b)
    assert "--model Qwen/Qwen3-32B" in q32 and "--max-tokens 32768" in q32 and "--top-k 20" in q32
    sim = job_blocks(out, "simulate")
    assert any("--budget 512 --iterations 64 --warmup 16 --seed 42" in b for b in sim)


@slow
def test_slurm_profile_dry_run(tmp_path):
    pytest.importorskip("snakemake_executor_plugin_slurm")
    out = smk(
        tmp_path,
        "-n",
        configfile=REPO / "config" / "paper.yaml",
        profile=REPO / "profiles" / "slurm",
        cores=None,
    ).stdout
    assert "Using workflow specific profile" in out
    gen = job_blocks(out, "generate")
    assert gen and all("slurm_partition=gpu" in b and "slurm_account=my_account" in b for b in gen)
    assert all("cpus_per_gpu=8" in b for b in gen)
    assert any("gpu=4" in b and "gpu_model=h100" in b for b in gen)
    sim = job_blocks(out, "simulate")
    assert len(sim) == 27 and all("slurm_partition=cpu" in b and "mem_mb=32000" in b for b in sim)
    # the small per-pool CPU jobs (consolidate -> fit) of three pools share one SLURM job
    assert out.count("Group job pool") == 3
    assert len(job_blocks(out, "fit")) == 9


def _with(base: dict, **sections) -> dict:
    cfg = {**base}
    for key, value in sections.items():
        cfg[key] = {**base[key], **value} if key in ("simulation", "generation") else value
    return cfg


@pytest.mark.parametrize(
    "change, message",
    [
        ({"simulation": {"budget": 0}}, "budget"),  # the schema
        (
            {"models": {"m": {"backend": "synthetic", "preset": "no-such-preset"}}},
            "unknown synthetic preset",
        ),
        ({"simulation": {"methods": ["sc", "no-such-method"]}}, "unknown method"),
    ],
    ids=["schema", "preset", "method"],
)
@slow
def test_bad_config_fails_at_parse_time(tmp_path, change, message):
    cfg = _with(yaml.safe_load(TEST_CONFIG.read_text()), **change)
    r = smk(tmp_path, "-n", configfile=write_config(tmp_path / "bad.yaml", cfg), check=False)
    assert r.returncode != 0
    assert message in r.stdout, r.stdout[-2000:]
    assert "Building DAG" not in r.stdout  # it failed while the Snakefile was parsed


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"simulation": {"budgte": 64}},
            "simulation.budgte: unknown key (did you mean 'budget'? known: methods, workers, "
            "settings, budget,",
        ),
        (
            {"simulation": {"settings": {"x": {"pp_conv": "four"}}}},
            "simulation.settings.x.pp_conv: 'four' is not of type 'integer'",
        ),
        ({"models": {"m": {"backend": "sglang"}}}, "models.m: 'model' is a required property"),
        ({"models": {"m": {"backend": "synthetic"}}}, "'preset' is a required property"),
        (
            {"models": {"m/1": {"backend": "synthetic", "preset": "qwen3-8b"}}},
            "models: 'm/1' is not a model, dataset or setting name",
        ),
        (
            {"generation": {"questions": "0-1,x"}},
            "generation.questions '0-1,x': 'x' is not an id or a range a-b",
        ),
        (
            {"simulation": {"settings": {"s": {"questions": "5-3"}}}},
            "simulation.settings.s.questions '5-3': range 5-3 runs backwards",
        ),
        ({"simulation": {"questions": "0-2000000"}}, "question ids go up to 1,000,000"),
        (
            {"generation": {"questions": "0-40"}},
            "generation.questions (dataset aime_2025): questions [30, 31, 32, 33, 34]… not in",
        ),
        (
            {"simulation": {"questions": "5"}},
            "simulation.questions '5': question 5 is not in the pools generated for aime_2025",
        ),
        (
            {"imports": [{"model": "m", "dataset": "d", "format": "csv", "path": "x"}]},
            "imports[0].format: 'csv' is not one of",
        ),
        (
            {"imports": [{"model": "m", "dataset": "d", "format": "pool", "path": "no/such"}]},
            "imports[0].path: no/such does not exist (relative to the working directory ",
        ),
        ({"report": {"out": ""}}, "report.out: '' should be non-empty"),
        (
            {"models": {"m": {"backend": "server", "base_url": "localhost:8080"}}},
            "models.m.base_url: 'localhost:8080' is not an http(s)://HOST:PORT URL of the server",
        ),
        (
            {"models": {"m": {"backend": "server", "base_url": "http://gpu-node:80800"}}},
            "models.m.base_url 'http://gpu-node:80800': port out of range 0-65535; expected "
            "http://HOST:PORT",
        ),
        (
            {"models": {"m": {"backend": "server", "base_url": "http://al:s3cret@[::1"}}},
            "models.m.base_url 'http://***@[::1': invalid ipv6 url; expected http://HOST:PORT",
        ),
        (
            {"models": {"m": {"backend": "server", "base_url": "al:s3cret@gpu-node:8000"}}},
            "models.m.base_url: '***@gpu-node:8000' is not an http(s)://HOST:PORT URL",
        ),
        ({"models": {"m": {"backend": "server"}}}, "models.m: 'base_url' is a required property"),
        (
            {"models": {"m": {"backend": "server", "base_url": "http://h:1", "timeuot": 9}}},
            "models.m.timeuot: unknown key (did you mean 'timeout'?",
        ),
        (
            {"models": {"m": {"backend": "server", "base_url": "http://h:1", "concurrency": 0}}},
            "models.m.concurrency: 0 is less than the minimum of 1",
        ),
        (
            {"models": {"m": {"backend": "sglang", "model": "x", "base_url": "http://h:1"}}},
            "models.m.base_url: only for a model served by a server (backend: server), not sglang",
        ),
        (
            {"probe": {"backend": "server"}},
            "probe.base_url: probe.backend server needs the server's URL to probe the traces of "
            "models.tiny (synthetic)",
        ),
        ({"probe": {"timeout": 60}}, "probe.timeout: only for probing through a server"),
        # YAML's .nan passes every minimum and maximum of a schema; every job would fail
        (
            {"models": {"m": {"backend": "server", "base_url": "http://h:1", "timeout": math.nan}}},
            "models.m.timeout: nan is not a finite number",
        ),
        (
            {
                "models": {
                    "m": {"backend": "server", "base_url": "http://h:1", "temperature": math.nan}
                }
            },
            "models.m.temperature: nan is not a finite number",
        ),
        ({"simulation": {"gamma": math.inf}}, "simulation.gamma: inf is not a finite number"),
    ],
)
def test_config_rejects_in_one_line(change, message):
    """Every problem of a config is one line naming the key, whatever check finds it."""
    from mars.workflow import ConfigError, check_config

    cfg = _with(yaml.safe_load(TEST_CONFIG.read_text()), **change)
    with pytest.raises(ConfigError) as exc:
        check_config(cfg, SCHEMA)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_config_typo_names_the_nearest_key():
    from mars.workflow import ConfigError, check_config

    cfg = yaml.safe_load(TEST_CONFIG.read_text())
    cfg["simulaton"] = cfg.pop("simulation")
    with pytest.raises(ConfigError, match=r"^simulaton: unknown key \(did you mean 'simulation'\?"):
        check_config(cfg, SCHEMA)
    # a dotted key, as in --config simulation.budget=32, does not nest
    cfg = {**yaml.safe_load(TEST_CONFIG.read_text()), "simulation.budget": 32}
    with pytest.raises(ConfigError, match="keys do not nest with dots: write simulation:"):
        check_config(cfg, SCHEMA)


def test_config_text_where_a_number_belongs_points_to_the_overlay():
    """--config "simulation={budget: 32}" hands the workflow the text '32'."""
    from mars.workflow import ConfigError, check_config

    cfg = yaml.safe_load(TEST_CONFIG.read_text())
    cfg["simulation"]["budget"] = "32"
    with pytest.raises(ConfigError) as exc:
        check_config(cfg, SCHEMA)
    assert str(exc.value).startswith("simulation.budget: '32' is not of type 'integer'")
    assert "--configfile BASE.yaml OVERLAY.yaml" in str(exc.value)


def test_every_config_has_its_own_report_folder(tmp_path):
    """report.out, else named after the (first) config file: config/pools.yaml, the tiny config
    and a SLURM test never write into the embedded default's results/report."""
    from mars.workflow import report_dir

    def folder(name, out=None):
        cfg = yaml.safe_load((REPO / "config" / name).read_text())
        cfg.setdefault("report", {}).setdefault("out", out)
        return report_dir(cfg, [] if name == "config.yaml" else [REPO / "config" / name])

    assert folder("config.yaml") == "results/report"
    assert folder("pools.yaml") == "results/report-pools"
    assert folder("test.yaml") == "results/report-test"
    assert folder("paper.yaml") == "results/report-paper"
    assert folder("test.yaml", out="elsewhere/") == "elsewhere"
    assert report_dir({"report": {"out": None}}, ["my pools!.yaml", "overlay.yaml"]) == (
        "results/report-my-pools"
    )


def test_report_command_works_from_where_it_is_printed(tmp_path):
    """The HTML report command names Snakemake by its path (no activated environment needed),
    relative inside the working directory, absolute with the Snakefile elsewhere."""
    from mars.workflow import report_html_command

    venv = tmp_path / "work" / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "snakemake").write_text("#!/bin/sh\n")
    work = tmp_path / "work"
    cmd = report_html_command(
        venv / "python",
        "results/report-pools",
        [work / "config" / "pools.yaml"],
        ["x=1"],
        snakefile=work / "Snakefile",
        workdir=work,
    )
    assert cmd == (
        ".venv/bin/snakemake --report results/report-pools.html "
        "--configfile config/pools.yaml --config x=1"
    )
    other = tmp_path / "elsewhere"
    cmd = report_html_command(
        venv / "python", "results/report", snakefile=work / "Snakefile", workdir=other
    )
    assert cmd == (
        f"{venv}/snakemake --snakefile {work}/Snakefile --directory {other} "
        f"--report {other}/results/report.html"
    )
    assert report_html_command(tmp_path / "python", "r", workdir=work).startswith(
        f"{tmp_path}/python -m snakemake --report"
    )


def test_schema_fills_defaults():
    from snakemake.utils import validate

    cfg = {
        "datasets": {"a": "aime_2025"},
        "models": {"m": {"backend": "synthetic", "preset": "qwen3-8b"}},
    }
    validate(cfg, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    assert cfg["generation"] == {
        "traces": 128,
        "shards": 1,
        "seed": 0,
        "questions": None,
        "datasets": None,
        "confs": True,
    }
    assert cfg["probe"]["spacing"] == 2048 and cfg["probe"]["model"] is None
    assert cfg["simulation"]["settings"] == {"default": {}}
    assert (cfg["simulation"]["budget"], cfg["simulation"]["iterations"]) == (512, 64)
    assert (
        cfg["models"]["m"]["resources"] == {}
        and cfg["imports"] == []
        and cfg["report"] == {"enabled": True, "out": None, "example": None, "q_questions": 10}
        and cfg["tradeoff"] == {"pools": [], "budget": None, "iterations": None, "questions": None}
    )


@slow
def test_schema_defaults_fill_a_minimal_config(tmp_path):
    """A config with a user's jsonl dataset and nothing else:
    the schema's defaults fill the rest."""
    problems = tmp_path / "mine.jsonl"
    problems.write_text(
        '{"question": "1+1?", "answer": "2"}\n{"question": "2+2?", "answer": "4"}\n'
    )
    path = write_config(
        tmp_path / "min.yaml",
        {
            "datasets": {"mine": str(problems)},
            "models": {"m": {"backend": "synthetic", "preset": "qwen3-8b"}},
        },
    )
    out = smk(tmp_path, "-n", configfile=path).stdout
    assert job_stats(out) == {
        "questions": 1,
        "generate": 1,
        "probe": 1,
        "consolidate": 1,
        "fit": 1,
        "simulate": 1,
        "analyze": 1,
        "report": 1,
        "run_config": 1,
        "all": 1,
    }
    assert f"input: {problems}" in job_blocks(out, "questions")[0]  # an edit of the file reruns it
    assert "--budget 512 --iterations 64 --warmup 16 --seed 42" in out
    assert "--traces 128 --n-shards 1 --seed 0 --probe none" in out
    assert "mars probe results/traces/m/mine/shard0 --out results/probes/m/mine/shard0" in out
    assert "--spacing 2048 --replace" in out


# ---------------------------------------------------------------------------------------------
# a model served by an inference server (backend: server)

SERVED = {
    "backend": "server",
    "base_url": "http://gpu-node:8000/v1",
    "model": "Qwen/Qwen3-8B",
    "concurrency": 64,
    "timeout": 900,
    "max_tokens": 4096,
}


def test_served_model_jobs_talk_to_the_server_and_ask_no_gpu(tmp_path):
    """A served model's generate and probe jobs: no GPU of their own, `--backend server` with
    the server's URL and options; a model of another engine beside it keeps its GPU."""
    cfg = tiny_config(
        tmp_path,
        models={
            "served": SERVED,
            "local": {"backend": "transformers", "model": "HuggingFaceTB/SmolLM2-135M"},
        },
    )
    out = smk(tmp_path, "-n", configfile=cfg).stdout
    server_flags = "--base-url http://gpu-node:8000/v1 --concurrency 64 --timeout 900"
    for rule in ("generate", "probe"):
        served = [b for b in job_blocks(out, rule) if "model=served," in b]
        local = [b for b in job_blocks(out, rule) if "model=local," in b]
        assert len(served) == len(local) == 2, rule
        for b in served:
            assert "gpu=0," in b and "mem_mb=8000," in b and "runtime=720," in b, b
            assert f" {server_flags} " in b, b
        for b in local:
            assert "gpu=1," in b and "--base-url" not in b
    gen = next(b for b in job_blocks(out, "generate") if "model=served," in b)
    assert "--backend server --model Qwen/Qwen3-8B --traces 16 --n-shards 2 --seed 0" in gen
    assert "--max-tokens 4096" in gen
    probe = next(b for b in job_blocks(out, "probe") if "model=served," in b)
    assert f"--spacing 2048 {server_flags} --replace -q" in probe  # the generator's server


def test_probing_through_a_server_of_its_own(tmp_path):
    """probe.backend server probes any model's traces at probe.base_url (no GPU: the server
    has it); a served model without a name leaves --model out (the server's only model)."""
    served = {"backend": "server", "base_url": "http://127.0.0.1:8080"}
    probe = {"backend": "server", "model": "judge", "base_url": "https://judge:443"}
    cfg = tiny_config(tmp_path, models={"served": served}, probe=probe)
    out = smk(tmp_path, "-n", configfile=cfg).stdout
    gen = job_blocks(out, "generate")[0]
    assert "--backend server --traces 16" in gen and "--base-url http://127.0.0.1:8080 >" in gen
    for b in job_blocks(out, "probe"):
        assert "gpu=0," in b
        assert "--backend server --probe-model judge --base-url https://judge:443 --replace" in b


WITH_CREDENTIALS = {**SERVED, "base_url": "http://alice:s3cret@gpu-node:8000/v1"}


def test_credentials_in_a_server_url_stay_off_the_jobs_command_lines(tmp_path):
    """Snakemake shows and logs every job's command line: a URL's credentials are not on it
    (nor in any message about the config), the job's shell takes them from the environment."""
    cfg = tiny_config(tmp_path, models={"served": WITH_CREDENTIALS})
    r = smk(tmp_path, "-n", configfile=cfg)
    assert "s3cret" not in r.stdout and "alice" not in r.stdout
    for rule in ("generate", "probe"):
        for b in job_blocks(r.stdout, rule):
            assert re.search(
                r'--base-url "http://\$MARS_SERVER_CREDENTIALS_\w+@gpu-node:8000/v1"', b
            )
    bad = tiny_config(
        tmp_path,
        models={"served": {**WITH_CREDENTIALS, "base_url": "http://alice:s3cret@gpu-node:99999"}},
    )
    r = smk(tmp_path, "-n", configfile=bad, check=False)
    assert r.returncode != 0 and "port out of range" in r.stdout
    assert "s3cret" not in r.stdout


@slow
def test_a_job_gets_the_server_url_s_credentials(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "mars"  # records its arguments; writes the shard's pool.json
    fake.write_text(
        '#!/bin/sh\nall="$*"\nwhile [ "$1" != "--out" ]; do shift; done\n'
        'mkdir -p "$2" && echo {} > "$2/pool.json" && echo "$all" > "$2/args"\n'
    )
    fake.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    cfg = {**yaml.safe_load(TEST_CONFIG.read_text()), "models": {"served": WITH_CREDENTIALS}}
    target = "results/traces/served/aime_2025/shard0/pool.json"
    r = smk(work, target, configfile=write_config(tmp_path / "a.yaml", cfg), path=bindir)
    args = (work / target).with_name("args").read_text()
    assert "--base-url http://alice:s3cret@gpu-node:8000/v1 " in args
    logs = [p.read_text(errors="replace") for p in (work / ".snakemake").rglob("*.log")]
    assert "s3cret" not in r.stdout + "".join(logs)


@slow
def test_a_served_model_moving_to_another_server_reruns_nothing(tmp_path):
    """Where the server runs (URL, concurrency, timeout) does not shape the traces: a
    generated shard stays done when the server comes back on another node and port, while a
    change of what shapes them (the token cap) is a change Snakemake sees."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "mars"  # writes the shard's pool.json, as a finished `mars generate` does
    fake.write_text(
        '#!/bin/sh\nwhile [ "$1" != "--out" ]; do shift; done\n'
        'mkdir -p "$2" && echo {} > "$2/pool.json"\n'
    )
    fake.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    cfg = {**yaml.safe_load(TEST_CONFIG.read_text()), "models": {"served": SERVED}}
    target = "results/traces/served/aime_2025/shard0/pool.json"
    smk(work, target, configfile=write_config(tmp_path / "a.yaml", cfg), path=bindir)
    moved = {**SERVED, "base_url": "http://node7:9000", "concurrency": 8, "timeout": 60}
    cfg["models"] = {"served": moved}
    r = smk(work, "-n", target, configfile=write_config(tmp_path / "b.yaml", cfg), path=bindir)
    assert "Nothing to be done" in r.stdout, r.stdout[-3000:]
    cfg["models"] = {"served": {**moved, "max_tokens": 2048}}
    r = smk(work, "-n", target, configfile=write_config(tmp_path / "c.yaml", cfg), path=bindir)
    assert "Params have changed since last execution" in r.stdout, r.stdout[-3000:]


# ---------------------------------------------------------------------------------------------
# a real run of the whole DAG on the tiny config


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The whole DAG of config/test.yaml, run once, with the default profile (global gpu cap)."""
    root = tmp_path_factory.mktemp("wf")
    work = root / "work"
    work.mkdir()
    # `mars` behind a wrapper: a stand-in for the library code the rules call
    bindir = root / "bin"
    bindir.mkdir()
    wrapper = bindir / "mars"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m mars.cli "$@"\n')
    wrapper.chmod(0o755)
    # the synthetic model claims a GPU so that the default profile's `gpu: 1` cap is exercised
    cfg = tiny_config(
        root,
        models={"tiny": {"backend": "synthetic", "preset": "qwen3-32b", "resources": {"gpu": 1}}},
        tradeoff={"pools": ["tiny/aime_2025"], "iterations": 2},
    )
    r = smk(work, configfile=cfg, profile=REPO / "profiles" / "default", path=bindir)
    return {"work": work, "config": cfg, "bin": bindir, "out": r.stdout}


#: the trade-off settings the tiny run's tradeoff section makes (point i of every declared sweep)
TRADEOFF_SETTINGS = 6


def _copy_run(run, dest: Path) -> Path:
    work = dest / "work"
    shutil.copytree(run["work"], work, symlinks=True)
    return work


@slow
def test_tiny_run_outputs(tiny_run):
    work, out = tiny_run["work"], tiny_run["out"]
    stats = job_stats(out)
    expected = {"questions": 1, "generate": 2, "probe": 2, "consolidate": 1, "fit": 1}
    expected.update({"simulate": 2 + TRADEOFF_SETTINGS, "analyze": 1, "all": 1})
    expected.update({"report": 1, "run_config": 1})
    assert stats == expected
    res = work / "results"
    assert (res / "questions" / "aime_2025.jsonl").read_text().count("\n") == 30
    for s in (0, 1):
        assert (res / "traces" / "tiny" / "aime_2025" / f"shard{s}" / "pool.json").is_file()
    assert (res / "pools" / "tiny" / "aime_2025" / "pool.json").is_file()
    fit = res / "fit" / "tiny" / "aime_2025"
    assert any(fit.glob("q*.npz"))
    models = pq.read_table(fit / "models.parquet").to_pylist()
    assert sorted((m["qid"], m["warmup"]) for m in models) == [(0, 4), (1, 4)]
    assert all(m["coef"] is not None and m["n_rows"] > 0 for m in models)
    default = res / "simulate" / "tiny" / "aime_2025" / "default"
    methods = sorted(p.name for p in default.iterdir() if (p / "overall.json").is_file())
    assert (
        len(methods) >= 19 and "sc" in methods and "sc-mars-cal" in methods and "sc-pp" in methods
    )
    for f in ("per_question.csv", "per_iteration.csv", "overall.json"):
        assert (default / "sc" / f).is_file()
    assert [
        p.name for p in (res / "simulate" / "tiny" / "aime_2025" / "pp-u4").iterdir() if p.is_dir()
    ] == ["sc-pp"]
    # every job logged and benchmarked
    for rule in ("generate", "consolidate", "fit", "simulate"):
        assert list((res / "logs" / rule).rglob("*.log")), rule
        bench = list((res / "benchmarks" / rule).rglob("*.tsv"))
        assert bench and bench[0].read_text().startswith("s\th:m:s"), rule
    report = res / "report-config"  # named after the config file (tiny_config: config.yaml)
    assert (report / "report.md").is_file()
    assert yaml.safe_load((res / "report-config.config.yaml").read_text())["generation"] == {
        **yaml.safe_load(tiny_run["config"].read_text())["generation"],
        "seed": 0,
        "datasets": None,
        "confs": True,
    }  # the configuration the run used: the file's values and the schema's defaults
    for table in (
        "table1-main",
        "table2-parallel-probe",
        "table-oracle-bounds",
        "table-probe-cost",
        "table-oracle-share",
        "table-switch-models",
    ):
        for ext in ("md", "tex", "csv", "html"):
            assert (report / "tables" / f"{table}.{ext}").is_file(), (table, ext)
    models = read_table_csv(report / "tables" / "table-switch-models.csv")
    assert models.questions.tolist() == [2] and (models.log_loss > 0).all()
    figures = ("fig1-left-savings", "fig1-right-example", "fig4-ablations", "fig-frontier")
    for fig in (*figures, "fig-tradeoff"):
        assert (report / "figures" / f"{fig}.png").stat().st_size > 5_000, fig
        assert (report / "figures" / f"{fig}.caption.html").is_file(), fig
    assert (res / "analysis" / "tiny" / "aime_2025" / "analysis.json").is_file()
    points = pd.read_csv(report / "figures" / "fig-tradeoff.csv", comment="#")
    assert set(points.setting) == {f"tradeoff-{i}" for i in range(1, TRADEOFF_SETTINGS + 1)}


@slow
def test_the_report_rule_reads_only_its_declared_inputs(tiny_run, tmp_path):
    """Issue 21 (1): after a workflow run, with the pools and fits moved away, the report rule's
    command (as report.md records it) gives byte-identical tables and figures."""
    work = _copy_run(tiny_run, tmp_path)
    res = work / "results"
    report = res / "report-config"

    def files() -> dict:
        return {
            p.relative_to(report): p.read_bytes()
            for p in report.rglob("*")
            if p.is_file() and p.name != ".snakemake_timestamp"  # Snakemake's, not the report's
        }

    before = files()
    for stage in ("pools", "fit", "traces", "probes"):
        shutil.move(res / stage, tmp_path / stage)
    command = re.search(r"```\n(mars report .*)\n```", (report / "report.md").read_text())
    assert command is not None
    env = {**os.environ, "PATH": f"{tiny_run['bin']}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(command.group(1), shell=True, cwd=work, env=env, capture_output=True)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    after = files()
    assert report_files_differ(before, after) == []


@slow
def test_generated_traces_are_write_protected(tiny_run):
    manifest = (
        tiny_run["work"] / "results" / "traces" / "tiny" / "aime_2025" / "shard0" / "pool.json"
    )
    assert not manifest.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)


@slow
def test_gpu_jobs_never_share_the_card(tiny_run):
    """With the default profile's global `gpu: 1`, two GPU jobs never run at the same time."""
    out = tiny_run["out"]
    running, peak = set(), 0
    gpu_jobs = set()
    for block in re.split(r"\n(?=\[[A-Z][a-z]{2} .*\]\n)", out):
        m = re.search(r"^(?:local)?rule generate:$", block, re.M)
        jid = re.search(r"^\s+jobid: (\d+)$", block, re.M)
        if m and jid:
            gpu_jobs.add(jid.group(1))
            running.add(jid.group(1))
            peak = max(peak, len(running))
        for done in re.findall(r"Finished jobid: (\d+) \(Rule: generate\)", block):
            running.discard(done)
    assert len(gpu_jobs) == 2 and peak == 1


@slow
def test_rerun_nothing_to_do_and_library_edits(tiny_run, tmp_path):
    work = _copy_run(tiny_run, tmp_path)
    r = smk(work, "-n", configfile=tiny_run["config"], path=tiny_run["bin"])
    assert "Nothing to be done" in r.stdout
    # "edit the library": the code behind the `mars` command changes -> nothing reruns
    wrapper = tmp_path / "bin" / "mars"
    wrapper.parent.mkdir()
    wrapper.write_text(tiny_run["bin"].joinpath("mars").read_text() + "# edited\n")
    wrapper.chmod(0o755)
    r = smk(work, "-n", configfile=tiny_run["config"], path=wrapper.parent)
    assert "Nothing to be done" in r.stdout
    r = smk(work, "--list-changes", "code", configfile=tiny_run["config"], path=wrapper.parent)
    assert "results/" not in r.stdout.split("Building DAG of jobs...")[-1]


@slow
def test_documented_stale_check_lists_only_what_changed(tiny_run, tmp_path):
    """docs/workflow.md's command for "what is stale, and why" says nothing is, on a finished
    run, and names exactly the changed jobs with their reason after a change."""
    docs = (REPO / "docs" / "workflow.md").read_text().splitlines()
    line = next(ln for ln in docs if "stale" in ln and ln.startswith("snakemake "))
    cmd = shlex.split(line.split("#")[0])
    work = _copy_run(tiny_run, tmp_path)
    out = smk(work, *cmd[1:], configfile=tiny_run["config"]).stdout
    assert "Nothing to be done" in out
    assert "results/" not in out.split("Building DAG of jobs...")[-1]
    cfg = yaml.safe_load(tiny_run["config"].read_text())
    cfg["simulation"]["settings"]["pp-u4"]["pp_conv"] = 5
    (tmp_path / "changed").mkdir()  # config.yaml again: the same report folder
    changed = write_config(tmp_path / "changed" / "config.yaml", cfg)
    out = smk(work, *cmd[1:], configfile=changed).stdout
    assert job_stats(out) == {"simulate": 1, "report": 1, "run_config": 1, "all": 1}
    assert "reason: Params have changed since last execution" in job_blocks(out, "simulate")[0]


@slow
def test_simulation_parameter_change_reruns_only_downstream(tiny_run, tmp_path):
    work = _copy_run(tiny_run, tmp_path)
    cfg = yaml.safe_load(tiny_run["config"].read_text())
    downstream = {"report": 1, "run_config": 1}
    # a simulation default: every setting's simulate job, and what follows
    cfg["simulation"]["budget"] = 6
    path = write_config(tmp_path / "budget.yaml", cfg)
    r = smk(work, "-n", configfile=path)
    every = 2 + TRADEOFF_SETTINGS  # the trade-off settings take the simulation's budget too
    assert job_stats(r.stdout) == {"simulate": every, "analyze": 1, "all": 1, **downstream}
    assert "Params have changed since last execution" in r.stdout
    # one setting's own parameter: that setting only
    cfg["simulation"]["budget"] = 8
    cfg["simulation"]["settings"]["pp-u4"]["pp_conv"] = 5
    path = write_config(tmp_path / "ppconv.yaml", cfg)
    r = smk(work, "-n", configfile=path)
    assert job_stats(r.stdout) == {"simulate": 1, "all": 1, **downstream}
    assert "setting=pp-u4" in r.stdout
    # and running it really touches nothing upstream
    r = smk(work, "--omit-from", "report", configfile=path, path=tiny_run["bin"])
    assert job_stats(r.stdout) == {"simulate": 1, "run_config": 1}
    pp = work / "results" / "simulate" / "tiny" / "aime_2025" / "pp-u4" / "sc-pp" / "overall.json"
    assert '"pp_conv": 5' in pp.read_text()


@slow
def test_probe_setting_change_reruns_probing_not_generation(tiny_run, tmp_path):
    """A new probe spacing (or suffix, or model) reruns probe and everything after it, and no
    generate job; the pools then carry the new grid."""
    work = _copy_run(tiny_run, tmp_path)
    cfg = yaml.safe_load(tiny_run["config"].read_text())
    before = job_stats(smk(work, "-n", configfile=tiny_run["config"]).stdout)
    assert before == {}  # nothing to do
    for change in ({"spacing": 1024}, {"spacing": 2048, "suffix": "\\n</think>\\n\\boxed{"}):
        cfg["probe"] = change
        path = write_config(tmp_path / "probe.yaml", cfg)
        r = smk(work, "-n", configfile=path)
        stats = job_stats(r.stdout)
        assert "generate" not in stats and "questions" not in stats, stats
        assert stats == {
            "probe": 2,
            "consolidate": 1,
            "fit": 1,
            "simulate": 2 + TRADEOFF_SETTINGS,
            "analyze": 1,
            "report": 1,
            "run_config": 1,
            "all": 1,
        }
    cfg["probe"] = {"spacing": 1024}
    path = write_config(tmp_path / "probe.yaml", cfg)
    smk(work, configfile=path, path=tiny_run["bin"])
    pool = json.loads((work / "results" / "pools" / "tiny" / "aime_2025" / "pool.json").read_text())
    assert pool["spacing"] == 1024 and pool["probe"]["spacing"] == 1024


@slow
def test_forcerun_and_until(tiny_run, tmp_path):
    work = _copy_run(tiny_run, tmp_path)
    cfg = tiny_run["config"]
    downstream = {"report": 1}
    # -R fit: the fit and everything after it, never the generation
    r = smk(work, "-n", "-R", "fit", configfile=cfg)
    every = 2 + TRADEOFF_SETTINGS
    assert job_stats(r.stdout) == {
        "fit": 1,
        "simulate": every,
        "analyze": 1,
        "all": 1,
        **downstream,
    }
    # -R simulate, restricted to one target file
    r = smk(work, "-n", "-f", "results/simulate/tiny/aime_2025/pp-u4", configfile=cfg)
    assert job_stats(r.stdout) == {"simulate": 1}
    # --until / per-stage targets on a fresh directory
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    r = smk(fresh, "-n", "--until", "consolidate", configfile=cfg)
    assert job_stats(r.stdout) == {"questions": 1, "generate": 2, "probe": 2, "consolidate": 1}
    r = smk(fresh, "-n", "all_traces", configfile=cfg)
    assert job_stats(r.stdout) == {"questions": 1, "generate": 2, "all_traces": 1}
    r = smk(fresh, "-n", "all_probes", configfile=cfg)
    assert job_stats(r.stdout) == {"questions": 1, "generate": 2, "probe": 2, "all_probes": 1}
    r = smk(fresh, "-n", "all_fits", configfile=cfg)
    assert job_stats(r.stdout) == {
        "questions": 1,
        "generate": 2,
        "probe": 2,
        "consolidate": 1,
        "fit": 1,
        "all_fits": 1,
    }
    r = smk(fresh, "-n", "--omit-from", "simulate", configfile=cfg)
    assert job_stats(r.stdout) == {
        "questions": 1,
        "generate": 2,
        "probe": 2,
        "consolidate": 1,
        "fit": 1,
        "run_config": 1,  # the configuration record depends on no stage
    }


@slow
def test_interrupted_forced_simulation_is_redone(tiny_run, tmp_path):
    """Ctrl-C during `snakemake -R simulate`: Snakemake deletes the interrupted jobs' outputs;
    the next plain run makes them and the report again (it said "Nothing to be done")."""
    work = _copy_run(tiny_run, tmp_path)
    started = tmp_path / "simulate-started"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "mars"  # a simulate that runs until interrupted
    wrapper.write_text(
        f'#!/bin/sh\n[ "$1" = simulate ] && touch {started} && exec sleep 600\n'
        f'exec {sys.executable} -m mars.cli "$@"\n'
    )
    wrapper.chmod(0o755)
    cfg = tiny_run["config"]
    proc = subprocess.Popen(
        smk_command(work, "-R", "simulate", configfile=cfg),
        cwd=work,
        env=_env(bindir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.time() + 120
    while not started.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert started.exists(), "no simulate job started"
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole process group
    assert proc.wait(timeout=120) != 0
    sims = work / "results" / "simulate" / "tiny" / "aime_2025"
    settings = ["default", "pp-u4"] + [f"tradeoff-{i}" for i in range(1, TRADEOFF_SETTINGS + 1)]
    lost = [s for s in settings if not (sims / s).exists()]
    assert lost  # what Snakemake does to an interrupted job's outputs
    r = smk(work, configfile=cfg, path=tiny_run["bin"])
    analysis = {"analyze": 1} if "default" in lost else {}
    assert job_stats(r.stdout) == {"simulate": len(lost), **analysis, "report": 1, "all": 1}
    for s in ("default", "pp-u4"):
        assert (sims / s / "sc-pp" / "overall.json").is_file(), s
    assert "Nothing to be done" in smk(work, "-n", configfile=cfg).stdout


@slow
def test_forcing_generation_keeps_the_traces(tiny_run, tmp_path):
    """-R generate never regenerates finished traces: Snakemake refuses (write-protected); as
    root, where file modes do not bind, `mars generate` finds its own finished traces and only
    rewrites the completion marker."""
    work = _copy_run(tiny_run, tmp_path)
    shard = work / "results" / "traces" / "tiny" / "aime_2025" / "shard0"
    before = sorted(p.name for p in (shard / "traces").iterdir())
    traces = {p.name: p.read_bytes() for p in (shard / "traces").iterdir()}
    r = smk(
        work,
        "-R",
        "generate",
        "--until",
        "generate",
        configfile=tiny_run["config"],
        path=tiny_run["bin"],
        check=False,
    )
    if os.geteuid() != 0:
        assert r.returncode != 0
        assert "Write-protected output files" in r.stdout or "ProtectedOutputException" in r.stdout
    else:  # root ignores file modes: the generator resumes its own run, generating nothing
        assert r.returncode == 0, r.stdout[-3000:]
        assert (shard / "pool.json").is_file()
    assert sorted(p.name for p in (shard / "traces").iterdir()) == before
    assert {p.name: p.read_bytes() for p in (shard / "traces").iterdir()} == traces


@slow
def test_changed_then_reverted_generation_needs_no_cleanup(tiny_run, tmp_path):
    """Change a generation value, run, revert it, run: nobody deletes anything by hand.

    As root, Snakemake's write protection does not bind: it deletes the finished shards'
    pool.json to regenerate. `mars generate` then refuses the other parameters in one line and
    keeps the traces, and with the reverted config it finds its own run in the trace files and
    resumes: every output is as before. Without root Snakemake refuses the change itself.
    """
    work = _copy_run(tiny_run, tmp_path)
    res = work / "results"
    before = {p: p.read_bytes() for p in sorted((res / "simulate").rglob("per_iteration.csv"))}
    cfg = yaml.safe_load(tiny_run["config"].read_text())
    cfg["generation"]["traces"] = 12
    changed = write_config(tmp_path / "changed.yaml", cfg)
    r = smk(work, configfile=changed, path=tiny_run["bin"], check=False)
    assert r.returncode != 0
    if os.geteuid() == 0:
        log = (res / "logs" / "generate" / "tiny" / "aime_2025" / "shard0.log").read_text()
        assert "holds a generation with other parameters (" in log
        assert "to keep it, rerun with its parameters; for these, choose another --out" in log
        assert "; to replace it, delete the folder" in log
        assert "Traceback" not in log
    else:
        assert "Write-protected output files" in r.stdout or "ProtectedOutputException" in r.stdout
    traces = res / "traces" / "tiny" / "aime_2025"
    assert len(list(traces.glob("shard*/traces/q*.parquet"))) == 4  # nothing lost
    r = smk(work, configfile=tiny_run["config"], path=tiny_run["bin"])
    assert r.returncode == 0
    after = {p: p.read_bytes() for p in sorted((res / "simulate").rglob("per_iteration.csv"))}
    assert after == before
    assert "Nothing to be done" in smk(work, "-n", configfile=tiny_run["config"]).stdout


@slow
def test_second_entry_from_existing_pools(tiny_run, tmp_path):
    """Published parquet (mars export) and an existing pool directory:
    only the downstream stages."""
    pool = tiny_run["work"] / "results" / "pools" / "tiny" / "aime_2025"
    published = tmp_path / "published.parquet"
    subprocess.run(
        [sys.executable, "-m", "mars.cli", "export", str(pool), str(published)],
        check=True,
        env=_env(),
        capture_output=True,
    )
    work = tmp_path / "work"
    work.mkdir()
    cfg = {
        "datasets": {},
        "models": {},
        "imports": [
            {
                "model": "published",
                "dataset": "aime_2025",
                "format": "mars-parquet",
                "path": str(published),
            },
            {"model": "ours", "dataset": "aime_2025", "format": "pool", "path": str(pool)},
        ],
        "simulation": {
            "methods": ["sc", "sc-mars", "sc-pp"],
            "budget": 8,
            "iterations": 4,
            "warmup": 4,
            "workers": 1,
        },
        "report": {"enabled": True},
    }
    path = write_config(tmp_path / "pools.yaml", cfg)
    r = smk(work, "-n", configfile=path)
    stats = job_stats(r.stdout)
    assert stats.pop("report", 0) == 1 and stats.pop("run_config", 0) == 1
    assert stats == {"import_pool": 1, "fit": 2, "simulate": 2, "analyze": 2, "all": 1}
    r = smk(work, "all_simulations", configfile=path, path=tiny_run["bin"])
    for model in ("published", "ours"):
        ov = work / "results" / "simulate" / model / "aime_2025" / "default" / "sc" / "overall.json"
        assert ov.is_file(), model
    assert (work / "results" / "imported" / "published" / "aime_2025" / "pool.json").is_file()


def _one_error_line(r: subprocess.CompletedProcess) -> str:
    """The single line a refused config prints (the run used no profile: nothing else)."""
    assert r.returncode == 2, r.stdout[-3000:]
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: workflow config ("), r.stdout[-3000:]
    return lines[0]


@pytest.mark.parametrize(
    "case",
    ["pools-without-data", "typo", "questions", "config-braces", "server-url"],
)
@slow
def test_bad_config_is_one_line_before_any_job(tmp_path, case):
    """config/pools.yaml in a fresh directory (its data not there yet), a typo, a bad question
    list, --config with a nested value, a server's URL without its scheme: one line naming the
    key, exit code 2, nothing written."""
    work = tmp_path / "work"
    work.mkdir()
    args, config = ["-n"], TEST_CONFIG
    if case == "pools-without-data":
        args, config = [], REPO / "config" / "pools.yaml"
        expected = "imports[0].path: data/parallel-probe-qwen3-8b/aime24.json does not exist"
    elif case == "typo":
        cfg = yaml.safe_load(TEST_CONFIG.read_text())
        cfg["simulaton"] = cfg.pop("simulation")
        config = write_config(tmp_path / "typo.yaml", cfg)
        expected = "simulaton: unknown key (did you mean 'simulation'?"
    elif case == "questions":
        cfg = yaml.safe_load(TEST_CONFIG.read_text())
        cfg["simulation"]["settings"]["pp-u4"]["questions"] = "5-3"
        config = write_config(tmp_path / "questions.yaml", cfg)
        expected = "simulation.settings.pp-u4.questions '5-3': range 5-3 runs backwards"
    elif case == "server-url":
        served = {"backend": "server", "base_url": "gpu-node:8000"}
        config = tiny_config(tmp_path, models={"served": served})
        expected = "models.served.base_url: 'gpu-node:8000' is not an http(s)://HOST:PORT URL"
    else:
        args = ["--config", "simulation={budget: 32}"]
        expected = "simulation.budget: '32' is not of type 'integer' (a value inside braces"
    r = smk(work, *args, configfile=config, check=False)
    assert expected in _one_error_line(r)
    assert not (work / "results").exists()


@slow
def test_overlay_configfile_changes_a_nested_setting(tmp_path):
    """The documented way to change a nested value: an overlay file after the config."""
    overlay = tmp_path / "budget6.yaml"
    overlay.write_text("simulation:\n  budget: 6\n")
    out = smk(tmp_path, "-n", "--configfile", TEST_CONFIG, overlay).stdout
    sims = job_blocks(out, "simulate")
    assert len(sims) == 2 and all("--budget 6 --iterations 4 --warmup 4" in b for b in sims)
    assert any("--pp-conv 4" in b for b in sims)  # the rest of the base config stays
    assert "results/report-test" in out  # the report folder of the base config


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


def _printed_html_command(out: str) -> str:
    return re.search(r"^HTML report: (.+)$", out, re.M).group(1)


def _run_as_printed(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """A printed command in a shell without the environment on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SNAKEMAKE", "VIRTUAL_ENV"))}
    env["PATH"] = "/usr/bin:/bin"
    return subprocess.run(
        command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


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


@slow
def test_html_report(tiny_run):
    """The command the run prints renders, without the environment on PATH, an HTML report with
    every figure under its own caption, the tables and the configuration."""
    printed = _printed_html_command(tiny_run["out"])
    r = _run_as_printed(printed, tiny_run["work"].parent)
    assert r.returncode == 0, r.stdout + r.stderr
    html = (tiny_run["work"] / "results" / "report-config.html").read_text()
    report = tiny_run["work"] / "results" / "report-config"
    captions = sorted((report / "figures").glob("*.caption.html"))
    assert len(captions) == len(list((report / "figures").glob("*.png"))) >= 6
    for caption in captions:  # each figure's own caption (JSON inside the page)
        text = re.search(r'<p class="caption">(.+?)</p>', caption.read_text()).group(1)
        assert json.dumps(text)[1:-1] in html, caption.name
    tables = sorted((report / "tables").glob("*.html"))
    assert len(tables) >= 6
    for table in tables:
        assert f"results/report-config/tables/{table.name}" in html
    assert '"Configuration"' in html and "results/report-config.config.yaml" in html
    assert 'name tag\\">pp_conv</span>' in html  # the configuration itself, shown
    assert "System Message" not in html  # every caption is valid reStructuredText


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


# ---------------------------------------------------------------------------------------------
# the HTML report in a real browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium_screenshot(page: Path, png: Path, size=(1400, 1000), script: str = "") -> None:
    """Headless Chromium's screenshot of ``page`` after ``script`` ran (on load, in the page)."""
    if script:  # before the last </body> (the report's scripts hold that string too)
        html = page.read_text()
        i = html.rfind("</body>")
        hook = f"<script>addEventListener('load', () => setTimeout(() => {{{script}}}, 300));"
        page = png.with_suffix(".html")
        page.write_text(html[:i] + hook + "</script>" + html[i:])
    profile = png.parent / f"{png.stem}-profile"  # a fresh profile: nothing of another run
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic"]
    cmd += ["--no-first-run", "--disable-background-networking", "--disable-component-update"]
    cmd += ["--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}"]
    cmd += ["--virtual-time-budget=20000", f"--window-size={size[0]},{size[1]}"]
    cmd += [f"--screenshot={png}", page.as_uri()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0 and png.is_file(), r.stdout + r.stderr


@slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium on PATH (apt-get install chromium)")
def test_html_report_in_chromium(tiny_run, tmp_path):
    """The HTML report as a reader sees it: headless Chromium draws its landing page (the
    workflow, its description, the Configuration / Figures / Tables menu) and a figure beside
    its caption, as a click on the figure shows them (Snakemake's report is a JavaScript app:
    nothing but a browser shows what it draws)."""
    from PIL import Image

    r = _run_as_printed(_printed_html_command(tiny_run["out"]), tiny_run["work"].parent)
    assert r.returncode == 0, r.stdout + r.stderr
    page = tiny_run["work"] / "results" / "report-config.html"
    figure = "results/report-config/figures/fig1-left-savings.png"
    show = (
        f"const p = {json.dumps(figure)}; app.setView({{navbarMode: 'resultinfo', "
        "resultPath: p, content: 'img', contentPath: results[p].data_uri});"
    )
    shots = {}
    for name, script in (("landing", ""), ("figure", show)):
        # on a loaded machine the app can still be drawing when the shot is taken: up to 3 tries
        for attempt in range(3):
            png = tmp_path / f"{name}-{attempt}.png"
            _chromium_screenshot(page, png, script=script)
            with Image.open(png) as img:
                assert img.size == (1400, 1000), name
                shots[name] = img.convert("RGB")
            colours = shots[name].getcolors(maxcolors=1 << 21)
            white = sum(n for n, c in colours if min(c) >= 245)
            # drawn: not blank (the sidebar and text alone are 3 % of the page when Chromium
            # shows the sidebar light, 19 % dark), not a solid fill
            if len(colours) > 100 and 0.02 < 1 - white / (1400 * 1000) < 0.9:
                break
        assert len(colours) > 100, f"{name}: {len(colours)} colours, a blank page"
        assert 0.02 < 1 - white / (1400 * 1000) < 0.9, f"{name}: {white} white pixels"
    # the figure drawn: the figure's view holds the coloured pixels of its PNG, the landing none
    with Image.open(tiny_run["work"] / figure) as img:
        drawn = {c: n for n, c in img.convert("RGB").getcolors(maxcolors=1 << 21)}
    colourful = [c for c in drawn if max(c) - min(c) > 60]
    total = sum(drawn[c] for c in colourful)
    for name, least, most in (("figure", 0.5, 2.0), ("landing", 0.0, 0.1)):
        seen = {c: n for n, c in shots[name].getcolors(maxcolors=1 << 21)}
        share = sum(seen.get(c, 0) for c in colourful) / total
        assert least <= share <= most, f"{name}: {share:.0%} of the figure's coloured pixels"


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
