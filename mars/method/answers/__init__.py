"""Answer strings -> comparable answer groups.

This package is the single place where answer *text* is interpreted, one module per step:

* :mod:`.extract`: :func:`extract_boxed` / :func:`extract_probe_answer` pull an answer out of
  generated text (last ``\\boxed{...}``, as the reference generator and prober do; spec §11);
  :func:`normalize_answer` is the one conservative normalisation applied before answers are
  *stored* by our own pipeline.  Grouping and equivalence below work on the raw strings, exactly
  as the reference does, and never call it.
* :mod:`.numeric`: :func:`numeric_key` is the reference's canonical numeric key (spec §2.2 step 2).
* :mod:`.equivalence`: :func:`answers_equivalent` follows the order of spec §2.3; its last,
  symbolic step (:mod:`.symbolic`) uses Math-Verify instead of Dynasor's ``math_equal`` (which
  cannot be installed beside Math-Verify, see ecosystem notes §4); :func:`is_correct` grades a
  voted answer against the ground truth (spec §2.4).
* :mod:`.groups`: :func:`group_answers` builds the answer groups of one question (spec §2.2
  steps 2-5), :class:`OnlineGroups` the same as answers arrive (live runs).
* :mod:`.timelimit`: every sympy / Math-Verify call runs under a time limit, a question under a
  budget.

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
"""

from __future__ import annotations

from .equivalence import answers_equivalent, is_correct, same_string
from .extract import (
    ANSWER_FORMATS,
    extract_boxed,
    extract_probe_answer,
    extract_with,
    normalize_answer,
)
from .groups import (
    MAX_GROUPS_COMPARED,
    MAX_SYMBOLIC_PAIRWISE,
    AnswerGroups,
    OnlineGroups,
    group_answers,
    group_answers_online,
)
from .numeric import EXACT_FROM, numeric_key
from .symbolic import MAX_DIGITS, log10_bound, structure
from .timelimit import (
    QUESTION_BUDGET_S,
    SYMBOLIC_TIMEOUT_S,
    BudgetExhausted,
    SymbolicBudget,
    symbolic_budget,
)

__all__ = [
    "ANSWER_FORMATS",
    "EXACT_FROM",
    "MAX_DIGITS",
    "MAX_GROUPS_COMPARED",
    "MAX_SYMBOLIC_PAIRWISE",
    "QUESTION_BUDGET_S",
    "SYMBOLIC_TIMEOUT_S",
    "AnswerGroups",
    "BudgetExhausted",
    "OnlineGroups",
    "SymbolicBudget",
    "answers_equivalent",
    "extract_boxed",
    "extract_probe_answer",
    "extract_with",
    "group_answers",
    "group_answers_online",
    "is_correct",
    "log10_bound",
    "normalize_answer",
    "numeric_key",
    "same_string",
    "structure",
    "symbolic_budget",
]
