"""What the live runs' tests share."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from mars.method.registry import live_methods
from mars.store import schema

LIVE_METHODS = live_methods()  # every method that can run live, from the registry
QIDS = [0, 1, 2, 4, 5, 8, 13, 27]


def _assert_same_run(out, ref_out, qids):
    """The live runs in ``out`` and ``ref_out`` wrote the same traces and records (wall times
    apart) for ``qids``."""
    for q in qids:
        name = schema.trace_file_name(q)
        assert pq.read_table(out / name).equals(pq.read_table(ref_out / name))
        a = json.loads((out / "live" / f"q{q:06d}.json").read_text())
        b = json.loads((ref_out / "live" / f"q{q:06d}.json").read_text())
        for d in (a, b):
            d.pop("wall_s"), (d.get("full") or {}).pop("wall_s", None)
        assert a == b


class _StopsAfterWarmup:
    """The synthetic engine, interrupted when the main traces of question ``qid`` would start
    (once); counts the warmup batches it starts."""

    def __init__(self, inner, qid: int):
        self.inner, self.qid, self.warmups, self.fired = inner, qid, [], False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def start(self, problem, n, seed, first_trace=0):
        if first_trace == 0:
            self.warmups.append(problem.qid)
        elif problem.qid == self.qid and not self.fired:
            self.fired = True
            raise KeyboardInterrupt
        return self.inner.start(problem, n, seed, first_trace=first_trace)
