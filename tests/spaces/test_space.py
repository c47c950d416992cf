"""Tests for `spaces`: round trips (property-based), sampling, constraints, bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spaces import Bool, Choice, Fixed, Float, Int, Simplex, Space, SpaceError

RULES = [f"rule{i}" for i in range(8)]


def make_space() -> Space:
    return Space(
        {
            "population": Int(8, 256, log=True, default=32),
            "m": Int(1, 8),
            "tau": Float(0.01, 10.0, log=True),
            "alpha": Float(1.0, 1.2),
            "selection": Choice(["softmax", "tournament", "uniform"]),
            "level": Choice([1, 2, 3], ordered=True),
            "restart": Bool(),
            "device": Fixed("h100"),
            "priors": Simplex(RULES),
        }
    )


SPACE = make_space()


@st.composite
def configs(draw: st.DrawFn) -> dict:
    weights = draw(st.lists(st.floats(0.0, 1.0), min_size=len(RULES), max_size=len(RULES)))
    total = sum(weights)
    if total <= 1e-9:
        weights, total = [1.0] * len(RULES), float(len(RULES))
    return {
        "population": draw(st.integers(8, 256)),
        "m": draw(st.integers(1, 8)),
        "tau": draw(st.floats(0.01, 10.0)),
        "alpha": draw(st.floats(1.0, 1.2)),
        "selection": draw(st.sampled_from(["softmax", "tournament", "uniform"])),
        "level": draw(st.sampled_from([1, 2, 3])),
        "restart": draw(st.booleans()),
        "device": "h100",
        "priors": {r: w / total for r, w in zip(RULES, weights)},
    }


def assert_same_config(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], dict):
            for r in a[k]:
                assert math.isclose(a[k][r], b[k][r], rel_tol=1e-9, abs_tol=1e-12)
        elif isinstance(a[k], float):
            assert math.isclose(a[k], b[k], rel_tol=1e-9), (k, a[k], b[k])
        else:
            assert a[k] == b[k] and type(a[k]) is type(b[k]), (k, a[k], b[k])


@settings(max_examples=60, deadline=None)
@given(configs())
def test_config_unit_config_is_identity(config: dict) -> None:
    X = SPACE.to_unit([config])
    assert X.shape == (1, SPACE.dim) and X.dtype == torch.float64
    assert ((X >= 0) & (X <= 1)).all()
    assert_same_config(SPACE.from_unit(X)[0], SPACE.validate(config))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-2.0, 3.0, allow_nan=False), min_size=SPACE.dim, max_size=SPACE.dim))
def test_any_unit_point_decodes_to_valid_config(row: list[float]) -> None:
    X = torch.tensor([row], dtype=torch.float64)
    config = SPACE.from_unit(X)[0]
    SPACE.validate(config)  # raises if invalid
    P = SPACE.project(X)
    assert torch.allclose(SPACE.project(P), P, rtol=0, atol=1e-12)  # idempotent
    for idx, coeffs, rhs in SPACE.equality_constraints:
        assert abs(float((P[0, idx] * coeffs).sum()) - rhs) < 1e-9


def test_sample_is_seeded_valid_and_in_bounds() -> None:
    a, b, c = SPACE.sample(64, seed=3), SPACE.sample(64, seed=3), SPACE.sample(64, seed=4)
    assert a == b and a != c
    for config in a:
        SPACE.validate(config)
    X = SPACE.sample_unit(64, seed=3)
    assert torch.equal(X, SPACE.to_unit(a))
    assert ((X >= 0) & (X <= 1)).all()
    assert torch.allclose(X[:, SPACE.simplex_dims["priors"]].sum(-1), torch.ones(64, dtype=X.dtype))
    for j, allowed in SPACE.discrete_dims.items():
        assert all(any(abs(x - v) < 1e-12 for v in allowed) for x in X[:, j].tolist())


def test_sample_covers_choices_and_int_ends() -> None:
    cs = SPACE.sample(256, seed=0)
    assert {c["selection"] for c in cs} == {"softmax", "tournament", "uniform"}
    assert {c["m"] for c in cs} == set(range(1, 9))
    w = np.array([[c["priors"][r] for r in RULES] for c in cs])
    assert np.allclose(w.mean(0), 1 / len(RULES), atol=0.03)  # uniform on the simplex


def test_botorch_metadata() -> None:
    assert SPACE.bounds.shape == (2, SPACE.dim)
    assert SPACE.categorical_dims == [[4, 5, 6]]
    assert SPACE.simplex_dims == {"priors": list(range(9, 17))}
    assert SPACE.discrete_dims[8] == [0.0, 1.0]  # restart
    assert SPACE.discrete_dims[7] == [0.0, 0.5, 1.0]  # ordered level
    assert len(SPACE.columns) == SPACE.dim
    ((idx, coeffs, rhs),) = SPACE.equality_constraints
    assert idx.tolist() == list(range(9, 17)) and rhs == 1.0 and coeffs.dtype == torch.float64


def test_json_round_trip() -> None:
    d = json.loads(json.dumps(SPACE.to_dict()))
    assert d["format_version"] == 1
    assert Space.from_dict(d) == SPACE
    assert Space.from_dict(d).default() == SPACE.default()


def test_newer_format_is_refused_with_upgrade_hint() -> None:
    d = SPACE.to_dict() | {"format_version": 99}
    with pytest.raises(SpaceError, match="newer.*Upgrade"):
        Space.from_dict(d)


def test_defaults() -> None:
    d = SPACE.default()
    SPACE.validate(d)
    assert d["population"] == 32 and d["priors"]["rule0"] == pytest.approx(1 / 8)
    assert d["tau"] == pytest.approx(math.sqrt(0.01 * 10.0))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Float(1.0, 1.0), "low < high"),
        (lambda: Float(2.0, 1.0), "low < high"),
        (lambda: Float(0.0, 1.0, log=True), "low > 0"),
        (lambda: Int(0, 10, log=True), "low > 0"),
        (lambda: Int(1.5, 3), "integer"),
        (lambda: Float(0.0, 1.0, default=2.0), r"\[0.0, 1.0\]"),
        (lambda: Choice([]), "at least one"),
        (lambda: Choice(["a", "a"]), "distinct"),
        (lambda: Choice([[1, 2]]), "JSON scalars"),
        (lambda: Simplex(["only"]), "at least 2"),
        (lambda: Simplex(["a", "b", "a"]), "distinct"),
        (lambda: Simplex(["a", ""]), "non-empty"),
        (lambda: Simplex(["a", "b"], default={"a": 0.5, "b": 0.6}), "sum to 1"),
        (lambda: Fixed(object()), "JSON"),
        (lambda: Space({}), "non-empty"),
        (lambda: Space({"x": 3}), "spaces parameter"),
    ],
)
def test_bad_definitions_raise_clear_errors(build, message: str) -> None:
    with pytest.raises(SpaceError, match=message):
        build()


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"population": 7}, r"\[8, 256\]"),
        ({"population": 8.5}, "integer"),
        ({"tau": "fast"}, "number"),
        ({"tau": float("nan")}, "finite"),
        ({"selection": "random"}, "one of"),
        ({"restart": 1}, "True or False"),
        ({"device": "a100"}, "fixed"),
        ({"priors": {r: 0.2 for r in RULES}}, "sum to 1"),
        ({"priors": {r: (1.0 if r == "rule0" else 0.0) for r in RULES[:-1]}}, "missing"),
        ({"priors": {**{r: 0.125 for r in RULES}, "rule0": -0.125, "rule1": 0.375}}, ">= 0"),
        ({"priors": [0.5, 0.5]}, "dict"),
    ],
)
def test_bad_configs_raise_clear_errors(patch: dict, message: str) -> None:
    config = SPACE.default() | patch
    with pytest.raises(SpaceError, match=message):
        SPACE.validate(config)
    with pytest.raises(SpaceError, match=message):
        SPACE.to_unit([config])


def test_missing_and_extra_keys() -> None:
    config = SPACE.default()
    config.pop("tau")
    config["bogus"] = 1
    with pytest.raises(SpaceError, match=r"missing \['tau'\], unknown \['bogus'\]"):
        SPACE.validate(config)


def test_shape_errors() -> None:
    with pytest.raises(SpaceError, match="wrap one in a list"):
        SPACE.to_unit(SPACE.default())  # type: ignore[arg-type]
    with pytest.raises(SpaceError, match="n x 17"):
        SPACE.from_unit(torch.zeros(SPACE.dim))


def test_degenerate_simplex_block_decodes_uniform() -> None:
    X = torch.zeros(1, SPACE.dim, dtype=torch.float64)
    assert SPACE.from_unit(X)[0]["priors"] == {r: 1 / 8 for r in RULES}


def test_bool_and_choice_keep_types_apart() -> None:
    space = Space({"c": Choice([1, True, "1"])})
    assert [space.from_unit(space.to_unit([{"c": v}]))[0]["c"] for v in (1, True, "1")] == [
        1,
        True,
        "1",
    ]


def test_unknown_parameter_names_raise_space_error_listing_names() -> None:
    with pytest.raises(SpaceError, match=r"no parameter 'nope'; its 9 parameters are 'population'"):
        SPACE["nope"]
    with pytest.raises(SpaceError, match="no parameter 'nope'"):
        SPACE.columns_of("nope")
    big = Space({f"p{i}": Bool() for i in range(30)})
    with pytest.raises(SpaceError, match=r"'p19', \.\.\.\.$"):
        big["nope"]


@pytest.mark.parametrize("seed", [None, 1.5, "0", True])
def test_sample_needs_an_int_seed(seed: object) -> None:
    with pytest.raises(SpaceError, match="int seed"):
        SPACE.sample(3, seed)  # type: ignore[arg-type]


@pytest.mark.parametrize("parameters", [5, "abc", {"name": "x"}])
def test_from_dict_needs_a_list_of_parameters(parameters: object) -> None:
    with pytest.raises(SpaceError, match="'parameters' must be a list"):
        Space.from_dict({"format_version": 1, "parameters": parameters})


@pytest.mark.parametrize(("low", "high"), [(1, 4), (8, 256), (3, 5)])
def test_log_int_sampling_is_log_uniform_with_full_end_bins(low: int, high: int) -> None:
    p = Int(low, high, log=True)
    U = (np.arange(20_000) + 0.5).reshape(-1, 1) / 20_000  # a fine regular grid of [0, 1)
    x = np.array(p.sample(U))
    assert x.min() == low and x.max() == high
    counts = np.bincount(x - low, minlength=high - low + 1) / len(x)
    k = np.arange(low, high + 1)
    expected = np.log((k + 1) / k) / math.log((high + 1) / low)
    np.testing.assert_allclose(counts, expected, atol=2e-4)
    # every sampled value decodes back to itself through the tuner's unit-cube encoding
    assert p.decode(p.encode(k.tolist())) == k.tolist()
