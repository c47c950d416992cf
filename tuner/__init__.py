"""Multi-objective Bayesian optimization loop (ask/tell) over a `spaces.Space`."""

from __future__ import annotations

from tuner.errors import (
    InvalidConfigError,
    InvalidSpecError,
    InvalidTrialRecordError,
    InvalidValuesError,
    SurrogateError,
    TrialStateError,
    TunerError,
    UnknownTrialError,
)
from tuner.surrogate import FlatSurrogate, Surrogate, TrainingData

__all__ = [
    "FlatSurrogate",
    "InvalidConfigError",
    "InvalidSpecError",
    "InvalidTrialRecordError",
    "InvalidValuesError",
    "Surrogate",
    "SurrogateError",
    "TrainingData",
    "TrialStateError",
    "TunerError",
    "UnknownTrialError",
]
