"""Tests for mars.method.answers: extraction, normalisation, numeric keys, equivalence, grouping."""

from __future__ import annotations

import collections
import csv
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mars.method import answers as A
from mars.method.answers import (
    AnswerGroups,
    answers_equivalent,
    extract_boxed,
    extract_probe_answer,
    group_answers,
    is_correct,
    normalize_answer,
    numeric_key,
)

SHARED = Path(__file__).resolve().parents[2] / "shared"
PP_AIME24 = SHARED / "fixtures" / "reference-sim" / "pp-aime24"
needs_shared = pytest.mark.skipif(
    not (PP_AIME24 / "pool.parquet").exists(), reason="needs ../shared reference fixtures"
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

        monkeypatch.setattr(A, "_symbolic_value", boom)
        assert numeric_key("98765") == "98765"
        assert numeric_key("-3,141") == "-3141"

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.text(alphabet=st.sampled_from(list("0123456789{}^_\\frac sqrt$,.-+()=xi!")), max_size=25)
    )
    def test_never_raises(self, s):
        old = A.SYMBOLIC_TIMEOUT_S
        A.SYMBOLIC_TIMEOUT_S = 1.0  # keep the property test quick even on slow inputs
        try:
            k = numeric_key(s)
        finally:
            A.SYMBOLIC_TIMEOUT_S = old
        assert k is None or isinstance(k, str)

    def test_non_string(self):
        assert numeric_key(None) is None  # type: ignore[arg-type]


# --------------------------------------------------------------------------- time limits


class TestTimeLimit:
    def test_busy_loop_is_interrupted(self):
        def spin():
            while True:
                pass

        t0 = time.monotonic()
        with pytest.raises(A._SymbolicTimeout):
            A._run_limited(spin, seconds=0.2)
        assert time.monotonic() - t0 < 2.0
        # the timer is disarmed afterwards: nothing fires later
        time.sleep(0.8)

    def test_swallowing_code_is_still_interrupted(self):
        def stubborn():
            while True:
                try:
                    while True:
                        pass
                except BaseException:
                    break
            while True:  # the repeating timer fires again
                pass

        with pytest.raises(A._SymbolicTimeout):
            A._run_limited(stubborn, seconds=0.2)
        time.sleep(0.8)

    def test_result_passes_through(self):
        assert A._run_limited(lambda: 7, seconds=1.0) == 7

    def test_outer_timer_is_restored(self):
        import signal

        fired = []
        old = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            A._run_limited(lambda: None, seconds=5.0)
            remaining, _ = signal.getitimer(signal.ITIMER_REAL)
            assert 0 < remaining <= 0.5
            time.sleep(0.7)
            assert fired == [1]
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)

    def test_thread_runs_without_timeout(self):
        out = {}

        def work():
            out["key"] = numeric_key(r"\frac{3}{8}")
            out["eq"] = answers_equivalent(r"\frac{3}{6}", "0.5")
            out["limited"] = A._run_limited(lambda: 5, seconds=0.1)

        th = threading.Thread(target=work)
        th.start()
        th.join(60)
        assert out == {"key": "0.375", "eq": True, "limited": 5}

    def test_slow_symbolic_key_times_out(self, monkeypatch):
        monkeypatch.setattr(A, "SYMBOLIC_TIMEOUT_S", 0.3)
        s = "(q+1)^{300} - (q+2)^{299}"
        t0 = time.monotonic()
        assert numeric_key(s) is None
        assert time.monotonic() - t0 < 5.0


# --------------------------------------------------------------------------- equivalence


