"""Multi-objective Bayesian optimization loop (ask/tell) over a `spaces.Space`."""

from __future__ import annotations

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
from tuner.problem import OutcomeConstraint, parse_constraint
from tuner.surrogate import FlatSurrogate, SaasSurrogate, Surrogate, TrainingData
from tuner.trial import Trial, TrialState
from tuner.tuner import Tuner

__all__ = [
    "FlatSurrogate",
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
]
