"""Merging rules: parallel products sharing an input into one product plus a split, and back."""

from __future__ import annotations

from rewrite.builder import GraphBuilder
from rewrite.ir import Graph
from rewrite.rules._helpers import op, outs
from rewrite.rules.base import Dims, Rule
from rewrite.rules.pattern import Match, P, V

__all__ = ["merging_rules"]

_TRADES = {"kernels": "-", "memory": "~", "peak_memory": "+"}


def _sample(d: Dims, kind: str) -> Graph:
    b = GraphBuilder(kind)
    s, k, n1, n2 = d(), d(), d(), d()
    if kind == "linear":
        x = b.input("x", (1, s, k))
        ys = [
            op(b, "linear", x, b.param(f"w{i}", (n, k)), b.param(f"b{i}", (n,)))
            for i, n in enumerate((n1, n2))
        ]
    elif kind == "mm":
        x = b.input("x", (s, k))
        ys = [op(b, "mm", x, b.param(f"w{i}", (k, n))) for i, n in enumerate((n1, n2))]
    elif kind == "addmm":
        x = b.input("x", (s, k))
        ys = [
            op(b, "addmm", b.param(f"b{i}", (n,)), x, b.param(f"w{i}", (k, n)))
            for i, n in enumerate((n1, n2))
        ]
    elif kind == "split_linear":
        x = b.input("x", (1, s, k))
        y = op(b, "linear", x, b.param("w", (n1 + n2, k)), b.param("b", (n1 + n2,)))
        ys = list(outs(b, "split", y, sizes=(n1, n2), dim=2))
    else:  # split of a reshaped addmm, as GPT-2's fused QKV projection
        x = b.input("x", (s, k))
        y = op(b, "addmm", b.param("b", (n1 + n2,)), x, b.param("w", (k, n1 + n2)))
        ys = list(
            outs(b, "split", op(b, "reshape", y, shape=(1, s, n1 + n2)), sizes=(n1, n2), dim=2)
        )
    return b.build([op(b, "tanh", ys[0]), ys[1]])


def _merge_linear(ed, m: Match) -> list:  # noqa: ANN001
    a, c = m.root_node(0), m.root_node(1)
    n1, n2 = a.types[0].shape[-1], c.types[0].shape[-1]
    w = op(ed, "concat", a.inputs[1], c.inputs[1], dim=0)
    ins = [a.inputs[0], w]
    if len(a.inputs) == 3:
        ins.append(op(ed, "concat", a.inputs[2], c.inputs[2], dim=0))
    y = op(ed, "linear", *ins)
    return list(outs(ed, "split", y, sizes=(n1, n2), dim=a.types[0].rank - 1))


def _merge_mm(ed, m: Match) -> list:  # noqa: ANN001
    n1, n2 = m.shape("w1")[1], m.shape("w2")[1]
    y = op(ed, "mm", m["x"], op(ed, "concat", m["w1"], m["w2"], dim=1))
    return list(outs(ed, "split", y, sizes=(n1, n2), dim=1))


def _merge_addmm(ed, m: Match) -> list:  # noqa: ANN001
    n1, n2 = m.shape("w1")[1], m.shape("w2")[1]
    y = op(
        ed,
        "addmm",
        op(ed, "concat", m["b1"], m["b2"], dim=0),
        m["x"],
        op(ed, "concat", m["w1"], m["w2"], dim=1),
    )
    return list(outs(ed, "split", y, sizes=(n1, n2), dim=1))


def _pieces(sizes: tuple[int, ...]) -> list[tuple[int, int]]:
    out, start = [], 0
    for s in sizes:
        out.append((start, start + s))
        start += s
    return out


def _unmerge_linear(ed, m: Match) -> list:  # noqa: ANN001
    lin = m.node("y")
    x, w = lin.inputs[0], lin.inputs[1]
    res = []
    for lo, hi in _pieces(tuple(m.root_node().attrs["sizes"])):
        ins = [x, op(ed, "slice", w, dim=0, start=lo, end=hi)]
        if len(lin.inputs) == 3:
            ins.append(op(ed, "slice", lin.inputs[2], dim=0, start=lo, end=hi))
        res.append(op(ed, "linear", *ins))
    return res


