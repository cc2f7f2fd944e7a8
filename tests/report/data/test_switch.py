"""What the fit learned, from the analyses: learned against oracle q, and the switch models
(none without a fit, the run read still named)."""

from __future__ import annotations

from mars.report import collect
from mars.report.data.base import Reads
from mars.report.data.switch import q_calibration_frames, switch_models_frame


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
