"""The workflow's dry runs: the DAG of the default and the paper configs, resources, the SLURM
profile, and the jobs of a model served by an inference server (backend: server)."""

from __future__ import annotations

import re

import pytest
import yaml

from workflow.common import (
    REPO,
    TEST_CONFIG,
    job_blocks,
    job_stats,
    slow,
    smk,
    tiny_config,
    write_config,
)

# ---------------------------------------------------------------------------------------------
# dry runs: the DAG of the default and the paper configs, resources, SLURM


@pytest.mark.slow
def test_default_config_dag(tmp_path):
    out = smk(tmp_path, "-n").stdout
    assert "config/config.yaml" in out
    stats = job_stats(out)
    # 3 synthetic models x 3 datasets, 2 shards each; 4 simulation settings; the trade-off
    # sweep of one pool
    expected = {
        "questions": 3,
        "generate": 18,
        "probe": 18,
        "consolidate": 9,
        "fit": 9,
        "calibrate": 9,  # one per pool, for the setting calibrated
        "simulate": 42,  # 4 settings x 9 pools, and 6 trade-off settings of one pool
        "analyze": 9,
        "all": 1,
        "report": 1,
        "run_config": 1,
    }
    assert stats == expected
    # docs/workflow.md states the job count of this run: it is this dry run's
    stated = re.search(
        r"(\d+) jobs, `tests/workflow/test_dag.py`", (REPO / "docs" / "workflow.md").read_text()
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
    # the calibrated setting: each pool's calibration, learned on the model's two other datasets
    assert any(
        "--method sc,sc-mars-cal,sc-mars2,sc-mars2-launch,sc-mars2-early " in b
        and "--warmup 0 " in b
        and "--calibration results/calibrate/qwen3-32b/aime_2025.json " in b
        for b in sim
    )
    assert any(
        "mars calibrate results/pools/qwen3-32b/hmmt_feb_2025 results/pools/qwen3-32b/brumo_2025 "
        "--out results/calibrate/qwen3-32b/aime_2025.json " in b
        for b in job_blocks(out, "calibrate")
    )
    assert "--finals" not in out  # the traces' own final answers: the commands name none


def test_final_answers_taken_from_the_last_probes_reach_every_fit_and_simulation(tmp_path):
    """fit.finals: last-probe (a model that does not box its answers) is passed to the fit and
    to every simulation (analyze reads it from the run)."""
    cfg = yaml.safe_load(TEST_CONFIG.read_text())
    cfg["fit"] = {**cfg.get("fit", {}), "finals": "last-probe"}
    out = smk(tmp_path, "-n", configfile=write_config(tmp_path / "c.yaml", cfg)).stdout
    blocks = job_blocks(out, "fit") + job_blocks(out, "simulate")
    assert blocks and all(" --finals last-probe " in b for b in blocks)


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


@pytest.mark.slow
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


@pytest.mark.slow
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
