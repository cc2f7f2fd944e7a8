"""Views: one question's traces on a probe grid, answers as integer codes, from the real
Parallel-Probe JSON, from a pool directory or straight from a backend."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mars.engines.synthetic import SyntheticBackend
from mars.store import schema
from mars.store.pool import open_pool
from mars.store.problems import Problem
from mars.store.userfiles import read_json

from .common import REAL_CAP


@dataclass
class QView:
    """Traces of one question on a probe grid (codes: -1 = no answer / abstained)."""

    gt: int  # code of the ground truth
    L: np.ndarray  # int64 [n] lengths
    F: np.ndarray  # int64 [n] final answer codes
    P: np.ndarray  # int64 [m] grid positions spacing·(1..m)
    A: np.ndarray  # int64 [n, m] probe answer codes (meaningful where L > P)
    capped: np.ndarray  # bool [n]


class _Coder(dict):
    def __call__(self, s):
        if s is None or s == "":
            return -1
        c = self.get(s)
        if c is None:
            c = self[s] = len(self)
        return c


def probe_grid(max_len: int, spacing: int) -> np.ndarray:
    return spacing * np.arange(1, max(1, (int(max_len) - 1) // spacing) + 1, dtype=np.int64)


def views_from_real(
    path: str | Path, spacing: int = schema.CHECKPOINT_SPACING
) -> tuple[list[QView], list[Problem]]:
    """The Parallel-Probe JSON (probes every 500 tokens) on a grid of ``spacing`` tokens.

    At position p the answer is ``probe_list[min(p // 500 - 1, len - 1)]`` ("ERR" = none), as in
    ``../shared/data/README.md``; with spacing 500 that is the native probe. Also returns the
    questions as :class:`Problem` (dataset ``aime_2024``) for synthetic runs on the same answers.
    """
    data = read_json(path)
    views, problems = [], []
    for qid, q in enumerate(data):
        freq = int(q.get("probe_freq", 500))
        coder = _Coder()
        gt = coder(str(q["gold_answer"]).strip())
        br = q["each_branch"]
        L = np.array([b[1] for b in br], np.int64)
        F = np.array([coder(None if b[2] in ("ERR", "") else b[2]) for b in br], np.int64)
        P = probe_grid(L.max(), spacing)
        A = np.full((len(br), len(P)), -1, np.int64)
        for j, (pl, length, _) in enumerate(br):
            if not pl:
                continue
            for k, p in enumerate(P.tolist()):
                if p >= length:
                    break
                i = min(p // freq - 1, len(pl) - 1)
                if i >= 0 and pl[i] not in ("ERR", ""):
                    A[j, k] = coder(pl[i])
        views.append(QView(gt, L, F, P, A, L >= REAL_CAP))
        problems.append(
            Problem(
                qid=qid,
                question=q["question"],
                answer=str(q["gold_answer"]).strip(),
                dataset="aime_2024",
            )
        )
    return views, problems


def views_from_pool(path: str | Path, spacing: int | None = None) -> list[QView]:
    """Any pool (ours or the published parquet) read question by question with open_pool."""
    pool = open_pool(path)
    manifest = getattr(pool, "manifest", {})
    spacing = int(spacing or manifest.get("spacing") or schema.CHECKPOINT_SPACING)
    cap = manifest.get("max_tokens")
    views = []
    for q in pool.questions():
        coder = _Coder()
        gt = coder(q.ground_truth)
        code_of = np.array([coder(s) for s in q.probe_strings] + [-1], np.int64)  # index -1 -> -1
        F = np.array([coder(a) for a in q.final_answers], np.int64)
        L = q.lengths.astype(np.int64)
        P = probe_grid(L.max(), spacing)
        A = np.full((q.n_traces, len(P)), -1, np.int64)
        tr = np.repeat(np.arange(q.n_traces), np.diff(q.probe_offsets))
        k = q.probe_positions // spacing - 1
        ok = (q.probe_positions % spacing == 0) & (k >= 0) & (k < len(P))
        A[tr[ok], k[ok]] = code_of[q.probe_codes[ok]]
        views.append(QView(gt, L, F, P, A, L >= cap if cap else np.zeros(len(L), bool)))
    return views


def views_from_backend(
    backend: SyntheticBackend,
    problems: list[Problem],
    n: int,
    seed: int,
    spacing: int = schema.CHECKPOINT_SPACING,
) -> list[QView]:
    """The synthetic latent model read directly (no pool, no per-probe objects): the fast path."""
    views = []
    for prob in problems:
        b = backend.start(prob, n, seed)
        L = b.latent["length"].astype(np.int64)
        F = b.final_codes().astype(np.int64)
        P = probe_grid(L.max(), spacing)
        A = np.full((n, len(P)), -1, np.int64)
        jj, kk = np.nonzero(L[:, None] > P[None, :])
        if jj.size:
            codes, none = b.probe_codes(jj, P[kk])
            A[jj, kk] = np.where(none, -1, codes)
        views.append(QView(0, L, F, P, A, b.latent["cut"].copy()))
    return views
