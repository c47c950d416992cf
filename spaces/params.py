"""Parameter types: `Float`, `Int`, `Choice`, `Bool`, `Fixed` and `Simplex`.

Unit-cube encodings (what the GP sees; every column lies in [0, 1]):

- ``Float(low, high, log)``: one column, affine in ``x`` (or in ``log x`` when ``log=True``).
- ``Int(low, high, log)``: one column, affine in ``x`` (or ``log x``); decoding rounds to the
  nearest integer. Ranges of at most `MAX_DISCRETE_VALUES` values are also reported as discrete
  columns so optimizers can enumerate them.
- ``Choice(values, ordered=False)``: one-hot, one column per value; decoding takes the argmax
  (so any point decodes). ``ordered=True``: one column holding ``index / (n - 1)``, rounded.
- ``Bool()``: one column in {0, 1}; decoding thresholds at 0.5.
- ``Fixed(value)``: no column.
- ``Simplex(names)``: k columns holding the k weights themselves, plus one linear equality
  constraint (the k columns sum to 1) that BoTorch's ``optimize_acqf`` honors. Decoding clips
  negatives to zero and renormalizes (an all-zero block decodes to uniform weights), so every
  point decodes to a valid simplex.

Why the simplex keeps k columns instead of mapping onto k - 1 free coordinates (stick-breaking,
or a derived last weight): the GP then sees each rule's weight directly, with its own ARD
lengthscale, symmetric in all rules; the map is linear, so the acquisition surface is not warped;
structure learning can name an edge "prior of rule r -> metric"; and BoTorch supports the
equality constraint natively. Stick-breaking makes the meaning of coordinate i depend on all
earlier ones, and a derived last weight breaks the symmetry between rules.

Sampling (`Parameter.sample`) maps uniform Sobol coordinates onto each type: ints and choices
by equal-width bins (log ints by flooring a log-uniform draw over ``[low, high + 1)``), and a
simplex by the Dirichlet(1) map ``w_i = e_i / sum(e)`` with ``e_i = -log(1 - u_i)``, which is
uniform on the simplex and needs no rejection.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from spaces.base import Parameter, check_finite_number
from spaces.errors import SpaceError

__all__ = [
    "MAX_DISCRETE_VALUES",
    "MAX_INT_MAGNITUDE",
    "SIMPLEX_TOL",
    "Bool",
    "Choice",
    "Fixed",
    "Float",
    "Int",
    "Simplex",
    "parameter_from_dict",
]

MAX_DISCRETE_VALUES = 256
"""Int ranges with at most this many values are reported as discrete columns."""

MAX_INT_MAGNITUDE = 2**53
"""`Int` bounds lie in ``[-2**53, 2**53]``: the integers float64 (the unit-cube encoding)
represents exactly, and that decode back to int64."""

SIMPLEX_TOL = 1e-6
"""A simplex value must sum to 1 within this absolute tolerance."""

_JSON_SCALARS = (str, int, float, bool, type(None))


def _unit_clip(U: np.ndarray) -> np.ndarray:
    return np.clip(np.nan_to_num(U, nan=0.5), 0.0, 1.0)


def _check_bounds(kind: str, low: float, high: float, log: bool) -> None:
    if not (math.isfinite(low) and math.isfinite(high)):
        raise SpaceError(f"{kind} bounds must be finite, but got ({low=}, {high=}).")
    if low >= high:
        raise SpaceError(
            f"{kind} needs `low < high`, but got ({low=}, {high=}). "
            "Swap the bounds, or use Fixed(value) for a constant."
        )
    if log and low <= 0:
        raise SpaceError(
            f"{kind} with log=True needs `low > 0`, but got {low=}. "
            "Use a positive lower bound or log=False."
        )


@dataclass(frozen=True)
class _Range(Parameter):
    """Shared affine / logarithmic map of Float and Int."""

    low: float
    high: float
    log: bool = False

    @property
    def width(self) -> int:
        return 1

    def column_names(self, name: str) -> list[str]:
        return [name]

    def _to_unit(self, x: np.ndarray) -> np.ndarray:
        if self.log:
            lo, hi = math.log(self.low), math.log(self.high)
            return (np.log(x) - lo) / (hi - lo)
        return (x - self.low) / (self.high - self.low)

    def _from_unit(self, u: np.ndarray) -> np.ndarray:
        if self.log:
            lo, hi = math.log(self.low), math.log(self.high)
            return np.exp(lo + u * (hi - lo))
        return self.low + u * (self.high - self.low)

    def _range_check(self, name: str, x: float) -> None:
        if not self.low <= x <= self.high:
            raise SpaceError(
                f"Parameter {name!r} must lie in [{self.low}, {self.high}], but got {x!r}."
            )

    def encode(self, values: list[Any]) -> np.ndarray:
        x = np.asarray(values, dtype=np.float64)
        return np.clip(self._to_unit(x), 0.0, 1.0).reshape(-1, 1)


@dataclass(frozen=True)
class Float(_Range):
    """A real number in ``[low, high]``, optionally on a log scale.

    Args:
        low: Lower bound (``> 0`` when ``log``).
        high: Upper bound, ``> low``.
        log: Encode ``log x`` instead of ``x``.
        default: Default value; the (geometric, when ``log``) midpoint if omitted.
    """

    default: float | None = None
    kind: ClassVar[str] = "float"

    def __post_init__(self) -> None:
        object.__setattr__(self, "low", check_finite_number("Float.low", self.low))
        object.__setattr__(self, "high", check_finite_number("Float.high", self.high))
        _check_bounds("Float", self.low, self.high, self.log)
        if self.default is not None:
            self.check("default", self.default)

    def check(self, name: str, value: Any) -> float:
        x = check_finite_number(name, value)
        self._range_check(name, x)
        return x

    def decode(self, U: np.ndarray) -> list[Any]:
        x = np.clip(self._from_unit(_unit_clip(U[:, 0])), self.low, self.high)
        return x.tolist()

    def default_value(self) -> float:
        if self.default is not None:
            return float(self.default)
        return float(self._from_unit(np.array(0.5)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "low": self.low,
            "high": self.high,
            "log": self.log,
            "default": self.default,
        }


@dataclass(frozen=True)
class Int(_Range):
    """An integer in ``[low, high]`` (both included), optionally on a log scale.

    Args:
        low: Lower bound (``>= 1`` when ``log``).
        high: Upper bound, ``> low``.
        log: Encode ``log x`` instead of ``x``.
        default: Default value; the rounded (geometric) midpoint if omitted.
    """

    default: int | None = None
    kind: ClassVar[str] = "int"

    def __post_init__(self) -> None:
        for attr in ("low", "high"):
            v = getattr(self, attr)
            if isinstance(v, bool) or not isinstance(v, int | np.integer):
                raise SpaceError(
                    f"Int.{attr} must be an integer, but got {v!r}. Use Float for real ranges."
                )
            if abs(int(v)) > MAX_INT_MAGNITUDE:
                raise SpaceError(
                    f"Int.{attr} must lie in [-2**53, 2**53] (the integers the float64 unit-cube "
                    f"encoding holds exactly), but got {attr}={int(v)!r}. Use "
                    "Float(low, high, log=True) for a wider range."
                )
            object.__setattr__(self, attr, int(v))
        _check_bounds("Int", self.low, self.high, self.log)
        if self.default is not None:
            self.check("default", self.default)

    @property
    def n_values(self) -> int:
        return int(self.high) - int(self.low) + 1

    def check(self, name: str, value: Any) -> int:
        if isinstance(value, float | np.floating) and float(value).is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise SpaceError(
                f"Parameter {name!r} expects an integer, but got {value!r} "
                f"of type {type(value).__name__}."
            )
        self._range_check(name, int(value))
        return int(value)

    def decode(self, U: np.ndarray) -> list[Any]:
        x = np.rint(self._from_unit(_unit_clip(U[:, 0])))
        return np.clip(x, self.low, self.high).astype(np.int64).tolist()

    def sample(self, U: np.ndarray) -> list[Any]:
        """Uniform (or log-uniform) over ``[low, high + 1)``, floored, so the end points are not
        halved: each ``k`` gets probability ``1 / n_values`` (or ``log((k + 1) / k) /
        log((high + 1) / low)`` when ``log``).

        Sampling does not go through `decode`, whose rounding is about the nearest encoded value.
        """
        u = _unit_clip(U[:, 0])
        if self.log:
            lo, hi = math.log(self.low), math.log(self.high + 1)
            x = np.floor(np.exp(lo + u * (hi - lo)))
        else:
            x = self.low + np.floor(u * self.n_values)
        return np.clip(x, self.low, self.high).astype(np.int64).tolist()

    def discrete_values(self) -> dict[int, list[float]]:
        if self.n_values > MAX_DISCRETE_VALUES:
            return {}
        values = np.arange(self.low, self.high + 1, dtype=np.float64)
        return {0: np.clip(self._to_unit(values), 0.0, 1.0).tolist()}

    def default_value(self) -> int:
        if self.default is not None:
            return int(self.default)
        return int(np.clip(np.rint(self._from_unit(np.array(0.5))), self.low, self.high))

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "low": self.low,
            "high": self.high,
            "log": self.log,
            "default": self.default,
        }


def _same(a: Any, b: Any) -> bool:
    """Equality that keeps bools apart from numbers (``True != 1`` here)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


