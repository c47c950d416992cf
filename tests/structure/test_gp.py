from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from botorch.models import SingleTaskGP

from structure.gp import kernel, loo_log_density, map_hyperparameters, map_objective, sq_dists


def _toy(n: int = 12, d: int = 2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    y = np.sin(4 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.standard_normal(n)
    return X, (y - y.mean()) / y.std(ddof=1)


def test_loo_log_density_equals_conditioning_on_the_other_points() -> None:
    X, y = _toy()
    total, means, lengthscales = loo_log_density(X, y, fit_maxiter=60)
    theta = map_hyperparameters(X, y, 60)
    K = kernel(sq_dists(X), theta)  # signal + noise
    mean = float(theta[-1])
    expect = 0.0
    for i in range(len(y)):
        rest = [j for j in range(len(y)) if j != i]
        w = np.linalg.solve(K[np.ix_(rest, rest)], K[rest, i])
        m = mean + w @ (y[rest] - mean)
        v = K[i, i] - w @ K[rest, i]
        assert means[i] == pytest.approx(m, abs=1e-8)
        expect += -0.5 * (math.log(2 * math.pi * v) + (y[i] - m) ** 2 / v)
    assert total == pytest.approx(expect, rel=1e-8)
    np.testing.assert_allclose(lengthscales, np.exp(theta[:2]))


def test_hyperparameters_are_botorchs_map_estimate() -> None:
    from botorch.fit import fit_gpytorch_mll
    from gpytorch.mlls import ExactMarginalLogLikelihood

    X, y = _toy(n=30, d=3, seed=1)
    theta = map_hyperparameters(X, y, 200)
    gp = SingleTaskGP(torch.as_tensor(X), torch.as_tensor(y).unsqueeze(-1), outcome_transform=None)
    fit_gpytorch_mll(ExactMarginalLogLikelihood(gp.likelihood, gp))
    np.testing.assert_allclose(
        np.exp(theta[:3]), gp.covar_module.lengthscale.detach().reshape(-1), rtol=0.05
    )
    assert 1e-4 + math.exp(theta[3]) == pytest.approx(float(gp.likelihood.noise), rel=0.1)


def testmap_objective_gradient_matches_finite_differences() -> None:
    from scipy.optimize import approx_fprime

    X, y = _toy(n=15, d=3, seed=3)
    objective = map_objective(X, y)
    rng = np.random.default_rng(0)
    for theta in (np.r_[-1.2, -1.2, -1.2, -5.0, 0.0], rng.normal(0.0, 1.0, 5)):
        _, grad = objective(theta)
        numeric = approx_fprime(theta, lambda t: objective(t)[0], 1e-6)
        np.testing.assert_allclose(grad, numeric, rtol=1e-4, atol=1e-3)
