"""The per-call time limit and the per-question budget (mars.method.answers.timelimit)."""

from __future__ import annotations

import threading
import time

import pytest

from mars.method.answers import (
    answers_equivalent,
    equivalence,
    group_answers,
    is_correct,
    numeric_key,
    symbolic,
    symbolic_budget,
    timelimit,
)

# --------------------------------------------------------------------------- time limits


class TestTimeLimit:
    def test_busy_loop_is_interrupted(self):
        def spin():
            while True:
                pass

        t0 = time.monotonic()
        with pytest.raises(timelimit.SymbolicTimeout):
            timelimit.run_limited(spin, seconds=0.2)
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

        with pytest.raises(timelimit.SymbolicTimeout):
            timelimit.run_limited(stubborn, seconds=0.2)
        time.sleep(0.8)

    def test_result_passes_through(self):
        assert timelimit.run_limited(lambda: 7, seconds=1.0) == 7

    def test_outer_timer_is_restored(self):
        import signal

        fired = []
        old = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            timelimit.run_limited(lambda: None, seconds=5.0)
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
            out["limited"] = timelimit.run_limited(lambda: 5, seconds=0.1)

        th = threading.Thread(target=work)
        th.start()
        th.join(60)
        assert out == {"key": "0.375", "eq": True, "limited": 5}

    def test_slow_symbolic_key_times_out(self, monkeypatch):
        monkeypatch.setattr(timelimit, "SYMBOLIC_TIMEOUT_S", 0.3)
        s = "(q+1)^{300} - (q+2)^{299}"
        t0 = time.monotonic()
        assert numeric_key(s) is None
        assert time.monotonic() - t0 < 5.0


def test_symbolic_budget_falls_back_to_string_identity(monkeypatch):
    """Once a question's symbolic budget is spent, the rest is decided by string identity and
    counted (the simulator records the count per question)."""
    with symbolic_budget(0.0) as budget:
        groups = group_answers([r"\frac{1}{3}+x", r"x+\frac{1}{3}", "7", "7.0", r"\sqrt{3}"])
        assert is_correct(r"\sqrt{3}", r"\sqrt{3}") and not is_correct(r"3^{1/2}", r"\sqrt{3}")
    assert budget.fallbacks > 0
    assert groups.id_of("7") == groups.id_of("7.0")  # plain numbers never need sympy
    assert groups.id_of(r"\frac{1}{3}+x") != groups.id_of(r"x+\frac{1}{3}")  # no symbolic merge
    # with a budget, the same strings merge symbolically
    assert group_answers([r"\frac{1}{3}+x", r"x+\frac{1}{3}"]).id_of(r"x+\frac{1}{3}") == 0


def test_question_arrays_record_fallbacks(tmp_path, monkeypatch):
    from util import write_published_pool

    import mars.method.answers
    import mars.method.arrays
    from mars.store.pool import open_pool

    def as_fractions(rows):  # "101" -> "\\frac{202}{2}": equal values that need sympy to group
        def tex(a):
            return rf"\frac{{{2 * int(a)}}}{{2}}" if a else a

        for r in rows:
            r["extracted_answer"] = tex(r["extracted_answer"])
            for p in r["probes"]:
                p["answer"] = tex(p["answer"])
        return rows

    path = write_published_pool(tmp_path / "p.parquet", n_questions=1, rows_hook=as_fractions)
    q = open_pool(path).read_question(0)
    for f in (numeric_key, symbolic.mv_parse, equivalence._equivalent_cached):
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
