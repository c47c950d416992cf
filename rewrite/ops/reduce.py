"""Reductions, softmax and normalizations.

FLOPs per input element: 1 for sum/amax/amin, 1 for mean (plus one division per output),
5 for (log-)softmax, 8 for layer norm, 6 for RMS norm, 4 for inference batch norm.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rewrite.errors import ShapeError
from rewrite.ir import TensorType
from rewrite.ops.base import (
    ADDITIVE,
    BOOL,
    DIM,
    EPS,
    FRESH,
    REQUIRED,
    Attr,
    OpDef,
    Types,
    category,
    check_float,
    norm_dim,
    register,
)

__all__: list[str] = []


def _norm_dims(ins: Types, attrs: dict[str, Any]) -> dict[str, Any]:
    rank = ins[0].rank
    if attrs["dims"] is None:
        attrs["dims"] = tuple(range(rank))
    else:
        dims = attrs["dims"] if isinstance(attrs["dims"], tuple) else (attrs["dims"],)
        attrs["dims"] = tuple(sorted({norm_dim("reduction", d, rank) for d in dims}))
    return attrs


def _reduce_infer(op: str) -> Any:
    def infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
        (x,) = ins
        dims = attrs["dims"]
        if dims is None:
            dims = tuple(range(x.rank))
        for d in dims:
            if not 0 <= d < max(x.rank, 1):
                raise ShapeError(
                    f"op {op!r} needs dims in [0, {x.rank}), but got dims={dims} for {x}."
                )
        if attrs["keepdim"]:
            shape = tuple(1 if i in dims else s for i, s in enumerate(x.shape))
        else:
            shape = tuple(s for i, s in enumerate(x.shape) if i not in dims)
        dtype = x.dtype
        if op == "mean":
            check_float(op, x)
        elif op == "sum" and category(dtype) < 2:
            dtype = "int64"
        return (TensorType(shape, dtype),)

    return infer


def _reduce_impl(fn: str) -> Any:
    def impl(xp: Any, arrs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
        x = arrs[0]
        dims = tuple(range(x.ndim)) if attrs["dims"] is None else attrs["dims"]
        return (getattr(xp, fn)(x, axis=dims, keepdims=attrs["keepdim"]),)

    return impl


def _reduce_flops(ins: Types, outs: Types, attrs: Mapping[str, Any]) -> int:
    return ins[0].numel + outs[0].numel


def _norm_dim_attr(ins: Types, attrs: dict[str, Any]) -> dict[str, Any]:
    attrs["dim"] = norm_dim("softmax", attrs["dim"], ins[0].rank)
    return attrs


def _softmax_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    check_float("softmax", ins[0])
    return (ins[0],)


def _softmax_impl(log: bool) -> Any:
    def impl(xp: Any, arrs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
        x = arrs[0]
        s = x - x.max(axis=attrs["dim"], keepdims=True)
        if log:
            return (s - xp.log(xp.exp(s).sum(axis=attrs["dim"], keepdims=True)),)
        e = xp.exp(s)
        return (e / e.sum(axis=attrs["dim"], keepdims=True),)

    return impl


def _per_input(cost: int) -> Any:
    def flops(ins: Types, outs: Types, attrs: Mapping[str, Any]) -> int:
        return cost * ins[0].numel

    return flops


def _ln_infer(op: str) -> Any:
    def infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
        x, ns = ins[0], tuple(attrs["normalized_shape"])
        check_float(op, x)
        if not ns or x.shape[-len(ns) :] != ns:
            raise ShapeError(
                f"op {op!r} needs normalized_shape to equal the trailing dims of x, but got "
                f"normalized_shape={ns} for x={x}."
            )
        for t in ins[1:]:
            if t.shape != ns:
                raise ShapeError(f"op {op!r} needs weight/bias of shape {ns}, but got {t}.")
        return (x,)

    return infer


def _layer_norm_impl(xp: Any, arrs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    x = arrs[0]
    axes = tuple(range(x.ndim - len(attrs["normalized_shape"]), x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / xp.sqrt(var + attrs["eps"])
    if len(arrs) > 1:
        y = y * arrs[1]
    if len(arrs) > 2:
        y = y + arrs[2]
    return (y,)


def _rms_norm_impl(xp: Any, arrs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    x = arrs[0]
    axes = tuple(range(x.ndim - len(attrs["normalized_shape"]), x.ndim))
    y = x / xp.sqrt((x * x).mean(axis=axes, keepdims=True) + attrs["eps"])
    return (y * arrs[1] if len(arrs) > 1 else y,)


def _bn_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    x = ins[0]
    check_float("batch_norm", x)
    if x.rank < 2 or any(t.shape != (x.shape[1],) for t in ins[1:]):
        raise ShapeError(
            f"op 'batch_norm' needs x[N, C, ...] and weight, bias, mean, var of shape [C], but got "
            f"{[str(t) for t in ins]}."
        )
    return (x,)


def _bn_impl(xp: Any, arrs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    x, w, b, mean, var = arrs
    shape = (1, -1) + (1,) * (x.ndim - 2)
    scale = w / xp.sqrt(var + attrs["eps"])
    return ((x - mean.reshape(shape)) * scale.reshape(shape) + b.reshape(shape),)


def _register_reductions() -> None:
    red = {"dims": None, "keepdim": False}
    # mean is linear but divides, so it is not exact in the field
    mean: Mapping[str, Any] = {"linear": True, "degree": "max"}
    for name, fn, algebra in (
        ("sum", "sum", ADDITIVE),
        ("mean", "mean", mean),
        ("amax", "max", FRESH),
        ("amin", "min", FRESH),
    ):
        register(
            OpDef(
                name,
                _reduce_infer(name),
                _reduce_impl(fn),
                _reduce_flops,
                family="reduction",
                attrs=dict(red),
                normalize=_norm_dims,
                checks={"dims": Attr("ints", optional=True, scalar=True), "keepdim": BOOL},
                doc=f"{name} over dims",
                **algebra,
            )
        )
    for name, log in (("softmax", False), ("log_softmax", True)):
        register(
            OpDef(
                name,
                _softmax_infer,
                _softmax_impl(log),
                _per_input(5),
                family="reduction",
                attrs={"dim": -1},
                normalize=_norm_dim_attr,
                checks={"dim": DIM},
                doc=f"{name} along dim",
            )
        )


_LN_CHECKS = {"normalized_shape": Attr("ints", low=0), "eps": EPS}


def _register_norms() -> None:
    register(
        OpDef(
            "layer_norm",
            _ln_infer("layer_norm"),
            _layer_norm_impl,
            _per_input(8),
            family="norm",
            attrs={"normalized_shape": REQUIRED, "eps": 1e-5},
            checks=_LN_CHECKS,
            arity=(1, 3),
            doc="layer norm over the trailing normalized_shape dims, optional weight and bias",
        )
    )
    register(
        OpDef(
            "rms_norm",
            _ln_infer("rms_norm"),
            _rms_norm_impl,
            _per_input(6),
            family="norm",
            attrs={"normalized_shape": REQUIRED, "eps": 1e-6},
            checks=_LN_CHECKS,
            arity=(1, 2),
            doc="x / sqrt(mean(x^2) + eps) * weight over the trailing dims",
        )
    )
    register(
        OpDef(
            "batch_norm",
            _bn_infer,
            _bn_impl,
            _per_input(4),
            family="norm",
            attrs={"eps": 1e-5},
            checks={"eps": EPS},
            arity=(5, 5),
            doc="inference batch norm (x, weight, bias, running_mean, running_var)",
        )
    )


_register_reductions()
_register_norms()
