"""Objectives modelled per run group: each group of runs (a workload) as a task, then averaged.

A trial often aggregates runs: the rewrite study's objective is the mean, over its workloads
and seeds, of each run's value, and the trial reports each run's value too (``<objective>@
<group>/<replicate>``, `tuner.trial.run_metric`). The flat GP models the mean; a workload whose
response to the parameters differs from the others' (folding rules pay on ResNet, fusion rules
on GPT-2) is then blurred into one function the GP must learn from as few trials. This
surrogate models the mean over replicates of each group instead, each group a task, and
predicts the objective as the average over groups of those predictions (the mean over
workloads of the mean over seeds is the mean over runs when every workload ran the same seeds,
as racing keeps them):

- ``"multitask"`` (default): per objective one BoTorch `MultiTaskGP` over (parameters, group),
  an intrinsic-coregionalization kernel whose task covariance is learnt, so groups that move
  together share their evidence (the approach of multi-task BO, Swersky et al., 2013);
- ``"independent"``: one GP per (objective, group), batched, nothing shared between groups.

The objective's posterior is the exact average of the groups' joint posterior (mean ``1/G``
times the sum of the groups' means; covariance ``1/G^2`` times the sum of every pair of groups'
covariance blocks), so qLogNEHVI sees a Gaussian over the objectives as from any other model.

Where the trials do not report per-run objective values, or report them for some trials only,
where the objective is not the mean of its runs' values (on more than a quarter of the trials:
the tuner clips outlying values one by one, which breaks the equality on a few), or where the
study has outcome constraints, the flat GP is used, and the fit's description says why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import MultiTaskGP, SingleTaskGP
from botorch.models.model import Model
from botorch.models.transforms.outcome import Standardize
from gpytorch.distributions import MultivariateNormal
from gpytorch.mlls import ExactMarginalLogLikelihood
from torch import Tensor

from tuner.errors import InvalidArgumentError, SurrogateError
from tuner.surrogate import CombinedModel, Fitted, FlatSurrogate, Surrogate, TrainingData
from tuner.trial import run_group, split_run_metric

__all__ = ["GroupAverage", "GroupedSurrogate", "run_groups"]

TASK_MODELS = ("multitask", "independent")
"""The values of ``GroupedSurrogate(task_model=...)``."""

_MEAN_TOLERANCE = 1e-6
"""Relative gap allowed between an objective and the mean of its groups' values."""

_MAX_OFF_MEAN = 0.25
"""Share of trials on which an objective may differ from the mean of its groups' values: the
tuner clips outlying outcomes and metrics each on its own (`tuner.problem.clip_outliers`), so a
trial with an outlying run differs from its clipped mean."""


def run_groups(data: TrainingData) -> tuple[list[str], list[Tensor]] | str:
    """The run groups of ``data`` and, per objective, its ``n x G`` per-group values (the mean
    over each group's replicates, in the maximization convention of `TrainingData.Y`); or the
    reason there are none to model (a string).

    A run's group is `tuner.trial.run_group` of its label.
    """
    if data.Y.shape[-1] != data.n_objectives:
        return "the study has outcome constraints (modelled by the flat GP only)"
    by_objective: dict[str, dict[str, list[str]]] = {}
    for name in data.metrics:
        split = split_run_metric(name)
        if split is None or split[0] not in data.outcome_names[: data.n_objectives]:
            continue
        metric, run = split
        by_objective.setdefault(metric, {}).setdefault(run_group(run), []).append(name)
    objectives = list(data.outcome_names[: data.n_objectives])
    missing = [o for o in objectives if o not in by_objective]
    if missing:
        return f"the trials report no per-run values of {missing} (<objective>@<group>/<run>)"
    groups = sorted(by_objective[objectives[0]])
    if any(sorted(by_objective[o]) != groups for o in objectives):
        return "the objectives' per-run values name different run groups"
    if len(groups) < 2:
        return f"the runs form one group ({groups}): nothing to model per group"
    values = []
    for j, obj in enumerate(objectives):
        sign = -1.0 if data.directions and data.directions[j] == "minimize" else 1.0
        cols = []
        for g in groups:
            runs = torch.stack([data.metrics[name] for name in by_objective[obj][g]], dim=-1)
            cols.append(sign * torch.nanmean(runs, dim=-1))
        per_group = torch.stack(cols, dim=-1)
        if not bool(torch.isfinite(per_group).all()):
            return f"some trials report no per-run value of {obj!r} for a group"
        gap = (per_group.mean(dim=-1) - data.Y[:, j]).abs()
        off = gap > _MEAN_TOLERANCE * (1.0 + data.Y[:, j].abs())
        if float(off.double().mean()) > _MAX_OFF_MEAN:
            return (
                f"{obj!r} is not the mean of its runs' values on {int(off.sum())} of {data.n} "
                f"trials (largest gap {float(gap.max()):.3g}): its groups cannot be averaged "
                "back into it"
            )
        values.append(per_group)
    return groups, values


