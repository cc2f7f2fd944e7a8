"""The engine registry (mars/engines/registry.py): every engine by name, its own options declared
in mars/engines/options.py, one refusal for a name it does not know, on every command."""

from __future__ import annotations

import inspect

import pytest
from typer.testing import CliRunner

from mars.cli import app
from mars.engines import registry
from mars.engines.factory import BACKENDS, make_backend
from mars.engines.options import BY_NAME
from mars.errors import MarsError
from mars.generate import probe_backend


def test_every_engine_resolves_to_a_backend_class_taking_its_own_options():
    assert (
        set(BACKENDS) == {"synthetic", "transformers", "sglang", "server"} == set(registry.ENGINES)
    )
    for name in BACKENDS:
        engine = registry.get(name)
        assert engine.name == name and all(o in BY_NAME for o in engine.own)
        try:
            cls = engine.load()
        except MarsError as exc:  # an extra not installed here: said with its install command
            assert f"backend {name!r} is not installed" in str(exc) and engine.extra in str(exc)
            continue
        assert cls.name == name  # the class says the name it is registered under
        params = set(inspect.signature(cls.__init__).parameters)
        assert set(engine.own) <= params | {"skill"}, name
        if engine.build is None:
            assert set(engine.own) <= engine.options()


def test_every_engine_option_declared_for_one_engine_has_one_owner():
    owned = [o for e in registry.ENGINES.values() for o in e.own]
    assert len(owned) == len(set(owned))
    assert registry.owner("base_url").name == "server" and registry.owner("decode").name == (
        "transformers"
    )
    assert registry.owner("temperature") is None  # every real engine's


def test_an_option_of_another_engine_is_one_line_naming_its_engine(monkeypatch):
    monkeypatch.delenv("MARS_BACKEND_OPTIONS", raising=False)
    with pytest.raises(MarsError, match=r"^--base-url is for --backend server$"):
        make_backend("transformers", model="m", base_url="http://x:1")
    with pytest.raises(MarsError, match=r"^--tp-size is for --backend sglang$"):
        make_backend("transformers", model="m", tp_size=2)
    with pytest.raises(MarsError, match="are for the synthetic backend, not sglang"):
        make_backend("sglang", model="m", preset="qwen3-8b")
    with pytest.raises(MarsError, match="the synthetic backend has no --base-url"):
        make_backend("synthetic", base_url="http://x:1")
    assert make_backend("synthetic", max_tokens=64).name == "synthetic"


def test_an_unknown_engine_is_one_line_in_the_library_and_exit_2_on_every_command(tmp_path):
    with pytest.raises(MarsError, match=r"^unknown backend 'nope' \(synthetic \| transformers"):
        make_backend("nope")
    with pytest.raises(MarsError, match="unknown backend 'nope'"):
        probe_backend({"backend": "synthetic"}, "nope")
    runner = CliRunner()
    common = ["--problems", "aime_2025", "--questions", "0", "--backend", "nope"]
    for command in ("generate", "solve"):
        res = runner.invoke(app, [command, *common, "--out", str(tmp_path / command)])
        assert res.exit_code == 2, res.output
        lines = [line for line in res.output.splitlines() if line.strip()]
        assert len(lines) == 1 and "unknown backend 'nope'" in lines[0], res.output
        assert not (tmp_path / command).exists()
