"""Per-run rows: structure learning at the grain the logs are produced.

A trial of a search often aggregates several runs (workloads x seeds); each run has its own
counters and its own objective values. When the trials report them as per-run metrics
(``<metric>@<run>``, `tuner.trial.run_metric`), `run_rows` builds one row per run with the
trial's parameters repeated: after 10 trials of 12 runs each, structure learning sees 120 rows
instead of 10 means, and within one trial (one configuration) the runs' differences show which
counters move the objectives.

Rows of different groups (the part of the run label before ``/``, e.g. the workload) differ in
level for reasons no parameter explains (a ResNet has no attention to fuse), so every per-run
column is centred on its group's mean over the trials (`centre_by_group`): a fixed effect per
group. The network that is then fitted on the structure stays a model of the trials (their
aggregates), as the acquisition needs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from structure.dag import to_model
from structure.features import FeatureMap
from structure.params import param_nodes
from tuner.surrogate import TrainingData
from tuner.trial import run_group, split_run_metric

__all__ = [
    "RunRows",
    "RunTable",
    "centre_by_group",
    "run_rows",
    "run_table",
    "split_metrics",
    "subsample_groups",
]


@dataclass(frozen=True)
class RunRows:
    """One row per run of the trials (see the module docstring).

    Attributes:
        trial: ``N``-dim int array: the trial (row of the training data) of each run row.
        group: ``N``-dim array of group labels (the run label before its first ``/``).
        metrics: Raw metric name -> ``N``-dim array of the runs' values (NaN where a run did not
            report it).
        outcomes: Outcome name -> ``N``-dim array of the runs' values, objectives in the
            maximization convention (as `TrainingData.Y`).
    """

    trial: np.ndarray
    group: np.ndarray
    metrics: Mapping[str, np.ndarray]
    outcomes: Mapping[str, np.ndarray]

    @property
    def n(self) -> int:
        """Number of run rows."""
        return int(self.trial.shape[0])

    @property
    def n_trials(self) -> int:
        """Number of trials with at least one run row."""
        return int(np.unique(self.trial).size)


def split_metrics(
    metrics: Mapping[str, np.ndarray],
) -> tuple[dict[str, np.ndarray], dict[str, dict[str, np.ndarray]]]:
    """Trial-level metrics, and the per-run ones as run label -> metric name -> values."""
    trial: dict[str, np.ndarray] = {}
    runs: dict[str, dict[str, np.ndarray]] = {}
    for name, values in metrics.items():
        parsed = split_run_metric(name)
        if parsed is None:
            trial[name] = values
        else:
            runs.setdefault(parsed[1], {})[parsed[0]] = values
    return trial, runs


def run_rows(data: TrainingData, metrics: Mapping[str, np.ndarray] | None = None) -> RunRows | str:
    """The run rows of `data`, or why there are none.

    A run of a trial is a row when it reports every outcome (`TrainingData.outcome_names`) as a
    finite ``<outcome>@<run>`` metric; rows are ordered by trial, then by run label.

    Args:
        data: The trials; its ``<metric>@<run>`` metrics are read.
        metrics: The metrics to read instead of ``data.metrics`` (e.g. without ignored ones),
            name -> ``n``-dim array.

    Returns:
        The `RunRows`, or a sentence saying why the trials give none (no per-run metrics, no
        objective directions, an outcome no run reports).
    """
    source = metrics if metrics is not None else data.metrics
    _, runs = split_metrics({k: np.asarray(v, dtype=np.float64) for k, v in source.items()})
    if not runs:
        return "the trials report no per-run metrics (<metric>@<run>)"
    if not data.directions:
        return (
            "the objectives' directions are not known, so per-run objective values cannot be read"
        )
    signs = [-1.0 if d == "minimize" else 1.0 for d in data.directions]
    signs += [1.0] * (len(data.outcome_names) - len(signs))
    missing = [o for o in data.outcome_names if not any(o in m for m in runs.values())]
    if missing:
        return f"no run reports the outcomes {missing} (as <outcome>@<run>)"
    names = sorted({k for m in runs.values() for k in m} - set(data.outcome_names))
    trial_idx: list[int] = []
    labels: list[str] = []
    for i in range(data.n):
        for label in sorted(runs):
            run = runs[label]
            ok = all(o in run and math.isfinite(run[o][i]) for o in data.outcome_names)
            if ok:
                trial_idx.append(i)
                labels.append(label)
    if not trial_idx:
        return "no run reports every outcome"
    index = np.asarray(trial_idx, dtype=np.int64)
    at = {label: np.flatnonzero(np.asarray(labels) == label) for label in runs}
    nan = np.full(len(index), math.nan)

    def column(name: str, sign: float = 1.0) -> np.ndarray:
        out = nan.copy()
        for label, rows in at.items():
            if name in runs[label]:
                out[rows] = sign * runs[label][name][index[rows]]
        return out

    return RunRows(
        trial=index,
        group=np.asarray([run_group(label) for label in labels]),
        metrics={name: column(name) for name in names},
        outcomes={o: column(o, s) for o, s in zip(data.outcome_names, signs)},
    )


class RunTable(NamedTuple):
    """The columns `structure.learn.learn_structure` reads, one row per run."""

    params: dict[str, np.ndarray]
    metrics: dict[str, np.ndarray]
    objectives: dict[str, np.ndarray]
    groups: np.ndarray  # the trial of each row


def run_table(
    data: TrainingData, rows: RunRows, fmap: FeatureMap, transforms: Mapping[str, str]
) -> RunTable:
    """The learning table of `rows`: each parameter node's columns of the row's trial, the
    featurized metrics that the runs report (`fmap` fitted on the trials; a feature none of
    whose sources a run reports is left out), the outcomes in model units (`transforms`), the
    constraint outcomes among the metrics; every metric and outcome column centred on its
    group (`centre_by_group`)."""
    X = data.X.numpy()[rows.trial]
    params = {name: X[:, cols] for name, cols in param_nodes(data.space).items()}
    reported = [f for f in fmap.features if any(src in rows.metrics for src in f.sources)]
    feats = FeatureMap(tuple(reported)).transform(rows.metrics, rows.n)
    metrics = {f.name: centre_by_group(feats[:, j], rows.group) for j, f in enumerate(reported)}
    outcomes = {
        o: centre_by_group(
            to_model(transforms.get(o), torch.as_tensor(rows.outcomes[o])).numpy(), rows.group
        )
        for o in data.outcome_names
    }
    objectives = data.outcome_names[: data.n_objectives]
    metrics.update({c: v for c, v in outcomes.items() if c not in objectives})
    return RunTable(params, metrics, {o: outcomes[o] for o in objectives}, rows.trial)


def centre_by_group(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """``values`` (``N``-dim) less the mean of its group (``N``-dim labels)."""
    out = np.asarray(values, dtype=np.float64).copy()
    for g in np.unique(group):
        rows = group == g
        out[rows] -= out[rows].mean()
    return out


def subsample_groups(groups: np.ndarray, most: int, seed: int) -> np.ndarray:
    """Indices of at most `most` rows, as evenly spread over the `groups` (``N``-dim labels,
    e.g. the trial of each run row) as they allow: every group's rows in a seeded random order,
    taken round-robin. All rows (in order) when there are no more than `most`."""
    n = len(groups)
    if n <= most:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    labels = np.unique(groups)
    queues: Sequence[np.ndarray] = [
        rng.permutation(np.flatnonzero(groups == labels[j])) for j in rng.permutation(len(labels))
    ]
    taken: list[int] = []
    depth = 0
    while len(taken) < most:
        for q in queues:
            if depth < len(q) and len(taken) < most:
                taken.append(int(q[depth]))
        depth += 1
    return np.sort(np.asarray(taken, dtype=np.int64))
