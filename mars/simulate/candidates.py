"""Which samples the report's single-question figures show, chosen from simulation results
(by ``mars analyze``, which draws their trajectories, and by ``mars report``, which picks among
them over all its pools).

Fig. 1 (right) shows a sample where MARS waits while the vote is contested and then stops
correctly; Fig. 2 a question where Parallel-Probe's consensus stop errs and MARS does not. The
candidates follow from a run's per-question and per-iteration numbers alone; drawing one needs its
trajectory, which ``mars analyze`` computes for the first :data:`CANDIDATES` of each kind and the
report then picks among, over all its pools.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..method.registry import CALIBRATED_MARS, FIXED_GAMMA_MARS, PROBE_STOP, SELF_CONSISTENCY
from .runs import Run

MARS_SC = CALIBRATED_MARS.of(SELF_CONSISTENCY)
FIXED_SC = FIXED_GAMMA_MARS.of(SELF_CONSISTENCY)
PP_SC = PROBE_STOP.of(SELF_CONSISTENCY)
#: candidates of each kind an analysis keeps: the report looks at the first this many over all
#: its pools, so each pool's first this many hold them
CANDIDATES = 8


def example_candidates(run: Run) -> pd.DataFrame:
    """Fig. 1's candidates, best first: the iteration-0 samples where MARS stops early, correctly
    and after at least one checkpoint where it could not, by the share of tokens they save (then
    question id)."""
    it = run.per_iteration(MARS_SC)
    it0 = it[
        (it.iteration == 0)
        & (it.stopped_by == "margin")
        & it.correct.astype(bool)
        & (it.stop_position > it.stop_position.min())
    ]
    saved = np.where(it0.baseline_tokens > 0, 1 - it0.tokens / it0.baseline_tokens, 0.0)
    out = pd.DataFrame({"qid": it0.qid.astype(int), "iteration": 0, "saved": saved})
    return out.sort_values(["saved", "qid"], ascending=[False, True], kind="stable")


def pp_failure_candidates(run: Run) -> pd.DataFrame:
    """Fig. 2's candidates, best first: questions by how much more often MARS is right than
    Parallel-Probe (then question id), each with its sample: the first where PP is wrong and
    MARS right, else the first; with both methods' accuracy on the question."""
    j = run.per_question(MARS_SC)[["qid", "accuracy"]].merge(
        run.per_question(PP_SC)[["qid", "accuracy"]], on="qid", suffixes=("_mars", "_pp")
    )
    j = j.assign(gap=j.accuracy_mars - j.accuracy_pp)
    j = j.sort_values(["gap", "qid"], ascending=[False, True], kind="stable")
    im, ip = run.per_iteration(MARS_SC), run.per_iteration(PP_SC)
    rows = []
    for r in j.itertuples():
        a = im[im.qid == r.qid].set_index("iteration")
        b = ip[ip.qid == r.qid].set_index("iteration")
        both = a.add_suffix("_mars").join(b.add_suffix("_pp"), how="inner")
        pick = both[(~both.correct_pp.astype(bool)) & both.correct_mars.astype(bool)]
        it = int(pick.index[0]) if len(pick) else int(both.index[0])
        rows.append(
            {
                "qid": int(r.qid),
                "iteration": it,
                "gap": float(r.gap),
                "accuracy_mars": float(r.accuracy_mars),
                "accuracy_pp": float(r.accuracy_pp),
            }
        )
    return pd.DataFrame(rows, columns=["qid", "iteration", "gap", "accuracy_mars", "accuracy_pp"])
