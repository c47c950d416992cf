"""A stored Structure of format_version 1 (tests/data/golden/structure_v1.json, frozen) still loads
and writes back unchanged: surrogates checkpoint their structure, so this format is a promise."""

from __future__ import annotations

import json
from pathlib import Path

from structure import Structure

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden" / "structure_v1.json"


def test_structure_v1_round_trips_and_reads_as_before() -> None:
    stored = json.loads(GOLDEN.read_text())
    structure = Structure.from_dict(stored)
    assert structure.to_dict() == stored
    assert Structure.from_json(structure.to_json()) == structure
    assert structure.topological_order() == ["steps", "checks", "applied", "latency", "effort"]
    assert set(structure.parents("effort")) == {"steps", "checks"}
    assert structure.formula_for("effort").weights == (1.0, 0.5)
    assert structure.transforms["steps"] == "log1p" and structure.n_trials == 40
