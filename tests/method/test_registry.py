"""The method registry (mars.method.registry): each method is a composition of voting, DeepConf
filter, stopping rule, q and role, as the table of reference-protocol §5.3 and the module's
docstring give them; lookups, selection, ordering and registration; and a method registered in
one place runs in simulate, live and the report, and the docs' "add a method" example runs."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner
from util import write_layout_pool

from mars.cli import app
from mars.engines.synthetic import SyntheticBackend
from mars.errors import SimulationError, UsageError
from mars.live import plan_for, replay_run, solve_pool
from mars.method import registry as R
from mars.method.deepconf import DEEPCONF_ONLINE
from mars.method.registry import (
    ALIASES,
    CALIBRATED_MARS,
    DEFAULT_METHOD,
    FIXED_GAMMA_MARS,
    METHOD_GROUPS,
    METHODS,
    ORACLE_FIRST_STOP,
    ORACLE_LAST_STOP,
    ORACLE_Q_MARS,
    PROBE_PRUNING_STOP,
    PROBE_STOP,
    REFERENCE_METHODS,
    SWEEP_POINTS,
    Method,
    Stopping,
    Sweep,
    get_method,
    live_method,
    live_methods,
    method_order,
    parse_methods,
    register,
    select_methods,
    sweep_settings,
    unregister,
)
from mars.method.settings import Settings
from mars.method.stopping import (
    AdaptiveConsistency,
    Consensus,
    ConvergenceExit,
    EarlyStopping,
    Mars,
    Never,
    OracleStop,
    ParallelProbe,
    ProbeController,
    Rule,
    Snapshot,
)
from mars.method.voting import CONFIDENCE
from mars.store import schema
from mars.store.problems import load_problems

# reference-protocol §5.3: (vote weights by confidence, DeepConf filter, rule kind, q, γ)
REFERENCE_TABLE = {
    "sc": (False, False, "never", None, "setting"),
    "dco": (True, True, "never", None, "setting"),
    "sc-mars": (False, False, "mars", "learned", "setting"),
    "sc-mars-cal": (False, False, "mars", "learned", "calibrated"),
    "sc-mars-oracle": (False, False, "mars", "oracle", "setting"),
    "sc-mars-oracle-cal": (False, False, "mars", "oracle", "calibrated"),
    "dco-mars": (False, True, "mars", "learned", "setting"),  # uniform votes, filtered set
    "dco-mars-cal": (True, True, "mars", "learned", "calibrated"),
    "dco-mars-oracle": (True, True, "mars", "oracle", "setting"),
    "sc-pp": (False, False, "pp", None, "setting"),
    "oracle-first": (False, False, "oracle", None, "setting"),
    "oracle-last": (False, False, "oracle", None, "setting"),
    "oracle-dco-first": (True, True, "oracle", None, "setting"),
    "oracle-dco-last": (True, True, "oracle", None, "setting"),
}


@pytest.mark.parametrize("name", sorted(REFERENCE_TABLE))
def test_reference_methods_are_the_compositions_of_the_protocol(name):
    m = METHODS[name]
    parts = (m.voting == CONFIDENCE, m.filter == DEEPCONF_ONLINE)
    assert (*parts, m.rule.kind, m.q, m.rule.gamma) == REFERENCE_TABLE[name]
    assert m.reference


def test_the_fourteen_reference_methods_in_order():
    assert REFERENCE_METHODS == list(REFERENCE_TABLE)
    assert not {n for n, m in METHODS.items() if m.reference} - set(REFERENCE_TABLE)


def test_new_methods_are_not_reference_methods():
    for name in ("sc-mars-cert", "sc-pp-faithful", "sc-consensus", "asc", "esc", "sc-mars2"):
        assert not METHODS[name].reference


def test_certified_methods_take_gamma_one_and_the_certified_rule():
    for name in ("sc-mars-cert", "sc-mars-oracle-cert", "dco-mars-cert"):
        rule = METHODS[name].rule
        assert rule.kind == "certified"
        assert rule.gamma == "one"
        assert dict(rule.options) == {"certified": True}


def test_baseline_is_the_pipeline_of_the_votes():
    assert METHODS["sc-mars-cal"].baseline == "sc"
    assert METHODS["dco-mars"].baseline == "dco"  # filtered, though uniform votes
    assert METHODS["dco-mars-cal"].baseline == "dco"
    assert METHODS["oracle-dco-first"].baseline == "dco"
    assert METHODS["asc"].baseline == "sc"


def test_derived_properties():
    assert METHODS["sc"].is_baseline and METHODS["dco"].is_baseline
    assert not METHODS["sc-mars"].is_baseline
    assert METHODS["dco-mars"].needs_confs  # its filter reads confidences
    assert not METHODS["sc-mars"].needs_confs
    assert METHODS["sc-mars-oracle"].reads_future  # oracle q
    assert METHODS["oracle-first"].reads_future  # oracle rule
    assert not METHODS["sc-mars-cal"].reads_future
    assert METHODS["sc-mars-cal"].live
    assert not METHODS["asc"].live  # samples more
    assert not METHODS["single-sac"].live  # one trace of the budget
    assert METHODS["sc-mars2-waves"].live  # launches one after another, live too


def test_default_method_is_calibrated_mars_and_live():
    assert DEFAULT_METHOD == "sc-mars-cal"
    assert live_method(DEFAULT_METHOD).name == DEFAULT_METHOD


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("dco-mars", "DeepConf"),
        ("sc-mars-oracle", "future"),
        ("oracle-last", "future"),
        ("asc", "one round after another"),
    ],
)
def test_live_method_explains_a_refusal(name, message):
    with pytest.raises(SimulationError, match=message):
        live_method(name)
    with pytest.raises(SimulationError, match=message):
        live_method(METHODS[name])


# ----------------------------------------------------------------------------- rule factories


def context(**settings):
    return SimpleNamespace(
        s=dataclasses.replace(Settings(), **settings), warm_ref=2, calibration=None
    )


def test_mars_rules_get_the_gamma_guard_and_delta():
    ctx = context(delta=0.1)
    rule = METHODS["sc-mars"].rule.rule(ctx, METHODS["sc-mars"], 0.7)
    assert isinstance(rule, Mars)
    assert (rule.gamma, rule.guard_answer, rule.certified, rule.label) == (0.7, 2, False, "margin")
    cert = METHODS["sc-mars-cert"].rule.rule(ctx, METHODS["sc-mars-cert"], 1.0)
    assert (cert.certified, cert.delta, cert.label) == (True, 0.1, "certified")


def test_baseline_rules_read_their_settings():
    ctx = context(
        pp_conv=5,
        pp_warmup=1,
        pp_patience=3,
        consensus=0.6,
        ppm_stable=7,
        ppm_warmup=2,
        ppm_patience=4,
        ppm_max_steps=9,
        sac_n=6,
        asc_threshold=0.8,
        esc_window=4,
    )

    def build(name):
        return METHODS[name].rule.rule(ctx, METHODS[name], 1.0)

    assert isinstance(build("sc"), Never)
    pp = build("sc-pp")
    assert isinstance(pp, ParallelProbe)
    assert (pp.conv, pp.warmup, pp.patience, pp.faithful) == (5, 1, 3, False)
    assert build("sc-pp-faithful").faithful
    c = build("sc-consensus")
    assert isinstance(c, Consensus) and c.share == 0.6
    main = build("pp-main")
    assert isinstance(main, ProbeController)
    assert (main.stable, main.warmup, main.patience, main.max_steps) == (7, 2, 4, 9)
    assert not main.keep_votes and build("pp-main-keep").keep_votes
    sac = build("sc-sac")
    assert isinstance(sac, ConvergenceExit) and sac.n == 6
    asc = build("asc")
    assert isinstance(asc, AdaptiveConsistency) and asc.threshold == 0.8
    esc = build("esc")
    assert isinstance(esc, EarlyStopping) and esc.window == 4
    first, last = build("oracle-first"), build("oracle-last")
    assert isinstance(first, OracleStop) and not first.last and last.last


def test_sample_more_and_future_flags_match_the_rules_they_build():
    ctx = context()
    for name, m in METHODS.items():
        if m.rule.kind == "risk":
            continue  # builds from the question's arrays
        rule = m.rule.rule(ctx, m, 1.0)
        assert m.rule.samples_more == (rule.draws > 0), name
        assert m.rule.reads_future == rule.reads_future, name
        assert (m.q is not None) == rule.needs_q, name


# ----------------------------------------------------------------------------- roles


def test_roles_name_their_method_in_each_pipeline():
    assert CALIBRATED_MARS.of("sc") == "sc-mars-cal"
    assert CALIBRATED_MARS.of("dco") == "dco-mars-cal"
    assert FIXED_GAMMA_MARS.of("sc") == "sc-mars"
    assert FIXED_GAMMA_MARS.of("dco") == "dco-mars"
    assert ORACLE_Q_MARS.members() == ["sc-mars-oracle", "dco-mars-oracle"]
    assert ORACLE_FIRST_STOP.members() == ["oracle-first", "oracle-dco-first"]
    assert ORACLE_LAST_STOP.of("dco") == "oracle-dco-last"
    assert PROBE_STOP.members() == ["sc-pp"]
    assert PROBE_PRUNING_STOP.members() == ["sc-pp-faithful"]
    with pytest.raises(LookupError, match="no dco method"):
        PROBE_STOP.of("dco")


# ----------------------------------------------------------------------------- lookups


def test_get_method_knows_aliases_and_names_the_known_ones():
    assert ALIASES["offline"] == "sc"
    assert get_method("offline") is METHODS["sc"]
    with pytest.raises(UsageError, match=r"unknown method 'nope'.*sc-mars-cal"):
        get_method("nope")


def test_parse_methods_keeps_order_and_drops_duplicates():
    names = [m.name for m in parse_methods(" sc-mars , sc,offline,,sc-mars")]
    assert names == ["sc-mars", "sc"]
    assert [m.name for m in parse_methods("reference")] == REFERENCE_METHODS
    assert [m.name for m in parse_methods("all")] == list(METHODS)
    with pytest.raises(UsageError, match="no method given"):
        parse_methods(" , ")


def test_a_pool_without_confidences_leaves_deepconf_methods_out_of_groups_only():
    methods, left_out = select_methods("reference", has_confs=False)
    names = [m.name for m in methods]
    assert "dco" not in names and "dco-mars" not in names and "oracle-dco-first" not in names
    assert set(left_out) == {n for n in REFERENCE_METHODS if METHODS[n].needs_confs}
    assert all(not m.needs_confs for m in methods)
    # named on its own, a DeepConf method is kept (the simulator refuses it later)
    methods, left_out = select_methods("reference,dco", has_confs=False)
    assert "dco" in [m.name for m in methods] and "dco" not in left_out


def test_method_order_is_by_group_then_registry_then_unknown_names():
    names = ["zeta", "oracle-first", "sc-pp", "dco", "sc-mars", "alpha", "sc"]
    assert method_order(names) == ["sc", "sc-mars", "dco", "sc-pp", "oracle-first", "alpha", "zeta"]


# ----------------------------------------------------------------------------- registration


def test_register_and_unregister_a_method():
    method = Method("sc-unit", "Unit", Stopping("never", R._never), group="other")
    assert register(method) is method
    try:
        assert get_method("sc-unit") is method
        assert METHOD_GROUPS["all"][-1] == "sc-unit"
        assert method_order(["sc-unit", "sc-pp"]) == ["sc-pp", "sc-unit"]
        assert "sc-unit" in R.live_methods()
    finally:
        unregister("sc-unit")
    assert "sc-unit" not in METHODS and "sc-unit" not in METHOD_GROUPS["all"]
    assert method not in R._METHODS


@pytest.mark.parametrize("name", ["all", "reference", "offline"])
def test_group_and_alias_names_cannot_be_registered(name):
    with pytest.raises(UsageError, match="already known"):
        register(Method(name, "x"))


def test_an_unknown_group_is_refused():
    with pytest.raises(UsageError, match="group 'extra'"):
        register(Method("sc-extra", "x", group="extra"))
    assert "sc-extra" not in METHODS


STOP_AT = 2  # the toy rule stops at this checkpoint index


@dataclass
class StopAt(Rule):
    """A toy rule: stop at checkpoint ``k`` whatever the votes say."""

    k: int = STOP_AT
    label: str = "toy"

    def check(self, snap: Snapshot) -> np.ndarray:
        return np.full(len(snap.rows), snap.k >= self.k) & snap.has_votes


def _stop_at(ctx, method, gamma, k=STOP_AT):
    return StopAt(k)


@pytest.fixture
def toy():
    """A new method with a new rule, declared in this one place."""
    names = ["sc-toy", "sc-toy-oracle"]
    register(Method("sc-toy", "Toy stop", Stopping("toy", _stop_at), group="other"))
    register(Method("sc-toy-oracle", "Toy (future)", Stopping("toy", _stop_at, reads_future=True)))
    yield names
    for name in names:
        unregister(name)
    assert not set(names) & set(METHODS)


def test_a_registered_method_runs_in_simulate(toy, tmp_path):
    pool = write_layout_pool(tmp_path / "pool", seed=3, n_questions=2)
    out = tmp_path / "out"
    res = CliRunner().invoke(
        app,
        [
            "simulate",
            str(pool),
            "--method",
            "sc,sc-toy",
            "--out",
            str(out),
            "--budget",
            "16",
            "--iterations",
            "4",
            "--warmup",
            "4",
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    pq = pd.read_csv(out / "sc-toy" / "per_question.csv")
    assert len(pq) == 2
    full = pd.read_csv(out / "sc" / "per_question.csv")
    assert (pq["stopped_early"] == 4).all()
    assert (pq["tokens_mean"] < full["tokens_mean"]).all()


def test_a_registered_method_runs_live_if_admissible(toy, tmp_path):
    assert "sc-toy" in live_methods() and "sc-toy-oracle" not in live_methods()
    with pytest.raises(SimulationError, match="future"):
        live_method("sc-toy-oracle")
    out = tmp_path / "live"
    be = SyntheticBackend("qwen3-8b")
    plan = plan_for(be, "sc-toy", n_traces=16, warmup=4, seed=1)
    rows = solve_pool(be, load_problems("aime_2025"), out, plan, questions=[0, 1])
    spacing = schema.CHECKPOINT_SPACING
    for r in rows:
        assert r["stopped_by"] == "toy" and r["stop_position"] == (STOP_AT + 1) * spacing
    assert all(r["match"] for r in replay_run(out))


def test_registering_a_known_name_is_refused():
    with pytest.raises(UsageError, match="already known"):
        register(Method("sc-mars", "again"))
    with pytest.raises(UsageError, match="reference method"):
        unregister("sc")


def test_live_admits_methods_by_their_properties():
    for m in METHODS.values():
        admitted = m.name in live_methods()
        # all N traces start at once
        together = not m.rule.samples_more and m.width is None and m.launch.live
        assert admitted == (m.filter.live and not m.reads_future and together)
    assert {"sc-mars-oracle", "oracle-first", "oracle-last", "dco-mars"}.isdisjoint(live_methods())
    assert {"asc", "esc", "single-sac"}.isdisjoint(live_methods())
    assert {"sc-mars2-waves", "sc-mars2-launch"} <= set(live_methods())
    assert {"sc-sac", "pp-main", "pp-main-keep"} <= set(live_methods())


def _simulate(pool, out, methods):
    args = ["simulate", str(pool), "--method", methods, "--out", str(out), "--budget", "16"]
    res = CliRunner().invoke(app, [*args, "--iterations", "4", "--warmup", "4", "-q"])
    assert res.exit_code == 0, res.output


@pytest.mark.slow
def test_a_registered_method_appears_in_the_report(toy, tmp_path):
    """The toy, declared only in the fixture, gets rows in the report's every-method tables and
    points on the frontier (a mark named by its label), measured against its pipeline's
    baseline and oracle-first stop; its future-reading twin stays off both, as the oracles do."""
    pool = write_layout_pool(tmp_path / "pool", seed=3, n_questions=2)
    _simulate(pool, tmp_path / "res" / "m" / "d", "sc,sc-toy,sc-toy-oracle,oracle-first")
    out = tmp_path / "report"
    res = CliRunner().invoke(app, ["report", str(tmp_path / "res"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    overall = json.loads((tmp_path / "res" / "m" / "d" / "sc-toy" / "overall.json").read_text())
    for key in ("table-oracle-share", "table-probe-cost"):
        table = pd.read_csv(out / "tables" / f"{key}.csv", comment="#")
        assert table.method.tolist() == ["sc-toy"], key
    share = pd.read_csv(out / "tables" / "table-oracle-share.csv", comment="#").iloc[0]
    assert share.savings_pct == pytest.approx(overall["savings_pct"])
    frontier = pd.read_csv(out / "figures" / "fig-frontier.csv", comment="#")
    assert frontier.method.tolist() == ["sc-toy"]
    assert frontier.label.tolist() == ["Toy stop"] and frontier.pipeline.tolist() == ["SC"]
    assert frontier.oracle_savings_pct.notna().all()
    assert "Toy stop" in (out / "report.md").read_text()


def test_a_declared_sweep_is_a_tradeoff_curve(toy):
    """What a method sweeps is declared with it: the trade-off settings run it at every value
    with no other edit, sharing a setting with other curves where its knob's value is theirs."""
    before = sweep_settings()
    register(
        Method(
            "sc-toy-swept",
            "Toy swept",
            Stopping("toy", _stop_at),
            group="other",
            sweep=Sweep("Toy, share", "consensus", (0.5, 0.9)),
        )
    )
    register(
        Method(
            "sc-toy-gamma",
            "Toy γ",
            Stopping("toy", _stop_at),
            group="other",
            sweep=Sweep("Toy, γ", "gamma", (0.55, 0.65)),
        )
    )
    try:
        after = sweep_settings()
        toy_at = [knobs["consensus"] for knobs, ms in after if "sc-toy-swept" in ms]
        assert toy_at == [0.5, 0.9]
        # a knob's other values cannot share a setting with sc-mars's γ: settings of their own
        gammas = [knobs["gamma"] for knobs, ms in after if "sc-toy-gamma" in ms]
        assert gammas == [0.55, 0.65] and len(after) == len(before) + 2
        for knobs, methods in after:
            for m in methods:
                sweep = METHODS[m].sweep
                assert sweep is None or knobs[sweep.param] in sweep.values
        assert all(m in after[0][1] for m in SWEEP_POINTS)
    finally:
        unregister("sc-toy-swept")
        unregister("sc-toy-gamma")


