"""sc-mars2 / dco-mars2 as the package runs them (mars.methods, built per question by
``QuestionContext.rule_for``); the research drivers use these names and this one builder."""

from __future__ import annotations

from mars.methods import get_method
from mars.riskstop import RiskStop
from mars.simulate import QuestionContext

SC_MARS2 = get_method("sc-mars2")
DCO_MARS2 = get_method("dco-mars2")
NEW_BY_PIPELINE = {"sc": SC_MARS2, "dco": DCO_MARS2}


def rule_for_question(method, ctx: QuestionContext) -> RiskStop:
    """The rule of one question: the warmup's final answers (+ DeepConf: their lowest group
    confidence) → RiskStop, at the context's ``risk_alpha`` (None: the pipeline's fixed level)."""
    rule = ctx.rule_for(method)
    assert isinstance(rule, RiskStop)
    return rule
