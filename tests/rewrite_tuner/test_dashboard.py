"""The rewrite application's additions to the dashboard (`rewrite_tuner.dashboard`) and the demo's
run record they read (`rewrite_tuner.run_record`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rewrite_tuner.dashboard import HOOKS, validation_panel
from rewrite_tuner.run_record import FORMAT_VERSION, KIND, read_record, record_path, update_record
from studies.dashboard.readonly import ReadOnlyStorage
from studies.dashboard.snapshot import Watcher
from studies.dashboard.views import build

DATA = Path(__file__).resolve().parents[1] / "data" / "studies"


def _interval(v: float) -> dict[str, float]:
    return {"value": v, "low": v - 0.1, "high": v + 0.1}


REPORT = {
    "objectives": {"anytime_hv": "maximize", "final_hv": "maximize"},
    "tuned_on": ["gpt2"],
    "held_out": ["vit"],
    "budget": 40,
    "candidates": [
        {"trial": 1, "values": {}, "training": {"anytime_hv": _interval(0.3), "final_hv": _interval(0.2)}, "beats": True},
    ],
    "chosen": 1,
    "training": {"seeds": [1000, 1001], "budget": 40, "per_workload": {}, "overall": {}},
    "held_out_comparison": {
        "seeds": [2000, 2001, 2002],
        "budget": 40,
        "per_workload": {
            "vit": {
                "reach": {"candidate": {"value": 9.0, "low": 6.0, "high": 11.0}, "reference": {"value": 30.0}, "ratio": 0.3},
                "final_hv": {"candidate": {"value": 1.398}, "reference": {"value": 1.08}},
                "latency_reduction": {"candidate": {"value": 0.18}, "reference": {"value": 0.139}},
            }
        },
        "overall": {"reach_ratio": {"median": 0.3}},
    },
}  # fmt: skip


@pytest.fixture
def legacy(tmp_path: Path) -> str:
    """The frozen rewrite study ``legacy`` (schema 2, its suite in a Fixed parameter)."""
    shutil.copy(DATA / "rewrite_v2.db", tmp_path / "old.db")
    return f"sqlite:///{tmp_path / 'old.db'}"


def test_the_run_record_merges_and_refuses_what_is_not_its_own(tmp_path: Path) -> None:
    path = record_path(tmp_path, "team/study")
    assert path.name == "team_study-run.json"
    update_record(path, "team/study", "postgresql+psycopg://u:secret@h/db", calibration=12.5)
    doc = update_record(path, "team/study", "postgresql+psycopg://u:secret@h/db", validation=3.0)
    assert (doc["calibration"], doc["validation"]) == (12.5, 3.0)
    assert "secret" not in path.read_text() and doc["kind"] == KIND
    assert read_record(path, "another") is None
    path.write_text(json.dumps({**doc, "format_version": FORMAT_VERSION + 1}))
    assert read_record(path, "team/study") is None  # newer: not read
    path.write_text("{not json")
    assert read_record(path, "team/study") is None


def test_the_views_read_the_record_beside_the_database(legacy: str, tmp_path: Path) -> None:
    snap = Watcher(ReadOnlyStorage(legacy), "legacy").snapshot()
    empty = validation_panel(snap)
    assert empty is not None and "No held-out validation yet" in empty.html
    update_record(
        record_path(tmp_path, "legacy"), "legacy", legacy, calibration=20.0, validation=30.0,
        split={"calibration": 20.0, "proposals": 10.0, "evaluations": 5.0, "validation": 30.0},
        report=REPORT, exported={"path": "demo-priors.json", "trial": 1, "beats": True},
    )  # fmt: skip
    snap = Watcher(ReadOnlyStorage(legacy), "legacy").snapshot()
    panels = {p["id"]: p for p in build(snap, HOOKS)["panels"]}
    html = panels["validation"]["html"]
    assert "+0.300 [+0.200, +0.400]" in html and "chosen" in html
    assert "9 [6, 11]" in html and "0.30x" in html and "18.0% / 13.9%" in html
    assert panels["time"]["numbers"]["split"] == {
        "calibration": 20.0, "proposals": 10.0, "evaluations": 5.0, "validation": 30.0,
    }  # fmt: skip
    assert panels["priors"]["numbers"]["exported"] == 1
    assert "exported to demo-priors.json" in panels["priors"]["html"]
    assert "tuned prior family" in panels["priors"]["html"]  # the family's rule priors


def test_a_study_that_is_not_a_rewrite_study_has_no_validation_view(tmp_path: Path) -> None:
    from studies.examples import toy_study

    url = f"sqlite:///{tmp_path / 'toy.db'}"
    toy_study("toy", url)
    snap = Watcher(ReadOnlyStorage(url), "toy").snapshot()
    assert validation_panel(snap) is None
    assert "validation" not in [p["id"] for p in build(snap, HOOKS)["panels"]]
