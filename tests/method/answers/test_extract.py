"""Answer text out of generated text and the storage normalisation
(mars.method.answers.extract)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mars.method.answers import (
    extract_boxed,
    extract_probe_answer,
    normalize_answer,
)

# --------------------------------------------------------------------------- extraction


class TestExtractBoxed:
    def test_simple(self):
        assert extract_boxed(r"so the answer is \boxed{42}.") == "42"

    def test_nested_braces(self):
        assert extract_boxed(r"\boxed{\frac{1}{2}}") == r"\frac{1}{2}"
        assert extract_boxed(r"x \boxed{\sqrt{\frac{a}{b}} + {c}} y") == r"\sqrt{\frac{a}{b}} + {c}"

    def test_last_box_wins(self):
        assert extract_boxed(r"\boxed{1} then \boxed{2} finally \boxed{3}") == "3"

    def test_no_box(self):
        assert extract_boxed("the answer is 42") is None
        assert extract_boxed("") is None

    def test_box_without_brace_reads_to_dollar(self):
        assert extract_boxed(r"$\boxed 5$") == "5"
        assert extract_boxed(r"\boxed 5$ and more") == "5"
        assert extract_boxed(r"\boxed 7") == "7"

    def test_empty_box_is_empty_string(self):
        assert extract_boxed(r"\boxed{}") == ""

    def test_unclosed_box_takes_rest(self):
        assert extract_boxed(r"\boxed{12 because") == "12 because"

    def test_content_not_stripped(self):
        assert extract_boxed(r"\boxed{ 7 }") == " 7 "

    @settings(max_examples=200, deadline=None)
    @given(st.text(alphabet=st.sampled_from(list("boxed{}$\\ 12a")), max_size=40))
    def test_never_raises(self, text):
        out = extract_boxed(text)
        assert out is None or isinstance(out, str)
        if "boxed" not in text:
            assert out is None


class TestExtractProbeAnswer:
    def test_closed(self):
        assert extract_probe_answer("204}") == "204"
        assert extract_probe_answer(r"\frac{1}{2}} is the answer") == r"\frac{1}{2}"

    def test_unclosed(self):
        assert extract_probe_answer("204") == "204"

    def test_empty_box_falls_back(self):
        # "\boxed{" + "}" -> empty content -> completion stripped of whitespace and trailing "}"
        assert extract_probe_answer("}") is None
        assert extract_probe_answer("  ") is None
        assert extract_probe_answer("") is None

    def test_last_box_in_completion_wins(self):
        assert extract_probe_answer(r"1} no wait \boxed{2}") == "2"


# --------------------------------------------------------------------------- normalisation


class TestNormalizeAnswer:
    @pytest.mark.parametrize(
        "raw, expected",
        [
            ("  42 ", "42"),
            ("042", "042"),
            ("-7", "-7"),
            ("$12$", "12"),
            (r"$\dfrac{1}{2}$", r"\frac{1}{2}"),
            (r"\tfrac{3}{4}", r"\frac{3}{4}"),
            (r"\text{(A)}", "(A)"),
            (r"5\text{ cm}", "5 cm"),
            (r"\text{a{b}c}", "a{b}c"),
            (r"\left( 1, 2 \right)", "( 1, 2 )"),
            (r"\left[0,1\right]", "[0,1]"),
            (r"\leftarrow", r"\leftarrow"),
            (r"\rightarrow x", r"\rightarrow x"),
            (r"$5$ and $6$", r"$5$ and $6$"),
            (r"\frac{1}{2}", r"\frac{1}{2}"),
        ],
    )
    def test_cases(self, raw, expected):
        assert normalize_answer(raw) == expected

    @pytest.mark.parametrize("raw", [None, "", "   ", "$$", "$ $", r"\text{}"])
    def test_empty_is_none(self, raw):
        assert normalize_answer(raw) is None

    @given(st.integers(min_value=-(10**30), max_value=10**30))
    def test_integers_unchanged(self, n):
        assert normalize_answer(str(n)) == str(n)

    def test_idempotent_on_examples(self):
        for raw in [r"$\dfrac{1}{2}$", r"\text{(A)}", r"\left( 1 \right)", " 7 ", r"5\text{ cm}"]:
            once = normalize_answer(raw)
            assert normalize_answer(once) == once
