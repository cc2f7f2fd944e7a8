"""Math-Verify and sympy behind the answers: parsing, the magnitude bound, symbolic equality.

Everything here runs under :mod:`~mars.method.answers.timelimit`. Values with more than
:data:`MAX_DIGITS` digits (``2^{2^{32}}``) are recognised from the expression tree and never
evaluated; a cheap two-point evaluation rejects most unequal pairs before Math-Verify's
``simplify``. Only LaTeX extraction is used (an answer must *be* its value), and Math-Verify's unit
stripping is off (it would make "229 - d" equal to "229").
"""

from __future__ import annotations

import logging
import math
import zlib
from functools import lru_cache

from .timelimit import SymbolicTimeout, run_limited

__all__ = ["MAX_DIGITS", "absurd_key", "log10_bound", "mv_parse", "structure", "symbolic_equal"]

#: Beyond this many decimal digits a value is "absurd": never evaluated, compared by structure.
MAX_DIGITS: float = 10_000.0

#: Entries of each per-process cache of parses, keys and fingerprints.
CACHE_SIZE = 1 << 16


def log10_bound(expr) -> float:
    """An upper bound on log10 of |value| of a sympy expression, from its tree alone.

    Cheap (no evaluation), so a giant power such as ``2^{2^{32}}`` is recognised before sympy
    tries to build its billion digits (a C-level computation no timeout can interrupt).
    """
    import sympy

    if expr.is_Integer or expr.is_Rational:
        p, q = abs(int(expr.p)), int(expr.q)
        return max(p.bit_length(), q.bit_length()) * math.log10(2)
    if expr.is_Number:
        try:
            v = abs(complex(expr))
        except (TypeError, ValueError, OverflowError):
            return math.inf
        return math.log10(v) if v > 0 else 0.0
    if not expr.args:
        return 1.0  # a symbol or a constant (pi, e, i)
    if isinstance(expr, sympy.Pow):
        base, exp = expr.args
        lb, le = log10_bound(base), log10_bound(exp)
        if le > 15:
            return math.inf if lb > 0 else 0.0
        return max(lb, 0.0) * 10.0**le + 1.0
    if isinstance(expr, sympy.factorial):
        n = 10.0 ** min(log10_bound(expr.args[0]), 300)
        return n * math.log10(max(n, 2)) + 1.0
    bounds = [log10_bound(a) for a in expr.args]
    if isinstance(expr, sympy.Mul):
        return sum(max(b, 0.0) for b in bounds) + 1.0
    return max(bounds) + math.log10(len(bounds)) + 1.0


class _SuppressTimeoutDisabledWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


_mv = None


