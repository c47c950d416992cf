"""Fusion rules: element-wise chains, matmul epilogues, RMS norm and attention.

Fused kernels are ``fused`` nodes whose ``body`` graph holds the fused ops (constants copied in).
`MAX_FUSE` caps a body's op count; `fusion_rules(max_fuse=...)` builds rules with another cap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rewrite.builder import GraphBuilder
from rewrite.errors import MatchError
from rewrite.ir import ConstArray, Graph, Node, Value
from rewrite.rules._helpers import EW_BINARY, EW_UNARY, const_scalar, is_scalar_const, op
from rewrite.rules.base import Dims, Rule
from rewrite.rules.pattern import Match, P, V

__all__ = ["MAX_FUSE", "fusion_rules"]

#: Default maximum number of ops in one fused body.
MAX_FUSE = 8
_EW = frozenset((*EW_UNARY, *EW_BINARY, "batch_norm"))  # inference batch norm is per-channel affine
_PRODUCTS = frozenset({"linear", "addmm", "mm", "conv2d"})


def _body_ops(n: Node) -> list[Node]:
    if n.op == "fused":
        return [b for b in n.attrs["body"].nodes.values() if b.op not in ("input", "const")]
    return [n]


def _is_ew_group(n: Node) -> bool:
    return n.op in _EW or (n.op == "fused" and all(b.op in _EW for b in _body_ops(n)))


def _is_product_group(n: Node) -> bool:
    """A product op, or a fused group of one product op and its element-wise epilogue (so an
    epilogue keeps growing after a first fusion: ``fused[conv; bn; add]`` can take a ``relu``)."""
    if n.op in _PRODUCTS:
        return True
    if n.op != "fused":
        return False
    ops = [b.op for b in _body_ops(n)]
    return sum(o in _PRODUCTS for o in ops) == 1 and all(o in _PRODUCTS or o in _EW for o in ops)


def _producer(m: Match, kinds: str, max_fuse: int) -> Node | None:
    """The input node the root fuses with: exclusive, single-output, of the wanted kind."""
    g, root = m.graph, m.root_node()
    # an element-wise producer may also join an epilogue group, on an input its product op
    # does not read (``fused[conv; bn; add(., r)]`` takes ``r = bn(y)``: one kernel still)
    epilogue_root = kinds == "ew" and root.op == "fused" and _is_product_group(root)
    if not (_is_ew_group(root) or epilogue_root) or len(root.types) != 1:
        return None
    outs = {v.node for v in g.outputs}
    for i, v in enumerate(root.inputs):
        p = g.node(v.node)
        ok = _is_ew_group(p) if kinds == "ew" else _is_product_group(p)
        if ok and epilogue_root and _feeds_product(root, i):
            continue
        if not ok or len(p.types) != 1 or p.id in outs or g.users(p.id) != (root.id,):
            continue
        if len(_body_ops(p)) + len(_body_ops(root)) <= max_fuse and _reads_a_tensor(g, p, root):
            return p
    return None


def _reads_a_tensor(g: Graph, p: Node, root: Node) -> bool:
    """Whether the fused pair would read some value that is not a constant (constants are
    inlined into the body; a group of constants alone would have no input, and folding, not
    fusion, is what such a computation wants)."""
    return any(v.node != p.id and g.node(v.node).op != "const" for v in (*p.inputs, *root.inputs))


def _feeds_product(group: Node, i: int) -> bool:
    """Whether the ``i``-th input of a fused group is read by a product op of its body."""
    body: Graph = group.attrs["body"]
    inp = body.inputs[i]
    return any(b.op in _PRODUCTS and any(v.node == inp for v in b.inputs) for b in body)


def _need_producer(m: Match, kinds: str, max_fuse: int) -> Node:
    p = _producer(m, kinds, max_fuse)
    if p is None:
        raise MatchError(
            f"no fusable producer at {m.roots}; the precondition should have rejected this match."
        )
    return p


def _inline(bb: GraphBuilder, n: Node, ins: Sequence[Value]) -> Value:
    if n.op != "fused":
        return bb.add(n.op, ins, dict(n.attrs)).out(0)
    body: Graph = n.attrs["body"]
    env: dict[int, Value] = dict(zip(body.inputs, ins))
    for b in body:
        if b.id in env:
            continue
        if b.op == "const":
            env[b.id] = bb.const(b.attrs["value"])
            continue
        env[b.id] = bb.add(
            b.op,
            [env[v.node] if v.index == 0 else Value(env[v.node].node, v.index) for v in b.inputs],
            dict(b.attrs),
        ).out(0)
    return env[body.outputs[0].node]


def _fuse_pair(ed, g: Graph, p: Node, root: Node) -> Value:  # noqa: ANN001
    """A fused node computing ``root`` with its input ``p`` inlined."""
    ext: list[Value] = []
    for v in (*p.inputs, *root.inputs):
        if v.node != p.id and v not in ext and g.node(v.node).op != "const":
            ext.append(v)
    bb = GraphBuilder("fused")
    env = {v: bb.input(f"i{k}", g.type_of(v).shape, g.type_of(v).dtype) for k, v in enumerate(ext)}

    def arg(v: Value) -> Value:
        n = g.node(v.node)
        return bb.const(n.attrs["value"]) if n.op == "const" else env[v]

    pv = _inline(bb, p, [arg(v) for v in p.inputs])
    rv = _inline(bb, root, [pv if v.node == p.id else arg(v) for v in root.inputs])
    body = bb.build([rv])
    return ed.add("fused", ext, {"body": body}).out(0)


def _sample_ew(d: Dims) -> Graph:
    b = GraphBuilder("ew")
    x = b.input("x", (d(), d()))
    y = op(b, "tanh", op(b, "mul", op(b, "add", x, b.const(1.0, "float32")), x))
    return b.build([op(b, "mul", y, b.const(0.5, "float32"))])


def _sample_epilogue(d: Dims) -> Graph:
    b = GraphBuilder("epi")
    x = b.input("x", (1, d(), d()))
    n = d()
    y = op(b, "linear", x, b.param("w", (n, x_k(b, x))), b.param("b", (n,)))
    return b.build([op(b, "gelu", y)])


def x_k(b: GraphBuilder, x: Value) -> int:
    """Last dim of ``x``."""
    return b.type_of(x).shape[-1]


def _sample_rms(d: Dims) -> Graph:
    b = GraphBuilder("rms")
    s, k = d(), d()
    x, w = b.input("x", (1, s, k)), b.param("w", (k,))
    var = op(b, "mean", op(b, "pow", x, b.const(2.0, "float32")), dims=(2,), keepdim=True)
    r = op(b, "rsqrt", op(b, "add", var, b.const(1e-5, "float32")))
    return b.build([op(b, "mul", w, op(b, "mul", x, r))])


def _rms_pre(m: Match) -> bool:
    g = m.graph
    if not (
        is_scalar_const(g, m["two"])
        and const_scalar(g, m["two"]) == 2.0
        and is_scalar_const(g, m["eps"])
    ):
        return False
    x = m.type("x")
    mean = m.node("mean")
    return (
        mean.attrs["dims"] == (x.rank - 1,)
        and mean.attrs["keepdim"]
        and m.shape("w") == (x.shape[-1],)
    )


def _rms_build(ed, m: Match) -> list[Value]:  # noqa: ANN001
    k = m.shape("x")[-1]
    return [
        op(
            ed,
            "rms_norm",
            m["x"],
            m["w"],
            normalized_shape=(k,),
            eps=const_scalar(m.graph, m["eps"]),
        )
    ]


def _sample_attn(d: Dims, fused: bool) -> Graph:
    b = GraphBuilder("attn")
    h, s, e = d(), d(), d()
    q, k, v = (b.input(n, (1, h, s, e)) for n in "qkv")
    mask = b.const(np.tril(np.ones((s, s), dtype=bool)).reshape(1, 1, s, s))
    if fused:
        return b.build([op(b, "sdpa", q, k, v, mask, scale=1.0 / math.sqrt(e))])
    sc = op(
        b,
        "mul",
        op(b, "matmul", q, op(b, "transpose", k, dim0=2, dim1=3)),
        b.const(ConstArray(0.5, "float64")),
    )
    sc = op(b, "where", mask, sc, b.const(ConstArray(-np.inf, "float32")))
    return b.build([op(b, "matmul", op(b, "softmax", sc, dim=3), v)])


def _unfuse_attn(ed, m: Match) -> list[Value]:  # noqa: ANN001
    n = m.root_node()
    q, k, v = n.inputs[:3]
    r = n.in_types[0].rank
    scale = (
        n.attrs["scale"]
        if n.attrs["scale"] is not None
        else 1.0 / math.sqrt(n.in_types[0].shape[-1])
    )
    s = op(
        ed,
        "mul",
        op(ed, "matmul", q, op(ed, "transpose", k, dim0=r - 2, dim1=r - 1)),
        ed.const(ConstArray(scale, "float64")),
    )
    L, S = n.in_types[0].shape[-2], n.in_types[1].shape[-2]
    mask = n.inputs[3] if len(n.inputs) == 4 else None
    if n.attrs["is_causal"]:
        mask = ed.const(np.tril(np.ones((L, S), dtype=bool)))
    if mask is not None:
        s = op(ed, "where", mask, s, ed.const(ConstArray(-np.inf, n.in_types[0].dtype)))
    return [op(ed, "matmul", op(ed, "softmax", s, dim=r - 1), v)]


def _unfuse_pre(m: Match) -> bool:
    n = m.root_node()
    if n.attrs["enable_gqa"] and n.in_types[0].shape[-3] != n.in_types[1].shape[-3]:
        return False
    if len(n.inputs) == 4 and n.in_types[3].dtype != "bool":
        return False
    return not (n.attrs["is_causal"] and len(n.inputs) == 4)


def _fuse_attn_pre(m: Match) -> bool:
    g = m.graph
    ninf = g.node(m["ninf"].node)
    if not (is_scalar_const(g, m["scale"]) and ninf.op == "const" and ninf.type.numel == 1):
        return False
    if not np.isneginf(np.asarray(ninf.attrs["value"].array).reshape(())):
        return False
    q, k, v = m.type("q"), m.type("k"), m.type("v")
    r = q.rank
    tr = m.node("kt").attrs
    ok_t = (tr["dim0"], tr["dim1"]) == (r - 2, r - 1) and m.attr("p", "dim") == r - 1
    return ok_t and r >= 2 and k.rank == r and v.rank == r and m.type("mask").dtype == "bool"


def _fuse_attn(ed, m: Match) -> list[Value]:  # noqa: ANN001
    scale = const_scalar(m.graph, m["scale"])
    return [op(ed, "sdpa", m["q"], m["k"], m["v"], m["mask"], scale=scale)]


def fusion_rules(max_fuse: int = MAX_FUSE) -> list[Rule]:
    """The fusion family, with fused bodies of at most ``max_fuse`` ops."""
    anchors = (*EW_UNARY, *EW_BINARY, "fused")
    scores = P("mul", P("matmul", V("q"), P("transpose", V("k"), name="kt")), V("scale"))
    attn = P("matmul", P("softmax", P("where", V("mask"), scores, V("ninf")), name="p"), V("v"))
    return [
        Rule(
            "fuse_elementwise",
            "fusion",
            (P(anchors, variadic=True),),
            lambda ed, m: [
                _fuse_pair(ed, m.graph, _need_producer(m, "ew", max_fuse), m.root_node())
            ],
            _sample_ew,
            {"memory": "-", "kernels": "-"},
            f"f(g(x)) -> fused[g; f] for element-wise f, g (bodies of at most {max_fuse} ops)",
            pre=lambda m: _producer(m, "ew", max_fuse) is not None,
            extra_nodes=lambda m: [_need_producer(m, "ew", max_fuse).id],
        ),
        Rule(
            "fuse_matmul_epilogue",
            "fusion",
            (P(anchors, variadic=True),),
            lambda ed, m: [
                _fuse_pair(ed, m.graph, _need_producer(m, "mm", max_fuse), m.root_node())
            ],
            _sample_epilogue,
            {"memory": "-", "kernels": "-"},
            "act(x W + b) -> fused[matmul; bias; act] (epilogue of linear/addmm/mm/conv2d)",
            pre=lambda m: _producer(m, "mm", max_fuse) is not None,
            extra_nodes=lambda m: [_need_producer(m, "mm", max_fuse).id],
        ),
        Rule(
            "fuse_rms_norm",
            "fusion",
            (
                P(
                    "mul",
                    V("w"),
                    P(
                        "mul",
                        V("x"),
                        P(
                            "rsqrt",
                            P("add", P("mean", P("pow", V("x"), V("two")), name="mean"), V("eps")),
                        ),
                    ),
                ),
            ),
            _rms_build,
            _sample_rms,
            {"memory": "-", "kernels": "-"},
            "w * (x * rsqrt(mean(x^2) + eps)) -> rms_norm(x, w)",
            pre=_rms_pre,
        ),
        Rule(
            "unfuse_attention",
            "fusion",
            (P("sdpa", variadic=True),),
            _unfuse_attn,
            lambda d: _sample_attn(d, True),
            {"peak_memory": "+", "memory": "+", "kernels": "+"},
            "sdpa(q, k, v, mask) -> softmax(where(mask, q k^T * s, -inf)) v",
            pre=_unfuse_pre,
            inverse="fuse_attention",
            direction="backward",
        ),
        Rule(
            "fuse_attention",
            "fusion",
            (attn,),
            _fuse_attn,
            lambda d: _sample_attn(d, False),
            {"peak_memory": "-", "memory": "-", "kernels": "-"},
            "softmax(where(mask, q k^T * s, -inf)) v -> sdpa(q, k, v, mask)",
            pre=_fuse_attn_pre,
            inverse="unfuse_attention",
            direction="forward",
        ),
    ]
