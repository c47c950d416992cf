"""Memory rules: rematerialization of cheap producers and chunking along batch/sequence/heads."""

from __future__ import annotations

import numpy as np

from rewrite.builder import GraphBuilder
from rewrite.ir import Graph, Value
from rewrite.rules._helpers import EW_BINARY, EW_UNARY, op
from rewrite.rules.base import Dims, Rule
from rewrite.rules.pattern import Match, P, V

__all__ = ["memory_rules"]


def _sample_remat(d: Dims) -> Graph:
    b = GraphBuilder("remat")
    x, y = b.input("x", (d(), d())), b.input("y", (1,))
    c = op(b, "mul", x, y)
    h = op(b, "tanh", op(b, "exp", c))
    return b.build([op(b, "add", c, h)])


def _remat_pre(m: Match) -> bool:
    c = m.node("c")
    outs = {v.node for v in m.graph.outputs}
    return (len(m.graph.users(c.id)) > 1 or c.id in outs) and len(c.types) == 1


def _remat(ed, m: Match) -> list[Value]:  # noqa: ANN001
    c, root = m.node("c"), m.root_node()
    c2 = ed.add(c.op, c.inputs, dict(c.attrs)).out(0)
    return [ed.add(root.op, [c2, *root.inputs[1:]], dict(root.attrs)).out(0)]


def _halves(ed, v: Value, dim: int, size: int) -> list[Value]:  # noqa: ANN001
    h = size // 2
    return [
        op(ed, "slice", v, dim=dim, start=0, end=h),
        op(ed, "slice", v, dim=dim, start=h, end=size),
    ]


def _chunk_linear(ed, m: Match) -> list[Value]:  # noqa: ANN001
    n = m.root_node()
    r = n.in_types[0].rank
    parts = [
        op(ed, "linear", x, *n.inputs[1:])
        for x in _halves(ed, n.inputs[0], r - 2, n.in_types[0].shape[-2])
    ]
    return [op(ed, "concat", *parts, dim=r - 2)]


def _chunk_addmm(ed, m: Match) -> list[Value]:  # noqa: ANN001
    parts = [op(ed, "addmm", m["b"], x, m["w"]) for x in _halves(ed, m["x"], 0, m.shape("x")[0])]
    return [op(ed, "concat", *parts, dim=0)]


def _chunk_attention(ed, m: Match) -> list[Value]:  # noqa: ANN001
    n = m.root_node()
    r = n.in_types[0].rank
    hd = r - 3
    qs, ks, vs = (_halves(ed, v, hd, n.in_types[0].shape[hd]) for v in n.inputs[:3])
    masks: list[list[Value]] = [[], []]
    if len(n.inputs) == 4:
        mt = n.in_types[3]
        if mt.rank == r and mt.shape[hd] > 1:
            masks = [[x] for x in _halves(ed, n.inputs[3], hd, mt.shape[hd])]
        else:
            masks = [[n.inputs[3]], [n.inputs[3]]]
    parts = [op(ed, "sdpa", qs[i], ks[i], vs[i], *masks[i], **dict(n.attrs)) for i in range(2)]
    return [op(ed, "concat", *parts, dim=hd)]


def _chunk_norm(ed, m: Match) -> list[Value]:  # noqa: ANN001
    nn = m.root_node()
    d = nn.types[0].rank - 1 - len(nn.attrs["normalized_shape"])
    parts = [
        op(ed, nn.op, x, *nn.inputs[1:], **dict(nn.attrs))
        for x in _halves(ed, nn.inputs[0], d, nn.types[0].shape[d])
    ]
    return [op(ed, "concat", *parts, dim=d)]


def _norm_even(m: Match) -> bool:
    nn = m.root_node()
    d = nn.types[0].rank - 1 - len(nn.attrs["normalized_shape"])
    return d >= 0 and nn.types[0].shape[d] >= 2 and nn.types[0].shape[d] % 2 == 0


def _sample_chunk(d: Dims, kind: str) -> Graph:
    b = GraphBuilder(kind)
    s, k, n = 2 * d(), d(), d()
    if kind == "norm":
        x = b.input("x", (1, s, k))
        return b.build([op(b, "rms_norm", x, b.param("g", (k,)), normalized_shape=(k,))])
    if kind == "linear":
        x = b.input("x", (1, s, k))
        return b.build([op(b, "linear", x, b.param("w", (n, k)), b.param("b", (n,)))])
    if kind == "addmm":
        x = b.input("x", (s, k))
        return b.build([op(b, "addmm", b.param("b", (n,)), x, b.param("w", (k, n)))])
    q, kk, v = (b.input(c, (1, s, k, n)) for c in "qkv")
    mask = b.const(np.tril(np.ones((k, k), dtype=bool)).reshape(1, 1, k, k))
    return b.build([op(b, "sdpa", q, kk, v, mask, scale=0.5)])


def _even(m: Match, dim_from_end: int) -> bool:
    t = m.root_node().in_types[0]
    return (
        t.rank >= dim_from_end and t.shape[-dim_from_end] >= 2 and t.shape[-dim_from_end] % 2 == 0
    )


def memory_rules() -> list[Rule]:
    """The memory family."""
    cheap = (*EW_UNARY, *EW_BINARY)
    return [
        Rule(
            "chunk_norm",
            "memory",
            (P(("layer_norm", "rms_norm"), variadic=True),),
            _chunk_norm,
            lambda d: _sample_chunk(d, "norm"),
            {"peak_memory": "-", "kernels": "+"},
            "norm(x) -> concat(norm(x[:half]), norm(x[half:])) along the rows",
            pre=_norm_even,
        ),
        Rule(
            "rematerialize_elementwise",
            "memory",
            (P(("add", "mul", "sub"), P(cheap, variadic=True, name="c"), V("y")),),
            _remat,
            _sample_remat,
            {"compute": "+", "peak_memory": "~"},
            "a cheap element-wise producer with several users is recomputed for this consumer",
            pre=_remat_pre,
            exclusive=False,
        ),
        Rule(
            "chunk_linear",
            "memory",
            (P("linear", variadic=True),),
            _chunk_linear,
            lambda d: _sample_chunk(d, "linear"),
            {"peak_memory": "-", "kernels": "+"},
            "linear(x) -> concat(linear(x[:half]), linear(x[half:])) along the sequence dim",
            pre=lambda m: _even(m, 2),
        ),
        Rule(
            "chunk_addmm",
            "memory",
            (P("addmm", V("b"), V("x"), V("w")),),
            _chunk_addmm,
            lambda d: _sample_chunk(d, "addmm"),
            {"peak_memory": "-", "kernels": "+"},
            "b + x W -> concat(b + x[:half] W, b + x[half:] W) along rows",
            pre=lambda m: (
                m.shape("x")[0] % 2 == 0 and m.shape("x")[0] >= 2 and m.type("b").rank <= 1
            ),
        ),
        Rule(
            "chunk_attention",
            "memory",
            (P("sdpa", variadic=True),),
            _chunk_attention,
            lambda d: _sample_chunk(d, "attn"),
            {"peak_memory": "-", "kernels": "+"},
            "sdpa(q, k, v) -> concat of sdpa over each half of the heads",
            pre=lambda m: _even(m, 3) and not m.root_node().attrs["enable_gqa"],
        ),
    ]