#: what the report and live runs must take from the registry instead of writing it in
_MARS = Path(__file__).parents[2] / "mars"
REGISTRY_USERS = [
    p for d in ("report", "live", "simulate") for p in sorted((_MARS / d).rglob("*.py"))
]
_TOKEN = re.compile(r"(?<![\w-])[a-z0-9]+(?:-[a-z0-9]+)*(?![\w-])")


def method_literals(source: str) -> list[tuple[int, str]]:
    """(line, name) of every method name written in a string constant of ``source`` (a
    docstring says what code does; it is not read)."""
    tree = ast.parse(source)
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    names = set(METHODS) | set(ALIASES)
    return [
        (node.lineno, token)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
        for token in _TOKEN.findall(node.value)
        if token in names
    ]


def method_affixes(source: str) -> list[tuple[int, str]]:
    """(line, affix) of every test of a name by a piece of a method's name: ``.startswith(s)``,
    ``.endswith(s)`` or ``s in name`` where ``s`` (hyphens aside) is a run of whole words a
    method's name starts with, ends with or holds ("-cert", "oracle", "mars-")."""
    pieces = set()
    for name in [*METHODS, *ALIASES]:
        words = name.split("-")
        pieces |= {
            "-".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, len(words) + 1)
        }
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith")
        ):
            args = (
                node.args[0].elts
                if node.args and isinstance(node.args[0], ast.Tuple)
                else node.args
            )
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            args = [node.left]
        else:
            continue
        for arg in args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                if arg.value.strip("-") in pieces:
                    found.append((node.lineno, arg.value))
    return found


