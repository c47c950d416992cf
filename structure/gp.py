"""An exact GP in numpy: BoTorch's default `SingleTaskGP` (constant mean, RBF kernel with one
lengthscale per column under the dimension-scaled LogNormal prior, Gaussian noise above 1e-4
under a LogNormal(-4, 1) prior, no outcome scale: the targets are standardized), its MAP
hyper-parameters with the analytic gradient, and its exact leave-one-out density.

Written out because parent selection (`structure.select`) scores hundreds of input sets of a
few dozen points per checkpoint and the network fits one GP per node at each: at these sizes the
general model's (and autograd's) per-call overhead costs ten times the arithmetic. The GP
network loads the MAP estimate into its `SingleTaskGP` nodes (`structure.network`), so both
solve BoTorch's own fitting problem.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

__all__ = [
    "MIN_LENGTHSCALE",
    "MIN_NOISE",
    "kernel",
    "loo_log_density",
    "map_hyperparameters",
    "map_objective",
    "sq_dists",
]

MIN_LENGTHSCALE = 2.5e-2  # BoTorch's lower bound of `SingleTaskGP`'s lengthscales
MIN_NOISE = 1e-4  # BoTorch's lower bound of the noise variance (`MIN_INFERRED_NOISE_LEVEL`)


def loo_log_density(
    X: np.ndarray, y: np.ndarray, fit_maxiter: int = 100
) -> tuple[float, np.ndarray, np.ndarray]:
    """Exact leave-one-out log predictive density of a GP on ``(X, y)``.

    The GP is this module's; its hyper-parameters are the MAP estimate on all points
    (L-BFGS-B from the prior modes, as BoTorch starts); the leave-one-out predictive of point
    ``i`` is then ``N(y_i - a_i / c_ii, 1 / c_ii)`` with ``C = (K + s^2 I)^-1`` and
    ``a = C (y - m)`` (Rasmussen & Williams 2006, eq. 5.12).

    Args:
        X: ``n x d``-dim inputs in the unit cube.
        y: ``n``-dim standardized targets.
        fit_maxiter: Iteration cap of the hyper-parameter fit.

    Returns:
        The summed log density, the ``n`` leave-one-out means and the fitted lengthscales.
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    d = X.shape[-1]
    theta = map_hyperparameters(X, y, fit_maxiter)
    factored = _log_det_and_inverse(kernel(sq_dists(X), theta))
    if factored is None:
        return -math.inf, np.zeros_like(y), np.ones(d)
    C = factored[1]
    c = np.diagonal(C)
    err = (C @ (y - theta[d + 1])) / c
    var = 1.0 / c
    ll = -0.5 * (np.log(2 * math.pi * var) + err**2 / var)
    return float(ll.sum()), y - err, np.exp(theta[:d])


def sq_dists(X: np.ndarray) -> np.ndarray:
    """``d x n x n`` squared differences per column."""
    diff = X.T[:, :, None] - X.T[:, None, :]
    return diff * diff


def _rbf(D: np.ndarray, log_lengthscales: np.ndarray) -> np.ndarray:
    """RBF kernel matrix from per-column squared differences `D`."""
    return np.exp(-0.5 * np.tensordot(np.exp(-2.0 * log_lengthscales), D, axes=1))


