"""The workflow through a live SLURM scheduler (tests/slurm_cluster.py), with profiles/slurm.

Most of a SLURM run is waiting for status checks, so the runs go at once: config/test.yaml through
SLURM and locally (the reference outputs), a run whose job fails inside SLURM, one interrupted
with Ctrl-C and run again, and one with the `sacct` status command that hangs. The SLURM runs use
the profile users edit; the command line only shortens the plugin's first status-check delay and
keeps the SLURM logs of successful jobs.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from slurm_cluster import LocalCluster, Unavailable, process_alive

REPO = Path(__file__).resolve().parents[2]
SNAKEFILE = REPO / "Snakefile"
PROFILE = REPO / "profiles" / "slurm"
PROFILE_KEYS = yaml.safe_load((PROFILE / "profile.yaml").read_text())
TEST_CONFIG = REPO / "config" / "test.yaml"
_TINY = yaml.safe_load(TEST_CONFIG.read_text())
POOL = f"{next(iter(_TINY['models']))}/{next(iter(_TINY['datasets']))}"  # tiny/aime_2025
PYTHON = Path(sys.executable).absolute()  # not resolved: a venv's python is a symlink
BIN = PYTHON.parent
STATUS_DELAY = 8  # s before the plugin's first status check (default 40)
SLURM_ARGS = [
    "--slurm-init-seconds-before-status-checks",
    str(STATUS_DELAY),
    "--slurm-keep-successful-logs",
]
# the synthetic model claims a GPU, so its jobs take the profile's GPU path (gpu partition,
# cpus_per_gpu, --gpus=MODEL:N) on the cluster's stand-in cards
GPU_RESOURCES = {"gpu": 1, "gpu_model": "h100", "mem_mb": 2000, "runtime": 30}
RUN_TIMEOUT = 420

live = [pytest.mark.slurm, pytest.mark.slow]


def _res_value(value: str):
    return int(value) if value.isdigit() else value


def resources_of(block: str) -> dict:
    """The ``resources:`` line of a job printed by Snakemake, as a dict."""
    line = re.search(r"^\s*resources: (.*)$", block, re.M).group(1)
    return {k: _res_value(v) for k, v in (item.split("=", 1) for item in line.split(", "))}


def job_blocks(out: str, rule: str) -> list[str]:
    blocks = re.split(r"\n(?=\s*\[[A-Z][a-z]{2} .*\]\n)", out)
    return [b for b in blocks if re.search(rf"^\s*rule {re.escape(rule)}:$", b, re.M)]


def job_stats(out: str) -> dict[str, int]:
    table = out.split("Job stats:", 1)[1].splitlines()[3:]
    stats = {}
    for line in table:
        m = re.fullmatch(r"(\S+)\s+(\d+)", line.strip())
        if not m:
            break
        stats[m.group(1)] = int(m.group(2))
    stats.pop("total", None)
    return stats


def snakemake_cmd(workdir: Path, *args) -> list[str]:
    return [
        str(PYTHON),
        "-m",
        "snakemake",
        "--snakefile",
        str(SNAKEFILE),
        "--directory",
        str(workdir),
        *map(str, args),
    ]


# ---------------------------------------------------------------------------------------------
# dry run: the paper's GPU jobs (no GPU here)


class _Resources(dict):
    """Resources as the plugin reads them (``.get`` and attribute access)."""

    __getattr__ = dict.__getitem__


@pytest.mark.slow  # a Snakemake process (a dry run, seconds)
def test_paper_generate_jobs_request_their_gpus(tmp_path):
    """config/paper.yaml with the profile: every generate job asks SLURM for its model's GPUs."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    from snakemake_executor_plugin_slurm.utils import set_gres_string
    from snakemake_executor_plugin_slurm_jobstep import get_cpu_setting

    paper = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    r = subprocess.run(
        snakemake_cmd(
            tmp_path,
            "-n",
            "--workflow-profile",
            PROFILE,
            "--configfile",
            REPO / "config" / "paper.yaml",
        ),
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout + r.stderr
    gpu_profile = PROFILE_KEYS["set-resources"]["generate"]
    seen = Counter()
    for block in job_blocks(out, "generate"):
        model = re.search(r"wildcards: model=([^,\s]+)", block).group(1)
        want = paper["models"][model]["resources"]
        res = resources_of(block)
        assert {k: res[k] for k in want} == want, (model, res)
        assert res["slurm_partition"] == gpu_profile["slurm_partition"]
        assert res["cpus_per_gpu"] == gpu_profile["cpus_per_gpu"]
        # what the plugin turns them into on the sbatch line
        job = SimpleNamespace(resources=_Resources(res), threads=1)
        assert set_gres_string(job) == f" --gpus={want['gpu_model']}:{want['gpu']}"
        assert get_cpu_setting(job, True) == f"--cpus-per-gpu={gpu_profile['cpus_per_gpu']}"
        seen[model] += 1
    shards = {m: spec["shards"] * len(paper["datasets"]) for m, spec in paper["models"].items()}
    assert seen == shards
    # the probe jobs of the probe stage ask for the same GPUs (their engine is the generator's)
    probes = Counter()
    for block in job_blocks(out, "probe"):
        model = re.search(r"wildcards: model=([^,\s]+)", block).group(1)
        want = paper["models"][model]["resources"]
        res = resources_of(block)
        assert {k: res[k] for k in want} == want, (model, res)
        assert res["slurm_partition"] == PROFILE_KEYS["set-resources"]["probe"]["slurm_partition"]
        job = SimpleNamespace(resources=_Resources(res), threads=1)
        assert set_gres_string(job) == f" --gpus={want['gpu_model']}:{want['gpu']}"
        probes[model] += 1
    assert probes == shards


# ---------------------------------------------------------------------------------------------
# the live cluster


def _env(cluster: LocalCluster | None = None, path: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SNAKEMAKE_"))}
    env["PATH"] = os.pathsep.join([*([str(path)] if path else []), str(BIN), env.get("PATH", "")])
    return cluster.env(env) if cluster else env


@pytest.fixture(scope="session")
def cluster():
    """A fresh cluster under /tmp (munged wants every parent directory open to all users)."""
    root = Path(tempfile.mkdtemp(prefix="mars-slurm-", dir="/tmp"))
    local = LocalCluster(root, tie_to_parent=True)
    try:
        local.start()
    except Unavailable as exc:
        shutil.rmtree(root, ignore_errors=True)
        if os.environ.get("MARS_REQUIRE_SLURM"):
            pytest.fail(f"MARS_REQUIRE_SLURM is set but: {exc}")
        pytest.skip(str(exc))
    yield local
    local.stop()
    shutil.rmtree(root, ignore_errors=True)


def scheduler_jobs(cluster: LocalCluster, run_id: str) -> dict[str, dict]:
    """``scontrol show job`` of one Snakemake run (job name = its SLURM run ID), by job id.

    Finished jobs stay in slurmctld for MinJobAge (300 s), longer than these runs take.
    """
    r = subprocess.run(
        ["scontrol", "show", "job", "--oneliner"],
        env=cluster.env(),
        capture_output=True,
        text=True,
        check=True,
    )
    jobs = {}
    for line in r.stdout.splitlines():
        fields = dict(re.findall(r"(?:^|\s)([\w:/]+)=(\S*)", line))
        if fields.get("JobName") == run_id:
            jobs[fields["JobId"]] = fields
    return jobs


def minutes(limit: str) -> int:
    days, _, hms = limit.rpartition("-")
    h, m, s = map(int, hms.split(":"))
    return (int(days or 0) * 24 + h) * 60 + m + (s > 0)


def megabytes(mem: str) -> float:
    return float(mem[:-1]) * {"M": 1, "G": 1024, "T": 1024**2}[mem[-1]]


class Run(SimpleNamespace):
    """One finished Snakemake run: rc, output, workdir, and its SLURM side."""

    def submissions(self) -> dict[str, str]:
        """SLURM job id -> the plugin's log path (its directory names the rule or group)."""
        found = re.findall(r"submitted with SLURM jobid (\d+) \(log: (\S+)\)", self.out)
        return dict(found)


def _launch(workdir: Path, args: list, env: dict, name: str = "") -> tuple[subprocess.Popen, Path]:
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir.parent / f"{name or workdir.name}.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            snakemake_cmd(workdir, *args),
            cwd=workdir,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, log


def _interrupt(proc: subprocess.Popen) -> None:
    """Ctrl-C (Snakemake cancels its SLURM jobs), then SIGKILL if that does not end it."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _interrupt_then_rerun(
    workdir: Path,
    args: list,
    env: dict,
    slow_env: dict,
    cluster: LocalCluster,
    launched: list,
    result: dict,
) -> None:
    """Ctrl-C while the run's SLURM job runs, then the same command again (a thread's body)."""
    try:
        proc, log = _launch(workdir, args, slow_env, "interrupted")
        launched.append(proc)
        deadline = time.monotonic() + RUN_TIMEOUT
        job_id = None
        while job_id is None or _job_state(cluster, job_id) != "RUNNING":
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no running SLURM job to interrupt:\n{log.read_text()[-3000:]}")
            found = re.search(r"submitted with SLURM jobid (\d+)", log.read_text())
            job_id = found and found.group(1)
            time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
        incomplete = sorted(p.name for p in (workdir / ".snakemake" / "incomplete").iterdir())
        result["interrupted"] = Run(
            rc=proc.returncode,
            out=log.read_text(),
            job_id=job_id,
            state=_job_state(cluster, job_id),
            incomplete=incomplete,
        )
        proc, log = _launch(workdir, args, env, "rerun")
        launched.append(proc)
        proc.wait(timeout=max(1, deadline - time.monotonic()))
        result["rerun"] = Run(rc=proc.returncode, out=log.read_text(), workdir=workdir)
    except Exception as exc:  # reported by the test
        result["error"] = exc


def _job_state(cluster: LocalCluster, job_id: str) -> str:
    r = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"],
        env=cluster.env(),
        capture_output=True,
        text=True,
    )
    return r.stdout.strip()


def _wait_all(procs: dict, started: float) -> dict[str, float]:
    """Seconds each run took; fail past RUN_TIMEOUT (a hang: the caller interrupts them)."""
    ended = {}
    while len(ended) < len(procs):
        for name, (proc, _) in procs.items():
            if name not in ended and proc.poll() is not None:
                ended[name] = time.monotonic() - started
        if time.monotonic() - started > RUN_TIMEOUT:
            tails = "\n".join(
                f"--- {n}\n{log.read_text()[-3000:]}"
                for n, (_, log) in procs.items()
                if n not in ended
            )
            pytest.fail(f"snakemake ran past {RUN_TIMEOUT} s:\n{tails}")
        time.sleep(0.5)
    return ended


@pytest.fixture(scope="module")
def runs(cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("slurm-runs")
    cfg = yaml.safe_load(TEST_CONFIG.read_text())
    for spec in cfg["models"].values():
        spec["resources"] = dict(GPU_RESOURCES)
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    # one generate shard, no GPU claim: for the failing, sacct and interrupted runs
    one_shard = yaml.safe_load(TEST_CONFIG.read_text())
    one_shard["generation"]["shards"] = 1
    (root / "one-shard.yaml").write_text(yaml.safe_dump(one_shard, sort_keys=False))
    broken = root / "broken-bin"  # the failing run: every `mars` call of its jobs exits 3
    broken.mkdir()
    (broken / "mars").write_text('#!/bin/sh\necho "deliberate failure of mars $1" >&2\nexit 3\n')
    (broken / "mars").chmod(0o755)
    one_job = [
        "--workflow-profile",
        PROFILE,
        "--configfile",
        root / "one-shard.yaml",
        *SLURM_ARGS,
        "all_traces",
    ]

    slow = root / "slow-bin"  # the interrupted run: its job runs long enough to be interrupted
    slow.mkdir()
    (slow / "mars").write_text(f'#!/bin/sh\nsleep 60\nexec {PYTHON} -m mars.cli "$@"\n')
    (slow / "mars").chmod(0o755)

    started = time.monotonic()
    launched = []
    interrupted = {}
    try:
        thread = threading.Thread(
            target=_interrupt_then_rerun,
            args=(
                root / "interrupted",
                one_job,
                _env(cluster),
                _env(cluster, slow),
                cluster,
                launched,
                interrupted,
            ),
        )
        thread.start()
        # the trap: sacct as the status command on a cluster without accounting (never ends)
        stuck = _launch(
            root / "sacct", [*one_job, "--slurm-status-command", "sacct"], _env(cluster)
        )
        launched.append(stuck[0])
        procs = {
            "slurm": _launch(
                root / "slurm",
                ["--workflow-profile", PROFILE, "--configfile", config, *SLURM_ARGS],
                _env(cluster),
            ),
            "failing": _launch(root / "failing", one_job, _env(cluster, broken)),
            "local": _launch(
                root / "local",
                ["--workflow-profile", "none", "--cores", "2", "--configfile", config],
                _env(),
            ),
        }
        launched += [proc for proc, _ in procs.values()]
        seconds = _wait_all(procs, started)
        thread.join(timeout=max(1, started + RUN_TIMEOUT - time.monotonic()))
        done = {
            name: Run(
                rc=proc.returncode, out=log.read_text(), workdir=root / name, seconds=seconds[name]
            )
            for name, (proc, log) in procs.items()
        }
        proc, log = stuck
        done["sacct"] = Run(
            rc=proc.poll(),
            out=log.read_text(),
            workdir=root / "sacct",
            seconds=time.monotonic() - started,
            now=datetime.now(),
        )
        for name in ("slurm", "failing", "sacct"):
            run = done[name]
            run.run_id = re.search(r"SLURM run ID: (\S+)", run.out).group(1)
            run.jobs = scheduler_jobs(cluster, run.run_id)
        done["interrupted"] = interrupted
    finally:  # also on a failure or Ctrl-C here: no Snakemake is left behind
        for proc in launched:
            _interrupt(proc)
    took = ", ".join(f"{n} {r.seconds:.0f} s" for n, r in done.items() if isinstance(r, Run))
    print(f"SLURM test runs: {took}")
    return done


@pytest.mark.parametrize("name", ["slurm", "local"])
@pytest.mark.slurm
@pytest.mark.slow
def test_runs_succeed(runs, name):
    assert runs[name].rc == 0, runs[name].out[-5000:]


@pytest.mark.slurm
@pytest.mark.slow
def test_every_cluster_job_ran_as_one_slurm_job(runs):
    """Local rules ran here; every other job went through sbatch; a group is one SLURM job."""
    run = runs["slurm"]
    assert run.rc == 0, run.out[-5000:]
    stats = job_stats(run.out)
    local = set(re.findall(r"^\s*localrule (\w+):$", run.out, re.M))
    assert local == {"all", "questions", "run_config"}
    assert stats == {
        "questions": 1,
        "run_config": 1,
        "generate": 2,
        "probe": 2,
        "consolidate": 1,
        "fit": 1,
        "simulate": 2,
        "analyze": 1,
        "report": 1,
        "all": 1,
    }
    # consolidate and fit of the one pool are one group job (profile: groups, group-components)
    assert run.out.count("Group job pool") == 1
    expected = sum(n for rule, n in stats.items() if rule not in local) - 1
    submitted = run.submissions()
    kinds = Counter(re.search(r"slurm_logs/([^/]+)/", path).group(1) for path in submitted.values())
    assert kinds == {
        "rule_generate": stats["generate"],
        "rule_probe": stats["probe"],
        "rule_simulate": stats["simulate"],
        "rule_analyze": 1,
        "rule_report": 1,
        "group_pool_consolidate_fit": 1,
    }
    assert len(submitted) == expected == 9
    # the scheduler knows exactly these jobs under this run's name, all finished well
    assert set(run.jobs) == set(submitted) and len(run.jobs) == expected
    assert {j["JobState"] for j in run.jobs.values()} == {"COMPLETED"}
    assert {j["ExitCode"] for j in run.jobs.values()} == {"0:0"}
    # each ran its rules inside the allocation: the Snakemake inside the job logged them to the
    # file SLURM wrote for it (--output)
    members = {"group_pool_consolidate_fit": ["consolidate", "fit"]}
    for job_id, path in submitted.items():
        kind = re.search(r"slurm_logs/([^/]+)/", path).group(1)
        text = Path(path).read_text()
        for rule in members.get(kind, [kind.removeprefix("rule_")]):
            assert re.search(rf"^\s*rule {rule}:$", text, re.M), (job_id, rule, text[-2000:])
        assert "Finished jobid" in text, (job_id, text[-2000:])


@pytest.mark.slurm
@pytest.mark.slow
def test_resources_reach_the_scheduler(runs):
    """mem_mb, runtime, threads, partitions, account and GPUs, read back from slurmctld."""
    run = runs["slurm"]
    defaults = PROFILE_KEYS["default-resources"]
    by_rule = {}
    for job in run.jobs.values():  # the plugin's comment: rule_<rule or group>[_wildcards_...]
        rule = job["Comment"].removeprefix("rule_").split("_wildcards_")[0]
        by_rule.setdefault(rule, []).append(job)
    assert sorted(by_rule) == [
        "analyze",
        "generate",
        "pool_consolidate_fit",
        "probe",
        "report",
        "simulate",
    ]

    def check(rule, partition, cpus, mem_mb, runtime, **extra):
        for job in by_rule[rule]:
            got = (
                job["Partition"],
                int(job["NumCPUs"]),
                megabytes(job["MinMemoryNode"]),
                minutes(job["TimeLimit"]),
                job["Account"],
            )
            assert got == (partition, cpus, mem_mb, runtime, defaults["slurm_account"]), rule
            for key, value in extra.items():
                assert job.get(key) == value, (rule, key, job.get(key))

    gpu = PROFILE_KEYS["set-resources"]["generate"]
    check(
        "generate",
        gpu["slurm_partition"],
        GPU_RESOURCES["gpu"] * gpu["cpus_per_gpu"],
        GPU_RESOURCES["mem_mb"],
        GPU_RESOURCES["runtime"],
        TresPerJob=f"gres:gpu:{GPU_RESOURCES['gpu_model']}:{GPU_RESOURCES['gpu']}",
        CpusPerTres=f"gres:gpu:{gpu['cpus_per_gpu']}",
    )
    probe = PROFILE_KEYS["set-resources"]["probe"]
    check(
        "probe",
        probe["slurm_partition"],
        GPU_RESOURCES["gpu"] * probe["cpus_per_gpu"],
        GPU_RESOURCES["mem_mb"],
        GPU_RESOURCES["runtime"],
        TresPerJob=f"gres:gpu:{GPU_RESOURCES['gpu_model']}:{GPU_RESOURCES['gpu']}",
    )
    sim = PROFILE_KEYS["set-resources"]["simulate"]
    threads = PROFILE_KEYS["set-threads"]["simulate"]
    check(
        "simulate",
        defaults["slurm_partition"],
        threads,
        sim["mem_mb"],
        sim["runtime"],
        **{"CPUs/Task": str(threads)},
    )
    check("analyze", defaults["slurm_partition"], 1, defaults["mem_mb"], defaults["runtime"])
    check("report", defaults["slurm_partition"], 1, defaults["mem_mb"], defaults["runtime"])
    # a group job: the largest memory of its members, their runtimes one after the other
    check(
        "pool_consolidate_fit",
        defaults["slurm_partition"],
        1,
        defaults["mem_mb"],
        2 * defaults["runtime"],
    )


@pytest.mark.slurm
@pytest.mark.slow
def test_slurm_outputs_equal_the_local_run(runs):
    slurm, local = (runs[n].workdir / "results" for n in ("slurm", "local"))

    def files(root: Path) -> set[str]:
        return {
            str(p.relative_to(root))
            for p in root.rglob("*")
            if p.is_file() and p.relative_to(root).parts[0] not in ("logs", "benchmarks")
        }

    assert files(slurm) == files(local)
    csvs = sorted(f for f in files(local) if f.startswith("simulate/") and f.endswith(".csv"))
    assert len(csvs) >= 40  # every method of both settings: per_question + per_iteration
    for f in csvs:
        assert (slurm / f).read_bytes() == (local / f).read_bytes(), f
    # the config's own report folder (named after the config file, config.yaml)
    report = {f for f in files(slurm) if f.startswith("report-config/")}
    assert "report-config/report.md" in report and any(f.endswith(".png") for f in report)


@pytest.mark.slurm
@pytest.mark.slow
def test_failing_job_fails_the_run(runs):
    """A job that fails inside SLURM: retried once (the profile), then Snakemake exits non-zero."""
    run = runs["failing"]
    assert run.rc != 0
    assert "SLURM status is: 'FAILED'" in run.out, run.out[-5000:]
    submitted = run.submissions()
    assert len(submitted) == 1 + PROFILE_KEYS["retries"]
    assert all("/rule_generate/" in path for path in submitted.values())
    assert {j["JobState"] for j in run.jobs.values()} == {"FAILED"}
    assert set(run.jobs) == set(submitted)
    # the failed job's logs are kept: the plugin's and the rule's own
    assert all(Path(path).is_file() for path in submitted.values())
    rule_log = run.workdir / "results" / "logs" / "generate" / POOL / "shard0.log"
    assert "deliberate failure of mars generate" in rule_log.read_text()
    assert not (run.workdir / "results" / "traces" / POOL / "shard0" / "pool.json").exists()


@pytest.mark.slurm
@pytest.mark.slow
def test_status_checks_work_without_accounting(runs, cluster, monkeypatch):
    """sacct exists but fails here (no database): the profile's squeue status command is used."""
    from snakemake_executor_plugin_slurm.job_status_query import get_min_job_age

    sacct = subprocess.run(["sacct", "-X"], env=cluster.env(), capture_output=True, text=True)
    assert sacct.returncode != 0 and "accounting storage is disabled" in sacct.stderr.lower()
    assert PROFILE_KEYS["slurm-status-command"] == "squeue"
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    first_check = PROFILE_KEYS.get("slurm-init-seconds-before-status-checks", 40)
    # below 3 x the first-check delay the plugin would quietly switch back to sacct and hang
    assert get_min_job_age() >= 3 * max(first_check, STATUS_DELAY)
    for name in ("slurm", "failing"):
        assert "Falling back to 'sacct'" not in runs[name].out


@pytest.mark.slurm
@pytest.mark.slow
def test_sacct_status_command_waits_forever_without_accounting(runs):
    """The trap the profile's squeue avoids: its job finished long ago, Snakemake never noticed.

    (snakemake-executor-plugin-slurm 2.8.0. Should a later version notice, update the docs.)
    """
    run = runs["sacct"]
    assert run.rc is None, "the sacct run ended by itself:\n" + run.out[-3000:]
    (job,) = run.jobs.values()
    assert job["JobState"] == "COMPLETED"
    waited = (run.now - datetime.fromisoformat(job["EndTime"])).total_seconds()
    assert waited > 30
    assert "Finished jobid" not in run.out.split("submitted with SLURM jobid", 1)[1]


@pytest.mark.slurm
@pytest.mark.slow
def test_interrupted_run_cancels_its_jobs_and_the_rerun_redoes_them(runs):
    """Ctrl-C: the running SLURM job is cancelled, its output marked incomplete; the next run
    (the profile's --rerun-incomplete) submits exactly that job again and finishes."""
    result = runs["interrupted"]
    assert "error" not in result, result.get("error")
    first, rerun = result["interrupted"], result["rerun"]
    assert first.rc != 0 and first.state == "CANCELLED", first.out[-3000:]
    assert len(first.incomplete) == 1
    assert rerun.rc == 0, rerun.out[-5000:]
    assert job_stats(rerun.out) == {"generate": 1, "all_traces": 1}
    assert len(Run(out=rerun.out).submissions()) == 1
    assert (rerun.workdir / "results" / "traces" / POOL / "shard0" / "pool.json").is_file()


# ---------------------------------------------------------------------------------------------
# the cluster script itself


def _cli(*args, root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(PYTHON), str(REPO / "tests" / "slurm_cluster.py"), *args, "--dir", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _wait_gone(pids, timeout: float = 30) -> bool:
    pids, deadline = list(pids), time.monotonic() + timeout
    while any(map(process_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not any(map(process_alive, pids))


@pytest.mark.slurm
@pytest.mark.slow
def test_cluster_script_start_stop_and_parent_death(cluster):
    """start twice reuses the daemons, stop ends exactly them, a killed owner takes them along."""
    others = cluster.pids()
    root = Path(tempfile.mkdtemp(prefix="mars-slurm-", dir="/tmp"))
    owner = None
    try:
        first = _cli("start", root=root)
        assert first.returncode == 0, first.stderr
        assert f"export SLURM_CONF={root}/etc/slurm.conf" in first.stdout
        pids = LocalCluster(root).pids()
        assert sorted(pids) == ["munged", "slurmctld", "slurmd"]
        assert _cli("start", root=root).returncode == 0
        assert LocalCluster(root).pids() == pids  # idempotent: nothing new started
        assert _cli("status", root=root).returncode == 0
        assert _cli("stop", root=root).returncode == 0
        assert not any(map(process_alive, pids.values()))
        assert _cli("status", root=root).returncode == 1
        assert cluster.pids() == others and cluster.running()

        # started tied to a process that is then killed outright: its daemons end with it
        code = (
            "import sys, time; sys.path.insert(0, sys.argv[1]);"
            " from slurm_cluster import LocalCluster;"
            " LocalCluster(sys.argv[2], tie_to_parent=True).start(); print('up', flush=True);"
            " time.sleep(300)"
        )
        owner = subprocess.Popen(
            [str(PYTHON), "-c", code, str(REPO / "tests"), str(root)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert owner.stdout.readline().strip() == "up"
        tied = LocalCluster(root).pids()
        assert sorted(tied) == ["munged", "slurmctld", "slurmd"] and tied != pids
        owner.kill()
        owner.wait()
        assert _wait_gone(tied.values()), LocalCluster(root).pids()
        assert cluster.pids() == others
    finally:
        if owner is not None and owner.poll() is None:
            owner.kill()
            owner.wait()
        LocalCluster(root).stop()
        shutil.rmtree(root, ignore_errors=True)
