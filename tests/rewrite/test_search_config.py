"""SearchConfig validation, the tuner's space and the mapping back."""

from __future__ import annotations

import pytest

from rewrite.errors import SearchConfigError
from rewrite.optimize.config import (
    KNOBS,
    SearchConfig,
)


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
