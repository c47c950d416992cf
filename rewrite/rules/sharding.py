"""Sharding rules: split products and attention across ``n`` devices with the collective each needs.

Built on the explicit-shard ops of `rewrite.ops.collective`. `sharding_rules(n)` builds the
family for ``n`` devices (default 2). Per device, a sharded product does ``1/n`` of the FLOPs;
`rewrite.shard_cost` prices the collectives (alpha-beta model on the interconnect).
"""

from __future__ import annotations

import numpy as np

from rewrite.builder import GraphBuilder
from rewrite.ir import Graph, Value
from rewrite.rules._helpers import EW_UNARY, op, outs
from rewrite.rules.base import Dims, Rule
from rewrite.rules.pattern import Match, P, V

__all__ = ["sharding_rules"]


def _sh(ed, v: Value, dim: int, n: int) -> tuple[Value, ...]:  # noqa: ANN001
    return outs(ed, "shard", v, dim=dim, n=n)


def _div(size: int, n: int) -> bool:
    return size >= n and size % n == 0


def _linear_cols(n: int):  # noqa: ANN202
    def build(ed, m: Match) -> list[Value]:  # noqa: ANN001
        lin = m.root_node()
        ws = _sh(ed, lin.inputs[1], 0, n)
        bs = _sh(ed, lin.inputs[2], 0, n) if len(lin.inputs) == 3 else None
        parts = [op(ed, "linear", lin.inputs[0], ws[i], *([bs[i]] if bs else [])) for i in range(n)]
        return [op(ed, "all_gather", *parts, dim=lin.types[0].rank - 1)]

    return build


def _linear_rows(n: int):  # noqa: ANN202
    def build(ed, m: Match) -> list[Value]:  # noqa: ANN001
        lin = m.root_node()
        d = lin.in_types[0].rank - 2
        xs = _sh(ed, lin.inputs[0], d, n)
        return [op(ed, "all_gather", *(op(ed, "linear", x, *lin.inputs[1:]) for x in xs), dim=d)]

    return build


def _linear_k(n: int, with_reduce: bool = True):  # noqa: ANN202
    def build(ed, m: Match) -> list[Value]:  # noqa: ANN001
        lin = m.root_node()
        xs = _sh(ed, lin.inputs[0], lin.in_types[0].rank - 1, n)
        ws = _sh(ed, lin.inputs[1], 1, n)
        parts = [op(ed, "linear", xs[i], ws[i]) for i in range(n)]
        y = op(ed, "all_reduce", *parts) if with_reduce else parts[0]
        return [op(ed, "add", y, lin.inputs[2]) if len(lin.inputs) == 3 else y]

    return build


def _addmm_cols(n: int):  # noqa: ANN202
    def build(ed, m: Match) -> list[Value]:  # noqa: ANN001
        bs, ws = _sh(ed, m["b"], 0, n), _sh(ed, m["w"], 1, n)
        return [
            op(ed, "all_gather", *(op(ed, "addmm", bs[i], m["x"], ws[i]) for i in range(n)), dim=1)
        ]

    return build


def _addmm_k(n: int):  # noqa: ANN202
    def build(ed, m: Match) -> list[Value]:  # noqa: ANN001
        xs, ws = _sh(ed, m["x"], 1, n), _sh(ed, m["w"], 0, n)
        return [
            op(
                ed,
                "add",
                op(ed, "all_reduce", *(op(ed, "mm", xs[i], ws[i]) for i in range(n))),
                m["b"],
            )
        ]

    return build


def _megatron(n: int):  # noqa: ANN202
    def build(ed, m: Match) -> list[Value]:  # noqa: ANN001
        up, act, down = m.node("up"), m.node("act"), m.root_node()
        w1s = _sh(ed, up.inputs[1], 0, n)
        b1s = _sh(ed, up.inputs[2], 0, n) if len(up.inputs) == 3 else None
        w2s = _sh(ed, down.inputs[1], 1, n)
        parts = []
        for i in range(n):
            h = op(ed, "linear", up.inputs[0], w1s[i], *([b1s[i]] if b1s else []))
            parts.append(op(ed, "linear", op(ed, act.op, h, **dict(act.attrs)), w2s[i]))
        y = op(ed, "all_reduce", *parts)
        return [op(ed, "add", y, down.inputs[2]) if len(down.inputs) == 3 else y]

    return build


def _heads(n: int):  # noqa: ANN202
    def build(ed, m: Match) -> list[Value]:  # noqa: ANN001
        s = m.root_node()
        hd = s.in_types[0].rank - 3
        qkv = [_sh(ed, v, hd, n) for v in s.inputs[:3]]
        mask = list(s.inputs[3:])
        parts = [
            op(ed, "sdpa", qkv[0][i], qkv[1][i], qkv[2][i], *mask, **dict(s.attrs))
            for i in range(n)
        ]
        return [op(ed, "all_gather", *parts, dim=hd)]

    return build


