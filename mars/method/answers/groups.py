"""The answer groups of one question (spec §2.2 steps 2-5), built offline or as answers arrive.

Ids follow the order of first appearance, so they do not depend on the process hash seed (the
reference iterates a ``set``). Once the question's symbolic budget is spent, keys and comparisons
fall back to string identity (:mod:`~mars.method.answers.timelimit`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .equivalence import answers_equivalent, same_string
from .numeric import numeric_key, plain_key
from .timelimit import BudgetExhausted, note_fallback

__all__ = [
    "MAX_GROUPS_COMPARED",
    "MAX_SYMBOLIC_PAIRWISE",
    "AnswerGroups",
    "OnlineGroups",
    "group_answers",
    "group_answers_online",
]

#: Spec §2.2 step 4: more distinct symbolic strings than this -> no merging at all.
MAX_SYMBOLIC_PAIRWISE: int = 50
#: Spec §2.2 step 4: a new symbolic cluster is compared with at most this many largest groups.
MAX_GROUPS_COMPARED: int = 20


def _key_or_fallback(s: str) -> str | None:
    """:func:`numeric_key`, or only its plain-number part once the budget is spent."""
    try:
        return numeric_key(s)
    except BudgetExhausted:
        note_fallback()
        return plain_key(s)


def _equivalent_or_fallback(a: str, b: str) -> bool:
    """:func:`answers_equivalent`, or string identity once the budget is spent."""
    try:
        return _safe_equivalent(a, b)
    except BudgetExhausted:
        note_fallback()
        return same_string(a, b)


def _safe_equivalent(a: str, b: str) -> bool:
    try:
        return answers_equivalent(a, b)
    except Exception:
        return False


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
