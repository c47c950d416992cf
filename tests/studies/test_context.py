"""A study's context: stored once with the study, handed to every evaluation beside its
configuration, never part of a configuration (so never a GP column, a stored config key or a
tuner parameter)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from studies import Study, StudyError, StudySettings
from studies.errors import StudyConflictError
from studies.examples import toy_evaluate, toy_space
from studies.worker import WithContext

OBJECTIVES = {"latency": "minimize", "search_seconds": "minimize"}
SETTINGS = StudySettings(
    n_initial=3, tuner_options={"num_restarts": 1, "raw_samples": 16, "maxiter": 5}
)
CONTEXT = {"workloads": ("a", "b"), "scale": 2.0, "calibration": {"noise": [0.1, 0.2]}}


def scaled(config: dict[str, Any], context: dict[str, Any]) -> dict[str, float]:
    """The toy objectives scaled by the context's ``scale``, with the context's workload count
    as a metric (module level: worker processes import it)."""
    out = toy_evaluate(config)
    return {
        "latency": out["latency"] * context["scale"],
        "search_seconds": out["search_seconds"],
        "workloads": float(len(context["workloads"])),
    }


def _study(url: str, **kwargs: Any) -> Study:
    return Study("ctx", toy_space(), OBJECTIVES, scaled, storage=url, settings=SETTINGS, **kwargs)


def test_the_context_reaches_every_evaluation_and_no_configuration(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = _study(url, context=CONTEXT)
    # stored as the JSON it is (the tuple became a list): what evaluate sees after a reload
    assert study.context == {**CONTEXT, "workloads": ["a", "b"]}
    study.optimize(4, n_workers=2, progress=False)  # in worker processes
    trials = study.trials
    assert [t.state for t in trials] == ["COMPLETE"] * 4
    for t in trials:
        assert set(t.config) == {"tau", "population", "priors"}  # no context in a config
        assert t.metrics["workloads"] == 2.0
        assert t.values["latency"] == pytest.approx(2.0 * toy_evaluate(t.config)["latency"])
    # a later process reads the context back with the study (`tuner resume` does this)
    again = Study.load("ctx", url, evaluate=scaled)
    assert again.context == study.context
    again.optimize(5, progress=False)
    assert again.trials[4].metrics["workloads"] == 2.0
    # the copy handed out is the caller's: changing it changes nothing stored
    again.context["scale"] = 99.0  # type: ignore[index]
    assert Study.load("ctx", url).context["scale"] == 2.0  # type: ignore[index]


def test_the_context_is_part_of_the_definition(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    _study(url, context=CONTEXT)
    assert _study(url, context=CONTEXT).context is not None  # the same: attaches
    with pytest.raises(StudyConflictError, match=r"different context \(context\.scale: stored 2"):
        _study(url, context={**CONTEXT, "scale": 3.0})
    with pytest.raises(
        StudyConflictError, match=r"different context \(context: stored .*given None"
    ):
        _study(url)


def test_a_study_without_context_calls_evaluate_with_the_config_alone(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = Study("plain", toy_space(), OBJECTIVES, toy_evaluate, storage=url, settings=SETTINGS)
    study.optimize(1, progress=False)
    assert study.context is None and study.trials[0].state == "COMPLETE"


@pytest.mark.parametrize(
    ("context", "match"),
    [
        (["not", "a", "dict"], "context must be a dict of JSON values.*got list"),
        ({1: "x"}, r"context keys must be strings, got \[1\]"),
        ({"noise": float("nan")}, "only JSON values.*finite"),
        ({"model": object()}, "only JSON values.*rebuild it inside evaluate"),
    ],
)
def test_a_context_that_is_not_json_is_refused(tmp_path: Path, context: Any, match: str) -> None:
    with pytest.raises(StudyError, match=match):
        _study(f"sqlite:///{tmp_path / 's.db'}", context=context)


def test_the_bound_evaluate_pickles_and_names_the_function_only() -> None:
    bound = WithContext(scaled, {"scale": 1.0, "workloads": ["a"]})
    back = pickle.loads(pickle.dumps(bound))
    assert back.evaluate is scaled and back.context == bound.context
    config = {
        "tau": 1.0,
        "population": 8,
        "priors": {"fuse": 0.4, "merge": 0.3, "shard": 0.2, "reorder": 0.1},
    }
    assert back(config)["workloads"] == 1.0
    assert repr(bound) == "WithContext(scaled, <context of 2 keys>)"
