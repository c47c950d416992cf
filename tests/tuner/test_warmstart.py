"""`WarmStartSurrogate`: a related task's trials improve the target's model; an unrelated task
is dropped by the leave-one-out check, so the model is the flat GP's."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from spaces import Float, Space
from tuner.errors import SurrogateError
from tuner.rgpe import RGPESurrogate
from tuner.surrogate import FlatSurrogate, TrainingData
from tuner.warmstart import (
    AGREEMENT,
    MIN_TARGET,
    RelatedTask,
    WarmStartSurrogate,
    ranks_alike,
    suggestions,
    task_model,
)

SPACE = Space({"x": Float(0.0, 1.0), "y": Float(0.0, 1.0)})


def _f(X: torch.Tensor, shift: float = 0.0) -> torch.Tensor:
    return (torch.sin(6 * X[:, 0]) + X[:, 1] ** 2 + shift).unsqueeze(-1)


def _rmse(surrogate: object, data: TrainingData, X: torch.Tensor) -> float:
    model = surrogate.fit(data).model  # type: ignore[attr-defined]
    with torch.no_grad():
        return float(((model.posterior(X).mean - _f(X)) ** 2).mean().sqrt())


@pytest.fixture(scope="module")
def tasks() -> tuple[RelatedTask, RelatedTask, TrainingData, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    Xr, Xu, Xt, Xtest = (
        torch.rand(n, 2, generator=g, dtype=torch.float64) for n in (40, 40, 8, 200)
    )
    related = RelatedTask("shifted", Xr, _f(Xr, 0.3))
    unrelated = RelatedTask("noise", Xu, torch.rand(40, 1, generator=g, dtype=torch.float64))
    return related, unrelated, TrainingData(Xt, _f(Xt), ["f"], {}, SPACE, 0), Xtest


def test_a_related_task_is_kept_and_an_unrelated_one_dropped(tasks) -> None:
    related, unrelated, data, Xtest = tasks
    flat = _rmse(FlatSurrogate(), data, Xtest)
    both = WarmStartSurrogate([related, unrelated])
    warm = _rmse(both, data, Xtest)
    assert warm < 0.2 * flat  # the shifted copy of the target lends its 40 trials
    kept = both.fit(data).description["related"]  # the same fit, kept by its data's digest
    assert [r["name"] for r in kept] == ["shifted"] and kept[0]["correlation"][0] > 0.5
    assert set(both.fit(data).description["loo"]) == {"flat", "shifted", "noise"}
    alone = WarmStartSurrogate([unrelated])
    assert _rmse(alone, data, Xtest) == pytest.approx(flat)  # dropped: the flat GP itself
    assert alone.fit(data).description["related"] == []


def test_a_stricter_gate_needs_more_evidence_to_keep_a_task(tasks) -> None:
    related, _, data, _ = tasks
    strict = WarmStartSurrogate([related], fit_options={"maxiter": 20}, gate=-1e6)
    description = strict.fit(data).description
    mean, bound = description["gate"]["shifted"]  # kept by the default gate (above)
    assert mean > 0 > bound and description["related"] == []
    with pytest.raises(SurrogateError, match="min_target >= 2"):
        WarmStartSurrogate([related], min_target=1)


def test_the_gate_tells_the_tuner_when_to_model_and_a_refit_is_kept(tasks) -> None:
    related, unrelated, data, _ = tasks
    warm = WarmStartSurrogate([related], fit_options={"maxiter": 20})
    assert warm.informed(data)  # kept: the tuner proposes within its initial design
    fitted = warm.fit(data)
    same = TrainingData(data.X.clone(), data.Y.clone(), ["f"], {}, SPACE, 0)
    assert warm.fit(same) is fitted  # equal data: the last fit, not another one
    assert warm.fit(TrainingData(data.X, data.Y, ["f"], {}, SPACE, 1)) is not fitted  # seed
    few = TrainingData(data.X[: MIN_TARGET - 1], data.Y[: MIN_TARGET - 1], ["f"], {}, SPACE, 0)
    assert not warm.informed(few)  # too few target trials to judge: the design runs
    assert not WarmStartSurrogate([unrelated], fit_options={"maxiter": 20}).informed(data)


def test_too_few_target_trials_use_the_flat_gp(tasks) -> None:
    related, _, data, _ = tasks
    few = TrainingData(data.X[: MIN_TARGET - 1], data.Y[: MIN_TARGET - 1], ["f"], {}, SPACE, 0)
    surrogate = WarmStartSurrogate([related])
    description = surrogate.fit(few).description
    assert description["related"] == [] and description["loo"] == {}


def test_related_tasks_must_match_the_target() -> None:
    bad = RelatedTask(
        "wide", torch.zeros(3, 5, dtype=torch.float64), torch.zeros(3, 1, dtype=torch.float64)
    )
    with pytest.raises(SurrogateError, match="'wide' has 5 input columns"):
        WarmStartSurrogate([bad]).check(SPACE, ["f"], 1)
    with pytest.raises(SurrogateError, match="Y must be finite"):
        RelatedTask(
            "nan",
            torch.zeros(1, 2, dtype=torch.float64),
            torch.full((1, 1), float("nan"), dtype=torch.float64),
        )


def test_a_kept_task_suggests_its_best_and_a_dropped_one_nothing(tasks) -> None:
    related, unrelated, data, _ = tasks
    top = related.X[torch.argsort(related.Y[:, 0], descending=True)[:2]]
    best = [dataclasses.replace(r, best=r.X[:2] if r is unrelated else top)
            for r in (related, unrelated)]  # fmt: skip
    fitted = WarmStartSurrogate(best, fit_options={"maxiter": 20}).fit(data)
    assert [r["name"] for r in fitted.description["related"]] == ["shifted"]
    assert fitted.suggested is not None and torch.equal(fitted.suggested, top)  # kept's only
    alone = WarmStartSurrogate(best[1:], fit_options={"maxiter": 20}).fit(data)
    assert alone.suggested is None  # dropped: nothing to try first
    with pytest.raises(SurrogateError, match="best must be k x d"):
        dataclasses.replace(related, best=torch.zeros(2, 3, dtype=torch.float64))


def test_a_dropped_task_whose_best_holds_up_on_the_target_suggests_the_rest(tasks) -> None:
    _, unrelated, data, _ = tasks
    top, bottom = int(data.Y[:, 0].argmax()), int(data.Y[:, 0].argmin())
    rest = unrelated.X[:2]
    for tried, holds in ((top, True), (bottom, False)):  # its best, tried: on the front or not
        task = dataclasses.replace(unrelated, best=torch.cat([data.X[tried : tried + 1], rest]))
        fitted = WarmStartSurrogate([task], fit_options={"maxiter": 20}).fit(data)
        assert fitted.description["related"] == []  # the gate drops it either way
        assert (fitted.suggested is not None) == holds
    none = TrainingData(data.X[:0], data.Y[:0], ["f"], {}, SPACE, 0)
    assert suggestions([task], [], none) == (None, {})  # nothing tried yet; no look asked


def test_the_rank_rule_suggests_a_task_that_orders_the_first_trials_alike(tasks) -> None:
    related, _, data, _ = tasks
    mirror = RelatedTask("mirror", related.X, 1.0 - related.Y)  # the target's order reversed
    top = related.X[torch.argsort(related.Y[:, 0], descending=True)[:2]]
    best = [dataclasses.replace(r, best=top) for r in (related, mirror)]
    options = {"maxiter": 20}
    same, reversed_ = (task_model(r, data, options, 100) for r in best)
    assert ranks_alike(same, data, 3) and not ranks_alike(reversed_, data, 3)
    assert not ranks_alike(same, data, data.n + 1)  # fewer trials than it judges
    for surrogate in (
        WarmStartSurrogate(best, fit_options=options, gate=-1e6, rank=3),  # the gate keeps none
        RGPESurrogate(best, fit_options=options, n_samples=32, rank=3),
    ):
        fitted = surrogate.fit(data)
        assert fitted.suggested is not None and torch.equal(fitted.suggested, top)  # one task's
        look = fitted.description["look"]  # what the user sees of the look
        assert look["needs"] == AGREEMENT and set(look["alike"]) == {"shifted", "mirror"}
        assert look["alike"]["shifted"] >= AGREEMENT > look["alike"]["mirror"]
        two = TrainingData(data.X[:2], data.Y[:2], ["f"], {}, SPACE, 0)
        assert surrogate.fit(two).suggested is None  # judged on the third trial, not before
        assert "look" not in surrogate.fit(two).description
