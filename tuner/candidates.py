"""Candidate generation over a `spaces.Space`: relaxation, projection, de-duplication.

The acquisition function is maximized over the continuous relaxation of the space's unit cube:
integer, ordered-choice and boolean columns are treated as continuous in [0, 1], one-hot groups as
independent [0, 1] columns, and each simplex block is kept on its face by `optimize_acqf`'s linear
equality constraints (SLSQP). Each optimizer result is then snapped onto a valid point with
`Space.project` (rounding, argmax, renormalization) and re-scored by the acquisition function; the
best distinct projected point wins. Starting points are valid points: a scrambled Sobol sample of
the space plus Gaussian perturbations of the best trials, projected; BoTorch's default
hit-and-run initializer (slow for large simplices) is never used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from botorch.acquisition import AcquisitionFunction
from botorch.optim import optimize_acqf
from botorch.optim.initializers import initialize_q_batch
from torch import Tensor

from tuner.options import TunerOptions

if TYPE_CHECKING:
    from spaces import Space

__all__ = ["KeySet", "optimize_candidate", "starting_points"]

_EVAL_CHUNK = 256


class KeySet:
    """Set of unit-cube points compared after rounding to 1e-9 (valid points are exact)."""

    def __init__(self, X: Tensor | None = None) -> None:
        self._keys: set[tuple[float, ...]] = set()
        if X is not None:
            for row in X:
                self.add(row)

    @staticmethod
    def _key(x: Tensor) -> tuple[float, ...]:
        return tuple(round(float(v), 9) for v in x)

    def add(self, x: Tensor) -> None:
        """Add one ``d``-dim point."""
        self._keys.add(self._key(x))

    def __contains__(self, x: object) -> bool:
        return isinstance(x, Tensor) and self._key(x) in self._keys


def evaluate(acqf: AcquisitionFunction, X: Tensor) -> Tensor:
    """Acquisition values of ``n x d`` single points, as an ``n``-dim Tensor (no gradients)."""
    with torch.no_grad():
        parts = [
            acqf(X[i : i + _EVAL_CHUNK].unsqueeze(-2)) for i in range(0, X.shape[0], _EVAL_CHUNK)
        ]
    return torch.cat(parts) if parts else torch.empty(0, dtype=X.dtype)


def starting_points(
    acqf: AcquisitionFunction,
    space: Space,
    anchors: Tensor,
    options: TunerOptions,
    seed: int,
) -> Tensor:
    """Pick ``num_restarts`` valid starting points (``num_restarts x 1 x d``-dim Tensor).

    Args:
        acqf: Acquisition function to maximize.
        space: The search space.
        anchors: ``a x d``-dim Tensor of good valid points to perturb (may be empty).
        options: Sample sizes and perturbation scale.
        seed: Seed of the Sobol sample; torch's global seed drives the rest.
    """
    n_local = int(round(options.raw_samples * options.local_fraction)) if anchors.shape[0] else 0
    X = space.sample_unit(options.raw_samples - n_local, seed)
    if n_local:
        idx = torch.arange(n_local) % anchors.shape[0]
        noise = options.local_scale * torch.randn(n_local, space.dim, dtype=torch.float64)
        local = space.project((anchors[idx] + noise).clamp(0.0, 1.0))
        X = torch.cat([X, local])
    values = evaluate(acqf, X)
    n = min(options.num_restarts, X.shape[0])
    if n == X.shape[0]:
        return X.unsqueeze(-2)
    ics, _ = initialize_q_batch(X.unsqueeze(-2), values, n)
    best = X[values.argmax()].reshape(1, 1, -1)
    if not any(torch.equal(best[0], row) for row in ics):
        ics = torch.cat([best, ics[:-1]])
    return ics


def optimize_candidate(
    acqf: AcquisitionFunction,
    space: Space,
    ics: Tensor,
    taken: KeySet,
    options: TunerOptions,
    rank: AcquisitionFunction | None = None,
) -> Tensor | None:
    """Best valid point not in ``taken``, starting from ``ics``; `None` when all are taken.

    Args:
        acqf: Acquisition function to maximize (already aware of pending points).
        space: The search space.
        ics: ``r x 1 x d``-dim Tensor of valid starting points.
        taken: Points that must not be proposed again (trials and this batch).
        options: The optimizer's iteration cap.
        rank: Acquisition function that picks the best of the optimized points and starting
            points (`tuner.Surrogate.proposer`); default ``acqf``.

    Returns:
        A ``d``-dim Tensor, a valid encoded configuration, or `None`.
    """
    X, _ = optimize_acqf(
        acq_function=acqf,
        bounds=space.bounds,
        q=1,
        num_restarts=ics.shape[0],
        batch_initial_conditions=ics,
        equality_constraints=space.equality_constraints or None,
        inequality_constraints=space.inequality_constraints or None,
        options={"maxiter": options.maxiter},
        return_best_only=False,
        retry_on_optimization_warning=False,
    )
    X = X.reshape(-1, space.dim)
    X = X[torch.isfinite(X).all(dim=-1)]  # a diverged restart: its start point stays in the pool
    pool = torch.cat([space.project(X), ics.reshape(-1, space.dim)])
    values = evaluate(rank if rank is not None else acqf, pool)
    for i in torch.argsort(values, descending=True, stable=True).tolist():
        if pool[i] not in taken:
            return pool[i]
    return None


def fallback_point(space: Space, taken: KeySet, seed: int, tries: int = 1024) -> Tensor | None:
    """A valid Sobol point not in ``taken`` (``d``-dim Tensor), or `None` if none is found."""
    for x in space.sample_unit(tries, seed):
        if x not in taken:
            return x
    return None


def candidates_from(rows: Sequence[Tensor], dim: int) -> Tensor:
    """Stack ``d``-dim rows into an ``n x d``-dim Tensor (empty-safe)."""
    return torch.stack(list(rows)) if rows else torch.empty(0, dim, dtype=torch.float64)
