"""Tests for proposals: exact rebuild, determinism, pending points, failures, reference point."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import tuner.engine as tuner_engine
from spaces import Space
from tests.tuner.conftest import FAST, OBJECTIVES, evaluate, make_space, make_tuner, run
from tuner import (
    Fitted,
    FlatSurrogate,
    InvalidArgumentError,
    InvalidSpecError,
    Surrogate,
    SurrogateError,
    TrainingData,
    Trial,
    TrialState,
    Tuner,
    TunerOptions,
)
from tuner.acquisition import (
    build_acquisition,
    check_reference_point,
    infer_reference,
    no_fused_kernel,
)
from tuner.engine import _pending, default_n_initial, derive_seed
from tuner.problem import Problem

ROOT = Path(__file__).resolve().parents[2]


class RecordingSurrogate(Surrogate):
    """Flat GP that remembers the data of every fit."""

    def __init__(self) -> None:
        self.inner = FlatSurrogate(fit_options={"maxiter": 25})
        self.seen: list[TrainingData] = []

    def fit(self, data: TrainingData) -> Fitted:
        self.seen.append(data)
        return self.inner.fit(data)


def _mixed_history(tuner: Tuner) -> None:
    """Complete, fail (raise and NaN) and leave running some trials (n_initial=3: one model batch)."""
    run(tuner, 3)
    a, b, c = tuner.ask(3)
    tuner.fail(a.id, TimeoutError("took too long"))
    tuner.tell(b.id, {"latency": math.nan, "speedup": 1.0}, metrics=evaluate(b.config)[1])
    del c  # stays RUNNING


def test_rebuild_from_trials_proposes_the_same(space: Space) -> None:
    tuner = make_tuner(space, constraints=("search_seconds <= 6",), seed=5, n_initial=3)
    _mixed_history(tuner)
    records = json.loads(json.dumps([t.to_dict() for t in tuner.trials]))
    rebuilt = make_tuner(
        space, constraints=("search_seconds <= 6",), seed=5, n_initial=3, trials=records
    )
    assert rebuilt.trials == tuner.trials
    assert [t.config for t in rebuilt.ask(1)] == [t.config for t in tuner.ask(1)]


def test_different_seed_proposes_differently(space: Space) -> None:
    a, b = make_tuner(space, seed=0), make_tuner(space, seed=1)
    assert [t.config for t in a.ask(2)] != [t.config for t in b.ask(2)]


def test_sobol_design_continues_across_asks(space: Space) -> None:
    one = make_tuner(space, n_initial=4)
    configs = [one.ask(1)[0].config for _ in range(4)]
    assert configs == [t.config for t in make_tuner(space, n_initial=4).ask(4)]
    assert configs[0] == space.default()  # the initial design starts from the default
    assert torch.allclose(space.to_unit(configs[1:]), space.sample_unit(3, 0), atol=1e-12)
    plain = make_tuner(space, n_initial=4, options=replace(FAST, start_with_default=False))
    assert torch.allclose(
        space.to_unit([t.config for t in plain.ask(4)]), space.sample_unit(4, 0), atol=1e-12
    )


def test_position_seeds_the_proposal(space: Space) -> None:
    """The proposal position defaults to the trial count; another position gives the design's
    point there, or (past the design) another seed; ``reserved`` positions are never proposed."""
    design = [t.config for t in make_tuner(space, n_initial=6).ask(6)]
    assert [t.config for t in make_tuner(space, n_initial=6).ask(2, position=3)] == design[3:5]
    assert [t.config for t in make_tuner(space, n_initial=6).ask(1, position=0)] == design[:1]
    modelled = make_tuner(space, n_initial=2, seed=5)
    run(modelled, 2)
    trials = modelled.trials
    at = {
        p: make_tuner(space, n_initial=2, seed=5, trials=trials).ask(1, position=p) for p in (2, 3)
    }
    assert [t.config for t in modelled.ask(1)] == [t.config for t in at[2]]
    assert at[2][0].config != at[3][0].config
    with pytest.raises(InvalidArgumentError, match="position"):
        modelled.ask(1, position=-1)


def test_reserved_design_points_are_pending(space: Space) -> None:
    """Design points other proposers hold are known without asking them: never proposed, and
    pending for a model-based proposal; positions past the design (or already tried) are not."""
    from tuner.candidates import KeySet
    from tuner.engine import _in_flight

    tuner = make_tuner(space, n_initial=6, seed=3)
    run(tuner, 2)  # positions 0 and 1 completed: the model is used past the design
    ctx = tuner._settings
    taken = KeySet(space.to_unit([t.config for t in tuner.trials]))
    design = make_tuner(space, n_initial=6, seed=3).ask(6)
    points = _in_flight(ctx, [4, 1, 9, 3], True, taken, 0)
    expected = space.to_unit([design[3].config, design[4].config])
    assert torch.allclose(torch.stack(points), expected, atol=1e-12)
    assert all(x in taken for x in expected)

    def ask(**kw: object) -> list[dict]:
        fresh = make_tuner(space, n_initial=6, seed=3, trials=tuner.trials)
        return [t.config for t in fresh.ask(1, position=6, **kw)]

    assert ask(reserved=[9, 12]) == ask()  # not predictable: nothing changes
    assert ask(reserved=[2, 3]) != ask()  # their design points are pending


def test_queued_configurations_do_not_use_up_the_design(space: Space) -> None:
    """With ``design_offset`` configurations queued after the default, the design resumes at its
    first Sobol point, for this proposer and as the pending point of another's reservation."""
    from tuner.candidates import KeySet
    from tuner.engine import _in_flight, design_index

    design = [t.config for t in make_tuner(space, n_initial=6, seed=2).ask(6)]
    queued = make_tuner(space, n_initial=6, seed=2)
    queued.enqueue(space.default())
    for x in space.sample_unit(2, 99):  # two configurations from elsewhere
        queued.enqueue(space.from_unit(x[None])[0])
    run(queued, 3)  # positions 0-2: the default and the two queued
    asked = [queued.ask(1, design_offset=2)[0].config for _ in range(3)]
    assert asked == design[1:4]  # not design[3:6], as without the offset
    assert [design_index(k, 2) for k in (0, 1, 2, 3, 5)] == [0, 1, 2, 1, 3]
    ctx = queued._settings
    taken = KeySet(space.to_unit([t.config for t in queued.trials]))
    (point,) = _in_flight(ctx, [6 + 1], False, taken, 2)  # another proposer holds position 7
    assert torch.allclose(point, space.to_unit([design[5]])[0], atol=1e-12)
    with pytest.raises(InvalidArgumentError, match="design_offset"):
        queued.ask(1, design_offset=-1)


