"""Exceptions raised by the tuner.

Every error the tuner raises on bad input is a `TunerError`. A method that raises one leaves the
tuner's state exactly as it was before the call. Subclasses also derive from the matching built-in
(`ValueError`, `KeyError`) so generic handlers keep working.
"""

from __future__ import annotations

__all__ = [
    "InvalidArgumentError",
    "InvalidConfigError",
    "InvalidSpecError",
    "InvalidTrialRecordError",
    "InvalidValuesError",
    "SpaceExhaustedError",
    "SurrogateError",
    "TrialStateError",
    "TunerError",
    "UnknownTrialError",
]


class TunerError(Exception):
    """Base class of every error raised by `tuner`."""


class InvalidSpecError(TunerError, ValueError):
    """The tuner's set-up is malformed: objectives, constraints, reference point or options."""


class InvalidArgumentError(TunerError, ValueError):
    """A method argument is malformed (for example ``ask(n)`` with ``n < 1``)."""


class InvalidValuesError(TunerError, ValueError):
    """Values told to the tuner do not match its objectives or metrics (names, count or type)."""


class InvalidConfigError(TunerError, ValueError):
    """A configuration lies outside the tuner's search space."""


class UnknownTrialError(TunerError, KeyError):
    """A trial id the tuner never issued."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class TrialStateError(TunerError, ValueError):
    """An operation is not allowed in the trial's current state (for example telling it twice)."""


class InvalidTrialRecordError(TunerError, ValueError):
    """Stored trial records handed to `Tuner(..., trials=...)` are inconsistent."""


class SurrogateError(TunerError, RuntimeError):
    """A surrogate could not be fitted or returned a model that breaks the `Surrogate` contract."""


class SpaceExhaustedError(TunerError, RuntimeError):
    """No configuration that was not tried already could be found."""
