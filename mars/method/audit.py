"""The audit's statistics: how often stopping changed the answer the full budget would have given.

MARS promises one thing: stop early *and* keep the answer the same traces run to their end would
have voted for, with a risk the user sets. An *audit* of a stopped question runs its traces to
their end and compares the full-budget vote (the method's pipeline's baseline,
:attr:`~mars.method.registry.Method.baseline`) with the answer given; a *disagreement* is the two
differing. Everything here is shared by the live audit (``mars serve --audit-rate``), its offline
twin (``mars audit``) and the report, so the three count alike:

* :func:`risk_target` — the risk a method promises: MARS2's α (``risk_alpha``; by default its
  pipeline's level, 0.1 under SC and 0.02 under DeepConf), the certified rule's δ (``delta``), and
  for a method that promises no number, the target the operator gives (:data:`DEFAULT_TARGET`
  unless told);
* :func:`clopper_pearson_upper` / :func:`clopper_pearson_lower` — exact one-sided bounds on a rate
  of ``k`` disagreements in ``n`` audits;
* :class:`Tally` — a running count against a target, and its alarm (:meth:`Tally.add`).

What the bound guarantees: audits picked at random from the traffic (a seeded sample) are
independent draws of its questions, so with probability at least the confidence the rate at which
that traffic's answers differ from their full-budget vote is at most the upper bound. It says
nothing about traffic unlike the audited one, and audits a client asked for are not a random
sample (docs/serve.md, "The audit").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from .registry import MARS_CERTIFIED, RISK, Method
from .settings import SPECS

#: The confidence of the bounds unless told (one-sided).
CONFIDENCE = 0.95
#: The risk target of a method that promises no number of its own (``--audit-target``): at most 5
#: answers in 100 different from the full-budget vote.
DEFAULT_TARGET = 0.05
#: The states of a tally: too few audits to vouch for the target, the target vouched for, and the
#: alarm (see :meth:`Tally.add`).
UNVERIFIED, HOLDS, ALARM = "unverified", "holds", "alarm"


def clopper_pearson_upper(k: int, n: int, level: float = CONFIDENCE) -> float:
    """One-sided upper confidence bound at ``level`` on a rate of ``k`` events in ``n`` trials
    (exact, Clopper–Pearson); NaN with no trial."""
    if n == 0:
        return float("nan")
    if k >= n:
        return 1.0
    from scipy.stats import beta  # not on the command line's way to --help

    return float(beta.ppf(level, k + 1, n - k))


def clopper_pearson_lower(k: int, n: int, level: float = CONFIDENCE) -> float:
    """One-sided lower confidence bound at ``level`` on a rate of ``k`` events in ``n`` trials
    (exact, Clopper–Pearson); NaN with no trial."""
    if n == 0:
        return float("nan")
    if k <= 0:
        return 0.0
    from scipy.stats import beta

    return float(beta.ppf(1.0 - level, k, n - k + 1))


def risk_target(
    method: Method, knobs: Mapping, default: float = DEFAULT_TARGET
) -> tuple[float, str]:
    """(the risk ``method`` promises with these knobs, where it comes from): ``risk_alpha`` for
    MARS2, ``delta`` for the certified rule, else ``default`` (``--audit-target``)."""
    if method.rule == RISK:
        from .riskstop import ALPHA_DCO, ALPHA_SC

        alpha = knobs.get("risk_alpha")
        if alpha is None:
            alpha = ALPHA_DCO if method.voting.needs_confs else ALPHA_SC
        return float(alpha), "risk_alpha"
    if method.rule == MARS_CERTIFIED:
        return float(knobs.get("delta", SPECS["delta"].default)), "delta"
    return float(default), "audit_target"


def same_answer(a: str | None, b: str | None) -> bool:
    """Whether two answers of one question's vote are the same: the votes group a question's
    answers online and name each group by its first member, so the stop's answer and the full
    budget's are the same string when they are the same group."""
    return a == b


@dataclass
class Tally:
    """Audits and disagreements against a target at a confidence, in the order they came.

    The alarm (:attr:`alarm`) fires the moment the audits say the promise does not hold: the upper
    bound rises above the target after having been at or under it (the promise was vouched for at
    this confidence, and is now in doubt), or, on traffic that never let it be vouched for, the
    lower bound is above the target (the rate is over it at this confidence). It stays on until
    the upper bound is back at or under the target. With few audits the upper bound is above any
    target whatever the rate: that is :data:`UNVERIFIED`, not an alarm.
    """

    target: float
    confidence: float = CONFIDENCE
    audits: int = 0
    disagreements: int = 0
    vouched: bool = False  # the upper bound has been at or under the target
    alarm: bool = False

    def add(self, disagree: bool) -> bool:
        """Count one audit; True when this one raised the alarm."""
        self.audits += 1
        self.disagreements += int(bool(disagree))
        up, low = self.upper, self.lower
        was = self.alarm
        if up <= self.target:
            self.vouched = True
            self.alarm = False
        elif self.vouched or low > self.target:
            self.alarm = True
        return self.alarm and not was

    @property
    def rate(self) -> float:
        return self.disagreements / self.audits if self.audits else float("nan")

    @property
    def upper(self) -> float:
        """The upper bound (1 before any audit: nothing is known)."""
        if not self.audits:
            return 1.0
        return clopper_pearson_upper(self.disagreements, self.audits, self.confidence)

    @property
    def lower(self) -> float:
        if not self.audits:
            return 0.0
        return clopper_pearson_lower(self.disagreements, self.audits, self.confidence)

    @property
    def state(self) -> str:
        if self.alarm:
            return ALARM
        return HOLDS if self.audits and self.upper <= self.target else UNVERIFIED

    def view(self) -> dict:
        """What the audit's JSON view and ``mars audit`` say of it."""
        return {
            "audits": self.audits,
            "disagreements": self.disagreements,
            "rate": _round(self.rate),
            "upper": _round(self.upper),
            "lower": _round(self.lower),
            "confidence": self.confidence,
            "target": self.target,
            "state": self.state,
            "alarm": self.alarm,
        }


def _round(x: float) -> float | None:
    return None if math.isnan(x) else round(float(x), 6)


def audits_to_vouch(target: float, confidence: float = CONFIDENCE) -> int:
    """The fewest audits, none disagreeing, whose upper bound is at or under ``target``: before
    them no traffic can be vouched for."""
    return max(1, math.ceil(math.log(1.0 - confidence) / math.log(1.0 - target)))
