"""The simulator's methods: what votes, what filters, what stops, which q and which γ.

Names with the reference's meaning (reference-protocol §5.3; ``sc`` is its ``offline``):

==================  =======  ========  =============================  =======  =====================
method              weights  DeepConf  stopping                       q        γ
==================  =======  ========  =============================  =======  =====================
sc                  uniform  no        never (full-budget vote)       –        –
dco                 conf     yes       never                          –        –
sc-mars             uniform  no        MARS                           learned  ``--gamma``
sc-mars-cal         uniform  no        MARS                           learned  calibrated (oracle q
                                                                               on warmup)
sc-mars-oracle      uniform  no        MARS                           oracle   ``--gamma``
sc-mars-oracle-cal  uniform  no        MARS                           oracle   calibrated (oracle q)
dco-mars            uniform  yes       MARS                           learned  ``--gamma``
dco-mars-cal        conf     yes       MARS                           learned  calibrated (oracle q,
                                                                               conf, filter)
dco-mars-oracle     conf     yes       MARS                           oracle   ``--gamma``
sc-pp               uniform  no        Parallel-Probe (reference)     –        –
oracle-first        uniform  no        first checkpoint = final vote  –        –
oracle-last         uniform  no        one after last disagreement    –        –
oracle-dco-first    conf     yes       as oracle-first                –        –
oracle-dco-last     conf     yes       as oracle-last                 –        –
==================  =======  ========  =============================  =======  =====================

New methods (not in the reference):

* ``sc-mars-cert`` / ``sc-mars-oracle-cert`` / ``dco-mars-cert`` — the paper's certified rule
  (Corollary 1): γ = 1, finished traces q = 0, Hoeffding term with ``--delta``, no probe-0 guard.
* ``sc-pp-faithful`` — Parallel-Probe as its authors define it: pruned traces stop voting and
  stop costing tokens; the answer is the unpruned vote.
* ``sc-consensus`` — stop once the leader holds ``--consensus`` of the votes.
* ``sc-mars2`` / ``dco-mars2`` — MARS2 (:mod:`mars.riskstop`): stop once the predicted
  probability that the full-budget vote differs from the leader is at most ``--risk-alpha``
  (docs/beyond.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import UsageError


@dataclass(frozen=True)
class Method:
    """A method: what votes, what filters, what stops, which q, which γ, and how it is shown.

    ``label`` is the display name; ``{setting}`` in it shows that setting as ``symbol=value``
    (``{gamma}`` → ``γ=1``) and ``{setting:value}`` its value alone (from the run's settings).
    ``group`` orders the report's rows: the SC pipeline, the DeepConf pipeline, other stopping
    baselines, oracle bounds.
    """

    name: str
    label: str
    group: str = "sc"  # sc | dco | other | oracle
    conf_weights: bool = False
    deepconf: bool = False
    stopping: str = "never"  # never | mars | risk | pp | oracle-first | oracle-last | consensus
    q: str = "learned"  # learned | oracle
    calibrate: bool = False  # γ calibrated on the warmup with oracle q
    certified: bool = False
    faithful: bool = False  # Parallel-Probe as its authors define it
    reference: bool = False  # one of the 14 methods of the authors' simulator

    @property
    def needs_confs(self) -> bool:
        return self.conf_weights or self.deepconf

    @property
    def baseline(self) -> str:
        """The full-budget vote this method's answer and savings are compared with."""
        return "dco" if self.deepconf or self.conf_weights else "sc"


_METHODS = [
    Method("sc", "SC (baseline)", reference=True),
    Method("dco", "DCO (baseline)", "dco", conf_weights=True, deepconf=True, reference=True),
    Method("sc-mars", "MARS ({gamma})", stopping="mars", reference=True),
    Method("sc-mars-cal", "MARS", stopping="mars", calibrate=True, reference=True),
    Method(
        "sc-mars-oracle", "MARS (oracle q, {gamma})", stopping="mars", q="oracle", reference=True
    ),
    Method(
        "sc-mars-oracle-cal",
        "MARS (oracle q)",
        stopping="mars",
        q="oracle",
        calibrate=True,
        reference=True,
    ),
    Method(
        "dco-mars", "DCO + MARS ({gamma})", "dco", deepconf=True, stopping="mars", reference=True
    ),
    Method(
        "dco-mars-cal",
        "DCO + MARS",
        "dco",
        conf_weights=True,
        deepconf=True,
        stopping="mars",
        calibrate=True,
        reference=True,
    ),
    Method(
        "dco-mars-oracle",
        "DCO + MARS (oracle q, {gamma})",
        "dco",
        conf_weights=True,
        deepconf=True,
        stopping="mars",
        q="oracle",
        reference=True,
    ),
    Method("sc-pp", "Parallel-Probe ({pp_conv})", "other", stopping="pp", reference=True),
    Method("oracle-first", "Oracle stop, first", "oracle", stopping="oracle-first", reference=True),
    Method(
        "oracle-last", "Oracle stop, absorbing", "oracle", stopping="oracle-last", reference=True
    ),
    Method(
        "oracle-dco-first",
        "DCO oracle stop, first",
        "oracle",
        conf_weights=True,
        deepconf=True,
        stopping="oracle-first",
        reference=True,
    ),
    Method(
        "oracle-dco-last",
        "DCO oracle stop, absorbing",
        "oracle",
        conf_weights=True,
        deepconf=True,
        stopping="oracle-last",
        reference=True,
    ),
    # new
    Method("sc-mars-cert", "MARS certified ({delta})", stopping="mars", certified=True),
    Method(
        "sc-mars-oracle-cert",
        "MARS certified (oracle q, {delta})",
        stopping="mars",
        q="oracle",
        certified=True,
    ),
    Method(
        "dco-mars-cert",
        "DCO + MARS certified ({delta})",
        "dco",
        conf_weights=True,
        deepconf=True,
        stopping="mars",
        certified=True,
    ),
    Method(
        "sc-pp-faithful",
        "Parallel-Probe, pruning ({pp_conv})",
        "other",
        stopping="pp",
        faithful=True,
    ),
    Method("sc-consensus", "Consensus (share ≥ {consensus:value})", "other", stopping="consensus"),
    # beyond the paper (docs/beyond.md): predictive risk instead of the adversarial bound
    Method("sc-mars2", "MARS2 (predictive risk)", stopping="risk"),
    Method(
        "dco-mars2",
        "DCO + MARS2 (predictive risk)",
        "dco",
        conf_weights=True,
        deepconf=True,
        stopping="risk",
    ),
]

METHODS: dict[str, Method] = {m.name: m for m in _METHODS}
REFERENCE_METHODS = [m.name for m in _METHODS if m.reference]
#: Aliases for the reference CLI's names.
ALIASES = {"offline": "sc"}
GROUPS = ("sc", "dco", "other", "oracle")


def get_method(name: str) -> Method:
    name = ALIASES.get(name, name)
    try:
        return METHODS[name]
    except KeyError:
        raise UsageError(f"unknown method {name!r} (known: {', '.join(METHODS)})") from None


#: names that stand for several methods: what the pool's data supports of them
METHOD_GROUPS = {"all": list(METHODS), "reference": REFERENCE_METHODS}


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