def _unmerge_addmm(ed, m: Match) -> list:  # noqa: ANN001
    lead = m.root_node().in_types[0].shape[:-1]
    res = []
    for lo, hi in _pieces(tuple(m.root_node().attrs["sizes"])):
        y = op(
            ed,
            "addmm",
            op(ed, "slice", m["b"], dim=0, start=lo, end=hi),
            m["x"],
            op(ed, "slice", m["w"], dim=1, start=lo, end=hi),
        )
        res.append(op(ed, "reshape", y, shape=(*lead, hi - lo)))
    return res


def _last_dim(m: Match) -> bool:
    s = m.root_node()
    return s.attrs["dim"] == s.in_types[0].rank - 1


def _addmm_reshape_ok(m: Match) -> bool:
    if not _last_dim(m) or m.shape("b") != (m.shape("w")[1],):
        return False
    r = m.node("r")
    return (
        r.types[0].shape[-1] == r.in_types[0].shape[-1] and r.types[0].numel == r.in_types[0].numel
    )


def merging_rules() -> list[Rule]:
    """The merging family."""
    return [
        Rule(
            "merge_parallel_linear",
            "merging",
            (
                P("linear", V("x"), V("w1"), variadic=True),
                P("linear", V("x"), V("w2"), variadic=True),
            ),
            _merge_linear,
            lambda d: _sample(d, "linear"),
            dict(_TRADES),
            "linear(x, W1), linear(x, W2) -> split(linear(x, [W1; W2])) (Q/K/V, gate/up)",
            pre=lambda m: _same_x(m),
            symmetric=True,
            inverse="unmerge_split_linear",
            direction="forward",
        ),
        Rule(
            "merge_parallel_mm",
            "merging",
            (P("mm", V("x"), V("w1")), P("mm", V("x"), V("w2"))),
            _merge_mm,
            lambda d: _sample(d, "mm"),
            dict(_TRADES),
            "x W1, x W2 -> split(x [W1 | W2])",
            symmetric=True,
        ),
        Rule(
            "merge_parallel_addmm",
            "merging",
            (P("addmm", V("b1"), V("x"), V("w1")), P("addmm", V("b2"), V("x"), V("w2"))),
            _merge_addmm,
            lambda d: _sample(d, "addmm"),
            dict(_TRADES),
            "b1 + x W1, b2 + x W2 -> split([b1 | b2] + x [W1 | W2])",
            pre=lambda m: m.type("b1").rank == 1 and m.type("b2").rank == 1,
            symmetric=True,
            inverse="unmerge_split_addmm",
            direction="forward",
        ),
        Rule(
            "unmerge_split_linear",
            "merging",
            (P("split", P("linear", variadic=True, name="y")),),
            _unmerge_linear,
            lambda d: _sample(d, "split_linear"),
            {"kernels": "+", "memory": "~", "peak_memory": "-"},
            "split(linear(x, W)) -> linear(x, W[i]) per piece",
            pre=_last_dim,
            multi_output=True,
            inverse="merge_parallel_linear",
            direction="backward",
        ),
        Rule(
            "unmerge_split_addmm",
            "merging",
            (P("split", P("reshape", P("addmm", V("b"), V("x"), V("w")), name="r")),),
            _unmerge_addmm,
            lambda d: _sample(d, "split_addmm"),
            {"kernels": "+", "memory": "~", "peak_memory": "-"},
            "split(reshape(b + x W)) -> reshape(b[i] + x W[:, i]) per piece (GPT-2 c_attn)",
            pre=_addmm_reshape_ok,
            multi_output=True,
            inverse="merge_parallel_addmm",
            direction="backward",
        ),
    ]


def _same_x(m: Match) -> bool:
    a, c = m.root_node(0), m.root_node(1)
    return a.inputs[0] == c.inputs[0] and len(a.inputs) == len(c.inputs) and a.types[0].rank >= 1
