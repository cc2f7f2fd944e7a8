"""Answers attached to a pool's questions afterwards: the targets a harness kept, matched to the
questions served traffic recorded (``mars simulate --answers FILE``).

A recorded question is the prompt as the model saw it (a chat template around the harness's
text), and its number follows the order questions finished, not the harness's documents; so each
pool question takes the answer of the one line of FILE (a problems jsonl: ``{"question": ...,
"answer": ...}``) whose question text its prompt contains. Nothing in the pool changes: the
simulation grades against these answers, and records the file it read.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import MarsError
from ..store.pool import Pool
from ..store.problems import load_problems


def match_answers(pool: Pool, path: str | Path, qids: Sequence[int]) -> dict[int, str]:
    """The answer of each question ``qids`` of ``pool`` from the problems file ``path``; a
    question no line matches, or more than one does, is one line naming it."""
    problems = [p for p in load_problems(path) if p.question.strip() and p.answer is not None]
    out: dict[int, str] = {}
    for qid in qids:
        meta = pool.question_meta(qid) if hasattr(pool, "question_meta") else {}
        prompt = str(meta.get("question") or "")
        found = [p for p in problems if p.question.strip() in prompt]
        if len({p.answer for p in found}) > 1:  # the longest text wins where one holds another
            longest = max(len(p.question.strip()) for p in found)
            found = [p for p in found if len(p.question.strip()) == longest]
        if not found:
            raise MarsError(
                f"--answers {path}: no line's question is in question {qid}'s prompt "
                f"({prompt[:60]!r}…); leave it out with --questions"
            )
        answers = {str(p.answer) for p in found}
        if len(answers) > 1:
            raise MarsError(
                f"--answers {path}: question {qid}'s prompt holds {len(found)} lines' questions "
                "with different answers"
            )
        out[qid] = answers.pop()
    return out
