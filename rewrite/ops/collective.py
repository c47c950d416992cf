"""Explicit-shard ops for sharding rules: ``shard`` and the collectives.

A sharded graph spells its devices out (as PartIR and Unity do): ``shard(x; dim, n)`` splits a
(replicated) tensor into ``n`` equal pieces, piece ``i`` living on device ``i``; every value
computed from piece ``i`` (and replicated values) lives on device ``i``. Collectives take one
input per device, in device order:

* ``all_reduce(x_0, ..., x_{n-1})``: the sum, replicated on every device;
* ``all_gather(x_0, ..., x_{n-1}; dim)``: the concatenation along ``dim``, replicated;
* ``reduce_scatter(x_0, ..., x_{n-1}; dim)``: the sum split into ``n`` pieces along ``dim``,
  piece ``i`` on device ``i``.

Semantically they are sum/concat/split, so the verifier and the prover check sharded graphs like
any other; `rewrite.shard_cost` prices them with the alpha-beta model. Importing `rewrite.ops`
registers the ops (once).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rewrite.errors import ShapeError
from rewrite.ir import TensorType
from rewrite.ops.base import (
    ADDITIVE,
    DIM,
    LAYOUT,
    Attr,
    OpDef,
    Types,
    get_op,
    io_bytes,
    norm_dim,
    op_names,
    register,
)

__all__ = ["COLLECTIVES", "SHARD_OPS"]

#: Communication ops.
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
#: Every op of this module.
SHARD_OPS = ("shard", *COLLECTIVES)


def _same(op: str, ins: Types) -> TensorType:
    if not ins or any(t != ins[0] for t in ins):
        raise ShapeError(
            f"op {op!r} needs one input per device, all of one type, but got {[str(t) for t in ins]}."
        )
    return ins[0]


def _piece(op: str, t: TensorType, dim: int, n: int) -> TensorType:
    d = norm_dim(op, dim, t.rank)
    if n < 1 or t.shape[d] % n:
        raise ShapeError(
            f"op {op!r} needs dim {d} of {t} divisible by n={n}; pick n dividing {t.shape[d]}."
        )
    return TensorType(tuple(s // n if i == d else s for i, s in enumerate(t.shape)), t.dtype)


def _shard_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    return (_piece("shard", ins[0], attrs["dim"], attrs["n"]),) * attrs["n"]


def _shard_impl(xp: Any, a: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(xp.split(a[0], attrs["n"], axis=attrs["dim"]))


def _all_reduce_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    return (_same("all_reduce", ins),)


def _all_reduce_impl(xp: Any, a: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    out = a[0]
    for x in a[1:]:
        out = out + x
    return (out,)


def _all_gather_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    t = _same("all_gather", ins)
    d = norm_dim("all_gather", attrs["dim"], t.rank)
    return (
        TensorType(tuple(s * len(ins) if i == d else s for i, s in enumerate(t.shape)), t.dtype),
    )


def _reduce_scatter_infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    return (_piece("reduce_scatter", _same("reduce_scatter", ins), attrs["dim"], len(ins)),) * len(
        ins
    )


def _reduce_scatter_impl(xp: Any, a: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    (s,) = _all_reduce_impl(xp, a, attrs)
    return tuple(xp.split(s, len(a), axis=attrs["dim"]))


def _dim_norm(ins: Types, attrs: dict[str, Any]) -> dict[str, Any]:
    attrs["dim"] = norm_dim("dim", attrs["dim"], ins[0].rank)
    return attrs


def _reduce_flops(ins: Types, outs: Types, attrs: Mapping[str, Any]) -> int:
    return (len(ins) - 1) * ins[0].numel


def _zero(ins: Types, outs: Types, attrs: Mapping[str, Any]) -> int:
    return 0


def _register() -> None:
    if "shard" in op_names():
        if get_op("shard").family != "collective":
            raise ShapeError(
                "an op named 'shard' is registered by someone else; rename one of them."
            )
        return
    register(
        OpDef(
            "shard",
            _shard_infer,
            _shard_impl,
            _zero,
            _zero,
            kind="view",
            family="collective",
            attrs={"dim": 0, "n": 2},
            checks={"dim": DIM, "n": Attr("int", low=1)},
            normalize=_dim_norm,
            doc="split into n equal pieces along dim, piece i on device i",
            **LAYOUT,
        )
    )
    register(
        OpDef(
            "all_reduce",
            _all_reduce_infer,
            _all_reduce_impl,
            _reduce_flops,
            io_bytes,
            family="collective",
            arity=(1, None),
            doc="sum of per-device inputs, replicated",
            **ADDITIVE,
        )
    )
    register(
        OpDef(
            "all_gather",
            _all_gather_infer,
            lambda xp, a, at: (xp.concatenate(list(a), axis=at["dim"]),),
            _zero,
            io_bytes,
            family="collective",
            attrs={"dim": 0},
            checks={"dim": DIM},
            arity=(1, None),
            normalize=_dim_norm,
            doc="concatenation of per-device inputs along dim, replicated",
            **LAYOUT,
        )
    )
    register(
        OpDef(
            "reduce_scatter",
            _reduce_scatter_infer,
            _reduce_scatter_impl,
            _reduce_flops,
            io_bytes,
            family="collective",
            attrs={"dim": 0},
            checks={"dim": DIM},
            arity=(1, None),
            normalize=_dim_norm,
            doc="sum of per-device inputs split along dim, piece i on device i",
            **ADDITIVE,
        )
    )


_register()
