"""`Space`: named, ordered parameters and their joint unit-cube encoding for BoTorch.

A configuration is a plain dict ``{name: value}``; a `Simplex` value is itself a dict of part
name to weight. The encoding concatenates each parameter's columns in declaration order (see
`spaces.params` for each type's encoding) and exposes what BoTorch's optimizers need: bounds,
linear equality constraints (one per simplex block), discrete columns with their allowed values,
and one-hot groups.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.quasirandom import SobolEngine

from spaces.base import Parameter
from spaces.errors import SpaceError
from spaces.params import Choice, Simplex, parameter_from_dict

__all__ = ["FORMAT_VERSION", "Space"]

FORMAT_VERSION = 1
"""Version of the `Space.to_dict` format. Older versions stay loadable."""


class Space:
    """An ordered collection of named parameters.

    Args:
        params: Mapping of parameter name to `Parameter`, in the order the unit-cube columns are
            laid out.

    Raises:
        SpaceError: If the mapping is empty, a name is not a non-empty string, or a value is not a
            `Parameter`.

    Example:
        >>> space = Space({"tau": Float(0.01, 10.0, log=True), "priors": Simplex(["a", "b"])})
        >>> X = space.to_unit([{"tau": 1.0, "priors": {"a": 0.25, "b": 0.75}}])
        >>> space.from_unit(X)[0]["priors"]
        {'a': 0.25, 'b': 0.75}
    """

    def __init__(self, params: Mapping[str, Parameter]) -> None:
        if not isinstance(params, Mapping) or not params:
            raise SpaceError(
                f"Space needs a non-empty dict of name to parameter, but got {params!r}."
            )
        for name, p in params.items():
            if not isinstance(name, str) or not name:
                raise SpaceError(f"Parameter names must be non-empty strings, but got {name!r}.")
            if not isinstance(p, Parameter):
                raise SpaceError(
                    f"Parameter {name!r} must be a spaces parameter (Float, Int, Choice, Bool, "
                    f"Fixed, Simplex), but got {type(p).__name__}: {p!r}."
                )
        self._params: dict[str, Parameter] = dict(params)
        self._slices: dict[str, slice] = {}
        start = 0
        for name, p in self._params.items():
            self._slices[name] = slice(start, start + p.width)
            start += p.width
        self._dim = start

    # ----------------------------------------------------------------- structure
    @property
    def params(self) -> dict[str, Parameter]:
        """Name to parameter, in column order (a copy)."""
        return dict(self._params)

    @property
    def names(self) -> list[str]:
        return list(self._params)

    def __iter__(self) -> Iterator[str]:
        return iter(self._params)

    def __len__(self) -> int:
        return len(self._params)

    def __getitem__(self, name: str) -> Parameter:
        """The parameter named ``name``.

        Raises:
            SpaceError: If the space has no parameter ``name``.
        """
        self._check_name(name)
        return self._params[name]

    def _check_name(self, name: Any) -> None:
        if not isinstance(name, str) or name not in self._params:
            names = self.names
            shown = ", ".join(map(repr, names[:20])) + (", ..." if len(names) > 20 else "")
            raise SpaceError(
                f"This space has no parameter {name!r}; its {len(names)} parameters are {shown}."
            )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Space) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        inner = ", ".join(f"{n!r}: {p!r}" for n, p in self._params.items())
        return f"Space({{{inner}}})"

    @property
    def dim(self) -> int:
        """Number of unit-cube columns ``d``."""
        return self._dim

    def columns_of(self, name: str) -> list[int]:
        """Column indices occupied by parameter ``name``.

        Raises:
            SpaceError: If the space has no parameter ``name``.
        """
        self._check_name(name)
        s = self._slices[name]
        return list(range(s.start, s.stop))

    @property
    def columns(self) -> list[str]:
        """A name per unit-cube column, e.g. ``"priors.fuse"`` or ``"selection=softmax"``."""
        return [c for n, p in self._params.items() for c in p.column_names(n)]

    @property
    def bounds(self) -> Tensor:
        """``2 x d`` float64 tensor: zeros, then ones."""
        return torch.stack([torch.zeros(self._dim), torch.ones(self._dim)]).double()

    @property
    def equality_constraints(self) -> list[tuple[Tensor, Tensor, float]]:
        """BoTorch-format equalities ``sum(coefficients * X[..., indices]) == rhs``.

        One per `Simplex` block: its columns sum to 1.
        """
        return [
            (torch.tensor(cols, dtype=torch.long), torch.ones(len(cols), dtype=torch.float64), 1.0)
            for cols in self.simplex_dims.values()
        ]

    @property
    def inequality_constraints(self) -> list[tuple[Tensor, Tensor, float]]:
        """BoTorch-format inequalities ``sum(coefficients * X[..., indices]) >= rhs`` (none yet)."""
        return []

    @property
    def discrete_dims(self) -> dict[int, list[float]]:
        """Column index to its sorted allowed unit values (ints, ordered choices, bools)."""
        out: dict[int, list[float]] = {}
        for name, p in self._params.items():
            start = self._slices[name].start
            for j, values in p.discrete_values().items():
                out[start + j] = values
        return out

    @property
    def categorical_dims(self) -> list[list[int]]:
        """One-hot column groups of unordered `Choice` parameters."""
        return [
            self.columns_of(n)
            for n, p in self._params.items()
            if isinstance(p, Choice) and not p.ordered
        ]

    @property
    def simplex_dims(self) -> dict[str, list[int]]:
        """Simplex parameter name to its columns."""
        return {n: self.columns_of(n) for n, p in self._params.items() if isinstance(p, Simplex)}

    # ----------------------------------------------------------------- configs
    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Check a configuration and return it in canonical form.

        Canonical form: ints as `int`, floats as `float`, choices as the space's own value
        objects. Simplex weights are kept as given (they already sum to 1 within
        `spaces.params.SIMPLEX_TOL`); decoding renormalizes them.

        Raises:
            SpaceError: For a non-dict, missing or unknown keys, wrong types, values out of range,
                or a simplex whose weights are negative or do not sum to 1.
        """
        if not isinstance(config, Mapping):
            raise SpaceError(
                f"A configuration must be a dict of parameter name to value, but got "
                f"{type(config).__name__}: {config!r}."
            )
        missing = [n for n in self._params if n not in config]
        extra = [k for k in config if k not in self._params]
        if missing or extra:
            raise SpaceError(
                f"Configuration keys must match the space's parameters {self.names}; "
                f"missing {missing}, unknown {extra}."
            )
        return {n: p.check(n, config[n]) for n, p in self._params.items()}

    def default(self) -> dict[str, Any]:
        """The configuration made of every parameter's default."""
        return {n: p.default_value() for n, p in self._params.items()}

    # ----------------------------------------------------------------- encoding
    def to_unit(self, configs: Sequence[Mapping[str, Any]]) -> Tensor:
        """Encode configurations onto the unit cube.

        Args:
            configs: ``n`` configurations (validated first).

        Returns:
            ``n x d`` float64 tensor with entries in [0, 1].

        Raises:
            SpaceError: If ``configs`` is not a list of dicts or any configuration is invalid.
        """
        if isinstance(configs, Mapping):
            raise SpaceError("to_unit expects a list of configurations; wrap one in a list.")
        checked = [self.validate(c) for c in configs]
        return self._encode(checked)

    def _encode(self, configs: Sequence[Mapping[str, Any]]) -> Tensor:
        n = len(configs)
        out = np.empty((n, self._dim), dtype=np.float64)
        for name, p in self._params.items():
            if p.width:
                out[:, self._slices[name]] = p.encode([c[name] for c in configs])
        return torch.from_numpy(out)

    def _as_array(self, X: Tensor | np.ndarray) -> np.ndarray:
        A = X.detach().cpu().double().numpy() if isinstance(X, Tensor) else np.asarray(X, float)
        if A.ndim != 2 or A.shape[1] != self._dim:
            raise SpaceError(
                f"Expected an n x {self._dim} array (one row per configuration), but got shape "
                f"{tuple(A.shape)}. Use X.reshape(-1, {self._dim}) for a single point."
            )
        return A

    def from_unit(self, X: Tensor | np.ndarray) -> list[dict[str, Any]]:
        """Decode unit-cube points into configurations.

        Any finite point decodes to a valid configuration: values are clipped to [0, 1],
        ints and ordered choices rounded, one-hot groups resolved by argmax, simplex blocks
        clipped at zero and renormalized (an all-zero block becomes uniform).

        Args:
            X: ``n x d`` tensor or array of finite numbers.

        Returns:
            ``n`` valid configurations.

        Raises:
            SpaceError: If ``X`` is not ``n x d`` or holds a NaN or an infinity (no configuration
                is meant by it).
        """
        A = self._as_array(X)
        bad = np.argwhere(~np.isfinite(A))
        if bad.size:
            row, col = (int(i) for i in bad[0])
            raise SpaceError(
                f"from_unit needs finite coordinates, but X[{row}, {col}] (column "
                f"{self.columns[col]!r}) is {A[row, col]!r} ({len(bad)} non-finite entries in "
                "all). Drop or repair those rows before decoding; a NaN usually means a failed "
                "optimization upstream."
            )
        columns = {n: p.decode(A[:, self._slices[n]]) for n, p in self._params.items()}
        names = self.names
        return [dict(zip(names, row)) for row in zip(*(columns[n] for n in names))]

    def project(self, X: Tensor | np.ndarray) -> Tensor:
        """Snap unit-cube points onto valid points: ``to_unit(from_unit(X))``.

        Args:
            X: ``n x d`` tensor or array.

        Returns:
            ``n x d`` float64 tensor of encodings of valid configurations.
        """
        return self._encode(self.from_unit(X))

    # ----------------------------------------------------------------- sampling
    def sample(self, n: int, seed: int) -> list[dict[str, Any]]:
        """Draw ``n`` valid configurations from a scrambled Sobol sequence.

        Args:
            n: Number of configurations, ``>= 0``.
            seed: Seed of the scrambling; the same seed gives the same configurations.

        Returns:
            ``n`` configurations that satisfy every constraint of the space (simplex blocks are
            mapped through the Dirichlet(1) transform, so they sum to 1 without rejection).

        Raises:
            SpaceError: If ``n`` is not an int ``>= 0`` or ``seed`` is not an int.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise SpaceError(f"sample needs a count n >= 0, but got {n!r}.")
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
            raise SpaceError(
                f"sample needs an int seed (the same seed gives the same configurations), but got "
                f"{seed!r} of type {type(seed).__name__}; pass e.g. seed=0."
            )
        widths = [p.sample_width for p in self._params.values()]
        total = sum(widths)
        if n == 0:
            return []
        self._check_fits(n, total)
        if total == 0:
            return [self.default() for _ in range(n)]
        engine = SobolEngine(dimension=total, scramble=True, seed=int(seed))
        U = engine.draw(n, dtype=torch.float64).numpy()
        columns: dict[str, list[Any]] = {}
        start = 0
        for (name, p), w in zip(self._params.items(), widths):
            columns[name] = p.sample(U[:, start : start + w]) if w else [p.default_value()] * n
            start += w
        names = self.names
        return [dict(zip(names, row)) for row in zip(*(columns[nm] for nm in names))]

    def _check_fits(self, n: int, columns: int) -> None:
        """Refuse a sample that cannot fit in the machine's free memory (``n=10**9`` failed with
        a raw allocator error): its Sobol points and its configurations, estimated."""
        per = 8 * columns + _DICT_BYTES + _ENTRY_BYTES * len(self._params)
        free = _available_memory()
        if free is not None and n * per > free:
            fits = max(free // per, 1)
            raise SpaceError(
                f"sample(n={n}) needs about {n * per / 2**30:.1f} GiB ({per} bytes per "
                f"configuration of {len(self._params)} parameters) but the machine has "
                f"{free / 2**30:.1f} GiB free; draw at most about {fits:,} at a time (another "
                "seed draws another batch)."
            )

    def sample_unit(self, n: int, seed: int) -> Tensor:
        """``n x d`` float64 tensor: the encodings of ``sample(n, seed)``."""
        return self._encode(self.sample(n, seed))

    # ----------------------------------------------------------------- persistence
    def to_dict(self) -> dict[str, Any]:
        """JSON-able description with a ``format_version``; see `Space.from_dict`."""
        return {
            "format_version": FORMAT_VERSION,
            "parameters": [{"name": n, **p.to_dict()} for n, p in self._params.items()],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Space:
        """Rebuild a space written by `Space.to_dict` (any past format version).

        Raises:
            SpaceError: If the data is malformed or written by a newer version of rewrite-tuner.
        """
        if not isinstance(d, Mapping) or "format_version" not in d or "parameters" not in d:
            raise SpaceError(
                "A stored space must be a dict with 'format_version' and 'parameters', "
                f"but got {str(d)[:200]!r}."
            )
        version = d["format_version"]
        if not isinstance(version, int) or version < 1:
            raise SpaceError(f"Invalid space format_version {version!r}; expected an int >= 1.")
        if version > FORMAT_VERSION:
            raise SpaceError(
                f"This space was written with format_version {version}, newer than this "
                f"rewrite-tuner supports ({FORMAT_VERSION}). Upgrade: pip install -U rewrite-tuner."
            )
        entries = d["parameters"]
        if isinstance(entries, str | bytes | Mapping) or not isinstance(entries, Sequence):
            raise SpaceError(
                "A stored space's 'parameters' must be a list of parameter dicts, but got "
                f"{type(entries).__name__}: {str(entries)[:200]!r}."
            )
        params: dict[str, Parameter] = {}
        for entry in entries:
            name = entry.get("name") if isinstance(entry, Mapping) else None
            if not isinstance(name, str) or name in params:
                raise SpaceError(f"Stored parameter entries need distinct names; got {entry!r}.")
            params[name] = parameter_from_dict(dict(entry))
        return cls(params)


#: Estimated bytes of one sampled configuration's dict, and of each of its entries.
_DICT_BYTES, _ENTRY_BYTES = 232, 150


def _available_memory() -> int | None:
    """Bytes of memory free for a new allocation (None where the system does not say)."""
    import os

    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None
