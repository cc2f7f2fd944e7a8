"""The two-axis frontier's points: methods of the runs that drew the same samples share a panel,
placed against SC, with the frontier and the goal judged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mars.report.collect import Results, Run
from mars.report.data.twoaxis import two_axis_points


def test_every_run_of_a_pool_is_placed_against_sc_and_the_goal():
    """fig-two-axis: methods of the runs that drew the same samples share a panel; tokens saved
    against SC, kept within 0.5 points, the frontier of the kept points, and the goal (≥ 45 %
    saved, sequential tokens ≤ pp-main's)."""

    def ov(acc, tokens, seq, **settings):
        s = {"budget": 64, "iterations": 100, "seed": 0, "protocol": "parallel-probe"}
        return {
            "accuracy_pct": acc,
            "tokens_mean": tokens,
            "seq_tokens_mean": seq,
            "settings": {**s, **settings},
            "input": {"checksum": "c"},
        }

    main = Run(
        Path("a"),
        "m",
        "d",
        "default",
        {
            "sc": ov(80.0, 1000.0, 30.0),
            "pp-main": ov(81.0, 800.0, 20.0),
            "sc-mars2": ov(80.0, 560.0, 9.0),
            "sc-mars2-waves": ov(79.6, 300.0, 25.0, wave_size=16),
            "sc-mars-cal": ov(79.0, 500.0, 8.0),
        },
    )
    waves = Run(Path("b"), "m", "d", "waves-32", {"sc-mars2-waves": ov(80.1, 400.0, 15.0)})
    waves.overall["sc-mars2-waves"]["settings"]["wave_size"] = 32
    other = Run(Path("c"), "m", "d", "seed-1", {"sc-mars2": ov(80.0, 500.0, 9.0, seed=1)})
    df = two_axis_points(Results([main, waves, other])).set_index(["setting", "method"])
    w16, w32 = df.loc[("default", "sc-mars2-waves")], df.loc[("waves-32", "sc-mars2-waves")]
    assert w16.saved_pct == pytest.approx(70.0) and w32.saved_pct == pytest.approx(60.0)
    assert w16.kept and not df.loc[("default", "sc-mars-cal")].kept  # 1 point below SC
    assert not w16.goal  # 25k sequential tokens: more than pp-main's 20k
    mars2 = df.loc[("default", "sc-mars2")]
    assert w32.goal and not mars2.goal  # sc-mars2: 44 % saved
    assert mars2.frontier and w32.frontier and w16.frontier
    assert not df.loc[("default", "sc")].frontier  # sc-mars2 saves more at less latency
    assert not df.loc[("default", "sc-mars-cal")].frontier  # not kept: not on the frontier
    # another seed drew other samples: its own panel, without SC there
    alone = df.loc[("seed-1", "sc-mars2")]
    assert np.isnan(alone.saved_pct) and np.isnan(alone.goal)
    # the main setting's panel opens its pool's, whatever the other settings are called (the
    # workflow's calibrated setting: no warmup, other samples)
    early = Run(Path("e"), "m", "d", "calibrated", {"sc-mars2": ov(80.0, 500.0, 9.0, warmup=0)})
    panels = two_axis_points(Results([early, main, other])).drop_duplicates("panel")
    assert list(panels.setting) == ["default", "calibrated", "seed-1"]
