"""The surrogate interface and the default flat surrogate.

A `Surrogate` turns the completed trials (`TrainingData`) into a `Fitted`: a fitted BoTorch
`Model`, optionally second models that shape where the tuner looks, and a description of the fit.
The tuner calls `fit` once per proposal, from a single thread, with fresh `TrainingData`; it never
mutates the data and a surrogate must not either. Everything a fit produces comes back in its
`Fitted`: no method reads what an earlier `fit` left behind. The model's posterior over ``n x d``
unit-cube inputs has ``m`` outputs in `TrainingData.outcome_names` order (objectives first,
maximization convention, then outcome-constraint metrics in their raw units). The tuner only
calls `Model.posterior` on it, through BoTorch acquisition functions.
"""

from __future__ import annotations

import hashlib
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.model import Model
from botorch.models.transforms.outcome import Standardize
from gpytorch.mlls import ExactMarginalLogLikelihood
from torch import Tensor

from tuner.errors import SurrogateError

if TYPE_CHECKING:
    from spaces import Space

__all__ = ["FlatSurrogate", "Fitted", "SaasSurrogate", "Surrogate", "TrainingData"]


@dataclass(frozen=True)
class TrainingData:
    """What a surrogate learns from: the completed trials, encoded.

    Attributes:
        X: ``n x d``-dim float64 Tensor of unit-cube inputs of the completed trials
            (`Space.to_unit` of their configs), in trial-id order.
        Y: ``n x m``-dim float64 Tensor of outcomes: objectives in maximization convention
            (minimized objectives negated), then the outcome-constraint metrics (raw). All finite.
        outcome_names: The ``m`` names of `Y`'s columns, objectives first.
        metrics: Tracking metrics, name -> ``n``-dim float64 Tensor (NaN where a trial did not
            report the metric).
        space: The search space the inputs were encoded with.
        seed: Seed for any randomness in the fit (derived by the tuner from its seed and the
            number of trials so far, so refits are reproducible).
        n_objectives: How many leading columns of `Y` are objectives.
        Yvar: ``n x m``-dim float64 Tensor of known observation variances of `Y` (from the
            trials' ``<outcome>.sem`` metrics, see `tuner.problem`), or None to infer the noise.
        directions: The objectives' directions (``"maximize"`` or ``"minimize"``), in
            `outcome_names` order; empty where the caller does not say. A surrogate that reads
            per-run objective values (``<objective>@<run>`` metrics, `tuner.trial`), which are
            in each objective's own direction, needs them.
    """

    X: Tensor
    Y: Tensor
    outcome_names: list[str]
    metrics: dict[str, Tensor]
    space: Space
    seed: int
    n_objectives: int = field(default=-1)
    Yvar: Tensor | None = None
    directions: tuple[str, ...] = ()

    def digest(self) -> str:
        """A hash of the inputs, outcomes, variances, outcome names and seed: equal digests,
        equal fits (`Surrogate.fit`'s contract), so a surrogate may keep its last model."""
        h = hashlib.sha256()
        for t in (self.X, self.Y, self.Yvar):
            if t is not None:
                h.update(t.detach().contiguous().numpy().tobytes())
        h.update(f"{self.seed}|{list(self.outcome_names)}".encode())
        return h.hexdigest()

    def __post_init__(self) -> None:
        if self.X.dim() != 2 or self.Y.dim() != 2 or self.X.shape[0] != self.Y.shape[0]:
            raise SurrogateError(
                "`X` must be `n x d` and `Y` `n x m` with the same `n`, but got "
                f"X.shape={tuple(self.X.shape)}, Y.shape={tuple(self.Y.shape)}."
            )
        if self.X.dtype != torch.float64 or self.Y.dtype != torch.float64:
            raise SurrogateError(
                f"`X` and `Y` must be float64, got {self.X.dtype}, {self.Y.dtype}."
            )
        if len(self.outcome_names) != self.Y.shape[-1]:
            raise SurrogateError(
                f"One outcome name per column of `Y` is needed, but got {self.outcome_names} for "
                f"{self.Y.shape[-1]} columns."
            )
        if not bool(torch.isfinite(self.Y).all()):
            raise SurrogateError("`Y` must be finite; failed trials never enter the training data.")
        for name, values in self.metrics.items():
            if values.shape != (self.X.shape[0],):
                raise SurrogateError(
                    f"Metric {name!r} must be an `n`-dim Tensor with n={self.X.shape[0]}, "
                    f"but got shape {tuple(values.shape)}."
                )
        if self.n_objectives == -1:
            object.__setattr__(self, "n_objectives", len(self.outcome_names))
        if self.Yvar is not None and (
            self.Yvar.shape != self.Y.shape
            or self.Yvar.dtype != torch.float64
            or not bool(torch.isfinite(self.Yvar).all() and (self.Yvar >= 0).all())
        ):
            raise SurrogateError(
                f"`Yvar` must be a finite, non-negative float64 Tensor shaped like `Y` "
                f"{tuple(self.Y.shape)}, but got shape {tuple(self.Yvar.shape)}."
            )
        directions = tuple(self.directions)
        if directions and (
            len(directions) != self.n_objectives
            or any(d not in ("maximize", "minimize") for d in directions)
        ):
            raise SurrogateError(
                f"`directions` must name 'maximize' or 'minimize' for each of the "
                f"{self.n_objectives} objectives (or be empty), but got {directions}."
            )
        object.__setattr__(self, "directions", directions)

    def noise(self) -> Tensor | None:
        """`Yvar` floored at ``1e-6`` of each outcome's variance over the trials (a standard error
        of exactly zero, from seeds that happened to agree, would make the GP interpolate), or
        None without observed noise."""
        if self.Yvar is None:
            return None
        scale = self.Y.var(dim=0, keepdim=True) if self.n > 1 else torch.ones_like(self.Y[:1])
        return torch.maximum(self.Yvar, 1e-6 * scale.clamp_min(1e-12))

    @property
    def n(self) -> int:
        """Number of completed trials."""
        return int(self.X.shape[0])


