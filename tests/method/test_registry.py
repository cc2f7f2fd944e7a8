"""The method registry (mars.method.registry): each method is a composition of voting, DeepConf
filter, stopping rule, q and role, as the table of reference-protocol §5.3 and the module's
docstring give them; lookups, selection, ordering and registration."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from mars.errors import SimulationError, UsageError
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
    Method,
    Stopping,
    get_method,
    live_method,
    method_order,
    parse_methods,
    register,
    select_methods,
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
)
from mars.method.voting import CONFIDENCE

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
    assert not METHODS["sc-mars2-waves"].live


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
    return SimpleNamespace(s=dataclasses.replace(Settings(), **settings), warm_ref=2)


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
