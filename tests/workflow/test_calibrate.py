"""The calibrate stage: a calibration per pool, learned out of sample on the same model's pools of
the other datasets (the pool itself when the model has no other), read by the settings that say
``calibration: true`` instead of a warmup per question."""

from __future__ import annotations

import json
import re

import yaml

from workflow.common import TEST_CONFIG, job_blocks, job_stats, slow, smk, write_config

CALIBRATED = {"methods": ["sc", "sc-mars2", "sc-mars2-launch"], "calibration": True}


def _config(tmp_path, **settings):
    """config/test.yaml with a model on two datasets, a model on one, and ``settings`` beside
    its own."""
    cfg = yaml.safe_load(TEST_CONFIG.read_text())
    cfg["datasets"] = {"aime_2025": "aime_2025", "hmmt_feb_2025": "hmmt_feb_2025"}
    cfg["models"]["solo"] = {
        "backend": "synthetic",
        "preset": "qwen3-8b",
        "datasets": ["aime_2025"],
    }
    cfg["simulation"]["settings"].update(settings)
    return write_config(tmp_path / "calibrated.yaml", cfg)


def _field(block: str, name: str) -> str:
    return re.search(rf"^\s*{name}: (.*)$", block, re.M).group(1)


def _by_wildcards(blocks: list[str]) -> dict[str, str]:
    return {_field(b, "wildcards"): b for b in blocks}


def test_calibrations_are_learned_on_the_model_s_other_datasets(tmp_path):
    """One calibrate job per pool: its inputs are the same model's pools of the other datasets
    (and their fits, whose arrays it reads), never its own (nor another model's); a model with
    one dataset calibrates on that pool."""
    out = smk(tmp_path, "-n", configfile=_config(tmp_path, calibrated=CALIBRATED)).stdout
    assert job_stats(out)["calibrate"] == 3
    jobs = _by_wildcards(job_blocks(out, "calibrate"))
    assert {k: _field(b, "input") for k, b in jobs.items()} == {
        "model=tiny, dataset=aime_2025": "results/pools/tiny/hmmt_feb_2025, "
        "results/fit/tiny/hmmt_feb_2025",
        "model=tiny, dataset=hmmt_feb_2025": "results/pools/tiny/aime_2025, "
        "results/fit/tiny/aime_2025",
        "model=solo, dataset=aime_2025": "results/pools/solo/aime_2025, "
        "results/fit/solo/aime_2025",  # in sample
    }
    job = jobs["model=tiny, dataset=aime_2025"]
    assert (
        "mars calibrate results/pools/tiny/hmmt_feb_2025 --out results/calibrate/tiny/"
        "aime_2025.json  --fit results/fit/tiny/hmmt_feb_2025 > "
        "results/logs/calibrate/tiny/aime_2025.log 2>&1"
    ) in job
    assert "results/benchmarks/calibrate/tiny/aime_2025.tsv" in job


def test_a_calibrated_setting_simulates_with_its_pool_s_calibration_and_no_warmup(tmp_path):
    """The calibrated setting's simulate jobs read the pool's calibration (an input) with
    --warmup 0; the other settings keep their warmup and read none; the fit fits warmup 0 too."""
    out = smk(tmp_path, "-n", configfile=_config(tmp_path, calibrated=CALIBRATED)).stdout
    sims = _by_wildcards(job_blocks(out, "simulate"))
    assert len(sims) == 3 * 3  # 3 pools x (default, pp-u4, calibrated)
    for key, block in sims.items():
        model, dataset = re.search(r"model=(\S+), dataset=(\S+),", key).groups()
        cal = f"results/calibrate/{model}/{dataset}.json"
        if key.endswith("setting=calibrated"):
            assert cal in _field(block, "input").split(", ")
            assert "--method sc,sc-mars2,sc-mars2-launch " in block
            assert "--budget 8 --iterations 4 --warmup 0 --seed 42" in block
            assert f"--fit results/fit/{model}/{dataset} --calibration {cal} --workers" in block
        else:
            assert "calibrat" not in block and "--warmup 4" in block
    fits = job_blocks(out, "fit")
    assert len(fits) == 3 and all("--warmup 0,4 " in b for b in fits)


