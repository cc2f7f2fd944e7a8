"""The package's folders are its layers, and imports only go down: the storage layer
(``mars.store``) imports no other layer, the method core (``mars.method``) only the storage layer,
the engines (``mars.engines``) those two; the stages (``mars.generate``, ``mars.fit``,
``mars.simulate``, ``mars.analyze``, ``mars.live``) sit on those three and never on one another,
except through the readers of what another stage writes; the report reads only those readers; the
command line and the proxy (``mars serve``) sit on top. No import cycle, and no calibration tooling
in the runtime package."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARS = ROOT / "mars"
#: what each layer may import from the package (besides itself and the base utilities)
BASE = {"mars.errors", "mars.progress", "mars.workers", "mars.declare"}
ALLOWED = {
    "mars.store": set(),
    "mars.method": {"mars.store"},
    "mars.engines": {"mars.store", "mars.method"},
}


#: the stage packages: each owns its driver and the formats of what it writes
STAGES = ("mars.generate", "mars.fit", "mars.simulate", "mars.analyze", "mars.live")
#: each stage's drivers, what its package exports from its ``__init__``
DRIVERS = {
    "mars.generate": ("generate_pool", "probe_pool"),
    "mars.fit": ("fit_pool",),
    "mars.simulate": ("simulate_pool",),
    "mars.analyze": ("analyze",),
    "mars.live": ("solve", "solve_pool", "replay_run", "audit_paths", "complete_question"),
}
#: the modules of a stage that read what it wrote, all another stage or the report may import of it
#: (a simulation reads a fit directory; the analysis and the report read a simulation's outputs)
READERS = {"mars.fit.fitdir", "mars.simulate.runs", "mars.simulate.candidates"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """The package modules a file imports (relative imports resolved), at any depth."""
    mod = module_name(path)
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("mars"):
                out.add(target)
                out.update(f"{target}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("mars"))
    files = {module_name(p) for p in MARS.rglob("*.py")}
    return {t for t in out if t in files}


def layer_of(mod: str) -> str:
    return ".".join(mod.split(".")[:2])


def test_imports_only_go_down_the_layers():
    for path in MARS.rglob("*.py"):
        mod = module_name(path)
        layer = layer_of(mod)
        if layer not in ALLOWED:
            continue
        for target in imports_of(path):
            if target in BASE or layer_of(target) == layer or target == "mars":
                continue
            assert layer_of(target) in ALLOWED[layer], f"{mod} imports {target}"


def test_a_stage_imports_the_layers_below_and_of_another_stage_only_its_readers():
    """A stage (and the report) imports store, method, engines and the utilities; of another stage
    only its readers, never its driver, its writer or its package (whose ``__init__`` may load
    them)."""
    for path in MARS.rglob("*.py"):
        mod = module_name(path)
        layer = layer_of(mod)
        if layer not in (*STAGES, "mars.report"):
            continue
        for target in imports_of(path):
            other = layer_of(target)
            if other in STAGES and other != layer:
                assert target in READERS, f"{mod} imports {target}, not a reader of {other}"
            else:
                below = {layer, "mars.store", "mars.method", "mars.engines"}
                assert target in BASE or other in below, f"{mod} imports {target}"
    # and the stages' readers read no stage driver themselves
    for reader in READERS:
        path = MARS.parent / (reader.replace(".", "/") + ".py")
        assert all(t in READERS or layer_of(t) not in STAGES for t in imports_of(path)), reader


def test_each_stage_package_exports_its_drivers():
    import importlib

    assert set(DRIVERS) == set(STAGES)
    for stage, names in DRIVERS.items():
        package = importlib.import_module(stage)
        for name in names:
            assert name in package.__all__ and callable(getattr(package, name)), (stage, name)


def test_a_stages_readers_load_no_driver():
    """A stage's ``__init__`` exports its driver lazily where other stages import its readers: a
    simulation reading a fit directory, or the report reading runs, loads neither fitter nor
    simulator."""
    code = (
        "import sys\n"
        f"import {', '.join(sorted(READERS))}\n"
        "print(sorted(m for m in sys.modules if m.endswith('.driver')))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_no_import_cycle():
    graph = {module_name(p): imports_of(p) for p in MARS.rglob("*.py")}
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for t in graph.get(m, ()):
            if t == m or m.startswith(t + "."):  # its own package: `from . import sibling`
                continue
            assert state.get(t) != 1, " -> ".join([*stack, m, t])
            if t not in state:
                visit(t, [*stack, m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])


def test_the_runtime_package_holds_no_maintainers_tools():
    assert not (MARS / "synthetic").exists()
    assert (ROOT / "maint_tools" / "synthetic" / "__main__.py").is_file()


def test_the_proxy_is_a_stage_nothing_below_imports():
    """``mars serve`` (mars/serve) sits above the engines, the method core and the storage layer:
    only the command line imports it, and ``import mars`` does not (its extra is optional)."""
    for path in MARS.rglob("*.py"):
        mod = module_name(path)
        if mod.startswith(("mars.serve", "mars.cli")):
            continue
        bad = [t for t in imports_of(path) if t.startswith("mars.serve")]
        assert not bad, f"{mod} imports {bad}"
    init = imports_of(MARS / "__init__.py")
    assert not any(t.startswith("mars.serve") for t in init)