@dataclass(frozen=True)
class Fitted:
    """What one `Surrogate.fit` produces.

    Attributes:
        model: The fitted `Model` (eval mode) whose posterior over a ``batch x q x d`` input has
            ``m`` outputs in `TrainingData.outcome_names` order.
        proposer: A second model of the same data whose acquisition the tuner optimizes, the
            fitted model then ranking the points found (the best by its own acquisition is
            proposed); None: the fitted model does both.
        veto: A second model of the same data and a margin in nats that bound where the tuner
            proposes: it optimizes that model's acquisition as well, pools the points found with
            the fitted model's (or the proposer's), and proposes the best by the fitted model's
            acquisition among the points whose log-acquisition under the vetoing model is within
            the margin of the pool's best under it. None: no veto.
        description: JSON-able information on the fit (chosen model, scores, ...).
        suggested: ``k x d`` unit-cube points the tuner proposes, best first, before it
            optimizes the acquisition or takes its initial design's next point (those already
            tried are skipped): a warm start's related tasks' best configurations
            (`tuner.warmstart.suggestions`). None: none.
    """

    model: Model
    proposer: Model | None = None
    veto: tuple[Model, float] | None = None
    description: Mapping[str, Any] = field(default_factory=dict)
    suggested: Tensor | None = None


