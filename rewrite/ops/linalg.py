"""Matrix products, scaled dot-product attention, convolution and pooling.

FLOPs: a product ``[M, K] @ [K, N]`` counts ``2 M N K`` (plus ``M N`` for a bias). Attention
counts both products and 5 FLOPs per score for the softmax; it is one fused kernel whose bytes
are its inputs and output only (the score matrix never touches memory, as in FlashAttention).
A convolution counts ``2 N O Ho Wo (C / groups) kh kw``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rewrite.errors import ShapeError
from rewrite.ir import TensorType
from rewrite.ops.base import (
    BOOL,
    FRESH,
    NONNEG_PAIR,
    POS_PAIR,
    PRODUCT,
    Attr,
    OpDef,
    Types,
    broadcast,
    check_float,
    io_bytes,
    numel,
    register,
)

__all__: list[str] = []


def _same_dtype(op: str, ins: Types) -> str:
    dtypes = {t.dtype for t in ins}
    if len(dtypes) != 1:
        raise ShapeError(
            f"op {op!r} needs inputs of one dtype, but got {[str(t) for t in ins]}; cast first."
        )
    return ins[0].dtype


def _k_mismatch(op: str, a: TensorType, b: TensorType) -> ShapeError:
    return ShapeError(
        f"op {op!r} needs the contracted dims to agree (a.shape[-1] == b.shape[-2]), but got "
        f"a={a}, b={b}; transpose or reshape an operand."
    )


def _mm_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    a, b = ins
    if a.rank != 2 or b.rank != 2:
        raise ShapeError(
            f"op 'mm' needs two 2-d inputs, but got {a} and {b}; use 'matmul' or 'bmm'."
        )
    if a.shape[1] != b.shape[0]:
        raise _k_mismatch("mm", a, b)
    return (TensorType((a.shape[0], b.shape[1]), _same_dtype("mm", ins)),)


def _bmm_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    a, b = ins
    if a.rank != 3 or b.rank != 3 or a.shape[0] != b.shape[0]:
        raise ShapeError(f"op 'bmm' needs two 3-d inputs with equal batch, but got {a} and {b}.")
    if a.shape[2] != b.shape[1]:
        raise _k_mismatch("bmm", a, b)
    return (TensorType((a.shape[0], a.shape[1], b.shape[2]), _same_dtype("bmm", ins)),)


def _matmul_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    a, b = ins
    if a.rank == 0 or b.rank == 0:
        raise ShapeError(f"op 'matmul' needs inputs of rank >= 1, but got {a} and {b}.")
    sa = a.shape if a.rank > 1 else (1, *a.shape)
    sb = b.shape if b.rank > 1 else (*b.shape, 1)
    if sa[-1] != sb[-2]:
        raise _k_mismatch("matmul", a, b)
    batch = broadcast("matmul", sa[:-2], sb[:-2])
    shape = (*batch, *(sa[-2:-1] if a.rank > 1 else ()), *(sb[-1:] if b.rank > 1 else ()))
    return (TensorType(shape, _same_dtype("matmul", ins)),)


def _linear_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    x, w = ins[0], ins[1]
    if w.rank != 2 or x.rank < 1 or x.shape[-1] != w.shape[1]:
        raise ShapeError(
            f"op 'linear' needs x[..., K] and weight[N, K], but got x={x}, weight={w}; "
            "the weight is stored [out_features, in_features] as in torch."
        )
    if len(ins) == 3 and ins[2].shape != (w.shape[0],):
        raise ShapeError(f"op 'linear' needs bias[{w.shape[0]}], but got {ins[2]}.")
    return (TensorType((*x.shape[:-1], w.shape[0]), _same_dtype("linear", ins)),)


def _addmm_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    bias, a, b = ins
    (out,) = _mm_infer((a, b), attrs)
    if broadcast("addmm", bias.shape, out.shape) != out.shape:
        raise ShapeError(f"op 'addmm' needs a bias broadcastable to {out.shape}, but got {bias}.")
    return (TensorType(out.shape, _same_dtype("addmm", ins)),)


def _matmul_flops(ins: Types, outs: Types, attrs: Mapping[str, Any]) -> int:
    return 2 * outs[0].numel * ins[0].shape[-1]


def _linear_flops(ins: Types, outs: Types, attrs: Mapping[str, Any]) -> int:
    return 2 * outs[0].numel * ins[0].shape[-1] + (outs[0].numel if len(ins) == 3 else 0)


def _addmm_flops(ins: Types, outs: Types, attrs: Mapping[str, Any]) -> int:
    return 2 * outs[0].numel * ins[1].shape[1] + outs[0].numel


def _linear_impl(xp: Any, arrs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    y = xp.matmul(arrs[0], arrs[1].T)
    return (y + arrs[2] if len(arrs) == 3 else y,)


# ---------------------------------------------------------------------- attention
def _sdpa_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    q, k, v = ins[:3]
    if q.rank < 2 or k.rank != q.rank or v.rank != q.rank:
        raise ShapeError(f"op 'sdpa' needs q, k, v of equal rank >= 2, but got {q}, {k}, {v}.")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(
            f"op 'sdpa' needs q[..., L, E], k[..., S, E], v[..., S, Ev], but got q={q}, k={k}, v={v}."
        )
    if attrs["enable_gqa"] and q.rank >= 3 and q.shape[-3] % k.shape[-3]:
        raise ShapeError(
            f"op 'sdpa' with enable_gqa needs q heads divisible by kv heads, got {q}, {k}."
        )
    if len(ins) == 4:
        m = ins[3]
        broadcast("sdpa", m.shape, (*q.shape[:-1], k.shape[-2]))
        if m.dtype != "bool" and m.dtype != q.dtype:
            raise ShapeError(f"op 'sdpa' needs a bool or {q.dtype} mask, but got {m}.")
    check_float("sdpa", q)
    return (TensorType((*q.shape[:-1], v.shape[-1]), _same_dtype("sdpa", ins[:3])),)


def _sdpa_flops(ins: Types, outs: Types, attrs: Mapping[str, Any]) -> int:
    q, k, v = ins[:3]
    scores = numel(q.shape[:-1]) * k.shape[-2]
    return 2 * scores * q.shape[-1] + 2 * scores * v.shape[-1] + 5 * scores


def _sdpa_impl(xp: Any, arrs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    q, k, v = arrs[:3]
    if attrs["enable_gqa"] and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k, v = xp.repeat(k, rep, axis=-3), xp.repeat(v, rep, axis=-3)
    scale = attrs["scale"] if attrs["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
    s = xp.matmul(q, xp.swapaxes(k, -1, -2)) * scale
    L, S = q.shape[-2], k.shape[-2]
    if attrs["is_causal"]:
        s = xp.where(xp.tril(xp.ones((L, S), dtype=bool)), s, -xp.inf)
    if len(arrs) == 4:
        m = arrs[3]
        s = xp.where(m, s, -xp.inf) if m.dtype == bool else s + m
    s = s - s.max(axis=-1, keepdims=True)
    p = xp.exp(s)
    p = p / p.sum(axis=-1, keepdims=True)
    return (xp.matmul(p, v).astype(q.dtype),)


# ---------------------------------------------------------------------- conv / pool
def _conv_out(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _conv2d_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    x, w = ins[0], ins[1]
    g = attrs["groups"]
    if x.rank != 4 or w.rank != 4 or x.shape[1] != w.shape[1] * g or w.shape[0] % g:
        raise ShapeError(
            f"op 'conv2d' needs x[N, C, H, W] and weight[O, C/groups, kh, kw] with O % groups == 0, "
            f"but got x={x}, weight={w}, groups={g}."
        )
    if len(ins) == 3 and ins[2].shape != (w.shape[0],):
        raise ShapeError(f"op 'conv2d' needs bias[{w.shape[0]}], but got {ins[2]}.")
    (sh, sw), (ph, pw), (dh, dw) = attrs["stride"], attrs["padding"], attrs["dilation"]
    ho = _conv_out(x.shape[2], w.shape[2], sh, ph, dh)
    wo = _conv_out(x.shape[3], w.shape[3], sw, pw, dw)
    if ho <= 0 or wo <= 0:
        raise ShapeError(
            f"op 'conv2d' output would be empty for x={x}, weight={w}, attrs={dict(attrs)}."
        )
    return (TensorType((x.shape[0], w.shape[0], ho, wo), _same_dtype("conv2d", ins)),)


def _windows(
    xp: Any, x: Any, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]
) -> Any:
    """``N x C x Ho x Wo x kh x kw`` windows of a padded ``N x C x H x W`` array."""
    kh, kw = kernel
    (sh, sw), (dh, dw) = stride, dilation
    ho = (x.shape[2] - dh * (kh - 1) - 1) // sh + 1
    wo = (x.shape[3] - dw * (kw - 1) - 1) // sw + 1
    out = xp.empty((*x.shape[:2], ho, wo, kh, kw), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            out[..., i, j] = x[
                :,
                :,
                i * dh : i * dh + sh * (ho - 1) + 1 : sh,
                j * dw : j * dw + sw * (wo - 1) + 1 : sw,
            ]
    return out


def _conv2d_impl(xp: Any, arrs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    x, w = arrs[0], arrs[1]
    ph, pw = attrs["padding"]
    x = xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    cols = _windows(xp, x, w.shape[2:], attrs["stride"], attrs["dilation"])
    g = attrs["groups"]
    cg, og = w.shape[1], w.shape[0] // g
    outs = [
        xp.einsum("nchwij,ocij->nohw", cols[:, i * cg : (i + 1) * cg], w[i * og : (i + 1) * og])
        for i in range(g)
    ]
    y = xp.concatenate(outs, axis=1) if g > 1 else outs[0]
    if len(arrs) == 3:
        y = y + arrs[2].reshape(1, -1, 1, 1)
    return (y,)


def _conv2d_flops(ins: Types, outs: Types, attrs: Mapping[str, Any]) -> int:
    w = ins[1]
    return 2 * outs[0].numel * w.shape[1] * w.shape[2] * w.shape[3] + (
        outs[0].numel if len(ins) == 3 else 0
    )


def _pool_infer(op: str) -> Any:
    def infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
        (x,) = ins
        if x.rank != 4:
            raise ShapeError(f"op {op!r} needs x[N, C, H, W], but got {x}.")
        (kh, kw), (sh, sw), (ph, pw) = attrs["kernel"], attrs["stride"], attrs["padding"]
        if ph > kh // 2 or pw > kw // 2:
            raise ShapeError(
                f"op {op!r} needs padding <= kernel // 2, but got {attrs['padding']} for {attrs['kernel']}."
            )
        ho, wo = _conv_out(x.shape[2], kh, sh, ph, 1), _conv_out(x.shape[3], kw, sw, pw, 1)
        if ho <= 0 or wo <= 0:
            raise ShapeError(
                f"op {op!r} output would be empty: kernel={attrs['kernel']} with "
                f"padding={attrs['padding']} does not fit {x}; use a smaller kernel."
            )
        return (TensorType((x.shape[0], x.shape[1], ho, wo), x.dtype),)

    return infer


def _max_pool_impl(xp: Any, arrs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    ph, pw = attrs["padding"]
    x = xp.pad(arrs[0], ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=-xp.inf)
    return (_windows(xp, x, attrs["kernel"], attrs["stride"], (1, 1)).max(axis=(-2, -1)),)


def _avg_pool_impl(xp: Any, arrs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    ph, pw = attrs["padding"]
    x = xp.pad(arrs[0], ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    return (_windows(xp, x, attrs["kernel"], attrs["stride"], (1, 1)).mean(axis=(-2, -1)),)


def _pool_flops(ins: Types, outs: Types, attrs: Mapping[str, Any]) -> int:
    kh, kw = attrs["kernel"]
    return outs[0].numel * kh * kw


_POOL_ATTRS = {"kernel": (2, 2), "stride": (2, 2), "padding": (0, 0)}
_POOL_CHECKS = {"kernel": POS_PAIR, "stride": POS_PAIR, "padding": NONNEG_PAIR}


def _register_products() -> None:
    mm_impl = lambda xp, arrs, a: (xp.matmul(arrs[0], arrs[1]),)  # noqa: E731
    for name, infer in (("mm", _mm_infer), ("bmm", _bmm_infer), ("matmul", _matmul_infer)):
        register(
            OpDef(
                name,
                infer,
                mm_impl,
                _matmul_flops,
                family="matmul",
                arity=(2, 2),
                doc=f"{name} product",
                **PRODUCT,
            )
        )
    register(
        OpDef(
            "linear",
            _linear_infer,
            _linear_impl,
            _linear_flops,
            family="matmul",
            arity=(2, 3),
            doc="x @ weight.T (+ bias), weight stored [out, in]",
            **PRODUCT,
        )
    )
    register(
        OpDef(
            "addmm",
            _addmm_infer,
            lambda xp, arrs, a: (arrs[0] + xp.matmul(arrs[1], arrs[2]),),
            _addmm_flops,
            family="matmul",
            arity=(3, 3),
            doc="bias + a @ b",
            **PRODUCT,
        )
    )


def _register_attention_conv() -> None:
    register(
        OpDef(
            "sdpa",
            _sdpa_infer,
            _sdpa_impl,
            _sdpa_flops,
            io_bytes,
            family="attention",
            arity=(3, 4),
            attrs={"is_causal": False, "scale": None, "enable_gqa": False},
            checks={
                "is_causal": BOOL,
                "scale": Attr("float", optional=True),
                "enable_gqa": BOOL,
            },
            doc="scaled dot-product attention softmax(q k^T * scale + mask) v, one fused kernel",
        )
    )
    register(
        OpDef(
            "conv2d",
            _conv2d_infer,
            _conv2d_impl,
            _conv2d_flops,
            family="conv",
            arity=(2, 3),
            attrs={"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1},
            doc="2-d convolution, NCHW",
            checks={
                "stride": POS_PAIR,
                "padding": NONNEG_PAIR,
                "dilation": POS_PAIR,
                "groups": Attr("int", low=1),
            },
            **PRODUCT,
        )
    )
    register(
        OpDef(
            "max_pool2d",
            _pool_infer("max_pool2d"),
            _max_pool_impl,
            _pool_flops,
            family="pool",
            attrs=dict(_POOL_ATTRS),
            doc="2-d max pooling, NCHW",
            checks=_POOL_CHECKS,
            **FRESH,
        )
    )
    register(
        OpDef(
            "avg_pool2d",
            _pool_infer("avg_pool2d"),
            _avg_pool_impl,
            _pool_flops,
            family="pool",
            attrs=dict(_POOL_ATTRS),
            doc="2-d average pooling (padding counted), NCHW",
            checks=_POOL_CHECKS,
        )
    )


_register_products()
_register_attention_conv()
