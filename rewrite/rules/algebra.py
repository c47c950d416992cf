"""Algebra rules: associativity, distributivity, transposes, views, scalars and CSE."""

from __future__ import annotations

from rewrite.builder import GraphBuilder
from rewrite.ir import Graph
from rewrite.rules._helpers import EW_BINARY, EW_UNARY, MATMULS, is_scalar_const, op
from rewrite.rules.base import Dims, Rule
from rewrite.rules.pattern import Match, P, V

__all__ = ["algebra_rules"]


def _mm3(d: Dims, right: bool) -> Graph:
    b = GraphBuilder("chain")
    m, k, n, o = d(), d(), d(), d()
    a, w1, w2 = b.input("a", (m, k)), b.param("w1", (k, n)), b.param("w2", (n, o))
    y = op(b, "mm", a, op(b, "mm", w1, w2)) if right else op(b, "mm", op(b, "mm", a, w1), w2)
    return b.build([y])


def _factor(d: Dims, left: bool, distributed: bool) -> Graph:
    b = GraphBuilder("factor")
    m, k, n = d(), d(), d()
    if left:
        a, x, y = b.input("a", (m, k)), b.param("x", (k, n)), b.param("y", (k, n))
        out = (
            op(b, "mm", a, op(b, "add", x, y))
            if distributed
            else op(b, "add", op(b, "mm", a, x), op(b, "mm", a, y))
        )
    else:
        a, x, y = b.input("a", (k, n)), b.param("x", (m, k)), b.param("y", (m, k))
        out = op(b, "add", op(b, "mm", x, a), op(b, "mm", y, a))
    return b.build([out])


def _transposes(d: Dims, inner: bool) -> Graph:
    b = GraphBuilder("tr")
    m, k, n = d(), d(), d()
    a, w = b.input("a", (m, k)), b.param("w", (k, n))
    if inner:
        y = op(
            b, "mm", op(b, "transpose", w, dim0=0, dim1=1), op(b, "transpose", a, dim0=0, dim1=1)
        )
    else:
        y = op(b, "transpose", op(b, "mm", a, w), dim0=0, dim1=1)
    return b.build([y])


def _views(d: Dims, kind: str) -> Graph:
    b = GraphBuilder(kind)
    s0, s1, s2 = d(), d(), d()
    x = b.input("x", (s0, s1, s2))
    if kind == "tt":
        y = op(b, "transpose", op(b, "transpose", x, dim0=0, dim1=2), dim0=0, dim1=2)
    elif kind == "pp":
        y = op(b, "permute", op(b, "permute", x, dims=(1, 2, 0)), dims=(2, 0, 1))
        y = op(b, "permute", op(b, "permute", y, dims=(0, 2, 1)), dims=(1, 0, 2))
        y = op(b, "transpose", op(b, "permute", y, dims=(1, 2, 0)), dim0=0, dim1=1)
    elif kind == "rr":
        y = op(b, "reshape", op(b, "reshape", x, shape=(s0 * s1, s2)), shape=(s0, s1 * s2))
    else:
        y = op(b, "relu", op(b, "reshape", x, shape=(s0, s1, s2)))
    return b.build([y])


def _scalar_mm(d: Dims, inside: bool) -> Graph:
    b = GraphBuilder("scalar")
    m, k, n = d(), d(), d()
    a, w = b.input("a", (m, k)), b.param("w", (k, n))
    s = b.const(0.125, dtype="float32")
    y = op(b, "mm", op(b, "mul", a, s), w) if inside else op(b, "mul", op(b, "mm", a, w), s)
    return b.build([y])


def _cse(d: Dims, binary: bool) -> Graph:
    b = GraphBuilder("cse")
    x, y = b.input("x", (d(), d())), b.param("y", (1,))
    if binary:
        u, v = op(b, "mul", x, y), op(b, "mul", x, y)
    else:
        u, v = op(b, "tanh", x), op(b, "tanh", x)
    return b.build([op(b, "sub", u, op(b, "exp", v))])


