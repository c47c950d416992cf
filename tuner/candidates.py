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

__all__ = ["KeySet", "best_candidate", "candidate_pool", "starting_points"]

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
    acqf: AcquisitionFunction, space: Space, options: TunerOptions, seed: int
) -> Tensor:
    """Pick ``num_restarts`` valid starting points (``num_restarts x 1 x d``-dim Tensor) among
    ``raw_samples`` points of the space's scrambled Sobol sequence.

    Args:
        acqf: Acquisition function to maximize.
        space: The search space.
        options: Sample sizes.
        seed: Seed of the Sobol sample.
    """
    X = space.sample_unit(options.raw_samples, seed)
    values = evaluate(acqf, X)
    n = min(options.num_restarts, X.shape[0])
    if n == X.shape[0]:
        return X.unsqueeze(-2)
    ics, _ = initialize_q_batch(X.unsqueeze(-2), values, n)
    best = X[values.argmax()].reshape(1, 1, -1)
    if not any(torch.equal(best[0], row) for row in ics):
        ics = torch.cat([best, ics[:-1]])
    return ics


def candidate_pool(
    acqf: AcquisitionFunction, space: Space, ics: Tensor, options: TunerOptions
) -> Tensor:
    """The points `acqf`'s optimizer reaches from ``ics``, snapped onto valid points, and the
    starting points themselves (``p x d``).

    Args:
        acqf: Acquisition function to maximize (already aware of pending points).
        space: The search space.
        ics: ``r x 1 x d``-dim Tensor of valid starting points.
        options: The optimizer's iteration cap.
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
    return torch.cat([space.project(X), ics.reshape(-1, space.dim)])


def best_candidate(
    pool: Tensor,
    rank: AcquisitionFunction,
    taken: KeySet,
    veto: tuple[AcquisitionFunction, float] | None = None,
) -> Tensor | None:
    """The point of ``pool`` that ``rank`` rates best and that is not in ``taken``; `None` when
    all are taken.

    Args:
        pool: ``p x d``-dim Tensor of valid points (`candidate_pool`).
        rank: Acquisition function that orders the pool.
        taken: Points that must not be proposed again (trials and this batch).
        veto: ``(acqf, margin)``: points whose ``acqf`` value (a log-acquisition) is more than
            ``margin`` below the pool's best under it come after every other point
            (`tuner.Surrogate.veto`).
    """
    values = evaluate(rank, pool)
    order = torch.argsort(values, descending=True, stable=True)
    if veto is not None:
        guard = evaluate(veto[0], pool)
        vetoed = (guard < guard.max() - veto[1])[order]
        order = torch.cat([order[~vetoed], order[vetoed]])
    for i in order.tolist():
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
