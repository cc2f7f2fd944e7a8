"""A calibration learned once (mars/method/learned.py) and MARS2 reading it instead of a warmup
(mars/method/riskstop.py): the fit, the file, the refusals, the per-sample landing, the rule."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from util import write_layout_pool

from mars.method.arrays import build_arrays
from mars.method.learned import (
    Calibration,
    CalibrationError,
    answer_shares,
    fit_calibration,
    landing,
)
from mars.method.registry import parse_methods
from mars.method.riskstop import ENDED_MIN, RiskStop, dirichlet_counts, predictive_risk
from mars.method.settings import Settings
from mars.simulate.driver import simulate_question
from mars.store.pool import open_pool


def _arrays(tmp_path: Path, seed: int = 3, n: int = 4):
    path = write_layout_pool(tmp_path / f"pool{seed}", seed=seed, n_questions=n)
    pool = open_pool(path)
    return [build_arrays(pool.read_question(q)) for q in pool.qids]


def test_the_fit_gives_rates_and_spreads_of_every_cell(tmp_path):
    arrs = _arrays(tmp_path)
    cal = fit_calibration(arrs, [{"source": "p", "model": "m", "spacing": 2048}])
    assert cal.rate.shape == cal.kappa.shape == cal.holders.shape
    assert ((cal.rate > 0) & (cal.rate < 1)).all()
    assert ((cal.kappa >= 0.5) & (cal.kappa <= 200)).all()
    # every running trace holding an answer is counted once in its cell
    expected = sum(
        int(
            (
                (a.run_lengths[:, None] > a.grid[None, :])
                & (a.ids >= 0)
                & (a.final_ids >= 0)[:, None]
            ).sum()
        )
        for a in arrs
    )
    assert cal.holders.sum() == expected
    rate, sd = cal.leaving(4096, np.array([0.1, 0.95]), np.array([False, True]))
    assert rate.shape == sd.shape == (2,) and (sd > 0).all()


def test_the_file_round_trips_and_a_damaged_one_is_one_line(tmp_path):
    cal = fit_calibration(_arrays(tmp_path), [{"source": "p", "model": "m", "spacing": 2048}])
    path = cal.save(tmp_path / "cal.json")
    back = Calibration.load(path)
    assert back.digest == cal.digest and back.fitted_on == cal.fitted_on
    assert np.allclose(back.rate, cal.rate, atol=1e-6)
    good = json.loads(path.read_text())
    for damage, words in [
        ({"kind": "x"}, "not a calibration"),
        ({"version": 9}, "calibration version 9"),
        ({"rate": [[0.5]]}, "rate is not"),
        ({"kappa": np.full(np.shape(good["kappa"]), -1.0).tolist()}, "concentration ≤ 0"),
        ({"fitted_on": None}, "malformed"),
    ]:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({**good, **damage}))
        with pytest.raises(CalibrationError, match=words) as e:
            Calibration.load(bad)
        assert str(bad) in str(e.value) and "\n" not in str(e.value)


def test_a_calibration_is_refused_for_another_model_grid_or_protocol(tmp_path):
    cal = fit_calibration(
        _arrays(tmp_path),
        [{"source": "p", "model": "Qwen/Qwen3-8B", "spacing": 500, "protocol": "parallel-probe"}],
    )
    cal.check_for({"model": "Qwen/Qwen3-8B", "spacing": 500}, "pool", "parallel-probe")
    cal.check_for({"spacing": 500}, "pool", "parallel-probe")  # a pool that names no model
    with pytest.raises(CalibrationError, match="a pool of model 'other'"):
        cal.check_for({"model": "other", "spacing": 500}, "pool")
    with pytest.raises(CalibrationError, match="probed every 2048 tokens"):
        cal.check_for({"model": "Qwen/Qwen3-8B", "spacing": 2048}, "pool")
    with pytest.raises(CalibrationError, match="fitted under parallel-probe"):
        cal.check_for({"spacing": 500}, "pool", "bootstrap")


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_a_landing_per_row_is_the_shared_landing_when_the_rows_agree(seed):
    """predictive_risk with one landing posterior per row gives what the shared one gives when
    every row's is the same."""
    rng = np.random.default_rng(seed)
    R, B, A = int(rng.integers(1, 6)), int(rng.integers(2, 20)), int(rng.integers(1, 5))
    ids = rng.integers(-1, A, size=(R, B))
    eligible = ids >= 0
    running = rng.random((R, B)) < 0.6
    pending = ~eligible & (rng.random((R, B)) < 0.5)
    q = rng.random((R, B)).astype(np.float32)
    votes = np.stack([np.bincount(ids[r][ids[r] >= 0], minlength=A) for r in range(R)])
    lead = np.where(votes.sum(1) > 0, votes.argmax(1), -1)
    conc = dirichlet_counts(rng.integers(0, A, size=6), A)
    shared = (rng.random((R, B)), rng.random(A + 1) * 0.05)
    w = np.ones((R, B))
    one = predictive_risk(ids, eligible, running, pending, q, w, lead, conc, shared)
    rows = predictive_risk(
        ids, eligible, running, pending, q, w, lead, np.tile(conc, (R, 1)), shared, per_row=True
    )
    assert np.allclose(one, rows, rtol=1e-9, atol=1e-12)


