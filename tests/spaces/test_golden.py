"""A stored Space of format_version 1 (tests/data/golden/space_v1.json, frozen) still loads, writes
back byte-identical and encodes as it did: studies store their space, so this format is a promise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spaces import Space

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden" / "space_v1.json"


def test_space_v1_round_trips_and_encodes_as_before() -> None:
    stored = json.loads(GOLDEN.read_text())
    space = Space.from_dict(stored)
    assert space.to_dict() == stored
    assert space.columns == [
        "population", "mutations", "tau", "beta", "selection=softmax", "selection=tournament",
        "restart", "priors.fuse", "priors.merge", "priors.shard", "priors.algebra",
    ]  # fmt: skip
    default = space.default()
    assert default["suite"] == {"workloads": ["gpt2", "bert"], "seeds": [0, 1]}
    assert space.to_unit([default]).tolist() == [
        pytest.approx([0.4, 3 / 7, 2 / 3, 0.5, 0.0, 1.0, 0.0, 0.25, 0.25, 0.25, 0.25], abs=1e-12)
    ]
    assert space.from_unit(space.to_unit([default]))[0] == default
