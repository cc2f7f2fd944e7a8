"""The canonical numeric key of an answer (spec §2.2 step 2): answers with one key are one group.

Plain numbers take a fast ``float()`` path; anything else is parsed with latex2sympy and
evaluated under the time limit. Integers from :data:`EXACT_FROM` on get exact keys, digit groups
separated by spaces (``10\\,001``) are one number, and an absurd magnitude is keyed by its
structure, never evaluated.
"""

from __future__ import annotations

import contextlib
import math
import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache

from .symbolic import CACHE_SIZE, MAX_DIGITS, absurd_key, log10_bound, mv_parse, structure
from .timelimit import SymbolicTimeout, run_limited

__all__ = ["EXACT_FROM", "join_groups", "numeric_key", "plain_key", "strip_dollars"]

#: From this magnitude on, integers get an exact key (9 significant digits cannot tell them apart).
EXACT_FROM: float = 1e9


def strip_dollars(s: str) -> str:
    """Strip whitespace and one surrounding ``$...$`` (reference behaviour)."""
    s = s.strip()
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s[1:-1]
    return s


#: A number written in groups of three digits with a LaTeX or plain space between them
#: (``10\\,001``, ``10{,}001``, ``10 001``): latex2sympy reads ``10\\,001`` as 11.
_SPACED_GROUPS = re.compile(r"[+-]?\d{1,3}(?:(?:\\[,;:! ]|\{,\}|~| )\d{3})+(?:\.\d+)?")
_GROUP_SPACE = re.compile(r"\\[,;:! ]|\{,\}|~| ")


def join_groups(s: str) -> str:
    """``s`` without the spaces between its digit groups, if it is such a number, else ``s``."""
    body = strip_dollars(s).strip()
    return _GROUP_SPACE.sub("", body) if _SPACED_GROUPS.fullmatch(body) else s


def _plain_body(s: str) -> str:
    """The reference's plain-number text (stripped, one ``$...$`` dropped, commas removed), after
    :func:`join_groups` (our addition)."""
    return strip_dollars(join_groups(s)).replace(",", "")


def _plain_float(s: str) -> float | None:
    """Reference "plain float" parser (``float()`` of :func:`_plain_body`)."""
    try:
        return float(_plain_body(s))
    except (ValueError, TypeError, OverflowError):
        return None


_latex2sympy = None


def _get_latex2sympy():
    global _latex2sympy
    if _latex2sympy is None:
        from latex2sympy2_extended import latex2sympy

        _latex2sympy = latex2sympy
    return _latex2sympy


def plain_key(s: str) -> str | None:
    """The numeric key of a plain number (see :func:`numeric_key`), None if ``s`` is not one.

    Below :data:`EXACT_FROM` ``.9g`` is exact for integers; from there on the literal itself is
    read exactly (``Decimal``: ``1,000,000,000,001`` and ``1.0e12`` are integers, exactly).
    """
    v = _plain_float(s)
    if v is None:
        return None
    if math.isfinite(v) and abs(v) >= EXACT_FROM:
        with contextlib.suppress(InvalidOperation):
            exact = Decimal(_plain_body(s))
            if exact == exact.to_integral_value():
                return f"int:{int(exact)}"
    return format(v, ".9g")


def _symbolic_value(s: str) -> str | None:
    import sympy

    expr = _get_latex2sympy()(s)
    if not isinstance(expr, sympy.Basic):
        return None
    if log10_bound(expr) > MAX_DIGITS:
        return f"expr:{structure(expr)}"  # absurd: compared by structure, never evaluated
    value = complex(sympy.N(expr, 15))
    if value.imag != 0 or not math.isfinite(value.real):
        return None
    if abs(value.real) >= EXACT_FROM:
        exact = expr.doit()
        if getattr(exact, "is_Integer", False):
            return f"int:{int(exact)}"
        if getattr(exact, "is_Rational", False):
            return f"rat:{int(exact.p)}/{int(exact.q)}"
    return format(value.real, ".9g")


@lru_cache(maxsize=CACHE_SIZE)
def numeric_key(s: str) -> str | None:
    """Canonical numeric key of ``s`` (``format(value, '.9g')``), or None if not numeric.

    Two answers with the same key are one group, and two plain numbers are equal exactly when
    their keys are.  Plain numbers (after stripping, dropping one ``$...$`` and removing commas)
    take the fast ``float()`` path without touching sympy.  Otherwise the stripped, de-dollared
    string (commas kept) is parsed with ``latex2sympy2_extended.latex2sympy`` and evaluated with
    ``complex(sympy.N(expr, 15))`` under the symbolic time limit; a real value (imaginary part
    exactly 0) gives its key.  Deliberate differences from the reference: integers of 10^9 and
    more get an exact key (``int:…``); digit groups separated by spaces (``10\\,001``) are one
    plain number; an expression whose value has more than :data:`MAX_DIGITS` digits is never
    evaluated: its key is its structure (``expr:…``).  Never raises, except
    :class:`BudgetExhausted` when the question's budget is spent.
    """
    if not isinstance(s, str):
        return None
    plain = plain_key(s)
    if plain is not None:
        return plain
    body = strip_dollars(s)
    if not body.strip():
        return None
    huge = absurd_key(mv_parse(s))  # Math-Verify's parse builds no values: safe to inspect
    if huge is not None:
        return huge
    try:
        return run_limited(_symbolic_value, body)
    except (Exception, SymbolicTimeout):
        return None