class Surrogate(ABC):
    """Builds a `Fitted` model from the completed trials.

    Contract:
        * `fit` is called once per proposal with fresh `TrainingData`; it must not mutate it.
        * Everything the fit produces comes back in its `Fitted`; no other method depends on
          which `fit` ran last (a cache keyed by the data, `TrainingData.digest`, may return an
          earlier equal result).
        * The fitted model's posterior over a ``batch x q x d`` input has ``m`` outputs in
          `TrainingData.outcome_names` order (``m == data.Y.shape[-1]``).
        * Given equal data (including `data.seed`), `fit` returns an equal result: the tuner's
          exact rebuild from stored trials relies on it. Seed any randomness from `data.seed`.
        * `fit` is not called concurrently on one instance.
    """

    @abstractmethod
    def fit(self, data: TrainingData) -> Fitted:
        """Fit a model whose posterior over ``n x d`` inputs has ``m`` outputs.

        Args:
            data: The completed trials, encoded.

        Returns:
            The fitted model (a BoTorch `Model` in eval mode), any second models that shape the
            proposal, and a description of the fit.

        Raises:
            SurrogateError: The model cannot be fitted on this data.
        """

    def check(self, space: Space, outcome_names: Sequence[str], n_objectives: int) -> None:
        """Refuse a configuration that cannot fit this problem, before any trial runs; the
        tuner calls it once when it is built. Accepts everything by default.

        Args:
            space: The search space.
            outcome_names: The modelled outcomes: the objectives, then the constraint metrics.
            n_objectives: How many leading `outcome_names` are objectives.
        """
        return None

    def suggestions(self, data: TrainingData) -> Tensor | None:
        """The points the fit of ``data`` suggests trying first (`Fitted.suggested`); the tuner
        asks within its initial design too, once `TunerOptions.min_completed` trials completed.
        None (the default) without fitting."""
        return None

    def informed(self, data: TrainingData) -> bool:
        """Whether the model of ``data`` knows more than the trials tell (a warm start's kept
        related study): the tuner then proposes from the model at positions of the initial
        design too, once `TunerOptions.min_completed` trials completed. False (the default):
        the design runs first."""
        return False


class FlatSurrogate(Surrogate):
    """One batched multi-output `SingleTaskGP` over all outcomes (the default surrogate).

    All outcomes share their inputs, so a single batched GP (one independent GP per outcome in a
    batch dimension, as Ax builds it) is cheaper than a `ModelListGP`. float64, unit-cube inputs
    (no input transform needed), `Standardize` outcome transform, Matern-5/2 ARD kernel with
    BoTorch's default priors, fitted by `fit_gpytorch_mll` under a fixed torch seed. The noise is
    inferred, or known where the trials report standard errors (`TrainingData.Yvar`).

    Args:
        fit_options: Options for the L-BFGS-B hyper-parameter fit (`scipy` keys such as
            ``{"maxiter": 50}``); `None` keeps BoTorch's defaults.
    """

    def __init__(self, fit_options: Mapping[str, Any] | None = None) -> None:
        self.fit_options = dict(fit_options or {})

    def fit(self, data: TrainingData) -> Fitted:
        """Fit the batched GP on `data` (see `Surrogate.fit`); the description holds the model
        class, the noise, the training size and the fitted lengthscales."""
        if data.n == 0:
            raise SurrogateError("The flat GP needs at least one completed trial, got none.")
        model = SingleTaskGP(
            data.X,
            data.Y,
            train_Yvar=data.noise(),
            outcome_transform=Standardize(m=data.Y.shape[-1]),
        ).to(torch.float64)
        mll = ExactMarginalLogLikelihood(model.likelihood, model)
        optimizer_kwargs = {"options": dict(self.fit_options)} if self.fit_options else None
        with torch.random.fork_rng():
            torch.manual_seed(data.seed)
            try:
                fit_gpytorch_mll(mll, optimizer_kwargs=optimizer_kwargs)
            except Exception as err:  # botorch raises ModelFittingError after its retries
                raise SurrogateError(
                    f"Fitting the flat GP on n={data.n} trials failed: {err}"
                ) from err
        model.eval()
        description = {
            "model": "FlatSurrogate(SingleTaskGP)",
            "noise": "observed" if data.Yvar is not None else "inferred",
            "n_train": data.n,
            "outcomes": list(data.outcome_names),
            "lengthscales": _lengthscales(model),
        }
        return Fitted(model, description=description)


