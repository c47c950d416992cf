"""Inference folding rules: batch norm into convolutions, norm gains into the next weight, and
weights padded to an aligned column count.

The folded weights are computed in the graph from the parameters (``mul``/``add``/``concat`` on
params), so the rewrite is exact as written; a deployment precomputes them once (constant
folding: `rewrite.to_module` does, and a profile with ``fold_weights`` charges them nothing).
"""

from __future__ import annotations

import numpy as np

from rewrite.builder import GraphBuilder
from rewrite.ir import ConstArray, Graph, Value
from rewrite.rules._helpers import op
from rewrite.rules.base import Dims, Rule
from rewrite.rules.pattern import Match, P, V

__all__ = ["PAD_COLUMNS", "folding_rules"]

#: `pad_linear_columns` pads a weight's rows (the product's output columns) to a multiple of this.
PAD_COLUMNS = 64


def _sample_conv_bn(d: Dims) -> Graph:
    b = GraphBuilder("conv_bn")
    c, o, hw = d(), d(), d() + 1
    x = b.input("x", (1, c, hw, hw))
    y = op(b, "conv2d", x, b.param("w", (o, c, 2, 2)), padding=(1, 1))
    bn = op(b, "batch_norm", y, *(b.param(n, (o,)) for n in ("g", "beta", "mu", "var")), eps=1e-5)
    return b.build([op(b, "relu", bn)])


def _fold_conv_bn(ed, m: Match) -> list[Value]:  # noqa: ANN001
    conv, bn = m.node("conv"), m.root_node()
    g, beta, mu, var = bn.inputs[1:]
    s = op(
        ed,
        "mul",
        g,
        op(ed, "rsqrt", op(ed, "add", var, ed.const(ConstArray(bn.attrs["eps"], "float64")))),
    )
    o = conv.in_types[1].shape[0]
    w = op(ed, "mul", conv.inputs[1], op(ed, "reshape", s, shape=(o, 1, 1, 1)))
    shift = op(ed, "sub", conv.inputs[2], mu) if len(conv.inputs) == 3 else op(ed, "neg", mu)
    bias = op(ed, "add", beta, op(ed, "mul", shift, s))
    return [op(ed, "conv2d", conv.inputs[0], w, bias, **dict(conv.attrs))]


def _sample_norm_linear(d: Dims, kind: str) -> Graph:
    b = GraphBuilder(kind)
    s, k, n = d(), d(), d()
    x = b.input("x", (1, s, k))
    if kind == "rms":
        y = op(b, "rms_norm", x, b.param("g", (k,)), normalized_shape=(k,))
        return b.build([op(b, "linear", y, b.param("w", (n, k)))])
    y = op(b, "layer_norm", x, b.param("g", (k,)), b.param("beta", (k,)), normalized_shape=(k,))
    if kind == "ln":
        return b.build([op(b, "linear", y, b.param("w", (n, k)), b.param("c", (n,)))])
    y = op(b, "reshape", y, shape=(s, k))
    return b.build([op(b, "addmm", b.param("c", (n,)), y, b.param("w", (k, n)))])


def _bare_norm(ed, node) -> Value:  # noqa: ANN001
    attrs = dict(node.attrs)
    return op(ed, node.op, node.inputs[0], **attrs)


def _fold_ln_linear(ed, m: Match) -> list[Value]:  # noqa: ANN001
    ln, lin = m.node("n"), m.root_node()
    w = lin.inputs[1]
    bias = op(ed, "linear", ln.inputs[2], w)
    if len(lin.inputs) == 3:
        bias = op(ed, "add", bias, lin.inputs[2])
    return [op(ed, "linear", _bare_norm(ed, ln), op(ed, "mul", w, ln.inputs[1]), bias)]


def _fold_rms_linear(ed, m: Match) -> list[Value]:  # noqa: ANN001
    rn, lin = m.node("n"), m.root_node()
    ins = [_bare_norm(ed, rn), op(ed, "mul", lin.inputs[1], rn.inputs[1]), *lin.inputs[2:]]
    return [op(ed, "linear", *ins)]


def _fold_ln_addmm(ed, m: Match) -> list[Value]:  # noqa: ANN001
    ln = m.node("n")
    k, n = m.shape("w")
    g, beta = ln.inputs[1], ln.inputs[2]
    w = op(ed, "mul", m["w"], op(ed, "reshape", g, shape=(k, 1)))
    shift = op(
        ed, "reshape", op(ed, "mm", op(ed, "reshape", beta, shape=(1, k)), m["w"]), shape=(n,)
    )
    bias = op(ed, "add", m["c"], shift)
    x = op(ed, "reshape", _bare_norm(ed, ln), shape=m.node("r").types[0].shape)
    return [op(ed, "addmm", bias, x, w)]


