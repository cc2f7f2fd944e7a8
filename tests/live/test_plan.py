"""How one question is solved live, decided once (issue 39, item 2): a :class:`LivePlan` is built
and checked where a run starts, and the loop and the writers take it whole."""

from __future__ import annotations

import dataclasses
import json

import pytest

from mars.errors import UsageError
from mars.live import LivePlan, plan_for, solve, solve_pool
from mars.method.learned import Calibration
from mars.method.registry import live_method
from mars.store import schema


def test_a_plan_is_checked_where_it_is_built_and_frozen(backend):
    plan = plan_for(backend, "sc-mars-cal", n_traces=8, warmup=4, seed=3, spacing=1024, gamma=0.3)
    assert plan.method is live_method("sc-mars-cal") and (plan.traces, plan.warmup) == (8, 4)
    assert plan.max_tokens == backend.max_tokens and plan.spacing == 1024
    assert plan.grid.spacing == 1024 and plan.checkpoints[-1] <= plan.max_tokens
    assert plan.knobs == {"gamma": 0.3} and plan.settings.gamma == 0.3
    assert (plan.settings.budget, plan.settings.warmup, plan.settings.seed) == (8, 4, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.traces = 9  # type: ignore[misc]
    for kw, words in [
        ({"n_traces": 0}, "--traces 0: must be at least 1"),
        ({"spacing": 4096, "max_tokens": 1024}, "--spacing 4096: no checkpoint within"),
        ({"gamma": "x"}, "gamma='x': must be a number"),
        ({"bogus": 1}, "unknown live setting 'bogus'"),
    ]:
        with pytest.raises(UsageError, match=words):
            plan_for(backend, "sc", **kw)
    with pytest.raises(Exception, match="future"):
        plan_for(backend, "sc-mars-oracle")


def test_a_calibration_replaces_the_warmup(backend, tmp_path):
    from util import write_layout_pool

    from mars.fit.calibrate import calibrate_pools

    cal = calibrate_pools([write_layout_pool(tmp_path / "fit", seed=2, n_questions=4)])
    assert isinstance(cal, Calibration)
    with pytest.raises(UsageError, match="--warmup 4: a calibration replaces the warmup"):
        plan_for(backend, "sc-mars2", warmup=4, calibration=cal)
    plan = plan_for(backend, "sc-mars2", warmup=0, calibration=cal)
    assert plan.params("mars.live", backend, "x")["calibration"] == cal.digest


def test_the_run_and_its_manifest_are_the_plans(tmp_path, backend, problems):
    """`solve` runs what the plan says; `solve_pool` writes the live block from it (one writer),
    and the pool's manifest counts its warmup + main traces."""
    plan = plan_for(backend, "sc-mars-cal", n_traces=6, warmup=2, seed=1, spacing=2048)
    run = solve(backend, problems[0], plan)
    assert (run.n_traces, run.warmup, run.method) == (6, 2, "sc-mars-cal")
    out = tmp_path / "run"
    solve_pool(backend, problems, out, plan, questions=[0], progress=False)
    manifest = json.loads((out / schema.POOL_MANIFEST).read_text())
    live = plan.params("mars.live", backend, problems[0].dataset, False)
    assert {k: manifest["live"][k] for k in live} == json.loads(json.dumps(live))
    assert manifest["n_traces"] == 8 and "settings" not in manifest
    assert isinstance(plan, LivePlan)


def test_the_library_stopper_takes_a_plan(backend):
    """`LivePlan.stopper`: a `mars.Stopper` of the plan's method, traces, grid and settings,
    deciding as the stopper built from the same keywords decides."""
    import numpy as np

    import mars

    plan = plan_for(backend, "sc-consensus", n_traces=4, warmup=0, spacing=2048, consensus=0.5)
    a = plan.stopper()
    b = mars.Stopper("sc-consensus", n_traces=4, grid=plan.checkpoints, consensus=0.5)
    assert (a.N, a.W, a.method.name) == (4, 0, "sc-consensus") and np.array_equal(a.grid, b.grid)
    for answers in (["1", "2", None, "3"], ["1", "1", "1", "2"]):
        da, db = a.step(answers, [True] * 4), b.step(answers, [True] * 4)
        assert (da.stop, da.answer, da.label) == (db.stop, db.answer, db.label)
    assert da.stop and da.answer == "1"
