"""Numeric keys (mars.method.answers.numeric): plain numbers, evaluated expressions, exact
keys of huge integers."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mars.method.answers import (
    answers_equivalent,
    numeric,
    numeric_key,
    timelimit,
)

# --------------------------------------------------------------------------- numeric keys


class TestNumericKey:
    @pytest.mark.parametrize(
        "s, key",
        [
            ("1,000", "1000"),
            ("2^{10}", "1024"),
            (r"\frac{1}{8}", "0.125"),
            ("$12$", "12"),
            (" 12 ", "12"),
            ("012", "12"),
            ("1e3", "1000"),
            ("3.0", "3"),
            ("123456789012", "int:123456789012"),  # 9 digits cannot tell integers apart
            ("123456789012.5", "1.23456789e+11"),
            (r"4 \times 3 \sqrt{21}", "54.9909083"),
            (r"\sqrt{2}", "1.41421356"),
            ("-5", "-5"),
        ],
    )
    def test_numeric(self, s, key):
        assert numeric_key(s) == key

    @pytest.mark.parametrize(
        "s", ["229 - d", "m + n", "x", r"\sqrt{-1}", "x=5", "", "   ", "$$", "No", r"\frac{"]
    )
    def test_symbolic_or_garbage(self, s):
        assert numeric_key(s) is None

    def test_integers_skip_sympy(self, monkeypatch):
        def boom(*_args, **_kwargs):
            raise AssertionError("sympy path used for a plain number")

        monkeypatch.setattr(numeric, "_symbolic_value", boom)
        assert numeric_key("98765") == "98765"
        assert numeric_key("-3,141") == "-3141"

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.text(alphabet=st.sampled_from(list("0123456789{}^_\\frac sqrt$,.-+()=xi!")), max_size=25)
    )
    def test_never_raises(self, s):
        old = timelimit.SYMBOLIC_TIMEOUT_S
        timelimit.SYMBOLIC_TIMEOUT_S = 1.0  # keep the property test quick even on slow inputs
        try:
            k = numeric_key(s)
        finally:
            timelimit.SYMBOLIC_TIMEOUT_S = old
        assert k is None or isinstance(k, str)

    def test_non_string(self):
        assert numeric_key(None) is None  # type: ignore[arg-type]


def test_huge_values_get_exact_keys():
    assert numeric_key(r"10^{10^{10}}") != numeric_key(r"10^{10^{10}}+1")
    assert numeric_key("1000000000000000001") != numeric_key("1000000000000000002")
    assert numeric_key("1000000000000000001") == numeric_key(r"10^{18}+1")
    assert not answers_equivalent("1000000000000000001", "1000000000000000002")
    assert numeric_key("123456789") == "123456789"  # small values: the reference's 9 digits
