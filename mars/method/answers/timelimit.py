"""Bounded time for symbolic work: a wall-clock limit per call and a budget per question.

Sympy and Math-Verify can take seconds (or forever) on adversarial answers, so every call runs
under :data:`SYMBOLIC_TIMEOUT_S`, and a question's whole grouping and grading under
:func:`symbolic_budget`; once spent, callers fall back to string identity and count it.

Mechanism (choice): ``signal.setitimer(ITIMER_REAL)`` + a ``SIGALRM`` handler raising
:class:`SymbolicTimeout`, a ``BaseException`` subclass (so library ``except Exception`` blocks
cannot swallow it; the timer re-fires every 0.5 s after the deadline in case something does).
Signals can only be installed from the main thread of the main interpreter; in any other thread the
work runs **without a timeout** (detected by ``signal.signal`` raising ``ValueError``). We chose
this over a worker process because a per-call process costs far more than the work (a few ms) and a
persistent worker cannot be started from daemonic pool workers; run grading in processes (one
``ProcessPoolExecutor`` worker per question — each worker's main thread) to keep the limit. A
previously armed ``ITIMER_REAL`` (e.g. an outer alarm) is saved and re-armed with its remaining
time. Math-Verify's own ``signal.alarm`` timeouts are disabled because they would cancel ours.
Limitation: a signal cannot interrupt a single long C-level call (e.g. a giant integer power);
sympy/latex2sympy build such expressions unevaluated and ``N()`` evaluates them in floating point,
so we have not seen this in practice.
"""

from __future__ import annotations

import contextlib
import signal
import time
from dataclasses import dataclass

__all__ = [
    "QUESTION_BUDGET_S",
    "SYMBOLIC_TIMEOUT_S",
    "BudgetExhausted",
    "SymbolicBudget",
    "SymbolicTimeout",
    "note_fallback",
    "run_limited",
    "symbolic_budget",
]

#: Wall-clock limit (seconds) of every symbolic (sympy / Math-Verify) operation.
SYMBOLIC_TIMEOUT_S: float = 5.0
#: Total symbolic time (seconds) one question's grouping and grading may take.
QUESTION_BUDGET_S: float = 30.0


class SymbolicTimeout(BaseException):
    """Raised by our SIGALRM handler; BaseException so library ``except Exception`` lets it by."""


class BudgetExhausted(BaseException):
    """The question's symbolic time budget is spent (see :class:`SymbolicBudget`).

    Not a :class:`SymbolicTimeout`: the per-call handlers that turn a timeout into "symbolic" /
    "not equivalent" (and cache that) let it through, so nothing decided by the budget is cached.
    """


@dataclass
class SymbolicBudget:
    """Total wall-clock time the symbolic work of one question may take.

    Adversarial answers (hundreds of distinct expressions that each hit the per-call limit) would
    otherwise cost minutes per question. Once the budget is spent, the remaining keys and
    comparisons fall back to string identity; ``fallbacks`` counts them and the simulator records
    the count per question.
    """

    seconds: float
    deadline: float = 0.0
    fallbacks: int = 0

    @property
    def remaining(self) -> float:
        return self.deadline - time.monotonic()


_BUDGET: list[SymbolicBudget] = []


@contextlib.contextmanager
def symbolic_budget(seconds: float = QUESTION_BUDGET_S):
    """Bound the symbolic work inside the block to ``seconds`` in total (nested: innermost)."""
    budget = SymbolicBudget(seconds, time.monotonic() + seconds)
    _BUDGET.append(budget)
    try:
        yield budget
    finally:
        _BUDGET.pop()


def run_limited(fn, *args, seconds: float | None = None):
    """``fn(*args)`` under a wall-clock limit (main thread only; see module docstring).

    Raises :class:`SymbolicTimeout` when the limit is hit, :class:`BudgetExhausted` when the
    question's budget (:func:`symbolic_budget`) is spent before or during the call.
    """
    if seconds is None:
        seconds = SYMBOLIC_TIMEOUT_S
    budget = _BUDGET[-1] if _BUDGET else None
    by_budget = False
    if budget is not None:
        left = budget.remaining
        if left <= 0:
            raise BudgetExhausted()
        if seconds is None or seconds <= 0 or left < seconds:
            seconds, by_budget = left, True
    if seconds is None or seconds <= 0 or not hasattr(signal, "setitimer"):
        return fn(*args)
    armed = [True]

    def _handler(signum, frame):
        if armed[0]:
            raise BudgetExhausted() if by_budget else SymbolicTimeout()

    try:
        old_handler = signal.signal(signal.SIGALRM, _handler)
    except ValueError:  # not the main thread of the main interpreter: no timeout possible
        return fn(*args)
    start = time.monotonic()
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds, 0.5)
    try:
        return fn(*args)
    finally:
        # Disarm first: once armed[0] is False the handler is a no-op, so the rest of the clean-up
        # cannot be interrupted.  The store itself may be interrupted by a late alarm; retry.
        while True:
            try:
                armed[0] = False
                break
            except SymbolicTimeout:
                continue
        signal.setitimer(signal.ITIMER_REAL, 0)
        # getsignal() gives None for a handler installed from C; the default is all we can restore
        signal.signal(signal.SIGALRM, signal.SIG_DFL if old_handler is None else old_handler)
        if old_delay > 0:
            remaining = max(old_delay - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, remaining, old_interval)


def note_fallback() -> None:
    """Count one key or comparison decided by string identity because the budget is spent."""
    if _BUDGET:
        _BUDGET[-1].fallbacks += 1
