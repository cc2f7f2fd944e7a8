"""The method registry (mars.methods): a method is a composition, registered in one place."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner
from util import write_layout_pool

from mars import schema
from mars.backends.synthetic import SyntheticBackend
from mars.cli import app
from mars.errors import UsageError
from mars.live import live_method, replay, solve_pool
from mars.methods import METHODS, Method, Stopping, live_methods, register, unregister
from mars.problems import load_problems
from mars.simulate import SimulationError
from mars.stopping import Rule, Snapshot

STOP_AT = 2  # the toy rule stops at this checkpoint index


@dataclass
class StopAt(Rule):
    """A toy rule: stop at checkpoint ``k`` whatever the votes say."""

    k: int = STOP_AT
    label: str = "toy"

    def check(self, snap: Snapshot) -> np.ndarray:
        return np.full(len(snap.rows), snap.k >= self.k) & snap.has_votes


def _stop_at(ctx, method, gamma, k=STOP_AT):
    return StopAt(k)


@pytest.fixture
def toy():
    """A new method with a new rule, declared in this one place."""
    names = ["sc-toy", "sc-toy-oracle"]
    register(Method("sc-toy", "Toy stop", Stopping("toy", _stop_at), group="other"))
    register(Method("sc-toy-oracle", "Toy (future)", Stopping("toy", _stop_at, reads_future=True)))
    yield names
    for name in names:
        unregister(name)
    assert not set(names) & set(METHODS)


def test_a_registered_method_runs_in_simulate(toy, tmp_path):
    pool = write_layout_pool(tmp_path / "pool", seed=3, n_questions=2)
    out = tmp_path / "out"
    res = CliRunner().invoke(
        app,
        [
            "simulate",
            str(pool),
            "--method",
            "sc,sc-toy",
            "--out",
            str(out),
            "--budget",
            "16",
            "--iterations",
            "4",
            "--warmup",
            "4",
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    pq = pd.read_csv(out / "sc-toy" / "per_question.csv")
    assert len(pq) == 2
    full = pd.read_csv(out / "sc" / "per_question.csv")
    assert (pq["stopped_early"] == 4).all()
    assert (pq["tokens_mean"] < full["tokens_mean"]).all()


def test_a_registered_method_runs_live_if_admissible(toy, tmp_path):
    assert "sc-toy" in live_methods() and "sc-toy-oracle" not in live_methods()
    with pytest.raises(SimulationError, match="future"):
        live_method("sc-toy-oracle")
    out = tmp_path / "live"
    rows = solve_pool(
        SyntheticBackend("qwen3-8b"),
        load_problems("aime_2025"),
        out,
        "sc-toy",
        n_traces=16,
        warmup=4,
        seed=1,
        questions=[0, 1],
        progress=False,
    )
    spacing = schema.CHECKPOINT_SPACING
    for r in rows:
        assert r["stopped_by"] == "toy" and r["stop_position"] == (STOP_AT + 1) * spacing
    assert all(r["match"] for r in replay(out))


def test_registering_a_known_name_is_refused():
    with pytest.raises(UsageError, match="already known"):
        register(Method("sc-mars", "again"))
    with pytest.raises(UsageError, match="reference method"):
        unregister("sc")


def test_live_admits_methods_by_their_properties():
    for m in METHODS.values():
        admitted = m.name in live_methods()
        assert admitted == (not m.deepconf and not m.reads_future)
    assert {"sc-mars-oracle", "oracle-first", "oracle-last", "dco-mars"}.isdisjoint(live_methods())
