"""Exploration dataset: for every pool × pipeline × question × iteration × checkpoint, candidate
features a live rule could compute, the label (leader ≠ full-budget answer) and the token cost.

    python research/beyond/extract.py [--seed 1] [--disjoint]

Writes .cache/explore.s{seed}.npz (concatenated rows with pool/question/iteration/checkpoint keys).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from common import CACHE, contexts, pools, walk

from mars.method import deepconf
from mars.method.features import switch_labels
from mars.method.voting import leader, tally

FEATURES = [
    "k",
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
    "gmax",
    "streak",
    "n_lead_changes",
    "w_share_L",
    "w_isL",
    "w_top",
    "w_done",
    "w_settled",
    "w_snap_isfinal",
    "w_share_L_elig",
    "prev_share_L",
]


def gamma_max(snap, q):
    """Largest γ at which the MARS test still passes (strict): the rule's slack (inf: unbounded)"""
    R = len(snap.lead)
    A = max(snap.n_answers, 1)
    w = np.broadcast_to(snap.weights, snap.ids.shape)
    Qa = tally(snap.ids, q * w, snap.eligible, A)  # switch mass per answer
    Q = Qa.sum(axis=1)
    L = np.maximum(snap.lead, 0)
    r = np.arange(R)
    VL, QL = snap.votes[r, L], Qa[r, L]
    with np.errstate(divide="ignore", invalid="ignore"):
        g1 = np.where(Q + QL > 0, VL / (Q + QL), np.inf)
        den = (Q + QL)[:, None] - Qa
        num = VL[:, None] - snap.votes + Qa
        g2 = np.where(den > 0, num / den, np.where(num > 0, np.inf, -np.inf))
    chal = snap.votes > 0
    chal[r, L] = False
    g2 = np.where(chal, g2, np.inf).min(axis=1)
    g = np.minimum(g1, g2)
    return np.where(snap.has_votes, g, 0.0)


def question_rows(ctx, pipeline):
    arr = ctx.arr
    snaps, final, tokens, baseline = walk(ctx, pipeline)
    I, m = tokens.shape
    B = ctx.samples.shape[1]
    warm = ctx.warm
    wf = arr.final_ids[warm]
    n_w = max(len(warm), 1)
    w_counts = np.bincount(wf[wf >= 0], minlength=arr.n_answers + 1)
    w_top = w_counts.max() / n_w
    w_maj = int(np.argmax(w_counts)) if len(wf) else -1
    # warmup settledness per checkpoint: share of warmup traces already holding their final answer
    settled = 1 - switch_labels(arr, warm).mean(axis=0)
    done = (arr.lengths[warm][:, None] <= arr.grid[None, :]).mean(axis=0)
    wsnap = []
    for k in range(m):
        ids = arr.ids[warm, k]
        v = tally(ids[None], np.ones((1, len(warm))), (ids >= 0)[None], arr.n_answers)
        wsnap.append(leader(v)[0][0] == w_maj)
    # DCO-eligible warmup finals
    if pipeline == "dco":
        tau_w = deepconf.threshold(arr, warm)
        el = deepconf.running_min_conf(arr)[warm, -1] >= tau_w
        wce = np.bincount(wf[(wf >= 0) & el], minlength=arr.n_answers + 1)
    else:
        wce = w_counts
    X = np.zeros((I, m, len(FEATURES)), dtype=np.float32)
    y = np.zeros((I, m), dtype=bool)
    lc = np.zeros((I, m), dtype=bool)
    streak = np.zeros(I)
    changes = np.zeros(I)
    prev = np.full(I, -2)
    prev_share = np.zeros(I)
    for k, s in enumerate(snaps):
        r = np.arange(I)
        tot = s.votes.sum(axis=1)
        srt = np.sort(s.votes, axis=1)
        VL = srt[:, -1]
        V2 = srt[:, -2] if srt.shape[1] > 1 else np.zeros(I)
        cnt = tally(s.ids, np.ones(1), s.eligible, arr.n_answers)
        L = np.maximum(s.lead, 0)
        cL = cnt[r, L]
        c2 = (
            np.sort(np.where(np.arange(cnt.shape[1])[None] == L[:, None], -1, cnt), axis=1)[:, -1]
            if cnt.shape[1] > 1
            else np.zeros(I)
        )
        c2 = np.maximum(c2, 0)
        fin = s.eligible & ~s.running
        fc = tally(s.ids, np.ones(1), fin, arr.n_answers)
        fL = fc[r, L]
        f2 = (
            np.maximum(
                np.sort(np.where(np.arange(fc.shape[1])[None] == L[:, None], -1, fc), axis=1)[
                    :, -1
                ],
                0,
            )
            if fc.shape[1] > 1
            else np.zeros(I)
        )
        same = s.lead == prev
        streak = np.where(same, streak + 1, 1)
        changes = changes + ((~same) & (k > 0))
        prev = s.lead
        with np.errstate(divide="ignore", invalid="ignore"):
            shL = np.where(tot > 0, VL / tot, 0)
            row = {
                "k": k,
                "logpos": np.log2(s.position / 2048),
                "share_L": shL,
                "share_2": np.where(tot > 0, V2 / tot, 0),
                "frac_vote": s.eligible.sum(axis=1) / B,
                "margin": np.where(tot > 0, (VL - V2) / tot, 0),
                "z": (cL - c2) / np.sqrt(np.maximum(cL + c2, 1)),
                "frac_run": s.running.mean(axis=1),
                "fin_L": fL / B,
                "fin_2": f2 / B,
                "fin_share_L": np.where(
                    fin.sum(axis=1) > 0, fL / np.maximum(fin.sum(axis=1), 1), 0.5
                ),
                "gmax": np.clip(gamma_max(s, s.q), 0, 10),
                "streak": streak,
                "n_lead_changes": changes,
                "w_share_L": w_counts[L] / n_w * s.has_votes,
                "w_isL": (s.lead == w_maj),
                "w_top": w_top,
                "w_done": done[k],
                "w_settled": settled[k],
                "w_snap_isfinal": wsnap[k],
                "w_share_L_elig": wce[L] / max(wce.sum(), 1) * s.has_votes,
                "prev_share_L": prev_share,
            }
        prev_share = shL
        for i, f in enumerate(FEATURES):
            X[:, k, i] = row[f]
        y[:, k] = s.lead != final
        lc[:, k] = np.where(s.lead >= 0, arr.correct[L], False)
    fc_ = np.where(final >= 0, arr.correct[np.maximum(final, 0)], False)
    return {
        "X": X,
        "y": y,
        "lead_correct": lc,
        "final_correct": fc_,
        "tokens": tokens,
        "baseline": baseline,
    }


