"""More fusion rules: decomposed GELU and grouped-query attention back into one op, norm prologues.

* ``fuse_gelu_tanh``: GPT-2's ``gelu_new`` (``0.5 x (1 + tanh(c (x + 0.044715 x^3)))``, eight
  element-wise kernels) into ``gelu(x, approximate="tanh")``. Proven because the verifiers give
  the tanh-form GELU its formula (with ``tanh`` uninterpreted), and the precondition checks the
  constants are exactly the ones that formula uses.
* ``gqa_into_sdpa``: the LLaMA ``repeat_kv`` spelling (reshape, expand, reshape of K and V) folded
  into ``sdpa(..., enable_gqa=True)``, which never materializes the repeated heads.
* ``fuse_norm_prologue``: an element-wise producer (e.g. the residual add) fused into the norm that
  consumes it.
"""

from __future__ import annotations

import numpy as np

from rewrite.builder import GraphBuilder
from rewrite.errors import MatchError
from rewrite.ir import Graph, Node, Value
from rewrite.rules._helpers import EW_BINARY, EW_UNARY, const_scalar, is_scalar_const, op
from rewrite.rules.base import Dims, Rule
from rewrite.rules.fusion import MAX_FUSE, _fuse_pair
from rewrite.rules.pattern import Match, P, V
from rewrite.verify.field import gelu_tanh_consts

__all__ = ["fusion_op_rules"]

_NORMS = ("layer_norm", "rms_norm")


def _sample_gelu(d: Dims) -> Graph:
    b = GraphBuilder("gelu_new")
    x = b.input("x", (1, d(), d()))
    k, c = gelu_tanh_consts("float32")
    inner = op(
        b,
        "mul",
        op(
            b,
            "add",
            x,
            op(b, "mul", op(b, "pow", x, b.const(3.0, "float32")), b.const(k, "float32")),
        ),
        b.const(c, "float32"),
    )
    y = op(
        b,
        "mul",
        op(b, "mul", x, b.const(0.5, "float32")),
        op(b, "add", op(b, "tanh", inner), b.const(1.0, "float32")),
    )
    return b.build([y])


def _gelu_pre(m: Match) -> bool:
    g = m.graph
    names = ("half", "three", "k", "c", "one")
    if not all(is_scalar_const(g, m[n]) for n in names):
        return False
    k, c = gelu_tanh_consts(m.type("x").dtype)
    want = {"half": 0.5, "three": 3.0, "k": k, "c": c, "one": 1.0}
    return all(const_scalar(g, m[n]) == want[n] for n in names)


def _gqa_pre(m: Match) -> bool:
    s = m.root_node()
    if s.attrs["enable_gqa"]:
        return False
    reps = []
    for src, mid, out in (("k", "ek", "k2"), ("v", "ev", "v2")):
        t, e, o = m.shape(src), m.shape(mid), m.shape(out)
        if len(t) < 3 or len(e) != len(t) + 1:
            return False
        lead, h, rest = t[:-3], t[-3], t[-2:]
        rep = e[-3]
        if e != (*lead, h, rep, *rest) or o != (*lead, h * rep, *rest):
            return False
        reps.append(rep)
    return reps[0] == reps[1] and reps[0] > 1


def _gqa(ed, m: Match) -> list[Value]:  # noqa: ANN001
    s = m.root_node()
    attrs = {**dict(s.attrs), "enable_gqa": True}
    return [op(ed, "sdpa", m["q"], m["k"], m["v"], *s.inputs[3:], **attrs)]


def _sample_gqa(d: Dims) -> Graph:
    b = GraphBuilder("gqa")
    hk, rep, s, e = d(), 2, d(), d()
    q = b.input("q", (1, hk * rep, s, e))
    kv = []
    for name in "kv":
        x = b.input(name, (1, hk, s, e))
        x = op(b, "expand", op(b, "reshape", x, shape=(1, hk, 1, s, e)), shape=(1, hk, rep, s, e))
        kv.append(op(b, "reshape", x, shape=(1, hk * rep, s, e)))
    mask = b.const(np.tril(np.ones((s, s), dtype=bool)).reshape(1, 1, s, s))
    return b.build([op(b, "sdpa", q, kv[0], kv[1], mask, scale=0.5)])


def _norm_producer(m: Match, max_fuse: int) -> Node | None:
    g, root = m.graph, m.root_node()
    p = g.node(root.inputs[0].node)
    ew = (*EW_UNARY, *EW_BINARY)
    if p.op not in ew or g.users(p.id) != (root.id,) or p.id in {v.node for v in g.outputs}:
        return None
    return p if max_fuse >= 2 else None


def _need(m: Match, max_fuse: int) -> Node:
    p = _norm_producer(m, max_fuse)
    if p is None:
        raise MatchError(
            f"no fusable producer at {m.roots}; the precondition should have rejected this match."
        )
    return p


def _sample_prologue(d: Dims) -> Graph:
    b = GraphBuilder("prologue")
    s, k = d(), d()
    x, r = b.input("x", (1, s, k)), b.input("r", (1, s, k))
    y = op(
        b,
        "layer_norm",
        op(b, "add", x, r),
        b.param("g", (k,)),
        b.param("beta", (k,)),
        normalized_shape=(k,),
    )
    return b.build([y])


def fusion_op_rules(max_fuse: int = MAX_FUSE) -> list[Rule]:
    """GELU/GQA recognition and norm prologue fusion."""
    x = V("x")
    inner = P("mul", P("add", x, P("mul", P("pow", x, V("three")), V("k"))), V("c"))
    gelu = P("mul", P("mul", x, V("half")), P("add", P("tanh", inner), V("one")))
    rep = lambda src, mid, out: P("reshape", P("expand", P("reshape", V(src)), name=mid), name=out)  # noqa: E731
    return [
        Rule(
            "fuse_gelu_tanh",
            "fusion",
            (gelu,),
            lambda ed, m: [op(ed, "gelu", m["x"], approximate="tanh")],
            _sample_gelu,
            {"memory": "-", "kernels": "-"},
            "0.5 x (1 + tanh(c (x + 0.044715 x^3))) -> gelu(x, approximate='tanh') (GPT-2 gelu_new)",
            pre=_gelu_pre,
        ),
        Rule(
            "gqa_into_sdpa",
            "fusion",
            (P("sdpa", V("q"), rep("k", "ek", "k2"), rep("v", "ev", "v2"), variadic=True),),
            _gqa,
            _sample_gqa,
            {"memory": "-", "peak_memory": "-", "kernels": "-"},
            "sdpa(q, repeat_kv(k), repeat_kv(v)) -> sdpa(q, k, v, enable_gqa=True)",
            pre=_gqa_pre,
        ),
        Rule(
            "fuse_norm_prologue",
            "fusion",
            (P(_NORMS, variadic=True),),
            lambda ed, m: [_fuse_pair(ed, m.graph, _need(m, max_fuse), m.root_node())],
            _sample_prologue,
            {"memory": "-", "kernels": "-"},
            "norm(f(a, b)) -> fused[f; norm] for an element-wise f used only by the norm",
            pre=lambda m: _norm_producer(m, max_fuse) is not None,
            extra_nodes=lambda m: [_need(m, max_fuse).id],
        ),
    ]
