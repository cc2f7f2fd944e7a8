"""Per-question switch-probability model q (reference-protocol §6).

An L2-regularised logistic regression on standardised features (λ = 0.01 on the *summed* loss,
i.e. scikit-learn's C = 50), followed by in-sample Platt scaling. The optimiser is pinned exactly as
the reference runs it (scipy L-BFGS-B from zeros, 200 iterations for the fit, 100 for Platt), so
learned q values, and therefore stopping decisions, reproduce the authors' simulator; the class
follows scikit-learn's estimator conventions (fit / predict_proba, fitted attributes with ``_``)
without importing it.

A fit of ~500 rows × 6 parameters takes 1-2 ms: BLAS runs on one thread while fitting and
predicting (:func:`one_blas_thread`). A threaded BLAS gains nothing on products this small, and on
a machine whose cores are all busy (the simulator's worker processes) its threads spin waiting for
each other, up to 100 times the fit's own work. scipy is imported on the first fit or prediction,
so commands that never fit (``simulate --fit``, reports) do not pay for it.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .arrays import QuestionArrays, digest_arrays
from .features import question_features, switch_labels

STD_FLOOR = 1e-10
PLATT_CLIP = 1e-7
#: No fit produces a parameter beyond this magnitude; with every parameter within it (and scales
#: at least STD_FLOOR) a prediction on float32 features cannot overflow into NaN.
MAX_PARAM = 1e100


_BLAS: tuple[bool, Any] | None = None


def one_blas_thread() -> AbstractContextManager:
    """A context in which BLAS (numpy's OpenBLAS, and scipy's once scipy.optimize is loaded) runs
    on one thread.

    The fitted parameters and predictions are the same bits either way (checked on every question
    of the conformance pools, at warmup 4, 8 and 16).
    """
    global _BLAS
    with_scipy = "scipy.optimize" in sys.modules  # brings scipy's own OpenBLAS
    if _BLAS is None or _BLAS[0] != with_scipy:
        from threadpoolctl import ThreadpoolController

        _BLAS = (with_scipy, ThreadpoolController())  # ~1 ms: finds the loaded BLAS libraries
    return _BLAS[1].limit(limits=1, user_api="blas")


def preload() -> None:
    """Import what a fit needs (scipy.optimize, ~0.3 s): once in a parent process, rather than in
    each of the worker processes it forks."""
    import scipy.optimize  # noqa: F401


def expit(x: np.ndarray) -> np.ndarray:
    """The logistic function, scipy's (1 / (1 + exp(−x)) with the C library's exp: numpy's own
    exp differs from it in the last bit for about 1 value in 50)."""
    from scipy.special import expit as _expit

    return _expit(x)


def _logistic_fit(
    X: np.ndarray, y: np.ndarray, l2: float, x0: np.ndarray, maxiter: int, penalize_from: int
) -> np.ndarray:
    """Minimise Σ log(1+e^z) − y z + l2·‖θ[penalize_from:]‖², z = θ0 + X θ[1:]."""
    from scipy.optimize import minimize
    from scipy.special import expit

    def fun(theta):
        z = theta[0] + X @ theta[1:]
        loss = np.sum(np.logaddexp(0.0, z) - y * z)
        pen = theta[penalize_from:]
        loss += l2 * np.dot(pen, pen)
        r = expit(z) - y
        grad = np.empty_like(theta)
        grad[0] = r.sum()
        grad[1:] = X.T @ r
        grad[penalize_from:] += 2.0 * l2 * pen
        return loss, grad

    res = minimize(fun, x0, jac=True, method="L-BFGS-B", options={"maxiter": maxiter})
    return res.x


def _check_X(X) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"expected a 2-d feature array, got {X.ndim} dimension(s)")
    if not np.isfinite(X).all():
        raise ValueError("features hold NaN or infinity")
    return X


class SwitchModel:
    """P(a trace's answer now differs from its final answer | features)."""

    def __init__(
        self, C: float = 50.0, platt: bool = True, max_iter: int = 200, platt_max_iter: int = 100
    ):
        self.C = C
        self.platt = platt
        self.max_iter = max_iter
        self.platt_max_iter = platt_max_iter

    def get_params(self, deep: bool = True) -> dict:
        return {
            "C": self.C,
            "platt": self.platt,
            "max_iter": self.max_iter,
            "platt_max_iter": self.platt_max_iter,
        }

    def __repr__(self) -> str:
        changed = {k: v for k, v in self.get_params().items() if v != type(self)().get_params()[k]}
        return f"SwitchModel({', '.join(f'{k}={v!r}' for k, v in changed.items())})"

    def _check_is_fitted(self) -> None:
        if not hasattr(self, "coef_"):
            raise ValueError("this SwitchModel is not fitted yet; call fit first")

    def fit(self, X, y):
        X = _check_X(X)
        y = np.asarray(y)
        if y.ndim != 1 or len(y) != len(X):
            raise ValueError(f"y must be 1-d with one label per row of X ({len(X)}), got {y.shape}")
        if len(X) == 0:
            raise ValueError("no training rows")
        self.n_features_in_ = X.shape[1]
        self.classes_ = np.array([0, 1])
        self.mean_ = X.mean(axis=0)
        self.scale_ = np.maximum(X.std(axis=0), STD_FLOOR)
        Xs = (X - self.mean_) / self.scale_
        y = y.astype(np.float64)
        import scipy.optimize  # noqa: F401 - before one_blas_thread(), which then limits its BLAS

        with one_blas_thread():
            theta = _logistic_fit(
                Xs,
                y,
                l2=1.0 / (2.0 * self.C),
                x0=np.zeros(X.shape[1] + 1),
                maxiter=self.max_iter,
                penalize_from=1,
            )
            self.intercept_, self.coef_ = theta[0], theta[1:]
            self.platt_ = (1.0, 0.0)
            if self.platt:
                s = self._raw_logit(Xs)[:, None]
                ab = _logistic_fit(
                    s,
                    y,
                    l2=0.0,
                    x0=np.array([0.0, 1.0]),
                    maxiter=self.platt_max_iter,
                    penalize_from=2,
                )
                self.platt_ = (float(ab[1]), float(ab[0]))  # (a, b)
        return self

    def _raw_logit(self, Xs: np.ndarray) -> np.ndarray:
        q_raw = expit(self.intercept_ + Xs @ self.coef_)
        q_raw = np.clip(q_raw, PLATT_CLIP, 1.0 - PLATT_CLIP)
        return np.log(q_raw / (1.0 - q_raw))

    def predict_proba(self, X) -> np.ndarray:
        self._check_is_fitted()
        X = _check_X(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but this SwitchModel was fitted on "
                f"{self.n_features_in_}"
            )
        Xs = (X - self.mean_) / self.scale_
        with one_blas_thread():
            if self.platt:
                a, b = self.platt_
                q = expit(a * self._raw_logit(Xs) + b)
            else:
                q = expit(self.intercept_ + Xs @ self.coef_)
        return np.column_stack([1.0 - q, q])

    def predict(self, X) -> np.ndarray:
        return (self.predict_proba(X)[:, 1] > 0.5).astype(int)

    def fitted_params(self) -> dict:
        """The fitted state as plain float64 numbers (one row of the fit stage's models.parquet);
        :meth:`from_params` restores a model that predicts bit for bit the same."""
        self._check_is_fitted()
        a, b = self.platt_
        return {
            "mean": [float(v) for v in self.mean_],
            "scale": [float(v) for v in self.scale_],
            "intercept": float(self.intercept_),
            "coef": [float(v) for v in self.coef_],
            "platt_a": float(a),
            "platt_b": float(b),
        }

    @classmethod
    def from_params(cls, params: dict, n_features: int, **init) -> SwitchModel:
        """The model of :meth:`fitted_params`; ValueError naming the first parameter that is
        missing, not a finite number within ±MAX_PARAM, of another length than ``n_features``
        or (scale) below the floor."""

        def number(name: str) -> float:
            v = params.get(name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not abs(v) <= MAX_PARAM:
                raise ValueError(f"{name} {v!r} is not a finite number within ±{MAX_PARAM:g}")
            return float(v)

        def vector(name: str) -> np.ndarray:
            v = params.get(name)
            if not isinstance(v, list | tuple | np.ndarray):
                raise ValueError(f"{name} {v!r} is not a list of {n_features} numbers")
            if len(v) != n_features:
                raise ValueError(f"{name} has {len(v)} values, expected {n_features}")
            try:
                a = np.asarray(v, dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError(f"{name} holds something other than numbers") from None
            if not (np.abs(a) <= MAX_PARAM).all():
                raise ValueError(
                    f"{name} holds a value that is not a finite number within ±{MAX_PARAM:g}"
                )
            return a

        model = cls(**init)
        model.mean_ = vector("mean")
        model.scale_ = vector("scale")
        if (model.scale_ < STD_FLOOR).any():
            raise ValueError(f"scale holds a value below the fit's floor {STD_FLOOR:g}")
        model.intercept_ = np.float64(number("intercept"))
        model.coef_ = vector("coef")
        model.platt_ = (number("platt_a"), number("platt_b"))
        model.classes_ = np.array([0, 1])
        model.n_features_in_ = n_features
        return model


@dataclass
class QuestionFit:
    """One question's switch model fitted on its warmup traces, with in-sample diagnostics."""

    warm: np.ndarray  # trace indices of the warmup traces (rows = these traces × all checkpoints)
    model: SwitchModel | None  # None without warmup traces: q = 1 everywhere
    n_rows: int
    n_positive: int
    log_loss: float
    brier: float


def fit_question(arr: QuestionArrays, warm: np.ndarray, memo: dict | None = None) -> QuestionFit:
    """Fit q on the warmup traces × every checkpoint (reference-protocol §6).

    ``memo`` (a dict kept by the caller) reuses a model fitted on byte-identical training rows, as
    at every checkpoint of a live run.
    """
    warm = np.asarray(warm, dtype=np.int64)
    if len(warm) == 0:
        return QuestionFit(warm, None, 0, 0, float("nan"), float("nan"))
    X = question_features(arr, warm)
    Xw = X.reshape(-1, X.shape[-1])
    yw = switch_labels(arr, warm).reshape(-1)
    key = ("q", digest_arrays(Xw, yw))
    model = memo.get(key) if memo is not None else None
    if model is None:
        model = SwitchModel().fit(Xw, yw)
        if memo is not None:
            memo[key] = model
    q = np.clip(model.predict_proba(Xw)[:, 1], 1e-15, 1 - 1e-15)
    log_loss = float(-np.mean(yw * np.log(q) + (1 - yw) * np.log1p(-q)))
    brier = float(np.mean((q - yw) ** 2))
    return QuestionFit(warm, model, len(yw), int(yw.sum()), log_loss, brier)


class Predictor(Protocol):
    """What predicts switch probabilities: a :class:`SwitchModel`, or a calibration's
    (:class:`mars.method.learned.DynamicsModel`)."""

    def predict_proba(self, X: Any) -> np.ndarray: ...


def predict_question(model: Predictor | None, arr: QuestionArrays) -> np.ndarray:
    """Learned switch probabilities of every trace × checkpoint, float32 [n, m]
    (1 without model)."""
    n, m = arr.ids.shape
    if model is None:
        return np.ones((n, m), dtype=np.float32)
    X = question_features(arr)
    return model.predict_proba(X.reshape(-1, X.shape[-1]))[:, 1].astype(np.float32).reshape(n, m)