SCRIPT = """
import json, sys, torch
sys.path.insert(0, {root!r})
torch.set_num_threads(1)
from tests.tuner.conftest import make_space, make_tuner, run
tuner = make_tuner(make_space(), constraints=("search_seconds <= 6",), seed=11, n_initial=3)
run(tuner, 2, batch=2)
print(json.dumps([t.to_dict() for t in tuner.trials]))
"""


def test_seeded_run_repeats_in_a_fresh_process() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(root=str(ROOT))],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=300,
    )
    fresh = json.loads(out.stdout.strip().splitlines()[-1])
    tuner = make_tuner(make_space(), constraints=("search_seconds <= 6",), seed=11, n_initial=3)
    run(tuner, 2, batch=2)
    assert fresh == json.loads(json.dumps([t.to_dict() for t in tuner.trials]))
    assert sum(t["state"] == "COMPLETE" for t in fresh) == 4


def test_failed_trials_never_reach_the_surrogate(space: Space) -> None:
    surrogate = RecordingSurrogate()
    tuner = make_tuner(space, surrogate=surrogate, n_initial=3)
    _mixed_history(tuner)
    tuner.ask(1)
    data = surrogate.seen[-1]
    completed = [t for t in tuner.trials if t.state is TrialState.COMPLETE]
    assert data.n == len(completed) == 3
    assert torch.equal(data.X, space.to_unit([t.config for t in completed]))
    assert bool(torch.isfinite(data.Y).all())
    assert data.outcome_names == ["latency", "speedup"] and data.n_objectives == 2
    assert torch.allclose(
        data.Y[:, 0], -torch.tensor([t.values["latency"] for t in completed]).double()
    )
    assert set(data.metrics) == {"n_steps", "search_seconds"}


def test_pending_points_are_running_waiting_and_latest_failed(space: Space) -> None:
    tuner = make_tuner(space, n_initial=10)  # Sobol only: no model needed here
    _mixed_history(tuner)
    tuner.enqueue(space.default())
    trials = tuner.trials
    by_state = {s: [t for t in trials if t.state is s] for s in TrialState}
    X = _pending(space, trials, max_failed=1)
    live = by_state[TrialState.RUNNING] + by_state[TrialState.WAITING]
    expected = space.to_unit([t.config for t in live] + [by_state[TrialState.FAILED][-1].config])
    assert torch.equal(X, expected)
    assert _pending(space, trials, max_failed=0).shape[0] == len(live)


