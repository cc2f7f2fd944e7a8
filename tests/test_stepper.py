"""The library's face (mars.Stopper): one checkpoint step, the simulator's decision."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from util import write_layout_pool

import mars
from mars.errors import UsageError
from mars.live import decide, live_settings
from mars.method.registry import live_methods
from mars.store.pool import open_pool

DOC = Path(__file__).resolve().parents[1] / "docs" / "library.md"


def _example() -> str:
    return re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)


def _example_against_simulator(tmp_path, method, knobs, seed, n_answers=3) -> dict:
    """Run the docs example on a random stored pool; check its decisions against the
    simulator's walk over the same traces (what `mars replay` re-runs); its variables."""
    pool = write_layout_pool(
        tmp_path / "pool", seed=seed, n_questions=1, n=40, n_answers=n_answers, max_len=40000
    )
    scope = {"pool_path": pool, "method": method, "knobs": knobs, "print": lambda *a: None}
    exec(_example(), scope)
    W, N, grid, d = scope["W"], scope["N"], scope["grid"], scope["d"]
    q = open_pool(pool).read_question(0)
    settings = live_settings(N, W, 0, 2048, int(grid[-1]), knobs)
    res, arr = decide(
        q, mars.method.registry.get_method(method), settings, grid, W, np.zeros(W + N, bool)
    )
    label = str(res.stopped_by[0])
    assert d.stop == (label != "budget")
    if d.stop:
        a = int(res.answer[0])
        assert (d.label, d.position) == (label, int(res.position[0]))
        assert d.answer == (arr.representatives[a] if a >= 0 else None)
    if res.pruned_at is not None:  # pruning or per-trace exits: where each trace stopped
        assert method in ("sc-pp-faithful", "pp-main", "pp-main-keep", "sc-sac")
        lengths = q.lengths[W : W + N]
        running = {  # a trace pruned once finished has nothing left to stop
            int(j): int(p)
            for j, p in enumerate(res.pruned_at[0])
            # the last decision of a run that never stops still names the traces it stops there
            if (p < d.position or (p == d.position and not d.stop)) and p < lengths[j]
        }
        assert scope["pruned"] == running
        assert running or not knobs  # pruning is exercised with the knobs given
    return scope


@pytest.mark.parametrize(
    "method,knobs",
    [(m, {}) for m in live_methods()]
    + [("sc-pp-faithful", {"pp_conv": 8}), ("sc-pp", {"pp_conv": 8})]
    + [("pp-main", {"ppm_stable": 8, "ppm_warmup": 1, "ppm_patience": 1})]
    + [("sc-sac", {"sac_n": 2})],
)
@pytest.mark.parametrize("seed", [1, 7])
def test_docs_example_decides_as_the_simulator_on_the_same_traces(tmp_path, method, knobs, seed):
    _example_against_simulator(tmp_path, method, knobs, seed)


@pytest.mark.parametrize(
    "method,knobs",
    [("sc-pp-faithful", {"pp_conv": 8}), ("sc-mars-cal", {}), ("sc-mars2", {})],
)
def test_answers_outgrowing_their_room_keep_the_decisions(tmp_path, method, knobs):
    """Many distinct answers: the stopper widens its arrays and replays the checkpoints seen."""
    scope = _example_against_simulator(tmp_path, method, knobs, seed=3, n_answers=400)
    assert scope["stopper"].width > 64


def test_mars_exposes_the_stopper():
    assert {"Stopper", "Warmup", "Decision"} <= set(mars.__all__)
    assert mars.Stopper.__module__ == "mars.stepper"


def test_bad_use_is_one_clear_error():
    grid = [2048, 4096]
    with pytest.raises(Exception, match="future"):
        mars.Stopper("oracle-first", n_traces=4, grid=grid)
    with pytest.raises(UsageError, match="increasing"):
        mars.Stopper("sc-mars", n_traces=4, grid=[4096, 2048])
    s = mars.Stopper("sc-mars", n_traces=2, grid=grid)
    with pytest.raises(UsageError, match="1 answers for 2 traces"):
        s.step(["1"], [True, True])
    with pytest.raises(UsageError, match="3 running for 2 traces"):
        s.step(["1", "1"], [True, True, True])
    with pytest.raises(UsageError, match="answer 7 is not a string"):
        s.step(["1", 7], [True, True])
    with pytest.raises(UsageError, match="confidences"):
        s.step(["1", "1"], [True, True], [0.5, 0.5])
    d = s.step(["1", "1"], [True, True])
    assert not d.stop  # the margin needs more than two votes against q = 1
    s.step(["1", "1"], [False, False])
    with pytest.raises(UsageError, match="checkpoints"):
        s.step(["1", "1"], [False, False])