def _conv_out(n: int):  # noqa: ANN202
    def build(ed, m: Match) -> list[Value]:  # noqa: ANN001
        c = m.root_node()
        ws = _sh(ed, c.inputs[1], 0, n)
        bs = _sh(ed, c.inputs[2], 0, n) if len(c.inputs) == 3 else None
        parts = [
            op(ed, "conv2d", c.inputs[0], ws[i], *([bs[i]] if bs else []), **dict(c.attrs))
            for i in range(n)
        ]
        return [op(ed, "all_gather", *parts, dim=1)]

    return build


def _embedding_dim(n: int):  # noqa: ANN202
    def build(ed, m: Match) -> list[Value]:  # noqa: ANN001
        e = m.root_node()
        ws = _sh(ed, e.inputs[0], 1, n)
        parts = [op(ed, "embedding", ws[i], e.inputs[1]) for i in range(n)]
        return [op(ed, "all_gather", *parts, dim=e.types[0].rank - 1)]

    return build


def _norm_rows(n: int):  # noqa: ANN202
    def build(ed, m: Match) -> list[Value]:  # noqa: ANN001
        nn = m.root_node()
        d = nn.types[0].rank - 1 - len(nn.attrs["normalized_shape"])
        xs = _sh(ed, nn.inputs[0], d, n)
        parts = [op(ed, nn.op, x, *nn.inputs[1:], **dict(nn.attrs)) for x in xs]
        return [op(ed, "all_gather", *parts, dim=d)]

    return build


def _norm_rows_ok(m: Match, n: int) -> bool:
    nn = m.root_node()
    d = nn.types[0].rank - 1 - len(nn.attrs["normalized_shape"])
    return d >= 0 and _div(nn.types[0].shape[d], n)


def _all_reduce_split(ed, m: Match) -> list[Value]:  # noqa: ANN001
    ar = m.root_node()
    d = ar.types[0].rank - 1
    pieces = outs(ed, "reduce_scatter", *ar.inputs, dim=d)
    return [op(ed, "all_gather", *pieces, dim=d)]


def _sample(d: Dims, kind: str) -> Graph:
    n = d.shards
    b = GraphBuilder(kind)
    s, k, f = n * d(), n * d(), n * d()
    if kind in ("linear", "megatron"):
        x = b.input("x", (1, s, k))
        y = op(b, "linear", x, b.param("w1", (f, k)), b.param("b1", (f,)))
        if kind == "megatron":
            y = op(b, "linear", op(b, "gelu", y), b.param("w2", (k, f)), b.param("b2", (k,)))
        return b.build([y])
    if kind == "addmm":
        x = b.input("x", (s, k))
        return b.build([op(b, "addmm", b.param("b", (f,)), x, b.param("w", (k, f)))])
    if kind == "conv":
        x = b.input("x", (1, d(), d() + 2, d() + 2))
        c = b.type_of(x).shape[1]
        return b.build(
            [op(b, "conv2d", x, b.param("w", (f, c, 3, 3)), b.param("b", (f,)), padding=(1, 1))]
        )
    if kind == "embedding":
        ids = b.input("ids", (1, s), "int64")
        return b.build([op(b, "embedding", b.param("w", (d() + 2, f)), ids)])
    if kind == "norm":
        x = b.input("x", (1, s, k))
        return b.build(
            [
                op(
                    b,
                    "layer_norm",
                    x,
                    b.param("g", (k,)),
                    b.param("beta", (k,)),
                    normalized_shape=(k,),
                )
            ]
        )
    if kind == "attn":
        e = d()
        q, kk, v = (b.input(c, (1, f, s, e)) for c in "qkv")
        mask = b.const(np.tril(np.ones((s, s), dtype=bool)).reshape(1, 1, s, s))
        return b.build([op(b, "sdpa", q, kk, v, mask, scale=0.5)])
    xs = [b.input(f"x{i}", (s, f)) for i in range(n)]
    return b.build([op(b, "all_reduce", *xs)])


_COMM = {"compute": "-", "communication": "+", "peak_memory": "-"}


def sharding_rules(n: int = 2) -> list[Rule]:
    """The sharding family for ``n`` devices."""
    return [*_product_rules(n), *_more_rules(n)]


def _more_rules(n: int) -> list[Rule]:
    comm = dict(_COMM)
    return [
        Rule(
            f"shard_conv_out_channels_{n}",
            "sharding",
            (P("conv2d", variadic=True),),
            _conv_out(n),
            lambda d: _sample(d, "conv"),
            dict(comm),
            f"conv2d(x, W) -> all_gather(conv2d(x, W[i])) over {n} devices (output channels split)",
            pre=lambda m: (
                m.root_node().attrs["groups"] == 1 and _div(m.root_node().in_types[1].shape[0], n)
            ),
        ),
        Rule(
            f"shard_embedding_dim_{n}",
            "sharding",
            (P("embedding", V("w"), V("ids")),),
            _embedding_dim(n),
            lambda d: _sample(d, "embedding"),
            {"peak_memory": "-", "communication": "+"},
            f"embedding(W, ids) -> all_gather(embedding(W[:, i], ids)) over {n} devices (hidden dim split)",
            pre=lambda m: m.type("w").rank == 2 and _div(m.shape("w")[1], n),
        ),
        Rule(
            f"shard_norm_rows_{n}",
            "sharding",
            (P(("layer_norm", "rms_norm"), variadic=True),),
            _norm_rows(n),
            lambda d: _sample(d, "norm"),
            dict(comm),
            f"norm(x) -> all_gather(norm(x[i])) over {n} devices (rows split: sequence parallelism)",
            pre=lambda m: _norm_rows_ok(m, n),
        ),
    ]


