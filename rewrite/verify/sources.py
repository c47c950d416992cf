"""Value ranges of integer and bool graph sources, shared by the z3 prover and the random tester.

Integer inputs and parameters are ordinary integers unless they index a tensor. An integer source
whose values reach the index argument of ``index_select`` or ``embedding`` (directly or through
ops that pass integers through unchanged, `OpDef.pass_ints`: reshape, slice, concat, ...) is an
*index source*: it must stay in ``[0, n)`` where ``n`` is the smallest indexed size, so it is
drawn from that range (the prover gives it fixed random concrete values there). An integer source that reaches an index only through arithmetic
(``ids - offset``) is bounded by the smallest size it indexes, the best guess available without
solving the arithmetic. Every other integer source is *free*: the prover makes it a symbolic
integer and the random tester draws it from the wide signed range `int_range` (so ``b * b == b``,
true only on ``{0, 1}``, is refuted). Bool sources (masks) take random concrete values in both.

Index and bool sources are drawn from small sets, so no Schwartz-Zippel bound covers them:
`restricted_sources` tells the checker to claim none.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from rewrite.ir import Graph, Value, numpy_dtype
from rewrite.ops import ops_where

__all__ = [
    "WIDE_INT",
    "SourceKey",
    "const_index_bounds",
    "free_int_range",
    "index_bounds",
    "int_range",
    "is_int",
    "restricted_sources",
]

#: Free integer sources are drawn from ``[-WIDE_INT, WIDE_INT)`` (narrower for small dtypes);
#: products of three stay far below ``2**63``, so int64 arithmetic on them is exact.
WIDE_INT = 1 << 15
_INTS = ("uint8", "int8", "int16", "int32", "int64")
#: ``(op, name)`` of an ``input``/``param`` node: the same source in every graph of a check.
SourceKey = tuple[str, str]


class _Demand(NamedTuple):
    """Index range a value must respect: ``direct`` (reaches an index unchanged) and ``bound``."""

    direct: bool
    bound: int


class _Sources(NamedTuple):
    """Per graph: index demands on its sources, whether it has a bool source, and the smallest
    range size of its free integer sources (0 when it has none)."""

    demands: dict[SourceKey, _Demand]
    has_bool: bool
    free_range: int


_memo: OrderedDict[str, _Sources] = OrderedDict()


def is_int(dtype: str) -> bool:
    """Whether ``dtype`` is an integer dtype (bool is not)."""
    return dtype in _INTS


def int_range(dtype: str) -> tuple[int, int]:
    """``[lo, hi)`` of a free integer source of ``dtype``: ``[-WIDE_INT, WIDE_INT)`` clipped to
    the dtype's range (``[0, 256)`` for uint8)."""
    info = np.iinfo(numpy_dtype(dtype))
    return max(int(info.min), -WIDE_INT), min(int(info.max) + 1, WIDE_INT)


def _merge(a: _Demand | None, b: _Demand) -> _Demand:
    """A direct demand beats a derived one; among equals the smaller bound wins."""
    if a is None or (b.direct and not a.direct):
        return b
    if a.direct and not b.direct:
        return a
    return _Demand(a.direct, min(a.bound, b.bound))


def _demands(graph: Graph, outs: Mapping[Value, _Demand]) -> dict[Value, _Demand]:
    """Index demands on every value of ``graph``, given demands on its output values."""
    need: dict[Value, _Demand] = dict(outs)

    def add(v: Value, d: _Demand) -> None:
        if is_int(graph.type_of(v).dtype):
            need[v] = _merge(need.get(v), d)

    for node in reversed(list(graph)):
        if node.op in ("index_select", "embedding"):
            dim = node.attrs["dim"] if node.op == "index_select" else 0
            add(node.inputs[1], _Demand(True, max(1, node.in_types[0].shape[dim])))
        own = [need[v] for v in node.outs if v in need]
        if not own:
            continue
        if node.op == "fused":
            body: Graph = node.attrs["body"]
            inner = _demands(
                body, {bv: need[v] for bv, v in zip(body.outputs, node.outs) if v in need}
            )
            for nid, v in zip(body.inputs, node.inputs):
                d = inner.get(Value(nid, 0))
                if d is not None:
                    add(v, d)
            continue
        merged = own[0]
        for d in own[1:]:
            merged = _merge(merged, d)
        for v in node.inputs:
            direct = merged.direct and node.op in ops_where(pass_ints=True)
            add(v, _Demand(direct, merged.bound))
    return need


def _graph_sources(graph: Graph) -> _Sources:
    """The `_Sources` of ``graph`` (memoized by graph hash)."""
    hit = _memo.get(graph.hash)
    if hit is not None:
        return hit
    found: dict[SourceKey, _Demand] = {}
    has_bool, free = False, []
    need = _demands(graph, {})
    for node in graph:
        if node.op in ("input", "param"):
            dtype = node.type.dtype
            has_bool |= dtype == "bool"
            d = need.get(node.out(0))
            if d is not None:
                found[(node.op, node.attrs["name"])] = d
            elif is_int(dtype):
                lo, hi = int_range(dtype)
                free.append(hi - lo)
    out = _memo[graph.hash] = _Sources(found, has_bool, min(free, default=0))
    if len(_memo) > 4096:
        _memo.popitem(last=False)
    return out


def index_bounds(*graphs: Graph) -> dict[SourceKey, int]:
    """Index sources of ``graphs`` (checked together) and their exclusive upper bounds.

    Args:
        graphs: Graphs evaluated on the same sources (the two sides of a check).

    Returns:
        ``{(op, name): n}`` for every integer source used as an index: draw it in ``[0, n)``.
        Direct index uses in any graph take precedence over uses through arithmetic.
    """
    found: dict[SourceKey, _Demand] = {}
    for g in graphs:
        for key, d in _graph_sources(g).demands.items():
            found[key] = _merge(found.get(key), d)
    return {k: d.bound for k, d in found.items()}


def const_index_bounds(graph: Graph) -> dict[int, int]:
    """Integer ``const`` nodes of ``graph`` whose values reach an index unchanged, and the
    exclusive bound their values must respect (node id -> bound)."""
    need = _demands(graph, {})
    out = {}
    for node in graph:
        d = need.get(node.out(0)) if node.op == "const" else None
        if d is not None and d.direct:
            out[node.id] = d.bound
    return out


def restricted_sources(*graphs: Graph) -> bool:
    """Whether any of ``graphs`` has a bool or index source (drawn from a small set)."""
    return any(bool(s.demands) or s.has_bool for s in map(_graph_sources, graphs))


def free_int_range(*graphs: Graph) -> int | None:
    """Size of the smallest set a free integer source of ``graphs`` is drawn from (None if none)."""
    sizes = [s.free_range for s in map(_graph_sources, graphs) if s.free_range]
    return min(sizes, default=None)