def _affine(m: Match, n_inputs: int) -> bool:
    node = m.node("n")
    return len(node.inputs) == n_inputs and len(node.attrs["normalized_shape"]) == 1


def _sample_pad(d: Dims) -> Graph:
    b = GraphBuilder("pad_linear")
    s, k, n = d(), d(), d()
    x = b.input("x", (1, s, k))
    y = op(b, "linear", x, b.param("w", (n, k)), b.param("c", (n,)))
    return b.build([op(b, "tanh", y)])


def _pad_linear(ed, m: Match) -> list[Value]:  # noqa: ANN001
    lin = m.root_node()
    n, k = lin.in_types[1].shape
    pad, dtype = -n % PAD_COLUMNS, lin.in_types[1].dtype
    zeros = np.zeros((pad, k), np.float32)
    w = op(ed, "concat", lin.inputs[1], ed.const(ConstArray(zeros, dtype)), dim=0)
    ins = [lin.inputs[0], w]
    if len(lin.inputs) == 3:
        bias = ed.const(ConstArray(np.zeros(pad, np.float32), lin.in_types[2].dtype))
        ins.append(op(ed, "concat", lin.inputs[2], bias, dim=0))
    y = op(ed, "linear", *ins)
    return [op(ed, "slice", y, dim=lin.types[0].rank - 1, start=0, end=n, step=1)]


def _pad_ok(m: Match) -> bool:
    """An unaligned product whose weight (and bias) are weights: the padding folds away."""
    lin = m.root_node()
    return lin.in_types[1].shape[0] % PAD_COLUMNS != 0 and all(
        m.graph.node(v.node).op in ("param", "const") for v in lin.inputs[1:]
    )


def folding_rules() -> list[Rule]:
    """The inference-folding family."""
    return [
        Rule(
            "fold_conv_batch_norm",
            "folding",
            (P("batch_norm", P("conv2d", variadic=True, name="conv"), variadic=True),),
            _fold_conv_bn,
            _sample_conv_bn,
            {"compute": "-", "memory": "-", "kernels": "-"},
            "batch_norm(conv(x, W, b)) -> conv(x, W * s, beta + (b - mu) * s), s = g / sqrt(var + eps)",
            pre=lambda m: m.node("conv").attrs["groups"] == 1,
        ),
        Rule(
            "fold_layer_norm_gain_linear",
            "folding",
            (P("linear", P("layer_norm", variadic=True, name="n"), variadic=True),),
            _fold_ln_linear,
            lambda d: _sample_norm_linear(d, "ln"),
            {"compute": "-", "memory": "-"},
            "linear(layer_norm(x, g, beta), W, c) -> linear(layer_norm(x), W diag(g), W beta + c)",
            pre=lambda m: _affine(m, 3),
            exclusive=False,
        ),
        Rule(
            "fold_layer_norm_gain_addmm",
            "folding",
            (
                P(
                    "addmm",
                    V("c"),
                    P("reshape", P("layer_norm", variadic=True, name="n"), name="r"),
                    V("w"),
                ),
            ),
            _fold_ln_addmm,
            lambda d: _sample_norm_linear(d, "ln_addmm"),
            {"compute": "-", "memory": "-"},
            "addmm(c, reshape(layer_norm(x, g, beta)), W) -> addmm(c + beta W, reshape(layer_norm(x)), diag(g) W)",
            pre=lambda m: _affine(m, 3) and m.type("c").rank == 1,
            exclusive=False,
        ),
        Rule(
            "pad_linear_columns",
            "folding",
            (P("linear", variadic=True),),
            _pad_linear,
            _sample_pad,
            {"compute": "~", "peak_memory": "+"},
            f"linear(x, W, b) -> linear(x, [W; 0], [b; 0])[..., :n], the n rows of W padded to a "
            f"multiple of {PAD_COLUMNS} (an aligned GEMM; GPT-2's 50257-word head)",
            pre=_pad_ok,
        ),
        Rule(
            "fold_rms_norm_gain_linear",
            "folding",
            (P("linear", P("rms_norm", variadic=True, name="n"), variadic=True),),
            _fold_rms_linear,
            lambda d: _sample_norm_linear(d, "rms"),
            {"compute": "-", "memory": "-"},
            "linear(rms_norm(x, g), W) -> linear(rms_norm(x), W diag(g))",
            pre=lambda m: _affine(m, 2),
            exclusive=False,
        ),
    ]