def _math_verify():
    """(parse, verify, extraction config), imported lazily."""
    global _mv
    if _mv is None:
        from latex2sympy2_extended import NormalizationConfig
        from math_verify import LatexExtractionConfig, parse, verify

        for name in ("math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).addFilter(_SuppressTimeoutDisabledWarning())
        config = (
            LatexExtractionConfig(
                boxed_match_priority=0,
                normalization_config=NormalizationConfig(
                    basic_latex=True,
                    units=False,
                    malformed_operators=True,
                    nits=True,
                    boxed="all",
                    equations=False,
                ),
            ),
        )  # LaTeX only: the plain-expression extractor takes the last number of an expression
        # it cannot parse ("10 \\bmod 852" -> 852), and an answer must BE its value
        _mv = (parse, verify, config)
    return _mv


def _as_latex(s: str) -> str:
    t = s.strip()
    if len(t) >= 2 and t[0] == "$" and t[-1] == "$":
        return t
    return f"${t}$"


@lru_cache(maxsize=CACHE_SIZE)
def mv_parse(s: str):
    """Math-Verify parse of one string (cached; empty list on failure or timeout)."""
    parse, _, config = _math_verify()
    try:
        return run_limited(
            lambda: parse(
                _as_latex(s), extraction_config=config, parsing_timeout=None, raise_on_error=False
            )
        )
    except (Exception, SymbolicTimeout):
        return []


#: Two sample points for the fast reject; each free symbol gets a value derived from its name.
_SAMPLE_POINTS = ((0.5772156649, 0.7390851332), (1.3247179572, 0.1234567891))
#: Fast reject only when values differ by more than this (relative to max(1, |v|)); Math-Verify
#: rounds floats to 6 decimals, so anything it could call equal stays far inside this margin.
_FAST_REJECT_TOL = 1e-5


def _symbol_value(name: str, point: int) -> float:
    base, step = _SAMPLE_POINTS[point]
    return base + step * ((zlib.crc32(name.encode("utf-8")) % 997) / 997.0)


def _fingerprint_values(items) -> tuple[list[tuple[complex | None, complex | None]], list[str]]:
    import sympy

    values: list[tuple[complex | None, complex | None]] = []
    strings: list[str] = []
    for item in items:
        if isinstance(item, str):
            strings.append(item.strip())
            continue
        # Math-Verify compares a bare Symbol by name (e.g. "\\text{No}" == "No"), so only
        # compound expressions over plain real symbols take the fast path.
        if not isinstance(item, sympy.Expr) or isinstance(item, sympy.Symbol):
            raise TypeError("no fast path")
        for sym in item.free_symbols:
            if any(
                getattr(sym, attr) is not None
                for attr in ("is_integer", "is_rational", "is_positive", "is_negative", "is_zero")
            ):
                raise TypeError("no fast path for symbols with number-theoretic assumptions")
        pair = []
        for k in (0, 1):
            subs = {sym: _symbol_value(str(sym), k) for sym in item.free_symbols}
            try:
                v = complex(item.evalf(15, subs=subs))
            except (TypeError, ValueError, ZeroDivisionError, OverflowError):
                v = None
            if v is not None and not (math.isfinite(v.real) and math.isfinite(v.imag)):
                v = None
            pair.append(v)
        values.append((pair[0], pair[1]))
    return values, strings


@lru_cache(maxsize=CACHE_SIZE)
def _fingerprint(s: str):
    """Values of each parsed expression of ``s`` at two fixed sample points, plus its parsed
    strings; None when the parse holds anything but plain expressions and strings."""
    items = mv_parse(s)
    if not items:
        return None
    try:
        return run_limited(_fingerprint_values, items)
    except (Exception, SymbolicTimeout):
        return None


def _values_differ(u: complex | None, v: complex | None) -> bool:
    if u is None or v is None:
        return False
    return abs(u - v) > _FAST_REJECT_TOL * max(1.0, abs(u), abs(v))


def _clearly_different(a: str, b: str) -> bool:
    """Cheap, conservative proof that Math-Verify cannot call ``a`` and ``b`` equal.

    Math-Verify compares every parsed item of one side with every item of the other (expressions
    symbolically/numerically, strings by equality).  If all items are plain sympy expressions or
    strings, no string is shared, and every pair of expressions takes clearly different values at
    one of two sample points (same symbol -> same value on both sides), the two sides are not
    identically equal, so Math-Verify's ``verify`` would return False.  This skips sympy's
    ``simplify`` (tens of ms) for the common "symbolic vs unrelated number" comparison.
    """
    if "%" in a or "%" in b:  # Math-Verify reads "9\\%" as 9 when compared with an integer
        return False
    fa = _fingerprint(a)
    fb = _fingerprint(b)
    if fa is None or fb is None:
        return False
    (va, sa), (vb, sb) = fa, fb
    if set(sa) & set(sb):
        return False
    for pa in va:
        for pb in vb:
            if not (_values_differ(pa[0], pb[0]) or _values_differ(pa[1], pb[1])):
                return False
    return True


def _absurd(items) -> bool:
    """Whether a Math-Verify parse holds a value too large to evaluate (see :data:`MAX_DIGITS`)."""
    return absurd_key(items) is not None


def absurd_key(items) -> str | None:
    """The structural key of the first too-large expression of a Math-Verify parse, else None."""
    import sympy

    for x in items:
        if isinstance(x, sympy.Basic):
            try:
                if log10_bound(x) > MAX_DIGITS:
                    return f"expr:{structure(x)}"
            except (TypeError, ValueError, OverflowError, RecursionError):
                return None
    return None


def structure(expr) -> str:
    """The expression tree as text, in the order it was built (``sympy.srepr`` would sort the
    terms of a sum, which evaluates them)."""
    if not expr.args:
        return f"{type(expr).__name__}({expr})"
    return f"{expr.func.__name__}({', '.join(structure(a) for a in expr.args)})"


def symbolic_equal(a: str, b: str) -> bool:
    """Math-Verify comparison with ``b`` as gold (never on absurd magnitudes); digit groups
    already joined (:func:`~mars.method.answers.numeric.join_groups`)."""
    gold = mv_parse(b)
    pred = mv_parse(a)
    if not gold or not pred:
        return False
    if _absurd(gold) or _absurd(pred):
        return False  # string equality was checked before; sympy would hang on such a value
    if _clearly_different(a, b):
        return False
    _, verify, _ = _math_verify()
    try:
        return bool(
            run_limited(lambda: verify(gold, pred, timeout_seconds=None, raise_on_error=False))
        )
    except (Exception, SymbolicTimeout):
        return False