def _split_concat(d: Dims) -> Graph:
    b = GraphBuilder("split_concat")
    n1, n2, m = d(), d(), d()
    x, y = b.input("x", (m, n1)), b.input("y", (m, n2))
    p, q = b.add("split", [op(b, "concat", x, y, dim=1)], {"sizes": (n1, n2), "dim": 1}).outs
    return b.build([op(b, "tanh", p), q])


def _same_node(m: Match) -> bool:
    a, c = m.node("a"), m.node("b")
    return a.op == c.op and a.attrs == c.attrs and a.inputs == c.inputs


def _split_concat_pre(m: Match) -> bool:
    s, c = m.root_node(), m.node("cat")
    sizes = tuple(t.shape[c.attrs["dim"]] for t in c.in_types)
    return s.attrs["dim"] == c.attrs["dim"] and tuple(s.attrs["sizes"]) == sizes


def _as_perm(attrs, rank: int) -> tuple[int, ...]:  # noqa: ANN001
    if "dims" in attrs:
        return tuple(attrs["dims"])
    p = list(range(rank))
    p[attrs["dim0"]], p[attrs["dim1"]] = p[attrs["dim1"]], p[attrs["dim0"]]
    return tuple(p)


def _perm_compose(m: Match) -> tuple[int, ...]:
    rank = m.type("x").rank
    p, q = _as_perm(m.node("inner").attrs, rank), _as_perm(m.root_node().attrs, rank)
    return tuple(p[i] for i in q)


def _transposed(ed, v):  # noqa: ANN001, ANN202
    return op(ed, "transpose", v, dim0=0, dim1=1)


def _scalar_move(ed, m: Match):  # noqa: ANN001, ANN202
    a, w, s = m["a"], m["b"], m["s"]
    if m.type("a").numel <= m.type("b").numel:
        return [op(ed, m.node("mmv").op, op(ed, "mul", a, s), w)]
    return [op(ed, m.node("mmv").op, a, op(ed, "mul", w, s))]


def _sample_addmm(d: Dims, linear: bool) -> Graph:
    b = GraphBuilder("addmm")
    m, k, n = d(), d(), d()
    x = b.input("x", (m, k))
    if linear:
        return b.build([op(b, "linear", x, b.param("w", (n, k)), b.param("b", (n,)))])
    return b.build([op(b, "addmm", b.param("b", (n,)), x, b.param("w", (k, n)))])


def _canonical_rules() -> list[Rule]:
    return [
        Rule(
            "addmm_as_linear",
            "algebra",
            (P("addmm", V("b"), V("x"), V("w")),),
            lambda ed, m: [op(ed, "linear", m["x"], _transposed(ed, m["w"]), m["b"])],
            lambda d: _sample_addmm(d, False),
            {"kernels": "~", "memory": "~"},
            "addmm(b, x, W) -> linear(x, W^T, b) (one product op for the linear-only rules)",
            pre=lambda m: m.type("b").rank == 1,
            inverse="linear_as_addmm",
            direction="forward",
        ),
        Rule(
            "linear_as_addmm",
            "algebra",
            (P("linear", V("x"), V("w"), V("b")),),
            lambda ed, m: [op(ed, "addmm", m["b"], m["x"], _transposed(ed, m["w"]))],
            lambda d: _sample_addmm(d, True),
            {"kernels": "~", "memory": "~"},
            "linear(x, W, b) -> addmm(b, x, W^T) (2-d x)",
            pre=lambda m: m.type("x").rank == 2,
            inverse="addmm_as_linear",
            direction="backward",
        ),
    ]


def algebra_rules() -> list[Rule]:
    """The algebra family."""
    return [*_matmul_rules(), *_view_rules(), *_scalar_cse_rules(), *_canonical_rules()]


