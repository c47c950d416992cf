"""SearchConfig validation, the tuner's space and the mapping back."""

from __future__ import annotations

import pytest

from rewrite.errors import SearchConfigError
from rewrite.optimize.config import (
    DEFAULT_TUNED,
    KNOBS,
    SearchConfig,
    config_from_params,
    search_space,
)
from spaces import Simplex


def test_defaults_valid_and_round_trip() -> None:
    c = SearchConfig()
    assert SearchConfig.from_dict(c.to_dict()) == c
    for name, knob in KNOBS.items():
        v = getattr(c, name)
        assert v is None or knob.low <= v <= knob.high


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"tau": 0.0}, "tau"),
        ({"alpha": 0.9}, "alpha"),
        ({"beta": 1.5}, "beta"),
        ({"m": 2.5}, "`m` must be an int"),
        ({"population": True}, "population"),
        ({"epsilon": float("nan")}, "epsilon"),
        ({"seed": -1}, "seed"),
        ({"objectives": ("latency",)}, "2 to 6"),
        ({"objectives": "latency"}, "sequence"),
        ({"strategy": "annealing"}, "strategy"),
        ({"memory_cap": -5}, "memory_cap"),
        ({"time_budget": 0.0}, "time_budget"),
    ],
)
def test_invalid_knobs(changes: dict, match: str) -> None:
    with pytest.raises(SearchConfigError, match=match):
        SearchConfig(**changes)


def test_from_dict_unknown_knob() -> None:
    with pytest.raises(SearchConfigError, match="Unknown search-config knobs \\['taux'\\]"):
        SearchConfig.from_dict({"taux": 1.0})


def test_search_space_round_trip() -> None:
    rules = ["r1", "r2", "r3"]
    space = search_space(rules)
    assert set(space.names) == {*DEFAULT_TUNED, "priors"}
    assert isinstance(space["priors"], Simplex)
    for params in space.sample(8, seed=3):
        config, priors = config_from_params(params)
        assert priors is not None and abs(sum(priors.values()) - 1) < 1e-9
        for name in DEFAULT_TUNED:
            assert getattr(config, name) == pytest.approx(params[name])
    config, _ = config_from_params(space.default())
    assert config.tau == SearchConfig().tau


def test_search_space_bad_knob() -> None:
    with pytest.raises(SearchConfigError, match="Cannot tune"):
        search_space(["a", "b"], tune=["seed"])
    with pytest.raises(SearchConfigError, match="Range of 'tau'"):
        search_space(["a", "b"], tune=["tau"], ranges={"tau": (0.0, 1.0)})
