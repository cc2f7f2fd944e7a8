"""Cross-question learned stopping scores (tried; not shipped), evaluated leave-one-dataset-out.

    python research/beyond/learned.py hgb_all hgb_nowarm hgb_nogmax hgb_snap hgb_small hgb_bayes \
        lr_dco hgb_dco futility transfer

Folds: {aime_2025 of every preset}, {hmmt_feb_2025 …}, {brumo_2025 …}, {real AIME 2024}; a fold's
scores come from a model fitted on the other folds only (the real pool is therefore scored by a
model fitted on synthetic traces alone). Scores are P(leader ≠ full-budget vote) per row and
checkpoint; each writes .cache/score.<name>.s1.npy for sweep.py.
"""

from __future__ import annotations

import sys

import numpy as np
from common import CACHE
from evalkit import Data
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression

d = Data(1)
FOLD = np.array(["real" if n.startswith("real") else n.split("/")[1] for n in d.names])[d.pool]
ALL = [f for f in d.features if f != "k"]
SNAP = [
    "logpos",
    "share_L",
    "share_2",
    "frac_vote",
    "margin",
    "z",
    "frac_run",
    "fin_L",
    "fin_2",
    "fin_share_L",
    "streak",
    "n_lead_changes",
    "prev_share_L",
]
SMALL = [
    "logpos",
    "share_L",
    "z",
    "frac_run",
    "fin_share_L",
    "gmax",
    "streak",
    "w_share_L",
    "w_settled",
]


def _score(name):
    return np.log(np.clip(np.load(CACHE / f"score.{name}.s1.npy"), 1e-6, 1))


def design(feats, extra=()):
    parts = [
        d.X[..., [d.features.index(f) for f in feats]],
        d.dco[:, None, None].repeat(64, 1).astype(np.float32),
    ]
    parts += [_score(e)[..., None] for e in extra]
    return np.concatenate(parts, axis=2)


def lodo(X, rows=None, model="hgb", n=200_000):
    rows = np.ones(len(d.y), bool) if rows is None else rows
    score = np.ones(d.y.shape)
    for f in np.unique(FOLD):
        tr, te = (FOLD != f) & rows, (FOLD == f) & rows
        if not te.any():
            continue
        m = d.mask[tr]
        Xt, yt = X[tr][m], d.y[tr][m]
        sub = np.random.default_rng(0).choice(len(yt), min(len(yt), n), replace=False)
        if model == "hgb":
            clf = HistGradientBoostingClassifier(max_iter=150, random_state=0).fit(Xt[sub], yt[sub])
            score[te] = clf.predict_proba(X[te].reshape(-1, X.shape[2]))[:, 1].reshape(te.sum(), 64)
        else:
            mu, sd = Xt.mean(0), Xt.std(0) + 1e-9
            clf = LogisticRegression(max_iter=500).fit((Xt[sub] - mu) / sd, yt[sub])
            score[te] = clf.predict_proba(((X[te] - mu) / sd).reshape(-1, X.shape[2]))[
                :, 1
            ].reshape(te.sum(), 64)
    return score


def futility(base="bayes_q", cap=0.5):
    """P(F ≠ L) times a cross-question estimate of P(final answer correct | warmup top share)."""
    risk = np.load(CACHE / f"score.{base}.s1.npy")
    wtop = d.f("w_top")[:, 0]
    Xq = np.stack([wtop, np.log(wtop)], 1)
    h = np.zeros(len(wtop))
    for f in np.unique(FOLD):
        tr, te = FOLD != f, FOLD == f
        h[te] = LogisticRegression().fit(Xq[tr], d.final_correct[tr]).predict_proba(Xq[te])[:, 1]
    return np.minimum(risk, risk * np.minimum(1, h[:, None] / cap))


def transfer(name="hgb_all"):
    """The 21-feature model fitted on every development pool, applied to the held-out pools (seed
    2; the real pool's rows were in the training set, so only the synthetic rows are out of
    sample). Writes .cache/score.hgb_all_trained_s1.s2.npy and prints the summary."""
    from evalkit import show, summarize

    d2 = Data(2)
    cols = [d.features.index(f) for f in ALL]

    def X(dd):
        dco = dd.dco[:, None, None].repeat(64, 1).astype(np.float32)
        return np.concatenate([dd.X[..., cols], dco], axis=2)

    X1 = X(d)
    Xt, yt = X1[d.mask], d.y[d.mask]
    sub = np.random.default_rng(0).choice(len(yt), 300_000, replace=False)
    clf = HistGradientBoostingClassifier(max_iter=150, random_state=0).fit(Xt[sub], yt[sub])
    X2 = X(d2)
    s = clf.predict_proba(X2.reshape(-1, X2.shape[2]))[:, 1].reshape(X2.shape[0], 64)
    np.save(CACHE / "score.hgb_all_trained_s1.s2.npy", s.astype(np.float32))
    for a in (0.005, 0.01, 0.02, 0.05):
        show(summarize(d2, s <= a), f"{name} fitted on seed 1, held out seed 2, α={a}", brief=True)
    return None


EXPERIMENTS = {
    "hgb_all": lambda: lodo(design(ALL)),
    "hgb_nowarm": lambda: lodo(design([f for f in ALL if not f.startswith("w_")])),
    "hgb_nogmax": lambda: lodo(design([f for f in ALL if f != "gmax"])),
    "hgb_snap": lambda: lodo(design(SNAP)),
    "hgb_small": lambda: lodo(design(SMALL)),
    "hgb_bayes": lambda: lodo(design(ALL, ["bayes_q", "bq_rho0.14_topNone", "bq_rho0.25_topNone"])),
    "lr_dco": lambda: np.where(
        d.dco[:, None],
        lodo(
            design(
                ["frac_vote", "frac_run", "share_L", "w_share_L", "logpos", "streak"],
                ["bayes_q", "tilt1.0_rho0.14", "bq_rho0.25_topNone"],
            ),
            rows=d.dco,
            model="lr",
        ),
        np.load(CACHE / "score.bayes_q.s1.npy"),
    ),
    "hgb_dco": lambda: np.where(
        d.dco[:, None],
        lodo(
            design(
                [
                    "frac_vote",
                    "share_L",
                    "w_share_L",
                    "w_share_L_elig",
                    "logpos",
                    "frac_run",
                    "fin_share_L",
                    "z",
                ],
                ["bayes_q"],
            ),
            rows=d.dco,
        ),
        np.load(CACHE / "score.bayes_q.s1.npy"),
    ),
    "futility": futility,
    "transfer": transfer,
}

if __name__ == "__main__":
    for name in sys.argv[1:]:
        out = EXPERIMENTS[name]()
        if out is not None:
            np.save(CACHE / f"score.{name}.s1.npy", out.astype(np.float32))
        print(name, "done", flush=True)
