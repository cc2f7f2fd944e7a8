"""``mars serve``'s options are declared once (:mod:`mars.serve.options`): the command line, the
dataclasses the proxy runs on and docs/cli.md all read the same defaults."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest

pytest.importorskip("starlette")

import typer.main
from typer.testing import CliRunner

from mars.cli import app
from mars.serve.app import ServeOptions
from mars.serve.audit import AUDIT_FIELDS, AuditOptions
from mars.serve.options import OPTIONS, SERVE
from mars.serve.requests import Defaults
from mars.serve.upstreams import Router, Upstreams

ROOT = Path(__file__).resolve().parents[2]


def serve_command():
    group = typer.main.get_command(app)
    return group.commands["serve"]  # type: ignore[attr-defined]


def test_the_command_line_takes_every_declared_option_with_its_default():
    params = {p.name: p for p in serve_command().params}
    for o in OPTIONS:
        assert params[o.name].default == o.default, o.name
        assert o.flag in params[o.name].opts, o.name


def fields_of(cls) -> dict:
    return {f.name: f.default for f in dataclasses.fields(cls)}


def test_the_dataclasses_the_proxy_runs_on_default_to_the_declarations():
    d, s, a = fields_of(Defaults), fields_of(ServeOptions), fields_of(AuditOptions)
    assert d["traces"] == SERVE["traces"].default == 64
    assert d["max_traces"] == SERVE["max_traces"].default == 1024
    assert d["mars_for"] == SERVE["mars_for"].default
    assert d["answer_format"] == SERVE["default_answer_format"].default
    assert s["max_active"] == SERVE["max_active"].default
    assert s["max_queue"] == SERVE["max_queue"].default
    assert s["engine_watch"] == SERVE["engine_watch"].default
    for name in AUDIT_FIELDS:
        assert a[name] == SERVE[f"audit_{name}"].default, name
    up = inspect.signature(Upstreams.__init__).parameters
    assert up["retries"].default == SERVE["retries"].default
    assert up["routing"].default == SERVE["routing"].default
    assert inspect.signature(Router.__init__).parameters["routing"].default == "trace"


def test_docs_cli_shows_each_default_and_range():
    text = (ROOT / "docs" / "cli.md").read_text()
    serve = text[text.index("## `mars serve`") :]
    serve = serve[: serve.index("\n## ", 1)]
    for o in OPTIONS:
        line = next(ln for ln in serve.splitlines() if ln.startswith(f"| `{o.flag}"))
        if o.default is not None:
            assert f"[default: {o.default}]" in line, line
        if o.range_text():
            assert f"[range: {o.range_text()}]" in line, line


@pytest.mark.parametrize(
    "args, said",
    [
        (["--max-active", "0"], "--max-active 0: must be ≥ 1"),
        (["--max-queue", "-1"], "--max-queue -1: must be ≥ 0"),
        (["--port", "70000"], "--port 70000: must be ≥ 1 and ≤ 65,535"),
        (["--routing", "nearest"], "--routing nearest: must be one of trace, question, load"),
        (["--mars-for", "all"], "--mars-for all: must be one of n, object"),
        (
            ["--log-level", "loud"],
            "--log-level loud: must be one of " + ", ".join(SERVE["log_level"].choices or ()),
        ),
        (["--retries", "-1"], "--retries -1: must be ≥ 0"),
        (["--traces", "0"], "--traces 0: must be ≥ 1"),
    ],
)
def test_a_bad_option_is_one_line_before_anything_starts(args, said):
    res = CliRunner().invoke(app, ["serve", "--upstream", "synthetic", *args])
    assert res.exit_code == 2 and res.output == f"error: {said}\n", res.output


def test_the_library_refuses_what_the_command_line_refuses():
    from mars.errors import MarsError

    with pytest.raises(MarsError, match="--max-active 0: must be ≥ 1"):
        ServeOptions(Defaults(), max_active=0).check()
    with pytest.raises(MarsError, match="--mars-for all: must be one of n, object"):
        Defaults(mars_for="all").check()
