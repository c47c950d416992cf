"""`RGPESurrogate`: a related task's GP earns a ranking weight, an unrelated one is diluted away
(the model is then the flat GP itself); the ensemble's posterior is in the target's units and
drives the tuner's acquisition."""

from __future__ import annotations

import pytest
import torch

from spaces import Float, Space
from tuner import Tuner, TunerOptions
from tuner.errors import SurrogateError
from tuner.rgpe import MIN_TARGET, RankWeightedEnsemble, RGPESurrogate, rank_weights
from tuner.surrogate import FlatSurrogate, TrainingData
from tuner.warmstart import RelatedTask

SPACE = Space({"x": Float(0.0, 1.0), "y": Float(0.0, 1.0)})
FAST = {"maxiter": 50}


def _f(X: torch.Tensor, shift: float = 0.0) -> torch.Tensor:
    return (torch.sin(6 * X[:, 0]) + 0.3 * X[:, 1] ** 2 + shift).unsqueeze(-1)


def _rand(g: torch.Generator, n: int) -> torch.Tensor:
    return torch.rand(n, 2, generator=g, dtype=torch.float64)


@pytest.fixture(scope="module")
def tasks() -> tuple[RelatedTask, RelatedTask, TrainingData]:
    g = torch.Generator().manual_seed(0)
    Xr, Xu, Xt = _rand(g, 30), _rand(g, 30), _rand(g, 5)
    related = RelatedTask("scaled", Xr, 3 * _f(Xr, 0.3) - 1)  # same order, other units
    unrelated = RelatedTask("noise", Xu, torch.rand(30, 1, generator=g, dtype=torch.float64))
    return related, unrelated, TrainingData(Xt, _f(Xt), ["f"], {}, SPACE, 0)


def test_a_related_task_is_weighted_and_an_unrelated_one_dropped(tasks) -> None:
    related, unrelated, data = tasks
    both = RGPESurrogate([related, unrelated], fit_options=FAST)
    fitted = both.fit(data)
    model, weights = fitted.model, fitted.description["weights"]
    assert set(weights) == {"scaled", "noise", "target"}
    assert weights["scaled"][0] > 0.5 and weights["noise"] == [0.0]
    assert sum(w[0] for w in weights.values()) == pytest.approx(1.0)
    assert isinstance(model, RankWeightedEnsemble) and len(model.models) == 2  # noise left out
    alone = RGPESurrogate([unrelated], fit_options=FAST)
    flat = FlatSurrogate(FAST).fit(data).model
    Xq = _rand(torch.Generator().manual_seed(1), 7)
    dropped = alone.fit(data)
    with torch.no_grad():  # dropped: the flat GP itself
        assert torch.equal(dropped.model.posterior(Xq).mean, flat.posterior(Xq).mean)
    assert dropped.description["weights"]["noise"] == [0.0]


def test_a_task_over_fewer_parameters_still_helps_on_the_shared_one() -> None:
    """Mapped from a space without ``y`` (its trials at y's default): the target's first trials
    are ordered by ``x``, so the related task's GP earns weight."""
    g = torch.Generator().manual_seed(2)
    Xr = _rand(g, 30)
    Xr[:, 1] = 0.5
    Xt = _rand(g, 4)
    surrogate = RGPESurrogate([RelatedTask("no-y", Xr, _f(Xr))], fit_options=FAST)
    fitted = surrogate.fit(TrainingData(Xt, _f(Xt), ["f"], {}, SPACE, 0))
    assert fitted.description["weights"]["no-y"][0] > 0.5


