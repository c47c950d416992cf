"""Shardings of values over a named mesh, and the collectives that move between them.

A `Sharding` says, per tensor dimension, which mesh axes split it (``()``: not split), and
which axes hold a pending sum (``partial``): a value partial on axis ``a`` is the sum of the
per-device pieces along ``a``. A dimension split on an axis is split into equal contiguous
pieces, piece ``i`` on the device of index ``i`` along that axis (DTensor's ``Shard(d)``);
an axis a value neither splits nor holds partial is a replica (``Replicate()``).

`redistribute` lists the collectives that turn one sharding into another, per axis, as DTensor
does (DTensor's ``redistribute``): partial to replicated is an ``all_reduce``, partial to split a
``reduce_scatter``, split to replicated an ``all_gather``, split on one dimension to split on
another an ``all_to_all``; replicated to split or to partial is local (no communication).

A `Collective` carries the per-rank buffer size ``nbytes`` of the ring formulas in
`rewrite.plans.mesh.collective_time`: the gathered output for ``all_gather``, the input for
``reduce_scatter``, ``all_reduce`` and ``all_to_all``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from rewrite.errors import PlanError
from rewrite.ir import TensorType

__all__ = ["COLLECTIVE_KINDS", "Collective", "Sharding", "redistribute"]

Axes = tuple[str, ...]
#: Collective kinds, as `ParallelPlan.collectives` counts them.
COLLECTIVE_KINDS = (
    "all_gather",
    "reduce_scatter",
    "all_reduce",
    "all_to_all",
    "send_recv",
    "broadcast",
)


@dataclass(frozen=True)
class Sharding:
    """A value's sharding over a named mesh (see the module docstring).

    Attributes:
        dims: Per tensor dimension, the mesh axes splitting it, major first.
        partial: Mesh axes along which the value is a pending sum.
    """

    dims: tuple[Axes, ...]
    partial: Axes = ()

    def __post_init__(self) -> None:
        used = [a for d in self.dims for a in d] + list(self.partial)
        if len(used) != len(set(used)):
            raise PlanError(f"A mesh axis may split one dimension or be partial, got {self}.")

    @staticmethod
    def replicated(rank: int) -> Sharding:
        """The replicated sharding of a rank-``rank`` value."""
        return Sharding(((),) * rank)

    @staticmethod
    def split(rank: int, dim: int, axis: str) -> Sharding:
        """Split dimension ``dim`` of a rank-``rank`` value on ``axis``."""
        d = dim % rank
        return Sharding(tuple((axis,) if i == d else () for i in range(rank)))

    @property
    def rank(self) -> int:
        """Number of tensor dimensions."""
        return len(self.dims)

    @property
    def axes(self) -> frozenset[str]:
        """Every axis that splits a dimension or is partial."""
        return frozenset(a for d in self.dims for a in d) | frozenset(self.partial)

    def dim_of(self, axis: str) -> int | None:
        """The dimension ``axis`` splits, or None."""
        for i, d in enumerate(self.dims):
            if axis in d:
                return i
        return None

    def with_dim(self, dim: int, axes: Axes) -> Sharding:
        """A copy whose dimension ``dim`` is split by ``axes``."""
        dims = list(self.dims)
        dims[dim] = axes
        return Sharding(tuple(dims), self.partial)

    def drop(self, axis: str) -> Sharding:
        """A copy replicated along ``axis`` (neither split nor partial there)."""
        return Sharding(
            tuple(tuple(a for a in d if a != axis) for d in self.dims),
            tuple(a for a in self.partial if a != axis),
        )

    def no_partial(self) -> Sharding:
        """A copy without pending sums."""
        return Sharding(self.dims)

    def with_partial(self, axes: Axes) -> Sharding:
        """A copy partial along ``axes`` as well (axes splitting a dim are left out)."""
        extra = tuple(a for a in axes if a not in self.axes)
        return Sharding(self.dims, self.partial + extra)

    def local_shape(self, shape: tuple[int, ...], mesh: Mapping[str, int]) -> tuple[int, ...]:
        """The per-device shape (dimensions rounded up when a split is uneven)."""
        return tuple(
            -(-s // math.prod(mesh[a] for a in d)) if d else s for s, d in zip(shape, self.dims)
        )

    def local_type(self, t: TensorType, mesh: Mapping[str, int]) -> TensorType:
        """The per-device type of a value of global type ``t``."""
        return TensorType(self.local_shape(t.shape, mesh), t.dtype)

    def fits(self, t: TensorType, mesh: Mapping[str, int]) -> bool:
        """Whether every split dimension divides evenly."""
        return all(s % math.prod(mesh[a] for a in d) == 0 for s, d in zip(t.shape, self.dims) if d)

    def placement(self, axis: str) -> str:
        """DTensor's placement along ``axis``: ``"R"``, ``"S(d)"`` or ``"P"``."""
        if axis in self.partial:
            return "P"
        d = self.dim_of(axis)
        return "R" if d is None else f"S({d})"

    def __str__(self) -> str:
        dims = ",".join("+".join(d) if d else "-" for d in self.dims)
        return f"[{dims}]" + (f"P({'+'.join(self.partial)})" if self.partial else "")


@dataclass(frozen=True)
class Collective:
    """One collective on one mesh axis.

    Attributes:
        kind: One of `COLLECTIVE_KINDS`.
        axis: The mesh axis it runs along.
        nbytes: The per-rank buffer of the ring formula (see the module docstring).
    """

    kind: str
    axis: str
    nbytes: int


def _bytes(s: Sharding, t: TensorType, mesh: Mapping[str, int]) -> int:
    return s.local_type(t, mesh).nbytes


def redistribute(
    src: Sharding, dst: Sharding, t: TensorType, mesh: Mapping[str, int]
) -> list[Collective]:
    """The collectives turning a value of type ``t`` sharded ``src`` into ``dst``.

    Axes are handled in mesh order; ``dst``'s partial axes are reached locally (a replica is a
    partial value whose other pieces are zero).

    Raises:
        PlanError: If the shardings' ranks differ from the type's.
    """
    if src.rank != t.rank or dst.rank != t.rank:
        raise PlanError(f"Shardings {src} -> {dst} do not match the rank of {t}.")
    out: list[Collective] = []
    cur = src
    for axis in mesh:
        if mesh[axis] == 1:
            continue
        want = dst.dim_of(axis)
        if axis in cur.partial and axis not in dst.partial:
            nb = _bytes(cur, t, mesh)
            if want is not None and cur.dim_of(axis) is None:
                out.append(Collective("reduce_scatter", axis, nb))
                cur = cur.drop(axis).with_dim(want, cur.dims[want] + (axis,))
            else:
                out.append(Collective("all_reduce", axis, nb))
                cur = cur.drop(axis)
        have = cur.dim_of(axis)
        if have is not None and have != want:
            if want is None:
                gathered = cur.with_dim(have, tuple(a for a in cur.dims[have] if a != axis))
                out.append(Collective("all_gather", axis, _bytes(gathered, t, mesh)))
                cur = gathered
            else:
                out.append(Collective("all_to_all", axis, _bytes(cur, t, mesh)))
                moved = cur.with_dim(have, tuple(a for a in cur.dims[have] if a != axis))
                cur = moved.with_dim(want, moved.dims[want] + (axis,))
        elif have is None and want is not None and axis not in cur.partial:
            cur = cur.with_dim(want, cur.dims[want] + (axis,))  # a local slice
    return out
