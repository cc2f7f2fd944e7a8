"""Math-Verify and sympy access (mars.method.answers.symbolic): the fast reject, the magnitude
bound that keeps giant values unevaluated, the structural key."""

from __future__ import annotations

import math
import time

import pytest
import sympy

from mars.method.answers import (
    MAX_DIGITS,
    group_answers,
    is_correct,
    log10_bound,
    numeric_key,
    structure,
    symbolic,
)

# --------------------------------------------------------------------------- fast reject


class TestFastReject:
    @pytest.mark.parametrize(
        "a, b",
        [
            ("m + n", "204"),
            ("x^2+1", "x^2+2"),
            (r"\frac{13 s \sqrt{30}}{5}", "452.4"),
            (r"107 - \sqrt{8481}", r"15 - \sqrt{8481}"),
        ],
    )
    def test_fast_reject_agrees_with_math_verify(self, a, b):
        _, verify, _ = symbolic._math_verify()
        assert symbolic._clearly_different(a, b)
        assert not verify(symbolic.mv_parse(b), symbolic.mv_parse(a), timeout_seconds=None)

    @pytest.mark.parametrize(
        "a, b",
        [(r"\text{No}", "No"), ("9\\%", "9"), ("x+1", "1+x"), ("0.333333", r"\frac13")],
    )
    def test_fast_reject_stays_out_of_the_way(self, a, b):
        assert not symbolic._clearly_different(a, b)


def test_adversarial_answers_stay_cheap():
    """Answers whose values have billions of digits are recognised from their expression tree and
    never evaluated: 16 of them in one question group in seconds (it was 150 s)."""
    import time

    answers = [rf"\left\lfloor \frac{{2^{{2^{{32}}}}}}{{3}} \right\rfloor + {k}" for k in range(16)]
    t0 = time.perf_counter()
    groups = group_answers([*answers, "852", "852"])
    correct = [is_correct(r, "852") for r in groups.representatives]
    assert time.perf_counter() - t0 < 20
    assert len(groups) == 17 and sum(correct) == 1


@pytest.mark.parametrize(
    "expr",
    [
        sympy.Integer(1000),
        sympy.Integer(-999),
        sympy.Rational(7, 3),
        sympy.Float(123.5),
        sympy.Pow(2, 10, evaluate=False),
        sympy.Mul(12, 34, evaluate=False),
        sympy.Add(999, 999, 999, evaluate=False),
        sympy.factorial(20, evaluate=False),
        sympy.Pow(10, sympy.Pow(2, 3, evaluate=False), evaluate=False),
    ],
)
def test_log10_bound_is_an_upper_bound(expr):
    value = abs(complex(sympy.N(expr, 30)))
    assert log10_bound(expr) >= math.log10(value)


def test_giant_values_are_bounded_without_evaluation():
    huge = sympy.Pow(2, sympy.Pow(2, 32, evaluate=False), evaluate=False)
    t = time.perf_counter()
    assert log10_bound(huge) > MAX_DIGITS
    assert log10_bound(sympy.factorial(10**6, evaluate=False)) > MAX_DIGITS
    assert time.perf_counter() - t < 1.0
    assert log10_bound(sympy.Symbol("x")) == 1.0


def test_structure_keeps_the_order_terms_were_built_in():
    x = sympy.Symbol("x")
    assert structure(sympy.Add(x, 1, evaluate=False)) == "Add(Symbol(x), One(1))"
    assert structure(sympy.Add(1, x, evaluate=False)) == "Add(One(1), Symbol(x))"
    # a giant power's key is its structure: two different towers stay apart
    assert numeric_key("2^{2^{32}}") == "expr:Pow(Integer(2), Pow(Integer(2), Integer(32)))"
    assert numeric_key("2^{2^{32}}") != numeric_key("2^{2^{33}}")
