"""Answer strings -> comparable answer groups.

This module is the single place where answer *text* is interpreted:

* :func:`extract_boxed` / :func:`extract_probe_answer` pull an answer out of generated text
  (last ``\\boxed{...}``, as the reference generator and prober do; spec §11).
* :func:`normalize_answer` is the one conservative normalisation applied before answers are
  *stored* by our own pipeline.  Grouping and equivalence below work on the raw strings, exactly
  as the reference does, and never call it.
* :func:`numeric_key` is the reference's canonical numeric key (spec §2.2 step 2).
* :func:`answers_equivalent` follows the order of spec §2.3; its last, symbolic step uses
  Math-Verify instead of Dynasor's ``math_equal`` (which cannot be installed beside Math-Verify,
  see ecosystem notes §4).
* :func:`group_answers` builds the answer groups of one question (spec §2.2 steps 2-5) and
  :func:`is_correct` grades a voted answer against the ground truth (spec §2.4).

Deliberate differences from the reference (``mars/answer_equiv.py`` @ 6f31776):

1. **Plain numbers are equal only when they are the same number.**  The reference calls two plain
   numbers equal within a relative tolerance of 1e-4 (10000 ≡ 10001, 123456 ≡ 123457) while its
   grouping keeps them apart.  We compare plain numbers by the key that groups them
   (:func:`numeric_key`): integers exactly, other numbers rounded to 9 significant digits (float
   noise and trailing zeros, ``0.30000000000000004`` = ``0.3`` = ``0.30``, but nothing a person
   would call another value), so grading and grouping always agree.  No percentage heuristic
   either: Dynasor's ``math_equal`` (default ``include_percentage=True``) also accepts
   reference×100 and reference÷100, which merges "5", "500" and "0.05"; Math-Verify has no such
   rule.  (A literal percent sign, "50\\%" vs "0.5", is still read as a percentage by
   Math-Verify, which is a real equality, not a heuristic.)
2. **Deterministic ids.**  The reference iterates a Python ``set`` of strings, so its group ids and
   representatives depend on the process hash seed (spec §13 item 1).  We use the order of first
   appearance in the iterable given to :func:`group_answers`.
3. **Symbolic step = Math-Verify** (``parse`` + ``verify``), with unit stripping turned off in the
   LaTeX normalisation (Math-Verify's default strips unit words, which would make "229 - d" equal
   to "229"; Dynasor never strips units).  ``answers_equivalent(a, b)`` treats ``b`` as the gold
   side of ``verify`` (Math-Verify is not symmetric); grouping always passes the established
   string (cluster opener / group representative) as ``b``.
4. **Bounded time.**  Every sympy / Math-Verify call runs under a 5 s wall-clock limit
   (``SYMBOLIC_TIMEOUT_S``); a timed-out key is "symbolic" (None) and a timed-out comparison is
   "not equivalent".  Results, timeouts included, are cached per process.  A question's whole
   grouping and grading runs under :func:`symbolic_budget` (30 s); once spent, the remaining keys
   and comparisons fall back to string identity and the count is recorded.  Values with more than
   :data:`MAX_DIGITS` digits (``2^{2^{32}}``) are recognised from the expression tree and never
   evaluated (their key is their structure), so the worst case stays cheap.
5. **An answer must be its value.**  Only LaTeX extraction is used: Math-Verify's plain-expression
   extractor reads the last number of an expression it cannot parse (``10 \\bmod 852`` → 852).
   Integers of 10^9 and more get exact keys (9 significant digits cannot tell ``10^{18}`` from
   ``10^{18}+1``).  Digit groups separated by a space (``10\\,001``, ``10{,}001``, ``10 001``)
   are one number (latex2sympy reads ``10\\,001`` as 10 + 1).

Timeout mechanism (choice): ``signal.setitimer(ITIMER_REAL)`` + a ``SIGALRM`` handler raising a
private ``BaseException`` subclass (so library ``except Exception`` blocks cannot swallow it; the
timer re-fires every 0.5 s after the deadline in case something does).  Signals can only be
installed from the main thread of the main interpreter; in any other thread the work runs
**without a timeout** (detected by ``signal.signal`` raising ``ValueError``).  We chose this over a
worker process because a per-call process costs far more than the work (a few ms) and a
persistent worker cannot be started from daemonic pool workers; run grading in processes (one
``ProcessPoolExecutor`` worker per question — each worker's main thread) to keep the limit.  A
previously armed ``ITIMER_REAL`` (e.g. an outer alarm) is saved and re-armed with its remaining
time.  Math-Verify's own ``signal.alarm`` timeouts are disabled because they would cancel ours.
Limitation: a signal cannot interrupt a single long C-level call (e.g. a giant integer power);
sympy/latex2sympy build such expressions unevaluated and ``N()`` evaluates them in floating point,
so we have not seen this in practice.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import signal
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import lru_cache

__all__ = [
    "SYMBOLIC_TIMEOUT_S",
    "AnswerGroups",
    "answers_equivalent",
    "extract_boxed",
    "extract_probe_answer",
    "group_answers",
    "is_correct",
    "normalize_answer",
    "numeric_key",
]

#: Wall-clock limit (seconds) of every symbolic (sympy / Math-Verify) operation.
SYMBOLIC_TIMEOUT_S: float = 5.0
#: Spec §2.2 step 4: more distinct symbolic strings than this -> no merging at all.
MAX_SYMBOLIC_PAIRWISE: int = 50
#: Spec §2.2 step 4: a new symbolic cluster is compared with at most this many largest groups.
MAX_GROUPS_COMPARED: int = 20
#: Total symbolic time (seconds) one question's grouping and grading may take.
QUESTION_BUDGET_S: float = 30.0
#: Beyond this many decimal digits a value is "absurd": never evaluated, compared by structure.
MAX_DIGITS: float = 10_000.0
#: From this magnitude on, integers get an exact key (9 significant digits cannot tell them apart).
EXACT_FROM: float = 1e9

_CACHE_SIZE = 1 << 16


# ---------------------------------------------------------------------------------------------
# Extraction (spec §11)
# ---------------------------------------------------------------------------------------------


def extract_boxed(text: str) -> str | None:
    """Content of the last ``boxed`` in ``text``.

    The last occurrence of ``boxed`` wins.  If it is followed by ``{`` the content up to the
    matching ``}`` is returned (nested braces allowed; an unclosed box returns everything after
    the ``{``), unstripped.  Otherwise the text up to the next ``$`` (stripped) is returned, as the
    reference generator does (``\\boxed 5$`` -> ``"5"``).  ``None`` when ``boxed`` never occurs.
    An empty box gives ``""`` (not ``None``).
    """
    if not text:
        return None
    pos = text.rfind("boxed")
    if pos < 0:
        return None
    rest = text[pos + len("boxed") :]
    if not rest.startswith("{"):
        return rest.split("$", 1)[0].strip()
    depth = 0
    for i, ch in enumerate(rest):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return rest[1:i]
    return rest[1:]  # unclosed box: everything after the opening brace


def extract_probe_answer(completion: str | None) -> str | None:
    """Answer of a probe completion generated after a prompt ending in ``\\boxed{``.

    ``extract_boxed("\\\\boxed{" + completion)``; if that is empty (or only whitespace), the
    completion stripped of whitespace and of trailing ``}``; ``None`` if still empty.
    """
    if completion is None:
        return None
    ans = extract_boxed("\\boxed{" + completion)
    if ans is not None and ans.strip():
        return ans
    fallback = completion.strip().rstrip("}").strip()
    return fallback or None


# ---------------------------------------------------------------------------------------------
# Storage normalisation
# ---------------------------------------------------------------------------------------------

_RE_DFRAC = re.compile(r"\\[dt]frac(?![A-Za-z])")
_RE_LEFT_RIGHT_NULL = re.compile(r"\\(?:left|right)(?![A-Za-z])\s*\.")
_RE_LEFT_RIGHT = re.compile(r"\\(?:left|right)(?![A-Za-z])\s*")
_RE_TEXT = re.compile(r"\\text(?![A-Za-z])\s*\{")


def _unwrap_text(s: str) -> str:
    """Replace every ``\\text{X}`` by ``X`` (brace matched; unclosed ones are left alone)."""
    out = []
    i = 0
    while True:
        m = _RE_TEXT.search(s, i)
        if m is None:
            out.append(s[i:])
            break
        depth = 0
        end = -1
        for j in range(m.end() - 1, len(s)):
            if s[j] == "{":
                depth += 1
            elif s[j] == "}":
                depth -= 1
                if depth == 0:
                    end = j
                    break
        if end < 0:
            out.append(s[i:])
            break
        out.append(s[i : m.start()])
        out.append(s[m.end() : end])
        i = end + 1
    return "".join(out)


def normalize_answer(s: str | None) -> str | None:
    """Conservative normalisation of an answer string for storage.

    Strips whitespace; removes one surrounding ``$...$`` (only when no other ``$`` is inside);
    unwraps ``\\text{...}``; ``\\dfrac``/``\\tfrac`` -> ``\\frac``; removes ``\\left``/``\\right``
    (with a following ``.`` null delimiter).  Plain integers are returned unchanged; empty -> None.
    """
    if s is None:
        return None
    s = s.strip()
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$" and "$" not in s[1:-1]:
        s = s[1:-1].strip()
    if "\\" in s:
        s = _unwrap_text(s)
        s = _RE_DFRAC.sub(r"\\frac", s)
        s = _RE_LEFT_RIGHT_NULL.sub("", s)
        s = _RE_LEFT_RIGHT.sub("", s)
        s = s.strip()
    return s or None


# ---------------------------------------------------------------------------------------------
# Time limits
# ---------------------------------------------------------------------------------------------


class _SymbolicTimeout(BaseException):
    """Raised by our SIGALRM handler; BaseException so library ``except Exception`` lets it by."""


class BudgetExhausted(BaseException):
    """The question's symbolic time budget is spent (see :class:`SymbolicBudget`).

    Not a :class:`_SymbolicTimeout`: the per-call handlers that turn a timeout into "symbolic" /
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


def _run_limited(fn, *args, seconds: float | None = None):
    """``fn(*args)`` under a wall-clock limit (main thread only; see module docstring).

    Raises :class:`_SymbolicTimeout` when the limit is hit, :class:`BudgetExhausted` when the
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
            raise BudgetExhausted() if by_budget else _SymbolicTimeout()

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
            except _SymbolicTimeout:
                continue
        signal.setitimer(signal.ITIMER_REAL, 0)
        # getsignal() gives None for a handler installed from C; the default is all we can restore
        signal.signal(signal.SIGALRM, signal.SIG_DFL if old_handler is None else old_handler)
        if old_delay > 0:
            remaining = max(old_delay - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, remaining, old_interval)


# ---------------------------------------------------------------------------------------------
# Numeric keys (spec §2.2 step 2)
# ---------------------------------------------------------------------------------------------


def _strip_dollars(s: str) -> str:
    """Strip whitespace and one surrounding ``$...$`` (reference behaviour)."""
    s = s.strip()
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s[1:-1]
    return s


#: A number written in groups of three digits with a LaTeX or plain space between them
#: (``10\\,001``, ``10{,}001``, ``10 001``): latex2sympy reads ``10\\,001`` as 11.
_SPACED_GROUPS = re.compile(r"[+-]?\d{1,3}(?:(?:\\[,;:! ]|\{,\}|~| )\d{3})+(?:\.\d+)?")
_GROUP_SPACE = re.compile(r"\\[,;:! ]|\{,\}|~| ")


def _join_groups(s: str) -> str:
    """``s`` without the spaces between its digit groups, if it is such a number, else ``s``."""
    body = _strip_dollars(s).strip()
    return _GROUP_SPACE.sub("", body) if _SPACED_GROUPS.fullmatch(body) else s


def _plain_body(s: str) -> str:
    """The reference's plain-number text (stripped, one ``$...$`` dropped, commas removed), after
    :func:`_join_groups` (our addition)."""
    return _strip_dollars(_join_groups(s)).replace(",", "")


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


def _plain_key(s: str) -> str | None:
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


@lru_cache(maxsize=_CACHE_SIZE)
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
    plain = _plain_key(s)
    if plain is not None:
        return plain
    body = _strip_dollars(s)
    if not body.strip():
        return None
    huge = _absurd_key(_mv_parse(s))  # Math-Verify's parse builds no values: safe to inspect
    if huge is not None:
        return huge
    try:
        return _run_limited(_symbolic_value, body)
    except (Exception, _SymbolicTimeout):
        return None


# ---------------------------------------------------------------------------------------------
# Equivalence (spec §2.3)
# ---------------------------------------------------------------------------------------------


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


@lru_cache(maxsize=_CACHE_SIZE)
def _mv_parse(s: str):
    """Math-Verify parse of one string (cached; empty list on failure or timeout)."""
    parse, _, config = _math_verify()
    try:
        return _run_limited(
            lambda: parse(
                _as_latex(s), extraction_config=config, parsing_timeout=None, raise_on_error=False
            )
        )
    except (Exception, _SymbolicTimeout):
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


@lru_cache(maxsize=_CACHE_SIZE)
def _fingerprint(s: str):
    """Values of each parsed expression of ``s`` at two fixed sample points, plus its parsed
    strings; None when the parse holds anything but plain expressions and strings."""
    items = _mv_parse(s)
    if not items:
        return None
    try:
        return _run_limited(_fingerprint_values, items)
    except (Exception, _SymbolicTimeout):
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
    return _absurd_key(items) is not None


def _absurd_key(items) -> str | None:
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


def _symbolic_equal(a: str, b: str) -> bool:
    """Math-Verify comparison with ``b`` as gold (never on absurd magnitudes)."""
    a, b = _join_groups(a), _join_groups(b)
    gold = _mv_parse(b)
    pred = _mv_parse(a)
    if not gold or not pred:
        return False
    if _absurd(gold) or _absurd(pred):
        return False  # string equality was checked before; sympy would hang on such a value
    if _clearly_different(a, b):
        return False
    _, verify, _ = _math_verify()
    try:
        return bool(
            _run_limited(lambda: verify(gold, pred, timeout_seconds=None, raise_on_error=False))
        )
    except (Exception, _SymbolicTimeout):
        return False


@lru_cache(maxsize=1 << 18)
def _equivalent_cached(a: str, b: str) -> bool:
    if a.strip().lower() == b.strip().lower():
        return True
    if _quick_normalise(a) == _quick_normalise(b):
        return True
    ka, kb = _plain_key(a), _plain_key(b)
    if ka is not None and kb is not None:
        return ka == kb  # two plain numbers: the same number (the key that groups them)
    if not (_plausible(a) and _plausible(b)):
        return False
    if not a.strip() or not b.strip():
        return False
    return _symbolic_equal(a, b)


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
        _note_fallback()
        return answer is not None and same_string(answer, ground_truth)
    except Exception:
        return answer is not None and answer == ground_truth


def same_string(a: str, b: str) -> bool:
    """The string-level part of equivalence: equal up to case, spaces, ``$…$`` and ``\\dfrac``."""
    return a == b or _quick_normalise(a) == _quick_normalise(b)


def _note_fallback() -> None:
    if _BUDGET:
        _BUDGET[-1].fallbacks += 1


def _key_or_fallback(s: str) -> str | None:
    """:func:`numeric_key`, or only its plain-number part once the budget is spent."""
    try:
        return numeric_key(s)
    except BudgetExhausted:
        _note_fallback()
        return _plain_key(s)


def _equivalent_or_fallback(a: str, b: str) -> bool:
    """:func:`answers_equivalent`, or string identity once the budget is spent."""
    try:
        return _safe_equivalent(a, b)
    except BudgetExhausted:
        _note_fallback()
        return same_string(a, b)


# ---------------------------------------------------------------------------------------------
# Grouping (spec §2.2)
# ---------------------------------------------------------------------------------------------


@dataclass
class AnswerGroups:
    """Answer groups of one question.

    ``representatives[g]`` is the first member of group ``g``; ``index`` maps every member string
    to its group id; ``members[g]`` lists the distinct member strings in insertion order.
    """

    representatives: list[str]
    index: dict[str, int]
    members: list[list[str]] = field(default_factory=list)
    _fallback: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.representatives)

    def id_of(self, s: str | None) -> int:
        """Group id of ``s``: None -> -1; a member -> its id; otherwise the first group (id order)
        whose representative is equivalent to ``s`` (``answers_equivalent(s, rep)``), else -1."""
        if s is None:
            return -1
        gid = self.index.get(s)
        if gid is not None:
            return gid
        gid = self._fallback.get(s)
        if gid is not None:
            return gid
        gid = -1
        for g, rep in enumerate(self.representatives):
            if _equivalent_or_fallback(s, rep):
                gid = g
                break
        self._fallback[s] = gid
        return gid


def group_answers(strings: Iterable[str | None]) -> AnswerGroups:
    """Group answer strings (spec §2.2 steps 2-5, deterministic first-appearance order).

    None and empty strings are skipped.  Numeric strings (``numeric_key`` not None) with the same
    key form one group, groups ordered by first appearance of the key.  Symbolic strings are then
    appended: with more than 50 distinct symbolic strings each is its own group; otherwise greedy
    clustering (an unused string opens a cluster and absorbs every later unused string equivalent
    to it; the cluster joins the first of the up-to-20 largest existing groups whose representative
    is equivalent to the cluster's first string, else it becomes a new group).
    """
    unique: dict[str, None] = {}
    for s in strings:
        if s and isinstance(s, str) and s not in unique:
            unique[s] = None

    members: list[list[str]] = []
    key_group: dict[str, int] = {}
    symbolic: list[str] = []
    for s in unique:
        key = _key_or_fallback(s)
        if key is None:
            symbolic.append(s)
            continue
        g = key_group.get(key)
        if g is None:
            key_group[key] = len(members)
            members.append([s])
        else:
            members[g].append(s)

    if len(symbolic) > MAX_SYMBOLIC_PAIRWISE:
        members.extend([s] for s in symbolic)
    else:
        used = [False] * len(symbolic)
        for i, opener in enumerate(symbolic):
            if used[i]:
                continue
            used[i] = True
            cluster = [opener]
            for j in range(i + 1, len(symbolic)):
                if used[j]:
                    continue
                if _equivalent_or_fallback(symbolic[j], opener):
                    used[j] = True
                    cluster.append(symbolic[j])
            # up to 20 largest existing groups; sorted() is stable, so ties keep group order
            largest = sorted(range(len(members)), key=lambda g: -len(members[g]))
            target = -1
            for g in largest[:MAX_GROUPS_COMPARED]:
                if _equivalent_or_fallback(opener, members[g][0]):
                    target = g
                    break
            if target >= 0:
                members[target].extend(cluster)
            else:
                members.append(cluster)

    index = {s: g for g, ms in enumerate(members) for s in ms}
    return AnswerGroups(representatives=[ms[0] for ms in members], index=index, members=members)


def group_answers_online(strings: Iterable[str | None]) -> AnswerGroups:
    """Group answer strings one at a time, never revisiting a string's group (live mode).

    A live run sees answers as they arrive and must give each the group id it will keep, so the
    groups of a prefix of ``strings`` are a prefix of the groups of all of them (ids keep their
    order). A numeric string joins the group of its numeric key; a symbolic string (and a numeric
    one with a new key) joins the first of the up-to-20 largest groups whose representative is
    equivalent to it, else opens a group. After 50 distinct symbolic strings, new ones each open a
    group without comparison, as in :func:`group_answers`.
    """
    online = OnlineGroups()
    online.add(strings)
    return online.groups()


class OnlineGroups:
    """:func:`group_answers_online` fed as answers arrive: :meth:`add` gives each string the
    group id it keeps."""

    def __init__(self) -> None:
        self.members: list[list[str]] = []
        self.index: dict[str, int] = {}
        self.key_group: dict[str, int] = {}
        self.symbolic_led: set[int] = set()
        self.n_symbolic = 0

    def __len__(self) -> int:
        return len(self.members)

    def add(self, strings: Iterable[str | None]) -> list[int]:
        """The group id of every string (-1 for no answer), grouping the new ones."""
        return [self._add(s) for s in strings]

    def _add(self, s: str | None) -> int:
        if not s or not isinstance(s, str):
            return -1
        if s in self.index:
            return self.index[s]
        members = self.members
        key = _key_or_fallback(s)
        g = self.key_group.get(key, -1) if key is not None else -1
        if g < 0 and (key is not None or self.n_symbolic < MAX_SYMBOLIC_PAIRWISE):
            candidates = sorted(range(len(members)), key=lambda h: -len(members[h]))[
                :MAX_GROUPS_COMPARED
            ]
            for h in candidates:
                if (key is None or h in self.symbolic_led) and _equivalent_or_fallback(
                    s, members[h][0]
                ):
                    g = h
                    break
        if key is None:
            self.n_symbolic += 1
        if g < 0:
            g = len(members)
            members.append([])
            if key is None:
                self.symbolic_led.add(g)
        if key is not None:
            self.key_group.setdefault(key, g)
        members[g].append(s)
        self.index[s] = g
        return g

    def groups(self) -> AnswerGroups:
        return AnswerGroups(
            representatives=[ms[0] for ms in self.members],
            index=dict(self.index),
            members=[list(ms) for ms in self.members],
        )


def _safe_equivalent(a: str, b: str) -> bool:
    try:
        return answers_equivalent(a, b)
    except Exception:
        return False
