"""Tests for the per-group surrogate (`tuner.groups`): objectives modelled per run group."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from spaces import Float, Space
from tuner import GroupedSurrogate, InvalidArgumentError, Tuner, run_metric
from tuner.groups import run_groups
from tuner.surrogate import TrainingData

SPACE = Space({"x0": Float(0.0, 1.0), "x1": Float(0.0, 1.0)})
FIT = {"maxiter": 50}


def _groups(X: torch.Tensor) -> dict[str, torch.Tensor]:
    """Two workloads that respond to different parameters (the objective is their mean)."""
    return {"a": torch.sin(6 * X[..., 0]), "b": X[..., 1] ** 2}


def _data(n: int = 14, seed: int = 0, direction: str = "maximize") -> TrainingData:
    gen = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=gen, dtype=torch.float64)
    runs = {}
    for g, f in _groups(X).items():
        for r in range(2):  # two seeds per workload
            noise = 0.01 * torch.randn(n, generator=gen, dtype=torch.float64)
            runs[run_metric("gain", f"{g}/{r}")] = f + noise
    mean = torch.stack(list(runs.values()), -1).mean(-1, keepdim=True)
    sign = -1.0 if direction == "minimize" else 1.0  # Y: the tuner negates minimized objectives
    return TrainingData(
        X, sign * mean, ["gain"], runs, SPACE, seed, 1, None, directions=(direction,)
    )  # fmt: skip


@pytest.mark.parametrize("task_model", ["multitask", "independent"])
def test_the_objective_is_the_average_of_the_groups_posterior(task_model: str) -> None:
    data = _data()
    surrogate = GroupedSurrogate(task_model, FIT)
    fitted = surrogate.fit(data)
    model, info = fitted.model, fitted.description
    assert info["model"] == f"GroupedSurrogate({task_model})" and info["groups"] == ["a", "b"]
    Xq = torch.rand(6, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    post = model.posterior(Xq)
    assert post.mean.shape == (6, 1) and model.num_outputs == 1
    # exact average: the groups' joint posterior, summed and scaled (mean and covariance)
    joint = model.models[0].posterior(Xq)
    assert torch.allclose(post.mean[..., 0], joint.mean.mean(-1))
    cov = joint.distribution.covariance_matrix
    if getattr(joint.distribution, "_interleaved", True):
        blocks = cov.reshape(6, 2, 6, 2)
    else:  # task-major
        blocks = cov.reshape(2, 6, 2, 6).permute(1, 0, 3, 2)
    want = blocks.sum(dim=(1, 3)) / 4
    assert torch.allclose(post.distribution.covariance_matrix, want, atol=1e-10)
    truth = sum(_groups(Xq).values()) / 2
    assert float((post.mean[..., 0] - truth).abs().max().detach()) < 0.3  # it learnt the function
    batched = model.posterior(Xq.reshape(3, 2, 2))  # the acquisition's batch x q x d
    assert batched.mean.shape == (3, 2, 1)


def test_a_multitask_fit_reports_the_groups_correlation_and_is_seeded() -> None:
    data = _data()
    first = GroupedSurrogate("multitask", FIT)
    Xq = torch.rand(4, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    fitted = first.fit(data)
    a = fitted.model.posterior(Xq)
    b = GroupedSurrogate("multitask", FIT).fit(data).model.posterior(Xq)
    assert torch.equal(a.mean, b.mean) and torch.equal(a.variance, b.variance)
    (corr,) = fitted.description["task_correlations"]
    assert len(corr) == 2 and corr[0][0] == pytest.approx(1.0) and -1 <= corr[0][1] <= 1


def test_minimized_objectives_are_modelled_in_the_maximization_convention() -> None:
    data = _data(direction="minimize")  # per-run values in the objective's own direction
    groups, (values,) = run_groups(data)  # type: ignore[misc]
    assert groups == ["a", "b"]
    assert torch.allclose(values.mean(-1), data.Y[:, 0])


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: dataclasses.replace(d, metrics={}), "report no per-run values"),
        (
            lambda d: dataclasses.replace(
                d, metrics={k: v for k, v in d.metrics.items() if "@a/" in k}
            ),
            "one group",
        ),
        (lambda d: dataclasses.replace(d, Y=d.Y + 0.5), "not the mean of its runs' values on 14"),
        (
            lambda d: dataclasses.replace(
                d,
                Y=torch.cat([d.Y, d.Y], -1),
                outcome_names=["gain", "cost"],
                directions=("maximize",),
            ),
            "outcome constraints",
        ),
    ],
)
def test_without_groups_to_model_it_uses_the_flat_gp_and_says_why(change, reason) -> None:
    data = change(_data())
    surrogate = GroupedSurrogate("multitask", FIT)
    fitted = surrogate.fit(data)
    assert fitted.description["model"] == "flat" and reason in fitted.description["reason"]
    assert fitted.model.posterior(torch.rand(3, 2, dtype=torch.float64)).mean.shape == (
        3,
        data.Y.shape[-1],
    )


def test_a_few_clipped_trials_do_not_turn_it_off() -> None:
    data = _data()
    Y = data.Y.clone()
    Y[:3] += 0.5  # as if the tuner had clipped an outlying run of three trials
    surrogate = GroupedSurrogate("independent", FIT)
    fitted = surrogate.fit(dataclasses.replace(data, Y=Y))
    assert fitted.description["model"] == "GroupedSurrogate(independent)"


def test_an_unknown_task_model_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="task_model must be one of"):
        GroupedSurrogate("kronecker")


def test_a_tuner_proposes_with_it_from_reported_runs() -> None:
    from tuner import TunerOptions

    options = TunerOptions(num_restarts=2, raw_samples=16, maxiter=20, mc_samples=16)
    surrogate = GroupedSurrogate("multitask", FIT)
    tuner = Tuner(SPACE, {"gain": "maximize"}, seed=0, n_initial=5, options=options,
                  surrogate=surrogate)  # fmt: skip
    for _ in range(7):
        (trial,) = tuner.ask(1)
        x = torch.tensor([[trial.config["x0"], trial.config["x1"]]], dtype=torch.float64)
        runs = {run_metric("gain", f"{g}/0"): float(v) for g, v in _groups(x[0]).items()}
        tuner.tell(trial.id, {"gain": sum(runs.values()) / 2}, metrics=runs)
    assert tuner.last_fit is not None
    assert tuner.last_fit.description["model"] == "GroupedSurrogate(multitask)"
    assert tuner.last_fit.description["n_train"] >= 5
