"""Source nodes (``input``, ``param``, ``const``), ``opaque`` nodes and ``fused`` groups.

* ``input`` and ``param`` carry ``name``, ``shape`` and ``dtype`` attrs; params are weights,
  resident in memory.
* ``const`` carries a `ConstArray` in attr ``value``.
* ``opaque`` stands for an op the registry does not know: attr ``target`` names it and
  ``out_types`` gives its outputs as ``((shape, dtype), ...)``. It is never rewritten, has no
  reference implementation, and is costed conservatively: zero FLOPs but twice its input and
  output bytes (one extra round trip), one kernel.
* ``assume`` is a promise about its input's values, attr ``domain`` one of `DOMAINS`
  (``"positive"``, ``"nonnegative"``): its output is its input, and rules may rely on the promise
  (``exp(log(x)) = x`` for a positive ``x``, `rewrite.rules.domain`). It is a free view. Its
  reference implementation maps a value outside the domain into it (``|x| + 1``, ``|x|``), so a
  float check drawing arbitrary inputs tests the program on its domain; the finite field and the
  PyTorch lowering take it as the identity; the prover makes it an uninterpreted function whose
  values lie in the domain (`rewrite.prove`).
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
from rewrite.ops.base import LAYOUT, REQUIRED, Attr, OpDef, Types, get_op, io_bytes, register

__all__ = ["DOMAINS", "body_flops"]

#: Domains an ``assume`` node promises its values lie in.
DOMAINS = ("positive", "nonnegative")


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


def _assume_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    if ins[0].dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise ShapeError(f"op 'assume' needs a float input, but got {ins[0]}.")
    return (ins[0],)


def _assume_impl(xp: Any, arrs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    x = arrs[0]
    if attrs["domain"] == "positive":
        return (xp.where(x > 0, x, xp.abs(x) + 1).astype(x.dtype),)
    return (xp.abs(x),)


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
            "assume",
            _assume_infer,
            _assume_impl,
            bytes=lambda ins, outs, attrs: 0,
            kind="view",
            family="shape",
            attrs={"domain": REQUIRED},
            checks={"domain": Attr("str", choices=DOMAINS)},
            doc="x, with the promise that its values lie in the domain (positive, nonnegative)",
            **LAYOUT,  # the identity on its domain: every output element is its input element
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