def _matmul_rules() -> list[Rule]:
    mm, T = ("mm",), {"dim0": 0, "dim1": 1}
    return [
        Rule(
            "matmul_assoc_left_to_right",
            "algebra",
            (P(mm, P(mm, V("a"), V("b")), V("c")),),
            lambda ed, m: [op(ed, "mm", m["a"], op(ed, "mm", m["b"], m["c"]))],
            lambda d: _mm3(d, False),
            {"compute": "~", "peak_memory": "~"},
            "(A B) C -> A (B C)",
            inverse="matmul_assoc_right_to_left",
            direction="forward",
        ),
        Rule(
            "matmul_assoc_right_to_left",
            "algebra",
            (P(mm, V("a"), P(mm, V("b"), V("c"))),),
            lambda ed, m: [op(ed, "mm", op(ed, "mm", m["a"], m["b"]), m["c"])],
            lambda d: _mm3(d, True),
            {"compute": "~", "peak_memory": "~"},
            "A (B C) -> (A B) C",
            inverse="matmul_assoc_left_to_right",
            direction="backward",
        ),
        Rule(
            "matmul_factor_left",
            "algebra",
            (P("add", P(mm, V("a"), V("b")), P(mm, V("a"), V("c"))),),
            lambda ed, m: [op(ed, "mm", m["a"], op(ed, "add", m["b"], m["c"]))],
            lambda d: _factor(d, True, False),
            {"compute": "-", "kernels": "~"},
            "A B + A C -> A (B + C)",
            inverse="matmul_distribute_left",
            direction="forward",
        ),
        Rule(
            "matmul_distribute_left",
            "algebra",
            (P(mm, V("a"), P("add", V("b"), V("c"))),),
            lambda ed, m: [
                op(ed, "add", op(ed, "mm", m["a"], m["b"]), op(ed, "mm", m["a"], m["c"]))
            ],
            lambda d: _factor(d, True, True),
            {"compute": "+", "kernels": "+"},
            "A (B + C) -> A B + A C",
            inverse="matmul_factor_left",
            direction="backward",
        ),
        Rule(
            "matmul_factor_right",
            "algebra",
            (P("add", P(mm, V("b"), V("a")), P(mm, V("c"), V("a"))),),
            lambda ed, m: [op(ed, "mm", op(ed, "add", m["b"], m["c"]), m["a"])],
            lambda d: _factor(d, False, False),
            {"compute": "-", "kernels": "~"},
            "B A + C A -> (B + C) A",
        ),
        Rule(
            "transpose_of_matmul",
            "algebra",
            (P("transpose", P(mm, V("a"), V("b")), attrs=T),),
            lambda ed, m: [op(ed, "mm", _transposed(ed, m["b"]), _transposed(ed, m["a"]))],
            lambda d: _transposes(d, False),
            {"memory": "~", "kernels": "+"},
            "(A B)^T -> B^T A^T",
            inverse="matmul_of_transposes",
            direction="forward",
        ),
        Rule(
            "matmul_of_transposes",
            "algebra",
            (P(mm, P("transpose", V("b"), attrs=T), P("transpose", V("a"), attrs=T)),),
            lambda ed, m: [_transposed(ed, op(ed, "mm", m["a"], m["b"]))],
            lambda d: _transposes(d, True),
            {"memory": "~", "kernels": "-"},
            "B^T A^T -> (A B)^T",
            inverse="transpose_of_matmul",
            direction="backward",
        ),
    ]