class TestEquivalence:
    @pytest.mark.parametrize(
        "a, b",
        [
            ("10000", "1e4"),
            (r"\frac12", "0.5"),
            (r"\dfrac{1}{2}", r"\frac{1}{2}"),
            ("$5$", "5"),
            (" ABC ", "abc"),
            ("1,000", "1000"),
            ("2^{10}", "1024"),
            (r"2\sqrt3", r"\sqrt{12}"),
            ("x+1", "1+x"),
            ("33", "033"),
            (r"\text{No}", "No"),
        ],
    )
    def test_equivalent(self, a, b):
        assert answers_equivalent(a, b)

    @pytest.mark.parametrize(
        "a, b",
        [
            ("5", "500"),  # no percentage heuristic
            ("500", "5"),
            ("0.05", "5"),
            ("", "0"),
            ("0", ""),
            ("10000", "10001"),  # the reference: equal within a relative tolerance of 1e-4
            ("10000", "10002"),
            ("229 - d", "229"),  # unit stripping is off
            ("107 + e", "107 - e"),
            ("m + n", "204"),
            (None, "5"),
            ("5", None),
            (None, None),
        ],
    )
    def test_not_equivalent(self, a, b):
        assert not answers_equivalent(a, b)

    def test_implausible_long_text(self):
        long_a = "the answer cannot be determined from the given information at all"
        long_b = "the answer cannot be determined from the information given at all"
        assert not answers_equivalent(long_a, long_b)
        assert answers_equivalent(long_a, long_a)  # exact equality comes first

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
        _, verify, _ = A._math_verify()
        assert A._clearly_different(a, b)
        assert not verify(A._mv_parse(b), A._mv_parse(a), timeout_seconds=None)

    @pytest.mark.parametrize(
        "a, b",
        [(r"\text{No}", "No"), ("9\\%", "9"), ("x+1", "1+x"), ("0.333333", r"\frac13")],
    )
    def test_fast_reject_stays_out_of_the_way(self, a, b):
        assert not A._clearly_different(a, b)

    def test_is_correct(self):
        assert is_correct("204", "204")
        assert is_correct("$204$", "204")
        assert is_correct("0204", "204")
        assert not is_correct("5", "500")
        assert not is_correct(None, "5")
        assert not is_correct("", "0")

    def test_is_correct_falls_back_on_error(self, monkeypatch):
        def boom(*_args):
            raise RuntimeError

        monkeypatch.setattr(A, "answers_equivalent", boom)
        assert A.is_correct("7", "7")
        assert not A.is_correct("7", "8")


# --------------------------------------------------------------------------- grouping


class TestGrouping:
    def test_numeric_groups_first_appearance(self):
        g = group_answers(["7", "1024", None, "", "2^{10}", "7.0", "1,024", "3"])
        assert g.representatives == ["7", "1024", "3"]
        assert g.index == {"7": 0, "7.0": 0, "1024": 1, "2^{10}": 1, "1,024": 1, "3": 2}
        assert len(g) == 3
        assert g.members == [["7", "7.0"], ["1024", "2^{10}", "1,024"], ["3"]]

    def test_deterministic(self):
        data = ["x+1", "5", "1+x", "2^{10}", "m+n", "1024", "(x+1)", "5.0", "n+m"]
        g1 = group_answers(data)
        g2 = group_answers(list(data))
        assert g1.representatives == g2.representatives
        assert g1.index == g2.index

    def test_symbolic_after_numeric(self):
        g = group_answers(["x+1", "5", "1+x", "m+n", "n+m"])
        # numeric groups are built first, then symbolic clusters in first-appearance order
        assert g.representatives == ["5", "x+1", "m+n"]
        assert g.id_of("1+x") == 1
        assert g.id_of("n+m") == 2

    def test_symbolic_cluster_joins_numeric_group(self):
        # symbolic for numeric_key (N() cannot drop x), but Math-Verify simplifies it to 1
        s = r"\sin^2 x + \cos^2 x"
        assert numeric_key(s) is None
        g = group_answers(["1", "x", s, "2"])
        assert g.representatives == ["1", "2", "x"]
        assert g.id_of(s) == 0
        assert g.members[0] == ["1", s]

    def test_more_than_50_symbolic_are_singletons(self):
        syms = [f"x + {i}" for i in range(50)] + ["1 + x"]  # 51 distinct symbolic strings
        g = group_answers(["7", *syms])
        assert len(g) == 52
        assert g.id_of("x + 1") != g.id_of("1 + x")
        # exactly 50 -> merging happens
        g50 = group_answers([f"x + {i}" for i in range(49)] + ["1 + x"])
        assert g50.id_of("x + 1") == g50.id_of("1 + x")
        assert len(g50) == 49

    def test_largest_groups_compared(self):
        # the cluster's opener is compared with representatives of existing groups
        s = r"\sin^2 y + \cos^2 y + 3"
        g = group_answers(["2", "4", s, "8", "4.0"])
        assert g.id_of(s) == g.id_of("4") == 1
        assert len(g) == 3

    def test_only_20_largest_groups_compared(self):
        s = r"\sin^2 y + \cos^2 y + 3"
        # group "4" (1 member) comes first, then 20 groups of 2 members: "4" is not in the top 20
        big = [x for k in range(10, 30) for x in (str(k), f"{k}.0")]
        g = group_answers(["4", *big, s])
        assert len(g) == 22
        assert g.id_of(s) == 21
        # with only 19 bigger groups, "4" is the 20th largest and is compared
        g = group_answers(["4", *big[:38], s])
        assert len(g) == 20
        assert g.id_of(s) == 0

    def test_id_of(self):
        g = group_answers(["12", "x+1"])
        assert g.id_of(None) == -1
        assert g.id_of("") == -1
        assert g.id_of("12") == 0
        assert g.id_of("12.0") == 0  # unknown string: fallback through representatives
        assert g.id_of("1+x") == 1
        assert g.id_of("99") == -1
        assert g.id_of("99") == -1  # cached fallback

    def test_empty_input(self):
        g = group_answers([None, "", None])
        assert len(g) == 0
        assert g.id_of("5") == -1
        assert isinstance(g, AnswerGroups)

    def test_generator_input(self):
        g = group_answers(s for s in ["1", "2", "1"])
        assert g.representatives == ["1", "2"]


