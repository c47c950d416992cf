"""Seeded synthetic trials tables shared by the structure tests."""

from __future__ import annotations

import math

import numpy as np
import torch

from spaces import Float, Space
from structure import Edge, Structure
from tuner import TrainingData


def chain_table(n: int = 60, seed: int = 0, nuisance: int = 5) -> dict[str, dict[str, np.ndarray]]:
    """x0, x1 -> m1 -> m2 -> o (x2 -> m2, x3 irrelevant) plus independent nuisance metrics."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 4))
    m1 = X[:, 0] + X[:, 1] + 0.15 * rng.standard_normal(n)
    m2 = np.exp(m1) + 4.0 * X[:, 2] + 0.15 * rng.standard_normal(n)
    o = -m2 + 0.15 * rng.standard_normal(n)
    metrics = {"m1": m1, "m2": m2}
    metrics.update({f"noise{i}": rng.standard_normal(n) for i in range(nuisance)})
    return {
        "params": {f"x{i}": X[:, i : i + 1] for i in range(4)},
        "metrics": metrics,
        "objectives": {"o": o},
    }


def sum_sine_data(n: int, seed: int, structured: bool = True) -> TrainingData:
    """d=6; metric ``m = mean(x)``; objective ``sin(12 m)`` (structured: easy through ``m``, hard
    in 6-D) or a Branin-like function of x0, x1 with ``m`` pure noise (unstructured)."""
    gen = torch.Generator().manual_seed(seed)
    d = 6
    space = Space({f"x{i}": Float(0.0, 1.0) for i in range(d)})
    X = torch.rand(n, d, generator=gen, dtype=torch.float64)
    if structured:
        m = X.mean(-1)
        y = torch.sin(12.0 * m)
    else:
        m = torch.randn(n, generator=gen, dtype=torch.float64)
        a, b = 15 * X[:, 0] - 5, 15 * X[:, 1]
        y = -((b - 5.1 / (4 * math.pi**2) * a**2 + 5 / math.pi * a - 6) ** 2) / 50.0
    return TrainingData(X, y.unsqueeze(-1), ["o"], {"m": m}, space, seed, 1)


def sum_sine_structure() -> Structure:
    """The true DAG of `sum_sine_data(structured=True)`."""
    params = tuple(f"x{i}" for i in range(6))
    edges = tuple(Edge(p, "m") for p in params) + (Edge("m", "o"),)
    return Structure(params, ("m",), ("o",), edges)
