"""Outcomes the surrogate cannot use (issue 36): huge finite values are FAILED at tell time, a
stored COMPLETE one is left out of the model with a warning, and one value far outside the others
is clipped before the fit, so proposals (and resumes) keep working."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from spaces import Float, Space
from tests.tuner.conftest import FAST, OBJECTIVES, evaluate, make_tuner
from tuner import Trial, TrialState, Tuner
from tuner.problem import MAX_OUTCOME_MAGNITUDE, OUTLIER_SPREAD, Problem, clip_outliers


@pytest.mark.parametrize("huge", [1e308, 1e200, 1e160, -1e101])
def test_told_huge_value_fails_the_trial_with_the_reason(space: Space, huge: float) -> None:
    tuner = make_tuner(space)
    (t,) = tuner.ask()
    values, metrics = evaluate(t.config)
    out = tuner.tell(t.id, {**values, "latency": huge}, metrics=metrics)
    assert out.state is TrialState.FAILED and out.values is None
    assert out.error.startswith("UnusableOutcome: latency=")
    assert repr(huge) in out.error and "smaller unit" in out.error


def test_value_at_the_magnitude_limit_completes(space: Space) -> None:
    tuner = make_tuner(space)
    (t,) = tuner.ask()
    out = tuner.tell(t.id, {"latency": MAX_OUTCOME_MAGNITUDE, "speedup": -MAX_OUTCOME_MAGNITUDE})
    assert out.state is TrialState.COMPLETE


def test_huge_constraint_metric_fails_the_trial() -> None:
    p = Problem({"lat": "minimize"}, ["t <= 3"])
    vals, _, err = p.outcome({"lat": 1.0}, {"t": 1e300, "x": 1e300})
    assert vals is None and err is not None and err.startswith("UnusableOutcome: t=1e+300")


def _completed(space: Space, n: int, huge_at: int, huge: float) -> list[Trial]:
    """``n`` COMPLETE trials of the toy problem (Sobol configurations), ``huge`` as trial
    ``huge_at``'s latency: what a rewrite-tuner that did not refuse it stored."""
    out = []
    for i, config in enumerate(space.sample(n, seed=3)):
        values, metrics = evaluate(config)
        if i == huge_at:
            values = {**values, "latency": huge}
        out.append(Trial(i, config, TrialState.COMPLETE, values, metrics))
    return out


def test_stored_complete_huge_trial_is_left_out_and_the_tuner_proposes(
    space: Space, caplog: pytest.LogCaptureFixture
) -> None:
    trials = _completed(space, 6, huge_at=2, huge=1e308)
    with caplog.at_level(logging.WARNING, logger="tuner.tuner"):
        tuner = Tuner(space, OBJECTIVES, options=FAST, n_initial=4, trials=trials, seed=0)
    assert tuner.trial(2).state is TrialState.FAILED
    assert "UnusableOutcome: latency=1e+308" in (tuner.trial(2).error or "")
    assert "Trial 2 is stored COMPLETE" in caplog.text and "treated as FAILED" in caplog.text
    (new,) = tuner.ask()  # a model-based proposal: it used to fail (NaN inputs, eigh)
    assert space.validate(new.config) == new.config


def test_far_outlier_is_clipped_for_the_model_with_a_warning(
    space: Space, caplog: pytest.LogCaptureFixture
) -> None:
    trials = _completed(space, 6, huge_at=4, huge=1e15)  # within the limit: COMPLETE
    tuner = Tuner(space, OBJECTIVES, options=FAST, n_initial=4, trials=trials, seed=0)
    assert tuner.trial(4).state is TrialState.COMPLETE
    with caplog.at_level(logging.WARNING, logger="tuner.tuner"):
        (new,) = tuner.ask()  # failed before: every acquisition value underflowed
        tuner.fail(new.id, "not run")
        tuner.ask()
    assert space.validate(new.config) == new.config
    assert caplog.text.count("Trial 4's latency=1000000000000000.0 lies far outside") == 1


def test_clip_outliers_keeps_ordinary_columns_bit_exact() -> None:
    Y = torch.tensor([[0.5, 3.0], [0.7, 2.0], [0.6, math.nan], [0.9, 1.0]], dtype=torch.float64)
    assert torch.equal(clip_outliers(Y).nan_to_num(-1.0), Y.nan_to_num(-1.0))
    col = torch.tensor([1.0, 1.1, 0.9, 1.0, 1e15], dtype=torch.float64)
    clipped = clip_outliers(col)
    assert torch.equal(clipped[:4], col[:4])
    assert math.isclose(float(clipped[4]), 1.0 + OUTLIER_SPREAD * 0.1)  # median + 1e4 MADs
    ones = torch.tensor([1.0, 1.0, 1.0, 5.0, -1e12], dtype=torch.float64)  # MAD 0: next deviation
    out = clip_outliers(ones)
    assert out[3] == 5.0 and math.isclose(float(out[4]), 1.0 - OUTLIER_SPREAD * 4.0)
    two = torch.tensor([1.0, 1e15], dtype=torch.float64)  # too few values to call one an outlier
    assert torch.equal(clip_outliers(two), two)


def test_an_objectives_best_trials_are_never_clipped_only_its_worst() -> None:
    """A generated search-shaped problem's gain: most trials near 1e-7, a few near 1. The best
    trial (0.93) was modeled as 0.00022, the median plus 1e4 robust spreads, so the tuner never
    went back to where it was found."""
    gains = [4.5e-7, 3e-7, 5e-7, 4e-7, 6e-7, 0.0313, 1.2e-6, 0.927, 2.3e-3, 4.4e-7]
    p = Problem({"gain": "maximize", "seconds": "minimize"})
    space = Space({"x": Float(0.0, 1.0)})
    trials = [
        Trial(i, {"x": i / 10}, TrialState.COMPLETE, {"gain": g, "seconds": 1.0 + i / 10}, {})
        for i, g in enumerate(gains)
    ]
    trials[3] = Trial(3, {"x": 0.3}, TrialState.COMPLETE, {"gain": gains[3], "seconds": 1e15}, {})
    for t, g in zip(trials, gains):  # per-run objectives (tracking metrics): the same rule
        t.metrics.update({"gain@w/0": g, "seconds@w/0": -g, "other": g})
    data = p.training_data(space, trials, seed=0)
    assert data.Y[:, 0].tolist() == gains  # the gain, maximized: kept to the last bit
    assert data.metrics["gain@w/0"].tolist() == gains
    assert (-data.metrics["seconds@w/0"]).tolist() == gains  # minimized: its low side kept
    assert float(data.metrics["other"][7]) < 0.01  # a plain metric: both sides clipped
    assert -float(data.Y[3, 1]) < 1e5  # 1e15 seconds, the worse side: clipped
    assert [(tid, name) for tid, name, _, _ in p.outliers(trials)] == [(3, "seconds")]
    col = torch.tensor(gains, dtype=torch.float64)
    assert clip_outliers(col)[7] < 0.01  # both sides clipped where nothing says which is better
    # A plateau with a few values off it: the spread is theirs, not the nearest one's.
    plateau = torch.tensor([0.95] * 20 + [0.95 + 1e-9, 1.06, 1.29], dtype=torch.float64)
    assert torch.equal(clip_outliers(plateau), plateau)
