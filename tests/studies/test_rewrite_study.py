"""The built-in rewrite study: real searches on a zoo graph, metrics, export read by the search."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewrite.optimize import RulePriors, SearchConfig
from spaces import Fixed, Simplex
from studies import StudyError
from studies.rewrite_study import DEFAULT_OBJECTIVES, evaluate_rewrite, rewrite_space, rewrite_study


def test_space_tunes_knobs_and_priors_and_fixes_the_suite() -> None:
    space = rewrite_space(("gpt2",), max_steps=20, rules=["fuse_elementwise", "fuse_gelu_tanh"])
    assert isinstance(space["priors"], Simplex) and space["priors"].names == (
        "fuse_elementwise",
        "fuse_gelu_tanh",
    )
    assert isinstance(space["suite"], Fixed) and space["suite"].value["workloads"] == ["gpt2"]
    assert "suite" not in " ".join(space.columns)  # no GP column for the fixed suite


def test_evaluate_runs_the_search_and_reports_objectives_and_metrics() -> None:
    space = rewrite_space(("gpt2",), max_steps=15)
    out = evaluate_rewrite(space.default())
    assert set(DEFAULT_OBJECTIVES) <= set(out)
    assert 0.0 < out["latency_reduction"] < 1.0  # the catalogue finds real improvements
    assert out["steps"] == 15
    assert any(k.startswith("rule.") and k.endswith(".fired") for k in out)


def test_study_runs_and_exports_priors_the_search_loads(tmp_path: Path) -> None:
    study = rewrite_study(
        ("gpt2",),
        {"latency_reduction": "maximize", "search_time": "minimize"},
        budget=10,
        storage=f"sqlite:///{tmp_path / 's.db'}",
    )
    study.optimize(2, n_workers=1, progress=False)
    assert [t.state for t in study.trials] == ["COMPLETE", "COMPLETE"]
    assert "rule.fuse_elementwise.applicable" in study.trials[0].metrics
    study.export_priors(tmp_path / "priors.json")
    priors = RulePriors.load(tmp_path / "priors.json")
    assert abs(sum(priors.as_dict().values()) - 1.0) < 1e-9
    SearchConfig.from_dict(priors.search_config)  # only real search knobs were exported


def test_bad_workload_and_objective_are_clear_errors(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with pytest.raises(StudyError, match="Unknown workloads \\['gpt5'\\]"):
        rewrite_study(("gpt5",), storage=url)
    with pytest.raises(StudyError, match="Unknown objectives \\['speed'\\]"):
        rewrite_study(("gpt2",), {"speed": "maximize"}, storage=url)
