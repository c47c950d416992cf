"""Shape-reduced instantiations of graphs: the same computation at small sizes.

`reduce_pair(a, b)` solves one size map ``sigma`` for two graphs checked together
(`rewrite.verify.sizes`: it keeps every size relation either graph's ops state, keeps distinct
sizes distinct, and keeps 1 and the pinned sizes) and rebuilds both graphs with it. The reduced
pair is the real pair with smaller numbers plugged into the same symbolic shapes, so random
testing it costs what the graphs' structure costs, not what the model's width costs.

Rebuilding keeps every node id, op, input and non-size attribute; sizes go through the map:
input and param shapes, reshape and expand targets, slice bounds, split sizes, normalized shapes
and opaque output types. A constant keeps its leading block along every dim (an ``arange`` stays
an ``arange``, a causal mask stays causal); an integer constant that indexes a tensor must stay
below the reduced bound. Attention without an explicit scale gets the real one
(``1 / sqrt(E)`` of the real head size), so it still equals an unfused form that spells the
scale out. Every rebuilt node re-infers its types, which must be the mapped real ones.

When no map keeps the relations, `ShapeReductionError` says why and the caller checks the real
shapes instead. Where a reduction is not used at all: sizes pinned by the solver stay real
(strided slices, conv and pooling windows and spatial dims, opaque nodes, ops with no known size
relations), and a graph whose sizes all stay real is not reduced (`reduce_pair` returns None).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from rewrite.errors import ShapeError, ShapeReductionError
from rewrite.ir import ConstArray, Graph, Node, TensorType
from rewrite.ops import get_op
from rewrite.verify.sizes import size_relations, solve_sizes
from rewrite.verify.sources import const_index_bounds

__all__ = ["SizeMap", "reduce_graph", "reduce_pair"]

SizeMap = Mapping[int, int]
"""Real size -> reduced size."""


def _shape(shape: tuple[int, ...], sigma: SizeMap) -> tuple[int, ...]:
    return tuple(sigma[d] for d in shape)


def _type(t: TensorType, sigma: SizeMap) -> TensorType:
    return TensorType(_shape(t.shape, sigma), t.dtype)


@functools.lru_cache(maxsize=512)
def _cut(value: ConstArray, shape: tuple[int, ...]) -> ConstArray:
    """The leading ``shape`` block of a constant."""
    if value.array.shape == shape:
        return value
    return ConstArray(value.array[tuple(slice(0, s) for s in shape)], value.dtype)


def _attrs(node: Node, sigma: SizeMap) -> dict[str, Any]:
    """``node``'s attributes with every size mapped."""
    op, attrs = node.op, dict(node.attrs)
    if op in ("input", "param", "reshape", "expand"):
        attrs["shape"] = _shape(attrs["shape"], sigma)
    elif op == "slice":
        attrs["start"], attrs["end"] = sigma[attrs["start"]], sigma[attrs["end"]]
    elif op == "split":
        attrs["sizes"] = _shape(attrs["sizes"], sigma)
    elif op in ("layer_norm", "rms_norm"):
        attrs["normalized_shape"] = _shape(attrs["normalized_shape"], sigma)
    elif op == "opaque":
        attrs["out_types"] = tuple((_shape(tuple(s), sigma), d) for s, d in attrs["out_types"])
    elif op == "sdpa" and attrs["scale"] is None:
        attrs["scale"] = 1.0 / math.sqrt(node.in_types[0].shape[-1])
    elif op == "const":
        attrs["value"] = _cut(attrs["value"], _shape(node.type.shape, sigma))
    elif op == "fused":
        attrs["body"] = reduce_graph(attrs["body"], sigma)
    return attrs


def _node(node: Node, sigma: SizeMap, nodes: Mapping[int, Node]) -> Node:
    """The reduced counterpart of ``node`` (its inputs already reduced in ``nodes``)."""
    attrs = _attrs(node, sigma)
    in_types = tuple(nodes[v.node].types[v.index] for v in node.inputs)
    want = tuple(_type(t, sigma) for t in node.types)
    try:
        types = get_op(node.op).infer(in_types, attrs)
    except ShapeError as err:
        raise ShapeReductionError(
            f"node {node!r} does not rebuild at the reduced sizes: {err}"
        ) from None
    if tuple(types) != want:
        raise ShapeReductionError(
            f"node {node!r} infers {[str(t) for t in types]} at the reduced sizes, not the mapped "
            f"{[str(t) for t in want]}."
        )
    return Node(node.id, node.op, attrs, node.inputs, in_types, types)


def reduce_graph(graph: Graph, sigma: SizeMap, base: tuple[Graph, Graph] | None = None) -> Graph:
    """``graph`` rebuilt with every size mapped by ``sigma`` (same node ids and structure).

    Args:
        graph: The real graph.
        sigma: A size map covering every size of ``graph`` (from `solve_sizes`).
        base: ``(real, reduced)``: a graph ``graph`` shares nodes with and its reduction under
            the same ``sigma``; shared nodes are taken from it instead of rebuilt.

    Raises:
        ShapeReductionError: If a node does not rebuild to the mapped types, or an integer
            constant indexes past a reduced bound.
    """
    nodes: dict[int, Node] = {}
    real_base = base[0].nodes if base is not None else {}
    for node in graph:
        if real_base.get(node.id) is node:
            assert base is not None
            nodes[node.id] = base[1].node(node.id)
        else:
            nodes[node.id] = _node(node, sigma, nodes)
    out = Graph(nodes, graph.inputs, graph.outputs, graph.name, validate=False)
    out.next_id = graph.next_id
    if any(
        nodes[i].type.dtype not in ("bool",) and nodes[i].type.dtype.startswith(("int", "uint"))
        for i in graph.by_op("const")
    ):
        for nid, bound in const_index_bounds(out).items():
            arr = np.asarray(nodes[nid].attrs["value"].array)
            if arr.size and (arr.min() < 0 or arr.max() >= bound):
                raise ShapeReductionError(
                    f"integer constant %{nid} indexes a dim of reduced size {bound}, but its "
                    f"leading block holds values in [{arr.min()}, {arr.max()}]."
                )
    return out


def reduce_pair(
    a: Graph,
    b: Graph,
    cache: dict[tuple[str, tuple[tuple[int, int], ...]], Graph] | None = None,
) -> tuple[Graph, Graph] | None:
    """Both graphs at the sizes of one map that keeps the relations of both.

    Args:
        a: A graph (typically the one ``b`` was rewritten from).
        b: A graph with the same signature.
        cache: Reduced graphs by ``(graph hash, map)``, reused across calls (``b`` is rebuilt
            on top of ``a``'s reduction, sharing the nodes it shares with ``a``).

    Returns:
        ``(a', b')``, or None when the map leaves every size as it is.

    Raises:
        ShapeReductionError: If a graph does not rebuild at the reduced sizes.
    """
    rel = size_relations(a).merge(size_relations(b))
    sigma = solve_sizes(rel)
    if all(sigma[n] == n for n in rel.sizes):
        return None
    key = tuple(sorted(sigma.items()))
    ra = cache.get((a.hash, key)) if cache is not None else None
    if ra is None:
        ra = reduce_graph(a, sigma)
        if cache is not None:
            if len(cache) > 64:
                cache.pop(next(iter(cache)))
            cache[(a.hash, key)] = ra
    return ra, reduce_graph(b, sigma, base=(a, ra))
