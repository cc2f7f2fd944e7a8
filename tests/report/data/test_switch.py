"""What the fit learned, from the analyses: learned against oracle q, and the switch models
(none without a fit, the run read still named)."""

from __future__ import annotations

import pytest

from mars.report import collect
from mars.report.data.base import Reads
from mars.report.data.switch import q_calibration_frames, switch_models_frame
from mars.store.schema import SWITCH_FEATURES


def test_q_calibration_frames(synthetic):
    bins, cps = q_calibration_frames(collect([synthetic]))
    assert bins is not None and cps is not None
    assert set(bins.label) == set(cps.label) == {"qwen3-8b/aime_2025"}
    assert (bins.n > 0).all() and bins.bin.is_monotonic_increasing
    assert set(bins.n_questions) == {1}  # --q-questions 1
    assert cps.position.is_monotonic_increasing


def test_no_fit_no_switch_models(synthetic, tree):
    reads = Reads()
    assert switch_models_frame(collect([synthetic]), reads).empty  # analysed without --fit
    assert [r.pair for r, _ in reads.items] == [("qwen3-8b", "aime_2025")]
    assert q_calibration_frames(collect([tree[0]])) == (None, None)


def test_switch_models_summarise_the_fit(fitted):
    """Per pool: the questions fitted, the switch share of their rows and each feature's
    coefficient over the questions, from the analysis's switch models."""
    results = collect([fitted])
    found = results.analysis_of(*results.pairs[0])
    assert found is not None
    models = found[1].switch_models
    df = switch_models_frame(results)
    assert len(df) == 1 and df.questions.iloc[0] == len(models) == 4
    share = (models.n_positive / models.n_rows).mean()
    assert df.switch_share.iloc[0] == pytest.approx(share)
    for name in SWITCH_FEATURES:
        coefs = models[f"coef_{name}"].dropna()
        assert df[f"coef_{name}_mean"].iloc[0] == pytest.approx(coefs.mean())
        assert df[f"coef_{name}_sd"].iloc[0] == pytest.approx(coefs.std(ddof=0))
    assert (df.log_loss > 0).all() and (df.brier > 0).all()
