"""Problems to solve: the bundled sets, jsonl files, and the selection of question ids.

A problem file is UTF-8 jsonl, one ``{"question": ..., "answer": ...}`` object per line (other
keys are ignored); the qid is the 0-based line index and the dataset name the file stem. The
question is a non-empty string; the answer a string or a number (its text is graded), or null
when it is not known (live traffic: accuracy is then n/a). Blank lines may end the file, not
interrupt it (they would shift the qids). ``aime_2025``, ``hmmt_feb_2025`` and ``brumo_2025`` are
bundled (``mars/data/problems``). docs/live.md shows the format.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import reprlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import MarsError, UsageError
from .userfiles import parse_json, regular_file

PROBLEMS_DIR = Path(__file__).resolve().parent.parent / "data" / "problems"
#: The largest question id a selection may name (far above any benchmark's size).
MAX_QID = 1_000_000


@dataclass(frozen=True)
class Problem:
    """A question to solve."""

    qid: int
    question: str
    answer: str | None  # ground truth; None: not known (accuracy n/a)
    dataset: str = ""


def bundled_problem_sets() -> list[str]:
    """Names of the problem files bundled in ``mars/data/problems`` (``aime_2025``, ...)."""
    return sorted(p.stem for p in PROBLEMS_DIR.glob("*.jsonl"))


def problems_path(path_or_name: str | Path) -> Path:
    """The jsonl file of a path or of a bundled set's name."""
    p = Path(path_or_name)
    if os.path.lexists(p):
        return regular_file(p)  # a FIFO would block the reader forever
    name = str(path_or_name)
    name = name.removesuffix(".jsonl")
    bundled = PROBLEMS_DIR / f"{name}.jsonl"
    if not bundled.exists():
        raise MarsError(
            f"{path_or_name}: no such problem file or bundled set "
            f"(bundled: {', '.join(bundled_problem_sets())})"
        )
    return bundled


def load_problems(path_or_name: str | Path) -> list[Problem]:
    """Problems of a jsonl file or of a bundled set by name (qid = 0-based line index); a line
    that is not a problem is one error naming the file, the line and what is wrong."""
    p = problems_path(path_or_name)
    out = []
    blank = None  # the first blank line after the last problem
    try:
        with p.open(encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                where = f"{p}:{i + 1}"
                if not line.strip():
                    blank = blank or where
                    continue
                if blank is not None:
                    raise MarsError(
                        f"{blank}: blank line before more problems (the qid is the line index)"
                    )
                out.append(_problem(parse_json(line, where), i, p.stem, where))
    except UnicodeDecodeError as exc:
        raise MarsError(f"{p}: not UTF-8 text ({exc.reason})") from None
    if not out:
        raise MarsError(f"{p}: no problems")
    return out


def _problem(row: object, qid: int, dataset: str, where: str) -> Problem:
    if not isinstance(row, dict):
        raise MarsError(f"{where}: not a JSON object with a question and an answer")
    missing = [k for k in ("question", "answer") if k not in row]
    if missing:
        hint = " (null for an answer that is not known)" if "answer" in missing else ""
        raise MarsError(f"{where}: no {' and no '.join(map(repr, missing))} key{hint}")
    question, answer = row["question"], row["answer"]
    if not isinstance(question, str) or not question.strip():
        raise MarsError(f"{where}: 'question' is {_shown(question)}, not a non-empty string")
    if answer is None:
        return Problem(qid=qid, question=question, answer=None, dataset=dataset)
    if isinstance(answer, bool) or not isinstance(answer, str | int | float):
        raise MarsError(
            f"{where}: 'answer' is {_shown(answer)}, not a string, a number or null (not known)"
        )
    text = str(answer).strip()
    if not text:
        raise MarsError(f"{where}: 'answer' is empty (null for an answer that is not known)")
    return Problem(qid=qid, question=question, answer=text, dataset=dataset)


def _shown(value: object) -> str:
    return reprlib.repr(value)


def select_problems(
    problems: Sequence[Problem] | str | Path, questions: Iterable[int] | None
) -> tuple[dict[int, Problem], list[int]]:
    """(problems by qid, the sorted qids asked for: all by default); unknown qids are an error."""
    if isinstance(problems, str | Path):
        problems = load_problems(problems)
    by_qid = {p.qid: p for p in problems}
    if len(by_qid) != len(problems):
        raise MarsError("duplicate qids in problems")
    qids = sorted(by_qid) if questions is None else sorted({int(q) for q in questions})
    missing = [q for q in qids if q not in by_qid]
    if missing:
        raise UsageError(
            f"questions {missing[:5]}{'…' if len(missing) > 5 else ''} not in problems "
            f"(qids {min(by_qid)}..{max(by_qid)})"
        )
    return by_qid, qids


def problem_digest(problem: Problem) -> str:
    """Identity of one question's content (its id, text, answer and problem set): what an
    artifact made for it records, and is checked against when loaded."""
    return problems_digest([problem])


def problems_digest(problems: Iterable[Problem]) -> str:
    """Identity of a problem selection (recorded in pool manifests, compared on resume)."""
    h = hashlib.blake2b(digest_size=12)
    for p in problems:
        h.update(json.dumps([p.qid, p.question, p.answer, p.dataset]).encode())
    return h.hexdigest()


_PART = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?")


def parse_question_spec(spec: str | None, name: str = "--questions") -> list[int] | None:
    """``"0-4,7"`` → [0, 1, 2, 3, 4, 7] (sorted, each id once); None or "" → None (all).

    ``name`` is what errors call the value (the option, or a workflow config key)."""
    if spec is None or not spec.strip():
        return None
    out: set[int] = set()
    for part in spec.split(","):
        m = _PART.fullmatch(part)
        if not m:
            raise UsageError(f"{name} {spec!r}: {part.strip()!r} is not an id or a range a-b")
        a, b = int(m.group(1)), int(m.group(2) or m.group(1))
        if b < a:
            raise UsageError(f"{name} {spec!r}: range {a}-{b} runs backwards")
        if b > MAX_QID:
            raise UsageError(f"{name} {spec!r}: question ids go up to {MAX_QID:,}")
        out.update(range(a, b + 1))
    return sorted(out)
