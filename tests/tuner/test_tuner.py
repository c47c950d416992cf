"""Tests for the ask/tell state machine and bad input (`tuner.Tuner`)."""

from __future__ import annotations

import math

import pytest

from spaces import Bool, Choice, Float, Space
from tests.tuner.conftest import FAST, OBJECTIVES, evaluate, make_tuner, run
from tuner import (
    InvalidArgumentError,
    InvalidConfigError,
    InvalidSpecError,
    InvalidTrialRecordError,
    InvalidValuesError,
    SpaceExhaustedError,
    TrialState,
    TrialStateError,
    Tuner,
    TunerError,
    UnknownTrialError,
)


def test_ask_tell_fail_life_cycle(space: Space) -> None:
    tuner = make_tuner(space)
    a, b, c = tuner.ask(3)
    assert [t.id for t in (a, b, c)] == [0, 1, 2]
    assert all(t.state is TrialState.RUNNING and t.values is None for t in (a, b, c))
    values, metrics = evaluate(a.config)
    done = tuner.tell(a.id, values, metrics=metrics)
    assert done.state is TrialState.COMPLETE and done.values == values
    assert done.metrics == metrics
    assert a.state is TrialState.RUNNING  # snapshots never change
    failed = tuner.fail(b.id, RuntimeError("boom"))
    assert failed.state is TrialState.FAILED and failed.error == "RuntimeError: boom"
    assert [t.state for t in tuner.trials] == [
        TrialState.COMPLETE,
        TrialState.FAILED,
        TrialState.RUNNING,
    ]
    assert tuner.trial(2) == c


def test_non_finite_values_fail_the_trial(space: Space) -> None:
    tuner = make_tuner(space)
    (t,) = tuner.ask()
    values, metrics = evaluate(t.config)
    out = tuner.tell(t.id, {**values, "speedup": math.inf}, metrics=metrics)
    assert out.state is TrialState.FAILED and "speedup=inf" in (out.error or "")
    (u,) = tuner.ask()
    out = tuner.tell(u.id, {"latency": math.nan, "speedup": 1.0})
    assert out.state is TrialState.FAILED and out.values is None


def _snapshot(tuner: Tuner) -> list[dict]:
    return [t.to_dict() for t in tuner.trials]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda tu: tu.tell(99, {"latency": 1.0, "speedup": 1.0}), UnknownTrialError),
        (lambda tu: tu.tell(-1, {"latency": 1.0, "speedup": 1.0}), UnknownTrialError),
        (lambda tu: tu.tell("0", {"latency": 1.0, "speedup": 1.0}), UnknownTrialError),
        (lambda tu: tu.fail(7), UnknownTrialError),
        (lambda tu: tu.tell(0, {"latency": 1.0, "speedup": 2.0}), TrialStateError),  # twice
        (lambda tu: tu.fail(0, "late"), TrialStateError),
        (lambda tu: tu.tell(1, {"latency": 1.0}), InvalidValuesError),
        (lambda tu: tu.tell(1, {"latency": 1.0, "speedup": 1.0, "x": 2.0}), InvalidValuesError),
        (lambda tu: tu.tell(1, {"latency": "fast", "speedup": 1.0}), InvalidValuesError),
        (lambda tu: tu.tell(1, [1.0, 2.0]), InvalidValuesError),
        (
            lambda tu: tu.tell(1, {"latency": 1.0, "speedup": 1.0}, metrics={"n": "x"}),
            InvalidValuesError,
        ),
        (lambda tu: tu.fail(1, 42), InvalidArgumentError),
        (lambda tu: tu.ask(0), InvalidArgumentError),
        (lambda tu: tu.ask(1.5), InvalidArgumentError),
        (lambda tu: tu.enqueue({"x": 2.0}), InvalidConfigError),
        (lambda tu: tu.enqueue("x"), InvalidConfigError),
    ],
)
def test_bad_input_raises_and_leaves_state_unchanged(space: Space, call, error) -> None:
    tuner = make_tuner(space)
    first, _ = tuner.ask(2)
    tuner.tell(first.id, *evaluate(first.config))
    before = _snapshot(tuner)
    with pytest.raises(error) as info:
        call(tuner)
    assert isinstance(info.value, TunerError)
    assert _snapshot(tuner) == before


def test_constraint_metric_required(space: Space) -> None:
    tuner = make_tuner(space, constraints=("search_seconds <= 5",))
    (t,) = tuner.ask()
    before = _snapshot(tuner)
    with pytest.raises(InvalidValuesError, match="search_seconds"):
        tuner.tell(t.id, evaluate(t.config)[0], metrics={"n_steps": 1.0})
    assert _snapshot(tuner) == before
    assert tuner.fail(t.id, "timeout").state is TrialState.FAILED  # failing needs no metrics