def _product_rules(n: int) -> list[Rule]:
    return [*_linear_rules(n), *_addmm_rules(n), *_block_rules(n)]


def _splits(m: Match, name: str, i: int, n: int) -> bool:
    """Whether dimension ``i`` of the matched ``name`` splits over ``n`` devices."""
    return _div(m.shape(name)[i], n)


def _linear_rules(n: int) -> list[Rule]:
    comm = dict(_COMM)
    lin = P("linear", V("x"), V("w"), variadic=True)
    return [
        Rule(
            f"shard_linear_columns_{n}",
            "sharding",
            (lin,),
            _linear_cols(n),
            lambda d: _sample(d, "linear"),
            dict(comm),
            f"linear(x, W) -> all_gather(linear(x, W[i])) over {n} devices (W split on N)",
            pre=lambda m: _splits(m, "w", 0, n),
        ),
        Rule(
            f"shard_linear_rows_{n}",
            "sharding",
            (lin,),
            _linear_rows(n),
            lambda d: _sample(d, "linear"),
            dict(comm),
            f"linear(x, W) -> all_gather(linear(x[i], W)) over {n} devices (x split on M, W replicated)",
            pre=lambda m: m.type("x").rank >= 2 and _splits(m, "x", -2, n),
        ),
        Rule(
            f"shard_linear_reduction_{n}",
            "sharding",
            (lin,),
            _linear_k(n),
            lambda d: _sample(d, "linear"),
            dict(comm),
            f"linear(x, W) -> all_reduce(linear(x[i], W[i])) over {n} devices (split on K)",
            pre=lambda m: _splits(m, "w", 1, n),
        ),
    ]


def _addmm_rules(n: int) -> list[Rule]:
    comm = dict(_COMM)
    am = P("addmm", V("b"), V("x"), V("w"))
    return [
        Rule(
            f"shard_addmm_columns_{n}",
            "sharding",
            (am,),
            _addmm_cols(n),
            lambda d: _sample(d, "addmm"),
            dict(comm),
            f"b + x W -> all_gather(b[i] + x W[:, i]) over {n} devices (split on N)",
            pre=lambda m: _splits(m, "w", 1, n) and m.type("b").rank == 1,
        ),
        Rule(
            f"shard_addmm_reduction_{n}",
            "sharding",
            (am,),
            _addmm_k(n),
            lambda d: _sample(d, "addmm"),
            dict(comm),
            f"b + x W -> b + all_reduce(x[:, i] W[i]) over {n} devices (split on K)",
            pre=lambda m: _splits(m, "w", 0, n),
        ),
    ]


def _block_rules(n: int) -> list[Rule]:
    """A whole MLP, attention by heads, and an all-reduce split in two collectives."""
    return [
        Rule(
            f"megatron_mlp_{n}",
            "sharding",
            (
                P(
                    "linear",
                    P(EW_UNARY, P("linear", variadic=True, name="up"), name="act"),
                    variadic=True,
                ),
            ),
            _megatron(n),
            lambda d: _sample(d, "megatron"),
            {"compute": "-", "communication": "+", "peak_memory": "-"},
            f"linear(act(linear(x, W1)), W2) -> all_reduce over {n} devices of column- then row-parallel halves",
            pre=lambda m: _div(m.node("up").in_types[1].shape[0], n),
        ),
        Rule(
            f"shard_attention_heads_{n}",
            "sharding",
            (P("sdpa", variadic=True),),
            _heads(n),
            lambda d: _sample(d, "attn"),
            dict(_COMM),
            f"sdpa(q, k, v) -> all_gather of sdpa on each device's heads ({n} devices)",
            pre=lambda m: _heads_split(m, n),
        ),
        Rule(
            f"all_reduce_as_reduce_scatter_{n}",
            "sharding",
            (P("all_reduce", variadic=True),),
            _all_reduce_split,
            lambda d: _sample(d, "ar"),
            {"peak_memory": "-", "communication": "~", "kernels": "+"},
            "all_reduce(x) -> all_gather(reduce_scatter(x)) along the last dim",
            pre=lambda m: (
                len(m.root_node().inputs) == n
                and m.root_node().types[0].rank >= 1
                and _div(m.root_node().types[0].shape[-1], n)
            ),
        ),
    ]


def _heads_split(m: Match, n: int) -> bool:
    """Whether the matched attention's query heads split over ``n`` devices, with as many key
    heads, and a mask (if any) shared by every head."""
    types = m.root_node().in_types
    return (
        types[0].rank >= 3
        and _div(types[0].shape[-3], n)
        and types[1].shape[-3] == types[0].shape[-3]
        and (len(m.root_node().inputs) < 4 or types[3].rank < 3 or types[3].shape[-3] == 1)
    )
