"""How much of the oracle could any rule capture with what a live run can observe? (issue 23)

The information ceiling of a stopping rule that sees, at checkpoint k, the *state* of each of its
sampled traces — its answer there (none if it abstained), whether it is still running and, for
DeepConf, whether it passes the filter there — and knows the question perfectly: the Bayes
posterior P(full-budget vote ≠ current leader | states) when the traces' futures are drawn from the
question's *whole pool* (the distribution the bootstrap samples from) among the traces in the same
state at k. A live run knows the question only through its 16 warmup traces; the same computation
with the warmup as the "pool" is what those 16 traces can tell (``--source warmup``: an empirical
posterior without any prior, overconfident where a state has few warmup traces; ``warmup-dp``: the
same with a Dirichlet-process posterior, the honest use of those traces).

    python research/beyond/ceiling.py POOL... [--source pool|warmup|warmup-dp] [--pipelines sc,dco]
        [--draws 256] --out RUN.json
    python research/beyond/ceiling.py --report pool=RUN1.json warmup-dp=RUN2.json \
        --out results/ceiling.md

For every α of a grid: accuracy vs full budget and share of oracle-first's savings of "stop at the
first checkpoint whose posterior risk ≤ α". Monte Carlo (``--draws`` futures per iteration and
checkpoint, seeded).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from common import PoolSpec, contexts, walk

ALPHAS = [0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2]
CONC = 1.0  # warmup-dp: prior mass (traces) of "behaves like any warmup trace"
#: --state: what a trace's state at a checkpoint holds besides (answer, running, eligible):
#: nothing, or how long it has held its answer (checkpoints in a row, 1 / 2-3 / 4+), so that
#: holders who just arrived and holders who have settled have futures of their own
STREAK_BUCKETS = {"answer": None, "streak": (2, 4)}


def streak_bucket(ids: np.ndarray, edges) -> np.ndarray:
    """[n, m] bucket of the number of checkpoints in a row that each trace has held its answer
    there (0 where it has none)."""
    streak = np.zeros(ids.shape, np.int64)
    for k in range(ids.shape[1]):
        held = ids[:, k] >= 0
        same = held & (ids[:, k] == ids[:, k - 1]) if k else np.zeros_like(held)
        streak[:, k] = np.where(held, np.where(same, streak[:, k - 1] + 1, 1), 0)
    return np.where(streak > 0, 1 + np.searchsorted(np.asarray(edges), streak, "right"), 0)


def _state_outcomes(arr, ctx, pipeline, it, state="answer"):
    """Per pool trace: state key at every checkpoint [n, m] and final (answer, weight) [n] under
    iteration ``it``'s DeepConf threshold (SC: every trace eligible, weight 1)."""
    grid = arr.grid
    n, _m = arr.ids.shape
    running = arr.run_lengths[:, None] > grid[None]
    ids = arr.ids
    if pipeline == "dco":
        taus, _trunc, runmin = ctx.dco
        tau = taus[it]
        trunc = arr.truncation(tau)
        truncated = trunc < arr.lengths
        elig = (runmin >= tau) & ~(truncated[:, None] & (grid[None] >= trunc[:, None])) & (ids >= 0)
        f_ok = (arr.final_ids >= 0) & (runmin[:, -1] >= tau) & ~(truncated & (trunc <= grid[-1]))
        w_final = arr.conf_at_pos[:, -1].astype(np.float64)
    else:
        elig = ids >= 0
        f_ok = arr.final_ids >= 0
        w_final = np.ones(n)
    key = (ids + 1).astype(np.int64) * 4 + running * 2 + elig
    edges = STREAK_BUCKETS[state]
    if edges is not None:
        key = key * (len(edges) + 2) + streak_bucket(ids, edges)
    return key, np.where(f_ok, arr.final_ids, -1), w_final