def test_the_landing_counts_ended_traces_only():
    ids = np.array([[0, 0, 1, -1, 2]])
    eligible = ids >= 0
    running = np.array([[False, True, False, True, True]])
    conc = landing(ids, eligible, running, np.full(ids.shape, 0.5), 3)
    # answer 0: one ended (+ 0.5 prior), 1: one ended, 2: held by a running trace only: nothing
    assert conc.tolist() == [[1.5, 1.5, 0.0, 1.0]]
    share, lead = answer_shares(np.where(eligible, ids, -1), 3)
    assert share.tolist() == [[0.5, 0.25, 0.25]] and lead.tolist() == [0]


def test_the_calibrated_rule_needs_traces_that_ended_on_the_leader(tmp_path):
    """However sure the running traces look, no stop before ENDED_MIN traces ended on the
    leader."""
    arrs = _arrays(tmp_path)
    cal = fit_calibration(arrs, [])
    rule = RiskStop.calibrated(cal, alpha=1.0)  # any risk is low enough: only the count decides
    from mars.method.stopping import Snapshot

    B = 12
    ids = np.zeros((1, B), dtype=np.int64)
    for ended in range(B + 1):
        running = np.arange(B)[None, :] >= ended
        snap = Snapshot(
            k=3,
            position=8192,
            rows=np.array([0]),
            ids=ids,
            eligible=np.ones((1, B), bool),
            weights=np.ones((1, B)),
            votes=np.array([[B]], float),
            lead=np.array([0]),
            has_votes=np.array([True]),
            running=running,
            n_answers=1,
        )
        assert bool(rule.check(snap)[0]) == (ended >= ENDED_MIN)


def test_mars2_with_a_calibration_reads_no_warmup_and_pays_none(tmp_path):
    arrs = _arrays(tmp_path, seed=5, n=5)
    cal = fit_calibration(arrs[:3], [])
    s = Settings(budget=24, iterations=6, warmup=0)
    for arr in arrs[3:]:
        res = simulate_question(
            arr, parse_methods("sc,sc-mars2,sc-mars2-launch"), s, calibration=cal
        )
        for name in ("sc-mars2", "sc-mars2-launch"):
            r = res.methods[name]
            assert r.warmup_tokens == 0
            assert np.array_equal(r.paid_tokens, r.tokens + np.nan_to_num(r.probe_tokens))
            assert (r.tokens <= r.baseline).all()
        # the planned launch without a warmup: a first wave of wave_size, then the rest
        assert res.methods["sc-mars2-launch"].rounds in (0, s.wave_size)
    with pytest.raises(Exception, match="a calibration serves self-consistency"):
        simulate_question(arrs[3], parse_methods("dco-mars2"), s, calibration=cal)


def test_the_papers_rules_switch_model_and_gamma_are_learned_once_and_kept(tmp_path):
    """The fit holds a switch model on the traces' dynamics (the confidence columns read
    nothing) and γ in [γ_min, 1]; the file keeps both, a damaged model is one line, and a file
    without them serves MARS2 but not the paper's rules."""
    import dataclasses

    from mars.errors import SimulationError
    from mars.method.features import question_features
    from mars.method.learned import CONF_COLUMNS
    from mars.method.registry import check_calibrated, get_method

    arrs = _arrays(tmp_path)
    cal = fit_calibration(arrs, [{"source": "p", "model": "m", "spacing": 2048}])
    assert cal.switch is not None and cal.gamma == 1.0
    model = cal.switch_model()
    X = question_features(arrs[0]).reshape(-1, 5)
    noisy = X.copy()
    noisy[..., list(CONF_COLUMNS)] = np.random.default_rng(0).random((len(X), 2))
    assert np.array_equal(model.predict_proba(X), model.predict_proba(noisy))
    back = Calibration.load(cal.save(tmp_path / "cal.json"))
    assert back.switch == cal.switch and back.gamma == cal.gamma and back.digest == cal.digest
    good = json.loads((tmp_path / "cal.json").read_text())
    for damage, words in [
        ({"switch": {**good["switch"], "coef": [1.0]}}, "coef has 1 values"),
        ({"gamma": 2}, "gamma 2 is not a number in"),
    ]:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({**good, **damage}))
        with pytest.raises(CalibrationError, match=words):
            Calibration.load(bad)
    old = dataclasses.replace(cal, switch=None, gamma=None)
    check_calibrated(get_method("sc-mars2"), old)
    for name in ("sc-mars-cal", "sc-mars"):
        check_calibrated(get_method(name), cal)
        with pytest.raises(SimulationError, match="holds no switch model"):
            check_calibrated(get_method(name), old)
    with pytest.raises(SimulationError, match="DeepConf"):
        check_calibrated(get_method("dco-mars-cal"), cal)
