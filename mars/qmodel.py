"""Per-question switch-probability model q (reference-protocol §6).

An L2-regularised logistic regression on standardised features (λ = 0.01 on the *summed* loss,
i.e. scikit-learn's C = 50), followed by in-sample Platt scaling. The optimiser is pinned exactly as
the reference runs it (scipy L-BFGS-B from zeros, 200 iterations for the fit, 100 for Platt), so
learned q values, and therefore stopping decisions, reproduce the authors' simulator; the class
follows scikit-learn's estimator conventions (fit / predict_proba, fitted attributes with ``_``).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted, check_X_y, validate_data

STD_FLOOR = 1e-10
PLATT_CLIP = 1e-7


def _logistic_fit(
    X: np.ndarray, y: np.ndarray, l2: float, x0: np.ndarray, maxiter: int, penalize_from: int
) -> np.ndarray:
    """Minimise Σ log(1+e^z) − y z + l2·‖θ[penalize_from:]‖², z = θ0 + X θ[1:]."""

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


class SwitchModel(ClassifierMixin, BaseEstimator):
    """P(a trace's answer now differs from its final answer | features)."""

    def __init__(
        self, C: float = 50.0, platt: bool = True, max_iter: int = 200, platt_max_iter: int = 100
    ):
        self.C = C
        self.platt = platt
        self.max_iter = max_iter
        self.platt_max_iter = platt_max_iter

    def fit(self, X, y):
        X, y = check_X_y(X, y, dtype=np.float64)
        validate_data(self, X, reset=True, skip_check_array=True)
        self.classes_ = np.array([0, 1])
        self.mean_ = X.mean(axis=0)
        self.scale_ = np.maximum(X.std(axis=0), STD_FLOOR)
        Xs = (X - self.mean_) / self.scale_
        y = y.astype(np.float64)
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
                s, y, l2=0.0, x0=np.array([0.0, 1.0]), maxiter=self.platt_max_iter, penalize_from=2
            )
            self.platt_ = (float(ab[1]), float(ab[0]))  # (a, b)
        return self

    def _raw_logit(self, Xs: np.ndarray) -> np.ndarray:
        q_raw = expit(self.intercept_ + Xs @ self.coef_)
        q_raw = np.clip(q_raw, PLATT_CLIP, 1.0 - PLATT_CLIP)
        return np.log(q_raw / (1.0 - q_raw))

    def predict_proba(self, X) -> np.ndarray:
        check_is_fitted(self)
        X = np.asarray(X, dtype=np.float64)
        Xs = (X - self.mean_) / self.scale_
        if self.platt:
            a, b = self.platt_
            q = expit(a * self._raw_logit(Xs) + b)
        else:
            q = expit(self.intercept_ + Xs @ self.coef_)
        return np.column_stack([1.0 - q, q])

    def predict(self, X) -> np.ndarray:
        return (self.predict_proba(X)[:, 1] > 0.5).astype(int)
