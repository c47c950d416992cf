"""Tests for objectives and outcome constraints (`tuner.problem`)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tuner import InvalidSpecError, InvalidValuesError, OutcomeConstraint, Trial, TrialState
from tuner.problem import Outcome, Problem, meets_constraints, parse_constraint


def test_parse_constraint_forms() -> None:
    assert parse_constraint("search_seconds <= 30") == OutcomeConstraint("search_seconds", "<=", 30)
    assert parse_constraint(" gain>=-1.5e-2 ") == OutcomeConstraint("gain", ">=", -0.015)
    c = OutcomeConstraint("a", ">=", 2)
    assert parse_constraint(c) is c and str(c) == "a >= 2"


@pytest.mark.parametrize(
    "spec", ["search_seconds < 30", "<= 30", "x <= abc", "x <= inf", "x == 1", "", 3]
)
def test_parse_constraint_rejects(spec: object) -> None:
    with pytest.raises(InvalidSpecError):
        parse_constraint(spec)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "objectives",
    [{}, {"a": "min"}, {"a": "minimise"}, {"": "minimize"}, ["a"], None],
)
def test_bad_objectives(objectives: object) -> None:
    with pytest.raises(InvalidSpecError):
        Problem(objectives)  # type: ignore[arg-type]


def test_duplicate_constraints_rejected() -> None:
    with pytest.raises(InvalidSpecError, match="repeated"):
        Problem({"a": "minimize"}, ["m <= 1", "m <= 1.0"])
    # Bounds that differ only beyond six significant digits are different constraints.
    assert len(Problem({"a": "minimize"}, ["m <= 1000001", "m <= 1000002"]).constraints) == 2


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_constraint_string_reads_back_exactly(bound: float) -> None:
    # Studies store constraints as strings; a reopened study must enforce the same bound.
    c = OutcomeConstraint("mem_bytes", "<=", bound)
    assert parse_constraint(str(c)) == c
    assert str(OutcomeConstraint("t", "<=", 30)) == "t <= 30"  # short where exact


def test_outcome_names_and_values() -> None:
    p = Problem({"lat": "minimize", "sp": "maximize"}, ["t <= 3", "lat <= 2", "u >= 1"])
    assert p.outcome_names == ["lat", "sp", "t", "u"]
    assert p.check_values({"sp": 2, "lat": 1.5}) == {"lat": 1.5, "sp": 2.0}
    for bad in ({"lat": 1.0}, {"lat": 1, "sp": 2, "x": 3}, {"lat": "1", "sp": 2}, [1, 2], 3.0):
        with pytest.raises(InvalidValuesError):
            p.check_values(bad)
    with pytest.raises(InvalidValuesError, match="bool"):
        p.check_values({"lat": True, "sp": 2})
    with pytest.raises(InvalidValuesError, match="constraint metrics"):
        p.check_metrics({"t": 1.0})
    with pytest.raises(InvalidValuesError, match="objective"):
        p.check_metrics({"t": 1.0, "u": 2.0, "lat": 3.0})
    assert p.check_metrics({"t": 1, "u": 2, "extra": 0.5}) == {"t": 1.0, "u": 2.0, "extra": 0.5}


@given(
    direction=st.sampled_from(["minimize", "maximize"]),
    op=st.sampled_from(["<=", ">="]),
    bound=st.floats(-10, 10),
    value=st.floats(-20, 20),
)
def test_constraint_callable_sign_matches_rule(
    direction: str, op: str, bound: float, value: float
) -> None:
    """The BoTorch callable is <= 0 exactly where the constraint holds, in model units."""
    p = Problem(
        {"obj": direction, "other": "maximize"}, [f"obj {op} {bound!r}", f"m {op} {bound!r}"]
    )
    c_obj, c_m = p.constraint_callables()
    model_obj = value if direction == "maximize" else -value
    Z = torch.tensor([[model_obj, 0.0, value]], dtype=torch.float64)
    holds = value <= bound if op == "<=" else value >= bound
    if abs(value - bound) > 1e-9:
        assert bool(c_obj(Z)[0] <= 0) == holds
        assert bool(c_m(Z)[0] <= 0) == holds


def test_outcomes_and_feasibility() -> None:
    p = Problem({"lat": "minimize", "sp": "maximize"}, ["t <= 3"])
    ok = Trial(0, {}, TrialState.COMPLETE, {"lat": 2.0, "sp": 5.0}, {"t": 1.0})
    bad = Trial(1, {}, TrialState.COMPLETE, {"lat": 2.0, "sp": 5.0}, {"t": 4.0})
    assert p.outcomes(ok) == [-2.0, 5.0, 1.0]
    assert p.is_feasible(ok) and not p.is_feasible(bad)
    assert p.non_finite({"lat": math.nan, "sp": 1.0}, {"t": math.inf}) == ["lat", "t"]


def test_meets_constraints_is_the_one_feasibility_rule() -> None:
    cs = [parse_constraint("t <= 3"), parse_constraint("sp >= 1")]
    assert meets_constraints(cs, {"t": 3.0, "sp": 1.0})
    assert not meets_constraints(cs, {"t": 3.5, "sp": 1.0})
    assert not meets_constraints(cs, {"sp": 1.0})  # a metric not told: not met
    assert meets_constraints([], {})
    p = Problem({"lat": "minimize", "sp": "maximize"})
    assert p.maximized({"sp": 5.0, "lat": 2.0}) == [-2.0, 5.0]  # objective order, minimized negated


def test_outcome_is_the_one_validator() -> None:
    p = Problem({"lat": "minimize"}, ["t <= 3"])
    assert p.outcome({"lat": 1}, {"t": 2, "x": 1}) == Outcome(
        {"lat": 1.0}, {"t": 2.0, "x": 1.0}, None
    )
    vals, mets, err = p.outcome({"lat": 1}, {"t": 2, "x": math.nan})  # a tracking metric may be NaN
    assert vals == {"lat": 1.0} and err is None and math.isnan(mets["x"])
    vals, mets, err = p.outcome({"lat": math.inf}, {"t": math.nan})
    assert vals is None and err == "NonFiniteOutcome: lat=inf, t=nan" and "t" in mets
    with pytest.raises(InvalidValuesError, match="constraint metrics"):
        p.outcome({"lat": 1.0}, {})
    with pytest.raises(InvalidValuesError, match="exactly the objectives"):
        p.outcome({"latency": 1.0}, {"t": 1.0})
    # what an evaluate function returned: missing or malformed is FAILED, never raised
    vals, mets, err = p.outcome(*p.split_result({"lat": 1.0, "x": 2.0}), from_evaluate=True)
    assert vals is None and mets == {"x": 2.0}
    assert err == (
        "MissingOutcome: evaluate returned ['lat', 'x'] but not ['t'] "
        "(objectives ['lat'], constraint metrics ['t'])"
    )
    assert p.outcome(*p.split_result({"lat": 1.0, "t": 2.0}), from_evaluate=True) == Outcome(
        {"lat": 1.0}, {"t": 2.0}, None
    )
    _, _, err = p.outcome({"lat": 1.0}, {"t": 1.0, "": 1.0}, from_evaluate=True)
    assert err is not None and err.startswith("InvalidOutcome: Metric names")