@dataclass(frozen=True)
class Choice(Parameter):
    """One of a list of JSON scalars (str, int, float, bool, None).

    Args:
        values: The options, non-empty and distinct.
        ordered: Encode the index on one column (for options with a natural order) instead of
            one-hot.
        default: Default option; the first one if omitted.
    """

    values: tuple[Any, ...]
    ordered: bool = False
    default: Any = None
    kind: ClassVar[str] = "choice"

    def __post_init__(self) -> None:
        if isinstance(self.values, str | bytes) or not hasattr(self.values, "__iter__"):
            raise SpaceError(f"Choice needs a list of values, but got {self.values!r}.")
        values = tuple(self.values)
        object.__setattr__(self, "values", values)
        if not values:
            raise SpaceError("Choice needs at least one value, but got an empty list.")
        for v in values:
            if not isinstance(v, _JSON_SCALARS) or (isinstance(v, float) and not math.isfinite(v)):
                raise SpaceError(
                    f"Choice values must be finite JSON scalars (str, int, float, bool, None), "
                    f"but got {v!r} of type {type(v).__name__}."
                )
        for i, v in enumerate(values):
            if any(_same(v, w) for w in values[:i]):
                raise SpaceError(f"Choice values must be distinct, but {v!r} repeats in {values}.")
        if self.default is not None:
            self.check("default", self.default)

    @property
    def width(self) -> int:
        return 1 if self.ordered else len(self.values)

    def column_names(self, name: str) -> list[str]:
        if self.ordered:
            return [name]
        return [f"{name}={v}" for v in self.values]

    def index(self, value: Any) -> int | None:
        for i, v in enumerate(self.values):
            if _same(v, value):
                return i
        return None

    def check(self, name: str, value: Any) -> Any:
        i = self.index(value)
        if i is None:
            raise SpaceError(
                f"Parameter {name!r} must be one of {list(self.values)}, but got {value!r}."
            )
        return self.values[i]

    def encode(self, values: list[Any]) -> np.ndarray:
        idx = np.array([self.index(v) for v in values], dtype=np.int64)
        n = len(self.values)
        if self.ordered:
            return (idx / max(n - 1, 1)).astype(np.float64).reshape(-1, 1)
        out = np.zeros((len(values), n))
        out[np.arange(len(values)), idx] = 1.0
        return out

    def _pick(self, idx: np.ndarray) -> list[Any]:
        return [self.values[i] for i in idx.tolist()]

    def decode(self, U: np.ndarray) -> list[Any]:
        n = len(self.values)
        if self.ordered:
            idx = np.clip(np.rint(_unit_clip(U[:, 0]) * (n - 1)), 0, n - 1).astype(np.int64)
        else:
            idx = np.argmax(np.nan_to_num(U, nan=0.0), axis=1)
        return self._pick(idx)

    def sample(self, U: np.ndarray) -> list[Any]:
        n = len(self.values)
        idx = np.clip(np.floor(_unit_clip(U[:, 0]) * n), 0, n - 1).astype(np.int64)
        return self._pick(idx)

    @property
    def sample_width(self) -> int:
        return 1

    def discrete_values(self) -> dict[int, list[float]]:
        if not self.ordered:
            return {}
        n = len(self.values)
        return {0: [i / max(n - 1, 1) for i in range(n)]}

    def default_value(self) -> Any:
        return self.values[0] if self.default is None else self.check("default", self.default)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "values": list(self.values),
            "ordered": self.ordered,
            "default": self.default,
        }


