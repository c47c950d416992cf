"""The trials as `structure.surrogate` reads them: tracking metrics to featurize, prefixes of the
trials (a checkpoint's data) and their keys, node values in model units."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

import torch
from torch import Tensor

from structure.dag import Structure, to_model
from structure.features import FeatureMap
from tuner.surrogate import TrainingData
from tuner.trial import split_run_metric

__all__ = [
    "data_key",
    "first_trials",
    "node_values",
    "outcome_values",
    "raw_metrics",
    "without_metrics",
]


def raw_metrics(data: TrainingData) -> dict[str, Any]:
    """The tracking metrics to featurize: not the modelled outcomes, not a metric named like a
    parameter (it would only echo the parameter, and a node has one name), and not the per-run
    values (``<metric>@<run>``: `structure.runs` reads them)."""
    skip = {*data.outcome_names, *data.space.names}
    return {k: v for k, v in data.metrics.items() if k not in skip and split_run_metric(k) is None}


def without_metrics(data: TrainingData, patterns: Sequence[str]) -> TrainingData:
    """`data` without the tracking metrics matching `patterns` (`StructuredConfig.ignore_metrics`):
    not learned from, not part of a checkpoint's key or seed."""
    if not patterns:
        return data

    def ignored(name: str) -> bool:
        per_run = split_run_metric(name)
        names = (name,) if per_run is None else (name, per_run[0])
        return any(fnmatchcase(n, p) for n in names for p in patterns)

    kept = {k: v for k, v in data.metrics.items() if not ignored(k)}
    return dataclasses.replace(data, metrics=kept)


def first_trials(data: TrainingData, n: int) -> TrainingData:
    """The first ``n`` trials of `data` (a checkpoint's)."""
    return TrainingData(
        X=data.X[:n],
        Y=data.Y[:n],
        outcome_names=list(data.outcome_names),
        metrics={k: v[:n] for k, v in data.metrics.items()},
        space=data.space,
        seed=data.seed,
        n_objectives=data.n_objectives,
        Yvar=data.Yvar[:n] if data.Yvar is not None else None,
        directions=data.directions,
    )


def data_key(data: TrainingData) -> str:
    """Hash of the trials (inputs, outcomes, metrics) that a checkpoint depends on."""
    h = hashlib.sha1()
    h.update(data.X.numpy().tobytes())
    h.update(data.Y.numpy().tobytes())
    for name in sorted(data.metrics):
        h.update(name.encode())
        h.update(data.metrics[name].numpy().tobytes())
    return h.hexdigest()


def outcome_values(data: TrainingData, transforms: Mapping[str, str]) -> Tensor:
    """``n x m`` outcomes in model units (each under its transform)."""
    columns = [to_model(transforms.get(o), data.Y[:, i]) for i, o in enumerate(data.outcome_names)]
    return torch.stack(columns, dim=-1)


def node_values(data: TrainingData, fmap: FeatureMap, structure: Structure) -> dict[str, Tensor]:
    """Model-space values of every metric and outcome node."""
    raw = raw_metrics(data)
    feats = torch.as_tensor(fmap.transform(raw, data.n), dtype=torch.float64)
    values = {f.name: feats[:, j] for j, f in enumerate(fmap.features)}
    Y = outcome_values(data, structure.transforms)
    values.update({name: Y[:, i] for i, name in enumerate(data.outcome_names)})
    return values
