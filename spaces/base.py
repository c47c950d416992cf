"""The `Parameter` contract: one named dimension of a search space.

A parameter knows how to validate a value, how many unit-cube columns it occupies, and how to
map values to and from those columns. Encoding is vectorized over configurations: `encode`
takes a list of values and returns an ``n x width`` array, `decode` takes an ``n x width``
array and returns a list of values. Decoding never fails: any point of the unit cube decodes to
a valid value (rounding, clipping and renormalizing as each type documents).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from spaces.errors import SpaceError

__all__ = ["Parameter"]


class Parameter(ABC):
    """Abstract base of every parameter type.

    Subclasses are frozen dataclasses; they validate their arguments once in ``__post_init__``.
    """

    kind: ClassVar[str]

    @property
    @abstractmethod
    def width(self) -> int:
        """Number of unit-cube columns this parameter occupies (0 for a fixed value)."""

    @abstractmethod
    def column_names(self, name: str) -> list[str]:
        """Names of the unit-cube columns, given the parameter's own name."""

    @abstractmethod
    def check(self, name: str, value: Any) -> Any:
        """Validate ``value`` and return it in canonical form.

        Raises:
            SpaceError: If the value has the wrong type or lies outside the parameter.
        """

    @abstractmethod
    def encode(self, values: list[Any]) -> np.ndarray:
        """Map ``n`` valid values to an ``n x width`` float64 array in [0, 1]."""

    @abstractmethod
    def decode(self, U: np.ndarray) -> list[Any]:
        """Map an ``n x width`` array (any reals; clipped to [0, 1]) to ``n`` valid values."""

    @abstractmethod
    def default_value(self) -> Any:
        """The parameter's default, or a documented central value when none was given."""

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """JSON-able description, read back by `spaces.params.parameter_from_dict`."""

    def discrete_values(self) -> dict[int, list[float]]:
        """Allowed unit values per own column, for columns that are discrete (default: none)."""
        return {}

    @property
    def sample_width(self) -> int:
        """Number of uniform coordinates `sample` consumes (default: `width`)."""
        return self.width

    def sample(self, U: np.ndarray) -> list[Any]:
        """Map an ``n x sample_width`` array of uniform [0, 1) draws to ``n`` valid values.

        The default decodes the draws; types override it where decoding would not give an even
        spread (end points of integer ranges, one-hot choices, simplex blocks).
        """
        return self.decode(U)


def check_finite_number(name: str, value: Any) -> float:
    """Return ``value`` as a float, or raise a `SpaceError` naming ``name``."""
    t = type(value)
    if (t is float or t is int) and math.isfinite(value):  # fast path: plain Python numbers
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise SpaceError(
            f"Parameter {name!r} expects a number, but got {value!r} "
            f"of type {type(value).__name__}. Pass an int or float."
        )
    value = float(value)
    if not math.isfinite(value):
        raise SpaceError(f"Parameter {name!r} must be finite, but got {value!r}.")
    return value
