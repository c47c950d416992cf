"""Layout and indexing ops: reshape, permute, transpose, expand, concat, split, slice,
diagonal, index_select and embedding.

``reshape``, ``expand``, ``slice``, ``split`` and ``diagonal`` are views: no kernel, no bytes,
their outputs alias input 0. ``permute`` and ``transpose`` are costed as a copy kernel, as TASO does, so that
layout rewrites have something to gain. ``embedding`` reads only the gathered rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rewrite.errors import ShapeError
from rewrite.ir import TensorType
from rewrite.ops.base import DIM, LAYOUT, REQUIRED, Attr, OpDef, Types, norm_dim, numel, register

__all__: list[str] = []


def _zero(ins: Types, outs: Types, attrs: Mapping[str, Any]) -> int:
    return 0


def _reshape_norm(ins: Types, attrs: dict[str, Any]) -> dict[str, Any]:
    x, shape = ins[0], tuple(attrs["shape"])
    if shape.count(-1) > 1:
        raise ShapeError(f"op 'reshape' allows at most one -1 in shape, but got {shape}.")
    if -1 in shape:
        known = numel(tuple(d for d in shape if d != -1))
        if known == 0 or x.numel % known:
            raise ShapeError(
                f"op 'reshape' cannot infer -1 in {shape} for {x} ({x.numel} elements)."
            )
        shape = tuple(x.numel // known if d == -1 else d for d in shape)
    attrs["shape"] = shape
    return attrs


def _reshape_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    x, shape = ins[0], tuple(attrs["shape"])
    if any(d < 0 for d in shape) or numel(shape) != x.numel:
        raise ShapeError(
            f"op 'reshape' must keep the element count, but {x} has {x.numel} elements and shape "
            f"{shape} has {numel(shape) if all(d >= 0 for d in shape) else 'an invalid size'}."
        )
    return (TensorType(shape, x.dtype),)


def _permute_norm(ins: Types, attrs: dict[str, Any]) -> dict[str, Any]:
    attrs["dims"] = tuple(norm_dim("permute", d, ins[0].rank) for d in attrs["dims"])
    return attrs


def _permute_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    x, dims = ins[0], attrs["dims"]
    if sorted(dims) != list(range(x.rank)):
        raise ShapeError(
            f"op 'permute' needs dims to be a permutation of range({x.rank}), but got {dims}."
        )
    return (TensorType(tuple(x.shape[d] for d in dims), x.dtype),)


def _transpose_norm(ins: Types, attrs: dict[str, Any]) -> dict[str, Any]:
    a, b = (norm_dim("transpose", attrs[k], ins[0].rank) for k in ("dim0", "dim1"))
    attrs["dim0"], attrs["dim1"] = min(a, b), max(a, b)
    return attrs


def _transpose_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    s = list(ins[0].shape)
    a, b = attrs["dim0"], attrs["dim1"]
    s[a], s[b] = s[b], s[a]
    return (TensorType(tuple(s), ins[0].dtype),)


def _expand_norm(ins: Types, attrs: dict[str, Any]) -> dict[str, Any]:
    x, shape = ins[0], tuple(attrs["shape"])
    lead = len(shape) - x.rank
    if lead < 0:
        raise ShapeError(f"op 'expand' cannot reduce rank: {x} to shape {shape}.")
    attrs["shape"] = tuple(
        x.shape[i - lead] if d == -1 and i >= lead else d for i, d in enumerate(shape)
    )
    return attrs


def _expand_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    x, shape = ins[0], tuple(attrs["shape"])
    lead = len(shape) - x.rank
    ok = (
        lead >= 0
        and all(d >= 0 for d in shape)
        and all(x.shape[i] in (1, shape[i + lead]) for i in range(x.rank))
    )
    if not ok:
        raise ShapeError(
            f"op 'expand' needs every dim of the input to be 1 or equal to the target, but got "
            f"{x} -> {shape}."
        )
    return (TensorType(shape, x.dtype),)


def _dim_norm(ins: Types, attrs: dict[str, Any]) -> dict[str, Any]:
    attrs["dim"] = norm_dim("dim", attrs["dim"], ins[0].rank)
    return attrs


def _concat_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    d, x = attrs["dim"], ins[0]
    for t in ins[1:]:
        if (
            t.rank != x.rank
            or t.dtype != x.dtype
            or any(a != b for i, (a, b) in enumerate(zip(t.shape, x.shape)) if i != d)
        ):
            raise ShapeError(
                f"op 'concat' needs inputs of one dtype with equal dims except dim={d}, but got "
                f"{[str(t) for t in ins]}."
            )
    shape = list(x.shape)
    shape[d] = sum(t.shape[d] for t in ins)
    return (TensorType(tuple(shape), x.dtype),)


def _split_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    x, d, sizes = ins[0], attrs["dim"], tuple(attrs["sizes"])
    if sum(sizes) != x.shape[d] or any(s < 0 for s in sizes):
        raise ShapeError(
            f"op 'split' needs sizes summing to {x.shape[d]} (dim {d} of {x}), but got {sizes}."
        )
    return tuple(TensorType(x.shape[:d] + (s,) + x.shape[d + 1 :], x.dtype) for s in sizes)


def _split_impl(xp: Any, arrs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    x, d, out, start = arrs[0], attrs["dim"], [], 0
    for s in attrs["sizes"]:
        out.append(xp.take(x, xp.arange(start, start + s), axis=d))
        start += s
    return tuple(out)


def _slice_norm(ins: Types, attrs: dict[str, Any]) -> dict[str, Any]:
    attrs = _dim_norm(ins, attrs)
    size = ins[0].shape[attrs["dim"]]
    if attrs["step"] < 1:
        raise ShapeError(f"op 'slice' needs step >= 1, but got step={attrs['step']}.")
    start, end, _ = slice(attrs["start"], attrs["end"]).indices(size)
    attrs["start"], attrs["end"] = start, max(start, end)
    return attrs


def _slice_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    x, d = ins[0], attrs["dim"]
    n = len(range(attrs["start"], attrs["end"], attrs["step"]))
    return (TensorType(x.shape[:d] + (n,) + x.shape[d + 1 :], x.dtype),)


def _slice_impl(xp: Any, arrs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    idx = [slice(None)] * arrs[0].ndim
    idx[attrs["dim"]] = slice(attrs["start"], attrs["end"], attrs["step"])
    return (arrs[0][tuple(idx)],)


def _diagonal_norm(ins: Types, attrs: dict[str, Any]) -> dict[str, Any]:
    a, b = (norm_dim("diagonal", attrs[k], ins[0].rank) for k in ("dim1", "dim2"))
    if a == b:
        raise ShapeError(f"op 'diagonal' needs two different dims, but got dim1={a}, dim2={b}.")
    attrs["dim1"], attrs["dim2"] = a, b
    return attrs


def _diagonal_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    x, a, b, k = ins[0], attrs["dim1"], attrs["dim2"], attrs["offset"]
    if x.rank < 2:
        raise ShapeError(f"op 'diagonal' needs an input of rank >= 2, but got {x}.")
    n = max(0, min(x.shape[a] + min(k, 0), x.shape[b] - max(k, 0)))
    rest = tuple(s for i, s in enumerate(x.shape) if i not in (a, b))
    return (TensorType((*rest, n), x.dtype),)


def _diagonal_impl(xp: Any, arrs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    return (xp.diagonal(arrs[0], attrs["offset"], attrs["dim1"], attrs["dim2"]),)


def _index_select_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    x, idx, d = ins[0], ins[1], attrs["dim"]
    if idx.rank != 1 or idx.dtype not in ("int32", "int64"):
        raise ShapeError(f"op 'index_select' needs a 1-d int32/int64 index, but got {idx}.")
    return (TensorType(x.shape[:d] + idx.shape + x.shape[d + 1 :], x.dtype),)


def _embedding_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    w, ids = ins
    if w.rank != 2 or ids.dtype not in ("int32", "int64"):
        raise ShapeError(
            f"op 'embedding' needs weight[V, D] and int32/int64 ids, but got {w} and {ids}."
        )
    return (TensorType((*ids.shape, w.shape[1]), w.dtype),)


def _gather_bytes(ins: Types, outs: Types, attrs: Mapping[str, Any]) -> int:
    return ins[1].nbytes + 2 * outs[0].nbytes  # index + gathered rows + output


def _copy_flops(ins: Types, outs: Types, attrs: Mapping[str, Any]) -> int:
    return 0


_SHAPE = Attr("ints", low=-1)  # -1: infer (reshape) or keep (expand) that dim


def _register_views() -> None:
    view: dict[str, Any] = {"kind": "view", "family": "shape", "bytes": _zero, **LAYOUT}
    register(
        OpDef(
            "reshape",
            _reshape_infer,
            lambda xp, a, at: (a[0].reshape(at["shape"]),),
            attrs={"shape": REQUIRED},
            checks={"shape": _SHAPE},
            normalize=_reshape_norm,
            doc="view with a new shape",
            **view,
        )
    )
    register(
        OpDef(
            "expand",
            _expand_infer,
            lambda xp, a, at: (xp.broadcast_to(a[0], at["shape"]),),
            attrs={"shape": REQUIRED},
            checks={"shape": _SHAPE},
            normalize=_expand_norm,
            doc="broadcast view",
            **view,
        )
    )
    register(
        OpDef(
            "slice",
            _slice_infer,
            _slice_impl,
            attrs={"dim": REQUIRED, "start": 0, "end": None, "step": 1},
            checks={
                "dim": DIM,
                "start": Attr("int", optional=True),
                "end": Attr("int", optional=True),
                "step": Attr("int", low=1),
            },
            normalize=_slice_norm,
            doc="strided slice along dim",
            **view,
        )
    )
    register(
        OpDef(
            "split",
            _split_infer,
            _split_impl,
            attrs={"sizes": REQUIRED, "dim": 0},
            checks={"sizes": Attr("ints", low=0), "dim": DIM},
            normalize=_dim_norm,
            doc="split into pieces of the given sizes (multi-output)",
            **view,
        )
    )
    register(
        OpDef(
            "diagonal",
            _diagonal_infer,
            _diagonal_impl,
            attrs={"offset": 0, "dim1": 0, "dim2": 1},
            checks={"offset": Attr("int"), "dim1": DIM, "dim2": DIM},
            normalize=_diagonal_norm,
            doc="the diagonal of dims (dim1, dim2), shifted by offset, as the last dim (numpy's)",
            **view,
        )
    )


#: Gathers move elements, but their integer index input does not reach the output.
_GATHER: Mapping[str, Any] = {**LAYOUT, "pass_ints": False}


def _register_copies() -> None:
    register(
        OpDef(
            "permute",
            _permute_infer,
            lambda xp, a, at: (xp.transpose(a[0], at["dims"]),),
            _copy_flops,
            family="shape",
            attrs={"dims": REQUIRED},
            checks={"dims": Attr("ints")},
            normalize=_permute_norm,
            doc="permute dims (costed as a copy)",
            **LAYOUT,
        )
    )
    register(
        OpDef(
            "transpose",
            _transpose_infer,
            lambda xp, a, at: (xp.swapaxes(a[0], at["dim0"], at["dim1"]),),
            _copy_flops,
            family="shape",
            attrs={"dim0": REQUIRED, "dim1": REQUIRED},
            checks={"dim0": DIM, "dim1": DIM},
            normalize=_transpose_norm,
            doc="swap two dims (costed as a copy)",
            **LAYOUT,
        )
    )
    register(
        OpDef(
            "concat",
            _concat_infer,
            lambda xp, a, at: (xp.concatenate(list(a), axis=at["dim"]),),
            _copy_flops,
            family="shape",
            attrs={"dim": 0},
            checks={"dim": DIM},
            arity=(1, None),
            normalize=_dim_norm,
            doc="concatenate along dim",
            **LAYOUT,
        )
    )
    register(
        OpDef(
            "index_select",
            _index_select_infer,
            lambda xp, a, at: (xp.take(a[0], a[1], axis=at["dim"]),),
            _copy_flops,
            _gather_bytes,
            family="shape",
            attrs={"dim": REQUIRED},
            checks={"dim": DIM},
            arity=(2, 2),
            normalize=_dim_norm,
            doc="gather slices along dim by a 1-d index",
            **_GATHER,
        )
    )
    register(
        OpDef(
            "embedding",
            _embedding_infer,
            lambda xp, a, at: (xp.take(a[0], a[1], axis=0),),
            _copy_flops,
            _gather_bytes,
            family="shape",
            arity=(2, 2),
            doc="rows of weight[V, D] selected by integer ids",
            **_GATHER,
        )
    )


_register_views()
_register_copies()