def test_the_ensemble_is_in_the_target_units() -> None:
    """With all weight on the target's GP the ensemble reproduces its posterior (mean and
    variance), for a batch of q-point inputs and two outcomes."""
    g = torch.Generator().manual_seed(3)
    X = _rand(g, 8)
    Y = torch.cat([10 * _f(X) + 5, -(X**2).sum(-1, keepdim=True)], dim=-1)
    flat = FlatSurrogate(FAST).fit(TrainingData(X, Y, ["a", "b"], {}, SPACE, 0)).model
    weights = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    t = flat.outcome_transform
    ens = RankWeightedEnsemble([flat, flat], weights, t.means.reshape(-1), t.stdvs.reshape(-1))
    Xq = torch.rand(3, 4, 2, generator=g, dtype=torch.float64)
    with torch.no_grad():
        got, want = ens.posterior(Xq), flat.posterior(Xq)
        assert got.mean.shape == (3, 4, 2) and ens.num_outputs == 2
        assert torch.allclose(got.mean, want.mean, atol=1e-9)
        assert torch.allclose(got.variance, want.variance, atol=1e-9)
        assert ens.posterior(Xq, output_indices=[1]).mean.shape == (3, 4, 1)


def test_rank_weights_split_ties_and_dilute() -> None:
    # 2 related models and the target, 4 samples, 1 outcome
    losses = torch.tensor([[[0.0], [1.0], [0.0], [2.0]], [[9.0]] * 4, [[0.0], [0.0], [1.0], [1.0]]])
    w = rank_weights(losses)
    assert torch.allclose(w.sum(dim=0), torch.ones(1, dtype=torch.float64))
    # sample 0: tie of model 0 and target; 1: target; 2: model 0; 3: target
    assert w[:, 0].tolist() == pytest.approx([0.375, 0.0, 0.625])
    assert rank_weights(losses, dilution=False)[1, 0] == 0.0  # never best either way
    worse = torch.tensor([[[3.0], [3.0], [0.0], [3.0]], [[0.0], [1.0], [1.0], [1.0]]])
    assert rank_weights(worse)[0, 0] == 0.0  # median 3 > the target's 95th percentile (1)
    assert rank_weights(worse, dilution=False)[0, 0] == 0.25


def test_fits_repeat_and_few_trials_use_the_flat_gp(tasks) -> None:
    related, _, data = tasks
    a, b = (RGPESurrogate([related], fit_options=FAST) for _ in range(2))
    assert a.fit(data).description["weights"] == b.fit(data).description["weights"]
    assert a.informed(data) and a.fit(data) is a.fit(data)  # weighted; equal data: kept fit
    few = TrainingData(data.X[: MIN_TARGET - 1], data.Y[: MIN_TARGET - 1], ["f"], {}, SPACE, 0)
    assert a.fit(few).description["weights"] == {} and not a.informed(few)


def test_the_tuner_proposes_with_the_ensemble() -> None:
    g = torch.Generator().manual_seed(4)
    Xs = _rand(g, 20)
    Ys = -torch.stack([(Xs[:, 0] - 0.3) ** 2 + Xs[:, 1], (Xs[:, 0] - 0.7) ** 2 - Xs[:, 1]], -1)
    tuner = Tuner(
        SPACE,
        {"f1": "minimize", "f2": "minimize"},
        seed=0,
        n_initial=3,
        surrogate=RGPESurrogate([RelatedTask("src", Xs, Ys)], fit_options=FAST),
        options=TunerOptions(num_restarts=1, raw_samples=16, maxiter=5, mc_samples=16),
    )
    for _ in range(5):
        (trial,) = tuner.ask(1)
        x, y = trial.config["x"], trial.config["y"]
        tuner.tell(trial.id, {"f1": (x - 0.3) ** 2 + y, "f2": (x - 0.7) ** 2 - y})
    assert len(tuner.trials) == 5
    assert tuner.last_fit is not None
    assert set(tuner.last_fit.description["weights"]) == {"src", "target"}


def test_related_tasks_must_match_the_target() -> None:
    bad = RelatedTask(
        "wide", torch.zeros(3, 5, dtype=torch.float64), torch.zeros(3, 1, dtype=torch.float64)
    )
    with pytest.raises(SurrogateError, match="'wide' has 5 input columns.*Encode its trials"):
        RGPESurrogate([bad]).check(SPACE, ["f"], 1)
