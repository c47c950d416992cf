"""The node GPs of a GP network (`structure.network`): which columns and parent nodes each
node reads (`_NodeSpec`, `_node_specs`, `_node_inputs`), what its GP is trained on (the node's
values, or a formula's residual: `_target`), and the GP itself: a `SingleTaskGP` with fixed
normalization bounds whose hyper-parameters are BoTorch's MAP estimate, solved in numpy by
`structure.gp.map_hyperparameters` (`_fit_gp`), and the same fitted GP conditioned on other
trials in plain tensor algebra for pointwise prediction (`_ExactGP`). The network composes these
nodes through the DAG; everything here concerns one node at a time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.transforms.input import Normalize
from botorch.models.transforms.outcome import Standardize
from gpytorch.means import LinearMean
from gpytorch.mlls import ExactMarginalLogLikelihood
from torch import Tensor

from structure.dag import Structure, to_raw
from structure.errors import StructureError
from structure.gp import MIN_LENGTHSCALE, MIN_NOISE, map_hyperparameters
from structure.paths import rbf_kernel

_DEFAULT_MAXITER = 15000  # `fit_gpytorch_mll`'s L-BFGS-B default


@dataclass(frozen=True)
class _NodeSpec:
    name: str
    columns: list[int]  # columns of X read by the node's GP
    parents: list[str]  # parent nodes whose values the GP (or formula) reads
    sources: list[str]  # the parameter node of each of `columns`


def _node_inputs(
    structure: Structure, spec: _NodeSpec, X: Tensor, values: Mapping[str, Tensor]
) -> Tensor:
    """What a node's GP reads, at training or sampled inputs (``... x d`` with parent values
    ``...``): its parameter columns, then (no formula) its parents."""
    columns = [X[..., spec.columns]]
    if structure.formula_for(spec.name) is None:
        columns += [values[p].unsqueeze(-1) for p in spec.parents]
    return torch.cat(columns, dim=-1)


def _node_specs(
    structure: Structure, param_columns: Mapping[str, Sequence[int]], outputs: Sequence[str]
) -> list[_NodeSpec]:
    """Specs of the nodes the outputs depend on, in topological order."""
    graph = structure.to_networkx()
    missing = [o for o in outputs if o not in graph]
    if missing:
        raise StructureError(f"Outputs {missing} are not nodes of the structure.")
    needed = set(outputs)
    for o in outputs:
        needed |= {a for a in _ancestors(graph, o)}
    specs = []
    params = set(structure.params)
    for name in structure.topological_order():
        if name not in needed:
            continue
        parents = structure.parents(name)
        formula = structure.formula_for(name)
        if not parents and formula is None:
            raise StructureError(
                f"Node {name!r} has no parents and no formula; it cannot be modelled."
            )
        owner = [(c, p) for p in parents if p in params for c in param_columns[p]]
        if formula is not None and formula.residual and not owner:
            owner = sorted((c, p) for p, cols in param_columns.items() for c in cols)
        columns, sources = [c for c, _ in owner], [p for _, p in owner]
        specs.append(_NodeSpec(name, columns, [p for p in parents if p not in params], sources))
    return specs


def _ancestors(graph: Any, node: str) -> set[str]:
    import networkx as nx

    return set(nx.ancestors(graph, node))


def relevance_shares(structure: Structure, spec: _NodeSpec, gp: Any) -> dict[str, float]:
    """The node GP's ARD relevance per input name (1/lengthscale, a parameter's columns summed)
    as shares of its total, largest first (`GPNetwork.relevance`)."""
    names = list(spec.sources)
    if structure.formula_for(spec.name) is None:
        names += spec.parents  # as `_node_inputs` reads them
    inverse = 1.0 / gp.covar_module.lengthscale.detach().reshape(-1)
    summed: dict[str, float] = {}
    for name, r in zip(names, inverse.tolist(), strict=True):
        summed[name] = summed.get(name, 0.0) + r
    total = sum(summed.values())
    return {n: r / total for n, r in sorted(summed.items(), key=lambda kv: -kv[1])}


def _target(structure: Structure, spec: _NodeSpec, values: Mapping[str, Tensor]) -> Tensor | None:
    """Training target of the node's GP (its values, or the formula residual); None when the
    node is an exact formula."""
    for name in (spec.name, *spec.parents):
        if name not in values:
            raise StructureError(f"Node {name!r} needs observed values to fit the network.")
    formula = structure.formula_for(spec.name)
    if formula is None:
        return values[spec.name]
    if not formula.residual:
        return None
    raw = {n: _raw(structure, n, values[n]) for n in (spec.name, *formula.inputs)}
    return raw[spec.name] - formula.evaluate([raw[i] for i in formula.inputs])


def _raw(structure: Structure, node: str, value: Tensor) -> Tensor:
    return to_raw(structure.transforms.get(node), value)


def _bounds(train_X: Tensor, n_params: int) -> Tensor:
    """Fixed normalization bounds: unit cube for parameters, observed range +-10% for nodes."""
    lo, hi = train_X.min(0).values, train_X.max(0).values
    span = (hi - lo).clamp_min(1e-6)
    lo, hi = lo - 0.1 * span, hi + 0.1 * span
    lo[:n_params], hi[:n_params] = 0.0, 1.0
    return torch.stack([lo, hi])


def _fit_gp(
    train_X: Tensor,
    y: Tensor,
    bounds: Tensor,
    state: Mapping[str, Tensor] | None,
    *,
    fit_options: Mapping[str, Any] | None = None,
    linear_mean: bool = False,
) -> SingleTaskGP:
    """A node's GP on ``train_X`` (``n x k``) and ``y`` (``n``): the hyper-parameters from
    ``state`` where given, else fitted (`fit_options`: the L-BFGS-B options; `linear_mean`: a
    linear mean function of the normalized inputs; `structure.network.NetworkConfig`'s)."""
    gp = SingleTaskGP(
        train_X,
        y.unsqueeze(-1),
        input_transform=Normalize(train_X.shape[-1], bounds=bounds),
        outcome_transform=Standardize(1),
        mean_module=LinearMean(train_X.shape[-1]) if linear_mean else None,
    )
    if state is not None:
        gp.load_state_dict(dict(state), strict=False)
    elif linear_mean:
        mll = ExactMarginalLogLikelihood(gp.likelihood, gp)
        options = {"options": dict(fit_options)} if fit_options else None
        fit_gpytorch_mll(mll, optimizer_kwargs=options)
    else:
        _fit_map(gp, (train_X - bounds[0]) / (bounds[1] - bounds[0]), fit_options)
    gp.eval()
    return gp


def _fit_map(gp: SingleTaskGP, X_unit: Tensor, fit_options: Mapping[str, Any] | None) -> None:
    """Set `gp`'s hyper-parameters to their MAP estimate under its own priors, solved by
    `structure.gp.map_hyperparameters` on the normalized inputs and standardized targets (the
    same problem `fit_gpytorch_mll` solves, at a tenth of the cost for the network's small
    node GPs; measured in benchmarks/README.md, "bench_structure: proposal time")."""
    options = dict(fit_options or {})
    maxiter = int(options.get("maxiter", _DEFAULT_MAXITER))
    X = X_unit.detach().numpy()
    y = gp.train_targets.detach().numpy()
    theta = map_hyperparameters(X, y, maxiter, min_lengthscale=MIN_LENGTHSCALE)
    d = X.shape[1]
    with torch.no_grad():
        gp.covar_module.lengthscale = torch.as_tensor(np.exp(theta[:d])).reshape(1, d)
        gp.likelihood.noise = torch.tensor([MIN_NOISE + math.exp(float(theta[d]))])
        gp.mean_module.constant.fill_(float(theta[d + 1]))


class _ExactGP:
    """A fitted node GP conditioned on other training data ``(train_X, y)``: the predictive
    of a `SingleTaskGP` on them with `gp`'s state loaded (hyper-parameters and input
    normalization; the outcome standardization is the new data's), in plain tensor algebra
    (RBF kernel, constant or linear mean)."""

    def __init__(self, gp: Any, train_X: Tensor, y: Tensor) -> None:
        self.lo = gp.input_transform.offset.detach().reshape(-1)
        self.span = gp.input_transform.coefficient.detach().reshape(-1)
        self.lengthscale = gp.covar_module.lengthscale.detach().reshape(-1)
        self.noise = float(gp.likelihood.noise.detach().reshape(-1)[0])
        mean_module = gp.mean_module
        if isinstance(mean_module, LinearMean):
            self.weights = mean_module.weights.detach().reshape(-1)
            self.constant = float(mean_module.bias.detach().reshape(-1)[0])
        else:
            self.weights = None
            self.constant = float(mean_module.constant.detach().reshape(-1)[0])
        sd = float(y.std()) if y.numel() > 1 else 1.0
        self.y_mean, self.y_sd = float(y.mean()), (sd if sd >= 1e-8 else 1.0)
        self.points = self._unit(train_X)
        self.scaled = self.points / self.lengthscale
        self.scaled_sq = self.scaled.pow(2).sum(-1)
        K = self._kernel(self.points)
        self.L = _cholesky(K + self.noise * torch.eye(K.shape[-1], dtype=K.dtype))
        resid = (y - self.y_mean) / self.y_sd - self._prior_mean(self.points)
        self.alpha = torch.cholesky_solve(resid.unsqueeze(-1), self.L).squeeze(-1)
        self.noise_variance = self.noise * self.y_sd**2

    def _unit(self, X: Tensor) -> Tensor:
        return (X - self.lo) / self.span

    def _kernel(self, U: Tensor) -> Tensor:
        """``k(U, points)`` for normalized inputs ``U``."""
        return rbf_kernel(U / self.lengthscale, self.scaled, self.scaled_sq)

    def _prior_mean(self, U: Tensor) -> Tensor:
        base = torch.full(U.shape[:-1], self.constant, dtype=U.dtype)
        return base if self.weights is None else base + U @ self.weights

    def moments(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """Predictive mean and variance (observation noise included), raw units of the
        node's target, at ``... x c`` inputs: ``...`` each."""
        U = self._unit(X)
        Ks = self._kernel(U.reshape(-1, U.shape[-1]))  # N x n
        mean = self._prior_mean(U).reshape(-1) + Ks @ self.alpha
        v = torch.linalg.solve_triangular(self.L, Ks.T, upper=False)
        var = (1.0 - v.pow(2).sum(0)).clamp_min(0.0) + self.noise
        shape = U.shape[:-1]
        return (
            (mean * self.y_sd + self.y_mean).reshape(shape),
            (var * self.y_sd**2).reshape(shape),
        )


def _cholesky(K: Tensor) -> Tensor:
    """Cholesky factor of `K`, with GPyTorch's remedy when rounding makes it fail: 1e-8 of
    jitter on the diagonal, ten times more on each of three retries."""
    L, info = torch.linalg.cholesky_ex(K)
    jitter = 1e-8
    while int(info) != 0 and jitter <= 1e-6:
        L, info = torch.linalg.cholesky_ex(K + jitter * torch.eye(K.shape[-1], dtype=K.dtype))
        jitter *= 10
    if int(info) != 0:
        raise ValueError("A node GP's kernel matrix is not positive definite.")
    return L
