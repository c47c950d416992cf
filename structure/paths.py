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
`Standardize` transforms); `FastPaths.shared` evaluates all ``S`` paths at inputs they share
(a node reading parameters alone) with the features computed once. `fast_paths` checks the
result against the drawn tree on given inputs (a few training inputs) and returns None (the
tree is then used) for any other model or on a mismatch.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
from gpytorch.kernels import RBFKernel
from gpytorch.means import ConstantMean, LinearMean
from torch import Tensor

__all__ = ["FastPaths", "fast_paths", "rbf_kernel"]

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
    offset: Tensor
    inv_scale: Tensor
    mean_u: Tensor
    frequencies: Tensor
    w_sin: Tensor
    w_cos: Tensor
    points: Tensor
    points_sq: Tensor
    w_update: Tensor

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
        lengthscale = lengthscale.detach().reshape(-1)
        if mean_weights is None:
            mean_weights = torch.zeros_like(lengthscale)
        # Everything in the scaled inputs u = (x - offset) / (coefficient * lengthscale), and
        # every per-path weighted sum as a matrix product with an ``S x k x 1`` weight.
        self.register_buffer("offset", offset.detach().reshape(-1))
        self.register_buffer("inv_scale", 1.0 / (coefficient.detach().reshape(-1) * lengthscale))
        self.register_buffer("mean_u", sd * lengthscale * mean_weights.detach().reshape(-1))
        self.register_buffer("frequencies", frequencies.detach())
        half = frequencies.shape[0]
        prior = math.sqrt(2.0 / prior_weight.shape[-1]) * sd * prior_weight.detach()
        self.register_buffer("w_sin", prior[:, :half].unsqueeze(-1).contiguous())
        self.register_buffer("w_cos", prior[:, half:].unsqueeze(-1).contiguous())
        self.register_buffer("points", (points / lengthscale.reshape(1, -1)).detach())
        self.register_buffer("points_sq", self.points.pow(2).sum(-1))
        self.register_buffer("w_update", sd * update_weight.detach().unsqueeze(-1))
        self.shift = mean + sd * constant

    def forward(self, X: Tensor) -> Tensor:
        """Path values: ``... x S x q x c`` -> ``... x S x q``."""
        u = (X - self.offset) * self.inv_scale
        buffers = (self.frequencies, self.w_sin, self.w_cos, self.points, self.points_sq)
        return self.shift + _PathValues.apply(u, *buffers, self.w_update, self.mean_u)

    def shared(self, X: Tensor) -> Tensor:
        """Path values at inputs that every path shares: ``... x q x c`` -> ``... x S x q``.

        The same values as `forward` on ``X`` repeated ``S`` times, but the features are
        computed once and only the weights differ per path: for a node that reads parameters
        alone this is ``S`` times less of the sines, cosines and kernel terms that dominate an
        acquisition function's evaluation."""
        u = (X - self.offset) * self.inv_scale
        proj = u @ self.frequencies.T  # ... x q x F/2
        paths = (
            proj.sin() @ self.w_sin.squeeze(-1).T
            + proj.cos() @ self.w_cos.squeeze(-1).T
            + rbf_kernel(u, self.points, self.points_sq) @ self.w_update.squeeze(-1).T
        )  # ... x q x S
        return (self.shift + paths + (u @ self.mean_u).unsqueeze(-1)).transpose(-1, -2)


def rbf_kernel(u: Tensor, points: Tensor, points_sq: Tensor) -> Tensor:
    """``k(u, U)`` of the scaled inputs and training points: ``... x q x c`` -> ``... x q x n``."""
    sq = u.pow(2).sum(-1, keepdim=True) - 2.0 * u @ points.T + points_sq
    return torch.exp(-0.5 * sq.clamp_min(0.0))


class _PathValues(torch.autograd.Function):
    """`FastPaths.forward` less its shift, as a function of the scaled inputs ``u`` with its
    gradient written out: an acquisition function's optimizer differentiates every node of the
    network hundreds of times per proposal, at sizes where recording and replaying a dozen
    autograd nodes per call cost more than the arithmetic. Gradients flow to ``u`` only."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        u: Tensor,
        frequencies: Tensor,
        w_sin: Tensor,
        w_cos: Tensor,
        points: Tensor,
        points_sq: Tensor,
        w_update: Tensor,
        mean_u: Tensor,
    ) -> Tensor:
        proj = u @ frequencies.T  # ... x S x q x F/2
        sin, cos = proj.sin(), proj.cos()
        k = rbf_kernel(u, points, points_sq)  # ... x S x q x n
        values = (sin @ w_sin + cos @ w_cos + k @ w_update).squeeze(-1) + u @ mean_u
        if ctx.needs_input_grad[0]:  # else the large intermediates are freed at once
            saved = (u, sin, cos, k, frequencies, w_sin, w_cos, points, w_update, mean_u)
            ctx.save_for_backward(*saved)
        return values

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        u, sin, cos, k, frequencies, w_sin, w_cos, points, w_update, mean_u = ctx.saved_tensors
        g = grad.unsqueeze(-1)  # ... x S x q x 1
        # d/du of sin(u F^T) a + cos(u F^T) b: (cos * a - sin * b) F, per path's weights a, b
        trig = cos * w_sin.transpose(-1, -2) - sin * w_cos.transpose(-1, -2)
        out = (g * trig) @ frequencies
        # d/du of sum_j k_j v_j, k_j = exp(-|u - P_j|^2 / 2): sum_j k_j v_j (P_j - u)
        kv = g * k * w_update.transpose(-1, -2)  # ... x S x q x n
        out = out + kv @ points - u * kv.sum(-1, keepdim=True) + g * mean_u
        return (out, *([None] * 7))


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
