"""Converters from core-ATen ops to IR ops, used by `rewrite.torch_import`.

Each converter takes ``(ctx, fx_node, *args, **kwargs)`` with the ATen call's arguments and
returns a `Value` (or a tuple of Values for multi-output ops). It raises `Unsupported` for a
variant the IR cannot express (the importer then keeps an opaque node). Ops whose tensor inputs
are all constants never reach a converter: the importer folds them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rewrite.ir import Value
from rewrite.ops.base import category

__all__ = ["CONVERTERS", "IGNORED", "Unsupported", "torch_dtype_name"]

#: Bookkeeping ops dropped by the importer.
IGNORED = frozenset(
    {
        "aten._assert_tensor_metadata.default",
        "aten._assert_async.msg",
        "aten._assert_scalar.default",
        "aten.sym_constrain_range_for_size.default",
        "aten._local_scalar_dense.default",
    }
)

CONVERTERS: dict[str, Callable[..., Any]] = {}


class Unsupported(Exception):
    """This variant of an op has no IR equivalent; the importer keeps an opaque node."""


def torch_dtype_name(dtype: Any) -> str:
    """IR dtype name of a torch dtype.

    Raises:
        Unsupported: For dtypes the IR lacks (complex, float8...).
    """
    name = str(dtype).removeprefix("torch.")
    if name not in (
        "bool",
        "uint8",
        "int8",
        "int16",
        "int32",
        "int64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
    ):
        raise Unsupported(f"dtype {name} is not in the IR")
    return name


def _conv(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        for n in names:
            CONVERTERS[n] = fn
        return fn

    return deco


def _out_shape(ctx: Any, node: Any) -> tuple[int, ...]:
    return ctx.val_type(node).shape


# ---------------------------------------------------------------------- layout
@_conv(
    "aten.view.default",
    "aten.reshape.default",
    "aten._unsafe_view.default",
    "aten.unsqueeze.default",
    "aten.squeeze.dim",
    "aten.squeeze.dims",
    "aten.squeeze.default",
    "aten.flatten.using_ints",
)
def _reshape(ctx: Any, node: Any, x: Any, *rest: Any) -> Value:
    return ctx.b.reshape(ctx.tensor(x), shape=_out_shape(ctx, node))


@_conv("aten.expand.default")
def _expand(ctx: Any, node: Any, x: Any, *rest: Any, **kw: Any) -> Value:
    return ctx.b.expand(ctx.tensor(x), shape=_out_shape(ctx, node))


@_conv("aten.permute.default")
def _permute(ctx: Any, node: Any, x: Any, dims: Any) -> Value:
    return ctx.b.permute(ctx.tensor(x), dims=tuple(dims))


@_conv("aten.transpose.int")
def _transpose(ctx: Any, node: Any, x: Any, d0: int, d1: int) -> Value:
    return ctx.b.transpose(ctx.tensor(x), dim0=d0, dim1=d1)


@_conv("aten.t.default")
def _t(ctx: Any, node: Any, x: Any) -> Value:
    v = ctx.tensor(x)
    return ctx.b.transpose(v, dim0=0, dim1=1) if ctx.b.type_of(v).rank == 2 else v


@_conv("aten.numpy_T.default")
def _numpy_t(ctx: Any, node: Any, x: Any) -> Value:
    v = ctx.tensor(x)
    rank = ctx.b.type_of(v).rank
    return ctx.b.permute(v, dims=tuple(reversed(range(rank)))) if rank > 1 else v


@_conv("aten.diagonal.default")
def _diagonal(ctx: Any, node: Any, x: Any, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Value:
    return ctx.b.diagonal(ctx.tensor(x), offset=offset, dim1=dim1, dim2=dim2)


@_conv("aten.diag.default")
def _diag(ctx: Any, node: Any, x: Any, diagonal: int = 0) -> Value:
    v = ctx.tensor(x)
    if ctx.b.type_of(v).rank != 2:
        raise Unsupported(
            "diag of a 1-d tensor (it builds a diagonal matrix; only the diagonal of a matrix "
            "is imported)"
        )
    return ctx.b.diagonal(v, offset=diagonal, dim1=0, dim2=1)


@_conv("aten.trace.default")
def _trace(ctx: Any, node: Any, x: Any) -> Value:
    return ctx.b.sum(ctx.b.diagonal(ctx.tensor(x), offset=0, dim1=0, dim2=1), dims=None)


@_conv("aten.stack.default")
def _stack(ctx: Any, node: Any, xs: Any, dim: int = 0) -> Value:
    vs = [ctx.tensor(x) for x in xs]
    t = ctx.b.type_of(vs[0])
    d = dim % (t.rank + 1)
    shape = (*t.shape[:d], 1, *t.shape[d:])
    return ctx.b.concat([ctx.b.reshape(v, shape=shape) for v in vs], dim=d)


@_conv("aten.unbind.int")
def _unbind(ctx: Any, node: Any, x: Any, dim: int = 0) -> tuple[Value, ...]:
    v = ctx.tensor(x)
    t = ctx.b.type_of(v)
    d = dim % t.rank
    rest = t.shape[:d] + t.shape[d + 1 :]
    return tuple(
        ctx.b.reshape(ctx.b.slice(v, dim=d, start=i, end=i + 1), shape=rest)
        for i in range(t.shape[d])
    )


@_conv("aten.slice.Tensor")
def _slice(
    ctx: Any, node: Any, x: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1
) -> Value:
    return ctx.b.slice(ctx.tensor(x), dim=dim, start=start or 0, end=end, step=step)


@_conv("aten.select.int")
def _select(ctx: Any, node: Any, x: Any, dim: int, index: int) -> Value:
    v = ctx.tensor(x)
    size = ctx.b.type_of(v).shape[dim]
    index = index % size
    s = ctx.b.slice(v, dim=dim, start=index, end=index + 1)
    return ctx.b.reshape(s, shape=_out_shape(ctx, node))


@_conv("aten.cat.default", "aten.concat.default")
def _cat(ctx: Any, node: Any, xs: Any, dim: int = 0) -> Value:
    return ctx.b.concat([ctx.tensor(x) for x in xs], dim=dim)


@_conv("aten.split_with_sizes.default")
def _split_sizes(ctx: Any, node: Any, x: Any, sizes: Any, dim: int = 0) -> tuple[Value, ...]:
    return ctx.b.add_node("split", [ctx.tensor(x)], sizes=tuple(sizes), dim=dim).outs


@_conv("aten.split.Tensor")
def _split(ctx: Any, node: Any, x: Any, size: int, dim: int = 0) -> tuple[Value, ...]:
    v = ctx.tensor(x)
    total = ctx.b.type_of(v).shape[dim]
    sizes = tuple(min(size, total - s) for s in range(0, total, size))
    return ctx.b.add_node("split", [v], sizes=sizes, dim=dim).outs


@_conv(
    "aten.clone.default",
    "aten.alias.default",
    "aten.contiguous.default",
    "aten.detach.default",
    "aten.lift_fresh_copy.default",
    "aten.dropout.default",
)
def _identity(ctx: Any, node: Any, x: Any, *rest: Any, **kw: Any) -> Value:
    return ctx.tensor(x)


@_conv(
    "aten._to_copy.default", "aten.to.dtype", "aten.to.dtype_layout", "aten._to_dtype_copy.default"
)
def _to(ctx: Any, node: Any, x: Any, *rest: Any, **kw: Any) -> Value:
    v = ctx.tensor(x)
    want = ctx.val_type(node).dtype
    return v if ctx.b.type_of(v).dtype == want else ctx.b.cast(v, dtype=want)


@_conv("aten.index_select.default")
def _index_select(ctx: Any, node: Any, x: Any, dim: int, idx: Any) -> Value:
    return ctx.b.index_select(ctx.tensor(x), ctx.tensor(idx), dim=dim)


@_conv("aten.embedding.default")
def _embedding(ctx: Any, node: Any, w: Any, ids: Any, *rest: Any) -> Value:
    return ctx.b.embedding(ctx.tensor(w), ctx.tensor(ids))


# ---------------------------------------------------------------------- element-wise
_UNARY = {
    "neg": "neg",
    "exp": "exp",
    "log": "log",
    "sqrt": "sqrt",
    "rsqrt": "rsqrt",
    "reciprocal": "reciprocal",
    "abs": "abs",
    "relu": "relu",
    "silu": "silu",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
    "erf": "erf",
    "sin": "sin",
    "cos": "cos",
    "logical_not": "logical_not",
    "bitwise_not": "logical_not",
}


def _unary(op: str) -> Callable[..., Value]:
    def fn(ctx: Any, node: Any, x: Any) -> Value:
        return ctx.b.add_node(op, [ctx.tensor(x)]).out(0)

    return fn


for _aten, _op in _UNARY.items():
    CONVERTERS[f"aten.{_aten}.default"] = _unary(_op)


@_conv("aten.gelu.default")
def _gelu(ctx: Any, node: Any, x: Any, approximate: str = "none") -> Value:
    return ctx.b.gelu(ctx.tensor(x), approximate=approximate)


def _operand(ctx: Any, node: Any, x: Any, other: Any, compare: bool) -> Value:
    """A tensor operand, or a scalar turned into a 0-d constant of a fitting dtype."""
    if not isinstance(x, bool | int | float):
        return ctx.tensor(x)
    if compare:
        t = ctx.b.type_of(ctx.tensor(other))
        kind = 0 if isinstance(x, bool) else (1 if isinstance(x, int) else 2)
        dtype = t.dtype if kind <= category(t.dtype) else ("int64" if kind == 1 else "float32")
    else:
        dtype = ctx.val_type(node).dtype
    return ctx.b.const(x, dtype=dtype)


def _binary(op: str, compare: bool = False) -> Callable[..., Value]:
    def fn(ctx: Any, node: Any, a: Any, b: Any, **kw: Any) -> Value:
        if kw.get("rounding_mode") is not None:
            raise Unsupported(f"rounding_mode={kw['rounding_mode']!r}")
        va, vb = _operand(ctx, node, a, b, compare), _operand(ctx, node, b, a, compare)
        if kw.get("alpha", 1) != 1:
            vb = ctx.b.mul(vb, ctx.b.const(kw["alpha"], dtype=ctx.b.type_of(vb).dtype))
        return ctx.b.add_node(op, [va, vb]).out(0)

    return fn


for _aten, _op, _cmp in [
    ("add", "add", False),
    ("sub", "sub", False),
    ("mul", "mul", False),
    ("div", "div", False),
    ("maximum", "maximum", False),
    ("minimum", "minimum", False),
    ("eq", "eq", True),
    ("ne", "ne", True),
    ("lt", "lt", True),
    ("le", "le", True),
    ("gt", "gt", True),
    ("ge", "ge", True),
    ("logical_and", "logical_and", True),
    ("logical_or", "logical_or", True),
    ("bitwise_and", "logical_and", True),
    ("bitwise_or", "logical_or", True),
]:
    for _overload in ("Tensor", "Scalar", "default", "Tensor_mode"):
        CONVERTERS[f"aten.{_aten}.{_overload}"] = _binary(_op, _cmp)
for _overload in ("Tensor_Scalar", "Tensor_Tensor", "Scalar"):
    CONVERTERS[f"aten.pow.{_overload}"] = _binary("pow")


@_conv("aten.rsub.Scalar", "aten.rsub.Tensor")
def _rsub(ctx: Any, node: Any, a: Any, b: Any, alpha: Any = 1) -> Value:
    return _binary("sub")(ctx, node, b, a)


@_conv("aten.where.self")
def _where(ctx: Any, node: Any, c: Any, a: Any, b: Any) -> Value:
    return ctx.b.where(
        ctx.tensor(c), _operand(ctx, node, a, b, False), _operand(ctx, node, b, a, False)
    )


# ---------------------------------------------------------------------- reductions, norms
def _reduce(op: str) -> Callable[..., Value]:
    def fn(
        ctx: Any, node: Any, x: Any, dims: Any = None, keepdim: bool = False, **kw: Any
    ) -> Value:
        v = ctx.tensor(x)
        if kw.get("dtype") is not None:
            v = ctx.b.cast(v, dtype=torch_dtype_name(kw["dtype"]))
        dims = (
            tuple(dims)
            if isinstance(dims, list | tuple) and len(dims)
            else (None if dims in (None, []) else dims)
        )
        out = ctx.b.add_node(op, [v], dims=dims, keepdim=keepdim).out(0)
        want = ctx.val_type(node).dtype
        return out if ctx.b.type_of(out).dtype == want else ctx.b.cast(out, dtype=want)

    return fn


for _aten, _op in [
    ("sum.dim_IntList", "sum"),
    ("sum.default", "sum"),
    ("mean.dim", "mean"),
    ("mean.default", "mean"),
    ("amax.default", "amax"),
    ("amin.default", "amin"),
]:
    CONVERTERS[f"aten.{_aten}"] = _reduce(_op)


@_conv(
    "aten._softmax.default", "aten.softmax.int", "aten._log_softmax.default", "aten.log_softmax.int"
)
def _softmax(ctx: Any, node: Any, x: Any, dim: int, *rest: Any, **kw: Any) -> Value:
    op = "log_softmax" if "log_softmax" in str(node.target) else "softmax"
    out = ctx.b.add_node(op, [ctx.tensor(x)], dim=dim).out(0)
    want = ctx.val_type(node).dtype
    return out if ctx.b.type_of(out).dtype == want else ctx.b.cast(out, dtype=want)


@_conv("aten.layer_norm.default")
def _layer_norm(
    ctx: Any,
    node: Any,
    x: Any,
    shape: Any,
    w: Any = None,
    b: Any = None,
    eps: float = 1e-5,
    *rest: Any,
) -> Value:
    if w is None and b is not None:
        raise Unsupported("layer_norm with a bias but no weight")
    ins = [ctx.tensor(t) for t in (x, w, b) if t is not None]
    return ctx.b.layer_norm(ins, normalized_shape=tuple(shape), eps=float(eps))


@_conv("aten.native_layer_norm.default")
def _native_layer_norm(
    ctx: Any, node: Any, x: Any, shape: Any, w: Any, b: Any, eps: float
) -> tuple[Any, ...]:
    return (_layer_norm(ctx, node, x, shape, w, b, eps), _Missing("mean"), _Missing("rstd"))


@_conv("aten.rms_norm.default")
def _rms_norm(
    ctx: Any, node: Any, x: Any, shape: Any, w: Any = None, eps: float | None = None
) -> Value:
    ins = [ctx.tensor(t) for t in (x, w) if t is not None]
    eps = (
        1.1920928955078125e-07 if eps is None else float(eps)
    )  # torch's default: finfo(float32).eps
    return ctx.b.rms_norm(ins, normalized_shape=tuple(shape), eps=eps)


@_conv("aten._native_batch_norm_legit_no_training.default")
def _batch_norm(
    ctx: Any, node: Any, x: Any, w: Any, b: Any, mean: Any, var: Any, momentum: float, eps: float
) -> tuple[Any, ...]:
    if w is None or b is None:
        raise Unsupported("batch norm without affine weight and bias")
    v = ctx.b.batch_norm([ctx.tensor(t) for t in (x, w, b, mean, var)], eps=float(eps))
    return (v, _Missing("save_mean"), _Missing("save_invstd"))


# ---------------------------------------------------------------------- products, attention, conv
@_conv("aten.mm.default")
def _mm(ctx: Any, node: Any, a: Any, b: Any) -> Value:
    return ctx.b.mm(ctx.tensor(a), ctx.tensor(b))


@_conv("aten.bmm.default")
def _bmm(ctx: Any, node: Any, a: Any, b: Any) -> Value:
    return ctx.b.bmm(ctx.tensor(a), ctx.tensor(b))


@_conv("aten.matmul.default", "aten.mv.default", "aten.dot.default")
def _matmul(ctx: Any, node: Any, a: Any, b: Any) -> Value:
    return ctx.b.matmul(ctx.tensor(a), ctx.tensor(b))


@_conv("aten.addmm.default")
def _addmm(ctx: Any, node: Any, bias: Any, a: Any, b: Any, beta: Any = 1, alpha: Any = 1) -> Value:
    if beta != 1 or alpha != 1:
        raise Unsupported(f"addmm with beta={beta}, alpha={alpha}")
    return ctx.b.addmm(ctx.tensor(bias), ctx.tensor(a), ctx.tensor(b))


@_conv("aten.linear.default")
def _linear(ctx: Any, node: Any, x: Any, w: Any, b: Any = None) -> Value:
    return ctx.b.linear([ctx.tensor(t) for t in (x, w, b) if t is not None])


@_conv("aten.scaled_dot_product_attention.default")
def _sdpa(
    ctx: Any,
    node: Any,
    q: Any,
    k: Any,
    v: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Value:
    if dropout_p:
        raise Unsupported(f"sdpa with dropout_p={dropout_p} (export the model in eval mode)")
    ins = [ctx.tensor(t) for t in (q, k, v, attn_mask) if t is not None]
    return ctx.b.sdpa(ins, is_causal=bool(is_causal), scale=scale, enable_gqa=bool(enable_gqa))


@_conv("aten.convolution.default", "aten.conv2d.default")
def _convolution(
    ctx: Any,
    node: Any,
    x: Any,
    w: Any,
    b: Any = None,
    stride: Any = (1, 1),
    padding: Any = (0, 0),
    dilation: Any = (1, 1),
    *rest: Any,
) -> Value:
    transposed, groups = (rest[0], rest[2]) if len(rest) == 3 else (False, rest[0] if rest else 1)
    if transposed or len(stride) != 2 or isinstance(padding, str):
        raise Unsupported("only 2-d, non-transposed convolutions with explicit padding")
    ins = [ctx.tensor(t) for t in (x, w, b) if t is not None]
    return ctx.b.conv2d(
        ins, stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation), groups=groups
    )


def _pool_args(kernel: Any, stride: Any, padding: Any) -> dict[str, Any]:
    pair = lambda v: (tuple(v) * 2)[:2] if isinstance(v, list | tuple) else (v, v)  # noqa: E731
    return {
        "kernel": pair(kernel),
        "stride": pair(stride) if stride not in (None, []) else pair(kernel),
        "padding": pair(padding),
    }


@_conv("aten.max_pool2d_with_indices.default")
def _max_pool(
    ctx: Any,
    node: Any,
    x: Any,
    kernel: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
) -> tuple[Any, ...]:
    if ceil_mode or dilation not in (1, [1, 1], (1, 1)):
        raise Unsupported("max_pool2d with ceil_mode or dilation")
    return (
        ctx.b.max_pool2d(ctx.tensor(x), **_pool_args(kernel, stride, padding)),
        _Missing("indices"),
    )


@_conv("aten.avg_pool2d.default")
def _avg_pool(
    ctx: Any,
    node: Any,
    x: Any,
    kernel: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: Any = None,
) -> Value:
    if ceil_mode or not count_include_pad or divisor_override is not None:
        raise Unsupported("avg_pool2d with ceil_mode, count_include_pad=False or divisor_override")
    return ctx.b.avg_pool2d(ctx.tensor(x), **_pool_args(kernel, stride, padding))


@_conv("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool2d.default")
def _adaptive_avg(ctx: Any, node: Any, x: Any, size: Any) -> Value:
    if tuple(size) != (1, 1):
        raise Unsupported(f"adaptive_avg_pool2d to {tuple(size)} (only (1, 1))")
    return ctx.b.mean(ctx.tensor(x), dims=(2, 3), keepdim=True)


class _Missing:
    """An auxiliary output the IR does not compute (e.g. batch-norm statistics)."""

    def __init__(self, what: str) -> None:
        self.what = what
