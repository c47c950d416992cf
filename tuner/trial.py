"""Trials: the tuner's records, and the states they move through.

A trial is created WAITING (enqueued, not yet handed out) or RUNNING (returned by `Tuner.ask`),
and ends COMPLETE (told finite values) or FAILED (failed, or told NaN/inf). Trials are immutable
snapshots: a state change replaces the tuner's record with a new `Trial`; a `Trial` you hold is
never modified by later calls. Do not mutate its `config`, `values` or `metrics` dicts.

Per-run metrics. A trial often aggregates several runs (workloads, seeds); a metric named
``<metric>@<run>`` (`run_metric`) is the value of ``<metric>`` in one run of the trial, beside the
trial's aggregate ``<metric>``. An objective's per-run value (``anytime_hv@gpt2/0``) is in the
objective's own direction. A run label ``<group>/<replicate>`` (e.g. ``workload/seed``) says which
runs are alike: runs of one group are compared with each other across trials (the structured
surrogate centres each per-run column on its group's mean). They are ordinary metrics to
storage; `split_run_metric` reads the name back.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tuner.errors import InvalidArgumentError, InvalidTrialRecordError

__all__ = [
    "RUN_SEPARATOR",
    "Trial",
    "TrialState",
    "metric_patterns",
    "run_group",
    "run_metric",
    "split_run_metric",
]

RUN_SEPARATOR = "@"
"""Separates a per-run metric's name from its run label: ``<metric>@<run>``."""


def run_metric(metric: str, run: str) -> str:
    """The name of `metric`'s value in one run: ``<metric>@<run>`` (see the module docstring).

    Raises:
        InvalidArgumentError: `metric` or `run` is empty, or `run` holds the separator.
    """
    if not metric or not run or RUN_SEPARATOR in run:
        raise InvalidArgumentError(
            f"A per-run metric needs a metric name and a run label without {RUN_SEPARATOR!r}, "
            f"e.g. run_metric('final_hv', 'gpt2/0'); got {metric=}, {run=}."
        )
    return f"{metric}{RUN_SEPARATOR}{run}"


def split_run_metric(name: str) -> tuple[str, str] | None:
    """``(metric, run)`` of a per-run metric name (`run_metric`), None for any other name."""
    metric, sep, run = name.rpartition(RUN_SEPARATOR)
    return (metric, run) if sep and metric and run else None


def run_group(run: str) -> str:
    """The group of a run label ``<group>/<replicate>`` (e.g. the workload of
    ``gpt2/0``); a label without ``/`` is a group of its own."""
    return run.split("/", 1)[0]


def metric_patterns(value: Any, owner: str) -> tuple[str, ...]:
    """`value` checked as `fnmatch` patterns of metric names (``ignore_metrics`` of
    `structure.StructuredConfig` and `studies.StudySettings`; `owner` names the field).

    Raises:
        InvalidArgumentError: `value` is not a list or tuple of strings.
    """
    if not isinstance(value, list | tuple) or not all(isinstance(p, str) for p in value):
        raise InvalidArgumentError(
            f"{owner} must be a list of metric-name patterns, e.g. ['time.*'], got {value!r}."
        )
    return tuple(value)


class TrialState(enum.StrEnum):
    """Life cycle of a trial: WAITING -> RUNNING -> COMPLETE | FAILED (WAITING may also end)."""

    WAITING = "WAITING"
    RUNNING = "RUNNING"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"

    @property
    def is_finished(self) -> bool:
        """Whether the trial reached a final state (COMPLETE or FAILED)."""
        return self in (TrialState.COMPLETE, TrialState.FAILED)


@dataclass(frozen=True)
class Trial:
    """One evaluation of a configuration.

    Attributes:
        id: Position in the tuner's trial list (0, 1, 2, ...).
        config: The configuration, valid in the tuner's space.
        state: Where the trial is in its life cycle.
        values: Objective values by name once COMPLETE, else `None`.
        metrics: Tracking and constraint metrics by name (may be reported with a failure too).
        error: Why the trial FAILED, else `None`.
    """

    id: int
    config: dict[str, Any]
    state: TrialState = TrialState.RUNNING
    values: dict[str, float] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able copy (the state as its name); read back by `Trial.from_dict`."""
        return {
            "id": self.id,
            "config": copy.deepcopy(self.config),
            "state": self.state.value,
            "values": None if self.values is None else dict(self.values),
            "metrics": dict(self.metrics),
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Trial:
        """Rebuild a trial written by `Trial.to_dict`.

        Raises:
            InvalidTrialRecordError: If a field is missing or has the wrong type.
        """
        try:
            return cls(
                id=_as_id(d["id"]),
                config=copy.deepcopy(dict(d["config"])),
                state=TrialState(d["state"]),
                values=None if d.get("values") is None else _floats(d["values"]),
                metrics=_floats(d.get("metrics") or {}),
                error=None if d.get("error") is None else str(d["error"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise InvalidTrialRecordError(
                "A trial record is a dict with 'id' (int), 'config' (dict) and 'state' fields, "
                f"and optional 'values' and 'metrics' dicts of numbers; got {d!r} ({err})."
            ) from err


def _as_id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"trial id must be an int, got {value!r}")
    return value


def _floats(d: Mapping[str, Any]) -> dict[str, float]:
    return {str(k): float(v) for k, v in d.items()}
