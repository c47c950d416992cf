"""Small helpers shared by the catalogue modules (builders and sample graphs)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rewrite.builder import GraphBuilder, GraphEditor
from rewrite.ir import Value
from rewrite.ops import get_op

__all__ = ["EW_BINARY", "EW_UNARY", "MATMULS", "const_scalar", "is_scalar_const", "op", "outs"]

#: Element-wise ops by arity (``cast`` excluded: it changes dtypes).
EW_UNARY = (
    "neg",
    "abs",
    "relu",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "tanh",
    "sigmoid",
    "silu",
    "gelu",
    "erf",
    "sin",
    "cos",
)
EW_BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum")
#: Two-operand products.
MATMULS = ("mm", "matmul", "bmm")

Factory = GraphBuilder | GraphEditor


def op(b: Factory, name: str, *inputs: Any, **attrs: Any) -> Value:
    """Add a single-output node ``name(*inputs, **attrs)`` and return its value."""
    return b.add(name, inputs, attrs).out(0)


def outs(b: Factory, name: str, *inputs: Any, **attrs: Any) -> tuple[Value, ...]:
    """Add a node and return all its output values."""
    return b.add(name, inputs, attrs).outs


def is_scalar_const(g: Any, v: Value) -> bool:
    """Whether ``v`` is produced by a one-element float ``const`` node."""
    n = g.node(v.node)
    return n.op == "const" and n.type.numel == 1 and n.type.dtype.startswith(("float", "bfloat"))


def const_scalar(g: Any, v: Value) -> float:
    """The value of a one-element ``const``."""
    return float(np.asarray(g.node(v.node).attrs["value"].array).reshape(()))


def is_elementwise(opname: str) -> bool:
    """Whether ``opname`` is a registered element-wise kernel (family ``elementwise``)."""
    d = get_op(opname)
    return d.family == "elementwise" and d.kind == "kernel" and opname not in ("cast", "where")
