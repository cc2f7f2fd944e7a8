"""Write the generated parts of the workflow's config schema from the declarations.

``workflow/schemas/config.schema.yaml`` is written by hand except its blocks between a
``# generated: ...`` line and ``# end generated``: the simulation settings' ``simulation_params``
and ``simulation_defaults`` (from :mod:`mars.method.settings`), the ``generation`` section's
``generation_params`` and the engine options' ``sampling``, ``engine`` and ``server`` maps (from
:mod:`mars.engines.options`). This tool writes those blocks; tests/engines/test_options.py
checks the checked-in file is what it writes, so a new setting or option is one declaration plus
one run of::

    python -m maint_tools.config_schema            # rewrite the generated blocks
    python -m maint_tools.config_schema --check    # exit 1 when the file is stale
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml

from mars.engines.options import schema_defs
from mars.method.settings import SETTINGS

SCHEMA = Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml"
BLOCK = re.compile(
    r"(?ms)^(  # generated: (?P<name>\w+)[^\n]*\n)(?P<body>.*?)(^  # end generated\n)"
)


def _prop(spec) -> dict[str, Any]:
    """One setting as a JSON-schema property: its type, choices or range (without its help)."""
    prop: dict[str, Any] = {"type": {int: "integer", float: "number", str: "string"}[spec.type]}
    if spec.choices is not None:
        prop["enum"] = list(spec.choices)
    if spec.low is not None:
        prop["exclusiveMinimum" if spec.low_open else "minimum"] = spec.low
    if spec.high is not None:
        prop["exclusiveMaximum" if spec.high_open else "maximum"] = spec.high
    return prop


def simulation_params() -> dict[str, Any]:
    """The options of ``mars simulate`` that change results, as the config's ``simulation`` and
    ``settings.<s>`` sections take them."""
    props: dict[str, Any] = {"methods": {"$ref": "#/$defs/methods"}}
    for spec in SETTINGS:
        if spec.section == "simulation":
            props[spec.name] = {**_prop(spec), "description": spec.help}
    props["questions"] = {"$ref": "#/$defs/qids"}
    return {
        "description": "the `mars simulate` options that change results (names with _ for -), "
        "from mars/method/settings.py",
        "type": "object",
        "properties": props,
    }


def simulation_defaults() -> dict[str, Any]:
    """The defaults the ``simulation`` section fills in: the bootstrap's sizes and seed (a
    setting's own overrides take none, so they stay overrides; the other settings are left to
    ``mars simulate``'s defaults, so a rule passes only what a config sets)."""
    props = {
        spec.name: {"default": spec.default}
        for spec in SETTINGS
        if spec.section == "simulation" and spec.sampling and spec.choices is None
    }
    return {
        "description": "the simulation section's defaults, from mars/method/settings.py",
        "properties": props,
    }


def fit_params() -> dict[str, Any]:
    """The settings the fit stage's section sets, with their defaults."""
    props = {
        spec.name: {**_prop(spec), "default": spec.default, "description": spec.help}
        for spec in SETTINGS
        if spec.section == "fit"
    }
    return {
        "description": "the fit stage's settings, from mars/method/settings.py",
        "type": "object",
        "properties": props,
    }


def generated() -> dict[str, dict]:
    return {
        **schema_defs(),
        "fit_params": fit_params(),
        "simulation_params": simulation_params(),
        "simulation_defaults": simulation_defaults(),
    }


def _flow(value: Any) -> str:
    """``value`` as one line of flow-style YAML."""
    text = yaml.safe_dump(
        {"x": value}, default_flow_style=True, sort_keys=False, allow_unicode=True, width=1 << 20
    ).strip()
    assert text.startswith("{x: ") and text.endswith("}")
    return text[4:-1]


def render(name: str, block: dict) -> str:
    """One ``$defs`` entry: its keys one per line, each property on one line."""
    lines = [f"  {name}:"]
    for key, value in block.items():
        if key == "properties":
            lines.append("    properties:")
            lines += [f"      {p}: {_flow(v)}" for p, v in value.items()]
        else:
            lines.append(f"    {key}: {_flow(value)}")
    return "\n".join(lines) + "\n"


def rewrite(text: str) -> str:
    """``text`` with every generated block written anew (a block naming no declaration fails)."""
    defs = generated()

    def block(m: re.Match) -> str:
        return m.group(1) + render(m.group("name"), defs[m.group("name")]) + m.group(4)

    return BLOCK.sub(block, text)


def main(argv: list[str]) -> int:
    text = SCHEMA.read_text()
    new = rewrite(text)
    if "--check" in argv:
        if new != text:
            print(f"{SCHEMA}: stale; run python -m maint_tools.config_schema", file=sys.stderr)
            return 1
        return 0
    SCHEMA.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
