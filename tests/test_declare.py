"""One declaration type for every option and setting: its checks, its words and its schema."""

from __future__ import annotations

import pytest

from mars.declare import Option, by_name
from mars.errors import SimulationError, UsageError

RATE = Option("rate", float, "a share", default=0.5, low=0, high=1, low_open=True)
COUNT = Option("count", int, "how many", default=4, low=1)
KIND = Option("kind", str, "which", default="a", choices=("a", "b"))
WATCH = Option("watch", bool, "whether", default=True)
MAYBE = Option("maybe", int, "derived when unset", low=0)


@pytest.mark.parametrize(
    "opt, value, said",
    [
        (RATE, 0, "--rate 0: must be > 0 and ≤ 1"),
        (RATE, 1.5, "--rate 1.5: must be > 0 and ≤ 1"),
        (RATE, float("nan"), "--rate nan: must be a finite number > 0 and ≤ 1"),
        (RATE, "x", "--rate x: must be a finite number > 0 and ≤ 1"),
        (RATE, True, "--rate True: must be a number > 0 and ≤ 1"),
        (COUNT, 0, "--count 0: must be ≥ 1"),
        (COUNT, 2.0, "--count 2.0: must be a whole number ≥ 1"),
        (COUNT, 10**50, None),
        (KIND, "c", "--kind c: must be one of a, b"),
        (WATCH, "yes", "--watch yes: must be true or false"),
        (MAYBE, -1, "--maybe -1: must be ≥ 0"),
    ],
)
def test_a_value_outside_its_declaration_is_one_line_naming_the_flag(opt, value, said):
    if said is None:
        opt.check(value)
        return
    with pytest.raises(UsageError) as e:
        opt.check(value)
    assert str(e.value) == said


def test_unset_passes_only_where_the_default_is_unset_and_the_error_kind_is_the_callers():
    MAYBE.check(None)
    with pytest.raises(UsageError, match="--count None: must be a whole number"):
        COUNT.check(None)
    with pytest.raises(SimulationError, match=r"^count=0: must be ≥ 1$"):
        COUNT.check(0, keyword=True, error=SimulationError)


def test_a_huge_value_is_shown_by_its_size_not_its_digits():
    with pytest.raises(UsageError) as e:
        RATE.check(10**5000)
    assert "5000-digit number" in str(e.value) and len(str(e.value)) < 100


def test_the_schema_and_the_words_say_the_same_range():
    assert RATE.schema() == {
        "type": "number",
        "exclusiveMinimum": 0,
        "maximum": 1,
        "description": "a share",
    }
    assert KIND.schema()["enum"] == ["a", "b"] and KIND.range_text() == "one of a, b"
    assert WATCH.range_text() == "" and WATCH.flag == "--watch"
    assert Option("max_tokens", int, "").flag == "--max-tokens"


def test_a_name_declared_twice_is_caught():
    assert by_name((RATE, COUNT)) == {"rate": RATE, "count": COUNT}
    with pytest.raises(AssertionError):
        by_name((RATE, RATE))