# --------------------------------------------------------------------------- real data


def _load_pool_strings():
    import pyarrow.parquet as pq

    table = pq.read_table(
        PP_AIME24 / "pool.parquet", columns=["qid", "trace_idx", "extracted_answer", "probes"]
    ).to_pydict()
    rows = sorted(
        zip(table["qid"], table["trace_idx"], table["extracted_answer"], table["probes"]),
        key=lambda r: (r[0], r[1]),
    )
    per_q: dict[int, list] = collections.defaultdict(list)
    # spec §2.1: final answers in trace order, then each trace's probe answers and final answer
    for qid, _, final, _ in rows:
        per_q[qid].append(final)
    for qid, _, final, probes in rows:
        per_q[qid].extend(p["answer"] for p in probes)
        per_q[qid].append(final)
    return per_q


@pytest.mark.reference
@needs_shared
def test_pp_aime24_grouping_runs_fast():
    per_q = _load_pool_strings()
    assert len(per_q) == 30
    t0 = time.perf_counter()
    groups = {q: group_answers(strings) for q, strings in sorted(per_q.items())}
    elapsed = time.perf_counter() - t0
    print(
        f"\npp-aime24: grouped {sum(len(v) for v in per_q.values())} strings of 30 questions "
        f"in {elapsed:.2f} s; groups q0..q4 = {[len(groups[q]) for q in range(5)]}"
    )
    assert elapsed < 120
    for q, g in groups.items():
        for s in per_q[q]:
            if s:
                assert g.id_of(s) >= 0
        assert len(g) > 0
    # deterministic: a second run gives the same groups
    again = group_answers(per_q[12])
    assert again.index == groups[12].index
    assert [len(groups[q]) for q in range(5)] == [8, 104, 126, 12, 25]


@pytest.mark.reference
@needs_shared
def test_reference_voted_answers_and_correctness():
    """Every answer the reference simulator voted is one of our member strings, and our grading
    agrees with its is_correct column except for one documented case."""
    per_q = _load_pool_strings()
    groups = {q: group_answers(strings) for q, strings in per_q.items()}
    seen = set()
    with open(PP_AIME24 / "sc" / "results.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            key = (
                int(row["question_id"]),
                row["voted_answer"],
                row["ground_truth"],
                row["is_correct"],
            )
            if key in seen:
                continue
            seen.add(key)
            q, voted, gt, ref_correct = key
            assert voted in groups[q].index
            ours = is_correct(voted, gt)
            if voted == r"\frac{13 \cdot 6 \cdot 30}{5}" and gt == "468":
                # 13*6*30/5 = 468: Dynasor's math_equal failed on it in the reference run; we
                # grade it correct (and our deterministic representative of that group is "468").
                assert ours is True and ref_correct == "False"
                continue
            assert str(ours) == ref_correct, key


# -- issue 13: an answer must be its value; huge values; bounded time per question --------------


@pytest.mark.parametrize("answer", [r"10 \bmod 852", r"3 \to 852", r"x \to 852"])
def test_an_expression_ending_in_the_gold_is_not_the_gold(answer):
    assert not A.is_correct(answer, "852")
    groups = A.group_answers([answer, "852"])
    assert len(groups) == 2


def test_equal_values_still_match():
    assert A.is_correct(r"\frac{1704}{2}", "852") and A.is_correct("852.0", "852")
    assert A.is_correct(r"2^{10}", "1024") and A.is_correct(r"\dfrac{1}{2}", "0.5")


def test_huge_values_get_exact_keys():
    assert A.numeric_key(r"10^{10^{10}}") != A.numeric_key(r"10^{10^{10}}+1")
    assert A.numeric_key("1000000000000000001") != A.numeric_key("1000000000000000002")
    assert A.numeric_key("1000000000000000001") == A.numeric_key(r"10^{18}+1")
    assert not A.answers_equivalent("1000000000000000001", "1000000000000000002")
    assert A.numeric_key("123456789") == "123456789"  # small values: the reference's 9 digits


