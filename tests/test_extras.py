"""The core needs none of the optional dependencies: with Snakemake, matplotlib, seaborn, PyYAML,
jsonschema and scikit-learn made unimportable, pools are fitted and simulated, the stopping rule
decides in a plain loop, the report's tables render, and what needs an extra says so in one line.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from util import write_layout_pool

#: what the extras bring (report: matplotlib, seaborn; workflow: snakemake, yaml, jsonschema;
#: research: sklearn)
EXTRAS = ("matplotlib", "seaborn", "snakemake", "yaml", "jsonschema", "sklearn")


def _without_extras(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter where none of EXTRAS can be imported."""
    head = f"import sys\nfor _m in {EXTRAS!r}:\n    sys.modules[_m] = None\n"
    return subprocess.run(
        [sys.executable, "-c", head + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def pool(tmp_path):
    return write_layout_pool(tmp_path / "pool", n_questions=2)


@pytest.mark.slow
def test_fit_simulate_and_the_library_need_no_extra(tmp_path, pool):
    fit, sim = tmp_path / "fit", tmp_path / "sim"
    r = _without_extras(
        f"""
        from mars.cli import main
        assert main(["fit", "{pool}", "--out", "{fit}", "--warmup", "4", "-q"]) == 0
        args = ["simulate", "{pool}", "-m", "sc,sc-mars-cal,sc-mars2,asc,pp-main", "--budget", "8"]
        assert main([*args, "--iterations", "2", "--warmup", "4", "--fit", "{fit}", "--out",
                     "{sim}", "-q"]) == 0
        import mars
        stopper = mars.Stopper("sc-mars2", n_traces=3, grid=[2048, 4096])
        d = stopper.step(["1", "1", "2"], [True, True, True])
        assert d.stop in (True, False)
        print("ok")
        """
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
    assert (sim / "sc-mars2" / "overall.json").is_file()


@pytest.mark.slow
def test_the_report_draws_only_with_its_extra(tmp_path, pool):
    sim = tmp_path / "sim"
    r = _without_extras(
        f"""
        from mars.cli import main
        assert main(["simulate", "{pool}", "-m", "sc,sc-mars-cal", "--budget", "8",
                     "--iterations", "2", "--warmup", "4", "--out", "{sim}", "-q"]) == 0
        tables = main(["report", "{sim}", "--out", "{tmp_path / "tables"}", "--no-figures"])
        figures = main(["report", "{sim}", "--out", "{tmp_path / "figures"}"])
        print(tables, figures)
        """
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["0", "2"]
    assert (tmp_path / "tables" / "tables" / "table1-main.md").is_file()
    assert not (tmp_path / "figures").exists()
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert "matplotlib and seaborn, which are not installed: " in line
    assert "pip install 'mars-stopping[report]' (in a checkout: pip install -e '.[report]')" in line


def _pyproject() -> dict:
    import tomllib
    from pathlib import Path

    return tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())


def test_the_distribution_is_ours_and_every_extra_names_it():
    """`mars` on PyPI is an unrelated project: the distribution has its own name, the extras
    that include others name it, the import name and the command stay `mars`."""
    from mars.errors import DISTRIBUTION

    project = _pyproject()["project"]
    assert project["name"] == DISTRIBUTION != "mars"
    assert project["scripts"] == {"mars": "mars.cli:run"}
    for extra, reqs in project["optional-dependencies"].items():
        for req in reqs:
            assert not req.startswith("mars["), (extra, req)


def test_every_install_hint_names_the_distribution_and_the_checkout_form():
    """Each hint in the code and docs is a command that works: `pip install 'mars-stopping[X]'`
    (pip adds only the extra where the package is installed) or, in a checkout,
    `pip install -e '.[X]'`; X is an extra pyproject declares. None names `mars[...]`."""
    import re
    from pathlib import Path

    from mars.errors import install_hint

    root = Path(__file__).resolve().parents[1]
    extras = set(_pyproject()["project"]["optional-dependencies"])
    files = [root / "README.md", *(root / "docs").glob("*.md"), *(root / "mars").rglob("*.py")]
    named = set()
    for path in files:
        text = path.read_text()
        assert not re.search(r"pip install -?-?\w* *['\"]?mars(\[|['\"\s]|$)", text), path
        named.update(re.findall(r"mars-stopping\[([a-z]+)\]", text))
        named.update(re.findall(r"-e ['\"]\.\[([a-z,]+)\]", text))
    named = {e for group in named for e in group.split(",")}
    assert named and named <= extras, named - extras
    hint = install_hint("server")
    assert hint == "pip install 'mars-stopping[server]' (in a checkout: pip install -e '.[server]')"


def test_a_missing_backend_names_both_install_commands():
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['torch'] = sys.modules['transformers'] = None\n"
            "from mars.engines.factory import make_backend\n"
            "try:\n    make_backend('transformers', model='m.gguf')\n"
            "except Exception as e:\n    print(type(e).__name__, e)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.stdout.startswith("MarsError backend 'transformers' is not installed"), (
        r.stdout + r.stderr
    )
    hint = "pip install 'mars-stopping[transformers]' (in a checkout: pip install -e "
    hint += "'.[transformers]')"
    assert r.stdout.count(hint) == 1
