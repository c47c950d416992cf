"""`studies.pareto.hypervolume_curve` against the volume of every point seen, recomputed from
scratch (BoTorch's `Hypervolume`), with ties, failures and constraints."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from botorch.utils.multi_objective.hypervolume import Hypervolume

from studies.pareto import _maximized, feasible, hypervolume_curve, reference_point
from studies.records import TrialRecord


def _reference_curve(trials, objectives, constraints):  # type: ignore[no-untyped-def]
    ok = {t.number for t in feasible(trials, constraints)}
    r = reference_point(_maximized([t for t in trials if t.number in ok], objectives))
    hv, seen, curve = Hypervolume(torch.as_tensor(r)), [], []
    for t in trials:
        if t.number in ok:
            seen.append(_maximized([t], objectives)[0])
        pts = np.asarray(seen).reshape(-1, len(objectives))
        pts = pts[np.all(pts > r, axis=1)]
        curve.append(float(hv.compute(torch.as_tensor(pts))) if len(pts) else 0.0)
    return curve


@pytest.mark.parametrize("m", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_curve_equals_the_volume_of_every_point_seen(m: int, seed: int) -> None:
    rng = random.Random(seed)
    objectives = {f"f{i}": ("maximize" if i % 2 else "minimize") for i in range(m)}
    trials = []
    for n in range(40):
        state = "FAILED" if rng.random() < 0.1 else "COMPLETE"
        values = {k: round(rng.random(), 1) for k in objectives} if state == "COMPLETE" else None
        trials.append(
            TrialRecord(id=n, config={}, state=state, values=values, metrics={"c": rng.random()})
        )
    for constraints in ((), ("c <= 0.7",)):
        numbers, curve = hypervolume_curve(trials, objectives, constraints)
        assert numbers == list(range(40))
        assert curve == pytest.approx(_reference_curve(trials, objectives, constraints), abs=1e-12)


def test_two_thousand_trials_make_a_monotone_curve() -> None:
    rng = random.Random(0)
    trials = [
        TrialRecord(
            id=n, config={}, state="COMPLETE", values={"a": rng.random(), "b": rng.random()}
        )
        for n in range(2000)
    ]
    numbers, curve = hypervolume_curve(trials, {"a": "minimize", "b": "minimize"})
    assert len(curve) == 2000 and curve == sorted(curve)