@pytest.mark.parametrize(
    "kwargs",
    [
        {"seed": -1},
        {"seed": 1.0},
        {"n_initial": -2},
        {"surrogate": object()},
        {"options": {"maxiter": 3}},
        {"reference_point": {"latency": 1.0}},
        {"reference_point": {"latency": 1.0, "speedup": math.nan}},
        {"constraints": ("search_seconds < 3",)},
        {"constraints": None},
    ],
)
def test_bad_settings(space: Space, kwargs: dict) -> None:
    with pytest.raises(InvalidSpecError):
        Tuner(space, OBJECTIVES, **kwargs)


def test_bad_space() -> None:
    with pytest.raises(InvalidSpecError):
        Tuner({"x": Float(0, 1)}, OBJECTIVES)  # type: ignore[arg-type]


def test_enqueued_trials_go_out_first(space: Space) -> None:
    tuner = make_tuner(space)
    config = space.default()
    waiting = tuner.enqueue(config)
    assert waiting.state is TrialState.WAITING and waiting.id == 0
    out = tuner.ask(2)
    assert out[0].id == 0 and out[0].state is TrialState.RUNNING and out[0].config == config
    assert out[1].id == 1 and out[1].config != config


def test_proposals_are_valid_and_distinct(space: Space) -> None:
    tuner = make_tuner(space, n_initial=3)
    run(tuner, 2, batch=2)  # Sobol (and one model point), then a model batch
    configs = [t.config for t in tuner.trials]
    for c in configs:
        space.validate(c)
        assert math.isclose(sum(c["priors"].values()), 1.0, abs_tol=1e-9)
        assert isinstance(c["n"], int) and c["device"] == "h100"
    keys = {str(sorted((k, str(v)) for k, v in c.items())) for c in configs}
    assert len(keys) == len(configs)


def test_exhausted_space_raises_without_change() -> None:
    space = Space({"a": Bool(), "m": Choice(["x", "y"])})
    tuner = Tuner(space, OBJECTIVES, options=FAST, n_initial=2)
    for t in tuner.ask(3):
        tuner.tell(t.id, {"latency": float(t.config["a"]), "speedup": float(t.config["m"] == "x")})
    (last,) = tuner.ask(1)
    assert len({(t.config["a"], t.config["m"]) for t in tuner.trials}) == 4
    tuner.fail(last.id, "x")
    before = _snapshot(tuner)
    with pytest.raises(SpaceExhaustedError):
        tuner.ask(1)
    assert _snapshot(tuner) == before


def test_pareto_respects_constraints(space: Space) -> None:
    tuner = make_tuner(space, constraints=("search_seconds <= 4",), n_initial=8)
    run(tuner, 8)
    front = tuner.pareto()
    assert front, "some trial is feasible"
    done = [t for t in tuner.trials if t.state is TrialState.COMPLETE]
    feasible = [t for t in done if t.metrics["search_seconds"] <= 4]
    for t in front:
        assert t.metrics["search_seconds"] <= 4
        assert not any(
            o.values["latency"] <= t.values["latency"]
            and o.values["speedup"] >= t.values["speedup"]
            and o.values != t.values
            for o in feasible
        )


def test_rebuild_rejects_inconsistent_records(space: Space) -> None:
    tuner = make_tuner(space)
    run(tuner, 2)
    records = [t.to_dict() for t in tuner.trials]
    cases = [
        [records[1]],  # ids must start at 0
        [dict(records[0], config={"x": 5})],
        [dict(records[0], values={"latency": 1.0})],
        [dict(records[0], values={"latency": math.nan, "speedup": 1.0})],
        [dict(records[0], state="RUNNING")],  # RUNNING with values
    ]
    for bad in cases:
        with pytest.raises(InvalidTrialRecordError):
            make_tuner(space, trials=bad)
    failed = dict(records[0], state="FAILED", values={"latency": math.nan, "speedup": 1.0})
    assert make_tuner(space, trials=[failed]).trials[0].state is TrialState.FAILED


def test_settings_dict(space: Space) -> None:
    tuner = make_tuner(space, constraints=("search_seconds <= 4",), seed=3)
    d = tuner.settings_dict()
    assert d["objectives"] == OBJECTIVES and d["constraints"] == ["search_seconds <= 4"]
    assert d["seed"] == 3 and d["n_initial"] == 4 and d["options"]["maxiter"] == FAST.maxiter
