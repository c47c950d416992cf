"""Convolutions whose epilogue a library runs in the same call.

oneDNN (PyTorch's CPU convolution library) applies a convolution's bias, a residual add and an
activation to the output tile it has just computed, before writing it ("post-ops"): such a
``fused`` group is one kernel even in eager PyTorch, where every other fused group runs op by op.
`conv_epilogue(body)` recognises the bodies of that form, so the cost model charges them as one
kernel on a profile with ``fused_epilogues`` (`rewrite.cost`) and `rewrite.to_module` emits them
as one call (`rewrite.lowering.kernels.conv_epilogue_call`).

The form, in the body's order: ``y = conv2d(x, w[, b])``, then optionally ``y = add(y, r)`` (or
``add(r, y)``) with ``r`` of ``y``'s shape, then optionally one activation of `ACTIVATIONS`
(after an add: ``relu`` only, as oneDNN's binary post-op takes no other); at least one of the two, every tensor float32, and the last node the body's one output. ``x``,
``w``, ``b`` and ``r`` are inputs of the body (computed outside it).

This module knows the IR only (no torch): the cost model reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rewrite.ir import Graph, Node, Value

__all__ = ["ACTIVATIONS", "RESIDUAL_ACTIVATIONS", "ConvEpilogue", "conv_epilogue"]

#: Activations oneDNN applies as a post-op, by IR op name.
ACTIVATIONS = frozenset({"relu", "sigmoid", "tanh", "silu", "gelu"})
#: Those it applies after a residual add.
RESIDUAL_ACTIVATIONS = frozenset({"relu"})


@dataclass(frozen=True)
class ConvEpilogue:
    """A fused body ``act(conv2d(x, w, b) + r)`` that one library call computes.

    Attributes:
        x: Position of the convolution's input among the body's inputs.
        w: Position of its weight.
        b: Position of its bias, or None.
        residual: Position of the tensor added to its output, or None.
        activation: The IR op applied last (one of `ACTIVATIONS`), or None.
        conv_attrs: The convolution's attributes (stride, padding, dilation, groups).
        activation_attrs: The activation's attributes (gelu's ``approximate``).
    """

    x: int
    w: int
    b: int | None
    residual: int | None
    activation: str | None
    conv_attrs: dict[str, Any]
    activation_attrs: dict[str, Any]


def conv_epilogue(body: Graph) -> ConvEpilogue | None:
    """The `ConvEpilogue` that ``body`` (a fused group's body) is, or None if it is not one.

    A look at two to three nodes; callers that ask per node (the cost model) cache the node's
    cost, not this answer."""
    position = {nid: i for i, nid in enumerate(body.inputs)}
    kernels = [body.node(nid) for nid in body.topo_order() if nid not in position]
    if not 2 <= len(kernels) <= 3 or len(body.outputs) != 1:
        return None
    if any(t.dtype != "float32" for n in kernels for t in (*n.in_types, *n.types)):
        return None
    conv, rest = kernels[0], kernels[1:]
    if conv.op != "conv2d" or not all(v.node in position for v in conv.inputs):
        return None
    y: Value = conv.out(0)
    residual = activation = None
    activation_attrs: dict[str, Any] = {}
    if rest[0].op == "add":
        residual = _other_input(rest[0], y, position)
        if residual is None:
            return None
        y, rest = rest[0].out(0), rest[1:]
    if rest:
        act = rest[0]
        allowed = RESIDUAL_ACTIVATIONS if residual is not None else ACTIVATIONS
        if act.op not in allowed or list(act.inputs) != [y]:
            return None
        activation, activation_attrs, y = act.op, dict(act.attrs), act.out(0)
    if body.outputs[0] != y or any(_readers(body, n.out(0)) != 1 for n in kernels[:-1]):
        return None
    ins = [position[v.node] for v in conv.inputs]
    return ConvEpilogue(
        x=ins[0],
        w=ins[1],
        b=ins[2] if len(ins) == 3 else None,
        residual=residual,
        activation=activation,
        conv_attrs=dict(conv.attrs),
        activation_attrs=activation_attrs,
    )


def _other_input(add: Node, y: Value, position: dict[int, int]) -> int | None:
    """The body-input position of ``add``'s operand other than ``y``, if it is a same-shaped
    body input."""
    a, b = add.inputs
    other = b if a == y else a if b == y else None
    if other is None or other == y or other.node not in position:
        return None
    if add.in_types[list(add.inputs).index(other)].shape != add.types[0].shape:
        return None  # a broadcast add is not a residual
    return position[other.node]


def _readers(body: Graph, v: Value) -> int:
    """How many inputs of the body's nodes read ``v`` (a chain's link is read once: by the next
    node)."""
    return sum(1 for n in body.nodes.values() for u in n.inputs if u == v)
