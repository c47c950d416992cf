"""RGPE: a ranking-weighted ensemble of per-task GPs (Feurer, Letham & Bakshy, 2018).

The second warm-start model beside `tuner.warmstart.WarmStartSurrogate` (the multi-task GP).
Each related task gets its own GP, fitted once on its trials (`FlatSurrogate`, standardized in
that task's own units, so a task measured on another scale still ranks the same); the target
gets the flat GP on its trials. Per outcome, the ensemble's prediction in the target's
standardized units is ``sum_i w_i z_i`` with covariance ``sum_i w_i^2 S_i``, mapped back to the
target's units. The weights say how often (over posterior samples) each model orders the
target's observed trials best:

* a related task's GP is sampled jointly at the target's inputs; the target's own GP is sampled
  out of sample (the GP conditioned on all trials but ``j`` predicts all of them, for each
  ``j``, with the fitted hyper-parameters), so it cannot win by interpolating its data;
* the ranking loss of a sample is the number of ordered pairs of target trials it misorders;
  each sample's lowest loss wins (ties split evenly), and a model's weight is its share of wins;
* weight dilution: a related task whose median loss exceeds the 95th percentile of the target
  model's loss gets weight 0 (the paper's rule), so a task that orders the target's trials no
  better than chance is dropped once the target's own GP orders them well.

When every related task's weight is 0 the model is the flat GP itself: an unrelated study costs
the fits, nothing else. The ensemble is a plain BoTorch `Model` (its `posterior` is a
`GPyTorchPosterior`), so acquisition functions use it without root caching.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from botorch.models.model import Model
from botorch.models.utils import add_output_dim
from botorch.models.utils.assorted import gpt_posterior_settings
from gpytorch.distributions import MultivariateNormal
from linear_operator import to_linear_operator
from linear_operator.utils.cholesky import psd_safe_cholesky
from torch import Tensor

from tuner.surrogate import CombinedModel, Fitted, FlatSurrogate, Surrogate, TrainingData
from tuner.warmstart import RelatedTask, check_related, described, suggestions, task_model

__all__ = ["MIN_TARGET", "RankWeightedEnsemble", "RGPESurrogate", "rank_weights"]

#: Target trials needed before the weights are computed (the target's out-of-sample model
#: predicts each from the others); below, the flat GP is used.
MIN_TARGET = 2


class RGPESurrogate(Surrogate):
    """A ranking-weighted ensemble of the related tasks' GPs and the target's (module docstring).

    Args:
        related: The related tasks (each encoded in the target's space).
        fit_options: Options for the L-BFGS-B fits (scipy keys such as ``{"maxiter": 50}``).
        n_samples: Posterior samples per model for the ranking losses.
        max_related: Fit each related task's GP on at most this many of its trials (its best by
            the first outcome), bounding the cost of the ensemble's posterior.
        dilution: Apply the weight-dilution rule (module docstring).
        min_target: Target trials from which the weights are computed (>= 2).
        rank: When a task's best configurations are suggested (`tuner.warmstart.suggestions`):
            0, once it earns a weight or its best, tried here, is on the target's front;
            ``k >= 2``, once its GP orders the target's first ``k`` trials as they came out
            (`tuner.warmstart.ranks_alike`).
    """

    def __init__(
        self,
        related: Sequence[RelatedTask],
        fit_options: Mapping[str, Any] | None = None,
        n_samples: int = 256,
        max_related: int = 100,
        dilution: bool = True,
        min_target: int = MIN_TARGET,
        rank: int = 0,
    ) -> None:
        self.min_target = max(int(min_target), 2)
        self.rank = int(rank)
        self.related = [r for r in related if r.X.shape[0] > 0]
        self.fit_options = dict(fit_options or {})
        self.n_samples = int(n_samples)
        self.max_related = int(max_related)
        self.dilution = bool(dilution)
        self._bases: list[Model] | None = None  # the related tasks' GPs, fitted once
        self._fitted: tuple[str, Fitted] | None = None  # the fit of the latest data, by digest

    def check(self, space: Any, outcome_names: Sequence[str], n_objectives: int) -> None:
        """Refuse related tasks whose inputs or outcomes do not match the target's."""
        check_related(self.related, space, outcome_names)

    def informed(self, data: TrainingData) -> bool:
        """Whether a related task earns a weight on ``data`` (the tuner then proposes from the
        ensemble within its initial design; else the design runs, as in a cold study)."""
        return isinstance(self.fit(data).model, RankWeightedEnsemble)

    def suggestions(self, data: TrainingData) -> Tensor | None:
        """The fit's `tuner.Fitted.suggested` (`tuner.warmstart.suggestions`)."""
        return self.fit(data).suggested

    def fit(self, data: TrainingData) -> Fitted:
        """The flat GP, or a `RankWeightedEnsemble` when a related task earns a weight. The fit
        of the latest data is cached by its digest: fitting equal data again returns it. The
        description holds, per model (the related tasks by name, then ``"target"``), its
        weight and median ranking loss per outcome."""
        key = data.digest()
        if self._fitted is None or self._fitted[0] != key:
            self._fitted = (key, self._fit(data))
        return self._fitted[1]

    def _fit(self, data: TrainingData) -> Fitted:
        flat = FlatSurrogate(self.fit_options).fit(data).model
        if data.n < self.min_target or not self.related:
            flat_only: dict[str, Any] = {
                "model": "FlatSurrogate(SingleTaskGP)",
                "n_train": data.n,
                "weights": {},
            }
            suggested, looks = suggestions(self.related, [], data, self.rank, self._base_models)
            return Fitted(flat, description=described(flat_only, looks), suggested=suggested)
        bases = self._base_models(data)
        g = torch.Generator().manual_seed(int(data.seed))
        samples = [_joint_samples(b, data.X, self.n_samples, g) for b in bases]
        losses = torch.stack(
            [_ranking_loss(s, data.Y) for s in samples]
            + [_ranking_loss(_loo_samples(flat, self.n_samples, g), data.Y, out_of_sample=True)]
        )
        weights = rank_weights(losses, dilution=self.dilution)
        names = [r.name for r in self.related] + ["target"]
        description: dict[str, Any] = {
            "model": "RGPESurrogate(ranking-weighted GP ensemble)",
            "n_train": data.n,
            "outcomes": list(data.outcome_names),
            "weights": {n: [round(float(v), 4) for v in w] for n, w in zip(names, weights)},
            "median_loss": {
                n: [float(v) for v in loss.median(dim=0).values] for n, loss in zip(names, losses)
            },
        }
        used = [i for i in range(len(bases)) if bool((weights[i] > 0).any())]
        kept = [self.related[i].name for i in used]
        suggested, looks = suggestions(self.related, kept, data, self.rank, self._base_models)
        description = described(description, looks)
        if not used:
            description["model"] = "FlatSurrogate(SingleTaskGP)"
            return Fitted(flat, description=description, suggested=suggested)
        scale: Any = flat.outcome_transform  # the target's `Standardize`
        ensemble = RankWeightedEnsemble(
            [bases[i] for i in used] + [flat],
            torch.stack([weights[i] for i in used] + [weights[-1]]),
            scale.means.reshape(-1),
            scale.stdvs.reshape(-1),
        )
        return Fitted(ensemble, description=description, suggested=suggested)

    def _base_models(self, data: TrainingData) -> list[Model]:
        """The related tasks' flat GPs (`tuner.warmstart.task_model`), fitted on the first call
        and kept: their data never changes."""
        if self._bases is None:
            most = self.max_related
            self._bases = [task_model(r, data, self.fit_options, most) for r in self.related]
        return self._bases