def test_batches_with_pending_points_never_duplicate(space: Space) -> None:
    tuner = make_tuner(space, n_initial=3)
    run(tuner, 3)
    first = tuner.ask(2)  # model batch; stays RUNNING
    second = tuner.ask(2)  # must treat `first` as pending
    configs = [json.dumps(t.config, sort_keys=True) for t in tuner.trials]
    assert len(set(configs)) == len(configs) == 7
    assert {t.state for t in first + second} == {TrialState.RUNNING}


def test_custom_surrogate_with_wrong_outputs_is_rejected(space: Space) -> None:
    class OneOutput(Surrogate):
        def fit(self, data: TrainingData) -> Fitted:
            return FlatSurrogate({"maxiter": 5}).fit(
                TrainingData(data.X, data.Y[:, :1], data.outcome_names[:1], {}, data.space, 0)
            )

    tuner = make_tuner(space, surrogate=OneOutput(), n_initial=2)
    run(tuner, 2)
    before = [t.to_dict() for t in tuner.trials]
    with pytest.raises(SurrogateError, match="outputs"):
        tuner.ask(1)
    assert [t.to_dict() for t in tuner.trials] == before


def test_constraint_metrics_are_modeled_outcomes(space: Space) -> None:
    surrogate = RecordingSurrogate()
    tuner = make_tuner(
        space, surrogate=surrogate, constraints=("search_seconds <= 6", "latency <= 1")
    )
    run(tuner, 5)
    data = surrogate.seen[-1]
    assert data.outcome_names == ["latency", "speedup", "search_seconds"]
    raw = torch.tensor(
        [t.metrics["search_seconds"] for t in tuner.trials[: data.n]], dtype=torch.float64
    )
    assert torch.equal(data.Y[:, 2], raw)


def test_single_objective(space: Space) -> None:
    tuner = Tuner(space, {"latency": "minimize"}, options=FAST, n_initial=3)
    for _ in range(4):
        (t,) = tuner.ask()
        tuner.tell(t.id, {"latency": evaluate(t.config)[0]["latency"]})
    assert len(tuner.pareto()) == 1
    best = min(t.values["latency"] for t in tuner.trials)
    assert tuner.pareto()[0].values["latency"] == best


def test_reference_point_rule() -> None:
    p = Problem({"lat": "minimize", "sp": "maximize"}, ["t <= 3"])
    trials = [
        Trial(0, {}, TrialState.COMPLETE, {"lat": 1.0, "sp": 2.0}, {"t": 0.0}),
        Trial(1, {}, TrialState.COMPLETE, {"lat": 3.0, "sp": 6.0}, {"t": 0.0}),
        Trial(2, {}, TrialState.COMPLETE, {"lat": 4.0, "sp": 1.0}, {"t": 0.0}),  # dominated
        Trial(3, {}, TrialState.COMPLETE, {"lat": 0.0, "sp": 9.0}, {"t": 5.0}),  # infeasible
    ]
    ref = infer_reference(p, trials, None, 0.1)
    # feasible front in max convention: (-1, 2), (-3, 6) -> nadir (-3, 2), range (2, 4)
    assert torch.allclose(ref, torch.tensor([-3.2, 1.6], dtype=torch.float64))
    user = check_reference_point(p, {"lat": 10, "sp": 0.5})
    assert torch.equal(infer_reference(p, trials, user, 0.1), torch.tensor([-10.0, 0.5]).double())
    with pytest.raises(InvalidSpecError):
        check_reference_point(p, {"lat": 1.0, "speed": 2.0})
    # numpy scalars are numbers too
    assert check_reference_point(p, {"lat": np.float32(10), "sp": np.int64(0)}) == {
        "lat": 10.0,
        "sp": 0.0,
    }


def test_user_reference_point_accepted(space: Space) -> None:
    tuner = make_tuner(space, reference_point={"latency": 2.0, "speedup": 0.0}, n_initial=2)
    run(tuner, 3)
    assert tuner.settings_dict()["reference_point"] == {"latency": 2.0, "speedup": 0.0}


def test_derived_seeds_and_defaults() -> None:
    seeds = {derive_seed(s, n) for s in range(4) for n in range(50)}
    assert len(seeds) == 200 and all(0 <= s < 2**31 for s in seeds)
    assert derive_seed(3, 7) == derive_seed(3, 7)
    assert [default_n_initial(d) for d in (1, 4, 6, 30)] == [5, 5, 7, 10]


