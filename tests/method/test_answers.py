"""Answer groups built online (mars.method.answers.OnlineGroups, live runs), the string-level
equality and the magnitude bound that keeps giant values unevaluated. Extraction, numeric keys,
equivalence and offline grouping are tested in tests/test_answers.py."""

from __future__ import annotations

import math
import time

import pytest
import sympy

from mars.method.answers import (
    MAX_DIGITS,
    MAX_SYMBOLIC_PAIRWISE,
    AnswerGroups,
    OnlineGroups,
    group_answers,
    group_answers_online,
    log10_bound,
    numeric_key,
    same_string,
    structure,
)

#: Math-Verify simplifies it to 1; numeric_key cannot (x stays)
PYTHAGORAS = r"\sin^2 x + \cos^2 x"


def test_online_ids_are_given_as_answers_arrive_and_kept():
    online = OnlineGroups()
    assert online.add(["5", None, "", "5.0"]) == [0, -1, -1, 0]
    assert len(online) == 1
    assert online.add(["x+1", "6", "1+x", "5"]) == [1, 2, 1, 0]
    g = online.groups()
    assert isinstance(g, AnswerGroups)
    assert g.representatives == ["5", "x+1", "6"]
    assert g.members == [["5", "5.0"], ["x+1", "1+x"], ["6"]]
    assert g.id_of("1+x") == 1 and g.id_of(None) == -1


def test_online_groups_are_a_snapshot():
    online = OnlineGroups()
    online.add(["1", "2"])
    g = online.groups()
    online.add(["3", "1.0"])
    assert g.representatives == ["1", "2"]
    assert g.members == [["1"], ["2"]]
    assert online.groups().members == [["1", "1.0"], ["2"], ["3"]]


def test_online_equals_offline_on_plain_numbers():
    strings = ["7", "1,024", "3", "7.0", "1024", None, "03", "0.5", "1/2", "2.50", "2.5"]
    offline, online = group_answers(strings), group_answers_online(strings)
    assert online.representatives == offline.representatives
    assert online.index == offline.index


def test_a_new_numeric_key_joins_an_equivalent_symbolic_group():
    g = group_answers_online([PYTHAGORAS, "1", "1.0", "2"])
    assert g.members == [[PYTHAGORAS, "1", "1.0"], ["2"]]
    # the other way round the symbolic string joins the numeric group
    assert group_answers_online(["1", PYTHAGORAS]).members == [["1", PYTHAGORAS]]


def test_a_numeric_key_is_never_compared_with_numeric_groups():
    # "1/2" and "0.5" share a key; "2/4" too: all one group by key alone
    g = group_answers_online(["0.5", "1/2", "2/4", "0.25"])
    assert numeric_key("2/4") == numeric_key("0.5")
    assert g.members == [["0.5", "1/2", "2/4"], ["0.25"]]


def test_beyond_the_symbolic_limit_new_symbolic_answers_open_groups():
    syms = [f"x + {i}" for i in range(MAX_SYMBOLIC_PAIRWISE)] + ["1 + x"]
    g = group_answers_online(syms)
    # "1 + x" is the 51st symbolic string: it is not compared, though equal to "x + 1"
    assert len(g) == MAX_SYMBOLIC_PAIRWISE + 1
    assert g.index["1 + x"] == MAX_SYMBOLIC_PAIRWISE != g.index["x + 1"]
    # one fewer, and it joins
    g = group_answers_online([*syms[: MAX_SYMBOLIC_PAIRWISE - 1], "1 + x"])
    assert g.index["1 + x"] == g.index["x + 1"]


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("7", "7", True),
        (" $X+1$ ", "x + 1", True),
        (r"\dfrac{1}{2}", r"\frac{1}{2}", True),
        (r"\tfrac{1}{2}", r"\frac{1}{2}", True),
        ("0.5", r"\frac{1}{2}", False),  # equal values, not the same string
        ("12", "21", False),
    ],
)
def test_same_string_is_equality_up_to_case_spaces_dollars_and_dfrac(a, b, same):
    assert same_string(a, b) is same


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
