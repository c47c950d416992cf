"""Element-wise ops: unary math, activations, casts, binary arithmetic, comparisons, ``where``.

FLOPs are ``numel(output) * cost`` with the per-element ``cost`` given in each table below
(transcendentals count 4, GELU 8, SiLU 5). Binary ops broadcast like numpy and promote dtypes
like torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rewrite.errors import ShapeError
from rewrite.ir import DTYPE_BYTES, TensorType, numpy_dtype
from rewrite.ops.base import (
    ADDITIVE,
    FRESH,
    LAYOUT,
    PRODUCT,
    RANDOM_MAP,
    REQUIRED,
    Attr,
    OpDef,
    Types,
    broadcast,
    category,
    promote,
    register,
)

__all__ = ["BINARY_OPS", "UNARY_OPS"]


def _erf(xp: Any, x: Any) -> Any:
    if xp.__name__ == "numpy":
        from scipy.special import erf
    else:  # pragma: no cover - cupy only
        from cupyx.scipy.special import erf
    return erf(x)


def _gelu(xp: Any, x: Any, attrs: Mapping[str, Any]) -> Any:
    if attrs["approximate"] == "tanh":
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + xp.tanh(c * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + _erf(xp, x / math.sqrt(2.0)))


def _sigmoid(xp: Any, x: Any) -> Any:
    return 0.5 * (1.0 + xp.tanh(0.5 * x))  # overflow-free form of 1 / (1 + exp(-x))


#: Verifier fields (`OpDef` keywords) of casts and of ``mul``.
_CAST: Mapping[str, Any] = {"degree": "max", "pass_ints": True}
_MUL: Mapping[str, Any] = {**PRODUCT, "field_exact": True}

# name -> (impl(xp, x, attrs), flops per element, float result, attrs, verifier fields)
_UNARY: dict[str, tuple[Callable[..., Any], int, bool, dict[str, Any], Mapping[str, Any]]] = {
    "neg": (lambda xp, x, a: -x, 1, False, {}, ADDITIVE),
    "abs": (lambda xp, x, a: xp.abs(x), 1, False, {}, RANDOM_MAP),
    "relu": (lambda xp, x, a: xp.maximum(x, 0).astype(x.dtype), 1, False, {}, RANDOM_MAP),
    "exp": (lambda xp, x, a: xp.exp(x), 4, True, {}, RANDOM_MAP),
    "log": (lambda xp, x, a: xp.log(x), 4, True, {}, RANDOM_MAP),
    "sqrt": (lambda xp, x, a: xp.sqrt(x), 2, True, {}, RANDOM_MAP),
    "rsqrt": (lambda xp, x, a: 1.0 / xp.sqrt(x), 2, True, {}, FRESH),
    "reciprocal": (lambda xp, x, a: 1.0 / x, 1, True, {}, FRESH),
    "tanh": (lambda xp, x, a: xp.tanh(x), 4, True, {}, RANDOM_MAP),
    "sigmoid": (lambda xp, x, a: _sigmoid(xp, x), 4, True, {}, RANDOM_MAP),
    "silu": (lambda xp, x, a: x * _sigmoid(xp, x), 5, True, {}, {}),
    "gelu": (lambda xp, x, a: _gelu(xp, x, a), 8, True, {"approximate": "none"}, RANDOM_MAP),
    "erf": (lambda xp, x, a: _erf(xp, x), 4, True, {}, RANDOM_MAP),
    "sin": (lambda xp, x, a: xp.sin(x), 4, True, {}, RANDOM_MAP),
    "cos": (lambda xp, x, a: xp.cos(x), 4, True, {}, RANDOM_MAP),
    "logical_not": (lambda xp, x, a: xp.logical_not(x), 1, False, {}, FRESH),
    "cast": (
        lambda xp, x, a: x.astype(numpy_dtype(a["dtype"])),
        0,
        False,
        {"dtype": REQUIRED},
        _CAST,
    ),
}

# name -> (impl(xp, a, b), flops per element, result kind: "promote" | "bool" | "float",
# verifier fields)
_BINARY: dict[str, tuple[Callable[..., Any], int, str, Mapping[str, Any]]] = {
    "add": (lambda xp, a, b: a + b, 1, "promote", ADDITIVE),
    "sub": (lambda xp, a, b: a - b, 1, "promote", ADDITIVE),
    "mul": (lambda xp, a, b: a * b, 1, "promote", _MUL),
    "div": (lambda xp, a, b: xp.true_divide(a, b), 1, "float", {}),
    "pow": (lambda xp, a, b: xp.power(a, b), 4, "promote", {}),
    "maximum": (lambda xp, a, b: xp.maximum(a, b), 1, "promote", FRESH),
    "minimum": (lambda xp, a, b: xp.minimum(a, b), 1, "promote", FRESH),
    "eq": (lambda xp, a, b: a == b, 1, "bool", FRESH),
    "ne": (lambda xp, a, b: a != b, 1, "bool", FRESH),
    "lt": (lambda xp, a, b: a < b, 1, "bool", FRESH),
    "le": (lambda xp, a, b: a <= b, 1, "bool", FRESH),
    "gt": (lambda xp, a, b: a > b, 1, "bool", FRESH),
    "ge": (lambda xp, a, b: a >= b, 1, "bool", FRESH),
    "logical_and": (lambda xp, a, b: xp.logical_and(a, b), 1, "bool", FRESH),
    "logical_or": (lambda xp, a, b: xp.logical_or(a, b), 1, "bool", FRESH),
}

UNARY_OPS: tuple[str, ...] = tuple(_UNARY)
BINARY_OPS: tuple[str, ...] = tuple(_BINARY)


def _per_element(cost: int) -> Callable[[Types, Types, Mapping[str, Any]], int]:
    def flops(ins: Types, outs: Types, attrs: Mapping[str, Any]) -> int:
        return cost * outs[0].numel

    return flops


def _unary_infer(name: str, float_result: bool) -> Callable[[Types, Mapping[str, Any]], Types]:
    def infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
        (x,) = ins
        if name == "cast":
            if attrs["dtype"] not in DTYPE_BYTES:
                raise ShapeError(
                    f"op 'cast' needs dtype in {sorted(DTYPE_BYTES)}, got {attrs['dtype']!r}."
                )
            return (TensorType(x.shape, attrs["dtype"]),)
        if name == "logical_not":
            return (TensorType(x.shape, "bool"),)
        if name == "neg" and x.dtype == "bool":
            raise ShapeError("op 'neg' is not defined on bool tensors; use logical_not instead.")
        dtype = x.dtype if (not float_result or category(x.dtype) == 2) else "float32"
        return (TensorType(x.shape, dtype),)

    return infer


def _unary_impl(
    fn: Callable[..., Any],
) -> Callable[[Any, Sequence[Any], Mapping[str, Any]], tuple[Any, ...]]:
    def impl(xp: Any, arrays: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
        return (fn(xp, arrays[0], attrs),)

    return impl


def _binary_infer(name: str, kind: str) -> Callable[[Types, Mapping[str, Any]], Types]:
    def infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
        a, b = ins
        shape = broadcast(name, a.shape, b.shape)
        if kind == "bool":
            return (TensorType(shape, "bool"),)
        dtype = promote(ins)
        if kind == "float" and category(dtype) < 2:
            dtype = "float32"
        if dtype == "bool" and name in ("add", "sub", "mul", "pow"):
            raise ShapeError(
                f"op {name!r} on two bool tensors is not arithmetic; use logical_or/logical_and."
            )
        return (TensorType(shape, dtype),)

    return infer


def _binary_impl(
    fn: Callable[..., Any],
) -> Callable[[Any, Sequence[Any], Mapping[str, Any]], tuple[Any, ...]]:
    def impl(xp: Any, arrays: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
        return (fn(xp, arrays[0], arrays[1]),)

    return impl


def _where_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    c, a, b = ins
    if c.dtype != "bool":
        raise ShapeError(
            f"op 'where' needs a bool condition (input 0), but got {c}; compare first."
        )
    return (TensorType(broadcast("where", c.shape, a.shape, b.shape), promote((a, b))),)


_UNARY_CHECKS = {"approximate": Attr("str", choices=("none", "tanh"))}


def _register_all() -> None:
    for name, (fn, cost, float_result, attrs, algebra) in _UNARY.items():
        register(
            OpDef(
                name=name,
                infer=_unary_infer(name, float_result),
                impl=_unary_impl(fn),
                flops=_per_element(cost),
                attrs=attrs,
                doc=f"element-wise {name}",
                checks={k: _UNARY_CHECKS[k] for k in attrs if k in _UNARY_CHECKS},
                **algebra,
            )
        )
    for name, (fn, cost, kind, algebra) in _BINARY.items():
        register(
            OpDef(
                name=name,
                infer=_binary_infer(name, kind),
                impl=_binary_impl(fn),
                flops=_per_element(cost),
                arity=(2, 2),
                doc=f"element-wise {name} with broadcasting",
                **algebra,
            )
        )
    register(
        OpDef(
            name="where",
            infer=_where_infer,
            impl=lambda xp, arrs, a: (xp.where(arrs[0], arrs[1], arrs[2]),),
            flops=_per_element(1),
            arity=(3, 3),
            doc="select a where cond else b, with broadcasting",
            **LAYOUT,
        )
    )


_register_all()
