"""Invariants of the Pareto utilities, hypervolume checked against BoTorch and brute force."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from botorch.utils.multi_objective.hypervolume import Hypervolume

from rewrite.optimize.pareto import (
    alpha_dominated,
    crowding_distance,
    dominates,
    hypervolume,
    non_dominated,
    non_dominated_rank,
    truncate_by_crowding,
)


def _botorch_hv(Y: np.ndarray, ref: np.ndarray) -> float:
    hv = Hypervolume(ref_point=-torch.as_tensor(ref))
    inside = Y[np.all(ref > Y, axis=1)]
    if inside.shape[0] == 0:
        return 0.0
    return float(hv.compute(-torch.as_tensor(inside)))


def test_dominates() -> None:
    assert dominates(np.array([1.0, 2.0]), np.array([1.0, 3.0]))
    assert not dominates(np.array([1.0, 2.0]), np.array([1.0, 2.0]))
    assert not dominates(np.array([0.0, 3.0]), np.array([1.0, 2.0]))


@pytest.mark.parametrize("seed", range(5))
def test_non_dominated_and_ranks(seed: int) -> None:
    rng = np.random.default_rng(seed)
    Y = rng.random((40, 3))
    mask = non_dominated(Y)
    front = Y[mask]
    for i, y in enumerate(Y):  # nothing dominates a front point; every other point is dominated
        dominated = any(dominates(f, y) for f in Y)
        assert dominated != mask[i]
    assert front.shape[0] >= 1
    rank = non_dominated_rank(Y)
    assert np.array_equal(rank == 0, mask)
    for i in range(len(Y)):
        for j in range(len(Y)):
            if dominates(Y[i], Y[j]):
                assert rank[i] < rank[j]


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("seed", range(3))
def test_hypervolume_matches_botorch(k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    Y = rng.random((25, k))
    ref = np.full(k, 1.1)
    assert hypervolume(Y, ref) == pytest.approx(_botorch_hv(Y, ref), rel=1e-9)


def test_hypervolume_hand_values_and_monotone() -> None:
    ref = np.array([2.0, 2.0])
    assert hypervolume(np.array([[1.0, 1.0]]), ref) == pytest.approx(1.0)
    assert hypervolume(np.array([[0.0, 1.0], [1.0, 0.0]]), ref) == pytest.approx(3.0)
    assert hypervolume(np.array([[3.0, 0.0]]), ref) == 0.0
    rng = np.random.default_rng(7)
    pts = rng.random((30, 3))
    ref3 = np.full(3, 1.1)
    hv = [hypervolume(pts[: i + 1], ref3) for i in range(len(pts))]
    assert all(b >= a - 1e-12 for a, b in zip(hv, hv[1:]))


def test_crowding_and_truncation() -> None:
    Y = np.array([[0.0, 4.0], [1.0, 3.0], [1.1, 2.9], [3.0, 1.0], [4.0, 0.0]])
    d = crowding_distance(Y)
    assert np.isinf(d[0]) and np.isinf(d[4])
    keep = truncate_by_crowding(Y, 4)
    assert len(keep) == 4 and 0 in keep and 4 in keep
    assert not (1 in keep and 2 in keep)  # one of the crowded pair goes


def test_alpha_dominated() -> None:
    F = np.array([[1.0, 1.0]])
    assert alpha_dominated(np.array([1.0, 1.0]), F, 1.0)
    assert not alpha_dominated(np.array([1.04, 1.2]), F, 1.05)
    assert alpha_dominated(np.array([1.06, 1.2]), F, 1.05)
    assert not alpha_dominated(np.array([0.5, 9.0]), F, 1.05)
    assert not alpha_dominated(np.array([1.0, 1.0]), np.zeros((0, 2)), 1.0)
