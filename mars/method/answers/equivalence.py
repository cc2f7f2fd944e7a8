"""Are two answers the same answer (spec §2.3), and is a voted answer correct (spec §2.4)?

Two plain numbers are equal exactly when their numeric keys are (so grading and grouping always
agree; no relative tolerance, no ×100 percentage rule); anything else goes through cheap string
checks, then a time-limited Math-Verify comparison with ``b`` as the gold side.
"""

from __future__ import annotations

import re
from functools import lru_cache

from .numeric import join_groups, plain_key
from .symbolic import symbolic_equal
from .timelimit import BudgetExhausted, note_fallback

__all__ = ["answers_equivalent", "is_correct", "same_string"]


def _quick_normalise(s: str) -> str:
    s = s.strip().lower()
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s[1:-1]
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return s.replace(" ", "")


_RE_PLAUSIBLE = re.compile(r"[\d\\^{}/_]")


def _plausible(s: str) -> bool:
    """Reference filter: a digit or one of ``\\ ^ { } / _`` in the first 50 chars, or len <= 30."""
    return len(s) <= 30 or _RE_PLAUSIBLE.search(s[:50]) is not None


@lru_cache(maxsize=1 << 18)
def _equivalent_cached(a: str, b: str) -> bool:
    if a.strip().lower() == b.strip().lower():
        return True
    if _quick_normalise(a) == _quick_normalise(b):
        return True
    ka, kb = plain_key(a), plain_key(b)
    if ka is not None and kb is not None:
        return ka == kb  # two plain numbers: the same number (the key that groups them)
    if not (_plausible(a) and _plausible(b)):
        return False
    if not a.strip() or not b.strip():
        return False
    return symbolic_equal(join_groups(a), join_groups(b))


def answers_equivalent(a: str | None, b: str | None) -> bool:
    """Are two answer strings equivalent?  Spec §2.3 order (``b`` is the reference side).

    None on either side -> False; exact equality; strip+lower equality; quick-normalised
    equality; both plain numbers -> the same :func:`numeric_key` (integers exactly, others to 9
    significant digits; the reference: a relative tolerance of 1e-4, and ×100/÷100 percentage
    rule); implausible string on either side -> False; empty on either side -> False; else a
    time-limited Math-Verify comparison.  Cached; never raises for string inputs.
    """
    if a is None or b is None:
        return False
    if a == b:
        return True
    if not isinstance(a, str) or not isinstance(b, str):
        return False
    return _equivalent_cached(a, b)


def is_correct(answer: str | None, ground_truth: str) -> bool:
    """Spec §2.4: ``answers_equivalent(answer, ground_truth)``; on error, plain string equality
    (and string identity once the question's symbolic budget is spent)."""
    try:
        return answers_equivalent(answer, ground_truth)
    except BudgetExhausted:
        note_fallback()
        return answer is not None and same_string(answer, ground_truth)
    except Exception:
        return answer is not None and answer == ground_truth


def same_string(a: str, b: str) -> bool:
    """The string-level part of equivalence: equal up to case, spaces, ``$…$`` and ``\\dfrac``."""
    return a == b or _quick_normalise(a) == _quick_normalise(b)
