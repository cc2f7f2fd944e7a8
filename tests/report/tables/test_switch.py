"""The switch models table shows each pool's fit: coefficients as mean ± sd."""

from __future__ import annotations

from mars.report import collect
from mars.report.tables import table_switch_models
from mars.store.schema import SWITCH_FEATURES


def test_the_fit_is_shown(fitted):
    t = table_switch_models(collect([fitted]), "mars report")
    ((model, dataset, questions, *_), *_) = [[c.md() for c in r] for r in t.rows]
    assert (model, dataset, questions) == ("qwen3-8b", "aime_2025", "4") and not t.notes
    rec = t.data.iloc[0]
    coefficients = [c.md() for c in t.rows[0][-len(SWITCH_FEATURES) :]]
    assert coefficients == [
        f"{rec[f'coef_{n}_mean']:+.2f} ± {rec[f'coef_{n}_sd']:.2f}" for n in SWITCH_FEATURES
    ]
    assert len(t.headers) == len(t.rows[0]) == 7 + len(SWITCH_FEATURES)


def test_without_a_fit_it_says_how_to_get_one(synthetic):
    t = table_switch_models(collect([synthetic]))
    assert not t.rows and "mars analyze --fit" in t.notes[0]
