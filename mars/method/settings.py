"""Every simulation setting, declared once.

Each field of :class:`Settings` is one setting: its type and default, and in its metadata the rest
of its declaration (:class:`mars.declare.Option`, the type every option is declared with): the help
text, the range it must lie in and what it changes:

* ``sampling`` — the bootstrap samples, the warmup, the arrays or the fitted switch model depend
  on it, so simulations that differ in it cannot share them;
* ``fit`` — the fit stage's artifact (``mars fit``) depends on it;
* ``live`` — ``mars solve`` takes it as an option (the others are fixed by a live run);
* ``section`` — the workflow config section that sets it (``simulation``, ``fit`` or
  ``probe``);
* ``symbol`` — its name in the report's labels.

The command-line options of ``mars simulate`` and ``mars solve``, the workflow's key list and
config schema (``python -m maint_tools.config_schema`` writes its ``simulation_params``; a test
checks the checked-in file), the report's labels and provenance commands derive from these fields,
and a test checks ``config/README.md`` against them. Adding a setting is one field here plus its
use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from ..declare import Option, by_name
from ..errors import SimulationError, UsageError
from ..store.grid import MIN_SPACING, Grid
from ..store.schema import CHECKPOINT_SPACING, FINALS

if TYPE_CHECKING:
    from ..store.pool import Pool

MAX_BUDGET = 1 << 16
MAX_ITERATIONS = 1_000_000
MAX_DRAWS = 1 << 26  # iterations × budget
MAX_SEED = 2**32 - 1
#: the evaluation protocols (:mod:`mars.method.protocol`)
PROTOCOLS = ("bootstrap", "parallel-probe")
#: where the probe-0 guard of the paper's MARS methods applies (:class:`mars.method.stopping.Mars`)
GUARDS = ("first", "tokens")


def _setting(
    default: Any,
    help: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    sampling: bool = False,
    fit: bool = False,
    live: bool = False,
    section: str = "simulation",
    symbol: str | None = None,
    choices: tuple[str, ...] | None = None,
) -> Any:
    """A field of :class:`Settings`, its declaration (:class:`mars.declare.Option`, less its name
    and type, which the field gives) in its metadata."""
    meta = {
        "choices": choices,
        "help": help,
        "low": low,
        "high": high,
        "low_open": low_open,
        "high_open": high_open,
        "sampling": sampling,
        "fit": fit,
        "live": live,
        "section": section,
        "symbol": symbol,
    }
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Settings:
    """The settings of a simulation (the defaults are the paper's)."""

    budget: int = _setting(
        512, "traces per bootstrap sample", low=1, high=MAX_BUDGET, sampling=True
    )
    iterations: int = _setting(
        64, "bootstrap iterations per question", low=1, high=MAX_ITERATIONS, sampling=True
    )
    warmup: int = _setting(
        16,
        "warmup traces: the first W of each question for the q-model, γ and probe-0 guard (0: "
        "none, so q = 1, γ = 1, no guard), the first W of each sample for the DeepConf threshold "
        "(DeepConf methods need 1 to budget)",
        low=0,
        high=MAX_BUDGET,
        sampling=True,
        fit=True,
    )
    seed: int = _setting(42, "bootstrap seed", low=0, high=MAX_SEED, sampling=True)
    finals: str = _setting(
        "trace",
        "final answers voted on: trace = each trace's own (its \\boxed{} answer; none without "
        "one, as in the paper), last-probe = a trace without one takes the answer of its last "
        "probe that gave one (for a model that does not box its answers)",
        sampling=True,
        fit=True,
        section="fit",
        choices=FINALS,
    )
    window: int = _setting(
        2048,
        "confidence window (tokens)",
        low=1,
        high=1 << 20,
        sampling=True,
        fit=True,
        live=True,
        section="fit",
    )
    spacing: int | None = _setting(
        None,
        "checkpoint spacing in tokens (default: the pool's probe spacing; must agree with it)",
        low=MIN_SPACING,
        high=1 << 24,
        sampling=True,
        fit=True,
        section="probe",
    )
    gamma: float = _setting(
        1.0, "γ for the uncalibrated MARS methods", low=0, live=True, symbol="γ"
    )
    ucb_z: float = _setting(
        1.0, "UCB bump z/√n of γ calibration (0 = off)", low=0, live=True, symbol="z"
    )
    gamma_min: float = _setting(0.5, "floor of calibrated γ", low=0, high=1, live=True)
    pp_conv: int = _setting(
        3,
        "Parallel-Probe: equal winners in a row to stop (u)",
        low=1,
        high=1 << 20,
        live=True,
        symbol="u",
    )
    pp_warmup: int = _setting(
        4, "Parallel-Probe: checkpoints before stopping/pruning", low=0, high=1 << 20, live=True
    )
    pp_patience: int = _setting(
        2,
        "Parallel-Probe: off-track checkpoints before pruning (k; 0 = no pruning)",
        low=0,
        high=1 << 20,
        live=True,
        symbol="k",
    )
    delta: float = _setting(
        0.05,
        "risk level δ of the certified MARS methods",
        low=0,
        high=1,
        low_open=True,
        high_open=True,
        live=True,
        symbol="δ",
    )
    risk_alpha: float | None = _setting(
        None,
        "risk level α of MARS2 (sc-mars2, dco-mars2): stop once P(final vote ≠ leader) ≤ α "
        "(default: the pipeline's fixed level, 0.1 SC / 0.02 DeepConf)",
        low=0,
        high=1,
        low_open=True,
        high_open=True,
        live=True,
        symbol="α",
    )
    consensus: float = _setting(
        0.9,
        "vote share at which sc-consensus stops",
        low=0,
        high=1,
        low_open=True,
        live=True,
        symbol="share",
    )
    protocol: str = _setting(
        "bootstrap",
        "evaluation protocol: bootstrap (the MARS paper's) or parallel-probe (Parallel-Probe's "
        "evaluator: shuffles, exact answers, step costs; mars/method/protocol.py)",
        sampling=True,
        choices=PROTOCOLS,
    )
    sac_n: int = _setting(
        14,
        "per-trace convergence exit (sc-sac, single-sac): a running trace stops after this many "
        "equal probe answers in a row and votes with that answer",
        low=1,
        high=1 << 20,
        live=True,
        symbol="n",
    )
    asc_threshold: float = _setting(
        0.95,
        "Adaptive-Consistency (asc): stop drawing once P(leader beats the runner-up) under "
        "Beta(v1+1, v2+1) exceeds this",
        low=0,
        high=1,
        low_open=True,
        high_open=True,
        symbol="C",
    )
    esc_window: int = _setting(
        8,
        "Early-Stopping Self-Consistency (esc): traces per window; stop at the first unanimous "
        "window",
        low=1,
        high=MAX_BUDGET,
        symbol="w",
    )
    ppm_stable: int = _setting(
        40,
        "Parallel-Probe's main-table controller (pp-main, pp-main-keep): the majority must stay "
        "the same this many probe steps in a row to stop (their T)",
        low=1,
        high=1 << 20,
        live=True,
        symbol="T",
    )
    ppm_warmup: int = _setting(
        15,
        "Parallel-Probe's main-table controller: probe steps before pruning starts",
        low=0,
        high=1 << 20,
        live=True,
    )
    ppm_patience: int = _setting(
        7,
        "Parallel-Probe's main-table controller: steps off the majority in a row that prune a "
        "trace",
        low=1,
        high=1 << 20,
        live=True,
        symbol="k",
    )
    wave_size: int = _setting(
        16,
        "traces per wave of the width-adaptive method (sc-mars2-waves): a wave is launched when "
        "the previous one has ended without a stop; the smallest first launch of sc-mars2-launch "
        "(its first launch with a calibration)",
        low=1,
        high=MAX_BUDGET,
        symbol="wave",
        live=True,
    )
    guard: str = _setting(
        "first",
        "probe-0 guard of the paper's MARS methods (the leader must be the warmup traces' "
        "majority final answer): first = at the first checkpoint, as the reference; tokens = at "
        "every checkpoint before 4,096 tokens, the paper's 2,048 grid's second one, whatever "
        "the probe spacing (the same on that grid; docs/beyond.md)",
        live=True,
        choices=GUARDS,
    )
    ppm_max_steps: int = _setting(
        100,
        "Parallel-Probe's main-table controller: probe steps after the first at most, then the "
        "majority answers",
        low=1,
        high=1 << 24,
        live=True,
    )

    def validate(self, keywords: bool = False) -> Settings:
        """Check every setting against its declaration; raise a one-line :class:`UsageError`
        naming the setting by its command-line flag (``--gamma -1``), or with ``keywords`` as the
        library's keyword (``gamma=-1``)."""
        for spec in SETTINGS:
            spec.check(getattr(self, spec.name), keywords, error=SimulationError)
        draws = self.budget * self.iterations
        if draws > MAX_DRAWS:
            raise SimulationError(
                f"--budget × --iterations = {draws:,}: more than {MAX_DRAWS:,} draws per question"
            )
        return self

    def replace(self, **changes: Any) -> Settings:
        return replace(self, **changes)

    def sampling_key(self) -> tuple:
        """The settings that decide samples, warmup, arrays and q: equal keys can share them."""
        return tuple(getattr(self, name) for name in SAMPLING_KEYS)

    def to_dict(self) -> dict:
        return asdict(self)


def _specs() -> tuple[Option, ...]:
    hints = {"int": int, "float": float, "str": str, "int | None": int, "float | None": float}
    return tuple(
        Option(f.name, hints[str(f.type)], default=f.default, panel="Settings", **f.metadata)
        for f in fields(Settings)
    )


#: The declarations, in field order.
SETTINGS: tuple[Option, ...] = _specs()
SPECS: dict[str, Option] = by_name(SETTINGS)
#: Settings that decide samples, warmup, arrays and the switch model.
SAMPLING_KEYS: tuple[str, ...] = tuple(s.name for s in SETTINGS if s.sampling)
#: Settings the fit stage depends on.
FIT_KEYS: tuple[str, ...] = tuple(s.name for s in SETTINGS if s.fit)
#: Settings `mars solve` takes (the stopping rules' knobs and the confidence window).
LIVE_KEYS: tuple[str, ...] = tuple(s.name for s in SETTINGS if s.live)


def from_dict(values: dict, *, strict: bool = True) -> Settings:
    """Settings from a dict (e.g. ``overall.json``'s ``settings``); unknown keys are an error
    unless ``strict`` is False."""
    unknown = sorted(set(values) - set(SPECS))
    if unknown and strict:
        raise UsageError(f"unknown settings {unknown} (known: {', '.join(SPECS)})")
    return Settings(**{k: v for k, v in values.items() if k in SPECS})


def sampling_of(settings: dict) -> dict:
    """The sampling settings of a run's settings dict (``overall.json``); a setting it does not
    record (a run made before the setting existed) ran with the setting's default."""
    return {k: settings.get(k, SPECS[k].default) for k in SAMPLING_KEYS}


def same_sampling(a: dict, b: dict) -> bool:
    """Whether two runs' settings dicts (``overall.json``) drew the same samples, warmup and q."""
    return sampling_of(a) == sampling_of(b)


def pool_grid(requested: int | None, recorded: Grid | None, source: str) -> Grid:
    """The checkpoint grid of a pool: the one it records, else ``requested``, else 2,048.

    An explicit ``--spacing`` that disagrees with the pool's recorded probe spacing is an error:
    simulating a 1,024-spaced pool on a 2,048 grid would silently skip every other checkpoint.
    """
    if requested is not None and recorded is not None and int(requested) != recorded.spacing:
        raise UsageError(
            f"{source}: --spacing {requested} disagrees with the pool's probe spacing "
            f"{recorded.spacing} (leave --spacing out to use the pool's)"
        )
    if recorded is not None:
        return recorded
    return Grid.checked(CHECKPOINT_SPACING if requested is None else requested)


def pool_settings(pool: Pool, settings: Settings) -> Settings:
    """``settings`` with the pool's checkpoint spacing filled in (an explicit one must agree)."""
    grid = pool_grid(settings.spacing, pool.grid, pool.source)
    return settings.replace(spacing=grid.spacing)


def check_warmup(warmup: int, traces: Mapping[int, int], source: str) -> None:
    """Refuse a warmup larger than a question's traces (``traces``: count per question): it would
    silently shrink to all of them."""
    if not traces:
        return
    q = min(traces, key=lambda k: (traces[k], k))
    if warmup > traces[q]:
        raise SimulationError(
            f"--warmup {warmup}: question {q} of {source} has only {traces[q]} traces "
            "(the warmup is the first --warmup of them)"
        )
