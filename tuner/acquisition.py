"""Acquisition functions: reference point rule and qLogNEHVI / qLogNEI construction.

Pure functions of their inputs; the caller fixes torch's seed.

BoTorch's qLogNEHVI (0.18) compiles a fused C++ kernel with ``-march=native`` the first time one
is built in a process, under a lock file in torch's extension cache. The tuner's proposals run
inside `no_fused_kernel`, which keeps that kernel neither compiled nor used for the duration of
the block only: a process killed while compiling, as a study's worker may be, leaves the lock
behind and every later process waits on it forever (seen here: a test run and a CI run hung in
torch's ``FileBaton.wait``); the first proposal of a fresh machine would also wait for a
compiler, and results would depend on having one. The Python path gives the same acquisition
values (equal to the last bit on 32 candidates) and gradients within 7e-14. Importing this module
changes no BoTorch state.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from botorch.acquisition import AcquisitionFunction
from botorch.acquisition.logei import qLogNoisyExpectedImprovement
from botorch.acquisition.multi_objective import logei as _logei
from botorch.acquisition.multi_objective.logei import qLogNoisyExpectedHypervolumeImprovement
from botorch.acquisition.multi_objective.objective import IdentityMCMultiOutputObjective
from botorch.acquisition.objective import GenericMCObjective
from botorch.models.gpytorch import GPyTorchModel
from botorch.models.model import Model
from botorch.sampling import SobolQMCNormalSampler
from botorch.utils.multi_objective.hypervolume import infer_reference_point
from botorch.utils.multi_objective.pareto import is_non_dominated
from torch import Tensor

from tuner.errors import InvalidSpecError
from tuner.problem import Problem
from tuner.trial import Trial

__all__ = [
    "build_acquisition",
    "check_reference_point",
    "infer_reference",
    "no_fused_kernel",
    "pareto_mask",
]


_kernel_lock = threading.Lock()
_kernel_users = 0  # blocks inside `no_fused_kernel`, in every thread
_kernel_saved: tuple[Any, Any] = (None, False)  # BoTorch's (_C, _load_attempted) before the first


@contextlib.contextmanager
def no_fused_kernel() -> Iterator[None]:
    """Run BoTorch's qLogNEHVI on its pure-Python path inside the block (see the module docstring).

    On entry BoTorch's fused-kernel loader is marked as already tried, with no kernel loaded
    (``logei._load_attempted = True``, ``logei._C = None``), so acquisition functions built and
    evaluated in the block neither compile nor call it. The previous values are restored when
    the last of the blocks open in this process (nested or in other threads) exits. Other BoTorch
    users in the process see the same state while a block is open. A no-op on a BoTorch without
    the fused kernel.
    """
    global _kernel_users, _kernel_saved
    if not hasattr(_logei, "_load_attempted"):
        yield
        return
    with _kernel_lock:
        if _kernel_users == 0:
            _kernel_saved = (_logei._C, _logei._load_attempted)
            _logei._C, _logei._load_attempted = None, True
        _kernel_users += 1
    try:
        yield
    finally:
        with _kernel_lock:
            _kernel_users -= 1
            if _kernel_users == 0:
                _logei._C, _logei._load_attempted = _kernel_saved


def check_reference_point(
    problem: Problem, reference_point: Mapping[str, float] | None
) -> dict[str, float] | None:
    """Validate a user reference point given in the objectives' own units and directions.

    Raises:
        InvalidSpecError: Unless it names exactly the objectives with finite numbers.
    """
    if reference_point is None:
        return None
    if not isinstance(reference_point, Mapping) or set(reference_point) != set(problem.objectives):
        raise InvalidSpecError(
            f"reference_point must be a dict with exactly the objectives "
            f"{list(problem.objectives)}, e.g. the worst acceptable value of each; got "
            f"{reference_point!r}."
        )
    out: dict[str, float] = {}
    for k in problem.objectives:
        v = reference_point[k]
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise InvalidSpecError(f"reference_point[{k!r}] must be a finite number, got {v!r}.")
        out[k] = float(v)
    return out


def pareto_mask(Y: Tensor) -> Tensor:
    """``n``-dim bool Tensor: which rows of an ``n x m`` (maximized) Tensor are non-dominated."""
    if Y.shape[0] == 0:
        return torch.zeros(0, dtype=torch.bool)
    return is_non_dominated(Y, deduplicate=False)


def infer_reference(
    problem: Problem,
    completed: Sequence[Trial],
    reference_point: Mapping[str, float] | None,
    scale: float,
    predicted: Tensor | None = None,
) -> Tensor:
    """The reference point in maximization convention (``n_objectives``-dim float64 Tensor).

    Rule: a user reference point wins (minimized objectives are negated). Otherwise take the
    completed trials' outcome vectors (the model's posterior means at their inputs when
    ``predicted`` is given, as Ax does, else the observed values), keep the feasible ones (all
    when none is feasible), take their Pareto front and set ``nadir - scale * (ideal - nadir)`` per
    objective (BoTorch's `infer_reference_point`; a single Pareto point ``y`` gives
    ``y - scale * |y|``). The rule is re-applied at every proposal, on the data seen so far.

    Args:
        problem: Objectives and constraints.
        completed: The COMPLETE trials.
        reference_point: The user's reference point in objective units, or `None`.
        scale: How far behind the nadir the point is set, relative to the front's range.
        predicted: ``n x m``-dim Tensor of modeled outcomes of ``completed`` (model units:
            maximized objectives, then constraint metrics), or `None`.
    """
    signs = torch.tensor(
        [1.0 if d == "maximize" else -1.0 for d in problem.objectives.values()],
        dtype=torch.float64,
    )
    if reference_point is not None:
        raw = torch.tensor([reference_point[k] for k in problem.objectives], dtype=torch.float64)
        return raw * signs
    if predicted is None:
        predicted = torch.tensor([problem.outcomes(t) for t in completed], dtype=torch.float64)
    feasible = torch.ones(predicted.shape[0], dtype=torch.bool)
    for c in problem.constraint_callables():
        feasible &= c(predicted) <= 0
    Y = predicted[feasible] if bool(feasible.any()) else predicted
    Y = Y[:, : problem.n_objectives]
    return infer_reference_point(Y[pareto_mask(Y)], scale=scale)


def build_acquisition(
    model: Model,
    problem: Problem,
    X_baseline: Tensor,
    X_pending: Tensor | None,
    ref_point: Tensor,
    mc_samples: int,
    seed: int,
) -> AcquisitionFunction:
    """qLogNEHVI for several objectives, qLogNEI for one; outcome constraints included.

    Args:
        model: Fitted model with the problem's outcomes as outputs.
        problem: Objectives and constraints.
        X_baseline: ``n x d``-dim Tensor of completed trials' inputs.
        X_pending: ``p x d``-dim Tensor of inputs being evaluated (or failed), or `None`.
        ref_point: ``n_objectives``-dim reference point (maximization convention).
        mc_samples: Number of quasi-MC samples.
        seed: Seed of the quasi-MC sampler.

    Returns:
        An acquisition function to maximize over ``b x q x d`` inputs.
    """
    sampler = SobolQMCNormalSampler(sample_shape=torch.Size([mc_samples]), seed=seed)
    constraints = problem.constraint_callables() or None
    if X_pending is not None and X_pending.shape[0] == 0:
        X_pending = None
    if problem.n_objectives == 1:
        return qLogNoisyExpectedImprovement(
            model=model,
            X_baseline=X_baseline,
            sampler=sampler,
            objective=GenericMCObjective(_first_output),
            constraints=constraints,
            X_pending=X_pending,
            prune_baseline=True,
            cache_root=isinstance(model, GPyTorchModel),
        )
    return qLogNoisyExpectedHypervolumeImprovement(
        model=model,
        ref_point=ref_point,
        X_baseline=X_baseline,
        sampler=sampler,
        objective=IdentityMCMultiOutputObjective(outcomes=list(range(problem.n_objectives))),
        constraints=constraints,
        X_pending=X_pending,
        prune_baseline=True,
        cache_root=isinstance(model, GPyTorchModel),
    )


def _first_output(Z: Tensor, X: Tensor | None = None) -> Tensor:
    return Z[..., 0]
