"""One source of truth for the engine stages' options: mars/engines/options.py, and what derives
from it (the options of generate, probe and solve, the workflow's config schema, the rules'
arguments)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mars.cli import app
from mars.engines.options import (
    ENGINE,
    GENERATION,
    MODEL,
    OPTIONS,
    PROBE,
    SAMPLING,
    SERVER,
    check,
    flags,
    options_of,
    schema_defs,
)
from mars.errors import MarsError
from mars.workflow import ConfigError, check_schema

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
runner = CliRunner()


def test_the_checked_in_schema_is_the_generated_one():
    """The schema's option maps and simulation settings are what `python -m
    maint_tools.config_schema` writes from the declarations."""
    from maint_tools.config_schema import SCHEMA as PATH
    from maint_tools.config_schema import generated, rewrite

    text = PATH.read_text()
    assert rewrite(text) == text
    for name, block in generated().items():
        assert SCHEMA["$defs"][name] == block, name
    for group in ("sampling", "engine", "server"):
        assert SCHEMA["$defs"][group] == schema_defs()[group]


def _prop(place: str, name: str) -> dict:
    if place in (MODEL, GENERATION):  # a model overrides the generation section's keys
        return SCHEMA["properties"]["models"]["additionalProperties"]["properties"][name]
    return SCHEMA["$defs"]["probe_params"]["properties"][name]


PLACES = (MODEL, PROBE, GENERATION)


@pytest.mark.parametrize(
    "opt", [o for o in OPTIONS if o.config in PLACES and o.type is not bool], ids=str
)
def test_a_models_and_the_probe_sections_keys_agree_with_the_declarations(opt):
    prop = _prop(opt.config, opt.config_key)
    want = opt.schema()
    types = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
    assert want["type"] in types
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        assert prop.get(key) == want.get(key), (opt.name, key)
    if opt.config == PROBE:
        assert prop["default"] == opt.default  # the workflow's default is the command's


@pytest.mark.parametrize("command", ["generate", "probe", "solve"])
def test_each_command_takes_its_declared_options(command):
    text = runner.invoke(app, [command, "--help"], terminal_width=200).output
    for opt in options_of(command):
        assert re.search(rf"{re.escape(opt.flag)}\b", text), (command, opt.flag)
    undeclared = {o.flag for o in OPTIONS} - {o.flag for o in options_of(command)}
    if command == "solve":
        undeclared.discard("--traces")  # its own: the traces run side by side, not a pool's size
    for flag in undeclared:
        assert not re.search(rf"{re.escape(flag)}\b", text), (command, flag)


def test_no_engine_default_is_written_twice():
    """The spacing and warmup defaults come from their declarations, not from literals."""
    cli = "".join(p.read_text() for p in sorted((ROOT / "mars" / "cli").glob("*.py")))
    assert "2048" not in cli and "typer.Option(16" not in cli
    assert "top_p: float" not in cli and "--base-url" not in cli  # no hand-declared option


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--top-p", "2"], "--top-p 2.0: must be > 0 and ≤ 1"),
        (["--temperature", "-1"], "--temperature -1.0"),
        (["--timeout", "0"], "--timeout 0.0"),
        (["--spacing", "0"], "--spacing 0"),
        (["--top-k", "0"], "--top-k 0"),
    ],
)
def test_an_option_out_of_its_range_is_one_line(tmp_path, args, needle):
    res = runner.invoke(
        app,
        [
            "generate",
            "--problems",
            "aime_2025",
            "--traces",
            "2",
            "--out",
            str(tmp_path / "p"),
            *args,
        ],
    )
    assert res.exit_code == 2, res.output
    assert res.output.startswith("error: ") and needle in res.output
    assert not (tmp_path / "p").exists()


def test_check_refuses_nan():
    with pytest.raises(MarsError, match="--temperature"):
        check({"temperature": float("nan")})
    check({"temperature": 0.6, "top_p": 1.0, "base_url": "http://x:1"})


def test_generation_flags_follow_the_declarations():
    """The generation section's keys (a model may override them) become generate's flags; a
    boolean's flag only when it departs from its default."""
    values = {"traces": 64, "shards": 2, "seed": 0, "confs": True}
    assert flags(values, GENERATION) == ["--traces 64", "--n-shards 2", "--seed 0"]
    assert flags({"confs": False}, GENERATION) == ["--no-confs"]


def test_flags_render_the_declared_keys_of_one_place():
    assert flags({"temperature": 0.6, "top_p": 0.95, "tp_size": 4}, SAMPLING) == [
        "--temperature 0.6",
        "--top-p 0.95",
    ]
    assert flags({"tp_size": 4}, ENGINE) == ["--tp-size 4"]
    assert flags({"suffix": "x y", "spacing": 1024}, PROBE) == ["--spacing 1024", "--suffix 'x y'"]
    assert flags({"base_url": "http://h:8"}, SERVER) == ["--base-url http://h:8"]


@pytest.mark.parametrize(
    "where, value",
    [
        (("models", "m", "sampling"), {"min_p": 0.1}),
        (("models", "m", "engine"), {"tp": 4}),
        (("probe", "sampling"), {"top_p": 1.5}),
    ],
)
def test_an_undeclared_or_bad_option_in_a_config_is_refused(where, value):
    cfg = {
        "datasets": {"a": "aime_2025"},
        "models": {"m": {"backend": "sglang", "model": "x"}},
        "probe": {},
    }
    node = cfg
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    with pytest.raises(ConfigError, match="|".join(map(re.escape, value))):
        check_schema(cfg, SCHEMA)