def posterior_risk(ctx, pipeline, source="pool", draws=256, seed=0, state="answer"):
    """[I, m] Monte Carlo P(full-budget vote ≠ leader at k | states of the sampled traces)."""
    arr, S = ctx.arr, ctx.samples
    I, B = S.shape
    m = len(arr.grid)
    snaps, final, tokens, base = walk(ctx, pipeline)
    lead = np.stack([s.lead for s in snaps], axis=1)
    ref = arr.pool_ids() if source == "pool" else ctx.warm
    rng = np.random.default_rng(seed)
    A = arr.n_answers + 1
    risk = np.ones((I, m))
    for i in range(I):
        key, fans, fw = _state_outcomes(arr, ctx, pipeline, i, state)
        for k in range(m):
            if lead[i, k] < 0:
                continue
            rk = key[ref, k]
            mine = key[S[i], k]
            if source == "warmup-dp":
                # Dirichlet-process posterior of each state's futures: one unit of mass on every
                # warmup trace in that state, CONC spread over the whole warmup; drawn anew for
                # every Monte Carlo future, so the 16 traces' uncertainty is shared by all the
                # main traces in a state
                states, sj = np.unique(mine, return_inverse=True)
                alpha = (rk[None, :] == states[:, None]) + CONC / len(ref)
                g = rng.gamma(np.broadcast_to(alpha, (draws, *alpha.shape)))
                cum = np.cumsum(g / g.sum(axis=2, keepdims=True), axis=2)  # [G, S, W]
                u = rng.random((draws, B))
                t = (cum[:, sj, :] < u[:, :, None]).sum(axis=2)  # [G, B]
                pick = ref[np.minimum(t, len(ref) - 1)].T
            else:
                order = np.argsort(rk, kind="stable")
                sk = rk[order]
                lo = np.searchsorted(sk, mine, "left")
                cnt = np.searchsorted(sk, mine, "right") - lo
                # a state no reference trace was in: its future is unknown, draw from every trace
                lo = np.where(cnt > 0, lo, 0)
                cnt = np.where(cnt > 0, cnt, len(sk))
                u = rng.random((B, draws))
                pick = ref[order[lo[:, None] + (u * cnt[:, None]).astype(int)]]
            fa, w = fans[pick], fw[pick]  # [B, G]
            ok = fa >= 0
            flat = (np.arange(draws)[None, :] * A + np.where(ok, fa, A - 1))[ok]
            votes = np.bincount(flat, weights=w[ok], minlength=draws * A).reshape(draws, A)
            votes[:, A - 1] = 0
            win = np.where(votes.sum(1) > 0, votes.argmax(1), -1)
            risk[i, k] = np.mean(win != lead[i, k])
    return risk, lead, final, tokens, base


def evaluate(paths, pipelines, source, draws, state="answer"):
    out = {}
    for path in map(Path, paths):
        spec = PoolSpec(path.name, path, "", "", True)
        for ctx in contexts(spec):
            arr = ctx.arr
            correct = np.flatnonzero(arr.correct)
            for p in pipelines:
                if p == "dco" and not arr.has_confs:
                    continue
                risk, lead, final, tokens, base = posterior_risk(ctx, p, source, draws, state=state)
                r = np.arange(len(final))
                orc = lead == final[:, None]
                ko = np.argmax(orc, axis=1)
                osav = np.mean(1 - np.where(orc.any(1), tokens[r, ko], base) / base)
                row = {"full": float(np.isin(final, correct).mean()), "oracle": float(osav)}
                for a in ALPHAS:
                    stop = risk <= a
                    k = np.argmax(stop, axis=1)
                    ans = np.where(stop.any(1), lead[r, k], final)
                    tok = np.where(stop.any(1), tokens[r, k], base)
                    row[str(a)] = [
                        float(np.isin(ans, correct).mean()),
                        float(np.mean(1 - tok / base)),
                        float(np.mean(ans != final)),
                    ]
                out[f"{path.name}|{p}|{arr.qid}"] = row
        print(path.name, flush=True)
    return out


def report(runs: dict[str, dict]) -> str:
    """Markdown: per source, pool and pipeline, Δacc (pp) / share of oracle-first (%) per α."""
    lines = [
        "Δ accuracy vs the full budget (pp) / share of oracle-first's savings (%) of \"stop at the "
        'first checkpoint whose posterior risk ≤ α".\n',
        "| source | pool | pipeline | " + " | ".join(f"α = {a:g}" for a in ALPHAS) + " |",
        "|---|---|---|" + "---:|" * len(ALPHAS),
    ]
    for source, res in runs.items():
        groups: dict[tuple[str, str], list[dict]] = {}
        for key, row in res.items():
            pool, p, _q = key.split("|")
            groups.setdefault((pool, p), []).append(row)
        for (pool, p), rows in sorted(groups.items(), key=lambda x: (x[0][1], x[0][0])):
            full = np.mean([r["full"] for r in rows])
            orc = np.mean([r["oracle"] for r in rows])
            cells = [
                f"{100 * (np.mean([r[str(a)][0] for r in rows]) - full):+.2f} / "
                f"{100 * np.mean([r[str(a)][1] for r in rows]) / orc:.0f}"
                for a in ALPHAS
            ]
            lines.append(f"| {source} | {pool} | {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("pools", nargs="*")
    ap.add_argument("--report", nargs="+", metavar="SOURCE=JSON", help="summarise runs instead")
    ap.add_argument("--pipelines", default="sc,dco")
    ap.add_argument("--source", choices=["pool", "warmup", "warmup-dp"], default="pool")
    ap.add_argument("--draws", type=int, default=256)
    ap.add_argument("--state", choices=sorted(STREAK_BUCKETS), default="answer")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.report:
        runs = {k: json.loads(Path(v).read_text()) for k, v in (x.split("=", 1) for x in a.report)}
        Path(a.out).write_text(report(runs) + "\n")
    else:
        res = evaluate(a.pools, a.pipelines.split(","), a.source, a.draws, a.state)
        Path(a.out).write_text(json.dumps(res))
