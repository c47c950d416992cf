"""Warm start: completed trials of related tasks (finished studies) inform a new one's model.

`WarmStartSurrogate` fits, per outcome, a multi-task GP over the target's trials and every
related task's (BoTorch `MultiTaskGP`: its default kernel on the inputs times a learned, positive
task-covariance matrix, the intrinsic coregionalization model), and predicts the target task.
A related task whose outcomes move with the target's lends its trials through a high learned
correlation. With few target trials the learned correlation cannot tell a related task from an
unrelated one (on a synthetic pair with 4 target trials: 0.81 for a shifted copy of the
target, 0.85 for noise), so each related task must earn its place the way the structured
surrogate does (`structure`): the gate compares, per target trial, the leave-one-out log
likelihood (closed form, with the fitted hyper-parameters, all outcomes) of the multi-task GP
over the target and that task with the flat GP's on the target alone, and keeps the task while
``mean + gate * se`` of those per-trial advantages is above zero (``gate`` 0: the advantage
summed over the trials is positive; a negative ``gate`` asks for a lower confidence bound
above zero, a positive one gives a task the benefit of the doubt while the trials are few).
Without a kept task the model is the flat GP: an unrelated study costs nothing but the fits.
The gate judges from ``min_target`` target trials on, so that a study whose first trials are the
related studies' best configurations (`studies.warmstart`) models them from its first
proposal.

A related task may carry its best configurations (`RelatedTask.best`): the fit suggests them
(`suggestions`, `tuner.Fitted.suggested`, tried before the model's own proposals) once the task
has shown it helps, kept by the gate or its best, tried on the target, on the target's Pareto
front; or, judged by rank (``rank`` k), its own GP ordering the target's first k trials as they
came out (`ranks_alike`): one look that a misleading task fails.

The related tasks' inputs must already be encoded in the target's space (`RelatedTask`); the
study layer maps another study's configurations onto shared parameters by name
(`studies.warmstart`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import ModelListGP, MultiTaskGP
from botorch.models.transforms.outcome import Standardize
from botorch.utils.multi_objective.pareto import is_non_dominated
from gpytorch.mlls import ExactMarginalLogLikelihood
from torch import Tensor

from tuner.errors import SurrogateError
from tuner.surrogate import Fitted, FlatSurrogate, Surrogate, TrainingData

__all__ = [
    "AGREEMENT",
    "GATE",
    "MIN_TARGET",
    "RelatedTask",
    "WarmStartSurrogate",
    "check_related",
    "described",
    "rank_agreement",
    "ranks_alike",
    "suggestions",
    "task_model",
    "trimmed",
]

#: Target trials needed before a related task can be judged; below, the flat GP is used.
MIN_TARGET = 2
#: `WarmStartSurrogate`'s default gate (module docstring): a one-sided 95% lower confidence
#: bound on the mean per-trial advantage (`StudySettings.warm_start_gate`).
GATE = -1.64
#: The share of a target's first trials' pairs a related task must order alike (`ranks_alike`):
#: on the design split of `benchmarks/bench_families.py`, with 3 trials and two objectives
#: (docs/families.md), a misleading source passed 0 of 100 times, an unrelated one 21, a related
#: one 50 of 60.
AGREEMENT = 0.8


@dataclass(frozen=True)
class RelatedTask:
    """Completed trials of a related task, encoded for the target's model.

    Attributes:
        name: How reports name the task (e.g. a study's name).
        X: ``n x d`` float64 unit-cube inputs in the target's space.
        Y: ``n x m`` float64 outcomes in the target's `TrainingData.outcome_names` order and
            convention (objectives maximized).
        Yvar: Their known variances (``n x m``), or None.
        best: ``k x d`` unit-cube inputs of the task's best configurations, best first, that
            the tuner tries before the model's own proposals once the task has shown it
            helps (`suggestions`). None: none.
    """

    name: str
    X: Tensor
    Y: Tensor
    Yvar: Tensor | None = None
    best: Tensor | None = None

    def __post_init__(self) -> None:
        if self.X.dim() != 2 or self.Y.dim() != 2 or self.X.shape[0] != self.Y.shape[0]:
            raise SurrogateError(
                f"Related task {self.name!r}: X must be n x d and Y n x m with one n, got "
                f"{tuple(self.X.shape)} and {tuple(self.Y.shape)}."
            )
        if self.best is not None and (
            self.best.dim() != 2 or self.best.shape[1] != self.X.shape[1]
        ):
            raise SurrogateError(
                f"Related task {self.name!r}: best must be k x d like X's {tuple(self.X.shape)}, "
                f"got {tuple(self.best.shape)}."
            )
        if self.Yvar is not None and self.Yvar.shape != self.Y.shape:
            raise SurrogateError(f"Related task {self.name!r}: Yvar must be shaped like Y.")
        if not bool(torch.isfinite(self.Y).all()):
            raise SurrogateError(f"Related task {self.name!r}: Y must be finite.")


class WarmStartSurrogate(Surrogate):
    """A multi-task GP per outcome over the target's trials and the related tasks' (module
    docstring); the flat GP (`FlatSurrogate`) when no related task has a trial.

    Args:
        related: The related tasks (each encoded in the target's space).
        fit_options: Options for the L-BFGS-B fit (scipy keys such as ``{"maxiter": 50}``).
        max_related: Keep at most this many trials per related task (its best by the first
            objective, then the rest in order), bounding the fit's cost.
        min_target: Target trials from which related tasks are judged and used (>= 2).
        gate: How sure the gate must be that a task helps (module docstring): a task is kept
            while the mean of its per-trial leave-one-out advantage plus ``gate`` standard
            errors is above zero.
        rank: 0: a task's best configurations are suggested once the gate keeps it or its
            best, tried here, is on the target's front (`suggestions`); ``k >= 2``: once its
            own GP orders the target's first ``k`` trials as they came out (`ranks_alike`).
    """

    def __init__(
        self,
        related: Sequence[RelatedTask],
        fit_options: Mapping[str, Any] | None = None,
        max_related: int = 100,
        min_target: int = MIN_TARGET,
        gate: float = GATE,
        rank: int = 0,
    ) -> None:
        if int(min_target) < 2:
            raise SurrogateError(f"`min_target >= 2` must hold, got {min_target=}.")
        self.related = [r for r in related if r.X.shape[0] > 0]
        self.fit_options = dict(fit_options or {})
        self.max_related = int(max_related)
        self.min_target = int(min_target)
        self.gate = float(gate)
        self.rank = int(rank)
        self._models: list[Any] | None = None  # the related tasks' own GPs, for `rank`
        self._fitted: tuple[str, Fitted] | None = None  # the fit of the latest data, by digest

    def check(self, space: Any, outcome_names: Sequence[str], n_objectives: int) -> None:
        """Refuse related tasks whose inputs or outcomes do not match the target's."""
        check_related(self.related, space, outcome_names)

    def informed(self, data: TrainingData) -> bool:
        """Whether the gate keeps a related task on ``data`` (the tuner then proposes from the
        model within its initial design; else the design runs, as in a cold study)."""
        return bool(self.fit(data).description.get("related"))

    def suggestions(self, data: TrainingData) -> Tensor | None:
        """The fit's `tuner.Fitted.suggested` (`suggestions`)."""
        return self.fit(data).suggested

    def fit(self, data: TrainingData) -> Fitted:
        """The flat GP, or one `MultiTaskGP` per outcome (task 0: the target) over the target
        and the related tasks that predict its trials better (module docstring). The fit of the
        latest data is cached by its digest: fitting equal data again returns it.

        The description holds the training size, per related task kept its trials and, per
        outcome, its learned correlation with the target task; ``loo``: summed leave-one-out
        log likelihoods; ``gate``: per related task, the mean per-trial advantage and the
        bound the gate tests."""
        key = data.digest()
        if self._fitted is None or self._fitted[0] != key:
            self._fitted = (key, self._fit(data))
        return self._fitted[1]

    def _fit(self, data: TrainingData) -> Fitted:
        flat_fit = FlatSurrogate(self.fit_options).fit(data)
        flat = flat_fit.model
        judged = data.n >= self.min_target
        base = _loo_flat(flat) if judged else None
        scores: dict[str, float] = {"flat": float(base.sum())} if base is not None else {}
        gate: dict[str, list[float]] = {}
        kept, fitted = [], {}
        for r in self.related:
            if base is None:
                break
            model = self._fit_tasks(data, [r])
            own = _loo_tasks(model, data.n)
            scores[r.name] = float(own.sum())
            bound = _bound(own - base, self.gate)
            gate[r.name] = [round(float((own - base).mean()), 4), round(bound, 4)]
            if bound > 0:
                kept.append(r)
                fitted[r.name] = model
        names = [r.name for r in kept]
        suggested, looks = suggestions(self.related, names, data, self.rank, self._task_models)
        if not kept:
            description = {**flat_fit.description, "related": [], "loo": scores, "gate": gate}
            return Fitted(flat, description=described(description, looks), suggested=suggested)
        model = fitted[kept[0].name] if len(kept) == 1 else self._fit_tasks(data, kept)
        description = {
            "model": "WarmStartSurrogate(MultiTaskGP per outcome)",
            "n_train": data.n,
            "related": [
                {"name": r.name, "n": int(min(r.X.shape[0], self.max_related)), "correlation": c}
                for r, c in zip(kept, _correlations(_models(model)), strict=True)
            ],
            "loo": scores,
            "gate": gate,
        }
        return Fitted(model, description=described(description, looks), suggested=suggested)

    def _task_models(self, data: TrainingData) -> list[Any]:
        """The related tasks' own GPs (`task_model`, for `rank`), fitted on the first call and
        kept: their data never changes."""
        if self._models is None:
            most = self.max_related
            self._models = [task_model(r, data, self.fit_options, most) for r in self.related]
        return self._models

    def _fit_tasks(self, data: TrainingData, related: Sequence[RelatedTask]) -> ModelListGP:
        """One `MultiTaskGP` per outcome over the target (task 0) and ``related``."""
        tasks = [(data.X, data.Y, data.noise())] + [trimmed(r, self.max_related) for r in related]
        X = torch.cat(
            [
                torch.cat([x, torch.full((x.shape[0], 1), float(i), dtype=x.dtype)], dim=-1)
                for i, (x, _, _) in enumerate(tasks)
            ]
        )
        Y = torch.cat([y for _, y, _ in tasks])
        known = all(v is not None for _, _, v in tasks)
        Yvar = torch.cat([v for _, _, v in tasks if v is not None]) if known else None
        models = []
        with torch.random.fork_rng():
            torch.manual_seed(data.seed)
            for j in range(Y.shape[-1]):
                gp = MultiTaskGP(
                    X,
                    Y[:, j : j + 1],
                    task_feature=-1,
                    train_Yvar=Yvar[:, j : j + 1] if Yvar is not None else None,
                    output_tasks=[0],
                    all_tasks=list(range(len(tasks))),
                    outcome_transform=Standardize(m=1),
                ).to(torch.float64)
                mll = ExactMarginalLogLikelihood(gp.likelihood, gp)
                options = {"options": dict(self.fit_options)} if self.fit_options else None
                try:
                    fit_gpytorch_mll(mll, optimizer_kwargs=options)
                except Exception as err:
                    raise SurrogateError(
                        f"Fitting the warm-start GP of {data.outcome_names[j]!r} on "
                        f"{data.n} + {Y.shape[0] - data.n} trials failed: {err}"
                    ) from err
                models.append(gp.eval())
        return ModelListGP(*models).eval()


def check_related(related: Sequence[RelatedTask], space: Any, outcome_names: Sequence[str]) -> None:
    """Refuse related tasks whose inputs or outcomes do not match the target's.

    Raises:
        SurrogateError: Naming the task and both shapes.
    """
    for r in related:
        if r.X.shape[1] != space.dim or r.Y.shape[1] != len(outcome_names):
            raise SurrogateError(
                f"Related task {r.name!r} has {r.X.shape[1]} input columns and "
                f"{r.Y.shape[1]} outcomes; the target has {space.dim} and "
                f"{len(outcome_names)} ({list(outcome_names)}). Encode its trials in the "
                "target's space and outcome order (`studies.warmstart.related_tasks` does)."
            )


def suggestions(
    related: Sequence[RelatedTask],
    kept: Sequence[str],
    data: TrainingData,
    rank: int = 0,
    models: Callable[[TrainingData], Sequence[Any]] | None = None,
) -> tuple[Tensor | None, dict[str, float | None]]:
    """What a fit on ``data`` suggests trying first (`tuner.Fitted.suggested`): the best
    configurations (`RelatedTask.best`) of each related task that has shown it helps, in their
    order (None without any), and the rank rule's looks. With ``rank`` 0, a task has shown it
    helps when the fit keeps it (``kept``: names) or its best configuration, tried on the
    target, came out on the target's Pareto front (its objectives, `TrainingData.n_objectives`);
    no looks. With ``rank`` ``k >= 2``, when its own GP (of ``models(data)``, one per related
    task, `task_model`) orders the target's first ``k`` trials alike (`ranks_alike`); the looks
    give each task's share of pairs ordered alike (`rank_agreement`; None where no pair
    differs), from the ``k``-th trial on, for the fit's description (`described`)."""
    looks: dict[str, float | None] = {}
    if rank and models is not None:
        judged = data.n >= rank  # the tasks' GPs are fitted once there are trials to judge
        shares = [rank_agreement(m, data, rank) for m in models(data)] if judged else []
        looks = dict(zip((r.name for r in related), shares))  # empty until judged
        alike = [_passes(v) for v in shares]
    else:
        alike = [r.name in kept or _holds(r.best, data) for r in related]
    best = [
        r.best for r, ok in zip(related, alike) if ok and r.best is not None and r.best.shape[0]
    ]
    return (torch.cat(best) if best else None), looks


def described(description: dict[str, Any], looks: dict[str, float | None]) -> dict[str, Any]:
    """A warm-start fit's ``description`` with the rank rule's ``looks`` (`suggestions`), once
    judged, under ``"look"``: per related task, the share of the target's first trials' pairs
    its own GP orders alike (``"alike"``), and the share it needs (``"needs"``, `AGREEMENT`)."""
    if not looks:
        return description
    shares = {k: None if v is None else round(v, 4) for k, v in looks.items()}
    return {**description, "look": {"alike": shares, "needs": AGREEMENT}}


def _holds(best: Tensor | None, data: TrainingData) -> bool:
    """Whether the target tried a task's best configuration (the first of ``best``, ``k x d``
    unit points) and it is on the target's Pareto front (objectives maximized, as
    `TrainingData.Y` holds them)."""
    if best is None or not len(best) or not data.n:
        return False
    x = best[0]
    same = ((data.X - x).abs() <= 1e-9).all(dim=-1)
    if not bool(same.any()):
        return False
    front = is_non_dominated(data.Y[:, : data.n_objectives], deduplicate=False)
    return bool(front[same].any())


def ranks_alike(model: Any, data: TrainingData, k: int) -> bool:
    """Whether ``model`` (a related task's own GP, `task_model`) orders the target's first
    ``k`` completed trials as they came out: at least `AGREEMENT` of the pairs of them whose
    outcomes differ, over every objective (`rank_agreement`). Judged on the first ``k`` alone,
    so the answer holds for the rest of the study: a task gets one look, not one per trial."""
    return _passes(rank_agreement(model, data, k))


def _passes(share: float | None) -> bool:
    """Whether a look's share (`rank_agreement`) is at least `AGREEMENT`."""
    return share is not None and share >= AGREEMENT


def rank_agreement(model: Any, data: TrainingData, k: int) -> float | None:
    """The share of the pairs of the target's first ``k`` completed trials whose outcomes
    differ, over every objective, that ``model``'s posterior mean orders the same way. None
    while fewer than ``k`` (or 2) trials completed or no pair differs."""
    if data.n < k or k < 2:
        return None
    m = data.n_objectives
    with torch.no_grad():
        mean = model.posterior(data.X[:k]).mean[..., :m]
    pairs = torch.triu_indices(k, k, offset=1)
    seen = data.Y[pairs[1], :m] - data.Y[pairs[0], :m]
    said = mean[pairs[1]] - mean[pairs[0]]
    differ = seen != 0
    if not bool(differ.any()):
        return None
    return float(((seen.sign() == said.sign()) & differ).sum()) / int(differ.sum())


def task_model(
    r: RelatedTask, data: TrainingData, fit_options: Mapping[str, Any], most: int
) -> Any:
    """A related task's own flat GP (`FlatSurrogate`, fitted with seed 0, standardized in the
    task's own units) on at most ``most`` of its trials (`trimmed`), with the target
    ``data``'s outcomes."""
    X, Y, Yvar = trimmed(r, most)
    task = TrainingData(X, Y, data.outcome_names, {}, data.space, 0, data.n_objectives, Yvar)
    return FlatSurrogate(fit_options).fit(task).model


def trimmed(r: RelatedTask, most: int) -> tuple[Tensor, Tensor, Tensor | None]:
    """At most ``most`` trials of ``r``: its best by the first outcome first."""
    if r.X.shape[0] <= most:
        return r.X, r.Y, r.Yvar
    keep = torch.argsort(r.Y[:, 0], descending=True)[:most]
    return r.X[keep], r.Y[keep], None if r.Yvar is None else r.Yvar[keep]


def _correlations(models: Sequence[Any]) -> list[list[float]]:
    """Per related task (1, 2, ...), per outcome, the learned correlation with task 0."""
    out: list[list[float]] = []
    for gp in models:
        index = next(k for k in gp.covar_module.kernels if hasattr(k, "covar_matrix"))
        cov = index.covar_matrix.to_dense().detach()
        sd = cov.diagonal().clamp_min(1e-12).sqrt()
        corr = (cov[0] / (sd[0] * sd)).tolist()
        out.append(corr)
    return [[round(float(c[i]), 3) for c in out] for i in range(1, len(out[0]))]


def _loo(prior_cov: Tensor, noise: Tensor, resid: Tensor, scale: Tensor) -> Tensor:
    """Leave-one-out log likelihoods of an exact GP's training points (closed form, fitted
    hyper-parameters): ``prior_cov`` ``... x n x n``, ``noise`` broadcastable to ``... x n``,
    ``resid`` the targets minus the prior mean (``... x n``), ``scale`` the outcome transform's
    standard deviation (``...``), so the values are in the outcomes' own units."""
    K = prior_cov + torch.diag_embed(noise.expand_as(resid))
    Kinv = torch.linalg.inv(K)
    diag = Kinv.diagonal(dim1=-2, dim2=-1)
    err = (Kinv @ resid.unsqueeze(-1)).squeeze(-1) / diag
    var = 1.0 / diag
    ll = -0.5 * (torch.log(2 * torch.pi * var) + err**2 / var)
    return ll - torch.log(scale).unsqueeze(-1)


def _bound(advantage: Tensor, gate: float) -> float:
    """``mean + gate * se`` of the per-trial advantages (``n``-dim Tensor, ``n >= 2``)."""
    n = advantage.shape[0]
    se = float(advantage.std()) / n**0.5 if n > 1 else 0.0
    return float(advantage.mean()) + gate * se


def _loo_flat(model: Any) -> Tensor:
    """``n``-dim Tensor: the LOO log likelihood of each of the flat batched GP's training
    points, summed over the outcomes."""
    with torch.no_grad():
        X = model.train_inputs[0]
        prior = model.forward(X)
        resid = model.train_targets - prior.mean
        scale = model.outcome_transform.stdvs.squeeze(0)
        ll = _loo(prior.covariance_matrix, model.likelihood.noise, resid, scale)
        return ll.reshape(-1, resid.shape[-1]).sum(dim=0)


def _loo_tasks(model: Any, n_target: int) -> Tensor:
    """``n_target``-dim Tensor: the LOO log likelihood of each of the target's training points
    (the first ``n_target`` of each multi-task GP), summed over the outcomes."""
    total = torch.zeros(n_target, dtype=torch.float64)
    with torch.no_grad():
        for gp in model.models:
            X = gp.train_inputs[0]
            prior = gp.forward(X)
            resid = gp.train_targets - prior.mean
            scale = gp.outcome_transform.stdvs.reshape(())
            noise = gp.likelihood.noise
            if noise.shape[-1] != resid.shape[-1]:  # one noise level per task
                noise = noise.reshape(-1)[X[:, -1].long()]
            ll = _loo(prior.covariance_matrix, noise, resid, scale)
            total += ll[..., :n_target].reshape(-1, n_target).sum(dim=0)
    return total


def _models(model: Any) -> list[Any]:
    """The per-outcome GPs of a `ModelListGP`."""
    return list(model.models)
