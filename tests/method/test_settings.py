"""One source of truth for the simulation settings: mars/method/settings.py, and what derives from
it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner
from util import write_layout_pool

from mars.cli import app
from mars.errors import MarsError, SimulationError
from mars.method.registry import METHODS
from mars.method.settings import LIVE_KEYS, SAMPLING_KEYS, SETTINGS, SPECS, Settings, from_dict
from mars.report.names import method_label, simulate_command
from mars.store.pool import open_pool

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
runner = CliRunner()


def _schema_type(spec) -> str:
    return {int: "integer", float: "number", str: "string"}[spec.type]


@pytest.mark.parametrize("spec", [s for s in SETTINGS if s.section == "simulation"], ids=str)
def test_config_schema_agrees_with_the_declarations(spec):
    """Every simulation setting is in the config schema with the same type, range and default."""
    prop = SCHEMA["$defs"]["simulation_params"]["properties"][spec.name]
    assert prop["type"] == _schema_type(spec)
    if spec.choices is not None:
        assert tuple(prop["enum"]) == spec.choices
    if spec.low is not None:
        key = "exclusiveMinimum" if spec.low_open else "minimum"
        assert prop[key] == spec.low
    if spec.high is not None:
        key = "exclusiveMaximum" if spec.high_open else "maximum"
        assert prop[key] == spec.high
    default = SCHEMA["$defs"]["simulation_defaults"]["properties"].get(spec.name, {}).get("default")
    assert default in (None, spec.default)


def test_config_schema_lists_no_undeclared_setting():
    props = set(SCHEMA["$defs"]["simulation_params"]["properties"]) - {"methods", "questions"}
    assert props == {s.name for s in SETTINGS if s.section == "simulation"}


def test_fit_and_probe_sections_hold_window_and_spacing():
    fit = SCHEMA["$defs"]["fit_params"]["properties"]["window"]
    assert fit["default"] == SPECS["window"].default and fit["minimum"] == SPECS["window"].low
    assert SCHEMA["properties"]["fit"]["allOf"] == [{"$ref": "#/$defs/fit_params"}]
    probe = SCHEMA["$defs"]["probe_params"]["properties"]["spacing"]
    assert probe["minimum"] == SPECS["spacing"].low
    assert SPECS["window"].section == "fit" and SPECS["spacing"].section == "probe"


def test_config_readme_documents_every_setting():
    text = (ROOT / "config" / "README.md").read_text()
    for spec in SETTINGS:
        assert f"`{spec.name}`" in text, spec.name


def test_workflow_key_list_derives_from_the_declarations():
    common = (ROOT / "workflow" / "rules" / "common.smk").read_text()
    assert "from mars.method.settings import SETTINGS" in common
    assert '"budget"' not in common  # no hand-written copy of the key list


def test_simulate_and_solve_options_come_from_the_declarations():
    sim = runner.invoke(app, ["simulate", "--help"], terminal_width=200).output
    for spec in SETTINGS:
        assert spec.flag in sim, spec.flag
    live = runner.invoke(app, ["solve", "--help"], terminal_width=200).output
    for name in LIVE_KEYS:
        assert SPECS[name].flag in live, name


def test_every_method_label_resolves_its_settings():
    for name in METHODS:
        md, tex = method_label(name, {"gamma": 0.7, "delta": 0.1, "pp_conv": 4})
        assert "{" not in md and md
        assert tex.count("$") % 2 == 0
    assert method_label("sc-mars", {"gamma": 0.7})[0] == "MARS (γ=0.7)"
    assert method_label("sc-pp", {})[0] == "Parallel-Probe (u=3)"


def test_provenance_command_uses_flags_and_defaults():
    cmd = simulate_command(
        "P", ["sc"], {"budget": 64, "iterations": 8, "gamma": 1.0, "ucb_z": 0.0}, "O"
    )
    assert "--budget 64" in cmd and "--iterations 8" in cmd
    assert "--gamma" not in cmd and "--ucb-z 0" in cmd
    # a calibration changes the results as a setting does: the command names it
    cmd = simulate_command("P", ["sc-mars2"], {"budget": 8, "warmup": 0}, "O", "cal.json")
    assert cmd.endswith("--warmup 0 --calibration cal.json --out O")


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"gamma": float("nan")}, "--gamma nan: must be a finite number"),
        ({"iterations": 10**9}, "≤ 1,000,000"),
        ({"budget": 0}, "--budget 0"),
        ({"delta": 1.0}, "--delta 1.0: must be > 0 and < 1"),
        ({"warmup": 2.5}, "--warmup 2.5: must be a whole number"),
        ({"budget": 60000, "iterations": 100000}, "draws"),
        # integers too large for a float, or for a string: still one line, not a traceback
        ({"gamma": 10**400}, "--gamma (a 400-digit number): must be a finite number"),
        ({"budget": 10**5000}, "--budget (a 5000-digit number): must be"),
    ],
)
def test_validation_names_the_option_and_its_range(changes, message):
    with pytest.raises(SimulationError) as exc:
        Settings(**changes).validate()
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert isinstance(exc.value, MarsError)


def test_cli_rejects_nan_gamma_in_one_line(tmp_path):
    pool = write_layout_pool(tmp_path / "p", n_questions=1)
    res = runner.invoke(
        app,
        ["simulate", str(pool), "-m", "sc-mars", "--gamma", "nan", "--out", str(tmp_path / "o")],
    )
    assert res.exit_code == 2 and "--gamma nan" in res.output
    assert not (tmp_path / "o").exists()


def test_sampling_keys_and_from_dict():
    assert set(SAMPLING_KEYS) == {
        "budget",
        "iterations",
        "warmup",
        "seed",
        "window",
        "spacing",
        "protocol",
        "finals",
    }
    s = from_dict({"budget": 8, "gamma": 0.5, "unknown": 1}, strict=False)
    assert s.budget == 8 and s.gamma == 0.5
    with pytest.raises(MarsError, match="unknown settings"):
        from_dict({"unknown": 1})
    assert Settings().sampling_key() == Settings(gamma=0.3).sampling_key()
    assert Settings().sampling_key() != Settings(warmup=8).sampling_key()


def _spaced_pool(tmp_path: Path, spacing: int) -> Path:
    pool = write_layout_pool(tmp_path / f"p{spacing}", seed=3, n_questions=2, spacing=spacing)
    manifest = json.loads((pool / "pool.json").read_text())
    manifest["spacing"] = spacing
    (pool / "pool.json").write_text(json.dumps(manifest))
    return pool


@pytest.mark.parametrize("spacing", [1024, 1000])
def test_simulation_uses_the_pools_probe_spacing(tmp_path, spacing):
    """A pool probed every 1,024 tokens is simulated on its own grid, not every other checkpoint."""
    pool = _spaced_pool(tmp_path, spacing)
    out = tmp_path / "o"
    res = runner.invoke(
        app,
        [
            "simulate",
            str(pool),
            "-m",
            "sc,oracle-first",
            "--budget",
            "16",
            "--iterations",
            "3",
            "--out",
            str(out),
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    overall = json.loads((out / "oracle-first" / "overall.json").read_text())
    assert overall["settings"]["spacing"] == spacing
    import pandas as pd

    pos = pd.read_csv(out / "oracle-first" / "per_iteration.csv").stop_position
    assert (pos % spacing == 0).all()
    q = open_pool(pool).read_question(0)
    grid = np.unique(q.probe_positions[q.probe_positions % spacing == 0])
    assert math.gcd(*map(int, grid)) == spacing or len(grid) == 1


def test_a_published_pool_is_simulated_on_the_grid_its_probes_lie_on(tmp_path):
    """A pool probed every 256 tokens, exported to the published schema (which records no
    spacing), is simulated on its 256-token grid, as the pool itself is: it was simulated on the
    2,048 grid unless --spacing said otherwise."""
    pool = _spaced_pool(tmp_path, 256)
    published = tmp_path / "p.parquet"
    assert runner.invoke(app, ["export", str(pool), str(published)]).exit_code == 0
    args = ["-m", "sc,sc-mars,oracle-first", "--budget", "16", "--iterations", "3", "-q"]
    for src, out in ((pool, "a"), (published, "b")):
        res = runner.invoke(app, ["simulate", str(src), *args, "--out", str(tmp_path / out)])
        assert res.exit_code == 0, res.output
    import pandas as pd

    for m in ("sc-mars", "oracle-first"):
        a, b = (pd.read_csv(tmp_path / o / m / "per_iteration.csv") for o in "ab")
        assert a.drop(columns="probe_tokens").equals(b.drop(columns="probe_tokens"))
        assert b.probe_tokens.isna().all()  # the published schema keeps no probe cost
        overall = json.loads((tmp_path / "b" / m / "overall.json").read_text())
        assert overall["settings"]["spacing"] == 256
    res = runner.invoke(
        app, ["simulate", str(published), *args, "--spacing", "2048", "--out", str(tmp_path / "c")]
    )
    assert res.exit_code == 2 and "disagrees with the pool's probe spacing 256" in res.output
    # imported back into a pool, it records that grid (it recorded 2,048)
    back = tmp_path / "back"
    assert runner.invoke(app, ["import", "mars-parquet", str(published), str(back)]).exit_code == 0
    assert json.loads((back / "pool.json").read_text())["spacing"] == 256


def test_an_explicit_spacing_must_agree_with_the_pool(tmp_path):
    pool = _spaced_pool(tmp_path, 1024)
    res = runner.invoke(
        app, ["simulate", str(pool), "-m", "sc", "--spacing", "2048", "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2
    assert "--spacing 2048 disagrees with the pool's probe spacing 1024" in res.output
    assert not (tmp_path / "o").exists()
