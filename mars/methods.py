"""The simulator's methods: what votes, what filters, what stops, which q and which γ.

Names with the reference's meaning (reference-protocol §5.3; ``sc`` is its ``offline``):

=====================  ========  ==========  ==============================  =======  ===========
method                 weights   DeepConf    stopping                        q        γ
=====================  ========  ==========  ==============================  =======  ===========
sc                     uniform   no          never (full-budget vote)        –        –
dco                    conf      yes         never                           –        –
sc-mars                uniform   no          MARS                            learned  ``--gamma``
sc-mars-cal            uniform   no          MARS                            learned  calibrated (oracle q on warmup)
sc-mars-oracle         uniform   no          MARS                            oracle   ``--gamma``
sc-mars-oracle-cal     uniform   no          MARS                            oracle   calibrated (oracle q)
dco-mars               uniform   yes         MARS                            learned  ``--gamma``
dco-mars-cal           conf      yes         MARS                            learned  calibrated (oracle q, conf, filter)
dco-mars-oracle        conf      yes         MARS                            oracle   ``--gamma``
sc-pp                  uniform   no          Parallel-Probe (reference)      –        –
oracle-first           uniform   no          first checkpoint = final vote   –        –
oracle-last            uniform   no          one after last disagreement     –        –
oracle-dco-first       conf      yes         as oracle-first                 –        –
oracle-dco-last        conf      yes         as oracle-last                  –        –
=====================  ========  ==========  ==============================  =======  ===========

New methods (not in the reference):

* ``sc-mars-cert`` / ``sc-mars-oracle-cert`` / ``dco-mars-cert`` — the paper's certified rule
  (Corollary 1): γ = 1, finished traces q = 0, Hoeffding term with ``--delta``, no probe-0 guard.
* ``sc-pp-faithful`` — Parallel-Probe as its authors define it: pruned traces stop voting and
  stop costing tokens; the answer is the unpruned vote.
* ``sc-consensus`` — stop once the leader holds ``--consensus`` of the votes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    name: str
    conf_weights: bool = False
    deepconf: bool = False
    stopping: str = "never"  # never | mars | pp | oracle-first | oracle-last | consensus
    q: str = "learned"  # learned | oracle
    calibrate: bool = False  # γ calibrated on the warmup with oracle q
    certified: bool = False
    faithful: bool = False  # Parallel-Probe as its authors define it

    @property
    def needs_confs(self) -> bool:
        return self.conf_weights or self.deepconf


_METHODS = [
    Method("sc"),
    Method("dco", conf_weights=True, deepconf=True),
    Method("sc-mars", stopping="mars"),
    Method("sc-mars-cal", stopping="mars", calibrate=True),
    Method("sc-mars-oracle", stopping="mars", q="oracle"),
    Method("sc-mars-oracle-cal", stopping="mars", q="oracle", calibrate=True),
    Method("dco-mars", deepconf=True, stopping="mars"),
    Method("dco-mars-cal", conf_weights=True, deepconf=True, stopping="mars", calibrate=True),
    Method("dco-mars-oracle", conf_weights=True, deepconf=True, stopping="mars", q="oracle"),
    Method("sc-pp", stopping="pp"),
    Method("oracle-first", stopping="oracle-first"),
    Method("oracle-last", stopping="oracle-last"),
    Method("oracle-dco-first", conf_weights=True, deepconf=True, stopping="oracle-first"),
    Method("oracle-dco-last", conf_weights=True, deepconf=True, stopping="oracle-last"),
    # new
    Method("sc-mars-cert", stopping="mars", certified=True),
    Method("sc-mars-oracle-cert", stopping="mars", q="oracle", certified=True),
    Method("dco-mars-cert", conf_weights=True, deepconf=True, stopping="mars", certified=True),
    Method("sc-pp-faithful", stopping="pp", faithful=True),
    Method("sc-consensus", stopping="consensus"),
]

METHODS: dict[str, Method] = {m.name: m for m in _METHODS}
REFERENCE_METHODS = [m.name for m in _METHODS[:14]]
#: Aliases for the reference CLI's names.
ALIASES = {"offline": "sc"}


def get_method(name: str) -> Method:
    name = ALIASES.get(name, name)
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r} (known: {', '.join(METHODS)})") from None


def parse_methods(spec: str) -> list[Method]:
    """``"sc,sc-mars-cal"`` or ``"all"`` / ``"reference"`` → methods (order kept, duplicates dropped)."""
    names: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if part == "all":
            names += list(METHODS)
        elif part == "reference":
            names += REFERENCE_METHODS
        else:
            names.append(get_method(part).name)
    seen = dict.fromkeys(names)
    if not seen:
        raise ValueError("no method given")
    return [METHODS[n] for n in seen]