def run(seed: int, disjoint: bool = False):
    out = {k: [] for k in ["X", "y", "lead_correct", "tokens", "mask"]}
    meta = {k: [] for k in ["pool", "pipeline", "qid", "final_correct", "baseline"]}
    M = 64  # pad checkpoints
    names = []
    for spec in pools(seed):
        t0 = time.time()
        for ctx in contexts(spec, disjoint=disjoint):
            for p in spec.pipelines:
                d = question_rows(ctx, p)
                I, m = d["y"].shape

                def pad(a, v, m=m):
                    if v is None:
                        return np.concatenate([a, np.repeat(a[:, -1:], M - m, axis=1)], axis=1)
                    fill = np.full((*a.shape[:1], M - m, *a.shape[2:]), v, a.dtype)
                    return np.concatenate([a, fill], axis=1)

                out["X"].append(pad(d["X"], None))
                out["y"].append(pad(d["y"], None))
                out["lead_correct"].append(pad(d["lead_correct"], None))
                tok = np.concatenate(
                    [d["tokens"], np.repeat(d["baseline"][:, None], M - m, axis=1)], axis=1
                )
                out["tokens"].append(tok)
                mask = np.zeros((I, M), dtype=bool)
                mask[:, :m] = True
                out["mask"].append(mask)
                if spec.name not in names:
                    names.append(spec.name)
                meta["pool"].append(np.full(I, names.index(spec.name)))
                meta["pipeline"].append(np.full(I, p == "dco"))
                meta["qid"].append(np.full(I, ctx.arr.qid))
                meta["final_correct"].append(d["final_correct"])
                meta["baseline"].append(d["baseline"])
        print(f"{spec.name}: {time.time() - t0:.1f} s", flush=True)
    arrays = {k: np.concatenate(v) for k, v in {**out, **meta}.items()}
    np.savez_compressed(
        CACHE / f"explore.s{seed}{'.disjoint' if disjoint else ''}.npz",
        names=np.array(names),
        features=np.array(FEATURES),
        **arrays,
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--disjoint", action="store_true")
    a = ap.parse_args()
    run(a.seed, a.disjoint)