def test_adversarial_answers_stay_cheap():
    """Answers whose values have billions of digits are recognised from their expression tree and
    never evaluated: 16 of them in one question group in seconds (it was 150 s)."""
    import time

    answers = [rf"\left\lfloor \frac{{2^{{2^{{32}}}}}}{{3}} \right\rfloor + {k}" for k in range(16)]
    t0 = time.perf_counter()
    groups = A.group_answers([*answers, "852", "852"])
    correct = [A.is_correct(r, "852") for r in groups.representatives]
    assert time.perf_counter() - t0 < 20
    assert len(groups) == 17 and sum(correct) == 1


def test_symbolic_budget_falls_back_to_string_identity(monkeypatch):
    """Once a question's symbolic budget is spent, the rest is decided by string identity and
    counted (the simulator records the count per question)."""
    with A.symbolic_budget(0.0) as budget:
        groups = A.group_answers([r"\frac{1}{3}+x", r"x+\frac{1}{3}", "7", "7.0", r"\sqrt{3}"])
        assert A.is_correct(r"\sqrt{3}", r"\sqrt{3}") and not A.is_correct(r"3^{1/2}", r"\sqrt{3}")
    assert budget.fallbacks > 0
    assert groups.id_of("7") == groups.id_of("7.0")  # plain numbers never need sympy
    assert groups.id_of(r"\frac{1}{3}+x") != groups.id_of(r"x+\frac{1}{3}")  # no symbolic merge
    # with a budget, the same strings merge symbolically
    assert A.group_answers([r"\frac{1}{3}+x", r"x+\frac{1}{3}"]).id_of(r"x+\frac{1}{3}") == 0


def test_question_arrays_record_fallbacks(tmp_path, monkeypatch):
    from util import write_published_pool

    import mars.method.answers
    import mars.method.arrays
    from mars.store.pool import open_pool

    def symbolic(rows):  # "101" -> "\\frac{202}{2}": equal values that need sympy to group
        def tex(a):
            return rf"\frac{{{2 * int(a)}}}{{2}}" if a else a

        for r in rows:
            r["extracted_answer"] = tex(r["extracted_answer"])
            for p in r["probes"]:
                p["answer"] = tex(p["answer"])
        return rows

    path = write_published_pool(tmp_path / "p.parquet", n_questions=1, rows_hook=symbolic)
    q = open_pool(path).read_question(0)
    for f in (A.numeric_key, A._mv_parse, A._equivalent_cached):
        f.cache_clear()  # nothing decided earlier in this process: budget-free cached answers
    real_budget = mars.method.arrays.symbolic_budget
    monkeypatch.setattr(
        mars.method.arrays, "symbolic_budget", lambda: mars.method.answers.symbolic_budget(0.0)
    )
    starved = mars.method.arrays.build_arrays(q)
    assert starved.answer_fallbacks > 0
    monkeypatch.setattr(mars.method.arrays, "symbolic_budget", real_budget)
    full = mars.method.arrays.build_arrays(q)  # budget decisions were not cached: the full grouping
    assert full.answer_fallbacks == 0 and full.correct.any()
    assert not starved.correct.any()  # "\\frac{202}{2}" is 101 only to sympy


# -- issue 19: plain numbers are equal only when they are the same number ------------------------


@pytest.mark.parametrize(
    "a, b",
    [
        ("10001", "10000"),
        ("20251", "20250"),
        ("123457", "123456"),
        ("1234567891", "1234567892"),
        ("1,234,567,891", "1234567892.0"),
        ("0.3333", "0.33333"),
        (r"10\,001", "11"),  # latex2sympy reads the thin space as a sum
    ],
)
def test_different_numbers_are_not_equal_and_not_grouped(a, b):
    assert not is_correct(a, b) and not is_correct(b, a)
    assert len(group_answers([a, b])) == 2


@pytest.mark.parametrize(
    "a, b",
    [
        ("10000", "1e4"),
        ("1234567891", "1,234,567,891.00"),
        ("0.3", "0.30000000000000004"),  # float noise: 9 significant digits agree
        ("0.30", ".3"),
        (r"10\,001", "10001"),
        (r"$1\,000\,000$", "10^6"),
        ("10{,}001", "10 001"),
    ],
)
def test_the_same_number_written_differently_is_equal_and_grouped(a, b):
    assert is_correct(a, b) and is_correct(b, a)
    assert len(group_answers([a, b])) == 1


@settings(max_examples=200, deadline=None)
@given(
    st.integers(-(10**20), 10**20),
    st.integers(-3, 3),
    st.sampled_from(["{}", "{:,}", "{}.0", "{}e0"]),
)
def test_grading_of_plain_numbers_agrees_with_grouping(n, step, form):
    a, b = str(n), form.format(n + step)
    grouped = len(group_answers([a, b])) == 1
    assert is_correct(a, b) == grouped == (step == 0)
