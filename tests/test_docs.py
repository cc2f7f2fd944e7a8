"""The docs: their generated blocks are what the declarations write, and every link resolves."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from maint_tools import gen_docs

ROOT = Path(__file__).resolve().parents[1]
#: every Markdown file a reader is sent to from README
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "config" / "README.md",
    ROOT / "benchmarks" / "README.md",
]
#: research notes that hold commands moved out of docs/ (issue 39): checked as the docs are
MOVED = [
    ROOT / "research" / "offgrid" / "results" / "baselines.md",
    ROOT / "research" / "synthetic" / "results" / "model-and-calibration.md",
]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("path", sorted({p for p, _ in gen_docs.BLOCKS.values()}), ids=str)
def test_generated_blocks_are_what_the_declarations_write(path):
    text = path.read_text()
    assert gen_docs.rewrite(text, path) == text, (
        f"{path.relative_to(ROOT)} is stale: run {gen_docs.COMMAND}"
    )


def test_the_methods_table_lists_every_method_once_and_nowhere_else():
    from mars.method.registry import METHODS

    table = gen_docs.methods_table()
    rows = re.findall(r"^\| \**`([\w-]+)`", table, re.M)
    assert rows == list(METHODS)
    assert all(m.rule.summary for m in METHODS.values())  # no row says nothing of its rule
    # a second table of what each method is (results tables aside) would drift from it
    describes = re.compile(
        r"^\| method \|.*\b(stops|votes|rule|knobs|settings|decision)\b", re.M | re.I
    )
    for page in PAGES:
        if page.name != "methods.md":
            assert not describes.search(_outside_code(page.read_text())), page


def test_every_simulate_setting_is_in_the_cli_reference():
    from mars.method.settings import SETTINGS

    text = (ROOT / "docs" / "cli.md").read_text()
    section = text.split("## `mars simulate`")[1].split("\n## ")[0]
    for spec in SETTINGS:
        assert f"`{spec.flag} <" in section, spec.flag


def _outside_code(text: str) -> str:
    return re.sub(r"(?ms)^```.*?^```", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#+ (.*)$", _outside_code(path.read_text()), re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slug_is_githubs():
    assert slug("Servers: llama.cpp, vLLM, SGLang (`--backend server`)") == (
        "servers-llamacpp-vllm-sglang---backend-server"
    )
    assert slug("`mars simulate`") == "mars-simulate"


@pytest.mark.parametrize("page", [*PAGES, *MOVED], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(page):
    """Every relative link names a file of the checkout, and its #anchor a heading there."""
    broken = []
    for target in LINK.findall(_outside_code(page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


def mars_commands() -> list[tuple[str, list[str]]]:
    """Every `mars ...` command line of the pages' shell blocks (continuations joined)."""
    out = []
    for page in [*PAGES, *MOVED]:
        for block in re.findall(r"```(?:sh|bash)\n(.*?)```", page.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"^(\w+=\S+ )+", "", line.split(" #", 1)[0].strip())
                if line.startswith("mars "):
                    out.append((page.name, shlex.split(line)[1:]))
    return out


@pytest.mark.parametrize(
    "page,argv", mars_commands(), ids=lambda v: v if isinstance(v, str) else " ".join(v)[:60]
)
def test_every_command_shown_takes_its_options(page, argv):
    """Each `mars` command a page shows names a command, and each --option one it takes."""
    import typer.main

    from mars.cli import app

    group = typer.main.get_command(app)
    assert argv[0] in group.commands, (page, argv[0])
    known = {o for p in group.commands[argv[0]].params for o in (*p.opts, *p.secondary_opts)}
    given = {a.split("=", 1)[0] for a in argv[1:] if a.startswith("-")}
    assert given <= known, (page, given - known)
