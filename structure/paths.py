"""Posterior sample paths of a node GP, evaluated in a few tensor operations.

`botorch.sampling.pathwise.draw_matheron_paths` draws a GP's posterior sample paths (Matheron's
rule: a random-Fourier-feature prior path plus a kernel update path) as a tree of modules,
transforms and linear operators. Evaluating that tree costs far more in Python and autograd
bookkeeping than in arithmetic at the network's sizes (a few dozen training points, 64 paths,
256 features), and the acquisition optimization evaluates every node's paths hundreds of times
per proposal. `FastPaths` reads the drawn tensors out of the tree once and evaluates the same
function,

    path_s(x) = mu + sd * (c + sqrt(2 / F) [sin(W u), cos(W u)] w_s + k(u, U) v_s),
    u = (x - offset) / coefficient / lengthscale,

for `SingleTaskGP`'s default model (RBF kernel, constant or linear mean ``c``, `Normalize` and
`Standardize` transforms). `fast_paths` checks the result against the drawn tree on the training inputs and
returns None (the tree is then used) for any other model or on a mismatch.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
from gpytorch.kernels import RBFKernel
from gpytorch.means import ConstantMean, LinearMean
from torch import Tensor

__all__ = ["FastPaths", "fast_paths"]

_log = logging.getLogger(__name__)


class FastPaths(torch.nn.Module):
    """``S`` posterior sample paths of one RBF GP (see the module docstring).

    Args:
        offset, coefficient: The input normalization (``c``-dim each).
        lengthscale: The kernel's lengthscales (``c``-dim).
        frequencies: ``F/2 x c`` random Fourier frequencies.
        prior_weight: ``S x F`` prior path weights.
        constant: The GP's constant mean.
        points: ``n x c`` normalized training inputs.
        update_weight: ``S x n`` update path weights.
        mean, sd: The outcome standardization.
        mean_weights: ``c``-dim weights of a linear mean of the normalized inputs (the
            constant is then its bias); None for a constant mean.
    """

    # buffers (registered in __init__), declared for type checkers
    mean_weights: Tensor
    offset: Tensor
    coefficient: Tensor
    lengthscale: Tensor
    frequencies: Tensor
    prior_weight: Tensor
    points: Tensor
    points_sq: Tensor
    update_weight: Tensor

    def __init__(
        self,
        offset: Tensor,
        coefficient: Tensor,
        lengthscale: Tensor,
        frequencies: Tensor,
        prior_weight: Tensor,
        constant: float,
        points: Tensor,
        update_weight: Tensor,
        mean: float,
        sd: float,
        mean_weights: Tensor | None = None,
    ) -> None:
        super().__init__()
        if mean_weights is None:
            mean_weights = torch.zeros_like(offset.reshape(-1))
        self.register_buffer("mean_weights", sd * mean_weights.detach().reshape(-1))
        self.register_buffer("offset", offset.detach().reshape(-1))
        self.register_buffer("coefficient", coefficient.detach().reshape(-1))
        self.register_buffer("lengthscale", lengthscale.detach().reshape(-1))
        self.register_buffer("frequencies", frequencies.detach())
        feature_scale = math.sqrt(2.0 / prior_weight.shape[-1])
        self.register_buffer("prior_weight", feature_scale * sd * prior_weight.detach())
        self.register_buffer("points", (points / lengthscale.reshape(1, -1)).detach())
        self.register_buffer("points_sq", self.points.pow(2).sum(-1))
        self.register_buffer("update_weight", sd * update_weight.detach())
        self.shift = mean + sd * constant

    def forward(self, X: Tensor) -> Tensor:
        """Path values: ``... x S x q x c`` -> ``... x S x q``."""
        z = (X - self.offset) / self.coefficient
        u = z / self.lengthscale
        proj = u @ self.frequencies.T  # ... x S x q x F/2
        half = self.frequencies.shape[0]
        w = self.prior_weight.unsqueeze(-2)  # S x 1 x F
        prior = (proj.sin() * w[..., :half]).sum(-1) + (proj.cos() * w[..., half:]).sum(-1)
        sq = u.pow(2).sum(-1, keepdim=True) - 2.0 * u @ self.points.T + self.points_sq
        sq = sq.clamp_min(0.0)  # ... x S x q x n
        update = (torch.exp(-0.5 * sq) * self.update_weight.unsqueeze(-2)).sum(-1)
        return self.shift + z @ self.mean_weights + prior + update


def fast_paths(gp: Any, path: Any, check: Tensor) -> FastPaths | None:
    """`FastPaths` equal to BoTorch's drawn Matheron `path` of `gp`, or None.

    Args:
        gp: The fitted `SingleTaskGP` (eval mode).
        path: `draw_matheron_paths(gp, sample_shape=[S], ...)`.
        check: ``m x c`` inputs on which both must agree (e.g. the training inputs).
    """
    try:
        prior, update = path.paths["prior_paths"], path.paths["update_paths"]
        kernel, mean_module = gp.covar_module, gp.mean_module
        if isinstance(mean_module, ConstantMean):
            constant, weights = mean_module.constant, None
        elif isinstance(mean_module, LinearMean) and mean_module.bias is not None:
            constant, weights = mean_module.bias, mean_module.weights
        else:
            return None
        if not isinstance(kernel, RBFKernel):
            return None
        if kernel.active_dims is not None or prior.weight.dim() != 2:
            return None
        transform, outcome = gp.input_transform, gp.outcome_transform
        fast = FastPaths(
            offset=transform.offset,
            coefficient=transform.coefficient,
            lengthscale=kernel.lengthscale,
            frequencies=prior.feature_map.weight,
            prior_weight=prior.weight,
            constant=float(constant),
            points=update.feature_map.points,
            update_weight=update.weight,
            mean=float(outcome.means.reshape(-1)[0]),
            sd=float(outcome.stdvs.reshape(-1)[0]),
            mean_weights=weights,
        ).to(check)
        S = prior.weight.shape[0]
        X = check.unsqueeze(0).expand(S, *check.shape)
        with torch.no_grad():
            want, got = path(X), fast(X)
        if not torch.allclose(got, want, rtol=1e-6, atol=1e-8 * (1.0 + float(want.abs().max()))):
            _log.warning("fast sample paths differ from BoTorch's; using BoTorch's")
            return None
        return fast
    except (AttributeError, KeyError, RuntimeError, TypeError) as err:
        _log.debug("no fast sample paths (%s)", err)
        return None
