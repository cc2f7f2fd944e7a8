"""The workflow's config: refused at parse time or before any job in one line, its schema's
defaults, overlays, each config's report folder and the command that renders it."""

from __future__ import annotations

import math
import subprocess

import pytest
import yaml

from workflow.common import (
    REPO,
    SCHEMA,
    TEST_CONFIG,
    job_blocks,
    job_stats,
    slow,
    smk,
    tiny_config,
    write_config,
)


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
        # a calibrated setting (calibration: true) reads its pool's calibration, no warmup
        (
            {
                "simulation": {
                    "settings": {"c": {"calibration": True, "methods": ["sc"], "warmup": 4}}
                }
            },
            "simulation.settings.c.warmup: a calibrated setting (calibration: true) reads its "
            "pool's calibration instead of a warmup: leave warmup out (0), not 4",
        ),
        (
            {"simulation": {"settings": {"c": {"calibration": True}}}},
            "simulation.settings.c.methods (simulation.methods 'all'): dco is a DeepConf method, "
            "whose filter reads its own warmup traces",
        ),
        (
            {"simulation": {"settings": {"c": {"calibration": True, "methods": ["dco-mars2"]}}}},
            "simulation.settings.c.methods: dco-mars2 is a DeepConf method",
        ),
        (
            {
                "simulation": {
                    "settings": {
                        "a": {"calibration": True, "methods": ["sc"]},
                        "b": {"calibration": True, "methods": ["sc"], "protocol": "parallel-probe"},
                    }
                }
            },
            "simulation.settings.b.protocol: parallel-probe, but the calibrated setting a runs "
            "under bootstrap",
        ),
        (
            {"simulation": {"settings": {"c": {"calibration": "yes"}}}},
            "simulation.settings.c.calibration: 'yes' is not of type 'boolean'",
        ),
        (
            {"simulation": {"calibration": True}},
            "simulation.calibration: unknown key (a key of each entry of simulation.settings: "
            "write simulation.settings.<name>.calibration;",
        ),
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
    # fit and simulate read the grid the pool records: the workflow passes them none
    for rule in ("fit", "simulate"):
        assert (
            "--spacing" not in job_blocks(out, rule)[0] and "--window" in job_blocks(out, rule)[0]
        )


def _one_error_line(r: subprocess.CompletedProcess) -> str:
    """The single line a refused config prints (the run used no profile: nothing else)."""
    assert r.returncode == 2, r.stdout[-3000:]
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: workflow config ("), r.stdout[-3000:]
    return lines[0]


@pytest.mark.parametrize(
    "case",
    ["pools-without-data", "typo", "questions", "config-braces", "server-url", "calibrated"],
)
@slow
def test_bad_config_is_one_line_before_any_job(tmp_path, case):
    """config/pools.yaml in a fresh directory (its data not there yet), a typo, a bad question
    list, --config with a nested value, a server's URL without its scheme, a calibrated setting
    with a warmup: one line naming the key, exit code 2, nothing written."""
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
    elif case == "calibrated":
        cfg = yaml.safe_load(TEST_CONFIG.read_text())
        cfg["simulation"]["settings"]["pp-u4"]["calibration"] = True
        cfg["simulation"]["settings"]["pp-u4"]["warmup"] = 4
        config = write_config(tmp_path / "calibrated.yaml", cfg)
        expected = "simulation.settings.pp-u4.warmup: a calibrated setting (calibration: true)"
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
