"""Operator registry: shape/dtype inference, FLOPs, bytes and a reference implementation per op.

`get_op(name)` returns an `OpDef`; `op_names()` lists every op. Importing this package registers
the built-in ops (element-wise, matrix products, attention, convolution, reductions, norms,
layout ops, sources, opaque and fused nodes).
"""

from __future__ import annotations

from rewrite.ops import (  # noqa: F401  (register ops)
    collective,
    elementwise,
    linalg,
    reduce,
    shape,
    special,
)
from rewrite.ops.base import (
    KINDS,
    REQUIRED,
    OpDef,
    broadcast,
    get_op,
    op_names,
    op_table,
    ops_where,
    promote,
    register,
)
from rewrite.ops.elementwise import BINARY_OPS, UNARY_OPS
from rewrite.ops.special import body_flops

#: Names of the ops this package registers itself (other packages may register more).
BUILTIN_OPS: frozenset[str] = frozenset(op_names())

__all__ = [
    "BUILTIN_OPS",
    "BINARY_OPS",
    "KINDS",
    "REQUIRED",
    "UNARY_OPS",
    "OpDef",
    "body_flops",
    "broadcast",
    "get_op",
    "op_names",
    "op_table",
    "ops_where",
    "promote",
    "register",
]