@dataclass(frozen=True)
class Bool(Parameter):
    """True or False, encoded on one column in {0, 1}.

    Args:
        default: Default value; False if omitted.
    """

    default: bool | None = None
    kind: ClassVar[str] = "bool"

    def __post_init__(self) -> None:
        if self.default is not None:
            self.check("default", self.default)

    @property
    def width(self) -> int:
        return 1

    def column_names(self, name: str) -> list[str]:
        return [name]

    def check(self, name: str, value: Any) -> bool:
        if not isinstance(value, bool | np.bool_):
            raise SpaceError(
                f"Parameter {name!r} expects True or False, but got {value!r} "
                f"of type {type(value).__name__}."
            )
        return bool(value)

    def encode(self, values: list[Any]) -> np.ndarray:
        return np.asarray(values, dtype=np.float64).reshape(-1, 1)

    def decode(self, U: np.ndarray) -> list[Any]:
        return (_unit_clip(U[:, 0]) >= 0.5).tolist()

    def discrete_values(self) -> dict[int, list[float]]:
        return {0: [0.0, 1.0]}

    def default_value(self) -> bool:
        return bool(self.default) if self.default is not None else False

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "default": self.default}


@dataclass(frozen=True)
class Fixed(Parameter):
    """A constant carried in every configuration; it occupies no unit-cube column.

    Args:
        value: Any JSON-serializable value.
    """

    value: Any
    kind: ClassVar[str] = "fixed"

    def __post_init__(self) -> None:
        try:
            text = json.dumps(self.value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise SpaceError(
                f"Fixed value must be JSON-serializable and finite, but got {self.value!r} ({exc})."
            ) from None
        object.__setattr__(self, "value", json.loads(text))

    @property
    def default(self) -> Any:
        return self.value

    @property
    def width(self) -> int:
        return 0

    def column_names(self, name: str) -> list[str]:
        return []

    def check(self, name: str, value: Any) -> Any:
        if value != self.value:
            raise SpaceError(f"Parameter {name!r} is fixed to {self.value!r}, but got {value!r}.")
        return self.value

    def encode(self, values: list[Any]) -> np.ndarray:
        return np.zeros((len(values), 0))

    def decode(self, U: np.ndarray) -> list[Any]:
        return [self.value] * U.shape[0]

    def default_value(self) -> Any:
        return self.value

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "value": self.value}


