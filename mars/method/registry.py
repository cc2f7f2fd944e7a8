"""The simulator's methods: what votes, what filters, what stops, which q and which γ.

A method is a composition of parts (:class:`Method`): its voting (:mod:`mars.method.voting`), its
filter (:mod:`mars.method.deepconf`), a rule factory (:class:`Stopping`), the q its rule reads, its
launch policy (:mod:`mars.method.launch`) and its role in the report; :func:`register` adds one
(docs/methods.md).

Every method, what it does and its settings: the table in docs/methods.md, written from these
declarations by ``python -m maint_tools.gen_docs``. ``sc`` is the reference's ``offline``
(reference-protocol §5.3); the names of its 14 methods (``reference=True``) keep its meaning.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import SimulationError, UsageError
from .deepconf import DEEPCONF_ONLINE, KEEP_ALL, Filter
from .launch import EARLY, PLANNED, TOGETHER, WAVES, Launch
from .voting import CONFIDENCE, UNIFORM, Voting

if TYPE_CHECKING:
    from .learned import Calibration
    from .stopping import QuestionView, Rule


@dataclass(frozen=True)
class Stopping:
    """A rule factory: builds a method's stopping rule for one question (``build(ctx, method, γ,
    **options)``), and says beforehand what the walk and live runs must know of the rule.

    ``gamma`` is the γ the simulator hands the rule (and records): ``setting`` (``--gamma``),
    ``calibrated`` (on the warmup with oracle q, reference-protocol §7) or ``one``.
    ``reads_future``: the rule looks at the traces' full-budget outcome (oracle bounds), so the
    method cannot run live. ``samples_more``: the rule decides how many traces to draw, one round
    after another, instead of stopping running traces (:attr:`mars.method.stopping.Rule.draws`); a
    live
    run, which starts its traces together, cannot run it. ``summary`` and ``knobs`` describe
    the rule in docs/methods.md's table of methods.
    """

    kind: str
    build: Callable[..., Rule]
    options: tuple[tuple[str, Any], ...] = ()
    gamma: str = "setting"
    reads_future: bool = False
    samples_more: bool = False
    #: when the rule stops, in a line (docs/methods.md's table)
    summary: str = ""
    #: the settings (:class:`mars.method.settings.Settings` fields) the rule reads
    knobs: tuple[str, ...] = ()
    #: the rule reads the question's warmup traces (its guard, γ, transitions): a live run
    #: generates them before its main traces, and pays for them (:attr:`Method.pays_warmup`)
    warmup: bool = False

    def rule(self, ctx: QuestionView, method: Method, gamma: Any) -> Rule:
        return self.build(ctx, method, gamma, **dict(self.options))


def _never(ctx: QuestionView, method: Method, gamma: Any) -> Rule:
    from .stopping import Never

    return Never()


def _mars(ctx: QuestionView, method: Method, gamma: Any, certified: bool = False) -> Rule:
    from .stopping import GUARD_BEFORE, Mars

    calibrated = ctx.calibration is not None  # which replaces the warmup
    return Mars(
        gamma=gamma,
        guard_answer=ctx.warm_ref,
        guard_before=GUARD_BEFORE if ctx.s.guard == "tokens" else None,
        # no warmup majority to confirm a leader with: no stop within the guard's reach
        hold_before=GUARD_BEFORE if calibrated else None,
        certified=certified,
        delta=ctx.s.delta,
        label="certified" if certified else "margin",
    )


def _risk(ctx: QuestionView, method: Method, gamma: Any) -> Rule:
    from .riskstop import RiskStop

    cal = ctx.calibration
    if cal is not None:  # learned once, across questions: no warmup (mars.method.learned)
        check_calibrated(method)
        return RiskStop.calibrated(cal, ctx.s.risk_alpha)
    arr, warm = ctx.arr, ctx.warm
    return RiskStop.for_question(
        arr.final_ids[warm],
        arr.n_answers,
        deepconf=not method.filter.keeps_all,
        warm_min_group=None if arr.min_group is None else arr.min_group[warm],
        alpha=ctx.s.risk_alpha,
        warm_ids=arr.ids[warm],
        warm_running=arr.run_lengths[warm][:, None] > arr.grid[None, :],
    )


def check_calibrated(method: Method, calibration: Calibration | None = None) -> None:
    """A calibration serves the MARS rules under self-consistency; the paper's (a switch model,
    γ) only from a calibration that holds them (one line otherwise)."""
    if not method.filter.keeps_all:
        raise SimulationError(
            f"method {method.name}: a calibration serves self-consistency's rules (DeepConf's "
            "filter reads its own warmup traces)"
        )
    papers = method.rule.kind in ("mars", "certified")  # they read q and γ of a warmup
    if calibration is not None and papers and calibration.switch is None:
        raise SimulationError(
            f"method {method.name}: the calibration holds no switch model or γ (fitted by an "
            "older mars calibrate: fit it again)"
        )


def _parallel_probe(ctx: QuestionView, method: Method, gamma: Any, faithful: bool = False) -> Rule:
    from .stopping import ParallelProbe

    s = ctx.s
    return ParallelProbe(
        conv=s.pp_conv, warmup=s.pp_warmup, patience=s.pp_patience, faithful=faithful
    )


def _consensus(ctx: QuestionView, method: Method, gamma: Any) -> Rule:
    from .stopping import Consensus

    return Consensus(share=ctx.s.consensus)


def _controller(ctx: QuestionView, method: Method, gamma: Any, keep_votes: bool = False) -> Rule:
    from .stopping import ProbeController

    s = ctx.s
    return ProbeController(
        stable=s.ppm_stable,
        warmup=s.ppm_warmup,
        patience=s.ppm_patience,
        keep_votes=keep_votes,
        max_steps=s.ppm_max_steps,
    )


def _convergence_exit(ctx: QuestionView, method: Method, gamma: Any) -> Rule:
    from .stopping import ConvergenceExit

    return ConvergenceExit(n=ctx.s.sac_n)


def _adaptive_consistency(ctx: QuestionView, method: Method, gamma: Any) -> Rule:
    from .stopping import AdaptiveConsistency

    return AdaptiveConsistency(threshold=ctx.s.asc_threshold)


def _early_stopping(ctx: QuestionView, method: Method, gamma: Any) -> Rule:
    from .stopping import EarlyStopping

    return EarlyStopping(window=ctx.s.esc_window)


def _oracle(ctx: QuestionView, method: Method, gamma: Any, last: bool = False) -> Rule:
    from .stopping import OracleStop

    return OracleStop(last=last)


_MARS_TEST = "the leader's margin beats γ × the votes that may still switch (MARS)"
NEVER = Stopping("never", _never, summary="never: the full-budget vote")
MARS = Stopping("mars", _mars, summary=_MARS_TEST, knobs=("gamma", "guard"), warmup=True)
MARS_CALIBRATED = Stopping(
    "mars",
    _mars,
    gamma="calibrated",
    summary=_MARS_TEST,
    knobs=("ucb_z", "gamma_min", "guard"),
    warmup=True,
)
MARS_CERTIFIED = Stopping(
    "certified",
    _mars,
    (("certified", True),),
    gamma="one",
    summary="the paper's certified rule (Corollary 1): the margin beats the votes that may still "
    "switch plus a Hoeffding term ε = w_max·√(2·N_active·ln(N/δ)); finished traces q = 0, "
    "abstaining running traces neutral voters",
    knobs=("delta", "guard"),
    warmup=True,
)
RISK = Stopping(
    "risk",
    _risk,
    summary="MARS2: the predicted P(full-budget vote ≠ leader) ≤ α, from the warmup traces in the "
    "same state (who leaves an answer and where they land; docs/beyond.md)",
    knobs=("risk_alpha",),
    warmup=True,
)
_PP = ("pp_conv", "pp_warmup", "pp_patience")
PARALLEL_PROBE = Stopping(
    "pp",
    _parallel_probe,
    summary="Parallel-Probe as the MARS reference runs it: the same leader u checkpoints in a "
    "row; its pruning changes neither tokens nor answer",
    knobs=_PP,
)
PARALLEL_PROBE_PRUNING = Stopping(
    "pp",
    _parallel_probe,
    (("faithful", True),),
    summary="Parallel-Probe as its authors define it: pruned traces stop voting and stop costing "
    "tokens",
    knobs=_PP,
)
CONSENSUS = Stopping(
    "consensus",
    _consensus,
    summary="the leader holds a share of the votes",
    knobs=("consensus",),
)
_PPM = ("ppm_stable", "ppm_warmup", "ppm_patience", "ppm_max_steps")
PROBE_CONTROLLER = Stopping(
    "pp-main",
    _controller,
    summary="Parallel-Probe's main-table controller: the majority stays the same for a number of "
    "probe steps; a trace off it long enough is pruned (stops costing tokens and voting)",
    knobs=_PPM,
)
PROBE_CONTROLLER_KEEP = Stopping(
    "pp-main",
    _controller,
    (("keep_votes", True),),
    summary="the same controller; a pruned trace keeps voting with its answer at the prune",
    knobs=_PPM,
)
CONVERGENCE_EXIT = Stopping(
    "sac",
    _convergence_exit,
    summary="per-trace exit: a trace stops once its last n probe answers agree, and votes with "
    "that answer",
    knobs=("sac_n",),
)
ADAPTIVE_CONSISTENCY = Stopping(
    "asc",
    _adaptive_consistency,
    samples_more=True,
    summary="sample more, one trace per round (Adaptive-Consistency): stop once "
    "1 − BetaCDF(0.5; v1 + 1, v2 + 1) exceeds the threshold",
    knobs=("asc_threshold",),
)
EARLY_STOPPING = Stopping(
    "esc",
    _early_stopping,
    samples_more=True,
    summary="sample more, a window per round (ESC): stop at the first unanimous window",
    knobs=("esc_window",),
)
ORACLE_FIRST = Stopping(
    "oracle",
    _oracle,
    reads_future=True,
    summary="oracle: the first checkpoint whose leader is the full-budget answer",
)
ORACLE_LAST = Stopping(
    "oracle",
    _oracle,
    (("last", True),),
    reads_future=True,
    summary="oracle: one checkpoint after the last disagreement with the full-budget answer",
)


@dataclass(frozen=True)
class Sweep:
    """What a method's trade-off curve varies (``mars report --tradeoff``): one setting over
    ``values``, drawn as the curve ``title``."""

    title: str
    param: str  # a Settings field
    values: tuple[float, ...]
    #: a setting the value cannot exceed: a larger value acts as that one (an ESC window or a
    #: wave larger than the budget is one window, one wave, of the whole budget)
    bound: str | None = None

    def effective(self, settings: dict) -> Any:
        """The value a run with these settings really used (its point on the curve)."""
        value = settings.get(self.param)
        cap = settings.get(self.bound) if self.bound else None
        if value is None or cap is None:
            return value
        return min(value, cap)


@dataclass(frozen=True)
class Method:
    """A method: how it votes, what filters, what stops it, which q, and its role in the report.

    ``label`` is the display name; ``{setting}`` in it shows that setting as ``symbol=value``
    (``{gamma}`` → ``γ=1``) and ``{setting:value}`` its value alone (from the run's settings).
    ``group`` is its family and orders the report's rows: the SC pipeline, the DeepConf pipeline,
    other stopping baselines, oracle bounds. ``sweep`` is what its trade-off curve varies. ``q`` is
    the switch probability its rule reads (``learned``, ``oracle``, or None for a rule that reads
    none).
    """

    name: str
    label: str
    rule: Stopping = NEVER
    group: str = "sc"  # sc | dco | other | oracle
    voting: Voting = UNIFORM  # how a vote weighs (UNIFORM, CONFIDENCE)
    filter: Filter = KEEP_ALL  # which traces vote (KEEP_ALL, DEEPCONF_ONLINE)
    q: str | None = None  # learned | oracle | None
    reference: bool = False  # one of the 14 methods of the authors' simulator
    sweep: Sweep | None = None
    width: int | None = None  # traces of each sample it runs (None: the budget)
    #: when the sample's traces start: TOGETHER, in WAVES of ``wave_size`` (settings), the rule
    #: deciding at every checkpoint of a wave whether to stop and at its end whether to launch
    #: the next, or PLANNED from the warmup (:mod:`mars.method.launch`)
    launch: Launch = TOGETHER

    @property
    def needs_confs(self) -> bool:
        return self.voting.needs_confs or self.filter.needs_confs

    @property
    def baseline(self) -> str:
        """The full-budget vote this method's answer and savings are compared with."""
        return "dco" if self.voting.needs_confs else self.filter.pipeline

    @property
    def is_baseline(self) -> bool:
        """A full-budget vote: it never stops early."""
        return self.rule.kind == "never"

    @property
    def pays_warmup(self) -> bool:
        """A live run of it generates the question's warmup traces before its main traces: its
        rule, its q or its launch plan reads them. What a user pays for a question is then the
        warmup, the main traces and the probes (the paper's accounting charges the warmup
        nothing)."""
        return self.rule.warmup or self.q == "learned" or self.launch.reads_warmup

    @property
    def reads_future(self) -> bool:
        """Its rule or its q looks at the traces' outcome (an oracle)."""
        return self.rule.reads_future or self.q == "oracle"

    @property
    def live(self) -> bool:
        """It can decide on a live run: nothing from the future, no DeepConf filter (which
        truncates traces token by token inside the engine), all traces started together."""
        return (
            not self.reads_future
            and self.filter.live
            and not self.rule.samples_more
            and self.width is None
            and self.launch.live
        )


_METHODS = [
    Method("sc", "SC (baseline)", reference=True),
    Method(
        "dco",
        "DCO (baseline)",
        group="dco",
        voting=CONFIDENCE,
        filter=DEEPCONF_ONLINE,
        reference=True,
    ),
    Method(
        "sc-mars",
        "MARS ({gamma})",
        MARS,
        q="learned",
        reference=True,
        sweep=Sweep("MARS, fixed γ", "gamma", (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)),
    ),
    Method("sc-mars-cal", "MARS", MARS_CALIBRATED, q="learned", reference=True),
    Method("sc-mars-oracle", "MARS (oracle q, {gamma})", MARS, q="oracle", reference=True),
    Method("sc-mars-oracle-cal", "MARS (oracle q)", MARS_CALIBRATED, q="oracle", reference=True),
    Method(
        "dco-mars",
        "DCO + MARS ({gamma})",
        MARS,
        group="dco",
        filter=DEEPCONF_ONLINE,
        q="learned",
        reference=True,
    ),
    Method(
        "dco-mars-cal",
        "DCO + MARS",
        MARS_CALIBRATED,
        group="dco",
        voting=CONFIDENCE,
        filter=DEEPCONF_ONLINE,
        q="learned",
        reference=True,
    ),
    Method(
        "dco-mars-oracle",
        "DCO + MARS (oracle q, {gamma})",
        MARS,
        group="dco",
        voting=CONFIDENCE,
        filter=DEEPCONF_ONLINE,
        q="oracle",
        reference=True,
    ),
    Method(
        "sc-pp",
        "Parallel-Probe ({pp_conv})",
        PARALLEL_PROBE,
        group="other",
        reference=True,
        sweep=Sweep("Parallel-Probe, u", "pp_conv", (1, 2, 3, 4, 6)),
    ),
    Method("oracle-first", "Oracle stop, first", ORACLE_FIRST, group="oracle", reference=True),
    Method("oracle-last", "Oracle stop, absorbing", ORACLE_LAST, group="oracle", reference=True),
    Method(
        "oracle-dco-first",
        "DCO oracle stop, first",
        ORACLE_FIRST,
        group="oracle",
        voting=CONFIDENCE,
        filter=DEEPCONF_ONLINE,
        reference=True,
    ),
    Method(
        "oracle-dco-last",
        "DCO oracle stop, absorbing",
        ORACLE_LAST,
        group="oracle",
        voting=CONFIDENCE,
        filter=DEEPCONF_ONLINE,
        reference=True,
    ),
    # new
    Method(
        "sc-mars-cert",
        "MARS certified ({delta})",
        MARS_CERTIFIED,
        q="learned",
        sweep=Sweep("MARS certified, δ", "delta", (0.01, 0.05, 0.2, 0.5)),
    ),
    Method("sc-mars-oracle-cert", "MARS certified (oracle q, {delta})", MARS_CERTIFIED, q="oracle"),
    Method(
        "dco-mars-cert",
        "DCO + MARS certified ({delta})",
        MARS_CERTIFIED,
        group="dco",
        voting=CONFIDENCE,
        filter=DEEPCONF_ONLINE,
        q="learned",
    ),
    Method(
        "sc-pp-faithful",
        "Parallel-Probe, pruning ({pp_conv})",
        PARALLEL_PROBE_PRUNING,
        group="other",
    ),
    Method(
        "sc-consensus",
        "Consensus (share ≥ {consensus:value})",
        CONSENSUS,
        group="other",
        sweep=Sweep("Consensus, share", "consensus", (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)),
    ),
    # the field's other stopping families (docs/baselines.md), Parallel-Probe's parameters
    Method(
        "pp-main",
        "Parallel-Probe, main table ({ppm_stable})",
        PROBE_CONTROLLER,
        group="other",
    ),
    Method(
        "pp-main-keep",
        "Parallel-Probe, pruned keep voting ({ppm_stable})",
        PROBE_CONTROLLER_KEEP,
        group="other",
    ),
    Method("sc-sac", "SC + convergence exit ({sac_n})", CONVERGENCE_EXIT, group="other"),
    Method(
        "single-sac",
        "One trace, convergence exit ({sac_n})",
        CONVERGENCE_EXIT,
        group="other",
        width=1,
    ),
    Method(
        "asc",
        "Adaptive-Consistency ({asc_threshold})",
        ADAPTIVE_CONSISTENCY,
        group="other",
        sweep=Sweep("Adaptive-Consistency, threshold", "asc_threshold", (0.8, 0.9, 0.95, 0.99)),
    ),
    Method(
        "esc",
        "ESC ({esc_window})",
        EARLY_STOPPING,
        group="other",
        sweep=Sweep("ESC, window", "esc_window", (2, 4, 8, 16), bound="budget"),
    ),
    # beyond the paper (docs/beyond.md): predictive risk instead of the adversarial bound
    Method("sc-mars2", "MARS2 (predictive risk)", RISK, q="learned"),
    Method(
        "sc-mars2-waves",
        "MARS2 in waves ({wave_size})",
        RISK,
        q="learned",
        launch=WAVES,
        sweep=Sweep("MARS2 in waves, wave size", "wave_size", (8, 16, 32), bound="budget"),
    ),
    Method(
        "sc-mars2-launch",
        "MARS2, launch planned ({wave_size})",
        RISK,
        q="learned",
        launch=PLANNED,
    ),
    Method(
        "sc-mars2-early",
        "MARS2, the rest launched early ({wave_size})",
        RISK,
        q="learned",
        launch=EARLY,
    ),
    Method(
        "dco-mars2",
        "DCO + MARS2 (predictive risk)",
        RISK,
        group="dco",
        voting=CONFIDENCE,
        filter=DEEPCONF_ONLINE,
        q="learned",
    ),
]

METHODS: dict[str, Method] = {m.name: m for m in _METHODS}
REFERENCE_METHODS = [m.name for m in _METHODS if m.reference]
#: Aliases for the reference CLI's names.
ALIASES = {"offline": "sc"}
GROUPS = ("sc", "dco", "other", "oracle")
#: the pipelines, each named by the full-budget vote its methods are measured against
#: (:attr:`Method.baseline`), and their names in the report
PIPELINES = {"sc": "SC", "dco": "DeepConf"}
#: the pipelines' keys, for what the report shows of one of them (Fig. 1 right, Table 2)
SELF_CONSISTENCY, DEEPCONF = PIPELINES
#: what live runs and the library decide with unless told otherwise
DEFAULT_METHOD = "sc-mars-cal"
#: the default method where a calibration learned once replaces the warmup (docs/simulate.md)
CALIBRATED_METHOD = "sc-mars2-early"


@dataclass(frozen=True)
class Role:
    """A part the report gives a method in every pipeline, made by its rule and its q: the
    report asks the registry which method plays it (no method name written in the report)."""

    rule: Stopping
    q: str | None = None

    def members(self) -> list[str]:
        """Its methods, in registry order."""
        return [m.name for m in _METHODS if m.rule == self.rule and m.q == self.q]

    def of(self, pipeline: str) -> str:
        """Its method in ``pipeline`` (a key of :data:`PIPELINES`)."""
        for name in self.members():
            if METHODS[name].baseline == pipeline:
                return name
        raise LookupError(f"no {pipeline} method has rule {self.rule.kind} and q {self.q}")


#: the headline (Table 1, Fig. 1): MARS with per-question γ and the learned switch model
CALIBRATED_MARS = Role(MARS_CALIBRATED, "learned")
#: MARS at the ``--gamma`` setting, what calibration and oracle q are compared with (Fig. 4)
FIXED_GAMMA_MARS = Role(MARS, "learned")
#: MARS reading the oracle switch probability (Fig. 4b)
ORACLE_Q_MARS = Role(MARS, "oracle")
#: the oracle stops (the frontier's and the oracle tables' reference points)
ORACLE_FIRST_STOP = Role(ORACLE_FIRST)
ORACLE_LAST_STOP = Role(ORACLE_LAST)
#: Parallel-Probe as the MARS reference emulates it, and with its authors' pruning (Table 2)
PROBE_STOP = Role(PARALLEL_PROBE)
PROBE_PRUNING_STOP = Role(PARALLEL_PROBE_PRUNING)


def get_method(name: str) -> Method:
    name = ALIASES.get(name, name)
    try:
        return METHODS[name]
    except KeyError:
        raise UsageError(f"unknown method {name!r} (known: {', '.join(METHODS)})") from None


#: names that stand for several methods: what the pool's data supports of them
METHOD_GROUPS = {"all": list(METHODS), "reference": REFERENCE_METHODS}


def register(method: Method) -> Method:
    """Add a method to the registry: the simulator, live runs (if :attr:`Method.live`), ``all``
    and the report's ordering know it from here on (in this process)."""
    if method.name in METHODS or method.name in METHOD_GROUPS or method.name in ALIASES:
        raise UsageError(f"method {method.name!r} is already known")
    if method.group not in GROUPS:
        raise UsageError(f"method {method.name}: group {method.group!r} is not one of {GROUPS}")
    _METHODS.append(method)
    METHODS[method.name] = method
    METHOD_GROUPS["all"].append(method.name)
    return method


def unregister(name: str) -> None:
    """Remove a method :func:`register` added (the reference's methods stay)."""
    method = METHODS[name]
    if method.reference:
        raise UsageError(f"method {name!r} is a reference method")
    _METHODS.remove(method)
    del METHODS[name]
    METHOD_GROUPS["all"].remove(name)


def live_methods() -> list[str]:
    """The methods that can decide on a live run (:attr:`Method.live`)."""
    return [m.name for m in _METHODS if m.live]


def live_method(method: str | Method) -> Method:
    """The method, if it can decide on a live run (:attr:`Method.live`); a clear error
    otherwise."""
    m = get_method(method) if isinstance(method, str) else method
    if not m.filter.live:
        raise SimulationError(
            f"method {m.name}: DeepConf's online filter truncates traces token by token inside "
            f"the engine; live mode runs {', '.join(live_methods())}"
        )
    if m.reads_future:
        raise SimulationError(
            f"method {m.name} reads the traces' future (oracle); it cannot run live"
        )
    if not m.live:
        raise SimulationError(
            f"method {m.name} draws its traces one round after another; live mode starts the "
            f"traces together and runs {', '.join(live_methods())}"
        )
    return m


def parse_methods(spec: str) -> list[Method]:
    """``"sc,sc-mars-cal"`` or ``"all"`` / ``"reference"`` → methods (order kept, no duplicates)."""
    return select_methods(spec, has_confs=True)[0]


def select_methods(spec: str, has_confs: bool) -> tuple[list[Method], list[str]]:
    """The methods of ``spec`` a pool can run, and the names a group left out.

    A group (``all``, ``reference``) means every member the pool's data supports: without
    per-token confidences its DeepConf methods are left out. A method named on its own is kept
    (and refused by the simulator if the pool cannot run it).
    """
    names: list[str] = []
    left_out: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if part in METHOD_GROUPS:
            for name in METHOD_GROUPS[part]:
                fits = has_confs or not METHODS[name].needs_confs
                (names if fits else left_out).append(name)
        else:
            names.append(get_method(part).name)
    seen = dict.fromkeys(names)
    if not seen:
        raise UsageError("no method given")
    return [METHODS[n] for n in seen], [n for n in dict.fromkeys(left_out) if n not in seen]


def method_order(names) -> list[str]:
    """Known methods by group (SC, DeepConf, other baselines, oracles) in registry order, then the
    unknown ones alphabetically."""
    known = [m.name for g in GROUPS for m in _METHODS if m.group == g and m.name in names]
    return known + sorted(n for n in names if n not in METHODS)


#: the single points a trade-off figure draws beside the curves (self-consistency votes): the
#: full-budget vote, calibrated MARS and the oracle-first stop
SWEEP_POINTS = (
    SELF_CONSISTENCY,
    CALIBRATED_MARS.of(SELF_CONSISTENCY),
    ORACLE_FIRST_STOP.of(SELF_CONSISTENCY),
)


def swept_methods() -> list[str]:
    """The methods that declare a sweep, in the report's order."""
    return method_order([n for n, m in METHODS.items() if m.sweep is not None])


def sweep_settings(names=None) -> list[tuple[dict, list[str]]]:
    """Every declared sweep as a few ordinary simulation settings: setting ``i`` gives each swept
    setting its ``i``-th value and runs the methods that sweep it (the first also runs
    :data:`SWEEP_POINTS`). Point ``i`` of every curve thus shares one simulation; a method reads
    only its own knob, so the other knobs' values there do not move its point (checked in
    tests/method/test_registry.py). Methods sweeping one setting over other values get settings of
    their own."""
    names = swept_methods() if names is None else method_order(names)
    out: list[tuple[dict, list[str]]] = []
    for name in names:
        sweep = get_method(name).sweep
        if sweep is None:
            raise UsageError(
                f"method {name} declares no sweep (swept: {', '.join(swept_methods())})"
            )
        slot = 0
        for value in sweep.values:
            while slot < len(out) and out[slot][0].get(sweep.param, value) != value:
                slot += 1
            if slot == len(out):
                out.append(({}, []))
            out[slot][0][sweep.param] = value
            out[slot][1].append(name)
            slot += 1
    if out:
        out[0][1].extend(m for m in SWEEP_POINTS if m not in out[0][1])
    return out
