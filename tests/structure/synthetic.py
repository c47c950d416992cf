"""Seeded synthetic trials tables shared by the structure tests."""

from __future__ import annotations

import math

import numpy as np
import torch

from spaces import Float, Space
from structure import Edge, Structure
from tuner import TrainingData, run_metric


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


def runs_data(n: int, seed: int, runs: int = 8, noise: float = 0.1) -> TrainingData:
    """`n` trials of `runs` runs each (two groups, ``w0`` and ``w1``, of different levels), d=6:
    each run's metric ``m = mean(x) + noise e`` drives its objective ``o = sin(12 m)`` (plus the
    group's level); the trials report the means, and every run's ``m`` and ``o`` as
    ``m@w<g>/<i>`` and ``o@w<g>/<i>``. Within a trial the runs differ only through ``m``."""
    rng = np.random.default_rng(seed)
    d = 6
    space = Space({f"x{i}": Float(0.0, 1.0) for i in range(d)})
    X = rng.random((n, d))
    metrics: dict[str, torch.Tensor] = {}
    ms, os = [], []
    for r in range(runs):
        label, level = f"w{r % 2}/{r // 2}", 2.0 * (r % 2)
        m = X.mean(1) + noise * rng.standard_normal(n)
        o = np.sin(12 * m) + 0.05 * rng.standard_normal(n) + level
        metrics[run_metric("m", label)] = torch.as_tensor(m + level)
        metrics[run_metric("o", label)] = torch.as_tensor(o)
        ms.append(m + level)
        os.append(o)
    metrics["m"] = torch.as_tensor(np.mean(ms, 0))
    Y = torch.as_tensor(np.mean(os, 0)).unsqueeze(-1)
    return TrainingData(
        torch.as_tensor(X), Y, ["o"], metrics, space, seed, 1, directions=("maximize",)
    )
