"""Fail fast: an evaluate workers cannot receive, a constraint on a metric nobody reports and a
run of identical failures stop the study with a message saying what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from studies import EvaluateError, RepeatedFailureError, Study, StudySettings
from studies.cli import app
from studies.examples import toy_evaluate, toy_space
from tests.studies import helpers

OBJ = {"latency": "minimize", "search_seconds": "minimize"}


def test_an_evaluate_workers_cannot_receive_is_refused_before_the_first_trial(
    sqlite_url: str,
) -> None:
    study = Study("s", toy_space(), OBJ, lambda c: toy_evaluate(c), storage=sqlite_url)
    with pytest.raises(EvaluateError, match="cannot be sent to worker processes.*module level"):
        study.optimize(10, n_workers=2, progress=False)
    assert study.trials == []


def test_a_constraint_on_a_metric_evaluate_never_returns_stops_the_study(
    sqlite_url: str,
) -> None:
    settings = helpers.fast_settings(n_initial=100)
    study = Study(
        "s", toy_space(), OBJ, toy_evaluate, ["nosuch <= 3"], sqlite_url, settings=settings
    )
    with pytest.raises(EvaluateError, match=r"\['nosuch <= 3'\].*\['nosuch'\].*Fix"):
        study.optimize(20, n_workers=2, progress=False)
    assert len(study.trials) <= 5
    # with 2 workers either trial may finish first; the other is interrupted and re-queued
    assert any("MissingOutcome" in (t.error or "") for t in study.trials)


def test_repeated_identical_failures_stop_the_study(sqlite_url: str) -> None:
    settings = helpers.fast_settings(n_initial=100, max_repeated_failures=3)
    study = Study(
        "s", toy_space(), OBJ, helpers.always_fails, storage=sqlite_url, settings=settings
    )
    with pytest.raises(RepeatedFailureError, match="last 3 trials failed with the same error"):
        study.optimize(20, progress=False)
    assert [t.state for t in study.trials] == ["FAILED"] * 3


def test_max_repeated_failures_zero_never_stops(sqlite_url: str) -> None:
    settings = helpers.fast_settings(n_initial=100, max_repeated_failures=0)
    study = Study(
        "s", toy_space(), OBJ, helpers.always_fails, storage=sqlite_url, settings=settings
    )
    study.optimize(4, progress=False)
    assert [t.state for t in study.trials] == ["FAILED"] * 4


def test_max_repeated_failures_is_validated() -> None:
    with pytest.raises(ValueError, match="max_repeated_failures must be an int >= 0"):
        StudySettings(max_repeated_failures=-1)


def test_the_cli_exits_non_zero_saying_what_to_fix(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text(
        "from studies import Study\n"
        "from studies.examples import toy_space\n"
        "from tests.studies.helpers import always_fails, fast_settings\n"
        f"study = Study('b', toy_space(), {OBJ!r}, always_fails,\n"
        f"              storage='sqlite:///{tmp_path / 'b.db'}', settings=fast_settings(100))\n"
    )
    result = CliRunner().invoke(app, ["run", str(path), "-n", "20", "-w", "1", "--no-progress"])
    assert result.exit_code == 1, result.output
    assert "failed with the same error" in result.output
    assert "Fix evaluate" in result.output