@dataclass(frozen=True)
class Simplex(Parameter):
    """A block of k >= 2 non-negative named weights that sum to 1 (e.g. rule firing priors).

    A value is a dict ``{part name: weight}`` with every name present.

    Args:
        names: The k part names, distinct non-empty strings.
        default: Default weights; uniform if omitted.
    """

    names: tuple[str, ...]
    default: dict[str, float] | None = field(default=None, hash=False)
    kind: ClassVar[str] = "simplex"

    def __post_init__(self) -> None:
        if isinstance(self.names, str) or not hasattr(self.names, "__iter__"):
            raise SpaceError(f"Simplex needs a list of part names, but got {self.names!r}.")
        names = tuple(self.names)
        object.__setattr__(self, "names", names)
        if len(names) < 2:
            raise SpaceError(
                f"Simplex needs at least 2 parts, but got {len(names)}: {list(names)}. "
                "A single weight is always 1; use Fixed instead."
            )
        for n in names:
            if not isinstance(n, str) or not n:
                raise SpaceError(f"Simplex part names must be non-empty strings, but got {n!r}.")
        seen: set[str] = set()
        dupes = sorted({n for n in names if n in seen or seen.add(n)})  # type: ignore[func-returns-value]
        if dupes:
            raise SpaceError(f"Simplex part names must be distinct, but {dupes} repeat.")
        if self.default is not None:
            object.__setattr__(self, "default", self.check("default", self.default))

    @property
    def width(self) -> int:
        return len(self.names)

    def column_names(self, name: str) -> list[str]:
        return [f"{name}.{n}" for n in self.names]

    def check(self, name: str, value: Any) -> dict[str, float]:
        if not isinstance(value, dict):
            raise SpaceError(
                f"Simplex {name!r} expects a dict of part name to weight, but got "
                f"{type(value).__name__}: {value!r}."
            )
        missing = [n for n in self.names if n not in value]
        extra = [k for k in value if k not in self.names]
        if missing or extra:
            raise SpaceError(
                f"Simplex {name!r} must name exactly its parts {list(self.names)}; "
                f"missing {missing}, unknown {extra}."
            )
        w = [check_finite_number(f"{name}.{n}", value[n]) for n in self.names]
        if min(w) < 0:
            bad = {n: value[n] for n, x in zip(self.names, w) if x < 0}
            raise SpaceError(f"Simplex {name!r} weights must be >= 0, but got {bad}.")
        total = math.fsum(w)
        if abs(total - 1.0) > SIMPLEX_TOL:
            raise SpaceError(
                f"Simplex {name!r} weights must sum to 1 (within {SIMPLEX_TOL}), but sum to "
                f"{total!r}. Divide each weight by their sum."
            )
        return dict(zip(self.names, w))

    def encode(self, values: list[Any]) -> np.ndarray:
        return np.array([[v[n] for n in self.names] for v in values], dtype=np.float64).reshape(
            len(values), len(self.names)
        )

    def decode(self, U: np.ndarray) -> list[Any]:
        W = np.clip(np.nan_to_num(U, nan=0.0), 0.0, None)
        total = W.sum(axis=1, keepdims=True)
        k = len(self.names)
        W = np.where(total > 0, W / np.where(total > 0, total, 1.0), 1.0 / k)
        return [dict(zip(self.names, row)) for row in W.tolist()]

    def sample(self, U: np.ndarray) -> list[Any]:
        E = -np.log1p(-np.clip(U, 0.0, 1.0 - 1e-12))
        return self.decode(E + 1e-300)

    def default_value(self) -> dict[str, float]:
        if self.default is not None:
            return dict(self.default)
        return {n: 1.0 / len(self.names) for n in self.names}

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "names": list(self.names), "default": self.default}


_TYPES: dict[str, type[Parameter]] = {
    cls.kind: cls for cls in (Float, Int, Choice, Bool, Fixed, Simplex)
}


def parameter_from_dict(d: dict[str, Any]) -> Parameter:
    """Rebuild a parameter from `Parameter.to_dict` output.

    Raises:
        SpaceError: If the type is unknown or a field is missing or invalid.
    """
    if not isinstance(d, dict) or "type" not in d:
        raise SpaceError(f"A parameter entry must be a dict with a 'type', but got {d!r}.")
    kind = d["type"]
    if kind not in _TYPES:
        raise SpaceError(f"Unknown parameter type {kind!r}; expected one of {sorted(_TYPES)}.")
    fields = {k: v for k, v in d.items() if k not in ("type", "name")}
    try:
        return _TYPES[kind](**fields)
    except TypeError as exc:
        raise SpaceError(f"Invalid fields for a {kind!r} parameter: {fields!r} ({exc}).") from None