def test_options_validation() -> None:
    for bad in (
        {"num_restarts": 0},
        {"raw_samples": 1, "num_restarts": 2},
        {"ref_point_scale": "0.1"},
        {"fit_maxiter": 0},
        {"ref_point_scale": 0.0},
        {"max_failed_pending": -1},
        {"max_failed_pending": True},
        {"fit_maxiter": True},
    ):
        with pytest.raises(InvalidSpecError):
            TunerOptions(**bad)
    assert TunerOptions.from_dict(FAST.to_dict()) == FAST
    with pytest.raises(InvalidSpecError, match="Unknown"):
        TunerOptions.from_dict({"maxiters": 3})
    # options stored before `local_fraction` was removed: at today's value they load
    old = {**FAST.to_dict(), "local_fraction": 0.0, "local_scale": 0.1}
    assert TunerOptions.from_dict(old) == FAST
    with pytest.raises(
        InvalidSpecError, match=r"local_fraction was removed.*Drop 'local_fraction'"
    ):
        TunerOptions.from_dict({"local_fraction": 0.5})


def test_objectives_property_is_a_copy(space: Space) -> None:
    tuner = make_tuner(space)
    tuner.objectives["latency"] = "maximize"
    assert tuner.objectives == OBJECTIVES


def test_pending_point_discounts_the_acquisition_there(space: Space) -> None:
    """The failed-region rule relies on this: a pending x has (almost) no improvement left."""
    tuner = make_tuner(space, n_initial=6)
    run(tuner, 6)
    problem = Problem(OBJECTIVES)
    done = tuner.trials
    data = problem.training_data(space, done, seed=0)
    model = FlatSurrogate({"maxiter": 15}).fit(data).model
    ref = infer_reference(problem, done, None, 0.1)
    x = space.sample_unit(1, 123)
    with no_fused_kernel():
        free = build_acquisition(model, problem, data.X, None, ref, 32, 0)
        pending = build_acquisition(model, problem, data.X, x, ref, 32, 0)
        with torch.no_grad():
            assert pending(x.unsqueeze(0)) < free(x.unsqueeze(0))


_BOTORCH_KERNEL_STATE = (
    "from botorch.acquisition.multi_objective import logei; "
    "print(repr((logei._C, logei._load_attempted)))"
)


def test_importing_the_packages_leaves_botorchs_state_alone() -> None:
    """BoTorch's fused-kernel state after importing the packages is that of a bare BoTorch."""

    def state(imports: str) -> str:
        code = f"{imports}; {_BOTORCH_KERNEL_STATE}"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout

    ours = "import tuner, structure, studies, tuner.acquisition, tuner.engine; tuner.Tuner"
    assert state(f"import botorch; {ours}") == state("import botorch")


def test_proposals_never_compile_botorchs_fused_kernel(space: Space, monkeypatch) -> None:
    """Model proposals run qLogNEHVI on BoTorch's Python path (`no_fused_kernel`): a process
    killed while BoTorch compiled its kernel would leave a lock that hangs every later one.
    BoTorch's state is as it was afterwards."""
    import torch.utils.cpp_extension
    from botorch.acquisition.multi_objective import logei

    compiled: list[tuple] = []
    monkeypatch.setattr(torch.utils.cpp_extension, "load", lambda *a, **k: compiled.append(a))
    monkeypatch.setattr(logei, "_load_attempted", False)
    monkeypatch.setattr(logei, "_C", None)
    built_with_loader_off: list[bool] = []

    def build(*args: Any) -> Any:
        built_with_loader_off.append(logei._load_attempted)
        return build_acquisition(*args)

    monkeypatch.setattr(tuner_engine, "build_acquisition", build)
    run(make_tuner(space, n_initial=4), 6)
    assert built_with_loader_off == [True, True]  # the two model proposals
    assert not compiled and (logei._C, logei._load_attempted) == (None, False)


def test_no_fused_kernel_restores_botorchs_state_when_the_last_block_exits(monkeypatch) -> None:
    from botorch.acquisition.multi_objective import logei

    monkeypatch.setattr(logei, "_load_attempted", False)
    with no_fused_kernel():
        with no_fused_kernel():
            assert logei._load_attempted and logei._C is None
        assert logei._load_attempted
    assert logei._load_attempted is False


def test_an_informed_surrogate_proposes_within_the_initial_design(space: Space) -> None:
    class Informed(FlatSurrogate):  # a warm start's gate keeping a related study
        def informed(self, data: TrainingData) -> bool:
            return True

    cold = make_tuner(space, n_initial=6, seed=0)
    warm = make_tuner(space, n_initial=6, seed=0, surrogate=Informed({"maxiter": 15}))
    run(cold, 4)
    run(warm, 4)
    design = [t.config for t in cold.trials]  # all four from the initial design
    proposed = [t.config for t in warm.trials]
    min_completed = FAST.min_completed
    assert proposed[:min_completed] == design[:min_completed]  # too few trials to model
    assert not any(c in design for c in proposed[min_completed:])  # then the model, at once