def test_no_calibrated_setting_no_calibrate_job(tmp_path):
    """Without a calibrated setting the DAG is as before: no calibrate job, no warmup 0."""
    out = smk(tmp_path, "-n", configfile=_config(tmp_path)).stdout
    assert "calibrate" not in job_stats(out)
    assert "calibrat" not in "".join(job_blocks(out, "simulate") + job_blocks(out, "fit"))
    assert all("--warmup 4 " in b for b in job_blocks(out, "fit"))


def test_calibrations_follow_the_protocol_and_the_final_answers(tmp_path):
    """A calibrated setting under Parallel-Probe's protocol: the calibrations are fitted under it
    from the pools alone (a fit's arrays are the bootstrap's; its simulations read no fit either);
    fit.finals reaches mars calibrate as it reaches mars fit."""
    pp = {**CALIBRATED, "protocol": "parallel-probe"}
    cfg = yaml.safe_load(_config(tmp_path, calibrated=pp).read_text())
    cfg["fit"] = {"finals": "last-probe"}
    out = smk(tmp_path, "-n", configfile=write_config(tmp_path / "pp.yaml", cfg)).stdout
    cals = job_blocks(out, "calibrate")
    assert len(cals) == 3
    assert all("--protocol parallel-probe --finals last-probe " in b for b in cals)
    assert not any("--fit" in b or "results/fit" in b for b in cals)
    sim = _by_wildcards(job_blocks(out, "simulate"))[
        "model=tiny, dataset=aime_2025, setting=calibrated"
    ]
    assert "--protocol parallel-probe" in sim and "--fit" not in sim
    assert "--calibration results/calibrate/tiny/aime_2025.json" in sim


@slow
def test_calibrated_run_records_its_calibration_and_the_report_shows_it(tmp_path):
    """A real run: each calibrated simulation records the calibration it read, out of sample for
    the model with two datasets and in sample (its log says so) for the model with one; the report
    shows the calibrated setting as a block of its own; a second run has nothing to do."""
    work = tmp_path / "work"
    work.mkdir()
    config = _config(tmp_path, calibrated=CALIBRATED)
    r = smk(work, configfile=config)
    assert job_stats(r.stdout)["calibrate"] == 3
    res = work / "results"
    for model, dataset, fitted_on, in_sample in [
        ("tiny", "aime_2025", ["results/pools/tiny/hmmt_feb_2025"], False),
        ("tiny", "hmmt_feb_2025", ["results/pools/tiny/aime_2025"], False),
        ("solo", "aime_2025", ["results/pools/solo/aime_2025"], True),
    ]:
        cal = json.loads((res / "calibrate" / model / f"{dataset}.json").read_text())
        assert [f["source"] for f in cal["fitted_on"]] == fitted_on
        for method in CALIBRATED["methods"]:
            run = res / "simulate" / model / dataset / "calibrated" / method / "overall.json"
            ov = json.loads(run.read_text())
            assert ov["settings"]["warmup"] == 0
            assert ov["calibration"]["path"] == f"results/calibrate/{model}/{dataset}.json"
            assert ov["calibration"]["in_sample"] is in_sample
        log = (res / "logs" / "simulate" / model / dataset / "calibrated.log").read_text()
        assert ("in sample" in log) is in_sample
        assert (res / "benchmarks" / "calibrate" / model / f"{dataset}.tsv").is_file()
    # the report: the calibrated setting is a block of its own (drawn without a warmup), and its
    # provenance command names the calibration its runs read
    (table,) = (res / "report-calibrated" / "tables").glob("table*-full-tiny.md")
    text = table.read_text()
    assert "| aime_2025 · calibrated (warmup 0) | SC (baseline) · `sc` |" in text
    assert (
        "--warmup 0 --spacing 2048 --calibration results/calibrate/tiny/aime_2025.json "
        "--out results/simulate/tiny/aime_2025/calibrated"
    ) in text
    assert job_stats(smk(work, "-n", configfile=config).stdout) == {}
