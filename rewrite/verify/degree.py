"""Degree bound of a graph's outputs as polynomials, for the Schwartz-Zippel false-accept bound.

Each random input, parameter and random-map output counts as a fresh variable of degree 1;
constants have degree 0. Additive and layout ops keep the largest input degree, products add
degrees, and an op that applies a random map or a field inverse starts a new variable (the
`OpDef.degree` of each op says which); the ops with their own rule are spelled out here. The bound
is an over-approximation, which only makes the reported false-accept bound more conservative.
"""

from __future__ import annotations

from collections import OrderedDict

from rewrite.ir import Graph, Node
from rewrite.ops import ops_where

__all__ = ["degree_bound"]

_CAP = 1 << 40
_memo: OrderedDict[str, int] = OrderedDict()


def _node_degree(node: Node, ins: list[int]) -> int:
    op = node.op
    if op in ("input", "param"):
        return 1
    if op == "const":
        return 0
    if op in ops_where(degree="max"):
        return max(ins, default=0)
    if op in ops_where(degree="sum"):
        return sum(ins)
    if op in ops_where(degree="fresh"):
        return 1
    if op == "silu":
        return ins[0] + 1
    if op in ("div", "softmax", "log_softmax"):
        return ins[0] + 1
    if op == "pow":
        return 8 * max(ins[0], 1)
    if op in ("layer_norm", "rms_norm", "batch_norm"):
        return ins[0] + 1 + sum(ins[1:])
    if op == "sdpa":
        return sum(ins[:2]) + 1 + ins[2]
    if op == "fused":
        body: Graph = node.attrs["body"]
        return degree_bound(body, tuple(ins))
    return sum(ins) + 1  # conservative default


def degree_bound(graph: Graph, input_degrees: tuple[int, ...] | None = None) -> int:
    """An upper bound on the degree of every output of ``graph``.

    Args:
        graph: The graph.
        input_degrees: Degrees of the graph inputs (fused bodies); default 1 each.

    Returns:
        The bound (at least 1).
    """
    key = graph.hash + ("" if input_degrees is None else repr(input_degrees))
    hit = _memo.get(key)
    if hit is not None:
        return hit
    deg: dict[int, int] = {}
    if input_degrees is not None:
        deg.update(zip(graph.inputs, input_degrees))
    for node in graph:
        if node.id not in deg:
            deg[node.id] = min(_CAP, _node_degree(node, [deg[v.node] for v in node.inputs]))
    out = max(1, max((deg[v.node] for v in graph.outputs), default=1))
    _memo[key] = out
    if len(_memo) > 4096:
        _memo.popitem(last=False)
    return out
