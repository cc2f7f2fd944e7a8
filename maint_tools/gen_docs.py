"""Write the generated parts of the docs from the declarations.

The docs are written by hand except their blocks between a ``<!-- generated: NAME -->`` line and
``<!-- end generated -->``: ``cli`` in docs/cli.md (every ``mars`` command with its synopsis and
options, from the typer app of :mod:`mars.cli`) and ``methods`` in docs/methods.md (every method
of :mod:`mars.method.registry`: what votes, filters and stops it, its q and γ, the settings of
:mod:`mars.method.settings` it reads, whether it runs live). Nothing else keeps a copy: README and
the other docs link there. tests/test_docs.py checks the checked-in files are what this writes, so
a new option, setting or method is its declaration plus one run of::

    python -m maint_tools.gen_docs            # rewrite the generated blocks
    python -m maint_tools.gen_docs --check    # exit 1 when a file is stale
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
COMMAND = "python -m maint_tools.gen_docs"
BLOCK = re.compile(
    r"(?ms)^(<!-- generated: (?P<name>\w+) [^\n]*-->\n)(?P<body>.*?)^(<!-- end generated -->\n)"
)


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell: rich's escapes undone, pipes escaped, one line."""
    return " ".join(text.replace("\\[", "[").replace("|", "\\|").split())


def _command_rows(command: Any, ctx: Any) -> dict[str, list[str]]:
    """A command's parameters as table rows, by the help panel they are shown under."""
    panels: dict[str, list[str]] = {}
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        name, help_text = record
        if param.param_type_name == "argument":
            name = (param.metavar or param.name).upper()
        panel = getattr(param, "rich_help_panel", None) or (
            "Arguments" if param.param_type_name == "argument" else "Options"
        )
        panels.setdefault(panel, []).append(f"| `{name}` | {_cell(help_text)} |")
    return panels


def cli_reference() -> str:
    """Every ``mars`` subcommand: what it does, its synopsis and its options, each option as its
    ``--help`` shows it (typer's help record: a typer release that words them otherwise is
    adopted by one run of this tool)."""
    import typer.main

    from mars.cli import app

    group = typer.main.get_command(app)
    root = group.context_class(group, info_name="mars")
    names = list(group.commands)
    lines = [
        " ".join((group.help or "").split()),
        "",
        "```text",
        "mars [OPTIONS] COMMAND",
        "```",
        "",
    ]
    lines += ["| Options | |", "|---|---|"]
    lines += [
        f"| `{r[0]}` | {_cell(r[1])} |" for p in group.params if (r := p.get_help_record(root))
    ]
    lines += ["", "| command | what it does |", "|---|---|"]
    for name in names:
        command = group.commands[name]
        lines.append(
            f"| [`mars {name}`](#mars-{name}) | {_cell(command.get_short_help_str(200))} |"
        )
    for name in names:
        command = group.commands[name]
        ctx = command.context_class(command, info_name=name, parent=root)
        args = [
            (p.metavar or p.name).upper() + ("" if p.required else "?")
            for p in command.params
            if p.param_type_name == "argument"
        ]
        synopsis = " ".join(["mars", name, "[OPTIONS]", *args])
        help_text = (command.help or "").strip().split("\n\n")[0]
        lines += ["", f"## `mars {name}`", "", " ".join(help_text.split()), ""]
        lines += ["```text", synopsis, "```"]
        for panel, rows in _command_rows(command, ctx).items():
            lines += ["", f"| {panel} | |", "|---|---|", *rows]
    return "\n".join(lines) + "\n"


def _launch(method: Any) -> str:
    """How a method starts its traces, when not all at once (the registry's launch policy)."""
    launch = getattr(method, "launch", None)
    name = getattr(launch, "name", None) if launch is not None else None
    if name is None:  # the registry's booleans
        name = "planned" if getattr(method, "planned", False) else None
        name = name or ("waves" if getattr(method, "waves", False) else "together")
    if name == "waves":
        return "; traces launched in waves of `--wave-size`: the rule stops running or launching"
    if name == "planned":
        return (
            "; its launch planned from the warmup: one first wave (doubled while the rule's risk "
            "at its end would stay above α), then the rest at once"
        )
    if name == "early":
        return (
            "; traces launched in a first wave of `--wave-size`, the rest at the first checkpoint "
            "where even the wave's most optimistic end would not stop (the launches overlap)"
        )
    if method.width == 1:
        return "; on the first trace of each sample only"
    if method.width is not None:
        return f"; on the first {method.width} traces of each sample only"
    return ""


def methods_table() -> str:
    """The registry's methods: what votes, filters and stops, q, γ, settings, live."""
    from mars.method.registry import METHODS
    from mars.method.settings import SPECS

    gammas = {"calibrated": "calibrated on the warmup", "one": "1"}
    lines = [
        "| method | votes | filter | stops when | q | γ | settings | live |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in METHODS.values():
        rule = m.rule
        knobs = [k for k in rule.knobs if k != "gamma"]
        if _launch(m).startswith(("; traces launched", "; its launch")):  # waves, planned, early
            knobs.append("wave_size")
        gamma = gammas.get(rule.gamma, "`--gamma`" if "gamma" in rule.knobs else "–")
        name = f"`{m.name}`" if m.reference else f"**`{m.name}`**"
        cells = [
            name,
            "confidence" if m.voting.needs_confs else "uniform",
            "–" if m.filter.keeps_all else "DeepConf",
            rule.summary + _launch(m),
            m.q or "–",
            gamma,
            ", ".join(f"`{SPECS[k].flag}`" for k in knobs) or "–",
            "yes" if m.live else "–",
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


#: the generated blocks, by name, and the file each lives in
BLOCKS: dict[str, tuple[Path, Callable[[], str]]] = {
    "cli": (DOCS / "cli.md", cli_reference),
    "methods": (DOCS / "methods.md", methods_table),
}


def rewrite(text: str, path: Path) -> str:
    """``text`` with every generated block written anew (a block of an unknown name fails)."""

    def block(m: re.Match) -> str:
        where, make = BLOCKS[m.group("name")]
        assert where == path, f"{path}: block {m.group('name')} belongs in {where}"
        return m.group(1) + make() + m.group(4)

    new, n = BLOCK.subn(block, text)
    assert n, f"{path}: no generated block"
    return new


def stale() -> list[Path]:
    """The files whose generated blocks are not what the declarations write."""
    paths = dict.fromkeys(path for path, _ in BLOCKS.values())
    return [p for p in paths if rewrite(p.read_text(), p) != p.read_text()]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        old = stale()
        for path in old:
            print(f"{path.relative_to(ROOT)}: stale; run {COMMAND}", file=sys.stderr)
        return 1 if old else 0
    for path in dict.fromkeys(path for path, _ in BLOCKS.values()):
        text = path.read_text()
        new = rewrite(text, path)
        if new != text:
            path.write_text(new)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