def kernel(D: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """``K + s^2 I`` for per-column squared differences `D` and
    ``theta = (log lengthscales, log(s^2 - 1e-4), mean)``."""
    d = D.shape[0]
    return _with_noise(_rbf(D, theta[:d]), float(theta[d]))


def _with_noise(rbf: np.ndarray, t: float) -> np.ndarray:
    """``rbf + (1e-4 + e^t) I`` plus a 1e-8 jitter on the diagonal."""
    K = rbf.copy()
    K.flat[:: K.shape[-1] + 1] += MIN_NOISE + math.exp(t) + 1e-8
    return K


def _log_det_and_inverse(K: np.ndarray) -> tuple[float, np.ndarray] | None:
    """``(log |K| / 2, K^-1)`` by LAPACK's Cholesky routines (``potrf``, ``potri``: a third of
    the per-call cost of NumPy's at these sizes); None when ``K`` is not positive definite."""
    from scipy.linalg import lapack

    factor, info = lapack.dpotrf(K, lower=1, clean=0)
    if info != 0:
        return None
    half_log_det = float(np.log(np.diagonal(factor)).sum())
    inverse, info = lapack.dpotri(factor, lower=1)
    if info != 0:
        return None
    return half_log_det, np.tril(inverse) + np.tril(inverse, -1).T


def _lengthscale_prior(d: int) -> tuple[float, float]:
    """``(loc, scale)`` of BoTorch's dimension-scaled LogNormal lengthscale prior."""
    return math.sqrt(2) + 0.5 * math.log(d), math.sqrt(3)


def map_hyperparameters(
    X: np.ndarray, y: np.ndarray, maxiter: int, min_lengthscale: float = math.exp(-7.0)
) -> np.ndarray:
    """MAP hyper-parameters ``theta = (log lengthscales, log(noise - 1e-4), mean)`` of the GP.

    Args:
        X: ``n x d``-dim inputs (the unit cube, or the model's normalized inputs).
        y: ``n``-dim standardized targets.
        maxiter: Iteration cap of L-BFGS-B (started from the prior modes, as BoTorch starts).
        min_lengthscale: Lower bound of every lengthscale. BoTorch's `SingleTaskGP` bounds
            them at 0.025 (`MIN_LENGTHSCALE`); parent selection leaves them nearly free.
    """
    from scipy.optimize import minimize

    d = X.shape[1]
    loc, scale = _lengthscale_prior(d)
    low = math.log(min_lengthscale)
    x0 = np.r_[np.full(d, max(loc - scale**2, low)), math.log(math.exp(-5.0) - MIN_NOISE)]
    x0 = np.r_[x0, float(y.mean())]
    bounds = [(low, 7.0)] * d + [(-25.0, 3.0), (None, None)]
    result = minimize(
        map_objective(X, y), x0, jac=True, method="L-BFGS-B", bounds=bounds,
        options={"maxiter": maxiter},
    )  # fmt: skip
    return np.asarray(result.x, dtype=np.float64)


def map_objective(X: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], tuple[float, np.ndarray]]:
    """The negative log posterior of `map_hyperparameters` and its gradient, as one function
    of ``theta``."""
    n, d = X.shape
    D = sq_dists(X)
    loc, scale = _lengthscale_prior(d)

    def value_and_grad(theta: np.ndarray) -> tuple[float, np.ndarray]:
        """Negative log posterior and its gradient (R&W eq. 5.9 for the kernel terms)."""
        log_ls, t = theta[:d], float(theta[d])
        noise = MIN_NOISE + math.exp(t)
        rbf = _rbf(D, log_ls)
        factored = _log_det_and_inverse(_with_noise(rbf, t))
        if factored is None:  # not positive definite: push the optimizer away
            return 1e10, np.zeros_like(theta)
        half_log_det, K_inv = factored
        r = y - theta[d + 1]
        alpha = K_inv @ r
        log_noise = math.log(noise)
        value = 0.5 * r @ alpha + half_log_det
        value += (log_ls + (log_ls - loc) ** 2 / (2 * scale**2)).sum()  # LogNormal(loc, scale)
        value += log_noise + (log_noise + 4.0) ** 2 / 2  # LogNormal(-4, 1) on the noise
        W = K_inv - np.outer(alpha, alpha)  # d(data term)/dK = W / 2
        grad = np.empty_like(theta)
        # dK/d log l_j = rbf * D_j / l_j^2
        grad[:d] = 0.5 * np.tensordot(D, W * rbf, axes=2) * np.exp(-2.0 * log_ls)
        grad[:d] += 1.0 + (log_ls - loc) / scale**2
        # dK/dt = e^t I; the prior is on log(noise) = log(1e-4 + e^t)
        grad[d] = math.exp(t) * (0.5 * np.trace(W) + (5.0 + log_noise) / noise)
        grad[d + 1] = -alpha.sum()
        return float(value), grad

    return value_and_grad