def test_no_method_name_is_written_in_the_report_or_live_runs():
    found = {str(p.relative_to(_MARS)): method_literals(p.read_text()) for p in REGISTRY_USERS}
    assert not {k: v for k, v in found.items() if v}
    assert method_literals('x = {"sc-mars-cal": 1}\ny = f"{x}.sc"') == [
        (1, "sc-mars-cal"),
        (2, "sc"),
    ]
    # nor is a method told by a piece of its name: what it is comes from the registry
    found = {str(p.relative_to(_MARS)): method_affixes(p.read_text()) for p in REGISTRY_USERS}
    assert not {k: v for k, v in found.items() if v}
    code = 'a = m.endswith("-cert")\nb = m.startswith(("oracle", "x"))\nc = "mars" in m\n'
    code += 'd = s.startswith("-")'
    assert method_affixes(code) == [(1, "-cert"), (2, "oracle"), (3, "mars")]


def _docs_blocks() -> list[str]:
    """The Python blocks of docs/methods.md's "Adding a method"."""
    text = (Path(__file__).parents[2] / "docs" / "methods.md").read_text()
    section = text.split("## Adding a method", 1)[1]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.mark.slow
def test_the_docs_add_a_method_example_runs(tmp_path):
    """docs/methods.md's blocks, pasted into a fresh interpreter, register a method with a new
    rule and one with a new launch policy; both run through `mars simulate`: the rule stops every
    iteration at its checkpoint, the halves walk two launches of half the budget each."""
    import subprocess
    import sys

    blocks = _docs_blocks()
    assert len(blocks) == 2
    pool = write_layout_pool(tmp_path / "pool", seed=3, n_questions=2)
    out = tmp_path / "out"
    args = [str(pool), "--method", "sc,sc-stop-at,sc-mars2-halves", "--out", str(out)]
    args += ["--budget", "16", "--iterations", "4", "--warmup", "4", "-q"]
    check = f"""
from mars.cli import main
from mars.method.registry import METHODS
from mars.method.walk import MethodRun, QuestionContext
from mars.method.settings import Settings
from mars.method.arrays import load_arrays
from mars.store.pool import open_pool

assert main(["simulate", *{args!r}]) == 0
q = open_pool({str(pool)!r}).read_question(0)
ctx = QuestionContext.sample(load_arrays(q), Settings(budget=16, iterations=4, warmup=4))
print(MethodRun(ctx, METHODS["sc-mars2-halves"]).launches())
"""
    script = tmp_path / "example.py"
    script.write_text("\n".join([*blocks, check]))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "[(0, 8), (8, 16)]"
    full = pd.read_csv(out / "sc" / "per_question.csv")
    stop_at = pd.read_csv(out / "sc-stop-at" / "per_question.csv")
    assert (stop_at["stopped_early"] == 4).all()
    assert (stop_at["tokens_mean"] < full["tokens_mean"]).all()
    halves = pd.read_csv(out / "sc-mars2-halves" / "per_iteration.csv")
    assert len(halves) == 8 and (halves["tokens"] <= halves["baseline_tokens"]).all()
    overall = json.loads((out / "sc-mars2-halves" / "overall.json").read_text())
    assert overall["method"] == "sc-mars2-halves" and overall["rounds"] == 8  # the first launch
    # a user waits for each launch's longest trace in turn
    assert (halves["seq_tokens"] >= halves["longest_tokens"]).all()