class RankWeightedEnsemble(CombinedModel):
    """``sum_i w_i GP_i`` per outcome, in the target's units (`RGPESurrogate`).

    Args:
        models: Fitted batched `SingleTaskGP`s with ``m`` outputs and a `Standardize` outcome
            transform each; the last is the target's.
        weights: ``k x m``-dim Tensor, one weight per model and outcome (columns sum to 1).
        mean: ``m``-dim Tensor, the target's outcome means (its `Standardize`'s).
        std: ``m``-dim Tensor, the target's outcome standard deviations.
    """

    def __init__(self, models: Sequence[Model], weights: Tensor, mean: Tensor, std: Tensor):
        super().__init__()
        self.models = torch.nn.ModuleList(models)
        self.weights = weights.detach()
        self.mean = mean.detach()
        self.std = std.detach()

    @property
    def num_outputs(self) -> int:
        return int(self.weights.shape[-1])

    def output_mvns(
        self, X: Tensor, outputs: Sequence[int], observation_noise: bool | Tensor
    ) -> list[Any]:
        """The ensemble's posterior at ``batch x q x d``-dim ``X`` (latent: no observation
        noise) for ``outputs``."""
        if observation_noise is not False:
            raise NotImplementedError("RankWeightedEnsemble has no observation-noise model.")
        mean, cov = 0.0, 0.0
        for model, w in zip(self.models, self.weights, strict=True):
            m_i, c_i = _latent(model, X)
            mean = mean + w.unsqueeze(-1) * m_i
            cov = cov + (w**2)[:, None, None] * c_i
        assert isinstance(mean, Tensor) and isinstance(cov, Tensor)
        mean = self.mean.unsqueeze(-1) + self.std.unsqueeze(-1) * mean
        cov = (self.std**2)[:, None, None] * cov
        return [
            MultivariateNormal(mean[..., t, :], to_linear_operator(cov[..., t, :, :]))
            for t in outputs
        ]


