"""Multi-objective Bayesian optimization loop (ask/tell) over a `spaces.Space`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lazyimport import lazy_exports
from tuner.errors import (
    InvalidArgumentError,
    InvalidConfigError,
    InvalidSpecError,
    InvalidTrialRecordError,
    InvalidValuesError,
    SpaceExhaustedError,
    SurrogateError,
    TrialStateError,
    TunerError,
    UnknownTrialError,
)
from tuner.options import TunerOptions
from tuner.trial import Trial, TrialState, run_metric, split_run_metric

if TYPE_CHECKING:
    from tuner.groups import GroupedSurrogate
    from tuner.problem import OutcomeConstraint, parse_constraint
    from tuner.surrogate import Fitted, FlatSurrogate, SaasSurrogate, Surrogate, TrainingData
    from tuner.tuner import Tuner

#: Names whose modules import torch and BoTorch (about 1.5 s), loaded on first use, so that
#: `tuner.Trial` / `tuner.TrialState` (and the records of `studies`) stay cheap to import.
_LAZY = {
    "OutcomeConstraint": "tuner.problem",
    "parse_constraint": "tuner.problem",
    "FlatSurrogate": "tuner.surrogate",
    "Fitted": "tuner.surrogate",
    "GroupedSurrogate": "tuner.groups",
    "SaasSurrogate": "tuner.surrogate",
    "Surrogate": "tuner.surrogate",
    "TrainingData": "tuner.surrogate",
    "Tuner": "tuner.tuner",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "Fitted",
    "FlatSurrogate",
    "GroupedSurrogate",
    "InvalidArgumentError",
    "InvalidConfigError",
    "InvalidSpecError",
    "InvalidTrialRecordError",
    "InvalidValuesError",
    "OutcomeConstraint",
    "SaasSurrogate",
    "SpaceExhaustedError",
    "Surrogate",
    "SurrogateError",
    "TrainingData",
    "Trial",
    "TrialStateError",
    "TrialState",
    "Tuner",
    "TunerError",
    "TunerOptions",
    "UnknownTrialError",
    "parse_constraint",
    "run_metric",
    "split_run_metric",
]
