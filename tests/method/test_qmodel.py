"""The switch model q (mars.method.qmodel, reference-protocol §6): an L2 logistic regression on
standardised features with in-sample Platt scaling, following scikit-learn's estimator
conventions; fitted per question on the warmup traces."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_info

from mars.method.arrays import QuestionArrays
from mars.method.features import question_features, switch_labels
from mars.method.qmodel import (
    MAX_PARAM,
    STD_FLOOR,
    SwitchModel,
    expit,
    fit_question,
    one_blas_thread,
    predict_question,
)


def data(seed=0, n=300, d=3):
    """Labels that depend on the first feature, with noise."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * [1.0, 10.0, 0.1][:d] + [0.0, 50.0, -3.0][:d]
    y = (X[:, 0] + 0.7 * rng.normal(size=n) > 0.3).astype(np.float32)
    return X, y


@pytest.fixture(scope="module")
def fitted():
    X, y = data()
    return SwitchModel().fit(X, y), X, y


# ----------------------------------------------------------------------------- estimator API


def test_params_and_clone():
    model = SwitchModel(C=2.0, platt=False)
    assert model.get_params() == {"C": 2.0, "platt": False, "max_iter": 200, "platt_max_iter": 100}
    assert repr(model) == "SwitchModel(C=2.0, platt=False)"
    assert repr(SwitchModel()) == "SwitchModel()"
    twin = clone(model)
    assert twin is not model and twin.get_params() == model.get_params()


def test_fit_returns_self_sets_underscored_attributes_and_keeps_params():
    X, y = data()
    model = SwitchModel(C=3.0)
    assert not [a for a in vars(model) if a.endswith("_")]
    assert model.fit(X, y) is model
    assert model.get_params()["C"] == 3.0
    assert model.n_features_in_ == 3
    assert model.classes_.tolist() == [0, 1]
    assert model.coef_.shape == (3,)
    assert np.allclose(model.mean_, X.mean(axis=0))
    assert np.allclose(model.scale_, X.std(axis=0))
    # a clone is unfitted
    assert not hasattr(clone(model), "coef_")


def test_predictions_are_probabilities(fitted):
    model, X, _ = fitted
    P = model.predict_proba(X)
    assert P.shape == (len(X), 2)
    assert ((P >= 0) & (P <= 1)).all()
    assert np.allclose(P.sum(axis=1), 1.0)
    assert model.predict(X).tolist() == (P[:, 1] > 0.5).astype(int).tolist()
    assert set(np.unique(model.predict(X))) <= {0, 1}


def test_the_model_learns_the_signal(fitted):
    model, X, y = fitted
    assert (model.predict(X) == y).mean() > 0.8
    # the informative feature carries the weight; q rises with it
    assert abs(model.coef_[0]) > 5 * np.abs(model.coef_[1:]).max()
    lo, hi = model.predict_proba(np.array([[-2.0, 50.0, -3.0], [2.0, 50.0, -3.0]]))[:, 1]
    assert lo < 0.1 < 0.9 < hi


def test_fit_is_deterministic():
    X, y = data(seed=5)
    a, b = SwitchModel().fit(X, y), SwitchModel().fit(X.copy(), y.copy())
    assert a.fitted_params() == b.fitted_params()
    assert np.array_equal(a.predict_proba(X), b.predict_proba(X))
    c = SwitchModel().fit(*data(seed=6))
    assert c.fitted_params() != a.fitted_params()


def test_unplatted_fit_is_l2_logistic_regression_with_c_50():
    X, y = data(seed=1)
    ours = SwitchModel(platt=False).fit(X, y)
    Xs = (X - X.mean(axis=0)) / X.std(axis=0)
    ref = LogisticRegression(C=50.0, tol=1e-10, max_iter=1000).fit(Xs, y)
    assert np.allclose(ours.coef_, ref.coef_[0], atol=1e-3)
    assert ours.intercept_ == pytest.approx(ref.intercept_[0], abs=1e-3)
    assert np.allclose(ours.predict_proba(X)[:, 1], ref.predict_proba(Xs)[:, 1], atol=1e-4)
    # without Platt, q is the logistic of the linear score on the standardised features
    Xm = (X - ours.mean_) / ours.scale_
    assert np.array_equal(ours.predict_proba(X)[:, 1], expit(ours.intercept_ + Xm @ ours.coef_))


