"""What a served question reports it cost (mars/serve/solve.py): the full budget exact where no
trace was stopped, else an estimate with its basis, never the bound presented as a saving."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")

from mars.serve.solve import full_budget


def _main(*lengths: int) -> list[dict]:
    return [{"trace_idx": 4 + j, "length": n} for j, n in enumerate(lengths)]


def test_no_trace_stopped_is_exact():
    assert full_budget(_main(100, 300, 250), set(), 1000) == {
        "tokens": 650,
        "at_most": 650,
        "exact": True,
    }


def test_a_stopped_trace_runs_to_the_mean_length_of_those_that_went_past_it():
    """Traces 4 and 5 ended at 900 and 1,300 tokens; trace 6 was stopped at 800 (both went past:
    it counts 1,100), trace 7 at 1,000 (only the 1,300 one went past), trace 8 at 2,000 (none
    did: the cap). The bound counts every stopped trace at the cap."""
    out = full_budget(_main(900, 1300, 800, 1000, 2000), {6, 7, 8}, 4096)
    assert out == {
        "tokens": 900 + 1300 + 1100 + 1300 + 4096,
        "at_most": 900 + 1300 + 3 * 4096,
        "exact": False,
    }