def _view_rules() -> list[Rule]:
    return [
        Rule(
            "transpose_transpose",
            "algebra",
            (P("transpose", P("transpose", V("x"), name="inner")),),
            lambda ed, m: [m["x"]],
            lambda d: _views(d, "tt"),
            {"memory": "-", "kernels": "-"},
            "transpose(transpose(x)) -> x (same dims)",
            pre=lambda m: dict(m.node("inner").attrs) == dict(m.root_node().attrs),
        ),
        Rule(
            "fold_permutes",
            "algebra",
            (P(("permute", "transpose"), P(("permute", "transpose"), V("x"), name="inner")),),
            lambda ed, m: [
                m["x"]
                if _perm_compose(m) == tuple(range(len(_perm_compose(m))))
                else op(ed, "permute", m["x"], dims=_perm_compose(m))
            ],
            lambda d: _views(d, "pp"),
            {"memory": "-", "kernels": "-"},
            "permute/transpose of a permute/transpose -> one permute (or x)",
        ),
        Rule(
            "reshape_reshape",
            "algebra",
            (P("reshape", P("reshape", V("x"))),),
            lambda ed, m: [op(ed, "reshape", m["x"], shape=m.root_node().types[0].shape)],
            lambda d: _views(d, "rr"),
            {"kernels": "~", "memory": "~"},
            "reshape(reshape(x)) -> reshape(x)",
        ),
        Rule(
            "identity_view",
            "algebra",
            (P(("reshape", "expand"), V("x")),),
            lambda ed, m: [m["x"]],
            lambda d: _views(d, "id"),
            {"kernels": "~", "memory": "~"},
            "reshape/expand of x to its own shape -> x",
            pre=lambda m: m.type("x") == m.root_node().types[0],
        ),
    ]


def _scalar_cse_rules() -> list[Rule]:
    return [
        Rule(
            "scalar_into_smaller_operand",
            "algebra",
            (P("mul", P(MATMULS, V("a"), V("b"), name="mmv"), V("s")),),
            _scalar_move,
            lambda d: _scalar_mm(d, False),
            {"compute": "-", "memory": "-"},
            "(A B) * s -> (s A) B or A (s B), whichever operand is smaller",
            pre=lambda m: is_scalar_const(m.graph, m["s"]) and m.type("s").rank == 0,
            inverse="scalar_out_of_matmul",
            direction="forward",
        ),
        Rule(
            "scalar_out_of_matmul",
            "algebra",
            (P(MATMULS, P("mul", V("a"), V("s")), V("b"), name="mmv"),),
            lambda ed, m: [op(ed, "mul", op(ed, m.node("mmv").op, m["a"], m["b"]), m["s"])],
            lambda d: _scalar_mm(d, True),
            {"compute": "~", "memory": "~"},
            "(s A) B -> (A B) * s",
            pre=lambda m: is_scalar_const(m.graph, m["s"]) and m.type("s").rank == 0,
            inverse="scalar_into_smaller_operand",
            direction="backward",
        ),
        Rule(
            "cse_unary",
            "algebra",
            (P(EW_UNARY, V("x"), name="a"), P(EW_UNARY, V("x"), name="b")),
            lambda ed, m: [m["a"], m["a"]],
            lambda d: _cse(d, False),
            {"compute": "-", "kernels": "-", "peak_memory": "-"},
            "f(x), f(x) -> one f(x) (common subexpression)",
            pre=_same_node,
            symmetric=True,
        ),
        Rule(
            "cse_binary",
            "algebra",
            (P(EW_BINARY, V("x"), V("y"), name="a"), P(EW_BINARY, V("x"), V("y"), name="b")),
            lambda ed, m: [m["a"], m["a"]],
            lambda d: _cse(d, True),
            {"compute": "-", "kernels": "-", "peak_memory": "-"},
            "f(x, y), f(x, y) -> one f(x, y) (common subexpression)",
            pre=_same_node,
            symmetric=True,
        ),
        Rule(
            "split_of_concat",
            "algebra",
            (P("split", P("concat", variadic=True, name="cat")),),
            lambda ed, m: list(m.node("cat").inputs),
            lambda d: _split_concat(d),
            {"kernels": "-", "memory": "-"},
            "split(concat(x1..xk)) -> x1..xk (matching sizes and dim)",
            pre=_split_concat_pre,
            multi_output=True,
        ),
    ]