class GroupedSurrogate(Surrogate):
    """Each objective modelled per run group and averaged back (see the module docstring).

    Args:
        task_model: ``"multitask"`` (one `MultiTaskGP` per objective, groups as tasks) or
            ``"independent"`` (one GP per objective and group).
        fit_options: Options for the L-BFGS-B fits (as `FlatSurrogate`'s).

    Raises:
        InvalidArgumentError: For an unknown ``task_model``.
    """

    def __init__(
        self, task_model: str = "multitask", fit_options: Mapping[str, Any] | None = None
    ) -> None:
        if task_model not in TASK_MODELS:
            raise InvalidArgumentError(
                f"task_model must be one of {TASK_MODELS}, but got {task_model!r}."
            )
        self.task_model = task_model
        self.fit_options = dict(fit_options or {})
        self.flat = FlatSurrogate(fit_options)

    def fit(self, data: TrainingData) -> Fitted:
        """Fit the per-group models on ``data``, or the flat GP where they do not apply (see
        `Surrogate.fit`). The description holds ``model`` (``GroupedSurrogate(<task model>)``
        or ``flat``), ``reason``, ``groups``, ``n_train`` and, per objective, the fitted
        correlation matrix between groups (``task_correlations``; None for independent GPs)."""
        found = run_groups(data)
        if isinstance(found, str):
            description = {"model": "flat", "reason": found, "n_train": data.n}
            return Fitted(self.flat.fit(data).model, description=description)
        groups, values = found
        fit = self._fit_multitask if self.task_model == "multitask" else self._fit_independent
        models = []
        with torch.random.fork_rng():
            torch.manual_seed(data.seed)
            for j, y in enumerate(values):
                try:
                    models.append(fit(data.X, y))
                except Exception as err:  # botorch raises ModelFittingError after its retries
                    raise SurrogateError(
                        f"Fitting the {self.task_model} model of {data.outcome_names[j]!r} "
                        f"over groups {groups} on n={data.n} trials failed: {err}"
                    ) from err
        description = {
            "model": f"GroupedSurrogate({self.task_model})",
            "reason": f"{len(groups)} run groups per objective, averaged",
            "groups": groups,
            "n_train": data.n,
            "task_correlations": [_task_correlation(m) for m in models],
        }
        return Fitted(GroupAverage(models, len(groups)), description=description)

    def _fit_multitask(self, X: Tensor, y: Tensor) -> Model:
        n, g = y.shape
        tasks = torch.arange(g, dtype=X.dtype).repeat_interleave(n).unsqueeze(-1)
        train_X = torch.cat([X.repeat(g, 1), tasks], dim=-1)
        train_Y = y.T.reshape(-1, 1)
        model = MultiTaskGP(
            train_X, train_Y, task_feature=-1, outcome_transform=Standardize(m=1)
        ).to(torch.float64)
        self._fit(model)
        return model

    def _fit_independent(self, X: Tensor, y: Tensor) -> Model:
        model = SingleTaskGP(X, y, outcome_transform=Standardize(m=y.shape[-1])).to(torch.float64)
        self._fit(model)
        return model

    def _fit(self, model: Model) -> None:
        options = {"options": dict(self.fit_options)} if self.fit_options else None
        fit_gpytorch_mll(
            ExactMarginalLogLikelihood(model.likelihood, model), optimizer_kwargs=options
        )
        model.eval()


class GroupAverage(CombinedModel):
    """The objectives as the average over run groups of per-group models: each model's
    posterior over its ``G`` groups, averaged exactly (mean and full covariance)."""

    def __init__(self, models: list[Model], n_groups: int) -> None:
        super().__init__()
        self.models = torch.nn.ModuleList(models)
        self.n_groups = n_groups

    @property
    def num_outputs(self) -> int:
        return len(self.models)

    def output_mvns(
        self, X: Tensor, outputs: Sequence[int], observation_noise: bool | Tensor
    ) -> list[Any]:
        """Each output's groups' joint posterior at ``X``, averaged."""
        models = cast("list[Model]", list(self.models))
        return [
            _average(models[i].posterior(X, observation_noise=observation_noise).distribution)  # type: ignore[attr-defined]
            for i in outputs
        ]


def _average(dist: MultivariateNormal) -> MultivariateNormal:
    """The average over tasks of a ``... x n x G`` multitask normal (interleaved: point-major),
    as an ``n``-point normal."""
    mean = dist.mean  # ... x n x G
    g = mean.shape[-1]
    n = mean.shape[-2]
    cov = dist.covariance_matrix  # ... x nG x nG
    if not getattr(dist, "_interleaved", True):  # task-major: reorder to point-major
        idx = torch.arange(n * g).reshape(g, n).T.reshape(-1)
        cov = cov[..., idx, :][..., :, idx]
    blocks = cov.reshape(*cov.shape[:-2], n, g, n, g)
    avg_cov = blocks.sum(dim=(-3, -1)) / (g * g)
    return MultivariateNormal(mean.mean(dim=-1), avg_cov)


def _task_correlation(model: Model) -> list[list[float]] | None:
    """The fitted correlation between the groups of a `MultiTaskGP` (None for another)."""
    if not isinstance(model, MultiTaskGP):
        return None
    kernels = getattr(model.covar_module, "kernels", ())
    task = kernels[-1] if kernels else None
    if task is None or not hasattr(task, "covar_matrix"):
        return None
    with torch.no_grad():
        cov = task.covar_matrix.to_dense()
    sd = cov.diagonal().clamp_min(1e-12).sqrt()
    corr = cov / (sd.unsqueeze(-1) * sd.unsqueeze(-2))
    return [[round(float(v), 3) if math.isfinite(float(v)) else 0.0 for v in row] for row in corr]
