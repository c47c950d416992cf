"""Per-run rows (`structure.runs`) and structure learning from them."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from spaces import Float, Space
from structure import LearnConfig, StructuredSurrogate, learn_structure
from structure.errors import StructureLearningError
from structure.runs import centre_by_group, run_rows, subsample_groups
from structure.select import SelectConfig
from tests.structure.synthetic import chain_table, runs_data, sum_sine_data
from tests.structure.test_surrogate import FAST
from tuner import FlatSurrogate, TrainingData, run_metric

FEW = dataclasses.replace(FAST, min_trials=8)


def _two_objectives() -> TrainingData:
    """3 trials; ``gain`` (maximized) and ``secs`` (minimized, negated in ``Y``); runs
    ``a/0``, ``a/1``, ``b/0``, where trial 2 has no ``secs`` for run ``b/0``."""
    space = Space({"x": Float(0.0, 1.0)})
    X = torch.tensor([[0.1], [0.5], [0.9]], dtype=torch.float64)
    Y = torch.tensor([[1.0, -2.0], [2.0, -3.0], [3.0, -4.0]], dtype=torch.float64)
    nan = math.nan
    per_run = {
        "a/0": {"gain": [1.0, 2.0, 3.0], "secs": [2.0, 3.0, 4.0], "fired": [5.0, 6.0, 7.0]},
        "a/1": {"gain": [1.5, 2.5, 3.5], "secs": [2.5, 3.5, 4.5], "fired": [nan, 6.5, 7.5]},
        "b/0": {"gain": [0.5, 1.5, 2.5], "secs": [1.5, 2.5, nan], "fired": [4.0, 5.0, 6.0]},
    }
    metrics = {
        run_metric(k, run): torch.tensor(v, dtype=torch.float64)
        for run, values in per_run.items()
        for k, v in values.items()
    }
    metrics["fired"] = torch.tensor([5.0, 6.0, 7.0], dtype=torch.float64)
    return TrainingData(
        X, Y, ["gain", "secs"], metrics, space, 0, 2, directions=("maximize", "minimize")
    )


def test_run_rows_repeat_each_trial_for_every_run_that_reports_its_outcomes() -> None:
    rows = run_rows(_two_objectives())
    assert not isinstance(rows, str)
    # trial 2's run b/0 reports no `secs`: no row
    assert rows.trial.tolist() == [0, 0, 0, 1, 1, 1, 2, 2]
    assert rows.group.tolist() == ["a", "a", "b", "a", "a", "b", "a", "a"]
    assert rows.n == 8 and rows.n_trials == 3
    assert rows.outcomes["gain"].tolist() == [1.0, 1.5, 0.5, 2.0, 2.5, 1.5, 3.0, 3.5]
    # a minimized objective in the maximization convention, as `TrainingData.Y` holds it
    assert rows.outcomes["secs"].tolist() == [-2.0, -2.5, -1.5, -3.0, -3.5, -2.5, -4.0, -4.5]
    fired = rows.metrics["fired"]
    assert np.isnan(fired[1]) and fired[[0, 2, 3, 7]].tolist() == [5.0, 4.0, 6.0, 7.5]
    assert set(rows.metrics) == {"fired"}


def test_run_rows_say_why_there_are_none() -> None:
    data = _two_objectives()
    plain = dataclasses.replace(data, metrics={"fired": data.metrics["fired"]})
    assert "no per-run metrics" in str(run_rows(plain))
    assert "directions" in str(run_rows(dataclasses.replace(data, directions=())))
    no_secs = {k: v for k, v in data.metrics.items() if not k.startswith("secs@")}
    assert "['secs']" in str(run_rows(dataclasses.replace(data, metrics=no_secs)))


def test_centre_by_group_removes_each_groups_mean() -> None:
    group = np.array(["a", "b", "a", "b"])
    out = centre_by_group(np.array([1.0, 10.0, 3.0, 30.0]), group)
    assert out.tolist() == [-1.0, -10.0, 1.0, 10.0]


def test_subsample_spreads_the_rows_evenly_over_the_groups() -> None:
    groups = np.repeat(np.arange(5), 6)  # 5 trials of 6 runs
    taken = subsample_groups(groups, 12, seed=3)
    assert len(taken) == 12 and len(set(taken.tolist())) == 12
    assert sorted(np.bincount(groups[taken]).tolist()) == [2, 2, 2, 3, 3]
    assert np.array_equal(taken, subsample_groups(groups, 12, seed=3))  # seeded
    assert np.array_equal(subsample_groups(groups, 30, seed=0), np.arange(30))


def test_per_run_rows_are_read_where_the_trials_report_runs() -> None:
    # 8 trials of 8 runs: one row per run, and the per-run values are never featurized as
    # metrics of the trials (benchmarks/_surrogate_variants.py compares rows of trials)
    s = StructuredSurrogate(config=FEW, flat=FlatSurrogate({"maxiter": 30}))
    info = s.fit(runs_data(8, 0, noise=0.3)).description
    assert info["rows"] == {"kind": "runs", "n": 64, "trials": 8}
    assert not any("@" in f["name"] for f in info["features"]["features"])


def test_keep_base_keeps_every_parameter_of_an_objective_learned_from_runs() -> None:
    # `SelectConfig.keep_base` holds on the per-run path too: the objective reads the metric the
    # runs chose and every parameter (the default drops the parameters that do not help).
    params = {f"x{i}" for i in range(6)}
    found = 0
    for seed in range(3):
        data = runs_data(8, seed, noise=0.3)
        parents = {}
        for keep in (False, True):
            learn = LearnConfig(bootstrap=3, select=SelectConfig(keep_base=keep))
            s = StructuredSurrogate(
                config=dataclasses.replace(FEW, learn=learn), flat=FlatSurrogate({"maxiter": 30})
            )
            edges = s.fit(data).description["edges"]
            parents[keep] = {e[0] for e in edges if e[1] == "o"}
        if "m" in parents[True]:
            found += 1
            assert params <= parents[True]
            assert not params <= parents[False]
    assert found >= 2


def test_the_trials_rows_are_read_without_per_run_metrics_and_it_says_why() -> None:
    s = StructuredSurrogate(config=FAST, flat=FlatSurrogate({"maxiter": 30}))
    rows = s.fit(sum_sine_data(12, seed=0)).description["rows"]
    assert rows["kind"] == "trials" and "no per-run metrics" in rows["reason"]


def test_an_ignored_metric_is_ignored_in_every_run() -> None:
    config = dataclasses.replace(FEW, ignore_metrics=("m",))
    s = StructuredSurrogate(config=config, flat=FlatSurrogate({"maxiter": 30}))
    info = s.fit(runs_data(8, 1, noise=0.3)).description
    assert info["rows"]["kind"] == "runs"
    assert "m" not in {n for e in info["edges"] for n in e[:2]}


def test_run_rows_must_hold_the_trials_nodes() -> None:
    table = chain_table(n=20, seed=0, nuisance=0)
    runs = runs_table_from(table)
    s = learn_structure(**table, config=LearnConfig(bootstrap=2), runs=runs)
    assert s.n_trials == 20
    other = runs._replace(metrics={"m1": runs.metrics["m1"]})
    with pytest.raises(StructureLearningError, match="run rows must hold the trials' nodes"):
        learn_structure(**table, config=LearnConfig(bootstrap=2), runs=other)


def runs_table_from(table: dict[str, dict[str, np.ndarray]]) -> object:
    """Each trial of `table` as two runs: its values plus and minus a little noise."""
    from structure.runs import RunTable

    rng = np.random.default_rng(0)
    n = len(table["objectives"]["o"])

    def twice(values: np.ndarray) -> np.ndarray:
        v = np.asarray(values)
        return np.concatenate([v, v]) + (0 if v.ndim > 1 else 0.01 * rng.standard_normal(2 * n))

    return RunTable(
        {k: np.concatenate([v, v]) for k, v in table["params"].items()},
        {k: twice(v) for k, v in table["metrics"].items()},
        {k: twice(v) for k, v in table["objectives"].items()},
        np.concatenate([np.arange(n), np.arange(n)]),
    )
