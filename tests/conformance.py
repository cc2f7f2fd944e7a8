"""Conformance with the authors' simulator: our runs against ../shared/fixtures/reference-sim.

Used by tests/simulate/test_conformance.py and by hand (``python tests/conformance.py``).

Answer group ids break ties (lowest id wins). The reference numbers groups in the iteration order of
a Python ``set`` of strings, which follows the process's random hash seed; we number them by first
appearance. Where a row differs, :func:`explain` searches for an order of the few answers involved
(a permutation of their ids) under which *every* method reproduces the reference exactly for that
question: the difference is then explained by the id order alone.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

SHARED = Path(__file__).resolve().parents[2] / "shared"
FIXTURES = SHARED / "fixtures" / "reference-sim"

#: fixture folder -> our method name
FOLDER_METHOD = {
    "sc": "sc",
    "sc-mars": "sc-mars",
    "sc-mars-cal": "sc-mars-cal",
    "sc-mars-oracle": "sc-mars-oracle",
    "sc-mars-oracle-cal": "sc-mars-oracle-cal",
    "dco": "dco",
    "dco-mars": "dco-mars",
    "dco-mars-cal": "dco-mars-cal",
    "dco-mars-oracle": "dco-mars-oracle",
    "sc-pp-u3": "sc-pp",
    "sc-pp-u4": "sc-pp",
}
#: printed oracle savings (mean per-question %), from the fixtures' README
ORACLE_PRINTED = {
    "synthetic-5q": {
        "oracle-first": 75.0,
        "oracle-last": 73.9,
        "oracle-dco-first": 25.7,
        "oracle-dco-last": 24.4,
    },
    "pp-aime24": {"oracle-first": 45.7, "oracle-last": 45.4},
}
COMPARED = ["voted_answer", "is_correct", "total_tokens", "baseline_tokens", "position"]


def pools() -> list[str]:
    return sorted(p.name for p in FIXTURES.iterdir() if (p / "pool.parquet").exists())


def folders(pool: str) -> list[str]:
    return sorted(f.name for f in (FIXTURES / pool).iterdir() if f.name in FOLDER_METHOD)


def fixture_settings(pool: str, folder: str):
    from mars.method.settings import Settings

    cfg = json.loads((FIXTURES / pool / folder / "config.json").read_text())
    ex = cfg["extra"]
    return Settings(
        budget=cfg["budget"],
        iterations=cfg["n_iterations"],
        warmup=cfg["warmup"],
        seed=cfg["seed"],
        window=cfg["window_size"],
        gamma=ex["gamma"],
        ucb_z=ex["ucb_z"] if ex["warmup_gamma"] else 0.0,
        gamma_min=ex["gamma_min"],
        pp_conv=ex["pp_conv"],
        pp_warmup=ex["pp_warmup"],
        pp_patience=ex["pp_prune_patience"],
        delta=ex["delta"],
    )


@cache
def arrays(pool: str) -> dict:
    from mars.method.arrays import build_arrays
    from mars.store.pool import open_pool

    p = open_pool(FIXTURES / pool / "pool.parquet")
    return {q.qid: build_arrays(q) for q in p.questions()}


@cache
def reference(pool: str, folder: str) -> pd.DataFrame:
    df = pd.read_csv(
        FIXTURES / pool / folder / "results.csv", keep_default_na=False, dtype={"voted_answer": str}
    )
    return df.set_index(["question_id", "iteration"]).sort_index()


def run(arr, pool: str, folder: str) -> pd.DataFrame:
    """Our results for one fixture folder on one question; folders sharing settings run together."""
    from mars.method.registry import get_method
    from mars.simulate.driver import simulate_question

    cache = arr.__dict__.setdefault("_runs", {})
    if folder in cache:
        return cache[folder]
    settings = fixture_settings(pool, folder)
    group = [f for f in folders(pool) if fixture_settings(pool, f) == settings]
    methods = list({FOLDER_METHOD[f]: get_method(FOLDER_METHOD[f]) for f in group}.values())
    res = simulate_question(arr, methods, settings)
    reps = arr.representatives
    for f in group:
        r = res.methods[FOLDER_METHOD[f]]
        cache[f] = pd.DataFrame(
            {
                "question_id": arr.qid,
                "iteration": np.arange(len(r.answer)),
                "voted_answer": [reps[a] if a >= 0 else "" for a in r.answer],
                "is_correct": r.correct,
                "total_tokens": r.tokens,
                "baseline_tokens": r.baseline,
                "position": r.position,
                "stopped_by": r.stopped_by,
                "group": r.answer,
            }
        ).set_index(["question_id", "iteration"])
    return cache[folder]


def mismatches(ours: pd.DataFrame, ref: pd.DataFrame, arr) -> pd.DataFrame:
    """Rows that differ; answers compare as groups (a representative may be any member)."""
    from mars.method.answers import group_answers  # noqa: F401  (grouping is what defines sameness)

    ref = ref.loc[ours.index]
    ref_group = np.array([_group_of(arr, s) for s in ref.voted_answer])
    bad = (
        (ref_group != ours.group.to_numpy())
        | (ref.total_tokens.to_numpy() != ours.total_tokens.to_numpy())
        | (ref.baseline_tokens.to_numpy() != ours.baseline_tokens.to_numpy())
        | (ref.position.to_numpy() != ours.position.to_numpy())
    )
    # correctness may differ only where the reference graded a different member of the same group
    corr = ref.is_correct.to_numpy() != ours.is_correct.to_numpy()
    rep_quirk = np.array(
        [
            s != arr.representatives[g] if g >= 0 else False
            for s, g in zip(ref.voted_answer, ref_group)
        ]
    )
    bad |= corr & ~rep_quirk
    out = ours[bad].join(ref[bad].add_suffix("_ref"))
    return out


def _group_of(arr, s: str) -> int:
    if not s:
        return -1
    try:
        return arr.representatives.index(s)
    except ValueError:
        pass
    idx = getattr(arr, "_index_cache", None)
    if idx is None:
        idx = {}
        arr._index_cache = idx
    if s not in idx:
        from mars.method.answers import answers_equivalent, numeric_key

        key = numeric_key(s)
        idx[s] = next(
            (
                g
                for g, r in enumerate(arr.representatives)
                if (key is not None and numeric_key(r) == key) or answers_equivalent(r, s)
            ),
            -2,
        )
    return idx[s]


@cache
def _compare_all(pool: str) -> dict:
    out = {}
    for folder in folders(pool):
        ref = reference(pool, folder)
        out[folder] = pd.concat(
            [mismatches(run(arr, pool, folder), ref, arr) for arr in arrays(pool).values()]
        )
    return out


def compare_pool(pool: str, folder_list=None) -> dict:
    """{folder: mismatching rows} under our own answer order."""
    allm = _compare_all(pool)
    return {f: allm[f] for f in (folder_list or folders(pool))}


@cache
def explain(pool: str, qid: int, max_rounds: int = 12):
    """An id order under which every method matches the reference on question ``qid``, or None.

    Local search over the order of the answers involved in differing rows (or tied for the lead in
    them): move one answer in front of another while that lowers the number of differing rows,
    until none differ. Learned q does not depend on the id order, so candidates share it.
    """
    arr = arrays(pool)[qid]
    fl = folders(pool)

    def n_bad(a) -> int:
        return sum(len(mismatches(run(a, pool, f), reference(pool, f), a)) for f in fl)

    involved = set()
    for folder in fl:
        bad = mismatches(run(arr, pool, folder), reference(pool, folder), arr)
        involved |= {g for g in bad.group if g >= 0}
        involved |= {_group_of(arr, s) for s in bad.voted_answer_ref if s}
        involved |= _tied_leaders(arr, pool, folder, sorted(set(bad.index.get_level_values(1))))
    involved = sorted(g for g in involved if g >= 0)
    order = list(range(arr.n_answers))
    best = n_bad(arr)
    for _ in range(max_rounds):
        if best == 0:
            break
        improved = False
        for a in involved:
            for b in involved:
                ia, ib = order.index(a), order.index(b)
                if ia <= ib:
                    continue
                cand_order = order[:ib] + [a] + [x for x in order[ib:] if x != a]
                score = n_bad(arr.with_answer_order(cand_order))
                if score < best:
                    best, order, improved = score, cand_order, True
        if not improved:
            break
    if best:
        return None
    return [arr.representatives[g] for g in order if g in involved]


def _tied_leaders(arr, pool: str, folder: str, iterations) -> set:
    """Answers tied for the lead (uniform snapshot vote)
    at any checkpoint of the given iterations."""
    from mars.method.protocol import samples as bootstrap_samples
    from mars.method.voting import tally

    if not iterations:
        return set()
    S = bootstrap_samples(arr, fixture_settings(pool, folder))[iterations]
    out = set()
    for k in range(arr.n_checkpoints):
        ids = arr.ids[S, k]
        votes = tally(ids, np.ones(ids.shape), ids >= 0, arr.n_answers)
        top = votes.max(axis=1, keepdims=True)
        tied = (votes == top) & (top > 0)
        rows = tied.sum(axis=1) >= 2
        out |= set(np.flatnonzero(tied[rows].any(axis=0)).tolist())
    return out


def main(argv):
    for pool in pools():
        res = compare_pool(pool, [f for f in folders(pool) if not argv or f in argv])
        bad_q = sorted({q for df in res.values() for q in df.index.get_level_values(0)})
        for folder, df in res.items():
            print(
                f"{pool:14s} {folder:20s} mismatching rows {len(df):4d}  questions "
                f"{sorted(set(df.index.get_level_values(0)))}"
            )
        for q in bad_q:
            print(f"  {pool} q{q}: explained by answer order {explain(pool, q)}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main(sys.argv[1:])