def rank_weights(losses: Tensor, dilution: bool = True) -> Tensor:
    """Each model's share of the samples in which its ranking loss is lowest.

    Args:
        losses: ``k x S x m``-dim Tensor of ranking losses (models x samples x outcomes); the
            last model is the target's (out of sample).
        dilution: Give weight 0 to a model other than the target whose median loss exceeds the
            95th percentile of the target's (per outcome).

    Returns:
        ``k x m``-dim Tensor of weights; each column sums to 1. Ties split a sample evenly.
    """
    losses = losses.to(torch.float64)
    if dilution and losses.shape[0] > 1:
        limit = torch.quantile(losses[-1], 0.95, dim=0)  # m
        drop = losses[:-1].median(dim=1).values > limit  # (k-1) x m
        losses = losses.clone()
        losses[:-1] = torch.where(drop.unsqueeze(1), torch.inf, losses[:-1])
    best = (losses == losses.min(dim=0, keepdim=True).values).to(torch.float64)
    return (best / best.sum(dim=0, keepdim=True)).mean(dim=1)


def _latent(model: Any, X: Tensor) -> tuple[Tensor, Tensor]:
    """A batched `SingleTaskGP`'s latent posterior at ``batch x q x d``-dim ``X`` in its
    standardized units: mean ``batch x m x q``, covariance ``batch x m x q x q``."""
    model.eval()
    with gpt_posterior_settings():
        if model.num_outputs > 1:
            Xo, _ = add_output_dim(X, original_batch_shape=model._input_batch_shape)
            mvn = model(Xo)
            return mvn.mean, mvn.covariance_matrix
        mvn = model(X)
        return mvn.mean.unsqueeze(-2), mvn.covariance_matrix.unsqueeze(-3)


def _sample(mean: Tensor, cov: Tensor, n: int, g: torch.Generator) -> Tensor:
    """``n`` joint samples of ``N(mean, cov)``: ``n x batch x q`` for ``batch x q`` means."""
    L = psd_safe_cholesky(cov, max_tries=6)
    z = torch.randn(n, *mean.shape, generator=g, dtype=mean.dtype)
    return mean + (L @ z.unsqueeze(-1)).squeeze(-1)


def _joint_samples(model: Any, X: Tensor, n: int, g: torch.Generator) -> Tensor:
    """``n x m x t`` samples of a related task's GP at the target's ``t x d`` inputs."""
    with torch.no_grad():
        mean, cov = _latent(model, X)
        return _sample(mean, cov, n, g)


def _loo_samples(flat: Any, n: int, g: torch.Generator) -> Tensor:
    """``n x m x t x t`` out-of-sample samples of the target's GP: ``[..., j, k]`` is the GP
    conditioned on every trial but ``j`` (fitted hyper-parameters), at trial ``k``."""
    with torch.no_grad():
        X = flat.train_inputs[0]
        prior = flat.forward(X)
        m = flat.num_outputs
        t = X.shape[-2]
        K = prior.covariance_matrix.reshape(m, t, t)
        mu = prior.mean.reshape(m, t)
        resid = flat.train_targets.reshape(m, t) - mu
        noise = flat.likelihood.noise.reshape(m, -1).expand(m, t)
        P = torch.linalg.inv(K + torch.diag_embed(noise))
        out = []
        for j in range(t):
            Pj = P - P[:, :, j : j + 1] * P[:, j : j + 1, :] / P[:, j, j].reshape(m, 1, 1)
            KP = K @ Pj
            mean = mu + (KP @ resid.unsqueeze(-1)).squeeze(-1)
            cov = K - KP @ K
            out.append(_sample(mean, 0.5 * (cov + cov.transpose(-1, -2)), n, g))
        return torch.stack(out, dim=-2)


def _ranking_loss(f: Tensor, Y: Tensor, out_of_sample: bool = False) -> Tensor:
    """``S x m`` misordered ordered pairs of the target's ``t x m`` outcomes ``Y`` under
    samples ``f``: ``S x m x t`` (a related task's GP), or ``S x m x t x t`` with
    ``out_of_sample`` (`_loo_samples`: trial ``j`` compared from the GP without it)."""
    truth = Y.T.unsqueeze(-1) < Y.T.unsqueeze(-2)  # m x t x t: y_j < y_k
    if out_of_sample:
        pred = f.diagonal(dim1=-2, dim2=-1).unsqueeze(-1) < f
    else:
        pred = f.unsqueeze(-1) < f.unsqueeze(-2)
    return (pred ^ truth).sum(dim=(-1, -2))