def test_smaller_c_shrinks_the_coefficients():
    X, y = data(seed=2)
    norms = [np.linalg.norm(SwitchModel(C=C, platt=False).fit(X, y).coef_) for C in (0.01, 1, 50)]
    assert norms[0] < norms[1] < norms[2]


def test_platt_leaves_an_in_sample_calibrated_fit_nearly_alone(fitted):
    # the logistic fit is already calibrated on its own rows, so Platt stays near (a, b) = (1, 0)
    model = fitted[0]
    a, b = model.platt_
    assert a == pytest.approx(1.0, abs=0.05)
    assert b == pytest.approx(0.0, abs=0.05)
    assert SwitchModel(platt=False).fit(*data()).platt_ == (1.0, 0.0)


def test_a_constant_feature_gets_coefficient_zero():
    X, y = data(seed=3)
    X[:, 2] = 7.0
    model = SwitchModel().fit(X, y)
    assert model.scale_[2] == STD_FLOOR
    assert model.coef_[2] == 0.0


def test_all_zero_labels_give_q_near_zero():
    X, _ = data(seed=4)
    model = SwitchModel().fit(X, np.zeros(len(X)))
    q = model.predict_proba(X)[:, 1]
    assert (q < 1e-6).all() and (q >= 0).all()
    assert model.predict(X).tolist() == [0] * len(X)


# ----------------------------------------------------------------------------- validation


def test_unfitted_model_refuses_to_predict():
    with pytest.raises(ValueError, match="not fitted"):
        SwitchModel().predict_proba(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="not fitted"):
        SwitchModel().fitted_params()


@pytest.mark.parametrize(
    ("X", "y", "message"),
    [
        (np.zeros(5), np.zeros(5), "2-d"),
        (np.zeros((2, 2, 2)), np.zeros(2), "2-d"),
        (np.array([[0.0, np.nan], [1.0, 2.0]]), np.zeros(2), "NaN or infinity"),
        (np.array([[0.0, np.inf], [1.0, 2.0]]), np.zeros(2), "NaN or infinity"),
        (np.zeros((3, 2)), np.zeros(2), "one label per row"),
        (np.zeros((3, 2)), np.zeros((3, 1)), "1-d"),
        (np.zeros((0, 2)), np.zeros(0), "no training rows"),
    ],
)
def test_fit_refuses_bad_input(X, y, message):
    with pytest.raises(ValueError, match=message):
        SwitchModel().fit(X, y)


def test_predict_refuses_a_different_number_of_features(fitted):
    model, X, _ = fitted
    with pytest.raises(ValueError):
        model.predict_proba(X[:, :2])
    with pytest.raises(ValueError):
        model.predict_proba(np.hstack([X, X]))


def test_predict_refuses_a_single_feature_column(fitted):
    model, X, _ = fitted
    with pytest.raises(ValueError):
        model.predict_proba(X[:, :1])


def test_predict_refuses_nan_features(fitted):
    model, X, _ = fitted
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError):
        model.predict_proba(bad)


# ----------------------------------------------------------------------------- saved parameters


def test_fitted_params_restore_bit_for_bit(fitted):
    model, X, _ = fitted
    params = model.fitted_params()
    assert all(isinstance(v, float) for v in params["coef"])
    back = SwitchModel.from_params(params, 3)
    assert np.array_equal(back.predict_proba(X), model.predict_proba(X))
    assert back.n_features_in_ == 3


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda p: p.pop("intercept"), "intercept None"),
        (lambda p: p.update(intercept=float("nan")), "intercept nan"),
        (lambda p: p.update(platt_a=True), "platt_a True"),
        (lambda p: p.update(platt_b=10 * MAX_PARAM), "platt_b"),
        (lambda p: p.update(coef=p["coef"][:2]), "coef has 2 values, expected 3"),
        (lambda p: p.update(mean="abc"), "mean 'abc' is not a list"),
        (lambda p: p.update(coef=[1.0, "x", 2.0]), "coef holds something other than numbers"),
        (lambda p: p.update(coef=[1.0, float("inf"), 2.0]), "coef holds a value"),
        (lambda p: p.update(scale=[1.0, 0.0, 1.0]), "below the fit's floor"),
    ],
)
def test_from_params_refuses_damaged_parameters(fitted, edit, message):
    params = fitted[0].fitted_params()
    edit(params)
    with pytest.raises(ValueError, match=message):
        SwitchModel.from_params(params, 3)


