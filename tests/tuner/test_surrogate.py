"""Tests for the surrogate interface and the default flat GP (`tuner.surrogate`)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.tuner.conftest import make_space
from tuner import Fitted, FlatSurrogate, Surrogate, SurrogateError, TrainingData


def _data(n: int = 12, seed: int = 0) -> TrainingData:
    space = make_space()
    X = space.sample_unit(n, 7)
    Y = torch.stack([X[:, 0] ** 2, X[:, 1] - X[:, 6], X.sum(-1)], -1)
    return TrainingData(
        X=X,
        Y=Y,
        outcome_names=["latency", "speedup", "search_seconds"],
        metrics={"n_steps": torch.full((n,), math.nan, dtype=torch.float64)},
        space=space,
        seed=seed,
        n_objectives=2,
    )


def test_flat_gp_has_one_output_per_outcome_and_is_seeded() -> None:
    data = _data()
    surrogate = FlatSurrogate({"maxiter": 30})
    fitted = surrogate.fit(data)
    model = fitted.model
    Xq = make_space().sample_unit(5, 3)
    post = model.posterior(Xq)
    assert post.mean.shape == (5, 3) and post.mean.dtype == torch.float64
    again = FlatSurrogate({"maxiter": 30}).fit(data).model.posterior(Xq)
    assert torch.equal(post.mean, again.mean) and torch.equal(post.variance, again.variance)
    assert fitted.proposer is None and fitted.veto is None
    info = fitted.description
    assert info["n_train"] == 12 and info["outcomes"] == data.outcome_names
    assert len(info["lengthscales"]) == 3


def test_flat_gp_interpolates_its_training_data() -> None:
    data = _data(20)
    model = FlatSurrogate({"maxiter": 50}).fit(data).model
    err = (model.posterior(data.X).mean - data.Y).abs().max()
    assert err < 0.2 * data.Y.abs().max()


@pytest.mark.parametrize(
    "change",
    [
        {"Y": torch.zeros(11, 3, dtype=torch.float64)},
        {"X": torch.zeros(12, 10)},
        {"outcome_names": ["a", "b"]},
        {"Y": torch.full((12, 3), math.nan, dtype=torch.float64)},
        {"metrics": {"m": torch.zeros(3, dtype=torch.float64)}},
    ],
)
def test_training_data_is_validated(change: dict) -> None:
    fields = {k: getattr(_data(), k) for k in ("X", "Y", "outcome_names", "metrics", "space")}
    with pytest.raises(SurrogateError):
        TrainingData(**{**fields, **change}, seed=0)


def test_default_n_objectives_is_all_outcomes() -> None:
    d = _data()
    plain = TrainingData(d.X, d.Y, d.outcome_names, {}, d.space, 0)
    assert plain.n_objectives == 3 and plain.n == 12


def test_empty_data_is_rejected() -> None:
    d = _data()
    empty = TrainingData(d.X[:0], d.Y[:0], d.outcome_names, {}, d.space, 0)
    with pytest.raises(SurrogateError, match="at least one"):
        FlatSurrogate().fit(empty)


def test_surrogate_is_abstract() -> None:
    with pytest.raises(TypeError):
        Surrogate()  # type: ignore[abstract]


def test_reported_standard_errors_become_the_gps_known_noise() -> None:
    from gpytorch.likelihoods import FixedNoiseGaussianLikelihood

    from tuner.problem import Problem
    from tuner.trial import Trial, TrialState

    space = make_space()
    configs = space.sample(10, seed=3)
    problem = Problem({"latency": "minimize", "speedup": "maximize"})

    def trial(i: int, sem: bool) -> Trial:
        x = space.to_unit([configs[i]])[0]
        metrics = {"n_steps": float(i)}
        if sem:
            metrics |= {"latency.sem": 0.01 * (i + 1), "speedup.sem": 0.0}
        vals = {"latency": float(x[0]), "speedup": float(x[1] - x[2])}
        return Trial(i, configs[i], TrialState.COMPLETE, vals, metrics)

    data = problem.training_data(space, [trial(i, True) for i in range(10)], seed=0)
    assert data.Yvar is not None and data.Yvar.shape == (10, 2)
    assert data.Yvar[3, 0] == pytest.approx(0.04**2) and data.Yvar[3, 1] == 0.0
    assert set(data.metrics) == {"n_steps"}  # standard errors are not tracking metrics
    noise = data.noise()
    assert noise is not None and bool((noise[:, 1] > 0).all())  # a zero error is floored
    surrogate = FlatSurrogate({"maxiter": 20})
    fitted = surrogate.fit(data)
    assert isinstance(fitted.model.likelihood, FixedNoiseGaussianLikelihood)
    assert fitted.description["noise"] == "observed"
    # one trial without standard errors: the noise is inferred for all
    mixed = [trial(i, i != 4) for i in range(10)]
    assert problem.training_data(space, mixed, seed=0).Yvar is None
    with pytest.raises(SurrogateError, match="Yvar"):
        TrainingData(data.X, data.Y, data.outcome_names, {}, space, 0, 2, Yvar=-data.Yvar - 1)


def test_training_data_carries_the_objectives_directions() -> None:
    from tuner.problem import Problem
    from tuner.trial import Trial, TrialState

    space = make_space()
    config = space.sample(1, seed=0)[0]
    problem = Problem({"latency": "minimize", "speedup": "maximize"})
    done = Trial(0, config, TrialState.COMPLETE, {"latency": 2.0, "speedup": 1.0}, {})
    data = problem.training_data(space, [done], seed=0)
    assert data.directions == ("minimize", "maximize")
    with pytest.raises(SurrogateError, match="directions"):
        TrainingData(data.X, data.Y, data.outcome_names, {}, space, 0, 2, directions=("up",))


def test_saas_gp_shrinks_irrelevant_inputs_and_models_every_outcome() -> None:
    from tuner import SaasSurrogate

    data = _data(20)
    surrogate = SaasSurrogate({"maxiter": 50})
    fitted = surrogate.fit(data)
    Xq = make_space().sample_unit(4, 5)
    post = fitted.model.posterior(Xq)
    assert post.mean.shape == (4, 3) and post.mean.dtype == torch.float64
    again = SaasSurrogate({"maxiter": 50}).fit(data).model.posterior(Xq)
    assert torch.equal(post.mean, again.mean)  # seeded
    ls = fitted.description["lengthscales"][0]  # latency = x0 ** 2 reads column 0 only
    assert ls[0] == min(ls) and max(ls) > 10 * ls[0]
    with pytest.raises(SurrogateError, match="at least one"):
        SaasSurrogate().fit(
            TrainingData(data.X[:0], data.Y[:0], data.outcome_names, {}, data.space, 0)
        )


class _Counted:
    """Counts the posterior calls of a model (the acquisition functions call ``posterior``)."""

    def __init__(self, model) -> None:  # noqa: ANN001
        self.calls = 0
        inner = model.posterior

        def posterior(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            self.calls += 1
            return inner(*args, **kwargs)

        model.posterior = posterior


class _SecondModel(FlatSurrogate):
    """The flat GP with a second flat GP of the same data as its fit's `proposer`, or as its
    `veto` with margin 0 (only the pool's best point under the second model's acquisition
    passes)."""

    def __init__(self, role: str) -> None:
        super().__init__({"maxiter": 15})
        self.role = role
        self.fitted: list[_Counted] = []
        self.seconds: list[_Counted] = []

    def fit(self, data: TrainingData) -> Fitted:
        model = super().fit(data).model
        second = super().fit(data).model
        self.fitted.append(_Counted(model))
        self.seconds.append(_Counted(second))
        if self.role == "proposer":
            return Fitted(model, proposer=second)
        return Fitted(model, veto=(second, 0.0))


def test_a_proposer_optimizes_and_the_fitted_model_ranks() -> None:
    from tests.tuner.conftest import make_tuner, run

    surrogate = _SecondModel("proposer")
    tuner = make_tuner(make_space(), surrogate=surrogate, n_initial=3)
    run(tuner, 5)
    assert len(surrogate.fitted) == 2  # two model-based proposals after the design
    for fitted, proposer in zip(surrogate.fitted, surrogate.seconds):
        assert fitted.calls >= 1  # the pool is ranked by the fitted model's acquisition
        assert proposer.calls > 2 * fitted.calls  # the optimizer ran on the proposer's


def test_a_vetoing_model_is_optimized_too_and_scores_the_pool() -> None:
    from tests.tuner.conftest import make_tuner, run

    surrogate = _SecondModel("veto")
    tuner = make_tuner(make_space(), surrogate=surrogate, n_initial=3)
    run(tuner, 5)
    assert len(surrogate.fitted) == 2
    for fitted, vetoing in zip(surrogate.fitted, surrogate.seconds):
        assert fitted.calls > 2  # its acquisition is optimized and ranks the pool
        assert vetoing.calls > 2  # so is the vetoing model's, which also scores the pool


def test_the_best_candidate_skips_vetoed_points_unless_nothing_else_is_left() -> None:
    from tuner.candidates import KeySet, best_candidate

    pool = torch.tensor([[0.1], [0.4], [0.7], [0.9]], dtype=torch.float64)

    def rank(X: torch.Tensor) -> torch.Tensor:  # prefers large x
        return X[..., 0, 0]

    def guard(X: torch.Tensor) -> torch.Tensor:  # a log-acquisition peaked at 0.4
        return -50.0 * (X[..., 0, 0] - 0.4) ** 2

    assert float(best_candidate(pool, rank, KeySet())[0]) == 0.9  # type: ignore[arg-type,index]
    veto = (guard, 10.0)  # 0.9 is 12.5 nats below the pool's best under the guard
    best = best_candidate(pool, rank, KeySet(), veto)  # type: ignore[arg-type]
    assert best is not None and float(best[0]) == 0.7
    taken = KeySet(pool[:3])
    best = best_candidate(pool, rank, taken, veto)  # type: ignore[arg-type]
    assert best is not None and float(best[0]) == 0.9  # the vetoed point is the last resort
    assert best_candidate(pool, rank, KeySet(pool), veto) is None  # type: ignore[arg-type]
