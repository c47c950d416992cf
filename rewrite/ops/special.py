"""Source nodes (``input``, ``param``, ``const``), ``opaque`` nodes and ``fused`` groups.

* ``input`` and ``param`` carry ``name``, ``shape`` and ``dtype`` attrs; params are weights,
  resident in memory.
* ``const`` carries a `ConstArray` in attr ``value``.
* ``opaque`` stands for an op the registry does not know: attr ``target`` names it and
  ``out_types`` gives its outputs as ``((shape, dtype), ...)``. It is never rewritten, has no
  reference implementation, and is costed conservatively: zero FLOPs but twice its input and
  output bytes (one extra round trip), one kernel.
* ``fused`` carries a body `Graph` in attr ``body`` whose inputs are the node's inputs in order
  and whose outputs are the node's outputs. It is one kernel: its FLOPs are the body's and its
  bytes are only its external inputs and outputs. It has no kernel of its own: every
  interpreter (`rewrite.evaluate`, the prover, the verifiers, the PyTorch lowering) recurses
  into the body.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rewrite.errors import EvaluationError, ShapeError
from rewrite.ir import DTYPE_BYTES, ConstArray, Graph, TensorType
from rewrite.ops.base import REQUIRED, Attr, OpDef, Types, get_op, io_bytes, register

__all__ = ["body_flops"]


def _source_infer(op: str) -> Any:
    def infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
        shape, dtype = tuple(attrs["shape"]), attrs["dtype"]
        if dtype not in DTYPE_BYTES or any(not isinstance(d, int) or d < 0 for d in shape):
            raise ShapeError(
                f"op {op!r} needs a shape of non-negative ints and a dtype in {sorted(DTYPE_BYTES)}, "
                f"but got shape={shape}, dtype={dtype!r}."
            )
        return (TensorType(shape, dtype),)

    return infer


def _no_impl(op: str) -> Any:
    def impl(xp: Any, arrs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
        raise EvaluationError(
            f"op {op!r} takes its value from the caller; rewrite.evaluate supplies it."
        )

    return impl


def _const_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    v = attrs["value"]
    if not isinstance(v, ConstArray):
        raise ShapeError(f"op 'const' needs a ConstArray value, but got {type(v).__name__}.")
    return (v.type,)


def _opaque_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    try:
        return tuple(TensorType(tuple(s), d) for s, d in attrs["out_types"])
    except (TypeError, ValueError):
        raise ShapeError(
            f"op 'opaque' needs out_types=((shape, dtype), ...), but got {attrs['out_types']!r}."
        ) from None


def _opaque_impl(xp: Any, arrs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    raise EvaluationError(
        f"opaque op {attrs['target']!r} has no reference semantics; register it in rewrite.ops "
        "(or map it in rewrite.torch_import) to evaluate this graph."
    )


def _opaque_bytes(ins: Types, outs: Types, attrs: Mapping[str, Any]) -> int:
    return 2 * io_bytes(ins, outs, attrs)


def body_flops(body: Graph) -> int:
    """Total FLOPs of the nodes of ``body``."""
    total = 0
    for n in body.nodes.values():
        total += get_op(n.op).flops(n.in_types, n.types, n.attrs)
    return total


def _fused_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    body = attrs["body"]
    if not isinstance(body, Graph):
        raise ShapeError(f"op 'fused' needs a Graph body, but got {type(body).__name__}.")
    if tuple(ins) != body.input_types:
        raise ShapeError(
            f"op 'fused' needs inputs matching its body's inputs, but got "
            f"{[str(t) for t in ins]} for body inputs {[str(t) for t in body.input_types]}."
        )
    return body.output_types


def _fused_impl(xp: Any, arrs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    # A group's meaning is its body's: every interpreter (rewrite.evaluate, the prover, the
    # verifiers, the lowering to PyTorch) recurses into the body itself.
    raise EvaluationError(
        "op 'fused' has no kernel of its own: evaluate the graph holding it with "
        "rewrite.evaluate, which runs the group's body."
    )


def _fused_flops(ins: Types, outs: Types, attrs: Mapping[str, Any]) -> int:
    return body_flops(attrs["body"])


def _register_all() -> None:
    src = {"name": REQUIRED, "shape": REQUIRED, "dtype": "float32"}
    for op in ("input", "param"):
        register(
            OpDef(
                op,
                _source_infer(op),
                _no_impl(op),
                kind="source",
                family="source",
                attrs=dict(src),
                checks={"name": Attr("str"), "shape": Attr("ints", low=0), "dtype": Attr("str")},
                arity=(0, 0),
                doc=f"graph {op}",
            )
        )
    register(
        OpDef(
            "const",
            _const_infer,
            lambda xp, a, at: (xp.asarray(at["value"].array),),
            kind="source",
            family="source",
            attrs={"value": REQUIRED},
            arity=(0, 0),
            doc="constant tensor",
        )
    )
    register(
        OpDef(
            "opaque",
            _opaque_infer,
            _opaque_impl,
            bytes=_opaque_bytes,
            kind="opaque",
            family="opaque",
            attrs={"target": REQUIRED, "out_types": REQUIRED, "reason": ""},
            arity=(0, None),
            doc="op unknown to the registry (never rewritten, costed conservatively)",
        )
    )
    register(
        OpDef(
            "fused",
            _fused_infer,
            _fused_impl,
            _fused_flops,
            family="fused",
            attrs={"body": REQUIRED},
            arity=(1, None),
            doc="fused group: one kernel running a body graph",
        )
    )


_register_all()