def test_blas_runs_on_one_thread_inside_the_context():
    with one_blas_thread():
        blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
        assert blas, "numpy's BLAS was not found"
        assert all(i["num_threads"] == 1 for i in blas)


# ----------------------------------------------------------------------------- per question


def question(seed=0, n=8, m=6):
    """Traces that settle on their final answer partway, with confidence rising once settled."""
    rng = np.random.default_rng(seed)
    final = rng.integers(0, 3, size=n)
    settle = rng.integers(0, m, size=n)
    ids = np.where(
        np.arange(m)[None, :] >= settle[:, None], final[:, None], (final[:, None] + 1) % 3
    )
    conf = np.where(ids == final[:, None], 2.0, 1.0) + rng.normal(scale=0.1, size=(n, m))
    return QuestionArrays(
        qid=0,
        ground_truth="0",
        grid=np.arange(1, m + 1, dtype=np.int64) * 2048,
        lengths=np.full(n, 2048 * (m + 1), dtype=np.int64),
        final_ids=final.astype(np.int32),
        ids=ids.astype(np.int32),
        representatives=["0", "1", "2"],
        correct=np.array([True, False, False]),
        conf_at_pos=conf.astype(np.float32),
    )


def test_fit_question_trains_on_the_warmup_traces_at_every_checkpoint():
    arr = question()
    warm = np.array([0, 1, 2, 3, 4])
    fit = fit_question(arr, warm)
    y = switch_labels(arr, warm)
    assert fit.n_rows == 5 * arr.n_checkpoints
    assert fit.n_positive == int(y.sum())
    assert fit.warm.tolist() == warm.tolist()
    X = question_features(arr, warm).reshape(-1, 5)
    expected = SwitchModel().fit(X, y.reshape(-1))
    assert fit.model.fitted_params() == expected.fitted_params()
    q = np.clip(expected.predict_proba(X)[:, 1], 1e-15, 1 - 1e-15)
    yw = y.reshape(-1)
    assert fit.brier == pytest.approx(np.mean((q - yw) ** 2))
    assert fit.log_loss == pytest.approx(-np.mean(yw * np.log(q) + (1 - yw) * np.log(1 - q)))


def test_fit_question_reuses_a_model_fitted_on_the_same_rows():
    arr = question()
    memo: dict = {}
    first = fit_question(arr, np.arange(4), memo)
    assert len(memo) == 1
    assert fit_question(arr, np.arange(4), memo).model is first.model
    assert fit_question(arr, np.arange(1, 5), memo).model is not first.model
    assert len(memo) == 2


def test_without_warmup_there_is_no_model_and_q_is_one():
    arr = question()
    fit = fit_question(arr, np.array([], dtype=np.int64))
    assert fit.model is None and fit.n_rows == 0
    q = predict_question(None, arr)
    assert q.dtype == np.float32 and q.shape == arr.ids.shape and (q == 1).all()


def test_predict_question_covers_every_trace_and_checkpoint():
    arr = question()
    fit = fit_question(arr, np.arange(5))
    q = predict_question(fit.model, arr)
    assert q.shape == (arr.n_traces, arr.n_checkpoints) and q.dtype == np.float32
    assert ((q >= 0) & (q <= 1)).all()
    X = question_features(arr).reshape(-1, 5)
    assert np.array_equal(q.reshape(-1), fit.model.predict_proba(X)[:, 1].astype(np.float32))
    # switching rows get a higher q than settled ones on average
    y = switch_labels(arr)
    assert q[y == 1].mean() > q[y == 0].mean()
