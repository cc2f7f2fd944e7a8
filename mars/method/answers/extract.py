"""Answer text out of generated text, and the one normalisation applied before storing it.

The only place that reads *generated* text (spec §11): the last ``\\boxed{...}`` as the reference
generator and prober take it, and the conservative clean-up our own pipeline applies before an
answer is stored. Grouping and equivalence work on the stored strings and never call it.
"""

from __future__ import annotations

import re

__all__ = [
    "ANSWER_FORMATS",
    "extract_boxed",
    "extract_probe_answer",
    "extract_with",
    "normalize_answer",
]

#: How a trace's final answer is written, by name: ``boxed`` (the last ``\\boxed{…}``, the
#: default everywhere) or a pattern whose last match's first group is the answer (GSM8K's
#: ``#### 42``, "Answer: X", the last number). A server adds its own (``mars serve
#: --answer-format NAME=REGEX``); a client only names one, so no client's pattern is ever run.
ANSWER_FORMATS: dict[str, str | None] = {
    "boxed": None,
    "gsm8k": r"^####\s*(.+?)\s*$",
    "answer": r"(?i)answer\s*(?:is|:)\s*\**\s*(.+?)\s*\**\s*\.?\s*$",
    "last-number": r"(-?\d[\d,]*(?:\.\d+)?)",
}


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


def extract_with(pattern: re.Pattern[str], text: str | None) -> str | None:
    """The answer a format's ``pattern`` finds in ``text``: its last match's first group (the
    whole match without a group), a number's thousands separators dropped; None without a
    match."""
    if not text:
        return None
    found = None
    for match in pattern.finditer(text):
        found = match
    if found is None:
        return None
    answer = found.group(1) if pattern.groups else found.group(0)
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", answer.strip()):
        answer = answer.replace(",", "")
    return answer


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
