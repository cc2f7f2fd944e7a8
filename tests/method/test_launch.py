"""The launch plan of the width-adaptive MARS2 (mars.method.launch): the first wave is the smallest
doubling of ``wave_size`` whose end could decide, by the rule's own risk, else every trace at once;
a first wave without a stop launches all the others (two rounds at most)."""

from __future__ import annotations

import itertools

import numpy as np

from mars.method.launch import first_wave, first_wave_risk, plan
from mars.method.registry import get_method, live_method

UNANIMOUS = np.zeros(16, dtype=np.int64)
LEANING = np.array([0] * 11 + [1] * 5)
DISPERSED = np.repeat(np.arange(4), 4)


def test_the_risk_of_a_first_wave_falls_with_its_size_and_the_warmups_agreement():
    assert first_wave_risk(UNANIMOUS, 1, 16, 64) < 1e-3
    risks = [first_wave_risk(LEANING, 2, s, 64) for s in (8, 16, 32, 48)]
    assert all(a > b for a, b in itertools.pairwise(risks))
    assert first_wave_risk(DISPERSED, 4, 48, 64) > 0.5
    assert first_wave_risk(np.full(16, -1), 3, 16, 64) == 1.0  # no warmup answer: no plan


def test_the_first_wave_doubles_until_it_could_decide():
    assert first_wave(UNANIMOUS, 1, 16, 64) == 16
    sizes = {s: first_wave_risk(LEANING, 2, s, 64) for s in (16, 32)}
    assert sizes[16] > 0.1 >= sizes[32]  # this warmup needs two waves' worth
    assert first_wave(LEANING, 2, 16, 64) == 32
    assert first_wave(DISPERSED, 4, 16, 64) == 64
    assert first_wave(LEANING, 2, 16, 64, alpha=sizes[16]) == 16  # the rule's level decides


def test_a_plan_has_two_rounds_at_most():
    assert plan(UNANIMOUS, 1, 16, 64) == [(0, 16), (16, 64)]
    assert plan(DISPERSED, 4, 16, 64) == [(0, 64)]
    assert plan(UNANIMOUS, 1, 64, 64) == [(0, 64)]


def test_the_planned_launch_runs_live():
    """Launches run live one after another (mars.Stopper.land): the planned launch and the
    waves are live methods."""
    for name in ("sc-mars2-launch", "sc-mars2-waves"):
        method = get_method(name)
        assert method.launch.staged and method.launch.live
        assert live_method(method) is method
