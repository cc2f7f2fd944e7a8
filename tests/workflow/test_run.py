"""A real run of the whole DAG on the tiny config: its outputs, partial reruns, forced reruns,
the HTML report (and in a real browser)."""

from __future__ import annotations

import json
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
from workflow.common import (
    REPO,
    _env,
    _printed_html_command,
    _run_as_printed,
    job_blocks,
    job_stats,
    slow,
    smk,
    smk_command,
    tiny_config,
    write_config,
)

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
