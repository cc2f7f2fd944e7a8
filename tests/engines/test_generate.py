"""The engines' batch driver: run_batch over the checkpoint grid, and its records as one
question's trace table."""

from __future__ import annotations

import pytest

from mars.engines.generate import records_to_table, run_batch
from mars.engines.synthetic import SyntheticBackend
from mars.store import schema
from mars.store.grid import Grid
from mars.store.problems import load_problems

TOY = {
    "name": "toy",
    "base": "qwen3-8b",
    "params": {"len_median": 2000.0, "max_tokens": 6144, "len_hard_slope": 0.5},
}
SPACING = 1024


def backend():
    return SyntheticBackend(TOY)


@pytest.fixture(scope="module")
def problems():
    return load_problems("aime_2025")


def test_run_batch_hook_and_records_table(problems):
    b = backend()
    batch = b.start(problems[0], 6, 0, first_trace=10)
    seen = []

    def hook(p, bt, probes):
        seen.append((p, sorted(probes)))
        assert all(bt.lengths[j] == p for j in probes)
        return False

    recs = run_batch(batch, Grid(SPACING), max_tokens=b.max_tokens, on_checkpoint=hook)
    assert [p for p, _ in seen] == [SPACING * (k + 1) for k in range(len(seen))]
    t = records_to_table(0, 10, recs)
    assert t.schema.equals(schema.TRACE_SCHEMA)
    assert t.column("trace_idx").to_pylist() == list(range(10, 16))
    assert t.column("length").to_pylist() == [r.result.length for r in recs]
    n_probes = sum(len(r.probes) for r in recs)
    assert n_probes == sum(len(x) for _, x in seen)
