"""Pareto utilities for minimization: dominance, non-dominated sorting, crowding, hypervolume.

All functions take cost matrices ``Y`` of shape ``n x k`` (``n`` points, ``k`` objectives, lower
is better) as numpy arrays and never modify them.

Hypervolume is exact: a sweep for ``k = 2``, slicing along the last objective for ``k = 3`` (the
frontier of a rewrite search holds tens of points, so ``O(n^2 log n)`` is plenty), and BoTorch's
`botorch.utils.multi_objective.hypervolume.Hypervolume` for ``k >= 4``.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "alpha_dominated",
    "crowding_distance",
    "dominates",
    "hypervolume",
    "non_dominated",
    "non_dominated_rank",
    "truncate_by_crowding",
]


def dominates(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` Pareto-dominates ``b``: no worse everywhere, better somewhere.

    Args:
        a: ``k``-dim cost vector.
        b: ``k``-dim cost vector.
    """
    return bool(np.all(a <= b) and np.any(a < b))


def non_dominated(Y: np.ndarray) -> np.ndarray:
    """Mask of the points no other point dominates (duplicates are all kept).

    Args:
        Y: ``n x k`` cost matrix.

    Returns:
        ``n``-dim bool array.
    """
    Y = np.asarray(Y, dtype=np.float64)
    n = Y.shape[0]
    if n == 0:
        return np.zeros(0, dtype=bool)
    le = np.all(Y[:, None, :] <= Y[None, :, :], axis=2)  # le[i, j]: i <= j everywhere
    lt = np.any(Y[:, None, :] < Y[None, :, :], axis=2)
    dominated_by = le & lt  # [i, j]: i dominates j
    return ~dominated_by.any(axis=0)


def non_dominated_rank(Y: np.ndarray) -> np.ndarray:
    """Non-dominated sorting: rank 0 is the frontier, rank 1 the frontier of the rest, ...

    Args:
        Y: ``n x k`` cost matrix.

    Returns:
        ``n``-dim int array of ranks.
    """
    Y = np.asarray(Y, dtype=np.float64)
    n = Y.shape[0]
    rank = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return rank
    le = np.all(Y[:, None, :] <= Y[None, :, :], axis=2)
    lt = np.any(Y[:, None, :] < Y[None, :, :], axis=2)
    dom = le & lt
    count = dom.sum(axis=0)  # how many points dominate j
    current = np.flatnonzero(count == 0)
    r = 0
    while current.size:
        rank[current] = r
        count = count - dom[current].sum(axis=0)
        count[rank >= 0] = -1
        current = np.flatnonzero(count == 0)
        r += 1
    return rank


def crowding_distance(Y: np.ndarray) -> np.ndarray:
    """NSGA-II crowding distance of each point within ``Y`` (boundary points get ``inf``).

    Args:
        Y: ``n x k`` cost matrix (usually one non-dominated front).

    Returns:
        ``n``-dim float array; larger means more isolated.
    """
    Y = np.asarray(Y, dtype=np.float64)
    n, k = Y.shape
    dist = np.zeros(n)
    if n <= 2:
        return np.full(n, np.inf)
    for j in range(k):
        order = np.argsort(Y[:, j], kind="stable")
        col = Y[order, j]
        span = col[-1] - col[0]
        dist[order[0]] = dist[order[-1]] = np.inf
        if span > 0:
            dist[order[1:-1]] += (col[2:] - col[:-2]) / span
    return dist


def truncate_by_crowding(Y: np.ndarray, size: int) -> np.ndarray:
    """Indices of at most ``size`` points of ``Y``, dropping the most crowded one at a time.

    Args:
        Y: ``n x k`` cost matrix (one front).
        size: How many points to keep, ``>= 1``.

    Returns:
        Sorted int array of kept indices.
    """
    keep = np.arange(np.asarray(Y).shape[0])
    while keep.size > size:
        d = crowding_distance(np.asarray(Y)[keep])
        keep = np.delete(keep, int(np.argmin(d)))
    return keep


def alpha_dominated(y: np.ndarray, F: np.ndarray, alpha: float) -> bool:
    """Whether some frontier point times ``alpha`` is at most ``y`` in every objective.

    This is TASO's relaxation for vectors: with ``alpha = 1`` a child is dropped when a frontier
    point weakly dominates it; with ``alpha > 1`` only children worse by that factor everywhere.

    Args:
        y: ``k``-dim cost vector (non-negative costs).
        F: ``n x k`` frontier costs.
        alpha: Relaxation factor, ``>= 1``.
    """
    F = np.asarray(F, dtype=np.float64)
    if F.size == 0:
        return False
    return bool(np.any(np.all(alpha * F <= np.asarray(y)[None, :], axis=1)))


def hypervolume(Y: np.ndarray, ref: np.ndarray) -> float:
    """Exact volume dominated by ``Y`` and bounded by the reference point ``ref`` (minimization).

    Points not strictly better than ``ref`` in every objective contribute nothing.

    Args:
        Y: ``n x k`` cost matrix, ``1 <= k``.
        ref: ``k``-dim reference point.

    Returns:
        The hypervolume (0.0 when no point is inside the reference box).
    """
    Y = np.asarray(Y, dtype=np.float64).reshape(-1, np.asarray(ref).size)
    ref = np.asarray(ref, dtype=np.float64)
    Y = Y[np.all(ref > Y, axis=1)]
    if Y.shape[0] == 0:
        return 0.0
    Y = np.unique(Y[non_dominated(Y)], axis=0)
    k = Y.shape[1]
    if k == 1:
        return float(ref[0] - Y[:, 0].min())
    if k == 2:
        return _hv2(Y, ref)
    if k == 3:
        return _hv3(Y, ref)
    return _hv_botorch(Y, ref)


def _hv2(Y: np.ndarray, ref: np.ndarray) -> float:
    P = Y[np.argsort(Y[:, 0], kind="stable")]
    total, best_y = 0.0, ref[1]
    for x, y in P:
        if y < best_y:
            total += (ref[0] - x) * (best_y - y)
            best_y = y
    return float(total)


def _hv3(Y: np.ndarray, ref: np.ndarray) -> float:
    P = Y[np.argsort(Y[:, 2], kind="stable")]
    total = 0.0
    for i in range(P.shape[0]):
        upper = P[i + 1, 2] if i + 1 < P.shape[0] else ref[2]
        if upper > P[i, 2]:
            total += _hv2(P[: i + 1, :2], ref[:2]) * (upper - P[i, 2])
    return float(total)


def _hv_botorch(Y: np.ndarray, ref: np.ndarray) -> float:
    import torch
    from botorch.utils.multi_objective.hypervolume import Hypervolume

    hv = Hypervolume(ref_point=-torch.as_tensor(ref, dtype=torch.float64))
    return float(hv.compute(-torch.as_tensor(Y, dtype=torch.float64)))