class SaasSurrogate(Surrogate):
    """One GP per outcome with a sparse axis-aligned subspace (SAAS) prior, MAP-fitted.

    For spaces with many columns of which few matter (one free weight per rewrite rule): each
    inverse lengthscale gets a half-Cauchy prior scaled by a global shrinkage ``tau`` (itself
    half-Cauchy), so an input keeps a short lengthscale only when the data insists
    (Eriksson & Jankowiak, 2021). This is BoTorch's MAP variant
    (`botorch.models.map_saas.get_map_saas_model`: the mode of the posterior rather than NUTS
    samples, so it needs no extra dependency and fits in seconds). The outcomes' GPs form a
    `ModelListGP`; observed noise (`TrainingData.Yvar`) is used when given.

    Args:
        fit_options: Options for the L-BFGS-B fit of each GP (as `FlatSurrogate`'s).
    """

    def __init__(self, fit_options: Mapping[str, Any] | None = None) -> None:
        self.fit_options = dict(fit_options or {})

    def fit(self, data: TrainingData) -> Fitted:
        """Fit one MAP-SAAS GP per outcome (see `Surrogate.fit`); the description holds the
        model class, the training size and the fitted lengthscales."""
        from botorch.models import ModelListGP
        from botorch.models.map_saas import get_map_saas_model

        if data.n == 0:
            raise SurrogateError("The SAAS GP needs at least one completed trial, got none.")
        noise = data.noise()
        optimizer_kwargs = {"options": dict(self.fit_options)} if self.fit_options else None
        models = []
        with torch.random.fork_rng():
            torch.manual_seed(data.seed)
            for j in range(data.Y.shape[-1]):
                gp = get_map_saas_model(
                    data.X,
                    data.Y[:, j : j + 1],
                    None if noise is None else noise[:, j : j + 1],
                    outcome_transform=Standardize(m=1),
                ).to(torch.float64)
                try:
                    fit_gpytorch_mll(
                        ExactMarginalLogLikelihood(gp.likelihood, gp),
                        optimizer_kwargs=optimizer_kwargs,
                    )
                except Exception as err:  # botorch raises ModelFittingError after its retries
                    raise SurrogateError(
                        f"Fitting the SAAS GP of {data.outcome_names[j]!r} on n={data.n} trials "
                        f"failed: {err}"
                    ) from err
                models.append(gp.eval())
        description = {
            "model": "SaasSurrogate(MAP SAAS GP per outcome)",
            "n_train": data.n,
            "outcomes": list(data.outcome_names),
            "lengthscales": [row for gp in models for row in _lengthscales(gp)],
        }
        return Fitted(ModelListGP(*models), description=description)


class CombinedModel(Model):
    """A model whose outputs are independent normals built from other fitted models'
    posteriors (`tuner.rgpe.RankWeightedEnsemble`, `tuner.groups.GroupAverage`): a subclass
    says how in `output_mvns`; `posterior` assembles the `GPyTorchPosterior`."""

    @property
    def batch_shape(self) -> torch.Size:
        return torch.Size([])

    @abstractmethod
    def output_mvns(
        self, X: Tensor, outputs: Sequence[int], observation_noise: bool | Tensor
    ) -> list[Any]:
        """One ``batch x q``-point `MultivariateNormal` per output of ``outputs`` at ``X``."""

    def posterior(  # type: ignore[override]
        self,
        X: Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool | Tensor = False,
        posterior_transform: Any = None,
        **kwargs: Any,
    ) -> Any:
        """The posterior at ``batch x q x d``-dim ``X``: every output, or the
        ``output_indices`` ones."""
        from botorch.posteriors.gpytorch import GPyTorchPosterior
        from gpytorch.distributions import MultitaskMultivariateNormal

        outputs = output_indices if output_indices is not None else range(self.num_outputs)
        mvns = self.output_mvns(X, list(outputs), observation_noise)
        mvn = mvns[0] if len(mvns) == 1 else MultitaskMultivariateNormal.from_independent_mvns(mvns)
        posterior = GPyTorchPosterior(distribution=mvn)
        return posterior if posterior_transform is None else posterior_transform(posterior)


def _lengthscales(model: SingleTaskGP) -> list[list[float]]:
    """Fitted ARD lengthscales as nested lists (one list per outcome), NaN-free for JSON."""
    kernel = model.covar_module
    ls = getattr(kernel, "lengthscale", None)
    if ls is None and hasattr(kernel, "base_kernel"):
        ls = kernel.base_kernel.lengthscale
    if ls is None:
        return []
    rows = ls.detach().reshape(-1, ls.shape[-1]).tolist()
    return [[v if math.isfinite(v) else -1.0 for v in row] for row in rows]
