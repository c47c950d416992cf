"""`rewrite_tuner.timing`: the main job's estimate and its measured split (no magnitudes)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from rewrite_tuner.timing import PHASES, DemoShape, estimate, estimate_line, split_lines
from studies.driver import RunStats

_SHAPE = DemoShape(
    workloads=4, held_out=2, trials=30, proposals=25, seeds=3, calibration_seeds=5, steps=150,
    workers=2,
)  # fmt: skip


def test_estimate_prices_every_phase_and_scales_with_the_pace() -> None:
    slow, fast = estimate(_SHAPE, 2.0), estimate(_SHAPE, 1.0)
    assert tuple(slow) == PHASES and all(v > 0 for v in slow.values())
    assert slow == pytest.approx({k: 2 * v for k, v in fast.items()})
    calibrated = estimate(DemoShape(**{**vars(_SHAPE), "calibration_seeds": 0}), 1.0)
    assert "calibration" not in calibrated and calibrated["proposals"] == fast["proposals"]
    # proposals are serial in the driver; the evaluations' wall time is what they leave over
    wide = estimate(DemoShape(**{**vars(_SHAPE), "workers": 4}), 1.0)
    assert wide["evaluations"] <= fast["evaluations"] and wide["proposals"] == fast["proposals"]
    cheap = estimate(DemoShape(**{**vars(_SHAPE), "proposals": 0}), 1.0)
    assert cheap["evaluations"] == pytest.approx(30 * 3 * 4 / 2)


def test_estimate_line_says_it_is_an_estimate_and_its_basis() -> None:
    line = estimate_line({"calibration": 40.0, "proposals": 0.0, "validation": 200.0}, "here")
    assert line.startswith(
        "estimate: about 4 min (calibration ~40 s, proposals ~0 s, validation ~3 min), from here"
    )
    assert estimate_line({"evaluations": 5.0}, "x", what="the rest").startswith("the rest: about")


def test_split_adds_up_to_the_total() -> None:
    stats = RunStats(wall=100.4, claiming=31.0, evaluating=150.0, trials=5, finished=5)
    stats.n_workers, stats.proposals = 2, [0.01, 0.01, 10.2, 10.4, 10.1]
    lines = split_lines(20.6, stats, 50.3)
    m = re.fullmatch(
        r"time split \(wall clock\): calibration (\d+) s \+ proposals (\d+) s \+ evaluations "
        r"(\d+) s \+ validation (\d+) s = (\d+) s",
        lines[0],
    )
    assert m, lines[0]
    *phases, total = (int(x) for x in m.groups())
    assert sum(phases) == total and abs(total - (20.6 + 100.4 + 50.3)) <= 2
    assert "5 proposals, p50 10.1 s, max 10.4 s" in lines[1]
    assert "5 trials, 150 s of worker time on 2 workers" in lines[2]


def test_a_resumed_study_is_paced_by_its_trials_not_by_opening_it() -> None:
    """A resumed study was paced by the seconds opening it took (a trial bound at the floor)."""
    from types import SimpleNamespace

    from rewrite_tuner.pipeline import study_pace
    from rewrite_tuner.spec import RewriteStudySpec

    spec = RewriteStudySpec(workloads=("gpt2", "bert"), budget=40, seeds=2, calibration_seeds=5)
    trials = [SimpleNamespace(seconds=s) for s in (8.0, None, 40.0, 12.0)]  # one never ran
    study: Any = SimpleNamespace(trials=trials)
    assert study_pace(spec, study, 30.0) == pytest.approx(30.0 / (5 * 2))  # calibrated now
    assert study_pace(spec, study, None) == pytest.approx(12.0 / (2 * 2))  # the median trial
    assert study_pace(spec, SimpleNamespace(trials=[]), None) is None  # type: ignore[arg-type]
