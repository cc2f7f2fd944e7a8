"""sc-mars2 / dco-mars2 as the package runs them (mars.method.registry, built per question by
``QuestionContext.rule_for``), and the first version of the rule (issue 14) for comparison; the
research drivers use these names and these builders."""

from __future__ import annotations

import numpy as np

from mars.method.registry import get_method
from mars.method.riskstop import RiskStop
from mars.method.walk import MethodResult, QuestionContext, run_method

SC_MARS2 = get_method("sc-mars2")
DCO_MARS2 = get_method("dco-mars2")
NEW_BY_PIPELINE = {"sc": SC_MARS2, "dco": DCO_MARS2}
#: the first version's fixed risk levels (issue 14)
V1_ALPHA = {"sc": 0.1, "dco": 0.02}


def rule_for_question(method, ctx: QuestionContext) -> RiskStop:
    """The rule of one question as the package builds it, at the context's ``risk_alpha`` (None:
    the pipeline's fixed level)."""
    rule = ctx.rule_for(method)
    assert isinstance(rule, RiskStop)
    return rule


def first_version(ctx: QuestionContext, pipeline: str, alpha: float | None = None) -> RiskStop:
    """The first version of the rule (issue 14): leaving with the learned q, landing as θ."""
    arr, warm = ctx.arr, ctx.warm
    return RiskStop.for_question(
        arr.final_ids[warm],
        arr.n_answers,
        deepconf=pipeline == "dco",
        warm_min_group=None if arr.min_group is None else arr.min_group[warm],
        alpha=V1_ALPHA[pipeline] if alpha is None else alpha,
    )


def run_first_version(ctx: QuestionContext, pipeline: str) -> MethodResult:
    """The first version through the simulator, on the same samples as every other method."""
    rule = first_version(ctx, pipeline)
    saved = ctx.rule_for
    ctx.rule_for = lambda method, gamma=None: rule  # type: ignore[method-assign]
    try:
        return run_method(ctx, NEW_BY_PIPELINE[pipeline])
    finally:
        ctx.rule_for = saved  # type: ignore[method-assign]


def disagreement(res: MethodResult, full: MethodResult) -> float:
    return float(np.mean(res.answer != full.answer))
